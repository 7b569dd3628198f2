//! Flow matching's Euler sampler (SD3, FLUX) as diffusers' `FlowMatchEulerDiscreteScheduler`
//! steps it: x moves along the predicted velocity by σ_next − σ, with σ shifted toward noise
//! by `shift`, or by the image's size (FLUX's dynamic shifting).

use super::noise_schedule::{combine, karras, linspace, refuse_set};
use super::{check_steps, current, NoiseSource, Scheduler, Walk};
use crate::models::hf_config::Fields;
use crate::{Error, Result, Tensor};

pub struct FlowMatchEuler {
    train: usize,
    shift: f64,
    /// FLUX's shift by image size: (base_shift, max_shift, base_seq_len, max_seq_len), and
    /// whether it is exponential (or linear) in μ.
    dynamic: Option<(f64, f64, f64, f64, bool)>,
    shift_terminal: Option<f64>,
    karras: bool,
    stochastic: bool,
    /// The σ range of the shifted training table.
    sigma_min: f64,
    sigma_max: f64,
    image_tokens: Option<usize>,
    walk: Walk,
    sigmas: Vec<f64>,
}

impl FlowMatchEuler {
    pub fn read(f: &Fields) -> Result<FlowMatchEuler> {
        for key in ["use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas"] {
            refuse_set(f, key, "not run by this engine")?;
        }
        let train = f.size("num_train_timesteps", 1000)?;
        let shift = f.float("shift", 1.0)?;
        if shift <= 0.0 {
            return Err(f.error(format!("shift must be positive, got {shift}")));
        }
        let dynamic = f
            .flag("use_dynamic_shifting", false)?
            .then(|| {
                Ok::<_, Error>((
                    f.float("base_shift", 0.5)?,
                    f.float("max_shift", 1.15)?,
                    f.size("base_image_seq_len", 256)? as f64,
                    f.size("max_image_seq_len", 4096)? as f64,
                    f.choice("time_shift_type", "exponential", &["exponential", "linear"])?
                        == "exponential",
                ))
            })
            .transpose()?;
        // The training table: σ = t / train shifted (unless shifting by size).
        let shifted = |s: f64| match dynamic {
            Some(_) => s,
            None => shift * s / (1.0 + (shift - 1.0) * s),
        };
        let (sigma_max, sigma_min) = (shifted(1.0), shifted(1.0 / train as f64));
        Ok(FlowMatchEuler {
            train,
            shift,
            dynamic,
            shift_terminal: f.opt_float("shift_terminal")?.filter(|&t| t != 0.0),
            karras: f.flag("use_karras_sigmas", false)?,
            stochastic: f.flag("stochastic_sampling", false)?,
            sigma_min: sigma_min as f32 as f64,
            sigma_max: sigma_max as f32 as f64,
            image_tokens: None,
            walk: Walk::default(),
            sigmas: Vec::new(),
        })
    }

    /// FLUX's μ for an image of `tokens` latent tokens: linear between base_shift at
    /// base_image_seq_len and max_shift at max_image_seq_len.
    pub fn mu(&self, tokens: usize) -> Option<f64> {
        let (base, max, base_len, max_len, _) = self.dynamic?;
        let m = (max - base) / (max_len - base_len);
        Some(tokens as f64 * m + base - m * base_len)
    }

    /// The walk over `sigmas` (unshifted, from 1 toward 0): shifted by `shift` or by the
    /// image's size, stretched to `shift_terminal`, Karras-spaced where asked; the timesteps
    /// are σ × train.
    fn place(&mut self, mut sigmas: Vec<f64>) -> Result<()> {
        let train = self.train as f64;
        let steps = sigmas.len();
        match self.dynamic {
            Some((.., exponential)) => {
                let tokens = self.image_tokens.ok_or_else(|| {
                    Error::invalid(
                        "FlowMatchEulerDiscreteScheduler",
                        "use_dynamic_shifting shifts by the image's size: give the image tokens first",
                    )
                })?;
                let mu = self.mu(tokens).unwrap_or(0.0);
                for s in &mut sigmas {
                    *s = match exponential {
                        true => mu.exp() / (mu.exp() + (1.0 / *s - 1.0)),
                        false => mu / (mu + (1.0 / *s - 1.0)),
                    };
                }
            }
            None => {
                let shift = self.shift;
                for s in &mut sigmas {
                    *s = shift * *s / (1.0 + (shift - 1.0) * *s);
                }
            }
        }
        if let Some(terminal) = self.shift_terminal {
            // Stretched so the last σ is `shift_terminal`.
            let scale = (1.0 - sigmas[sigmas.len() - 1]) / (1.0 - terminal);
            for s in &mut sigmas {
                *s = 1.0 - (1.0 - *s) / scale;
            }
        }
        if self.karras {
            sigmas = karras(sigmas[sigmas.len() - 1], sigmas[0], steps);
        }
        let sigmas: Vec<f64> = sigmas.into_iter().map(|s| s as f32 as f64).collect();
        self.walk.timesteps = sigmas.iter().map(|s| ((s * train) as f32) as f64).collect();
        self.sigmas = sigmas;
        self.sigmas.push(0.0);
        self.walk.index = 0;
        Ok(())
    }
}

impl Scheduler for FlowMatchEuler {
    fn walk(&self) -> &Walk {
        &self.walk
    }

    fn walk_mut(&mut self) -> &mut Walk {
        &mut self.walk
    }

    fn class_name(&self) -> &'static str {
        "FlowMatchEulerDiscreteScheduler"
    }

    fn set_image_tokens(&mut self, tokens: usize) {
        self.image_tokens = Some(tokens);
    }

    fn set_timesteps(&mut self, steps: usize) -> Result<()> {
        check_steps(
            steps,
            self.train,
            "FlowMatchEulerDiscreteScheduler.set_timesteps",
        )?;
        let train = self.train as f64;
        let sigmas: Vec<f64> = linspace(self.sigma_max * train, self.sigma_min * train, steps)
            .into_iter()
            .map(|t| t / train)
            .collect();
        self.place(sigmas)
    }

    fn set_sigmas(&mut self, sigmas: &[f64]) -> Result<()> {
        if sigmas.is_empty() || sigmas.iter().any(|s| !(0.0..=1.0).contains(s) || *s == 0.0) {
            return Err(Error::invalid(
                "FlowMatchEulerDiscreteScheduler",
                "custom sigmas must be in (0, 1]",
            ));
        }
        // diffusers reads them as f32.
        self.place(sigmas.iter().map(|&s| s as f32 as f64).collect())
    }

    fn init_noise_sigma(&self) -> f64 {
        1.0
    }

    fn step(
        &mut self,
        model_output: &Tensor,
        sample: &Tensor,
        noise: &mut dyn NoiseSource,
    ) -> Result<Tensor> {
        let i = current(
            self.walk.index,
            &self.walk.timesteps,
            "FlowMatchEulerDiscreteScheduler.step",
        )?;
        let (sigma, next) = (self.sigmas[i], self.sigmas[i + 1]);
        let out = match self.stochastic {
            false => combine(&[(1.0, sample), (next - sigma, model_output)])?,
            true => {
                // x₀ = x − σ·v, renoised to the next σ.
                let z = noise.draw(model_output)?;
                combine(&[
                    (1.0 - next, sample),
                    (-(1.0 - next) * sigma, model_output),
                    (next, &z),
                ])?
            }
        };
        self.walk.index += 1;
        out.to_dtype(model_output.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, i: usize) -> Result<Tensor> {
        let i = current(
            i,
            &self.walk.timesteps,
            "FlowMatchEulerDiscreteScheduler.add_noise",
        )?;
        let s = self.sigmas[i];
        combine(&[(1.0 - s, original), (s, noise)])?.to_dtype(original.dtype())
    }
}
