//! DPM-Solver and DPM-Solver++ (Lu et al. 2022), first and second order multistep, ODE and
//! SDE forms, as diffusers' `DPMSolverMultistepScheduler` steps them ("DPM++ 2M", with
//! `use_karras_sigmas` "DPM++ 2M Karras", with `algorithm_type: sde-dpmsolver++` "DPM++ 2M
//! SDE").

use super::noise_schedule::{
    combine, interp, karras, linspace, refuse_set, round_half_even, sigma_to_t, NoiseSchedule,
    Prediction, Spacing,
};
use super::{check_steps, current, NoiseSource, Scheduler, Walk};
use crate::models::hf_config::Fields;
use crate::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algorithm {
    /// Steps on the predicted noise.
    DpmSolver,
    /// Steps on the predicted x₀ (the "++" form).
    DpmSolverPp,
    SdeDpmSolver,
    SdeDpmSolverPp,
}

impl Algorithm {
    /// The "++" forms work on x₀, the others on ε.
    fn on_x0(self) -> bool {
        matches!(self, Algorithm::DpmSolverPp | Algorithm::SdeDpmSolverPp)
    }

    fn sde(self) -> bool {
        matches!(self, Algorithm::SdeDpmSolver | Algorithm::SdeDpmSolverPp)
    }
}

pub struct DpmSolver {
    schedule: NoiseSchedule,
    prediction: Prediction,
    spacing: Spacing,
    steps_offset: usize,
    algorithm: Algorithm,
    order: usize,
    /// The second-order step's form: midpoint (true) or Heun.
    midpoint: bool,
    lower_order_final: bool,
    euler_at_final: bool,
    final_sigma_min: bool,
    karras: Option<(Option<f64>, Option<f64>)>,
    /// Timesteps whose log-SNR is below this are cut from the end (`lambda_min_clipped`).
    lambda_min: f64,
    cosine: bool,
    walk: Walk,
    sigmas: Vec<f64>,
    /// The converted model outputs of the last steps, newest last.
    outputs: Vec<Tensor>,
    lower_order_nums: usize,
}

impl DpmSolver {
    pub fn read(f: &Fields) -> Result<DpmSolver> {
        refuse_set(f, "thresholding", "dynamic thresholding")?;
        for key in [
            "use_exponential_sigmas",
            "use_beta_sigmas",
            "use_lu_lambdas",
            "use_flow_sigmas",
            "use_dynamic_shifting",
        ] {
            refuse_set(f, key, "Karras σs or the table's are")?;
        }
        if f.string("variance_type").is_some() {
            return Err(f.error("variance_type (a learned variance) is not supported".into()));
        }
        let algorithm = match f.choice(
            "algorithm_type",
            "dpmsolver++",
            &[
                "dpmsolver",
                "dpmsolver++",
                "sde-dpmsolver",
                "sde-dpmsolver++",
                "deis",
            ],
        )? {
            "dpmsolver" => Algorithm::DpmSolver,
            "sde-dpmsolver" => Algorithm::SdeDpmSolver,
            "sde-dpmsolver++" => Algorithm::SdeDpmSolverPp,
            // diffusers runs "deis" as DPM-Solver++ too.
            _ => Algorithm::DpmSolverPp,
        };
        let order = f.size("solver_order", 2)?;
        if order > 2 {
            return Err(f.error(format!(
                "solver_order {order} is not supported (1 and 2 are)"
            )));
        }
        let midpoint = f.choice("solver_type", "midpoint", &["midpoint", "heun"])? == "midpoint";
        let final_sigma_min =
            f.choice("final_sigmas_type", "zero", &["zero", "sigma_min"])? == "sigma_min";
        if !algorithm.on_x0() && !final_sigma_min {
            return Err(f.error(
                "final_sigmas_type `zero` needs a DPM-Solver++ algorithm_type (as diffusers says)"
                    .into(),
            ));
        }
        let karras = f
            .flag("use_karras_sigmas", false)?
            .then(|| Ok::<_, crate::Error>((f.opt_float("sigma_min")?, f.opt_float("sigma_max")?)))
            .transpose()?;
        let cosine = f.string("beta_schedule") == Some("squaredcos_cap_v2");
        Ok(DpmSolver {
            schedule: NoiseSchedule::read(f)?.for_sigmas(),
            prediction: Prediction::read(f)?,
            spacing: Spacing::read(f, "linspace")?,
            steps_offset: f.count("steps_offset", 0)?,
            algorithm,
            order,
            midpoint,
            lower_order_final: f.flag("lower_order_final", true)?,
            euler_at_final: f.flag("euler_at_final", false)?,
            final_sigma_min,
            karras,
            lambda_min: f
                .opt_float("lambda_min_clipped")?
                .unwrap_or(f64::NEG_INFINITY),
            cosine,
            walk: Walk::default(),
            sigmas: Vec::new(),
            outputs: Vec::new(),
            lower_order_nums: 0,
        })
    }

    /// (α_t, σ_t) of the table's σ: α = 1/√(σ² + 1), σ_t = σ·α.
    fn alpha_sigma(sigma: f64) -> (f64, f64) {
        let a = 1.0 / (sigma * sigma + 1.0).sqrt();
        (a, sigma * a)
    }

    /// log(α/σ) of a table σ (−∞ at σ = 0... +∞, as diffusers gets from its logs).
    fn lambda(sigma: f64) -> f64 {
        let (a, s) = Self::alpha_sigma(sigma);
        a.ln() - s.ln()
    }

    /// The model output as the algorithm steps on it: x₀ for the "++" forms, ε otherwise.
    fn convert(&self, out: &Tensor, x: &Tensor, sigma: f64) -> Result<Tensor> {
        let (a, s) = Self::alpha_sigma(sigma);
        match (self.algorithm.on_x0(), self.prediction) {
            (true, Prediction::Epsilon) => combine(&[(1.0 / a, x), (-s / a, out)]),
            (true, Prediction::Sample) | (false, Prediction::Epsilon) => combine(&[(1.0, out)]),
            (true, Prediction::Velocity) => combine(&[(a, x), (-s, out)]),
            (false, Prediction::Sample) => combine(&[(1.0 / s, x), (-a / s, out)]),
            (false, Prediction::Velocity) => combine(&[(a, out), (s, x)]),
        }
    }

    fn first_order(&self, m: &Tensor, x: &Tensor, noise: Option<&Tensor>) -> Result<Tensor> {
        let i = self.walk.index;
        let (a_t, s_t) = Self::alpha_sigma(self.sigmas[i + 1]);
        let (a_s, s_s) = Self::alpha_sigma(self.sigmas[i]);
        let h = Self::lambda(self.sigmas[i + 1]) - Self::lambda(self.sigmas[i]);
        match (self.algorithm, noise) {
            (Algorithm::DpmSolverPp, _) => {
                combine(&[(s_t / s_s, x), (-a_t * ((-h).exp() - 1.0), m)])
            }
            (Algorithm::DpmSolver, _) => combine(&[(a_t / a_s, x), (-s_t * (h.exp() - 1.0), m)]),
            (Algorithm::SdeDpmSolverPp, Some(z)) => combine(&[
                (s_t / s_s * (-h).exp(), x),
                (a_t * (1.0 - (-2.0 * h).exp()), m),
                (s_t * (1.0 - (-2.0 * h).exp()).sqrt(), z),
            ]),
            (_, z) => combine(&[
                (a_t / a_s, x),
                (-2.0 * s_t * (h.exp() - 1.0), m),
                (s_t * ((2.0 * h).exp() - 1.0).sqrt(), z.unwrap_or(x)),
            ]),
        }
    }

    fn second_order(&self, x: &Tensor, noise: Option<&Tensor>) -> Result<Tensor> {
        let i = self.walk.index;
        let (a_t, s_t) = Self::alpha_sigma(self.sigmas[i + 1]);
        let (a_s0, s_s0) = Self::alpha_sigma(self.sigmas[i]);
        let l_t = Self::lambda(self.sigmas[i + 1]);
        let l_s0 = Self::lambda(self.sigmas[i]);
        let l_s1 = Self::lambda(self.sigmas[i - 1]);
        let n = self.outputs.len();
        let (m0, m1) = (&self.outputs[n - 1], &self.outputs[n - 2]);
        let (h, h0) = (l_t - l_s0, l_s0 - l_s1);
        let r0 = h0 / h;
        // D1 = (m0 − m1) / r0, folded into the coefficients of m0 and m1.
        let d1 = |c: f64| [(c / r0, m0), (-c / r0, m1)];
        let terms: Vec<(f64, &Tensor)> = match self.algorithm {
            Algorithm::DpmSolverPp => {
                let e = (-h).exp() - 1.0;
                let c1 = match self.midpoint {
                    true => -0.5 * a_t * e,
                    false => a_t * (e / h + 1.0),
                };
                [(s_t / s_s0, x), (-a_t * e, m0)]
                    .into_iter()
                    .chain(d1(c1))
                    .collect()
            }
            Algorithm::DpmSolver => {
                let e = h.exp() - 1.0;
                let c1 = match self.midpoint {
                    true => -0.5 * s_t * e,
                    false => -s_t * (e / h - 1.0),
                };
                [(a_t / a_s0, x), (-s_t * e, m0)]
                    .into_iter()
                    .chain(d1(c1))
                    .collect()
            }
            Algorithm::SdeDpmSolverPp => {
                let e = 1.0 - (-2.0 * h).exp();
                let c1 = match self.midpoint {
                    true => 0.5 * a_t * e,
                    false => a_t * (e / (-2.0 * h) + 1.0),
                };
                let z = noise.unwrap_or(x);
                [
                    (s_t / s_s0 * (-h).exp(), x),
                    (a_t * e, m0),
                    (s_t * e.sqrt(), z),
                ]
                .into_iter()
                .chain(d1(c1))
                .collect()
            }
            Algorithm::SdeDpmSolver => {
                let e = h.exp() - 1.0;
                let c1 = match self.midpoint {
                    true => -s_t * e,
                    false => -2.0 * s_t * (e / h - 1.0),
                };
                let z = noise.unwrap_or(x);
                [
                    (a_t / a_s0, x),
                    (-2.0 * s_t * e, m0),
                    (s_t * ((2.0 * h).exp() - 1.0).sqrt(), z),
                ]
                .into_iter()
                .chain(d1(c1))
                .collect()
            }
        };
        combine(&terms)
    }
}

impl Scheduler for DpmSolver {
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
        "DPMSolverMultistepScheduler"
    }

    fn set_timesteps(&mut self, steps: usize) -> Result<()> {
        let train = self.schedule.train_steps();
        check_steps(steps, train, "DPMSolverMultistepScheduler.set_timesteps")?;
        // Timesteps past the clipped log-SNR are left out of the end.
        let clipped = self
            .schedule
            .alphas_cumprod
            .iter()
            .rev()
            .map(|a| 0.5 * a.ln() - 0.5 * (1.0 - a).ln())
            .take_while(|&l| l < self.lambda_min)
            .count();
        let last = train - clipped;
        if last == 0 {
            return Err(Error::invalid(
                "DPMSolverMultistepScheduler",
                format!(
                    "lambda_min_clipped {} cuts every training timestep",
                    self.lambda_min
                ),
            ));
        }
        let mut timesteps: Vec<f64> = match self.spacing {
            Spacing::Linspace => linspace(0.0, (last - 1) as f64, steps + 1)
                .into_iter()
                .map(round_half_even)
                .rev()
                .take(steps)
                .collect(),
            Spacing::Leading => {
                let ratio = last / (steps + 1);
                (1..=steps)
                    .rev()
                    .map(|i| (i * ratio + self.steps_offset) as f64)
                    .collect()
            }
            Spacing::Trailing => {
                let ratio = train as f64 / steps as f64;
                super::noise_schedule::arange_down(last as f64, ratio)
                    .into_iter()
                    .map(|t| round_half_even(t) - 1.0)
                    .collect()
            }
        };
        let table = self.schedule.sigmas();
        let mut sigmas: Vec<f64> = match self.karras {
            Some((lo, hi)) => {
                let lo = lo.unwrap_or(table[0]);
                let hi = hi.unwrap_or(table[table.len() - 1]);
                let sigmas = karras(lo, hi, steps);
                let logs: Vec<f64> = table.iter().map(|s| s.ln()).collect();
                timesteps = sigmas
                    .iter()
                    .map(|&s| sigma_to_t(s, &logs))
                    .map(|t| if self.cosine { t } else { round_half_even(t) })
                    .collect();
                sigmas
            }
            None => timesteps.iter().map(|&t| interp(t, &table)).collect(),
        };
        sigmas.push(if self.final_sigma_min { table[0] } else { 0.0 });
        self.sigmas = sigmas.into_iter().map(|s| s as f32 as f64).collect();
        // diffusers holds them as int64 (a fractional one truncates).
        self.walk.timesteps = timesteps.into_iter().map(f64::trunc).collect();
        self.outputs.clear();
        self.lower_order_nums = 0;
        self.walk.index = 0;
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
        let i = current(
            self.walk.index,
            &self.walk.timesteps,
            "DPMSolverMultistepScheduler.step",
        )?;
        let n = self.walk.timesteps.len();
        let lower_order_final = i == n - 1
            && (self.euler_at_final || (self.lower_order_final && n < 15) || !self.final_sigma_min);
        let lower_order_second = i + 2 == n && self.lower_order_final && n < 15;
        let m = self.convert(model_output, sample, self.sigmas[i])?;
        self.outputs.push(m.clone());
        if self.outputs.len() > self.order {
            self.outputs.remove(0);
        }
        let z = match self.algorithm.sde() {
            true => Some(noise.draw(model_output)?),
            false => None,
        };
        let next = if self.order == 1 || self.lower_order_nums < 1 || lower_order_final {
            self.first_order(&m, sample, z.as_ref())?
        } else {
            // Order 2 is the highest this scheduler runs, so `lower_order_second` changes
            // nothing here; it would pick order 2 over 3.
            let _ = lower_order_second;
            self.second_order(sample, z.as_ref())?
        };
        if self.lower_order_nums < self.order {
            self.lower_order_nums += 1;
        }
        self.walk.index += 1;
        next.to_dtype(model_output.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, i: usize) -> Result<Tensor> {
        let i = current(
            i,
            &self.walk.timesteps,
            "DPMSolverMultistepScheduler.add_noise",
        )?;
        let (a, s) = Self::alpha_sigma(self.sigmas[i]);
        combine(&[(a, original), (s, noise)])?.to_dtype(original.dtype())
    }
}
