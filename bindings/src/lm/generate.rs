//! Generation from scripts: options maps to `GenerateOptions`, prompts as token-id arrays
//! (one, or a batch), and streaming through a Rhai closure called per token.

use super::model::{ids_of, ids_to_array, Lm};
use crate::error::{guard, runtime_error, RhaiResult};
use crate::options::Options;
use rhai::{Array, Dynamic, FnPtr, Map, NativeCallContext};
use rusting_brain::models::transformer_lm::generate::{
    self, Flow, GenerateOptions, SamplingOptions,
};

const KEYS: &[&str] = &[
    "max_new_tokens",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "cuda_graph",
];

pub fn options(what: &str, opts: Map) -> RhaiResult<GenerateOptions> {
    let o = Options::new(what, opts, KEYS)?;
    let d = SamplingOptions::default();
    // Without a seed, draw one from the script's generator: runs differ, and `manual_seed`
    // makes them repeat.
    let seed = match o.get("seed") {
        Some(_) => o.int("seed", 0)? as u64,
        None => rusting_brain::random::with_default(|g| {
            let w = g.next_u32s(2);
            (w[0] as u64) << 32 | w[1] as u64
        }),
    };
    let sampling = SamplingOptions {
        temperature: o.float("temperature", d.temperature)?,
        top_k: o.usize("top_k", d.top_k)?,
        top_p: o.float("top_p", d.top_p)?,
        min_p: o.float("min_p", d.min_p)?,
        repetition_penalty: o.float("repetition_penalty", d.repetition_penalty)?,
        presence_penalty: o.float("presence_penalty", d.presence_penalty)?,
        frequency_penalty: o.float("frequency_penalty", d.frequency_penalty)?,
        seed,
    };
    let stop_tokens = match o.get("stop") {
        Some(v) => {
            let arr = v.read_lock::<Array>().ok_or_else(|| {
                runtime_error(format!(
                    "{what} option stop: expected an array of token ids"
                ))
            })?;
            ids_of(&arr, &format!("{what} option stop"))?
        }
        None => Vec::new(),
    };
    Ok(GenerateOptions {
        max_new_tokens: o.usize("max_new_tokens", 64)?,
        sampling,
        stop_tokens,
        cuda_graph: o.bool("cuda_graph", true)?,
    })
}

/// One prompt (an array of ids) or a batch (an array of arrays).
pub fn prompts_of(v: &Array, what: &str) -> RhaiResult<(Vec<Vec<u32>>, bool)> {
    if v.first().is_some_and(|f| f.is_array()) {
        let rows = v
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let arr = p.read_lock::<Array>().ok_or_else(|| {
                    runtime_error(format!("{what}: prompt {i} is not an array of ids"))
                })?;
                ids_of(&arr, &format!("{what} prompt {i}"))
            })
            .collect::<RhaiResult<Vec<_>>>()?;
        Ok((rows, true))
    } else {
        Ok((vec![ids_of(v, what)?], false))
    }
}

/// `model.generate(ids, opts)`: new ids for one prompt, or an array of them for a batch.
pub fn generate_ids(m: &mut Lm, prompt: Array, opts: Map) -> RhaiResult<Array> {
    let opts = options("generate", opts)?;
    let (prompts, batched) = prompts_of(&prompt, "generate")?;
    let model = m.lock();
    let out =
        guard(|| generate::generate(&model, &prompts, &opts, &mut |_, _| Ok(Flow::Continue)))?;
    Ok(if batched {
        out.iter()
            .map(|o| Dynamic::from_array(ids_to_array(o)))
            .collect()
    } else {
        ids_to_array(&out[0])
    })
}

/// Runs generation, calling `on_token(row, id)` per token; the closure's `false` ends that
/// row. Rhai errors from the closure stop everything and come back as they were.
pub fn stream_with(
    m: &Lm,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(usize, u32) -> RhaiResult<bool>,
) -> RhaiResult<Vec<Vec<u32>>> {
    let model = m.lock();
    let mut script_error = None;
    let result = guard(|| {
        generate::generate(
            &model,
            prompts,
            opts,
            &mut |row, tok| match on_token(row, tok) {
                Ok(true) => Ok(Flow::Continue),
                Ok(false) => Ok(Flow::Stop),
                Err(e) => {
                    script_error = Some(e);
                    Err(rusting_brain::Error::Cancelled)
                }
            },
        )
    });
    match script_error {
        Some(e) => Err(e),
        None => result,
    }
}

/// `model.stream(ids, opts, |id| ...)`: the closure gets each new id; returning `false` stops.
pub fn stream_ids(
    ctx: NativeCallContext,
    m: &mut Lm,
    prompt: Array,
    opts: Map,
    f: FnPtr,
) -> RhaiResult<Array> {
    let opts = options("stream", opts)?;
    let prompts = vec![ids_of(&prompt, "stream")?];
    let out = stream_with(m, &prompts, &opts, |_, tok| {
        let r: Dynamic = f.call_within_context(&ctx, (Dynamic::from_int(tok as i64),))?;
        Ok(r.as_bool().unwrap_or(true))
    })?;
    Ok(ids_to_array(&out[0]))
}

/// `model.log_probabilities(ids)`: log p(id_i | ids before it) for i >= 1.
pub fn log_probabilities(m: &mut Lm, ids: Array) -> RhaiResult<Array> {
    let ids = ids_of(&ids, "log_probabilities")?;
    let model = m.lock();
    let lp = guard(|| generate::log_probabilities(&model, &ids))?;
    Ok(lp.into_iter().map(Dynamic::from_float).collect())
}
