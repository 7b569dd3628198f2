//! DDIM (Song et al. 2021) as diffusers' `DDIMScheduler` steps it: deterministic at η = 0,
//! with η·σ_t of fresh noise otherwise.

use super::noise_schedule::{combine, refuse_set, NoiseSchedule, Prediction, Spacing};
use super::{check_steps, current, NoiseSource, Scheduler, Walk};
use crate::models::hf_config::Fields;
use crate::{Error, Result, Tensor};

pub struct Ddim {
    schedule: NoiseSchedule,
    prediction: Prediction,
    spacing: Spacing,
    steps_offset: usize,
    /// ᾱ before the first training timestep: 1 (`set_alpha_to_one`) or ᾱ_0.
    final_alpha: f64,
    clip: Option<f64>,
    /// The share of the posterior's noise a step adds (0: deterministic).
    eta: f64,
    walk: Walk,
}

impl Ddim {
    pub fn read(f: &Fields) -> Result<Ddim> {
        refuse_set(f, "thresholding", "dynamic thresholding")?;
        let schedule = NoiseSchedule::read(f)?;
        let final_alpha = match f.flag("set_alpha_to_one", true)? {
            true => 1.0,
            false => schedule.alphas_cumprod[0],
        };
        let clip = f
            .flag("clip_sample", true)?
            .then(|| f.float("clip_sample_range", 1.0))
            .transpose()?;
        Ok(Ddim {
            prediction: Prediction::read(f)?,
            spacing: Spacing::read(f, "leading")?,
            steps_offset: f.count("steps_offset", 0)?,
            schedule,
            final_alpha,
            clip,
            eta: 0.0,
            walk: Walk::default(),
        })
    }
}

impl Scheduler for Ddim {
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
        "DDIMScheduler"
    }

    fn set_timesteps(&mut self, steps: usize) -> Result<()> {
        let train = self.schedule.train_steps();
        check_steps(steps, train, "DDIMScheduler.set_timesteps")?;
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

    fn set_eta(&mut self, eta: f64) -> Result<()> {
        if !(0.0..=1.0).contains(&eta) {
            return Err(Error::invalid(
                "DDIMScheduler",
                format!("eta {eta} is outside [0, 1]"),
            ));
        }
        self.eta = eta;
        Ok(())
    }

    fn step(
        &mut self,
        model_output: &Tensor,
        sample: &Tensor,
        noise: &mut dyn NoiseSource,
    ) -> Result<Tensor> {
        let i = current(self.walk.index, &self.walk.timesteps, "DDIMScheduler.step")?;
        let t = self.walk.timesteps[i] as i64;
        // diffusers steps back by train / steps whatever the spacing.
        let prev = t - (self.schedule.train_steps() / self.walk.timesteps.len()) as i64;
        let a_t = self.schedule.alpha_bar(t, self.final_alpha);
        let a_prev = self.schedule.alpha_bar(prev, self.final_alpha);
        let b_t = 1.0 - a_t;
        let (x0, eps) = self.prediction.x0_and_eps(model_output, sample, a_t)?;
        let x0 = match self.clip {
            Some(r) => x0.clamp(-r, r)?,
            None => x0,
        };
        let variance = (1.0 - a_prev) / b_t * (1.0 - a_t / a_prev);
        let std = self.eta * variance.sqrt();
        let mut next = combine(&[
            (a_prev.sqrt(), &x0),
            ((1.0 - a_prev - std * std).sqrt(), &eps),
        ])?;
        if self.eta > 0.0 {
            let z = noise.draw(model_output)?;
            next = next.add(&z.mul_scalar(std)?)?;
        }
        self.walk.index += 1;
        next.to_dtype(model_output.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, i: usize) -> Result<Tensor> {
        let i = current(i, &self.walk.timesteps, "DDIMScheduler.add_noise")?;
        let a = self
            .schedule
            .alpha_bar(self.walk.timesteps[i] as i64, self.final_alpha);
        combine(&[(a.sqrt(), original), ((1.0 - a).sqrt(), noise)])?.to_dtype(original.dtype())
    }
}
