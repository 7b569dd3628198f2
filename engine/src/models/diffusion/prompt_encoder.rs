//! The prompt side of a Stable Diffusion pipeline: its text encoders (CLIP, and SD3's T5) with
//! their tokenizers, and how their outputs become the denoiser's conditioning.
//!
//! - SD 1.x and 2.x: the one encoder's last states (after the final norm).
//! - SDXL (diffusers' `StableDiffusionXLPipeline.encode_prompt`): each encoder's second to
//!   last layer (before the final norm), side by side on the width, and the projected pooled
//!   row of the first encoder that has a projection (`text_encoder_2`, a
//!   `CLIPTextModelWithProjection`) for the UNet's added conditioning.
//! - SD3 (`StableDiffusion3Pipeline.encode_prompt`): the two CLIP encoders' second to last
//!   states side by side, zero-padded to T5's width, then T5's states after them on the tokens
//!   (zeros when the pipeline has no T5); the two projected pooled rows side by side.
//! - FLUX (`FluxPipeline.encode_prompt`): T5's states; CLIP's pooled row (unprojected).

use super::textual_inversion::{spell_out, token_names};
use crate::models::clip::{tokenizer as clip_tokenizer, ClipTextModel};
use crate::models::prompt_tokenizer::{Padding, PromptTokenizer};
use crate::models::t5::{self, T5EncoderModel};
use crate::nn::Module;
use crate::text::AddedToken;
use crate::{Device, Error, Result, Tensor};
use std::path::Path;

/// A text encoder of a pipeline (boxed: the two differ in size).
pub enum TextEncoder {
    Clip(Box<ClipTextModel>),
    T5(Box<T5EncoderModel>),
}

impl TextEncoder {
    pub fn module(&self) -> &dyn Module {
        match self {
            TextEncoder::Clip(m) => m.as_ref(),
            TextEncoder::T5(m) => m.as_ref(),
        }
    }

    /// The CLIP encoder, or an error naming what needs one.
    fn clip(&self, what: &str) -> Result<&ClipTextModel> {
        match self {
            TextEncoder::Clip(m) => Ok(m),
            TextEncoder::T5(_) => Err(Error::invalid(
                "textual inversion",
                format!("{what} applies to CLIP text encoders, not T5"),
            )),
        }
    }
}

/// One text encoder of a pipeline and the tokenizer beside it.
pub struct PromptEncoder {
    /// The pipeline's name for it (`text_encoder`, `text_encoder_2`, `text_encoder_3`).
    pub name: String,
    pub tokenizer: PromptTokenizer,
    pub model: TextEncoder,
    /// Textual-inversion tokens and how many vectors each has.
    pub inversions: Vec<(String, usize)>,
}

/// Whether a component folder's config is a T5 encoder's.
fn is_t5(dir: &Path) -> Result<bool> {
    let json = crate::io::pretrained::read_config(dir)?;
    Ok(json.get("model_type").and_then(|v| v.as_str()) == Some("t5"))
}

impl PromptEncoder {
    /// `<dir>/<name>/` and the tokenizer folder beside it (`tokenizer`, `tokenizer_2`,
    /// `tokenizer_3`): a CLIP text model, or a T5 encoder (its prompts padded to
    /// `T5_TOKENS` unless a call asks for another length).
    pub fn from_folder(dir: &Path, name: &str, tokenizer: &str) -> Result<PromptEncoder> {
        let model_dir = super::pipeline::component(dir, name)?;
        let tok_dir = super::pipeline::component(dir, tokenizer)?;
        let (model, tokenizer) = match is_t5(&model_dir)? {
            true => (
                TextEncoder::T5(Box::new(T5EncoderModel::from_folder(&model_dir)?)),
                t5::tokenizer::from_folder(&tok_dir, T5_TOKENS)?,
            ),
            false => {
                let model = ClipTextModel::from_folder(&model_dir)?;
                let context = model.config().max_position_embeddings;
                let mut tokenizer =
                    clip_tokenizer::from_folder(&tok_dir, context)?.ok_or_else(|| {
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
                (TextEncoder::Clip(Box::new(model)), tokenizer)
            }
        };
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
        self.model.clip(&format!("`{token}`"))?;
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
        match &mut self.model {
            TextEncoder::Clip(m) => m.set_token_embeddings(first, vectors)?,
            TextEncoder::T5(_) => unreachable!("check_inversion refuses T5"),
        }
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

    /// The width of the states this encoder gives the denoiser.
    pub fn width(&self) -> usize {
        match &self.model {
            TextEncoder::Clip(m) => m.config().tower.hidden_size,
            TextEncoder::T5(m) => m.config.d_model,
        }
    }

    /// The width of the projected pooled row, for CLIP encoders with a projection.
    fn pooled_width(&self) -> Option<usize> {
        match &self.model {
            TextEncoder::Clip(m) if m.has_projection() => Some(m.embeds_width()),
            _ => None,
        }
    }

    /// Prompts as ids [N, len] padded (and cut) to `len`.
    fn ids(&self, texts: &[&str], len: usize, device: Device) -> Result<Tensor> {
        self.tokenizer
            .encode_batch_to(texts, len)?
            .to_device(device)
    }
}

/// How many tokens SD3's T5 reads unless a call says otherwise (diffusers'
/// `max_sequence_length` default; FLUX's is 512).
pub const T5_TOKENS: usize = 256;

/// How a pipeline's encoders' outputs become the denoiser's conditioning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptLayout {
    /// SD 1.x and 2.x: the last layer's states, after the final norm.
    Sd,
    /// SDXL: the second to last layer's states, side by side; `text_encoder_2`'s pooled row.
    Sdxl,
    /// SD3: CLIP's penultimate states padded to `joint_width`, T5's after them; both pooled
    /// rows side by side.
    Sd3 { joint_width: usize },
    /// FLUX: T5's states alone; CLIP's pooled row.
    Flux,
}

impl PromptLayout {
    /// How many tokens T5 reads unless a call says otherwise.
    pub fn t5_tokens(self) -> usize {
        match self {
            PromptLayout::Flux => 512,
            _ => T5_TOKENS,
        }
    }
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

/// A pipeline's text encoders (one for SD, two for SDXL, up to three for SD3) and the states
/// it reads of them.
pub struct PromptEncoders {
    pub encoders: Vec<PromptEncoder>,
    pub layout: PromptLayout,
}

impl PromptEncoders {
    /// The width of the states: the UNet's `cross_attention_dim`, the MMDiT's
    /// `joint_attention_dim`.
    pub fn width(&self) -> usize {
        match self.layout {
            PromptLayout::Sd3 { joint_width } => joint_width,
            PromptLayout::Flux => self
                .encoders
                .iter()
                .filter(|e| matches!(e.model, TextEncoder::T5(_)))
                .map(PromptEncoder::width)
                .sum(),
            _ => self.encoders.iter().map(PromptEncoder::width).sum(),
        }
    }

    /// The pooled embedding's width, where the pipeline reads one (SDXL, SD3, FLUX).
    pub fn pooled_width(&self) -> Option<usize> {
        let mut widths = self.encoders.iter().filter_map(PromptEncoder::pooled_width);
        match self.layout {
            PromptLayout::Sd => None,
            PromptLayout::Sdxl => widths.next(),
            PromptLayout::Sd3 { .. } => Some(widths.sum()),
            PromptLayout::Flux => self.encoders.iter().find_map(|e| match &e.model {
                TextEncoder::Clip(m) => Some(m.embeds_width()),
                TextEncoder::T5(_) => None,
            }),
        }
    }

    /// The CLIP encoders' widths side by side (what SD3 pads to T5's width).
    fn clip_width(&self) -> usize {
        self.encoders
            .iter()
            .filter(|e| matches!(e.model, TextEncoder::Clip(_)))
            .map(PromptEncoder::width)
            .sum()
    }

    /// Whether the encoders fit the layout: SD3's CLIP widths within the joint width and a
    /// T5 of that width. A mismatch names both numbers.
    pub fn check(&self) -> Result<()> {
        let PromptLayout::Sd3 { joint_width } = self.layout else {
            return Ok(());
        };
        let bad = |msg: String| Err(Error::format("StableDiffusion3Pipeline", msg));
        if self.clip_width() > joint_width {
            return bad(format!(
                "the CLIP encoders' states ({} wide side by side) are wider than the transformer's joint_attention_dim {joint_width}",
                self.clip_width()
            ));
        }
        for e in &self.encoders {
            if matches!(e.model, TextEncoder::T5(_)) && e.width() != joint_width {
                return bad(format!(
                    "{} gives states {} wide; the transformer's joint_attention_dim is {joint_width}",
                    e.name,
                    e.width()
                ));
            }
        }
        Ok(())
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
            .try_for_each(|e| e.model.module().to_device(device))
    }

    /// The conditioning of prompts, each padded to (and cut at, with one warning, as diffusers
    /// warns) each CLIP encoder's context and `t5_tokens` for T5.
    pub fn encode(
        &self,
        prompts: &[&str],
        device: Device,
        t5_tokens: usize,
    ) -> Result<Conditioning> {
        // diffusers refuses more than T5 was trained on.
        if t5_tokens == 0 || t5_tokens > 512 {
            return Err(Error::invalid(
                "generate",
                format!("max_sequence_length {t5_tokens} is outside 1..=512"),
            ));
        }
        let len = |e: &PromptEncoder| match e.model {
            TextEncoder::T5(_) => t5_tokens,
            TextEncoder::Clip(_) => e.tokenizer.max_len,
        };
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
            // The tokens around the text: CLIP's start and end, T5's end.
            let over = self.encoders.iter().zip(&converted).find_map(|(e, texts)| {
                let around = match e.model {
                    TextEncoder::Clip(_) => 2,
                    TextEncoder::T5(_) => 1,
                };
                let n = e.tokenizer.tokenizer.encode(&texts[i]).ok()?.len() + around;
                (n > len(e)).then_some((n, len(e)))
            });
            if let Some((len, max)) = over {
                // Once per prompt: a training loop encodes the same captions every epoch.
                crate::messages::warn_once(&format!(
                    "the prompt \"{p}\" is {len} tokens; the text encoder reads {max}, so the rest is cut"
                ));
            }
        }
        let mut clip_states = Vec::with_capacity(self.encoders.len());
        let mut t5_states = None;
        let mut pooled = Vec::new();
        for (e, texts) in self.encoders.iter().zip(&converted) {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let ids = e.ids(&texts, len(e), device)?;
            match &e.model {
                TextEncoder::T5(m) => t5_states = Some(m.forward(&ids)?),
                TextEncoder::Clip(m) => {
                    let out = m.encode(&ids)?;
                    // FLUX reads CLIP's pooled row as it is; the others its projection.
                    if m.has_projection() || self.layout == PromptLayout::Flux {
                        pooled.push(out.text_embeds);
                    }
                    clip_states.push(match self.layout {
                        PromptLayout::Sd => out.tower.last_hidden_state,
                        _ => {
                            let h = &out.tower.hidden_states;
                            h[h.len().saturating_sub(2)].clone()
                        }
                    });
                }
            }
        }
        let side_by_side = |mut parts: Vec<Tensor>, dim: isize| match parts.len() {
            1 => Ok(parts.remove(0)),
            _ => Tensor::cat(&parts, dim),
        };
        if self.layout == PromptLayout::Flux {
            let states = t5_states.ok_or_else(|| {
                Error::invalid(
                    "generate",
                    "FLUX's pipeline needs its T5 encoder (text_encoder_2)",
                )
            })?;
            return Ok(Conditioning {
                states,
                pooled: pooled.into_iter().next(),
            });
        }
        let clip = side_by_side(clip_states, 2)?;
        let (states, pooled) = match self.layout {
            PromptLayout::Sd => (clip, None),
            PromptLayout::Sdxl => (clip, pooled.into_iter().next()),
            PromptLayout::Sd3 { joint_width } => {
                let n = prompts.len();
                let pad = joint_width - clip.shape()[2];
                let clip = clip.pad(&[0, pad], crate::ops::rearrange::PadMode::Constant(0.0))?;
                let t5 = match t5_states {
                    Some(t) => t.to_dtype(clip.dtype())?,
                    None => {
                        Tensor::zeros(&[n, t5_tokens, joint_width], clip.dtype(), clip.device())?
                    }
                };
                (Tensor::cat(&[clip, t5], 1)?, Some(side_by_side(pooled, 1)?))
            }
            PromptLayout::Flux => unreachable!("returned above"),
        };
        Ok(Conditioning { states, pooled })
    }
}
