//! What every diffusers scheduler shares: the training noise schedule (betas → ᾱ), how the
//! inference timesteps are spaced over the training ones, the σ table and its Karras
//! respacing, and the prediction the model makes. The arithmetic is diffusers' (0.42), in f64;
//! diffusers computes these tables in F32, which moves them by about 1e-7 relative.

use crate::models::hf_config::Fields;
use crate::{Error, Result, Tensor};

/// What the denoiser predicts (`prediction_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prediction {
    /// The noise ε.
    Epsilon,
    /// The clean sample x₀.
    Sample,
    /// v = √ᾱ·ε − √(1−ᾱ)·x₀.
    Velocity,
}

impl Prediction {
    pub fn read(f: &Fields) -> Result<Prediction> {
        Ok(
            match f.choice(
                "prediction_type",
                "epsilon",
                &["epsilon", "sample", "v_prediction"],
            )? {
                "epsilon" => Prediction::Epsilon,
                "sample" => Prediction::Sample,
                _ => Prediction::Velocity,
            },
        )
    }
}

impl Prediction {
    /// The predicted clean sample x₀ and noise ε from the model output at ᾱ = `a` and the
    /// sample x (DDPM's and DDIM's conversion).
    pub fn x0_and_eps(self, out: &Tensor, x: &Tensor, a: f64) -> Result<(Tensor, Tensor)> {
        let b = 1.0 - a;
        Ok(match self {
            Prediction::Epsilon => (
                combine(&[(1.0 / a.sqrt(), x), (-b.sqrt() / a.sqrt(), out)])?,
                combine(&[(1.0, out)])?,
            ),
            Prediction::Sample => (
                combine(&[(1.0, out)])?,
                combine(&[(1.0 / b.sqrt(), x), (-a.sqrt() / b.sqrt(), out)])?,
            ),
            Prediction::Velocity => (
                combine(&[(a.sqrt(), x), (-b.sqrt(), out)])?,
                combine(&[(a.sqrt(), out), (b.sqrt(), x)])?,
            ),
        })
    }
}

/// How `set_timesteps` spaces the inference timesteps (`timestep_spacing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spacing {
    Linspace,
    Leading,
    Trailing,
}

impl Spacing {
    pub fn read(f: &Fields, default: &'static str) -> Result<Spacing> {
        Ok(
            match f.choice(
                "timestep_spacing",
                default,
                &["linspace", "leading", "trailing"],
            )? {
                "linspace" => Spacing::Linspace,
                "leading" => Spacing::Leading,
                _ => Spacing::Trailing,
            },
        )
    }

    /// `steps` timesteps over `train` training steps, descending, as DDPM, DDIM and the Euler
    /// schedulers place them (`linspace` keeps fractions: the Euler schedulers take them).
    pub fn timesteps(self, train: usize, steps: usize, offset: usize) -> Vec<f64> {
        match self {
            Spacing::Linspace => linspace(0.0, (train - 1) as f64, steps)
                .into_iter()
                .rev()
                .collect(),
            Spacing::Leading => {
                let ratio = train / steps;
                (0..steps)
                    .rev()
                    .map(|i| (i * ratio + offset) as f64)
                    .collect()
            }
            Spacing::Trailing => {
                let ratio = train as f64 / steps as f64;
                arange_down(train as f64, ratio)
                    .into_iter()
                    .map(|t| round_half_even(t) - 1.0)
                    .collect()
            }
        }
    }
}

impl Spacing {
    /// `timesteps` rounded to whole training timesteps (half to even, as numpy), as DDPM and
    /// DDIM hold them.
    pub fn whole_timesteps(self, train: usize, steps: usize, offset: usize) -> Vec<f64> {
        self.timesteps(train, steps, offset)
            .into_iter()
            .map(round_half_even)
            .collect()
    }
}

/// numpy's `linspace(a, b, n)`.
pub fn linspace(a: f64, b: f64, n: usize) -> Vec<f64> {
    match n {
        0 => vec![],
        1 => vec![a],
        _ => {
            let step = (b - a) / (n - 1) as f64;
            (0..n)
                .map(|i| if i == n - 1 { b } else { a + step * i as f64 })
                .collect()
        }
    }
}

/// numpy's `arange(start, 0, -step)`: start, start − step, ... while above 0.
pub fn arange_down(start: f64, step: f64) -> Vec<f64> {
    let n = (start / step).ceil() as usize;
    (0..n).map(|i| start - step * i as f64).collect()
}

/// numpy's `round` (halves to even).
pub fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

/// The training noise schedule: ᾱ_t = Π(1 − β) for each training timestep.
#[derive(Clone, Debug)]
pub struct NoiseSchedule {
    pub alphas_cumprod: Vec<f64>,
    /// Whether the betas were rescaled to a zero terminal SNR (ᾱ_T = 0).
    zero_snr: bool,
}

impl NoiseSchedule {
    /// From a scheduler config's `num_train_timesteps`, `beta_start`, `beta_end`,
    /// `beta_schedule`, `trained_betas` and `rescale_betas_zero_snr`.
    pub fn read(f: &Fields) -> Result<NoiseSchedule> {
        let train = f.size("num_train_timesteps", 1000)?;
        let (start, end) = (f.float("beta_start", 1e-4)?, f.float("beta_end", 0.02)?);
        let mut betas = match f.floats("trained_betas")? {
            Some(b) if b.len() != train => {
                return Err(f.error(format!(
                    "trained_betas has {} values for {train} training timesteps",
                    b.len()
                )))
            }
            Some(b) => b,
            None => match f.choice(
                "beta_schedule",
                "linear",
                &["linear", "scaled_linear", "squaredcos_cap_v2"],
            )? {
                "linear" => linspace(start, end, train),
                "scaled_linear" => linspace(start.sqrt(), end.sqrt(), train)
                    .into_iter()
                    .map(|b| b * b)
                    .collect(),
                _ => cosine_betas(train),
            },
        };
        if let Some(b) = betas.iter().find(|b| !(0.0..1.0).contains(*b)) {
            return Err(f.error(format!("a beta of {b} is outside [0, 1)")));
        }
        let zero_snr = f.flag("rescale_betas_zero_snr", false)?;
        if zero_snr {
            betas = rescale_zero_terminal_snr(&betas);
        }
        let mut acc = 1.0;
        let alphas_cumprod = betas
            .iter()
            .map(|b| {
                acc *= 1.0 - b;
                acc
            })
            .collect();
        Ok(NoiseSchedule {
            alphas_cumprod,
            zero_snr,
        })
    }

    /// The schedule as the σ-based samplers take it: a zero terminal ᾱ would give an infinite
    /// σ, so they set it to 2⁻²⁴ as diffusers does.
    pub fn for_sigmas(mut self) -> NoiseSchedule {
        if self.zero_snr {
            if let Some(last) = self.alphas_cumprod.last_mut() {
                *last = 2f64.powi(-24);
            }
        }
        self
    }

    pub fn train_steps(&self) -> usize {
        self.alphas_cumprod.len()
    }

    /// ᾱ at a training timestep, with `before_first` for the step before timestep 0.
    pub fn alpha_bar(&self, t: i64, before_first: f64) -> f64 {
        match usize::try_from(t) {
            Ok(t) => self.alphas_cumprod[t.min(self.alphas_cumprod.len() - 1)],
            Err(_) => before_first,
        }
    }

    /// σ_t = √((1 − ᾱ_t) / ᾱ_t) for every training timestep, ascending in t.
    pub fn sigmas(&self) -> Vec<f64> {
        self.alphas_cumprod
            .iter()
            .map(|a| ((1.0 - a) / a).sqrt())
            .collect()
    }

    /// The training input of clean samples x₀ [B, ...] at training timesteps `t` (one per
    /// row): √ᾱ_t·x₀ + √(1 − ᾱ_t)·noise.
    pub fn add_noise(&self, x0: &Tensor, noise: &Tensor, t: &[usize]) -> Result<Tensor> {
        let a = self.per_row(x0, t)?;
        let keep: Vec<f64> = a.iter().map(|a| a.sqrt()).collect();
        let mix: Vec<f64> = a.iter().map(|a| (1.0 - a).sqrt()).collect();
        rows_scaled(x0, &keep)?.add(&rows_scaled(noise, &mix)?)
    }

    /// The v-prediction target at training timesteps `t`: √ᾱ_t·noise − √(1 − ᾱ_t)·x₀.
    pub fn velocity(&self, x0: &Tensor, noise: &Tensor, t: &[usize]) -> Result<Tensor> {
        let a = self.per_row(x0, t)?;
        let keep: Vec<f64> = a.iter().map(|a| a.sqrt()).collect();
        let mix: Vec<f64> = a.iter().map(|a| (1.0 - a).sqrt()).collect();
        rows_scaled(noise, &keep)?.sub(&rows_scaled(x0, &mix)?)
    }

    fn per_row(&self, x0: &Tensor, t: &[usize]) -> Result<Vec<f64>> {
        let rows = x0.shape().first().copied().unwrap_or(0);
        if t.len() != rows {
            return Err(Error::invalid(
                "add_noise",
                format!("{} timesteps for a batch of {rows}", t.len()),
            ));
        }
        t.iter()
            .map(|&t| {
                self.alphas_cumprod.get(t).copied().ok_or_else(|| {
                    Error::invalid(
                        "add_noise",
                        format!(
                            "timestep {t} is past the {} training timesteps",
                            self.train_steps()
                        ),
                    )
                })
            })
            .collect()
    }
}

/// Each row i of x [B, ...] times s[i].
fn rows_scaled(x: &Tensor, s: &[f64]) -> Result<Tensor> {
    let mut shape = vec![1; x.shape().len().max(1)];
    shape[0] = s.len();
    let s = Tensor::from_f64s(s, &shape, x.dtype())?.to_device(x.device())?;
    x.mul(&s)
}

/// The cosine schedule (`squaredcos_cap_v2`): β_i = min(1 − ᾱ(t₂)/ᾱ(t₁), 0.999).
fn cosine_betas(n: usize) -> Vec<f64> {
    let alpha_bar = |t: f64| {
        ((t + 0.008) / 1.008 * std::f64::consts::FRAC_PI_2)
            .cos()
            .powi(2)
    };
    (0..n)
        .map(|i| {
            let (t1, t2) = (i as f64 / n as f64, (i + 1) as f64 / n as f64);
            (1.0 - alpha_bar(t2) / alpha_bar(t1)).min(0.999)
        })
        .collect()
}

/// Rescales betas to a zero terminal SNR (Lin et al. 2023, algorithm 1).
fn rescale_zero_terminal_snr(betas: &[f64]) -> Vec<f64> {
    let mut acc = 1.0;
    let mut root: Vec<f64> = betas
        .iter()
        .map(|b| {
            acc *= 1.0 - b;
            acc.sqrt()
        })
        .collect();
    let (first, last) = (root[0], root[root.len() - 1]);
    for r in &mut root {
        *r = (*r - last) * first / (first - last);
    }
    let bar: Vec<f64> = root.iter().map(|r| r * r).collect();
    let mut out = vec![1.0 - bar[0]];
    out.extend(bar.windows(2).map(|w| 1.0 - w[1] / w[0]));
    out
}

/// Karras et al.'s σ ramp (ρ = 7) from σ_max down to σ_min in `n` values.
pub fn karras(sigma_min: f64, sigma_max: f64, n: usize) -> Vec<f64> {
    let (lo, hi) = (sigma_min.powf(1.0 / 7.0), sigma_max.powf(1.0 / 7.0));
    linspace(0.0, 1.0, n)
        .into_iter()
        .map(|r| (hi + r * (lo - hi)).powi(7))
        .collect()
}

/// The (fractional) training timestep of σ, interpolating log σ between the training
/// timesteps' (diffusers' `_sigma_to_t`); `log_sigmas` ascends with t.
pub fn sigma_to_t(sigma: f64, log_sigmas: &[f64]) -> f64 {
    let log_sigma = sigma.max(1e-10).ln();
    // The last index whose log σ is at most this one's, kept below the end.
    let low = log_sigmas
        .iter()
        .rposition(|&l| log_sigma - l >= 0.0)
        .unwrap_or(0)
        .min(log_sigmas.len() - 2);
    let (lo, hi) = (log_sigmas[low], log_sigmas[low + 1]);
    let w = ((lo - log_sigma) / (lo - hi)).clamp(0.0, 1.0);
    (1.0 - w) * low as f64 + w * (low + 1) as f64
}

/// numpy's `interp(x, arange(len(ys)), ys)`.
pub fn interp(x: f64, ys: &[f64]) -> f64 {
    if x <= 0.0 {
        return ys[0];
    }
    let last = ys.len() - 1;
    if x >= last as f64 {
        return ys[last];
    }
    let i = x.floor() as usize;
    let w = x - i as f64;
    ys[i] + (ys[i + 1] - ys[i]) * w
}

/// Σ cᵢ·xᵢ, computed in F32 (as diffusers steps in F32) whatever the inputs' dtype.
pub fn combine(terms: &[(f64, &Tensor)]) -> Result<Tensor> {
    let mut out: Option<Tensor> = None;
    for (c, x) in terms {
        let term = x.to_dtype(crate::DType::F32)?.mul_scalar(*c)?;
        out = Some(match out {
            None => term,
            Some(o) => o.add(&term)?,
        });
    }
    out.ok_or_else(|| Error::invalid("scheduler step", "nothing to combine"))
}

/// Refuses a config field this engine does not run when it is set to anything but `off`.
pub fn refuse_set(f: &Fields, key: &str, why: &str) -> Result<()> {
    if f.flag(key, false)? {
        return Err(f.error(format!("{key} is not supported ({why})")));
    }
    Ok(())
}
