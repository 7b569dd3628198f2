//! Autoregressive generation with a KV cache: one prefill pass over the (left-padded) prompts,
//! then one cached step per new token for the whole batch.

use super::sampler::{Sampler, SamplingOptions};
use super::step::{DecodeStep, StepOutput};
use crate::models::transformer_lm::{KvCache, TransformerLm};
use crate::nn::Module;
use crate::{no_grad, DType, Device, Error, Result, Tensor};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: SamplingOptions,
    /// A sequence ends at any of these; the stop token itself is not emitted.
    pub stop_tokens: Vec<u32>,
    /// On CUDA, capture the decode step once as a CUDA graph and replay it per token (the
    /// same kernels, so the same tokens, without a launch per op).
    pub cuda_graph: bool,
    /// Generation ends once this much time has passed since the call began, checked after
    /// each token (transformers' `max_time`: at least one token per row comes out).
    pub max_time: Option<Duration>,
}

impl GenerateOptions {
    /// Whether the time `max_time` allows from `started` is spent.
    pub(super) fn out_of_time(&self, started: Instant) -> bool {
        self.max_time.is_some_and(|t| started.elapsed() >= t)
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 64,
            sampling: SamplingOptions::default(),
            stop_tokens: Vec::new(),
            cuda_graph: true,
            max_time: None,
        }
    }
}

/// What the caller's per-token callback decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// End this sequence here (the others go on).
    Stop,
}

/// Generates after each prompt; `on_token(row, token)` sees every emitted token as it comes.
/// Returns the new tokens per prompt (prompts excluded).
pub fn generate(
    model: &TransformerLm,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(usize, u32) -> Result<Flow>,
) -> Result<Vec<Vec<u32>>> {
    no_grad(|| generate_inner(model, prompts, opts, false, on_token)).map(|s| s.tokens)
}

/// New tokens per prompt with the model's log-probability of each.
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    pub tokens: Vec<Vec<u32>>,
    /// log p(token | text before it) under the model's own distribution: the log-softmax of
    /// its logits before the sampler's penalties, temperature and filters (what vLLM and
    /// OpenAI report as a token's logprob).
    pub log_probs: Vec<Vec<f64>>,
}

/// `generate`, with each new token's log-probability. The step hands its logits to the host
/// (no device-side argmax), so a greedy run costs one logits copy per token more.
pub fn generate_scored(
    model: &TransformerLm,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(usize, u32) -> Result<Flow>,
) -> Result<Scored> {
    no_grad(|| generate_inner(model, prompts, opts, true, on_token))
}

/// Checks the prompts (none empty, every token in the vocabulary, room for `max_new_tokens`
/// more); returns the longest prompt's length.
pub(super) fn check_prompts(
    model: &TransformerLm,
    prompts: &[Vec<u32>],
    max_new_tokens: usize,
) -> Result<usize> {
    if prompts.is_empty() {
        return Err(Error::invalid("generate", "no prompts"));
    }
    if let Some(i) = prompts.iter().position(|p| p.is_empty()) {
        return Err(Error::invalid(
            "generate",
            format!("prompt {i} is empty; start it with at least one token (a BOS or a word)"),
        ));
    }
    let vocab = model.config.vocab_size;
    for (i, p) in prompts.iter().enumerate() {
        if let Some(&t) = p.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::invalid(
                "generate",
                format!("prompt {i} has token {t}, outside the vocabulary of {vocab}"),
            ));
        }
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let max = model.config.max_seq_len;
    if longest + max_new_tokens > max {
        return Err(Error::invalid(
            "generate",
            format!(
                "a {longest}-token prompt plus {max_new_tokens} new tokens exceeds the model's max_seq_len {max}"
            ),
        ));
    }
    Ok(longest)
}

/// The prompts, left-padded to one length, through the model into a new cache with room for
/// `room` more positions: the cache and the logits [batch, vocab] after each prompt.
pub(super) fn prefill(
    model: &TransformerLm,
    prompts: &[Vec<u32>],
    room: usize,
) -> Result<(KvCache, Tensor)> {
    let b = prompts.len();
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let pads: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
    let mut cache = model.new_cache(b, longest + room)?;
    let padded: Vec<i64> = prompts
        .iter()
        .zip(&pads)
        .flat_map(|(p, &pad)| std::iter::repeat_n(0, pad).chain(p.iter().map(|&t| t as i64)))
        .collect();
    cache.set_pads(pads)?;
    crate::cancel::check()?;
    let hidden =
        model.hidden_for_head(&Tensor::from_vec(padded, &[b, longest])?, Some(&mut cache))?;
    let logits = model
        .project(&hidden.narrow(1, longest - 1, 1)?)?
        .reshape_to(&[b, model.config.vocab_size])?;
    Ok((cache, logits))
}

fn generate_inner(
    model: &TransformerLm,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    scored: bool,
    on_token: &mut dyn FnMut(usize, u32) -> Result<Flow>,
) -> Result<Scored> {
    let started = Instant::now();
    check_prompts(model, prompts, opts.max_new_tokens)?;
    let mut sampler = Sampler::new(opts.sampling.clone())?;
    let b = prompts.len();
    let mut out = Scored {
        tokens: vec![Vec::new(); b],
        log_probs: vec![Vec::new(); b],
    };
    if opts.max_new_tokens == 0 {
        return Ok(out);
    }
    let (mut cache, logits) = prefill(model, prompts, opts.max_new_tokens)?;
    let (mut picks, mut scores) = match scored {
        true => sample_scored(&mut sampler, &host_f32(&logits)?, prompts, &out.tokens),
        false => (
            pick(&mut sampler, &logits, prompts, &out.tokens)?,
            Vec::new(),
        ),
    };
    let greedy = sampler.options().is_plain_greedy() && !scored;
    let mut step = DecodeStep::new(model, b, greedy, opts.cuda_graph)?;
    let mut done = vec![false; b];
    for n in 0..opts.max_new_tokens {
        for (row, &tok) in picks.iter().enumerate() {
            if done[row] {
                continue;
            }
            if opts.stop_tokens.contains(&tok) {
                done[row] = true;
                continue;
            }
            out.tokens[row].push(tok);
            if let Some(&lp) = scores.get(row) {
                out.log_probs[row].push(lp);
            }
            if on_token(row, tok)? == Flow::Stop {
                done[row] = true;
            }
        }
        if done.iter().all(|&d| d) || n + 1 == opts.max_new_tokens || opts.out_of_time(started) {
            break;
        }
        crate::cancel::check()?;
        // Finished rows still take a step (the batch moves together); their picks are dropped.
        (picks, scores) = match step.run(&mut cache, &picks)? {
            StepOutput::Picks(p) => (p, Vec::new()),
            StepOutput::Logits(l) if scored => {
                sample_scored(&mut sampler, &l, prompts, &out.tokens)
            }
            StepOutput::Logits(l) => (sample(&mut sampler, &l, prompts, &out.tokens), Vec::new()),
        };
    }
    Ok(out)
}

/// One token per row: an argmax on the device when nothing else is needed, otherwise the
/// sampler on the host over F32 logits.
fn pick(
    sampler: &mut Sampler,
    logits: &Tensor,
    prompts: &[Vec<u32>],
    generated: &[Vec<u32>],
) -> Result<Vec<u32>> {
    if sampler.options().is_plain_greedy() {
        let ids: Vec<i64> = logits
            .argmax(Some(-1), false)?
            .to_device(Device::Cpu)?
            .to_vec()?;
        return Ok(ids.into_iter().map(|i| i as u32).collect());
    }
    Ok(sample(sampler, &host_f32(logits)?, prompts, generated))
}

/// Logits [.., vocab] as host F32 values, row after row.
pub(super) fn host_f32(logits: &Tensor) -> Result<Vec<f32>> {
    logits
        .to_dtype(DType::F32)?
        .to_device(Device::Cpu)?
        .to_vec_f32()
}

/// The sampler's pick for each row of host logits [batch, vocab].
fn sample(
    sampler: &mut Sampler,
    logits: &[f32],
    prompts: &[Vec<u32>],
    generated: &[Vec<u32>],
) -> Vec<u32> {
    let v = logits.len() / prompts.len().max(1);
    logits
        .chunks(v)
        .enumerate()
        .map(|(row, l)| sampler.pick(&mut l.to_vec(), &prompts[row], &generated[row]))
        .collect()
}

/// The sampler's pick for each row of host logits [batch, vocab], with the pick's
/// log-probability under those logits as the model gave them.
fn sample_scored(
    sampler: &mut Sampler,
    logits: &[f32],
    prompts: &[Vec<u32>],
    generated: &[Vec<u32>],
) -> (Vec<u32>, Vec<f64>) {
    let picks = sample(sampler, logits, prompts, generated);
    let v = logits.len() / prompts.len().max(1);
    let scores = logits
        .chunks(v)
        .zip(&picks)
        .map(|(row, &tok)| log_softmax_at(row, tok as usize))
        .collect();
    (picks, scores)
}

/// log softmax(row)[i], in F64.
fn log_softmax_at(row: &[f32], i: usize) -> f64 {
    let max = row
        .iter()
        .fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
    let sum: f64 = row.iter().map(|&x| (f64::from(x) - max).exp()).sum();
    f64::from(row[i]) - max - sum.ln()
}

/// log p(ids[i] | ids[..i]) for i = 1..len: how likely the model finds each token of a text.
pub fn log_probabilities(model: &TransformerLm, ids: &[u32]) -> Result<Vec<f64>> {
    if ids.len() < 2 {
        return Err(Error::invalid(
            "log_probabilities",
            "needs at least two tokens (the first one is only context)",
        ));
    }
    let vocab = model.config.vocab_size;
    if let Some(&t) = ids.iter().find(|&&t| t as usize >= vocab) {
        return Err(Error::invalid(
            "log_probabilities",
            format!("token {t} is outside the vocabulary of {vocab}"),
        ));
    }
    no_grad(|| {
        let n = ids.len() - 1;
        let input: Vec<i64> = ids[..n].iter().map(|&t| t as i64).collect();
        let target: Vec<i64> = ids[1..].iter().map(|&t| t as i64).collect();
        let logits = model.forward(&Tensor::from_vec(input, &[1, n])?)?;
        let logp = logits
            .to_dtype(DType::F32)?
            .reshape_to(&[n, vocab])?
            .log_softmax(-1)?;
        let target = Tensor::from_vec(target, &[n, 1])?.to_device(model.device())?;
        logp.gather(1, &target)?
            .to_device(Device::Cpu)?
            .to_vec_f64()
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{greedy, model, no_callback, reference_greedy};
    use super::*;

    #[test]
    fn cached_greedy_decoding_matches_full_forwards() {
        let m = model(1);
        let got = generate(&m, &[vec![3, 1, 4]], &greedy(12), &mut no_callback()).unwrap();
        assert_eq!(got[0], reference_greedy(&m, &[3, 1, 4], 12));
    }

    #[test]
    fn a_batch_of_unequal_prompts_matches_each_prompt_alone() {
        let m = model(2);
        let prompts = vec![vec![5, 9], vec![1, 2, 3, 4, 5], vec![7]];
        let batch = generate(&m, &prompts, &greedy(6), &mut no_callback()).unwrap();
        for (p, got) in prompts.iter().zip(&batch) {
            assert_eq!(got, &reference_greedy(&m, p, 6), "prompt {p:?}");
        }
    }

    /// Each new token's log-probability is the model's own, as scoring the whole text gives
    /// it, greedy or sampled (the temperature shapes the draw, not the score); the tokens are
    /// the ones plain generation gives, rows of a batch apart.
    #[test]
    fn scored_generation_gives_each_tokens_log_probability_under_the_model() {
        let m = model(7);
        let prompts = vec![vec![5, 9, 2], vec![1]];
        let sampled = GenerateOptions {
            sampling: SamplingOptions {
                temperature: 0.7,
                seed: 3,
                ..SamplingOptions::default()
            },
            ..greedy(6)
        };
        for opts in [greedy(6), sampled] {
            let plain = generate(&m, &prompts, &opts, &mut no_callback()).unwrap();
            let scored = generate_scored(&m, &prompts, &opts, &mut no_callback()).unwrap();
            assert_eq!(scored.tokens, plain);
            for (row, prompt) in prompts.iter().enumerate() {
                let text: Vec<u32> = prompt.iter().chain(&plain[row]).copied().collect();
                let whole = log_probabilities(&m, &text).unwrap();
                let want = &whole[prompt.len() - 1..];
                let got = &scored.log_probs[row];
                assert_eq!(got.len(), want.len());
                for (g, w) in got.iter().zip(want) {
                    assert!((g - w).abs() < 1e-4, "row {row}: {got:?} vs {want:?}");
                }
            }
        }
    }

    #[test]
    fn stop_tokens_end_a_sequence_without_being_emitted() {
        let m = model(3);
        let free = generate(&m, &[vec![2, 2]], &greedy(8), &mut no_callback()).unwrap();
        let stop = free[0][3];
        let first = free[0].iter().position(|&t| t == stop).unwrap();
        let opts = GenerateOptions {
            stop_tokens: vec![stop],
            ..greedy(8)
        };
        let got = generate(&m, &[vec![2, 2]], &opts, &mut no_callback()).unwrap();
        assert_eq!(got[0], free[0][..first]);
    }

    /// With no time at all, each row still gets its first token (the check comes after a
    /// token, as transformers' MaxTimeCriteria); with time to spare, max_time changes nothing.
    #[test]
    fn max_time_ends_generation_after_the_token_that_runs_out_of_it() {
        let m = model(6);
        let prompts = [vec![1, 2], vec![3]];
        let opts = |t| GenerateOptions {
            max_time: Some(Duration::from_secs_f64(t)),
            ..greedy(6)
        };
        let none = generate(&m, &prompts, &opts(0.0), &mut no_callback()).unwrap();
        assert_eq!(none.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1]);
        let ample = generate(&m, &prompts, &opts(600.0), &mut no_callback()).unwrap();
        let free = generate(&m, &prompts, &greedy(6), &mut no_callback()).unwrap();
        assert_eq!(ample, free);
        assert_eq!(none[0][0], free[0][0]);
    }

    #[test]
    fn the_callback_sees_every_token_and_can_stop_its_row() {
        let m = model(4);
        let mut seen = Vec::new();
        let got = generate(&m, &[vec![1], vec![2]], &greedy(5), &mut |row, tok| {
            seen.push((row, tok));
            Ok(
                if row == 0 && seen.iter().filter(|(r, _)| *r == 0).count() == 2 {
                    Flow::Stop
                } else {
                    Flow::Continue
                },
            )
        })
        .unwrap();
        assert_eq!(got[0].len(), 2);
        assert_eq!(got[1].len(), 5);
        assert_eq!(seen.len(), 7);
    }

    #[test]
    fn seeded_sampling_repeats_and_differs_across_seeds() {
        let m = model(5);
        let opts = |seed| GenerateOptions {
            max_new_tokens: 10,
            sampling: SamplingOptions {
                temperature: 1.5,
                seed,
                ..Default::default()
            },
            ..Default::default()
        };
        let run = |s| generate(&m, &[vec![1, 2]], &opts(s), &mut no_callback()).unwrap();
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }

    #[test]
    fn log_probabilities_score_each_next_token() {
        let m = model(6);
        let ids = [4u32, 8, 15, 16];
        let lp = log_probabilities(&m, &ids).unwrap();
        assert_eq!(lp.len(), 3);
        let logits = no_grad(|| m.forward(&Tensor::from_vec(vec![4i64, 8, 15], &[1, 3])?)).unwrap();
        let row = logits.narrow(1, 1, 1).unwrap().to_vec_f32().unwrap();
        let lse = row.iter().map(|&l| (l as f64).exp()).sum::<f64>().ln();
        assert!((lp[1] - (row[15] as f64 - lse)).abs() < 1e-5);
        assert!(lp.iter().all(|&l| l < 0.0));
    }

    #[test]
    fn prompts_too_long_or_out_of_vocab_are_errors() {
        let m = model(7);
        let long = generate(&m, &[vec![1; 30]], &greedy(20), &mut no_callback());
        assert!(long.unwrap_err().to_string().contains("max_seq_len 40"));
        let bad = generate(&m, &[vec![99]], &greedy(2), &mut no_callback());
        assert!(bad.unwrap_err().to_string().contains("token 99"));
    }
}
