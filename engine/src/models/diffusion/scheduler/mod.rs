//! Samplers of the diffusion process, with diffusers' `scheduler_config.json` semantics: the
//! same timesteps, σ tables and step arithmetic as diffusers' `DDPMScheduler`,
//! `DDIMScheduler`, `EulerDiscreteScheduler`, `EulerAncestralDiscreteScheduler`,
//! `DPMSolverMultistepScheduler` and `FlowMatchEulerDiscreteScheduler`, so a pipeline run
//! here from the same noise and model outputs lands where diffusers' lands.
//!
//! A scheduler walks its timesteps in order: `set_timesteps(n)`, then for each step
//! `scale_model_input` (what the denoiser sees), the denoiser, and `step` (the next sample).
//! Samplers that add noise draw it from a [`NoiseSource`] (a `Generator`, or given tensors).

mod ddim;
mod ddpm;
mod dpm_solver;
mod euler;
mod flow_match;
pub mod noise_schedule;

pub use ddim::Ddim;
pub use ddpm::Ddpm;
pub use dpm_solver::DpmSolver;
pub use euler::Euler;
pub use flow_match::FlowMatchEuler;
pub use noise_schedule::{NoiseSchedule, Prediction};

use crate::models::hf_config::Fields;
use crate::{DType, Error, Generator, Result, Tensor};
use serde_json::Value;
use std::path::Path;

/// Where a stochastic step's noise comes from.
pub trait NoiseSource {
    /// Standard normal noise of `like`'s shape, on its device, in F32.
    fn draw(&mut self, like: &Tensor) -> Result<Tensor>;
}

impl NoiseSource for Generator {
    fn draw(&mut self, like: &Tensor) -> Result<Tensor> {
        Tensor::randn_on(like.shape(), DType::F32, like.device(), Some(self))
    }
}

/// Noise given in advance, one tensor per draw (to replay another run's noise).
pub struct GivenNoise(pub std::collections::VecDeque<Tensor>);

impl NoiseSource for GivenNoise {
    fn draw(&mut self, like: &Tensor) -> Result<Tensor> {
        let n = self
            .0
            .pop_front()
            .ok_or_else(|| Error::invalid("scheduler step", "the given noise ran out"))?;
        if n.shape() != like.shape() {
            return Err(Error::ShapeMismatch {
                op: "scheduler noise",
                lhs: like.shape().to_vec(),
                rhs: n.shape().to_vec(),
            });
        }
        n.to_device(like.device())
    }
}

/// Where a scheduler's walk is: its inference timesteps and the step it is at.
#[derive(Clone, Debug, Default)]
pub struct Walk {
    pub timesteps: Vec<f64>,
    pub index: usize,
}

impl Walk {
    pub fn new(timesteps: Vec<f64>) -> Walk {
        Walk {
            timesteps,
            index: 0,
        }
    }
}

/// A sampler of the reverse diffusion process.
pub trait Scheduler: Send {
    /// diffusers' class name (`EulerDiscreteScheduler`, ...).
    fn class_name(&self) -> &'static str;

    /// Places `steps` inference timesteps and starts the walk at the first.
    fn set_timesteps(&mut self, steps: usize) -> Result<()>;

    /// Places the walk on given σs (FLUX's pipeline asks for linspace(1, 1/steps, steps))
    /// instead of the scheduler's own spacing. Only flow matching takes them.
    fn set_sigmas(&mut self, _sigmas: &[f64]) -> Result<()> {
        Err(Error::invalid(
            self.class_name(),
            "custom sigmas are flow matching's; this scheduler places its own",
        ))
    }

    /// The walk's timesteps and position.
    fn walk(&self) -> &Walk;

    fn walk_mut(&mut self) -> &mut Walk;

    /// The inference timesteps, in the denoiser's units (training timesteps, possibly
    /// fractional), in the order they are walked.
    fn timesteps(&self) -> &[f64] {
        &self.walk().timesteps
    }

    /// The step the walk is at (an index into `timesteps`).
    fn step_index(&self) -> usize {
        self.walk().index
    }

    /// Starts the walk at step `i` instead of 0 (image-to-image starts part way).
    fn set_begin_index(&mut self, i: usize) -> Result<()> {
        let i = check_begin(i, self.timesteps(), self.class_name())?;
        self.walk_mut().index = i;
        Ok(())
    }

    /// The standard deviation of the initial noise (the pure-noise latents are N(0, 1) times
    /// this).
    fn init_noise_sigma(&self) -> f64;

    /// The sample as the denoiser is to see it at the current step.
    fn scale_model_input(&self, sample: &Tensor) -> Result<Tensor> {
        Ok(sample.clone())
    }

    /// The sample of the next step from the denoiser's output at the current one; advances the
    /// walk. Computed in F32; returned in the model output's dtype.
    fn step(
        &mut self,
        model_output: &Tensor,
        sample: &Tensor,
        noise: &mut dyn NoiseSource,
    ) -> Result<Tensor>;

    /// Clean samples noised to the level of inference step `i` (image-to-image).
    fn add_noise(&self, original: &Tensor, noise: &Tensor, i: usize) -> Result<Tensor>;

    /// η, the share of the posterior's noise a step adds (DDIM's `eta`; 0 is deterministic).
    /// Only DDIM takes it.
    fn set_eta(&mut self, eta: f64) -> Result<()> {
        match eta {
            0.0 => Ok(()),
            _ => Err(Error::invalid(
                self.class_name(),
                "eta is DDIM's; this scheduler takes none",
            )),
        }
    }

    /// The training noise schedule (ᾱ per training timestep) of the schedulers that have one:
    /// what training noises samples with (`NoiseSchedule::add_noise`). Flow matching has none.
    fn noise_schedule(&self) -> Option<&NoiseSchedule> {
        None
    }

    /// For schedulers that shift by image size (FLUX's dynamic shifting): the number of
    /// image tokens the denoiser sees. Others ignore it.
    fn set_image_tokens(&mut self, _tokens: usize) {}

    /// What the denoiser predicts (`prediction_type`) for the schedulers over a noise
    /// schedule; flow matching's denoiser predicts the velocity of the flow (`None`).
    fn prediction(&self) -> Option<Prediction> {
        None
    }
}

/// The classes `from_config` builds.
pub const CLASSES: &[&str] = &[
    "DDPMScheduler",
    "DDIMScheduler",
    "EulerDiscreteScheduler",
    "EulerAncestralDiscreteScheduler",
    "DPMSolverMultistepScheduler",
    "FlowMatchEulerDiscreteScheduler",
];

/// A scheduler from a `scheduler_config.json` text, by its `_class_name` (or `class` when the
/// text has none or another scheduler is wanted with the same noise schedule, as diffusers'
/// `from_config` allows).
pub fn from_config(text: &str, class: Option<&str>) -> Result<Box<dyn Scheduler>> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| Error::format("scheduler_config.json", e.to_string()))?;
    if !v.is_object() {
        return Err(Error::format(
            "scheduler_config.json",
            "the file is not a JSON object",
        ));
    }
    let class = match class {
        Some(c) => c,
        None => v
            .get("_class_name")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::format(
                    "scheduler_config.json",
                    "no `_class_name`: name the scheduler to build",
                )
            })?,
    };
    let f = Fields::in_file(&v, "scheduler", "scheduler_config.json");
    Ok(match class {
        "DDPMScheduler" => Box::new(Ddpm::read(&f)?),
        "DDIMScheduler" => Box::new(Ddim::read(&f)?),
        "EulerDiscreteScheduler" => Box::new(Euler::read(&f, false)?),
        "EulerAncestralDiscreteScheduler" => Box::new(Euler::read(&f, true)?),
        "DPMSolverMultistepScheduler" => Box::new(DpmSolver::read(&f)?),
        "FlowMatchEulerDiscreteScheduler" => Box::new(FlowMatchEuler::read(&f)?),
        other => {
            return Err(Error::format(
                "scheduler_config.json",
                format!(
                    "scheduler `{other}` is not supported; supported: {}",
                    CLASSES.join(", ")
                ),
            ))
        }
    })
}

/// The scheduler of a diffusers folder: `DIR/scheduler_config.json`, or
/// `DIR/scheduler/scheduler_config.json` for a pipeline's folder.
pub fn from_folder(dir: &Path, class: Option<&str>) -> Result<Box<dyn Scheduler>> {
    let file = [
        dir.join("scheduler_config.json"),
        dir.join("scheduler").join("scheduler_config.json"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .ok_or_else(|| {
        Error::format(
            "scheduler_config.json",
            format!(
                "{} has no scheduler_config.json (nor scheduler/scheduler_config.json)",
                dir.display()
            ),
        )
    })?;
    let text = std::fs::read_to_string(&file)
        .map_err(|e| Error::format("scheduler_config.json", format!("{}: {e}", file.display())))?;
    from_config(&text, class)
}

/// The step a walk is at, checked against its timesteps.
fn current(i: usize, timesteps: &[f64], what: &'static str) -> Result<usize> {
    if timesteps.is_empty() {
        return Err(Error::invalid(
            what,
            "no timesteps: call set_timesteps first",
        ));
    }
    if i >= timesteps.len() {
        return Err(Error::invalid(
            what,
            format!("the walk is over: all {} steps were taken", timesteps.len()),
        ));
    }
    Ok(i)
}

/// Checks a `set_timesteps` count against the training timesteps.
fn check_steps(steps: usize, train: usize, what: &'static str) -> Result<()> {
    if steps == 0 || steps > train {
        return Err(Error::invalid(
            what,
            format!("{steps} inference steps: it takes 1 to {train} (the training timesteps)"),
        ));
    }
    Ok(())
}

/// Checks a begin index against the timesteps.
fn check_begin(i: usize, timesteps: &[f64], what: &'static str) -> Result<usize> {
    if i >= timesteps.len() {
        return Err(Error::invalid(
            what,
            format!(
                "begin index {i} is past the {} timesteps (set_timesteps first)",
                timesteps.len()
            ),
        ));
    }
    Ok(i)
}
