//! transformers' `CLIPTextModel`: CLIP's text tower alone, as the text encoder of Stable
//! Diffusion's pipelines keeps it (`text_encoder/`: a flat config of `model_type`
//! `clip_text_model`, weights under `text_model.`), with the prompts' tokenizer
//! (`tokenizer/`) beside it; and `CLIPTextModelWithProjection` (SDXL's `text_encoder_2/`),
//! which adds `text_projection` over the pooled row.

use super::config::ClipTextConfig;
use super::model::{TextTower, TowerOutput};
use crate::io::pretrained::{load_weights, read_config};
use crate::models::hf_config::Fields;
use crate::nn::{Linear, Module};
use crate::{Error, Generator, Result, Tensor};
use std::path::Path;

pub struct ClipTextModel {
    text_model: TextTower,
    /// `CLIPTextModelWithProjection`'s projection of the pooled row (no bias).
    text_projection: Option<Linear>,
    training: bool,
}

/// What a text encoder gives a pipeline.
pub struct TextEncoding {
    /// Every layer's states as `TowerOutput::hidden_states` has them, then the final norm's.
    pub tower: TowerOutput,
    /// The pooled row, through `text_projection` where the model has one (`text_embeds`).
    pub text_embeds: Tensor,
}

impl ClipTextModel {
    /// A tower of `config`; with `projection` a `CLIPTextModelWithProjection` of that width.
    pub fn new(
        config: ClipTextConfig,
        projection: Option<usize>,
        gen: &mut Generator,
    ) -> Result<ClipTextModel> {
        let width = config.tower.hidden_size;
        Ok(ClipTextModel {
            text_model: TextTower::new(config, gen)?,
            text_projection: projection
                .map(|p| Linear::new(width, p, false, gen))
                .transpose()?,
            training: true,
        })
    }

    /// From a `save_pretrained` folder of a `CLIPTextModel`, a `CLIPTextModelWithProjection`
    /// (named so in `architectures`) or a `CLIPModel`'s text side, every tensor required by
    /// name and shape.
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
        let projected = json
            .get("architectures")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "CLIPTextModelWithProjection"));
        let projection = match projected {
            true => Some(f.size("projection_dim", 512).map_err(in_dir)?),
            false => None,
        };
        let model = ClipTextModel::new(text, projection, &mut Generator::new(0))?;
        let mut weights = load_weights(dir)?;
        if weights.keys().any(|n| n.starts_with("text_model.")) {
            // A CLIPModel's file also holds the image side and the projections.
            weights.retain(|name, _| {
                name.starts_with("text_model.") || (projected && name == "text_projection.weight")
            });
        } else {
            // transformers 5 saves a CLIPTextModel's tensors without the prefix.
            weights = weights
                .into_iter()
                .map(|(n, t)| match n.as_str() {
                    "text_projection.weight" => (n, t),
                    _ => (format!("text_model.{n}"), t),
                })
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

    /// `run`, and the pooled row projected where the model has a projection.
    pub fn encode(&self, ids: &Tensor) -> Result<TextEncoding> {
        let tower = self.run(ids)?;
        let text_embeds = match &self.text_projection {
            Some(p) => p.forward(&tower.pooler_output)?,
            None => tower.pooler_output.clone(),
        };
        Ok(TextEncoding { tower, text_embeds })
    }

    /// Sets the embeddings of ids `first..first + n` to `rows` [n, width] (textual inversion).
    pub fn set_token_embeddings(&mut self, first: usize, rows: &Tensor) -> Result<()> {
        self.text_model.set_token_embeddings(first, rows)
    }

    /// Whether this is a `CLIPTextModelWithProjection`.
    pub fn has_projection(&self) -> bool {
        self.text_projection.is_some()
    }

    /// The width of `text_embeds`.
    pub fn embeds_width(&self) -> usize {
        self.text_projection
            .as_ref()
            .map_or(self.config().tower.hidden_size, |p| p.out_features())
    }
}

impl Module for ClipTextModel {
    /// The states of every position: what a diffusion model's cross-attention reads.
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.run(ids)?.last_hidden_state)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![("text_model".into(), &self.text_model)];
        if let Some(p) = &self.text_projection {
            c.push(("text_projection".into(), p));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.text_model];
        if let Some(p) = &mut self.text_projection {
            c.push(p);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        match self.text_projection {
            Some(_) => "CLIPTextModelWithProjection".into(),
            None => "CLIPTextModel".into(),
        }
    }
}
