//! The prompt side of a Stable Diffusion pipeline: its CLIP text encoders with their tokenizers,
//! and how their outputs become the UNet's conditioning.
//!
//! - SD 1.x and 2.x: the one encoder's last states (after the final norm).
//! - SDXL (diffusers' `StableDiffusionXLPipeline.encode_prompt`): each encoder's second to
//!   last layer (before the final norm), side by side on the width, and the projected pooled
//!   row of the first encoder that has a projection (`text_encoder_2`, a
//!   `CLIPTextModelWithProjection`) for the UNet's added conditioning.

use super::textual_inversion::{spell_out, token_names};
use crate::models::clip::{tokenizer as clip_tokenizer, ClipTextModel};
use crate::models::prompt_tokenizer::{Padding, PromptTokenizer};
use crate::nn::Module;
use crate::text::AddedToken;
use crate::{Device, Error, Result, Tensor};
use std::path::Path;

/// One text encoder of a pipeline and the tokenizer beside it.
pub struct PromptEncoder {
    /// The pipeline's name for it (`text_encoder`, `text_encoder_2`).
    pub name: String,
    pub tokenizer: PromptTokenizer,
    pub model: ClipTextModel,
    /// Textual-inversion tokens and how many vectors each has.
    pub inversions: Vec<(String, usize)>,
}

impl PromptEncoder {
    /// `<dir>/<name>/` and the tokenizer folder beside it (`tokenizer`, `tokenizer_2`).
    pub fn from_folder(dir: &Path, name: &str, tokenizer: &str) -> Result<PromptEncoder> {
        let model = ClipTextModel::from_folder(&super::pipeline::component(dir, name)?)?;
        let context = model.config().max_position_embeddings;
        let tok_dir = super::pipeline::component(dir, tokenizer)?;
        let mut tokenizer = clip_tokenizer::from_folder(&tok_dir, context)?.ok_or_else(|| {
            Error::format(
                "StableDiffusionPipeline",
                format!(
                    "{}: no tokenizer.json or vocab.json + merges.txt",
                    tok_dir.display()
                ),
            )
        })?;
        // diffusers pads every prompt to the encoder's context.
        tokenizer.padding = Padding::MaxLength;
        Ok(PromptEncoder {
            name: name.to_string(),
            tokenizer,
            model,
            inversions: Vec::new(),
        })
    }

    /// Whether `token` with vectors [n, width] can be added: the encoder's width, and none of
    /// its n token names in the tokenizer yet.
    pub fn check_inversion(&self, token: &str, vectors: &Tensor) -> Result<()> {
        let width = vectors.shape()[1];
        if width != self.width() {
            return Err(Error::invalid(
                "textual inversion",
                format!(
                    "`{token}` has vectors {width} wide and {} takes {}: an embedding for another base model",
                    self.name,
                    self.width()
                ),
            ));
        }
        let tokenizer = &self.tokenizer.tokenizer;
        let names = token_names(token, vectors.shape()[0]);
        match names.iter().find(|t| tokenizer.token_to_id(t).is_some()) {
            Some(taken) => Err(Error::invalid(
                "textual inversion",
                format!("`{taken}` is already a token of {}'s tokenizer", self.name),
            )),
            None => Ok(()),
        }
    }

    /// Adds `token` with its learned vectors [n, width] (diffusers' `load_textual_inversion`):
    /// n new tokens after the tokenizer's last id, and their rows in the token embedding.
    pub fn add_inversion(&mut self, token: &str, vectors: &Tensor) -> Result<()> {
        self.check_inversion(token, vectors)?;
        let n = vectors.shape()[0];
        let names = token_names(token, n);
        let tokenizer = &self.tokenizer.tokenizer;
        let first = tokenizer.vocab_size();
        let added = names
            .iter()
            .enumerate()
            .map(|(i, content)| AddedToken {
                id: (first + i) as u32,
                content: content.clone(),
                special: false,
                lstrip: false,
                rstrip: false,
                // transformers' add_tokens: matched on the normalized (lower-cased) text.
                normalized: true,
                single_word: false,
            })
            .collect();
        let extended = tokenizer.with_added_tokens(added)?;
        self.model.set_token_embeddings(first, vectors)?;
        self.tokenizer.tokenizer = extended;
        self.inversions.push((token.to_string(), n));
        Ok(())
    }

    /// `prompt` with its multi-vector tokens spelled out (diffusers' `maybe_convert_prompt`).
    fn converted(&self, prompt: &str) -> Result<String> {
        if self.inversions.iter().all(|(_, n)| *n < 2) {
            return Ok(prompt.to_string());
        }
        let tokenizer = &self.tokenizer.tokenizer;
        let ids = tokenizer.encode(prompt)?;
        Ok(spell_out(prompt, &self.inversions, |t| {
            tokenizer.token_to_id(t).is_some_and(|id| ids.contains(&id))
        }))
    }

    /// The width of the states this encoder gives the UNet.
    pub fn width(&self) -> usize {
        self.model.config().tower.hidden_size
    }
}

/// Which states of each encoder the UNet reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatesLayer {
    /// The last layer's, after the final norm (SD 1.x and 2.x).
    Last,
    /// The second to last layer's, before the final norm (SDXL).
    Penultimate,
}

/// Prompts as the UNet reads them.
pub struct Conditioning {
    /// [N, T, width]: the encoders' states side by side.
    pub states: Tensor,
    /// [N, P]: the projected pooled row (SDXL's `text_embeds`), where the pipeline uses one.
    pub pooled: Option<Tensor>,
}

impl Conditioning {
    /// Zeros of the same shapes (SDXL's unconditional input when no negative prompt is given
    /// and the pipeline sets `force_zeros_for_empty_prompt`).
    pub fn zeros_like(&self) -> Result<Conditioning> {
        Ok(Conditioning {
            states: Tensor::zeros_like(&self.states)?,
            pooled: self.pooled.as_ref().map(Tensor::zeros_like).transpose()?,
        })
    }

    /// `first` then `second` along the batch.
    pub fn cat(first: &Conditioning, second: &Conditioning) -> Result<Conditioning> {
        let pooled = match (&first.pooled, &second.pooled) {
            (Some(a), Some(b)) => Some(Tensor::cat(&[a.clone(), b.clone()], 0)?),
            _ => None,
        };
        Ok(Conditioning {
            states: Tensor::cat(&[first.states.clone(), second.states.clone()], 0)?,
            pooled,
        })
    }
}

/// A pipeline's text encoders (one for SD, two for SDXL) and the states it reads of them.
pub struct PromptEncoders {
    pub encoders: Vec<PromptEncoder>,
    pub layer: StatesLayer,
}

impl PromptEncoders {
    /// The width of the states side by side: the UNet's `cross_attention_dim`.
    pub fn width(&self) -> usize {
        self.encoders.iter().map(PromptEncoder::width).sum()
    }

    /// The pooled embedding's width, where the pipeline reads one (SDXL).
    pub fn pooled_width(&self) -> Option<usize> {
        match self.layer {
            StatesLayer::Last => None,
            StatesLayer::Penultimate => self
                .encoders
                .iter()
                .find(|e| e.model.has_projection())
                .map(|e| e.model.embeds_width()),
        }
    }

    /// Each encoder's slot in the naming of LoRA and textual-inversion files: 0 for the
    /// first, 1 for SDXL's second (a refiner's lone encoder is `text_encoder_2`).
    pub fn slots(&self) -> Vec<usize> {
        let lone_second = self.encoders.len() == 1 && self.encoders[0].name == "text_encoder_2";
        (0..self.encoders.len())
            .map(|i| if lone_second { 1 } else { i })
            .collect()
    }

    pub fn to_device(&self, device: Device) -> Result<()> {
        self.encoders
            .iter()
            .try_for_each(|e| e.model.to_device(device))
    }

    /// The conditioning of prompts, each padded to (and cut at, with one warning, as diffusers
    /// warns) each encoder's context.
    pub fn encode(&self, prompts: &[&str], device: Device) -> Result<Conditioning> {
        // Each encoder reads the prompts with its textual-inversion tokens spelled out.
        let mut converted = Vec::with_capacity(self.encoders.len());
        for e in &self.encoders {
            let texts = prompts
                .iter()
                .map(|p| e.converted(p))
                .collect::<Result<Vec<_>>>()?;
            converted.push(texts);
        }
        for (i, p) in prompts.iter().enumerate() {
            // Start and end tokens around the text.
            let over = self.encoders.iter().zip(&converted).find_map(|(e, texts)| {
                let len = e.tokenizer.tokenizer.encode(&texts[i]).ok()?.len() + 2;
                (len > e.tokenizer.max_len).then_some((len, e.tokenizer.max_len))
            });
            if let Some((len, max)) = over {
                crate::messages::warn(&format!(
                    "the prompt \"{p}\" is {len} tokens; the text encoder reads {max}, so the rest is cut"
                ));
            }
        }
        let mut states = Vec::with_capacity(self.encoders.len());
        let mut pooled = None;
        for (e, texts) in self.encoders.iter().zip(&converted) {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let ids = e.tokenizer.encode_batch(&texts)?.to_device(device)?;
            let out = e.model.encode(&ids)?;
            if pooled.is_none() && e.model.has_projection() {
                pooled = Some(out.text_embeds);
            }
            states.push(match self.layer {
                StatesLayer::Last => out.tower.last_hidden_state,
                StatesLayer::Penultimate => {
                    let h = &out.tower.hidden_states;
                    h[h.len().saturating_sub(2)].clone()
                }
            });
        }
        let states = match states.len() {
            1 => states.remove(0),
            _ => Tensor::cat(&states, 2)?,
        };
        Ok(Conditioning {
            states,
            pooled: pooled.filter(|_| self.layer == StatesLayer::Penultimate),
        })
    }
}
