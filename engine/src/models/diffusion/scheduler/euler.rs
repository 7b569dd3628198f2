//! Euler's method over σ (Karras et al. 2022) as diffusers' `EulerDiscreteScheduler` steps it,
//! and its ancestral form (`EulerAncestralDiscreteScheduler`): the step goes down to σ_down
//! and adds σ_up of fresh noise.

use super::noise_schedule::{
    combine, interp, karras, refuse_set, sigma_to_t, NoiseSchedule, Prediction, Spacing,
};
use super::{check_steps, current, NoiseSource, Scheduler, Walk};
use crate::models::hf_config::Fields;
use crate::{Result, Tensor};

pub struct Euler {
    schedule: NoiseSchedule,
    prediction: Prediction,
    spacing: Spacing,
    steps_offset: usize,
    ancestral: bool,
    /// Karras σs between `sigma_min` and `sigma_max` (the table's ends when unset).
    karras: Option<(Option<f64>, Option<f64>)>,
    /// The σ after the last step: 0, or the smallest training σ (`final_sigmas_type`).
    final_sigma_min: bool,
    walk: Walk,
    /// One more than the timesteps: the σ each step goes down to is the next one.
    sigmas: Vec<f64>,
}

impl Euler {
    pub fn read(f: &Fields, ancestral: bool) -> Result<Euler> {
        for key in ["use_exponential_sigmas", "use_beta_sigmas"] {
            refuse_set(f, key, "Karras σs or the table's are")?;
        }
        f.choice("interpolation_type", "linear", &["linear"])?;
        f.choice("timestep_type", "discrete", &["discrete"])?;
        let use_karras = !ancestral && f.flag("use_karras_sigmas", false)?;
        let karras = use_karras
            .then(|| Ok::<_, crate::Error>((f.opt_float("sigma_min")?, f.opt_float("sigma_max")?)))
            .transpose()?;
        let final_sigma_min = !ancestral
            && f.choice("final_sigmas_type", "zero", &["zero", "sigma_min"])? == "sigma_min";
        let prediction = Prediction::read(f)?;
        if ancestral && prediction == Prediction::Sample {
            return Err(f.error(
                "prediction_type `sample` is not supported by EulerAncestralDiscreteScheduler \
                 (nor by diffusers')"
                    .into(),
            ));
        }
        let mut euler = Euler {
            schedule: NoiseSchedule::read(f)?.for_sigmas(),
            prediction,
            spacing: Spacing::read(f, "linspace")?,
            steps_offset: f.count("steps_offset", 0)?,
            ancestral,
            karras,
            final_sigma_min,
            walk: Walk::default(),
            sigmas: Vec::new(),
        };
        // Until set_timesteps, the table is every training timestep (for init_noise_sigma).
        let train = euler.schedule.train_steps();
        euler.sigmas = euler.schedule.sigmas().into_iter().rev().collect();
        euler.sigmas.push(0.0);
        euler.walk.timesteps = (0..train).rev().map(|t| t as f64).collect();
        Ok(euler)
    }

    fn sigma(&self, i: usize) -> f64 {
        self.sigmas[i]
    }
}

impl Scheduler for Euler {
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
        match self.ancestral {
            true => "EulerAncestralDiscreteScheduler",
            false => "EulerDiscreteScheduler",
        }
    }

    fn set_timesteps(&mut self, steps: usize) -> Result<()> {
        let train = self.schedule.train_steps();
        check_steps(steps, train, "Euler set_timesteps")?;
        // The spacing's timesteps in F32, as diffusers holds them.
        let mut timesteps: Vec<f64> = self
            .spacing
            .timesteps(train, steps, self.steps_offset)
            .into_iter()
            .map(|t| t as f32 as f64)
            .collect();
        let table = self.schedule.sigmas();
        let mut sigmas: Vec<f64> = timesteps.iter().map(|&t| interp(t, &table)).collect();
        if let Some((lo, hi)) = self.karras {
            let lo = lo.unwrap_or(sigmas[sigmas.len() - 1]);
            let hi = hi.unwrap_or(sigmas[0]);
            sigmas = karras(lo, hi, steps);
            let logs: Vec<f64> = table.iter().map(|s| s.ln()).collect();
            timesteps = sigmas.iter().map(|&s| sigma_to_t(s, &logs)).collect();
        }
        sigmas.push(if self.final_sigma_min { table[0] } else { 0.0 });
        self.sigmas = sigmas.into_iter().map(|s| s as f32 as f64).collect();
        self.walk.timesteps = timesteps.into_iter().map(|t| t as f32 as f64).collect();
        self.walk.index = 0;
        Ok(())
    }

    fn noise_schedule(&self) -> Option<&NoiseSchedule> {
        Some(&self.schedule)
    }

    fn init_noise_sigma(&self) -> f64 {
        let max = self.sigmas.iter().copied().fold(0.0, f64::max);
        match self.spacing {
            Spacing::Linspace | Spacing::Trailing => max,
            Spacing::Leading => (max * max + 1.0).sqrt(),
        }
    }

    fn scale_model_input(&self, sample: &Tensor) -> Result<Tensor> {
        let i = current(self.walk.index, &self.walk.timesteps, "scale_model_input")?;
        let s = self.sigma(i);
        sample.mul_scalar(1.0 / (s * s + 1.0).sqrt())
    }

    fn step(
        &mut self,
        model_output: &Tensor,
        sample: &Tensor,
        noise: &mut dyn NoiseSource,
    ) -> Result<Tensor> {
        let i = current(self.walk.index, &self.walk.timesteps, "Euler step")?;
        let (sigma, next) = (self.sigma(i), self.sigma(i + 1));
        let x0 = match self.prediction {
            Prediction::Epsilon => combine(&[(1.0, sample), (-sigma, model_output)])?,
            Prediction::Sample => combine(&[(1.0, model_output)])?,
            Prediction::Velocity => combine(&[
                (-sigma / (sigma * sigma + 1.0).sqrt(), model_output),
                (1.0 / (sigma * sigma + 1.0), sample),
            ])?,
        };
        // x + (x − x₀)/σ · (σ_to − σ), with σ_to the next σ, or σ_down for the ancestral step.
        let (to, up) = match self.ancestral {
            false => (next, 0.0),
            true => {
                let up = (next * next * (sigma * sigma - next * next) / (sigma * sigma)).sqrt();
                ((next * next - up * up).sqrt(), up)
            }
        };
        let dt = (to - sigma) / sigma;
        let mut out = combine(&[(1.0 + dt, sample), (-dt, &x0)])?;
        if self.ancestral {
            let z = noise.draw(model_output)?;
            out = out.add(&z.mul_scalar(up)?)?;
        }
        self.walk.index += 1;
        out.to_dtype(model_output.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, i: usize) -> Result<Tensor> {
        let i = current(i, &self.walk.timesteps, "Euler add_noise")?;
        combine(&[(1.0, original), (self.sigma(i), noise)])?.to_dtype(original.dtype())
    }
}
