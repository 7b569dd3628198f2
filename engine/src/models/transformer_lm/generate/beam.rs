//! Beam search, scored as transformers' `generate(num_beams=…)` scores it, so that both give
//! the same sequences: at each step the `2 · num_beams` best continuations of all beams by
//! summed log-probability; those ending in a stop token (or at the length limit) among the
//! best `num_beams` become hypotheses, scored by the sum over length^length_penalty; the best
//! `num_beams` that go on are the next beams. `early_stopping` decides when the search may
//! end before the limit (transformers' `True`, `False` and `"never"`).
//!
//! The beams of all prompts share one cache, `num_beams` rows per prompt; after each step
//! the rows are reordered in place to follow the beams kept (`KvCache::reorder_rows`), so
//! the decode step stays one captured CUDA graph.

use super::decode::{check_prompts, host_f32, prefill};
use super::step::{DecodeStep, StepOutput};
use crate::models::transformer_lm::TransformerLm;
use crate::{no_grad, Error, Result};

/// When a prompt's search ends before `max_new_tokens` (transformers' `early_stopping`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyStopping {
    /// `False`: once the best running beam, scored at its current length, cannot beat the
    /// worst of `num_beams` hypotheses.
    Heuristic,
    /// `True`: as soon as there are `num_beams` hypotheses.
    WhenFull,
    /// `"never"`: only when no running beam can still win; with a positive length penalty its
    /// score is taken at the longest length it could reach.
    Never,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BeamOptions {
    pub num_beams: usize,
    pub max_new_tokens: usize,
    /// Hypotheses are scored by their summed log-probability over length^length_penalty:
    /// above 0 favours longer ones, below 0 shorter ones.
    pub length_penalty: f64,
    pub early_stopping: EarlyStopping,
    /// A hypothesis ends at any of these (not included in its tokens).
    pub stop_tokens: Vec<u32>,
    pub cuda_graph: bool,
}

impl Default for BeamOptions {
    fn default() -> Self {
        BeamOptions {
            num_beams: 4,
            max_new_tokens: 64,
            length_penalty: 1.0,
            early_stopping: EarlyStopping::Heuristic,
            stop_tokens: Vec::new(),
            cuda_graph: true,
        }
    }
}

/// One finished hypothesis: its new tokens and its length-penalised score.
#[derive(Clone, Debug, PartialEq)]
pub struct Beam {
    pub tokens: Vec<u32>,
    pub score: f64,
}

/// Beam search after each prompt; for each, its hypotheses, best first (at most
/// `num_beams`).
pub fn beam_search(
    model: &TransformerLm,
    prompts: &[Vec<u32>],
    opts: &BeamOptions,
) -> Result<Vec<Vec<Beam>>> {
    if opts.num_beams == 0 {
        return Err(Error::invalid(
            "beam search",
            "num_beams must be at least 1",
        ));
    }
    if !opts.length_penalty.is_finite() {
        return Err(Error::invalid(
            "beam search",
            format!("length_penalty must be finite, got {}", opts.length_penalty),
        ));
    }
    check_prompts(model, prompts, opts.max_new_tokens)?;
    if opts.max_new_tokens == 0 {
        let empty = Beam {
            tokens: Vec::new(),
            score: 0.0,
        };
        return Ok(vec![vec![empty]; prompts.len()]);
    }
    no_grad(|| search(model, prompts, opts))
}

fn search(
    model: &TransformerLm,
    prompts: &[Vec<u32>],
    opts: &BeamOptions,
) -> Result<Vec<Vec<Beam>>> {
    let nb = opts.num_beams;
    // Every prompt once per beam: the rows of one prompt share its padding.
    let rows: Vec<Vec<u32>> = prompts
        .iter()
        .flat_map(|p| std::iter::repeat_n(p.clone(), nb))
        .collect();
    let (mut cache, logits) = prefill(model, &rows, opts.max_new_tokens)?;
    let mut logits = host_f32(&logits)?;
    let mut searches: Vec<Search> = prompts.iter().map(|_| Search::new(nb)).collect();
    let mut step = DecodeStep::new(model, rows.len(), false, opts.cuda_graph)?;
    let vocab = model.config.vocab_size;
    for generated in 1..=opts.max_new_tokens {
        let mut all_hit = true;
        let mut order = Vec::with_capacity(rows.len());
        for (i, s) in searches.iter_mut().enumerate() {
            let block = &logits[i * nb * vocab..(i + 1) * nb * vocab];
            let sources = s.advance(block, vocab, generated, opts);
            all_hit &= s.all_hit;
            order.extend(sources.into_iter().map(|j| i * nb + j));
        }
        let improvable = searches.iter().any(|s| s.improvable);
        let open = !(opts.early_stopping == EarlyStopping::WhenFull
            && searches.iter().all(|s| s.finished.len() == nb));
        if !(improvable && open && !all_hit) {
            break;
        }
        crate::cancel::check()?;
        cache.reorder_rows(&order)?;
        let tokens: Vec<u32> = searches
            .iter()
            .flat_map(|s| s.running.iter().map(|b| *b.tokens.last().unwrap_or(&0)))
            .collect();
        logits = match step.run(&mut cache, &tokens)? {
            StepOutput::Logits(l) => l,
            StepOutput::Picks(_) => unreachable!("a beam step asks for logits"),
        };
    }
    Ok(searches.into_iter().map(Search::into_beams).collect())
}

/// transformers' stand-in for minus infinity: a score that can never be chosen.
const NEVER: f32 = -1.0e9;

/// A running beam: every token so far and its summed log-probability (F32, as transformers
/// keeps it, so near-ties break the same way).
#[derive(Clone)]
struct Running {
    tokens: Vec<u32>,
    score: f32,
}

/// One prompt's search.
struct Search {
    running: Vec<Running>,
    /// Hypotheses, best first, at most num_beams: tokens (stop token dropped) and score.
    finished: Vec<(Vec<u32>, f32)>,
    /// Whether a running beam may still beat the worst hypothesis.
    improvable: bool,
    /// Whether every continuation kept at the last step ended.
    all_hit: bool,
}

impl Search {
    fn new(nb: usize) -> Self {
        // Only the first beam starts live: the copies of the prompt would otherwise all
        // propose the same continuations.
        let running = (0..nb)
            .map(|j| Running {
                tokens: Vec::new(),
                score: if j == 0 { 0.0 } else { NEVER },
            })
            .collect();
        Search {
            running,
            finished: Vec::new(),
            improvable: true,
            all_hit: false,
        }
    }

    /// One step over this prompt's logits [num_beams, vocab]: the next beams and hypotheses.
    /// `generated` counts the new tokens including this one. Returns, for each next beam, the
    /// beam it continues.
    fn advance(
        &mut self,
        logits: &[f32],
        vocab: usize,
        generated: usize,
        opts: &BeamOptions,
    ) -> Vec<usize> {
        let nb = self.running.len();
        let mut scores = Vec::with_capacity(nb * vocab);
        for (row, beam) in logits.chunks(vocab).zip(&self.running) {
            let (max, log_sum) = log_sum_exp(row);
            scores.extend(row.iter().map(|&l| ((l - max) - log_sum) + beam.score));
        }
        let keep = (std::cmp::max(2, 1 + opts.stop_tokens.len()) * nb).min(scores.len());
        let top = top_indices(&scores, keep);
        let at_limit = generated >= opts.max_new_tokens;
        let hits: Vec<bool> = top
            .iter()
            .map(|&c| at_limit || opts.stop_tokens.contains(&((c % vocab) as u32)))
            .collect();
        self.all_hit = hits.iter().all(|&h| h);
        let extended = |c: usize| {
            let mut t = self.running[c / vocab].tokens.clone();
            t.push((c % vocab) as u32);
            t
        };
        // The best num_beams of the top continuations among those that did not end.
        let adjusted: Vec<f32> = top
            .iter()
            .zip(&hits)
            .map(|(&c, &h)| scores[c] + if h { NEVER } else { 0.0 })
            .collect();
        let next = top_indices(&adjusted, nb);
        let running: Vec<Running> = next
            .iter()
            .map(|&k| Running {
                tokens: extended(top[k]),
                score: adjusted[k],
            })
            .collect();
        let sources = next.iter().map(|&k| top[k] / vocab).collect();
        // Continuations among the best num_beams that ended become hypotheses.
        let full = self.finished.len() == nb;
        let closed = !self.improvable || (full && opts.early_stopping == EarlyStopping::WhenFull);
        if !closed {
            let penalty = (generated as f32).powf(opts.length_penalty as f32);
            for (k, &c) in top.iter().enumerate().take(nb) {
                if !hits[k] {
                    continue;
                }
                let mut tokens = extended(c);
                if opts
                    .stop_tokens
                    .contains(tokens.last().unwrap_or(&u32::MAX))
                {
                    tokens.pop();
                }
                let score = scores[c] / penalty;
                // Ties keep the older hypothesis first, as transformers' merge does.
                let at = self.finished.partition_point(|(_, s)| *s >= score);
                self.finished.insert(at, (tokens, score));
            }
            self.finished.truncate(nb);
        }
        self.running = running;
        if self.improvable {
            let length = match opts.early_stopping {
                EarlyStopping::Never if opts.length_penalty > 0.0 => opts.max_new_tokens,
                _ => generated,
            };
            let best = self.running[0].score / (length as f32).powf(opts.length_penalty as f32);
            let worst = match self.finished.len() == nb {
                true => self.finished.last().map_or(NEVER, |f| f.1),
                false => NEVER,
            };
            self.improvable = best > worst;
        }
        sources
    }

    fn into_beams(self) -> Vec<Beam> {
        self.finished
            .into_iter()
            .map(|(tokens, score)| Beam {
                tokens,
                score: score as f64,
            })
            .collect()
    }
}

/// The row's maximum m and log Σ exp(row - m): log_softmax(row) = (row - m) - that.
fn log_sum_exp(row: &[f32]) -> (f32, f32) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (max, row.iter().map(|&l| (l - max).exp()).sum::<f32>().ln())
}

/// The indices of the `k` largest scores, largest first (ties: the lower index first).
fn top_indices(scores: &[f32], k: usize) -> Vec<usize> {
    let by_score = |a: &usize, b: &usize| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b));
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    if k < idx.len() {
        idx.select_nth_unstable_by(k, by_score);
        idx.truncate(k);
    }
    idx.sort_unstable_by(by_score);
    idx
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{model, next_logits};
    use super::super::{generate, log_probabilities, SamplingOptions};
    use super::*;

    fn beams(n: usize, new: usize) -> BeamOptions {
        BeamOptions {
            num_beams: n,
            max_new_tokens: new,
            ..Default::default()
        }
    }

    /// log p of `tail` after `prompt`, from full forwards.
    fn score(m: &TransformerLm, prompt: &[u32], tail: &[u32]) -> f64 {
        let seq: Vec<u32> = prompt.iter().chain(tail).copied().collect();
        let lp = log_probabilities(m, &seq).unwrap();
        lp[lp.len() - tail.len()..].iter().sum()
    }

    #[test]
    fn as_many_beams_as_tokens_find_the_best_pair_exactly() {
        let m = model(21);
        let prompt = [3u32, 7, 1];
        let got = beam_search(&m, &[prompt.to_vec()], &beams(29, 2)).unwrap();
        let mut best = (f64::NEG_INFINITY, vec![]);
        for a in 0..29u32 {
            let first = next_logits(&m, &[3, 7, 1, a]);
            let lse = first.iter().map(|&l| (l as f64).exp()).sum::<f64>().ln();
            let head = score(&m, &prompt, &[a]);
            for (b, &l) in first.iter().enumerate() {
                let s = head + l as f64 - lse;
                if s > best.0 {
                    best = (s, vec![a, b as u32]);
                }
            }
        }
        assert_eq!(got[0][0].tokens, best.1);
        // Length penalty 1: the sum over the two tokens.
        assert!(
            (got[0][0].score - best.0 / 2.0).abs() < 1e-4,
            "{got:?} {best:?}"
        );
        assert_eq!(got[0].len(), 29);
        assert!(got[0].windows(2).all(|w| w[0].score >= w[1].score));
    }

    #[test]
    fn each_hypothesis_is_scored_by_its_log_probability_over_its_length() {
        let m = model(22);
        let prompt = vec![4u32, 4, 9];
        let opts = BeamOptions {
            length_penalty: 0.5,
            ..beams(3, 5)
        };
        for b in &beam_search(&m, std::slice::from_ref(&prompt), &opts).unwrap()[0] {
            let want = score(&m, &prompt, &b.tokens) / 5f64.sqrt();
            assert!((b.score - want).abs() < 1e-4, "{b:?} want {want}");
        }
    }

    #[test]
    fn beam_search_scores_at_least_as_well_as_greedy() {
        let m = model(23);
        let prompt = vec![2u32, 11];
        let greedy = generate(
            &m,
            std::slice::from_ref(&prompt),
            &super::super::GenerateOptions {
                max_new_tokens: 6,
                sampling: SamplingOptions::greedy(),
                ..Default::default()
            },
            &mut |_, _| Ok(super::super::Flow::Continue),
        )
        .unwrap();
        let best = &beam_search(&m, std::slice::from_ref(&prompt), &beams(4, 6)).unwrap()[0][0];
        assert!(score(&m, &prompt, &best.tokens) >= score(&m, &prompt, &greedy[0]) - 1e-6);
    }

    #[test]
    fn a_batch_of_unequal_prompts_searches_as_each_prompt_alone() {
        let m = model(24);
        let prompts = vec![vec![5u32, 9], vec![1, 2, 3, 4, 5], vec![7]];
        let opts = BeamOptions {
            stop_tokens: vec![3],
            ..beams(3, 7)
        };
        let batch = beam_search(&m, &prompts, &opts).unwrap();
        for (p, got) in prompts.iter().zip(&batch) {
            let alone = beam_search(&m, std::slice::from_ref(p), &opts).unwrap();
            assert_eq!(got.len(), alone[0].len(), "prompt {p:?}");
            for (a, b) in got.iter().zip(&alone[0]) {
                assert_eq!(a.tokens, b.tokens, "prompt {p:?}");
                assert!((a.score - b.score).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn stop_tokens_end_hypotheses_and_are_left_out() {
        let m = model(25);
        let prompt = vec![6u32, 6];
        let free = beam_search(&m, std::slice::from_ref(&prompt), &beams(2, 6)).unwrap();
        let stop = free[0][0].tokens[2];
        let opts = BeamOptions {
            stop_tokens: vec![stop],
            early_stopping: EarlyStopping::WhenFull,
            ..beams(2, 6)
        };
        let got = beam_search(&m, std::slice::from_ref(&prompt), &opts).unwrap();
        assert!(!got[0].is_empty());
        for b in &got[0] {
            assert!(!b.tokens.contains(&stop), "{b:?}");
            // A hypothesis shorter than the limit ended at the stop token, which its score
            // includes.
            if b.tokens.len() < 6 {
                let mut with_stop = b.tokens.clone();
                with_stop.push(stop);
                let want = score(&m, &prompt, &with_stop) / with_stop.len() as f64;
                assert!((b.score - want).abs() < 1e-4, "{b:?} want {want}");
            }
        }
    }

    #[test]
    fn bad_options_are_named() {
        let m = model(26);
        let err = beam_search(&m, &[vec![1]], &beams(0, 3)).unwrap_err();
        assert!(err.to_string().contains("num_beams"), "{err}");
        let err = beam_search(&m, &[vec![1; 30]], &beams(2, 20)).unwrap_err();
        assert!(err.to_string().contains("max_seq_len 40"), "{err}");
    }
}
