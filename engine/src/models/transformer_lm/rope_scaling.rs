//! RoPE scaling as transformers reads it from `rope_scaling` (or transformers 5's
//! `rope_parameters`): the inverse frequencies of a longer context, and the factor the cos and
//! sin tables are scaled by. `linear` divides every frequency; `llama3` divides only the low
//! ones and blends the middle band (Llama 3.1); `yarn` blends interpolated and extrapolated
//! frequencies by a ramp over the dimensions and scales attention by 0.1 ln(factor) + 1.
//! `longrope` (Phi-3) has two sets of per-dimension factors, the short one for calls within
//! the pretrained context and the long one beyond it, and scales cos and sin by
//! sqrt(1 + ln(factor) / ln(original context)). `dynamic` (NTK-aware) keeps the plain
//! frequencies within the pretrained context and raises the base for a call of length L past it:
//! theta * (factor * L / context - (factor - 1))^(d / (d - 2)).

use serde::{Deserialize, Serialize};
use std::f64::consts::PI;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum RopeScaling {
    Linear {
        factor: f64,
    },
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
    Yarn {
        factor: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        original_max_position_embeddings: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        beta_fast: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        beta_slow: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mscale: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mscale_all_dim: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attention_factor: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        truncate: Option<bool>,
    },
    Longrope {
        short_factor: Vec<f64>,
        long_factor: Vec<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        factor: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attention_factor: Option<f64>,
        original_max_position_embeddings: usize,
    },
    Dynamic {
        factor: f64,
        /// The pretrained context, past which the base grows (transformers' max_position_embeddings).
        original_max_position_embeddings: usize,
    },
}

/// The frequencies of calls that reach past the pretrained context, where a scaling has them.
#[derive(Clone, Debug, PartialEq)]
pub enum Beyond {
    /// LongRoPE: one set for every call past `context`.
    Long { context: usize, freqs: Vec<f64> },
    /// Dynamic NTK: a set per length past `context`, from a base raised with it.
    Dynamic {
        context: usize,
        factor: f64,
        theta: f64,
        head_dim: usize,
    },
}

impl Beyond {
    /// The pretrained context: calls within it rotate by the configured frequencies.
    pub fn context(&self) -> usize {
        match *self {
            Beyond::Long { context, .. } | Beyond::Dynamic { context, .. } => context,
        }
    }

    /// The frequencies of a call reaching `reach` positions (past the context).
    pub fn frequencies(&self, reach: usize) -> Vec<f64> {
        match self {
            Beyond::Long { freqs, .. } => freqs.clone(),
            &Beyond::Dynamic {
                context,
                factor,
                theta,
                head_dim,
            } => {
                let d = head_dim as f64;
                let grown = factor * reach as f64 / context as f64 - (factor - 1.0);
                base_frequencies(head_dim, theta * grown.powf(d / (d - 2.0)))
            }
        }
    }
}

/// The plain frequencies theta^(-2i/d), i < d/2.
pub fn base_frequencies(head_dim: usize, theta: f64) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f64 / head_dim as f64))
        .collect()
}

impl RopeScaling {
    /// Everything the factors must satisfy, as one message per problem.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let factor = match self {
            RopeScaling::Linear { factor }
            | RopeScaling::Llama3 { factor, .. }
            | RopeScaling::Yarn { factor, .. }
            | RopeScaling::Dynamic { factor, .. } => *factor,
            RopeScaling::Longrope { factor, .. } => factor.unwrap_or(1.0),
        };
        if !(factor > 0.0 && factor.is_finite()) {
            out.push(format!(
                "rope_scaling factor must be positive, got {factor}"
            ));
        }
        if let RopeScaling::Dynamic {
            factor,
            original_max_position_embeddings,
        } = self
        {
            if *factor < 1.0 {
                out.push(format!(
                    "dynamic rope_scaling needs a factor of at least 1, got {factor}"
                ));
            }
            if *original_max_position_embeddings == 0 {
                out.push("original_max_position_embeddings must be positive".into());
            }
        }
        if let RopeScaling::Llama3 {
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
            ..
        } = self
        {
            if !(high_freq_factor > low_freq_factor && *low_freq_factor > 0.0) {
                out.push(format!(
                    "llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor, got {low_freq_factor} and {high_freq_factor}"
                ));
            }
            if *original_max_position_embeddings == 0 {
                out.push("original_max_position_embeddings must be positive".into());
            }
        }
        out
    }

    /// The frequencies of calls that reach past the pretrained context: LongRoPE's long set,
    /// or dynamic NTK's growing base; `None` for the scalings that have one set throughout.
    pub fn beyond(&self, head_dim: usize, theta: f64) -> Option<Beyond> {
        match self {
            RopeScaling::Longrope {
                long_factor,
                original_max_position_embeddings,
                ..
            } => Some(Beyond::Long {
                context: *original_max_position_embeddings,
                freqs: divided(&base_frequencies(head_dim, theta), long_factor),
            }),
            RopeScaling::Dynamic {
                factor,
                original_max_position_embeddings,
            } => Some(Beyond::Dynamic {
                context: *original_max_position_embeddings,
                factor: *factor,
                theta,
                head_dim,
            }),
            _ => None,
        }
    }

    /// The scaled inverse frequencies and the factor on cos and sin, for heads of `head_dim`
    /// with base `theta` and a config of `max_positions` (LongRoPE's short ones).
    pub fn frequencies(
        &self,
        head_dim: usize,
        theta: f64,
        max_positions: usize,
    ) -> (Vec<f64>, f64) {
        let base = base_frequencies(head_dim, theta);
        if let RopeScaling::Longrope {
            short_factor,
            factor,
            attention_factor,
            original_max_position_embeddings: old,
            ..
        } = self
        {
            let factor = factor.unwrap_or(max_positions as f64 / *old as f64);
            let attention = attention_factor.unwrap_or(match factor <= 1.0 {
                true => 1.0,
                false => (1.0 + factor.ln() / (*old as f64).ln()).sqrt(),
            });
            return (divided(&base, short_factor), attention);
        }
        match *self {
            RopeScaling::Longrope { .. } => unreachable!("handled above"),
            RopeScaling::Dynamic { .. } => (base, 1.0),
            RopeScaling::Linear { factor } => (base.iter().map(|f| f / factor).collect(), 1.0),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let old = old as f64;
                let (low_wavelen, high_wavelen) = (old / low_freq_factor, old / high_freq_factor);
                let freqs = base
                    .iter()
                    .map(|&f| {
                        let wavelen = 2.0 * PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect();
                (freqs, 1.0)
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                mscale,
                mscale_all_dim,
                attention_factor,
                truncate,
            } => {
                // transformers (5.25) scales by the explicit factor, even where it differs from
                // the ratio of the context to the pretrained one (it warns), and bounds the
                // ramp by the pretrained context, which defaults to the model's.
                let old = original_max_position_embeddings.unwrap_or(max_positions) as f64;
                let get_mscale = |scale: f64, m: f64| match scale <= 1.0 {
                    true => 1.0,
                    false => 0.1 * m * scale.ln() + 1.0,
                };
                let attention = attention_factor.unwrap_or(match (mscale, mscale_all_dim) {
                    (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                        get_mscale(factor, m) / get_mscale(factor, all)
                    }
                    _ => get_mscale(factor, 1.0),
                });
                let d = head_dim as f64;
                let correction =
                    |rotations: f64| d * (old / (rotations * 2.0 * PI)).ln() / (2.0 * theta.ln());
                let (mut low, mut high) = (
                    correction(beta_fast.unwrap_or(32.0)),
                    correction(beta_slow.unwrap_or(1.0)),
                );
                if truncate.unwrap_or(true) {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
                if low == high {
                    high += 0.001;
                }
                let freqs = base
                    .iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolation = 1.0 - ramp;
                        (f / factor) * (1.0 - extrapolation) + f * extrapolation
                    })
                    .collect();
                (freqs, attention)
            }
        }
    }
}

/// Each frequency over its dimension's factor (LongRoPE's), a missing factor counting as 1.
fn divided(base: &[f64], factors: &[f64]) -> Vec<f64> {
    base.iter()
        .enumerate()
        .map(|(i, f)| f / factors.get(i).copied().unwrap_or(1.0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yarn(factor: f64, original: Option<usize>) -> RopeScaling {
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings: original,
            beta_fast: None,
            beta_slow: None,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            truncate: None,
        }
    }

    /// transformers 5.25 takes YaRN's explicit factor even where the two contexts imply
    /// another (Qwen3's 40960 / 32768 is 1.25, its factor 4), and the pretrained context bounds
    /// the ramp.
    #[test]
    fn yarn_takes_its_explicit_factor_and_the_pretrained_context() {
        let (given, scale) = yarn(4.0, Some(32768)).frequencies(64, 1e6, 40960);
        let (same, same_scale) = yarn(4.0, None).frequencies(64, 1e6, 32768);
        assert_eq!(given, same);
        assert!(
            (scale - same_scale).abs() < 1e-12 && (scale - (0.1 * 4.0f64.ln() + 1.0)).abs() < 1e-12
        );
    }

    /// Dynamic NTK at the pretrained context is the plain base; at twice it with factor 2 the
    /// base grows by 3^(d / (d - 2)).
    #[test]
    fn dynamic_ntk_raises_the_base_with_the_length_past_the_context() {
        let scaling = RopeScaling::Dynamic {
            factor: 2.0,
            original_max_position_embeddings: 16,
        };
        let beyond = scaling.beyond(8, 10000.0).unwrap();
        assert_eq!(beyond.frequencies(16), base_frequencies(8, 10000.0));
        let want = base_frequencies(8, 10000.0 * 3f64.powf(8.0 / 6.0));
        assert_eq!(beyond.frequencies(32), want);
        assert_eq!(
            scaling.frequencies(8, 10000.0, 32).0,
            base_frequencies(8, 10000.0)
        );
    }

    #[test]
    fn llama3_keeps_high_frequencies_and_divides_low_ones() {
        let scaling = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        };
        let base = base_frequencies(128, 500000.0);
        let (freqs, scale) = scaling.frequencies(128, 500000.0, 131072);
        assert_eq!((freqs[0], scale), (base[0], 1.0));
        assert!((freqs[63] - base[63] / 8.0).abs() < 1e-18);
    }
}
