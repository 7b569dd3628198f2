//! transformers' `CLIPTextModel`: CLIP's text tower alone, as the text encoder of Stable
//! Diffusion's pipelines keeps it (`text_encoder/`: a flat config of `model_type`
//! `clip_text_model`, weights under `text_model.`), with the prompts' tokenizer
//! (`tokenizer/`) beside it.

use super::config::ClipTextConfig;
use super::model::{TextTower, TowerOutput};
use crate::io::pretrained::{load_weights, read_config};
use crate::models::hf_config::Fields;
use crate::nn::Module;
use crate::{Error, Generator, Result, Tensor};
use std::path::Path;

pub struct ClipTextModel {
    text_model: TextTower,
    training: bool,
}

impl ClipTextModel {
    pub fn new(config: ClipTextConfig, gen: &mut Generator) -> Result<ClipTextModel> {
        Ok(ClipTextModel {
            text_model: TextTower::new(config, gen)?,
            training: true,
        })
    }

    /// From a `save_pretrained` folder of a `CLIPTextModel` (or a `CLIPModel`'s text side),
    /// every tensor required by name and shape.
    pub fn from_folder(dir: &Path) -> Result<ClipTextModel> {
        let json = read_config(dir)?;
        let f = Fields::new(&json, "CLIPTextModel");
        let in_dir = |e: Error| Error::format("CLIPTextModel", format!("{}: {e}", dir.display()));
        let text = match f.string("model_type") {
            Some("clip_text_model") | None => ClipTextConfig::read(&f),
            Some("clip") => ClipTextConfig::read(&f.nested("text_config", "CLIP text_config")?),
            Some(other) => Err(f.error(format!("model_type `{other}` is not a CLIP text model"))),
        }
        .map_err(in_dir)?;
        text.tower
            .block(text.causal)
            .check("CLIPTextModel")
            .map_err(in_dir)?;
        let model = ClipTextModel::new(text, &mut Generator::new(0))?;
        let mut weights = load_weights(dir)?;
        if weights.keys().any(|n| n.starts_with("text_model.")) {
            // A CLIPModel's file also holds the image side and the projections.
            weights.retain(|name, _| name.starts_with("text_model."));
        } else {
            // transformers 5 saves a CLIPTextModel's tensors without the prefix.
            weights = weights
                .into_iter()
                .map(|(n, t)| (format!("text_model.{n}"), t))
                .collect();
        }
        model.load_state_dict(&weights, true).map_err(in_dir)?;
        Ok(model)
    }

    pub fn config(&self) -> &ClipTextConfig {
        &self.text_model.config
    }

    /// Every position's states (`last_hidden_state`) and the pooled row of ids [B, T].
    pub fn run(&self, ids: &Tensor) -> Result<TowerOutput> {
        self.text_model.run(ids)
    }
}

impl Module for ClipTextModel {
    /// The states of every position: what a diffusion model's cross-attention reads.
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.run(ids)?.last_hidden_state)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("text_model".into(), &self.text_model)]
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.text_model]
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "CLIPTextModel".into()
    }
}
