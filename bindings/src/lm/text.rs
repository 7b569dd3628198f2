//! Generation with a tokenizer: prompts and results as text, the tokenizer's end-of-text token
//! as the default stop, and streaming of complete UTF-8 pieces (a character split across tokens
//! is printed once its last byte arrives).

use super::generate::{options, stream_with};
use super::model::Lm;
use crate::error::{guard, runtime_error, RhaiResult};
use rhai::{Array, Dynamic, FnPtr, Map, NativeCallContext};
use rusting_brain::models::transformer_lm::generate::GenerateOptions;
use rusting_brain::text::{StreamDecoder, Tokenizer};

fn with_default_stop(mut opts: GenerateOptions, tok: &Tokenizer) -> GenerateOptions {
    if opts.stop_tokens.is_empty() {
        opts.stop_tokens.extend(tok.eos_id());
    }
    opts
}

fn prompts(tok: &Tokenizer, prompt: &Dynamic) -> RhaiResult<(Vec<Vec<u32>>, bool)> {
    if let Some(s) = prompt.read_lock::<rhai::ImmutableString>() {
        return Ok((vec![guard(|| tok.encode(&s))?], false));
    }
    let arr = prompt.read_lock::<Array>().ok_or_else(|| {
        runtime_error(format!(
            "generate: the prompt must be a string or an array of strings, got {}",
            prompt.type_name()
        ))
    })?;
    let rows = arr
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let s = p.read_lock::<rhai::ImmutableString>().ok_or_else(|| {
                runtime_error(format!(
                    "generate: prompt {i} is a {}, not a string",
                    p.type_name()
                ))
            })?;
            guard(|| tok.encode(&s))
        })
        .collect::<RhaiResult<Vec<_>>>()?;
    Ok((rows, true))
}

/// `model.generate(tok, "prompt" | ["a", "b"], opts)`: the generated text (prompt excluded).
pub fn generate_text(
    m: &mut Lm,
    tok: Tokenizer,
    prompt: Dynamic,
    opts: Map,
) -> RhaiResult<Dynamic> {
    let opts = with_default_stop(options("generate", opts)?, &tok);
    let (rows, batched) = prompts(&tok, &prompt)?;
    let out = stream_with(m, &rows, &opts, |_, _| Ok(true))?;
    let texts = out
        .iter()
        .map(|ids| guard(|| tok.decode(ids, true)))
        .collect::<RhaiResult<Vec<_>>>()?;
    Ok(if batched {
        Dynamic::from_array(texts.into_iter().map(Dynamic::from).collect())
    } else {
        Dynamic::from(texts.into_iter().next().unwrap_or_default())
    })
}

/// `model.stream(tok, "prompt", opts, |piece| ...)`: calls the closure with each new piece of
/// text; returns the whole generated text. The closure's `false` stops.
pub fn stream_text(
    ctx: NativeCallContext,
    m: &mut Lm,
    tok: Tokenizer,
    prompt: &str,
    opts: Map,
    f: FnPtr,
) -> RhaiResult<String> {
    let opts = with_default_stop(options("stream", opts)?, &tok);
    let rows = vec![guard(|| tok.encode(prompt))?];
    let mut decoder = StreamDecoder::new(tok.clone(), true);
    let mut text = String::new();
    stream_with(m, &rows, &opts, |_, id| {
        let piece = guard(|| decoder.push(id))?;
        if piece.is_empty() {
            return Ok(true);
        }
        text.push_str(&piece);
        let r: Dynamic = f.call_within_context(&ctx, (Dynamic::from(piece),))?;
        Ok(r.as_bool().unwrap_or(true))
    })?;
    let rest = decoder.finish();
    if !rest.is_empty() {
        text.push_str(&rest);
        let _ = f.call_within_context::<Dynamic>(&ctx, (Dynamic::from(rest),))?;
    }
    Ok(text)
}
