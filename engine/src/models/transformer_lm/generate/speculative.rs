//! Speculative decoding: a cheap drafter proposes a few tokens, the target model scores them
//! all in one pass over its cache, and the longest prefix it agrees with is kept, plus one
//! token of its own. The acceptance rule (Leviathan et al. 2023; Chen et al. 2023) keeps the
//! target's distribution exactly: draft token d, drawn from the drafter's q, stays with
//! probability min(1, p(d) / q(d)); where it does not, the replacement is drawn from
//! max(0, p - q) renormalised. Under greedy decoding p and q are one-hot, so a draft token
//! stays only where it is the target's own argmax, and the output is the target's greedy
//! output token for token.
//!
//! Drafters: a smaller model with the same vocabulary (its own cache, rewound to what the
//! target kept), or prompt lookup, which proposes what followed the text's last n-gram where it
//! appeared before (no model: q is one-hot on the copied token).

use super::decode::{check_prompts, host_f32, prefill};
use super::sampler::{Candidates, Sampler, SamplingOptions};
use super::step::{DecodeStep, StepOutput};
use super::{Flow, GenerateOptions};
use crate::models::transformer_lm::{KvCache, TransformerLm};
use crate::{no_grad, Error, Result, Tensor};

/// Where the proposed tokens come from.
pub enum Drafter<'a> {
    /// A model with the target's vocabulary proposes `tokens` at a time, sampled with the
    /// target's options.
    Model {
        model: &'a TransformerLm,
        tokens: usize,
    },
    /// Up to `tokens` tokens that followed the last `max_ngram`-gram (or a shorter one) at its
    /// first earlier appearance in the prompt or the text so far.
    PromptLookup { tokens: usize, max_ngram: usize },
}

/// How the drafts fared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpeculationStats {
    /// Draft tokens proposed.
    pub proposed: usize,
    /// Draft tokens the target kept.
    pub accepted: usize,
    /// Passes of the target model (the prompt's included).
    pub target_passes: usize,
}

/// Generates after one prompt with drafts checked by `target`: the same tokens as
/// `generate` under greedy decoding, and the same distribution when sampling. Returns the
/// new tokens and how the drafts fared.
pub fn generate_speculative(
    target: &TransformerLm,
    drafter: Drafter,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(u32) -> Result<Flow>,
) -> Result<(Vec<u32>, SpeculationStats)> {
    check_prompts(target, &[prompt.to_vec()], opts.max_new_tokens)?;
    match &drafter {
        Drafter::Model { model, tokens } => {
            if model.config.vocab_size != target.config.vocab_size {
                return Err(Error::invalid(
                    "speculative decoding",
                    format!(
                        "the draft model has {} tokens, the target {}: they must share one vocabulary",
                        model.config.vocab_size, target.config.vocab_size
                    ),
                ));
            }
            if model.device() != target.device() {
                return Err(Error::invalid(
                    "speculative decoding",
                    format!(
                        "the draft model is on {:?}, the target on {:?}",
                        model.device(),
                        target.device()
                    ),
                ));
            }
            check_prompts(model, &[prompt.to_vec()], opts.max_new_tokens)?;
            if *tokens == 0 {
                return Err(Error::invalid(
                    "speculative decoding",
                    "draft tokens must be at least 1",
                ));
            }
        }
        Drafter::PromptLookup { tokens, max_ngram } => {
            if *tokens == 0 || *max_ngram == 0 {
                return Err(Error::invalid(
                    "prompt lookup",
                    format!("tokens ({tokens}) and max_ngram ({max_ngram}) must be at least 1"),
                ));
            }
        }
    }
    if opts.max_new_tokens == 0 {
        return Ok((Vec::new(), SpeculationStats::default()));
    }
    no_grad(|| Speculation::new(target, drafter, prompt, opts)?.run(on_token))
}

struct Speculation<'m> {
    target: &'m TransformerLm,
    cache: KvCache,
    draft: Draft<'m>,
    sampler: Sampler,
    prompt: &'m [u32],
    opts: &'m GenerateOptions,
    out: Vec<u32>,
    stats: SpeculationStats,
    /// The target's logits after the prompt.
    first: Vec<f32>,
    /// When the call began, for `max_time`.
    started: std::time::Instant,
}

enum Draft<'m> {
    Model(Box<DraftModel<'m>>),
    Lookup { tokens: usize, max_ngram: usize },
}

impl<'m> Speculation<'m> {
    fn new(
        target: &'m TransformerLm,
        drafter: Drafter<'m>,
        prompt: &'m [u32],
        opts: &'m GenerateOptions,
    ) -> Result<Self> {
        let started = std::time::Instant::now();
        let sampler = Sampler::new(opts.sampling.clone())?;
        let draft = match drafter {
            Drafter::Model { model, tokens } => Draft::Model(Box::new(DraftModel::new(
                model,
                prompt.len(),
                tokens,
                opts,
            )?)),
            Drafter::PromptLookup { tokens, max_ngram } => Draft::Lookup { tokens, max_ngram },
        };
        let (cache, logits) = prefill(target, &[prompt.to_vec()], opts.max_new_tokens)?;
        Ok(Speculation {
            target,
            cache,
            draft,
            sampler,
            prompt,
            opts,
            out: Vec::new(),
            stats: SpeculationStats {
                target_passes: 1,
                ..Default::default()
            },
            first: host_f32(&logits)?,
            started,
        })
    }

    fn run(
        mut self,
        on_token: &mut dyn FnMut(u32) -> Result<Flow>,
    ) -> Result<(Vec<u32>, SpeculationStats)> {
        let p = self.candidates(&self.first, &[]);
        let mut next = self.sampler.draw(&p);
        // `next` is the one token of the text not yet in the target's cache.
        while self.emit(next, on_token)? {
            crate::cancel::check()?;
            let room = self.opts.max_new_tokens - self.out.len() - 1;
            let (drafts, qs) = self.propose(room)?;
            self.stats.proposed += drafts.len();
            let fed: Vec<i64> = std::iter::once(next)
                .chain(drafts.iter().copied())
                .map(|t| t as i64)
                .collect();
            let before = self.cache.len();
            let n = fed.len();
            let hidden = self
                .target
                .hidden_for_head(&Tensor::from_vec(fed, &[1, n])?, Some(&mut self.cache))?;
            let logits = host_f32(&self.target.project(&hidden)?)?;
            self.stats.target_passes += 1;
            let vocab = self.target.config.vocab_size;
            let mut kept = 0;
            next = loop {
                let row = &logits[kept * vocab..(kept + 1) * vocab];
                let p = self.candidates(row, &drafts[..kept]);
                let Some(&d) = drafts.get(kept) else {
                    // Every draft kept: the target's own next token comes free.
                    break self.sampler.draw(&p);
                };
                match verify(&p, &qs[kept], d, &mut self.sampler) {
                    None => kept += 1,
                    Some(replacement) => break replacement,
                }
            };
            self.stats.accepted += kept;
            // The cache keeps the token fed first and the drafts kept.
            self.cache.rewind(before + 1 + kept)?;
            for &d in &drafts[..kept] {
                if !self.emit(d, on_token)? {
                    return Ok((self.out, self.stats));
                }
            }
            if let Draft::Model(m) = &mut self.draft {
                m.keep(self.prompt.len() + self.out.len())?;
            }
        }
        Ok((self.out, self.stats))
    }

    /// The target's distribution from one row of logits, after the text so far plus
    /// `pending` (drafts kept in this round but not yet emitted).
    fn candidates(&self, logits: &[f32], pending: &[u32]) -> Candidates {
        let generated: Vec<u32> = self.out.iter().chain(pending).copied().collect();
        self.sampler
            .candidates(&mut logits.to_vec(), self.prompt, &generated)
    }

    /// Appends `token` unless it ends the text; whether generation goes on.
    fn emit(&mut self, token: u32, on_token: &mut dyn FnMut(u32) -> Result<Flow>) -> Result<bool> {
        if self.opts.stop_tokens.contains(&token) {
            return Ok(false);
        }
        self.out.push(token);
        let go_on = on_token(token)? == Flow::Continue;
        Ok(go_on
            && self.out.len() < self.opts.max_new_tokens
            && !self.opts.out_of_time(self.started))
    }

    /// Up to `room` draft tokens after the text, each with the distribution it was drawn from.
    fn propose(&mut self, room: usize) -> Result<(Vec<u32>, Vec<Candidates>)> {
        let text: Vec<u32> = self.prompt.iter().chain(&self.out).copied().collect();
        match &mut self.draft {
            Draft::Model(m) => m.propose(&text, self.prompt.len(), room),
            Draft::Lookup { tokens, max_ngram } => {
                let mut drafts = lookup(&text, *max_ngram, (*tokens).min(room));
                if let Some(i) = drafts
                    .iter()
                    .position(|t| self.opts.stop_tokens.contains(t))
                {
                    drafts.truncate(i + 1);
                }
                let qs = drafts.iter().map(|&d| certain(d)).collect();
                Ok((drafts, qs))
            }
        }
    }
}

/// A draft model and its own cache of the text.
struct DraftModel<'m> {
    model: &'m TransformerLm,
    cache: KvCache,
    step: DecodeStep<'m>,
    sampler: Sampler,
    tokens: usize,
}

impl<'m> DraftModel<'m> {
    fn new(
        model: &'m TransformerLm,
        prompt: usize,
        tokens: usize,
        opts: &GenerateOptions,
    ) -> Result<Self> {
        // The draft draws with the target's options but its own stream of numbers.
        let sampling = SamplingOptions {
            seed: opts.sampling.seed ^ 0x9e37_79b9_7f4a_7c15,
            ..opts.sampling.clone()
        };
        let greedy = sampling.is_plain_greedy();
        Ok(DraftModel {
            model,
            cache: model.new_cache(1, prompt + opts.max_new_tokens)?,
            step: DecodeStep::new(model, 1, greedy, opts.cuda_graph)?,
            sampler: Sampler::new(sampling)?,
            tokens,
        })
    }

    /// Feeds what the cache lacks of `text`, then drafts up to `room` tokens one step at a
    /// time (the last one drafted is not fed: the next round's text starts with it if kept).
    fn propose(
        &mut self,
        text: &[u32],
        prompt: usize,
        room: usize,
    ) -> Result<(Vec<u32>, Vec<Candidates>)> {
        let n = self.tokens.min(room);
        let (mut drafts, mut qs) = (Vec::with_capacity(n), Vec::with_capacity(n));
        if n == 0 {
            return Ok((drafts, qs));
        }
        let missing: Vec<i64> = text[self.cache.len()..].iter().map(|&t| t as i64).collect();
        let m = missing.len();
        let hidden = self
            .model
            .hidden_for_head(&Tensor::from_vec(missing, &[1, m])?, Some(&mut self.cache))?;
        let logits = host_f32(&self.model.project(&hidden.narrow(1, m - 1, 1)?)?)?;
        let (prompt_ids, generated) = text.split_at(prompt);
        let mut generated = generated.to_vec();
        let mut q = self
            .sampler
            .candidates(&mut logits.clone(), prompt_ids, &generated);
        loop {
            let d = self.sampler.draw(&q);
            drafts.push(d);
            qs.push(q);
            generated.push(d);
            if drafts.len() == n {
                return Ok((drafts, qs));
            }
            q = match self.step.run(&mut self.cache, &[d])? {
                StepOutput::Picks(p) => certain(p[0]),
                StepOutput::Logits(mut l) => {
                    self.sampler.candidates(&mut l, prompt_ids, &generated)
                }
            };
        }
    }

    /// Forgets what the cache holds past the first `len` tokens of the text.
    fn keep(&mut self, len: usize) -> Result<()> {
        self.cache.rewind(len.min(self.cache.len()))
    }
}

/// The acceptance test of draft token `d`, drawn from `q`, against the target's `p`: `None`
/// keeps it; otherwise the token drawn in its place.
fn verify(p: &Candidates, q: &Candidates, d: u32, sampler: &mut Sampler) -> Option<u32> {
    let (pd, qd) = (p.prob(d), q.prob(d));
    // q(d) > 0 since d was drawn from q; p(d) >= q(d) keeps it without a draw.
    if pd >= qd || (pd > 0.0 && sampler.uniform() < pd / qd) {
        return None;
    }
    Some(match p.residual(q) {
        Some(r) => sampler.draw(&r),
        None => sampler.draw(p),
    })
}

/// A distribution certain of `token`.
fn certain(token: u32) -> Candidates {
    Candidates {
        ids: vec![token],
        probs: vec![1.0],
    }
}

/// Up to `n` tokens that followed the text's last `max_ngram`-gram (trying shorter ones
/// down to a single token) at its first earlier appearance: transformers' prompt lookup.
fn lookup(text: &[u32], max_ngram: usize, n: usize) -> Vec<u32> {
    let len = text.len();
    for size in (1..=max_ngram.min(len.saturating_sub(1))).rev() {
        let tail = &text[len - size..];
        let found = text
            .windows(size)
            .enumerate()
            .find(|&(i, w)| w == tail && i + size < len);
        if let Some((i, _)) = found {
            let start = i + size;
            return text[start..(start + n).min(len)].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{greedy, model, reference_greedy};
    use super::*;
    use crate::models::transformer_lm::LmConfig;
    use crate::Generator;

    fn run(
        target: &TransformerLm,
        drafter: Drafter,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> (Vec<u32>, SpeculationStats) {
        generate_speculative(target, drafter, prompt, opts, &mut |_| Ok(Flow::Continue)).unwrap()
    }

    #[test]
    fn greedy_output_is_the_targets_own_with_a_draft_that_often_disagrees() {
        let (target, draft) = (model(31), model(32));
        let prompt = [3u32, 14, 15, 9];
        let (got, stats) = run(
            &target,
            Drafter::Model {
                model: &draft,
                tokens: 3,
            },
            &prompt,
            &greedy(14),
        );
        assert_eq!(got, reference_greedy(&target, &prompt, 14));
        assert!(stats.accepted < stats.proposed, "{stats:?}");
    }

    #[test]
    fn a_draft_that_always_agrees_saves_target_passes() {
        let target = model(33);
        let prompt = [2u32, 7];
        let (got, stats) = run(
            &target,
            Drafter::Model {
                model: &target,
                tokens: 4,
            },
            &prompt,
            &greedy(11),
        );
        assert_eq!(got, reference_greedy(&target, &prompt, 11));
        assert_eq!(stats.accepted, stats.proposed);
        // The prompt's pass gives token 1; each later pass 4 drafts plus its own.
        assert_eq!(stats.target_passes, 3, "{stats:?}");
    }

    #[test]
    fn prompt_lookup_keeps_greedy_output_and_copies_repeats() {
        let target = model(34);
        let prompt: Vec<u32> = [5u32, 6, 7, 8].repeat(3);
        let lookup = Drafter::PromptLookup {
            tokens: 4,
            max_ngram: 2,
        };
        let (got, stats) = run(&target, lookup, &prompt, &greedy(12));
        assert_eq!(got, reference_greedy(&target, &prompt, 12));
        assert!(stats.proposed > 0, "{stats:?}");
    }

    #[test]
    fn lookup_takes_the_first_earlier_match_of_the_longest_ngram() {
        // "1 2" appears first at 0 (followed by 3 4), the single "2" later too.
        assert_eq!(lookup(&[1, 2, 3, 4, 9, 2, 5, 1, 2], 2, 3), [3, 4, 9]);
        assert_eq!(lookup(&[7, 2, 5, 8, 2], 2, 2), [5, 8]);
        assert_eq!(lookup(&[1, 2, 3], 2, 2), Vec::<u32>::new());
    }

    #[test]
    fn the_acceptance_rule_keeps_the_targets_distribution() {
        let p = Candidates {
            ids: vec![0, 1, 2, 3],
            probs: vec![0.5, 0.3, 0.15, 0.05],
        };
        let q = Candidates {
            ids: vec![3, 2, 1, 0],
            probs: vec![0.4, 0.3, 0.2, 0.1],
        };
        let mut drafter = Sampler::new(SamplingOptions {
            seed: 1,
            ..Default::default()
        })
        .unwrap();
        let mut target = Sampler::new(SamplingOptions {
            seed: 2,
            ..Default::default()
        })
        .unwrap();
        let n = 40_000;
        let mut counts = [0usize; 4];
        for _ in 0..n {
            let d = drafter.draw(&q);
            let kept = verify(&p, &q, d, &mut target).unwrap_or(d);
            counts[kept as usize] += 1;
        }
        for (c, want) in counts.iter().zip(&p.probs) {
            let got = *c as f64 / n as f64;
            assert!((got - want).abs() < 0.01, "{counts:?}");
        }
    }

    #[test]
    fn seeded_speculative_sampling_repeats() {
        let (target, draft) = (model(35), model(36));
        let opts = GenerateOptions {
            max_new_tokens: 10,
            sampling: SamplingOptions {
                temperature: 0.8,
                top_k: 10,
                seed: 9,
                ..Default::default()
            },
            ..Default::default()
        };
        let drafter = || Drafter::Model {
            model: &draft,
            tokens: 3,
        };
        let a = run(&target, drafter(), &[1, 2], &opts).0;
        assert_eq!(a.len(), 10);
        assert_eq!(a, run(&target, drafter(), &[1, 2], &opts).0);
    }

    #[test]
    fn stop_tokens_and_the_callback_end_the_text() {
        let target = model(37);
        let prompt = [4u32, 4];
        let free = reference_greedy(&target, &prompt, 10);
        let opts = GenerateOptions {
            stop_tokens: vec![free[5]],
            ..greedy(10)
        };
        let first = free.iter().position(|&t| t == free[5]).unwrap();
        let drafter = || Drafter::Model {
            model: &target,
            tokens: 3,
        };
        assert_eq!(run(&target, drafter(), &prompt, &opts).0, free[..first]);
        let mut seen = Vec::new();
        let (got, _) = generate_speculative(&target, drafter(), &prompt, &greedy(10), &mut |t| {
            seen.push(t);
            Ok(if seen.len() == 4 {
                Flow::Stop
            } else {
                Flow::Continue
            })
        })
        .unwrap();
        assert_eq!(got, free[..4]);
        assert_eq!(seen, free[..4]);
    }

    #[test]
    fn a_draft_with_another_vocabulary_is_refused_by_name() {
        let target = model(38);
        let mut c = LmConfig::new(31, 16, 1, 4);
        c.max_seq_len = 40;
        let draft = TransformerLm::new(c, &mut Generator::new(1)).unwrap();
        let err = generate_speculative(
            &target,
            Drafter::Model {
                model: &draft,
                tokens: 2,
            },
            &[1],
            &greedy(3),
            &mut |_| Ok(Flow::Continue),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("31 tokens, the target 29"),
            "{err}"
        );
    }
}
