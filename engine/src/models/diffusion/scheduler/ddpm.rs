//! DDPM (Ho et al. 2020) ancestral sampling as diffusers' `DDPMScheduler` steps it: the
//! posterior mean of x_{t'} given x_t and the predicted x₀, plus its variance's noise.

use super::noise_schedule::{combine, refuse_set, NoiseSchedule, Prediction, Spacing};
use super::{check_steps, current, NoiseSource, Scheduler, Walk};
use crate::models::hf_config::Fields;
use crate::{Result, Tensor};

/// The posterior variance's form (`variance_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variance {
    /// β̃_t = (1 − ᾱ_{t'}) / (1 − ᾱ_t) · β_t.
    FixedSmall,
    /// β_t.
    FixedLarge,
}

pub struct Ddpm {
    schedule: NoiseSchedule,
    prediction: Prediction,
    spacing: Spacing,
    steps_offset: usize,
    variance: Variance,
    /// `clip_sample_range` when `clip_sample` is on.
    clip: Option<f64>,
    walk: Walk,
}

impl Ddpm {
    pub fn read(f: &Fields) -> Result<Ddpm> {
        refuse_set(f, "thresholding", "dynamic thresholding")?;
        let variance = match f.choice(
            "variance_type",
            "fixed_small",
            &["fixed_small", "fixed_small_log", "fixed_large"],
        )? {
            "fixed_large" => Variance::FixedLarge,
            // The log form is the same standard deviation, reached through its log.
            _ => Variance::FixedSmall,
        };
        let schedule = NoiseSchedule::read(f)?;
        let clip = f
            .flag("clip_sample", true)?
            .then(|| f.float("clip_sample_range", 1.0))
            .transpose()?;
        // Until set_timesteps, the walk is every training timestep.
        let timesteps = (0..schedule.train_steps())
            .rev()
            .map(|t| t as f64)
            .collect();
        Ok(Ddpm {
            prediction: Prediction::read(f)?,
            spacing: Spacing::read(f, "leading")?,
            steps_offset: f.count("steps_offset", 0)?,
            schedule,
            variance,
            clip,
            walk: Walk::new(timesteps),
        })
    }

    /// The predicted x₀ from the model output at ᾱ_t, clipped as configured.
    fn x0(&self, out: &Tensor, x: &Tensor, a: f64) -> Result<Tensor> {
        let (x0, _) = self.prediction.x0_and_eps(out, x, a)?;
        match self.clip {
            Some(r) => x0.clamp(-r, r),
            None => Ok(x0),
        }
    }
}

impl Scheduler for Ddpm {
    fn prediction(&self) -> Option<Prediction> {
        Some(self.prediction)
    }

    fn walk(&self) -> &Walk {
        &self.walk
    }

    fn walk_mut(&mut self) -> &mut Walk {
        &mut self.walk
    }

    fn class_name(&self) -> &'static str {
        "DDPMScheduler"
    }

    fn set_timesteps(&mut self, steps: usize) -> Result<()> {
        let train = self.schedule.train_steps();
        check_steps(steps, train, "DDPMScheduler.set_timesteps")?;
        self.walk = Walk::new(
            self.spacing
                .whole_timesteps(train, steps, self.steps_offset),
        );
        Ok(())
    }

    fn noise_schedule(&self) -> Option<&NoiseSchedule> {
        Some(&self.schedule)
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
        let i = current(self.walk.index, &self.walk.timesteps, "DDPMScheduler.step")?;
        let t = self.walk.timesteps[i] as i64;
        let prev = self.walk.timesteps.get(i + 1).map_or(-1, |&p| p as i64);
        let a_t = self.schedule.alpha_bar(t, 1.0);
        let a_prev = self.schedule.alpha_bar(prev, 1.0);
        let (beta_t, beta_prev) = (1.0 - a_t, 1.0 - a_prev);
        let cur_alpha = a_t / a_prev;
        let cur_beta = 1.0 - cur_alpha;
        let x0 = self.x0(model_output, sample, a_t)?;
        let mut next = combine(&[
            (a_prev.sqrt() * cur_beta / beta_t, &x0),
            (cur_alpha.sqrt() * beta_prev / beta_t, sample),
        ])?;
        if t > 0 {
            let variance = match self.variance {
                Variance::FixedSmall => (beta_prev / beta_t * cur_beta).max(1e-20),
                Variance::FixedLarge => cur_beta,
            };
            let z = noise.draw(model_output)?;
            next = next.add(&z.mul_scalar(variance.sqrt())?)?;
        }
        self.walk.index += 1;
        next.to_dtype(model_output.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, i: usize) -> Result<Tensor> {
        let i = current(i, &self.walk.timesteps, "DDPMScheduler.add_noise")?;
        let a = self.schedule.alpha_bar(self.walk.timesteps[i] as i64, 1.0);
        combine(&[(a.sqrt(), original), ((1.0 - a).sqrt(), noise)])?.to_dtype(original.dtype())
    }
}
