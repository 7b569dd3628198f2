//! Textual-inversion embeddings: learned vectors for a new prompt token, added to a pipeline's
//! tokenizers and text encoders as diffusers' `load_textual_inversion` adds them. A file holds:
//!
//! - diffusers' layout: one tensor named by its token, [width] or [n, width];
//! - Automatic1111's: `emb_params` (safetensors) or `string_to_param.*` (its .pt), [n, width],
//!   the token being the file's name;
//! - SDXL's: `clip_l` [n, 768] for the first encoder and `clip_g` [n, 1280] for the second.
//!
//! n vectors become n tokens, `<tok>`, `<tok>_1`, ... `<tok>_{n-1}`, and a prompt's `<tok>` is
//! read as all of them (diffusers' `maybe_convert_prompt`).

use crate::{Error, Result, Tensor};
use std::path::Path;

/// One file's vectors, by the encoder they belong to (0: the first, 1: SDXL's second).
pub struct Inversion {
    pub token: String,
    pub vectors: Vec<(usize, Tensor)>,
}

/// The vectors of a textual-inversion file; `token` names the prompt token instead of the
/// file's own name for it.
pub fn read_inversion(path: &Path, token: Option<&str>) -> Result<Inversion> {
    let bad =
        |msg: String| Error::format("textual inversion", format!("{}: {msg}", path.display()));
    let tensors = crate::io::load(path)?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("embedding")
        .to_string();
    let get = |k: &str| tensors.get(k).cloned();
    let (file_token, vectors) = if let (Some(l), Some(g)) = (get("clip_l"), get("clip_g")) {
        (stem, vec![(0, l), (1, g)])
    } else if let Some(t) = get("emb_params").or_else(|| get("string_to_param.*")) {
        (stem, vec![(0, t)])
    } else if tensors.len() == 1 {
        let (name, t) = tensors.iter().next().expect("one tensor");
        (name.clone(), vec![(0, t.clone())])
    } else {
        let names: Vec<&String> = tensors.keys().take(8).collect();
        return Err(bad(format!(
            "not a textual-inversion file: expected one tensor named by its token, emb_params, string_to_param or clip_l + clip_g; found {names:?}"
        )));
    };
    let vectors = vectors
        .into_iter()
        .map(|(slot, t)| match t.rank() {
            1 => Ok((slot, t.reshape_to(&[1, t.shape()[0]])?)),
            2 if t.shape()[0] > 0 => Ok((slot, t)),
            _ => Err(bad(format!(
                "the vectors must be [width] or [n, width], got {:?}",
                t.shape()
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    let token = token.map_or(file_token, str::to_string);
    if token.trim().is_empty() {
        return Err(bad("the token is empty".into()));
    }
    Ok(Inversion { token, vectors })
}

/// The tokens n vectors are loaded as: `<tok>`, `<tok>_1`, ... (diffusers' naming).
pub fn token_names(token: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| match i {
            0 => token.to_string(),
            i => format!("{token}_{i}"),
        })
        .collect()
}

/// `prompt` with each multi-vector token it contains spelled out as all its tokens.
pub fn spell_out(
    prompt: &str,
    multi: &[(String, usize)],
    contains: impl Fn(&str) -> bool,
) -> String {
    let mut out = prompt.to_string();
    for (token, n) in multi {
        if *n > 1 && contains(token) {
            out = out.replace(token.as_str(), &token_names(token, *n).join(" "));
        }
    }
    out
}
