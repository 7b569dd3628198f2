//! Picks the next token from one row of logits. Order as in `transformers`: penalties first,
//! then temperature, then the top-k, top-p and min-p filters, then a draw from what is left.
//! Temperature 0 means greedy (the penalties still apply).

use crate::{Error, Generator, Result};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingOptions {
    /// 0 picks the most likely token.
    pub temperature: f64,
    /// Keep only the k most likely tokens (0 keeps all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches p (1 keeps all).
    pub top_p: f64,
    /// Drop tokens less likely than min_p times the most likely one (0 keeps all).
    pub min_p: f64,
    /// Divides positive (multiplies negative) logits of every token already in the sequence,
    /// prompt included, as `transformers` does (1 is off).
    pub repetition_penalty: f64,
    /// Subtracted once from the logit of every token generated so far (OpenAI's definition).
    pub presence_penalty: f64,
    /// Subtracted per occurrence of a token generated so far.
    pub frequency_penalty: f64,
    pub seed: u64,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplingOptions {
    pub fn greedy() -> Self {
        SamplingOptions {
            temperature: 0.0,
            ..Default::default()
        }
    }

    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            problems.push(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            problems.push(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            problems.push(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            problems.push(format!(
                "repetition_penalty must be positive, got {}",
                self.repetition_penalty
            ));
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !v.is_finite() {
                problems.push(format!("{name} must be finite, got {v}"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid("sampling", problems.join("; ")))
        }
    }

    /// Whether the pick needs nothing but an argmax of the raw logits (which can run on the
    /// device, so only one id per sequence comes back to the host).
    pub fn is_plain_greedy(&self) -> bool {
        self.temperature == 0.0
            && self.repetition_penalty == 1.0
            && self.presence_penalty == 0.0
            && self.frequency_penalty == 0.0
    }
}

/// A distribution over tokens: the ids with their probabilities (summing to 1), most likely
/// first; the tokens left out have probability 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidates {
    pub ids: Vec<u32>,
    pub probs: Vec<f64>,
}

impl Candidates {
    /// The probability of `id`.
    pub fn prob(&self, id: u32) -> f64 {
        self.ids
            .iter()
            .position(|&i| i == id)
            .map_or(0.0, |i| self.probs[i])
    }

    /// max(0, self - other), renormalised: what speculative sampling draws from after it
    /// rejects a draft token, so that the kept token follows `self` exactly. `None` where
    /// nothing is left (the two are equal).
    pub fn residual(&self, other: &Candidates) -> Option<Candidates> {
        let q: HashMap<u32, f64> = other.ids.iter().copied().zip(other.probs.clone()).collect();
        let (ids, probs): (Vec<u32>, Vec<f64>) = self
            .ids
            .iter()
            .zip(&self.probs)
            .map(|(&id, &p)| (id, (p - q.get(&id).unwrap_or(&0.0)).max(0.0)))
            .filter(|&(_, p)| p > 0.0)
            .unzip();
        let total: f64 = probs.iter().sum();
        (total > 0.0).then(|| Candidates {
            ids,
            probs: probs.into_iter().map(|p| p / total).collect(),
        })
    }
}

pub struct Sampler {
    opts: SamplingOptions,
    gen: Generator,
}

impl Sampler {
    pub fn new(opts: SamplingOptions) -> Result<Self> {
        opts.validate()?;
        let gen = Generator::new(opts.seed);
        Ok(Sampler { opts, gen })
    }

    pub fn options(&self) -> &SamplingOptions {
        &self.opts
    }

    /// The next token for one sequence: `context` is the prompt, `generated` what came after.
    pub fn pick(&mut self, logits: &mut [f32], context: &[u32], generated: &[u32]) -> u32 {
        let c = self.candidates(logits, context, generated);
        self.draw(&c)
    }

    /// What a pick draws from: the penalties, the temperature and the filters applied to one
    /// row of logits. Greedy leaves the most likely token alone, with probability 1.
    pub fn candidates(&self, logits: &mut [f32], context: &[u32], generated: &[u32]) -> Candidates {
        self.apply_penalties(logits, context, generated);
        if self.opts.temperature == 0.0 {
            return Candidates {
                ids: vec![argmax(logits)],
                probs: vec![1.0],
            };
        }
        let inv_t = 1.0 / self.opts.temperature;
        // Candidates by descending logit; ties keep the lower id first, so picks are stable.
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        let k = match self.opts.top_k {
            0 => logits.len(),
            k => k.min(logits.len()),
        };
        let by_logit = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        if k < order.len() {
            order.select_nth_unstable_by(k - 1, by_logit);
            order.truncate(k);
        }
        order.sort_unstable_by(by_logit);
        let top = logits[order[0] as usize] as f64;
        let mut probs: Vec<f64> = order
            .iter()
            .map(|&i| ((logits[i as usize] as f64 - top) * inv_t).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        let mut keep = probs.len();
        if self.opts.top_p < 1.0 {
            let mut cum = 0.0;
            keep = probs
                .iter()
                .position(|p| {
                    cum += p;
                    cum >= self.opts.top_p
                })
                .map_or(probs.len(), |i| i + 1);
        }
        if self.opts.min_p > 0.0 {
            let floor = self.opts.min_p * probs[0];
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        order.truncate(keep);
        probs.truncate(keep);
        let kept: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= kept);
        Candidates { ids: order, probs }
    }

    /// One token drawn from `c` (no draw, so no step of the generator, where one token is
    /// certain).
    pub fn draw(&mut self, c: &Candidates) -> u32 {
        if c.ids.len() == 1 {
            return c.ids[0];
        }
        let mut u = self.gen.uniform(1)[0];
        for (&id, p) in c.ids.iter().zip(&c.probs) {
            u -= p;
            if u < 0.0 {
                return id;
            }
        }
        c.ids[c.ids.len() - 1]
    }

    /// A uniform draw in [0, 1) from the sampler's generator (speculative decoding's
    /// acceptance test).
    pub fn uniform(&mut self) -> f64 {
        self.gen.uniform(1)[0]
    }

    fn apply_penalties(&self, logits: &mut [f32], context: &[u32], generated: &[u32]) {
        let o = &self.opts;
        if o.repetition_penalty != 1.0 {
            let mut seen = vec![false; logits.len()];
            for &t in context.iter().chain(generated) {
                if let Some(s) = seen.get_mut(t as usize).filter(|s| !**s) {
                    *s = true;
                    let l = &mut logits[t as usize];
                    let p = o.repetition_penalty as f32;
                    *l = if *l > 0.0 { *l / p } else { *l * p };
                }
            }
        }
        if o.presence_penalty != 0.0 || o.frequency_penalty != 0.0 {
            let mut counts: HashMap<u32, usize> = HashMap::new();
            for &t in generated {
                *counts.entry(t).or_default() += 1;
            }
            for (t, n) in counts {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l -= (o.presence_penalty + o.frequency_penalty * n as f64) as f32;
                }
            }
        }
    }
}

/// The index of the largest logit (the lowest index among ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] || logits[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(opts: SamplingOptions) -> Sampler {
        Sampler::new(opts).unwrap()
    }

    fn counts(opts: SamplingOptions, logits: &[f32], draws: usize) -> Vec<usize> {
        let mut s = sampler(opts);
        let mut c = vec![0; logits.len()];
        for _ in 0..draws {
            c[s.pick(&mut logits.to_vec(), &[], &[]) as usize] += 1;
        }
        c
    }

    #[test]
    fn greedy_picks_the_largest_logit() {
        let mut s = sampler(SamplingOptions::greedy());
        assert_eq!(s.pick(&mut [0.1, 2.0, -1.0, 2.0], &[], &[]), 1);
    }

    #[test]
    fn sampling_follows_the_softmax_probabilities() {
        let logits = [0f32, (2f32).ln(), (5f32).ln()]; // probabilities 1/8, 2/8, 5/8
        let c = counts(SamplingOptions::default(), &logits, 8000);
        for (got, want) in c.iter().zip([1000.0, 2000.0, 5000.0]) {
            assert!((*got as f64 - want).abs() < 0.08 * want, "{c:?}");
        }
    }

    #[test]
    fn top_k_top_p_and_min_p_cut_the_tail() {
        let logits = [0f32, (2f32).ln(), (5f32).ln(), -1e9];
        let only = |opts| {
            counts(opts, &logits, 500)
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        let d = SamplingOptions::default;
        assert_eq!(only(SamplingOptions { top_k: 2, ..d() }), [1, 2]);
        // 5/8 alone does not reach 0.7; with 2/8 it does.
        assert_eq!(only(SamplingOptions { top_p: 0.7, ..d() }), [1, 2]);
        assert_eq!(only(SamplingOptions { top_p: 0.6, ..d() }), [2]);
        // min_p 0.3: 2/8 >= 0.3 * 5/8, 1/8 is not.
        assert_eq!(only(SamplingOptions { min_p: 0.3, ..d() }), [1, 2]);
    }

    #[test]
    fn the_same_seed_draws_the_same_tokens() {
        let logits = [0.5f32, 0.1, 0.3, 0.2, 0.9];
        let opts = SamplingOptions {
            seed: 7,
            ..Default::default()
        };
        assert_eq!(counts(opts.clone(), &logits, 50), counts(opts, &logits, 50));
        let other = SamplingOptions {
            seed: 8,
            ..Default::default()
        };
        let mut a = sampler(SamplingOptions {
            seed: 7,
            ..Default::default()
        });
        let mut b = sampler(other);
        let seq_a: Vec<u32> = (0..30)
            .map(|_| a.pick(&mut logits.to_vec(), &[], &[]))
            .collect();
        let seq_b: Vec<u32> = (0..30)
            .map(|_| b.pick(&mut logits.to_vec(), &[], &[]))
            .collect();
        assert_ne!(seq_a, seq_b);
    }

    #[test]
    fn penalties_follow_their_definitions() {
        let s = sampler(SamplingOptions {
            repetition_penalty: 2.0,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..Default::default()
        });
        let mut logits = [4f32, -4.0, 1.0, 1.0];
        s.apply_penalties(&mut logits, &[0, 1], &[2, 2]);
        // Token 0: 4 / 2; token 1: -4 * 2; token 2 (seen twice): 1 / 2 - 0.5 - 2 * 0.25.
        assert_eq!(logits, [2.0, -8.0, -0.5, 1.0]);
    }

    #[test]
    fn bad_options_are_named() {
        let msg = Sampler::new(SamplingOptions {
            top_p: 0.0,
            temperature: -1.0,
            ..Default::default()
        })
        .err()
        .unwrap()
        .to_string();
        assert!(
            msg.contains("top_p") && msg.contains("temperature"),
            "{msg}"
        );
    }
}
