//! Which optimizer a run trains with and its settings, as ultralytics' `build_optimizer`
//! chooses them, and the engine optimizers for the three parameter groups.
//!
//! `optimizer=auto` looks at the run's length in nominal batches,
//! `ceil(dataset_size / max(batch, nbs)) * epochs`: above 10000 it trains with lr 0.01 and
//! momentum 0.9; otherwise AdamW with `lr = round(0.002 * 5 / (4 + nc), 6)` and betas
//! (0.9, 0.999). Either way it ignores `lr0` and sets `warmup_bias_lr` to 0. For the long runs
//! ultralytics 8.4.190 picks MuSGD (Muon on matrices and filters plus SGD), which the engine
//! does not have; it takes SGD with Nesterov momentum there, as ultralytics up to 8.3 did.
//! An explicit `SGD` or `AdamW` keeps `lr0` and `momentum` (defaults 0.01 and 0.937).
//!
//! The groups are three engine optimizers of one kind, one per group, each with its own
//! weight decay (the optimizer core has no parameter groups): ultralytics' groups differ only
//! in weight decay and, during warmup, learning rate, which each optimizer carries.

use super::param_groups::ParamGroups;
use super::results_csv::python_round;
use super::schedule::IterationSettings;
use crate::optim::{AdamW, AdamWConfig, NormScope, Optimizer, Sgd, SgdConfig, StepOutcome};
use crate::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    /// SGD with Nesterov momentum, coupled (L2) weight decay.
    Sgd,
    /// AdamW, decoupled weight decay.
    AdamW,
}

/// The optimizer a run trains with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimizerChoice {
    pub kind: OptimizerKind,
    pub lr0: f64,
    /// SGD's momentum, or AdamW's beta1 (beta2 is 0.999).
    pub momentum: f64,
    /// The bias group's starting warmup rate (auto sets it to 0).
    pub warmup_bias_lr: f64,
}

/// What the choice reads: the run's settings (ultralytics' `optimizer`, `lr0`, `momentum`,
/// `warmup_bias_lr`, `batch`, `nbs`, `epochs`), the class count and the training set's size.
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceInputs {
    pub optimizer: String,
    pub lr0: f64,
    pub momentum: f64,
    pub warmup_bias_lr: f64,
    pub nc: usize,
    pub dataset_size: usize,
    pub batch_size: usize,
    pub nbs: usize,
    pub epochs: usize,
}

/// Runs longer than this many nominal batches take SGD under `auto`.
pub const AUTO_SGD_ABOVE_ITERATIONS: usize = 10_000;

/// The run's length as `auto` counts it: `ceil(dataset_size / max(batch, nbs)) * epochs`.
pub fn auto_iterations(dataset_size: usize, batch_size: usize, nbs: usize, epochs: usize) -> usize {
    dataset_size.div_ceil(batch_size.max(nbs).max(1)) * epochs
}

/// `round(0.002 * 5 / (4 + nc), 6)`, AdamW's rate under `auto`.
pub fn auto_adamw_lr(nc: usize) -> f64 {
    python_round(0.002 * 5.0 / (4.0 + nc as f64), 6)
}

pub fn choose_optimizer(inputs: &ChoiceInputs) -> Result<OptimizerChoice> {
    let name = inputs.optimizer.to_ascii_lowercase();
    match name.as_str() {
        "auto" => {
            let iterations = auto_iterations(
                inputs.dataset_size,
                inputs.batch_size,
                inputs.nbs,
                inputs.epochs,
            );
            let (kind, lr0) = if iterations > AUTO_SGD_ABOVE_ITERATIONS {
                (OptimizerKind::Sgd, 0.01)
            } else {
                (OptimizerKind::AdamW, auto_adamw_lr(inputs.nc))
            };
            Ok(OptimizerChoice {
                kind,
                lr0,
                momentum: 0.9,
                warmup_bias_lr: 0.0,
            })
        }
        "sgd" | "adamw" => Ok(OptimizerChoice {
            kind: if name == "sgd" {
                OptimizerKind::Sgd
            } else {
                OptimizerKind::AdamW
            },
            lr0: inputs.lr0,
            momentum: inputs.momentum,
            warmup_bias_lr: inputs.warmup_bias_lr,
        }),
        _ => Err(Error::invalid(
            "yolo optimizer",
            format!(
                "unsupported optimizer {:?}: use auto, SGD or AdamW",
                inputs.optimizer
            ),
        )),
    }
}

/// What `GroupOptimizers::clip_and_step` did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GroupStep {
    /// Every group stepped; `grad_norm` is the global norm before clipping.
    Applied { grad_norm: f64 },
    /// Queued on the CUDA device, which clips and decides there whether the groups step (all
    /// or none): nothing waited. A skip shows in `skipped_steps` (and is warned about once
    /// read).
    Queued,
    /// The norm was not finite: nothing stepped and the gradients were cleared.
    Skipped { norm: f64 },
}

/// The three groups' optimizers, in ultralytics' order (pg0 decayed weights, pg1 norm
/// weights, pg2 biases).
pub enum GroupOptimizers {
    Sgd([Sgd; 3]),
    AdamW([AdamW; 3]),
}

impl GroupOptimizers {
    /// `weight_decay` (already scaled, `param_groups::scaled_weight_decay`) applies to pg0 only.
    pub fn new(
        choice: &OptimizerChoice,
        groups: ParamGroups,
        weight_decay: f64,
    ) -> Result<GroupOptimizers> {
        let ParamGroups {
            weights,
            norm_weights,
            biases,
        } = groups;
        let decays = [weight_decay, 0.0, 0.0];
        let params = [weights, norm_weights, biases];
        let groups = match choice.kind {
            OptimizerKind::Sgd => {
                let [a, b, c] = params;
                let sgd = |p, wd| {
                    Sgd::named(
                        p,
                        SgdConfig {
                            lr: choice.lr0,
                            momentum: choice.momentum,
                            dampening: 0.0,
                            nesterov: true,
                            weight_decay: wd,
                        },
                    )
                };
                GroupOptimizers::Sgd([sgd(a, decays[0])?, sgd(b, decays[1])?, sgd(c, decays[2])?])
            }
            OptimizerKind::AdamW => {
                let [a, b, c] = params;
                let adamw = |p, wd| {
                    AdamW::named(
                        p,
                        AdamWConfig {
                            lr: choice.lr0,
                            betas: (choice.momentum, 0.999),
                            eps: 1e-8,
                            weight_decay: wd,
                            // The group, not the rank, decides what decays.
                            decay_1d_params: true,
                        },
                    )
                };
                GroupOptimizers::AdamW([
                    adamw(a, decays[0])?,
                    adamw(b, decays[1])?,
                    adamw(c, decays[2])?,
                ])
            }
        };
        Ok(groups.quiet_followers())
    }

    /// pg0 warns about skipped steps for all three (they skip together).
    fn quiet_followers(mut self) -> Self {
        for o in self.groups_mut().into_iter().skip(1) {
            o.core_mut().warn_skips = false;
        }
        self
    }

    pub fn kind(&self) -> OptimizerKind {
        match self {
            GroupOptimizers::Sgd(_) => OptimizerKind::Sgd,
            GroupOptimizers::AdamW(_) => OptimizerKind::AdamW,
        }
    }

    /// The three optimizers, pg0 first.
    pub fn groups(&self) -> [&dyn Optimizer; 3] {
        match self {
            GroupOptimizers::Sgd([a, b, c]) => [a, b, c],
            GroupOptimizers::AdamW([a, b, c]) => [a, b, c],
        }
    }

    pub fn groups_mut(&mut self) -> [&mut dyn Optimizer; 3] {
        match self {
            GroupOptimizers::Sgd([a, b, c]) => [a, b, c],
            GroupOptimizers::AdamW([a, b, c]) => [a, b, c],
        }
    }

    /// Sets each group's rate and, for SGD, the momentum (AdamW's beta1 stays, as in
    /// ultralytics, whose Adam groups have no `momentum` key to warm).
    pub fn apply(&mut self, settings: &IterationSettings) -> Result<()> {
        for (opt, &lr) in self.groups_mut().into_iter().zip(&settings.lrs) {
            opt.set_lr(lr)?;
        }
        if let GroupOptimizers::Sgd(groups) = self {
            for sgd in groups {
                sgd.config.momentum = settings.momentum;
            }
        }
        Ok(())
    }

    /// The groups' current rates (results.csv's lr/pg0..2).
    pub fn lrs(&self) -> [f64; 3] {
        self.groups().map(|o| o.lr())
    }

    /// Steps every group as they stand (no clipping across groups; `clip_and_step` is
    /// ultralytics' step).
    pub fn step(&mut self) -> Result<Vec<StepOutcome>> {
        self.groups_mut().into_iter().map(|o| o.step()).collect()
    }

    /// ultralytics' `optimizer_step` without the AMP scaler: one gradient norm over all three
    /// groups, clipped to `max_norm` (ultralytics uses 10), and every group steps by it. A
    /// non-finite norm steps none of them and clears the gradients, as the grad scaler skips
    /// the whole optimizer (a group checking only its own gradients would step alone). On CUDA
    /// the norm, the clip and the skip stay on the device, so the host does not wait.
    pub fn clip_and_step(&mut self, max_norm: f64) -> Result<GroupStep> {
        let params: Vec<Tensor> = self
            .groups()
            .iter()
            .flat_map(|o| o.core().tensors())
            .collect();
        let scope = NormScope {
            params: &params,
            max_norm: Some(max_norm),
        };
        let mut first = None;
        for o in self.groups_mut() {
            let outcome = o.step_in_scope(scope)?;
            first.get_or_insert(outcome);
        }
        Ok(match first {
            Some(StepOutcome::Applied { grad_norm, .. }) => GroupStep::Applied { grad_norm },
            Some(StepOutcome::Skipped { norm }) => {
                self.zero_grad();
                GroupStep::Skipped { norm }
            }
            _ => GroupStep::Queued,
        })
    }

    /// Optimizer steps skipped so far for a non-finite norm (the groups skip together, so
    /// pg0's count). On CUDA this waits for the queued steps.
    pub fn skipped_steps(&self) -> u64 {
        self.groups()[0].skipped_steps()
    }

    pub fn zero_grad(&mut self) {
        for o in self.groups_mut() {
            o.zero_grad();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device};

    fn inputs(optimizer: &str, dataset_size: usize, epochs: usize, nc: usize) -> ChoiceInputs {
        ChoiceInputs {
            optimizer: optimizer.into(),
            lr0: 0.01,
            momentum: 0.937,
            warmup_bias_lr: 0.1,
            nc,
            dataset_size,
            batch_size: 16,
            nbs: 64,
            epochs,
        }
    }

    #[test]
    fn auto_counts_iterations_in_nominal_batches() {
        // ceil(1600 / max(16, 64)) * 30 = 750; COCO train2017: ceil(118287 / 64) * 30 = 55470.
        assert_eq!(auto_iterations(1600, 16, 64, 30), 750);
        assert_eq!(auto_iterations(118287, 16, 64, 30), 55470);
        assert_eq!(auto_iterations(1000, 128, 64, 3), 24);
    }

    #[test]
    fn auto_short_runs_take_adamw_at_the_fitted_rate() {
        // round(0.002 * 5 / (4 + 80), 6) = 0.000119; nc 3: 0.001429.
        let c = choose_optimizer(&inputs("auto", 1600, 30, 80)).unwrap();
        assert_eq!(c.kind, OptimizerKind::AdamW);
        assert_eq!((c.lr0, c.momentum, c.warmup_bias_lr), (0.000119, 0.9, 0.0));
        assert_eq!(auto_adamw_lr(3), 0.001429);
    }

    #[test]
    fn auto_long_runs_take_sgd() {
        let c = choose_optimizer(&inputs("auto", 118287, 30, 80)).unwrap();
        assert_eq!(c.kind, OptimizerKind::Sgd);
        assert_eq!((c.lr0, c.momentum, c.warmup_bias_lr), (0.01, 0.9, 0.0));
        // Exactly 10000 iterations is still "short": ceil(64000 / 64) * 10.
        let c = choose_optimizer(&inputs("auto", 64000, 10, 80)).unwrap();
        assert_eq!(c.kind, OptimizerKind::AdamW);
    }

    #[test]
    fn explicit_choices_keep_lr0_and_momentum() {
        let c = choose_optimizer(&inputs("SGD", 100, 1, 80)).unwrap();
        assert_eq!(c.kind, OptimizerKind::Sgd);
        assert_eq!((c.lr0, c.momentum, c.warmup_bias_lr), (0.01, 0.937, 0.1));
        let c = choose_optimizer(&inputs("adamw", 100, 1, 80)).unwrap();
        assert_eq!(c.kind, OptimizerKind::AdamW);
        assert!(choose_optimizer(&inputs("MuSGD", 100, 1, 80)).is_err());
    }

    fn param(name: &str, v: f32) -> (String, Tensor) {
        let t = Tensor::full(v as f64, &[2], DType::F32, Device::Cpu)
            .unwrap()
            .requires_grad_()
            .unwrap();
        (name.to_string(), t)
    }

    /// Groups of one [2] parameter of ones each, and those tensors in group order.
    fn one_parameter_per_group() -> (ParamGroups, Vec<Tensor>) {
        let groups = ParamGroups {
            weights: vec![param("w", 1.0)],
            norm_weights: vec![param("bn.weight", 1.0)],
            biases: vec![param("bias", 1.0)],
        };
        let tensors = [&groups.weights, &groups.norm_weights, &groups.biases]
            .iter()
            .map(|g| g[0].1.clone())
            .collect();
        (groups, tensors)
    }

    #[test]
    fn only_the_weight_group_decays_and_sgd_momentum_follows_the_schedule() {
        let (groups, tensors) = one_parameter_per_group();
        let choice = choose_optimizer(&inputs("SGD", 100, 1, 80)).unwrap();
        let mut opt = GroupOptimizers::new(&choice, groups, 0.5).unwrap();
        opt.apply(&IterationSettings {
            lrs: [0.1, 0.2, 0.3],
            momentum: 0.8,
            accumulate: 1,
        })
        .unwrap();
        assert_eq!(opt.lrs(), [0.1, 0.2, 0.3]);
        if let GroupOptimizers::Sgd(g) = &opt {
            assert!(g.iter().all(|s| s.config.momentum == 0.8));
        }
        for t in &tensors {
            t.set_grad(Some(Tensor::zeros(&[2], DType::F32, Device::Cpu).unwrap()));
        }
        opt.step().unwrap();
        // Zero gradients: only decay moves a parameter. pg0: g = 0.5 * 1, Nesterov
        // g + 0.8 * g = 0.9, p = 1 - 0.1 * 0.9 = 0.91; the others stay at 1.
        let v: Vec<f32> = tensors
            .iter()
            .map(|t| t.to_vec::<f32>().unwrap()[0])
            .collect();
        assert!((v[0] - 0.91).abs() < 1e-6, "{v:?}");
        assert_eq!((v[1], v[2]), (1.0, 1.0));
    }

    fn sgd_with_grads(grads: [[f32; 2]; 3]) -> (GroupOptimizers, Vec<Tensor>) {
        let (groups, tensors) = one_parameter_per_group();
        let choice = OptimizerChoice {
            kind: OptimizerKind::Sgd,
            lr0: 0.1,
            momentum: 0.9,
            warmup_bias_lr: 0.0,
        };
        let opt = GroupOptimizers::new(&choice, groups, 0.0).unwrap();
        for (t, g) in tensors.iter().zip(grads) {
            t.set_grad(Some(Tensor::from_slice(&g, &[2]).unwrap()));
        }
        (opt, tensors)
    }

    #[test]
    fn clip_and_step_clips_the_norm_over_all_groups() {
        // Gradients (30, 40) in pg0, (0, 0) elsewhere: global norm 50, clipped by
        // 10 / (50 + 1e-6) to about (6, 8). First Nesterov SGD step: g + 0.9 g = 1.9 g, so
        // p = 1 - 0.1 * 1.9 * (6, 8) = (-0.14, -0.52).
        let (mut opt, t) = sgd_with_grads([[30.0, 40.0], [0.0, 0.0], [0.0, 0.0]]);
        let out = opt.clip_and_step(10.0).unwrap();
        assert_eq!(out, GroupStep::Applied { grad_norm: 50.0 });
        let w = t[0].to_vec::<f32>().unwrap();
        assert!(
            (w[0] + 0.14).abs() < 1e-5 && (w[1] + 0.52).abs() < 1e-5,
            "{w:?}"
        );
    }

    #[test]
    fn a_non_finite_norm_in_one_group_steps_no_group() {
        let (mut opt, t) = sgd_with_grads([[1.0, 1.0], [1.0, 1.0], [f32::NAN, 0.0]]);
        let out = opt.clip_and_step(10.0).unwrap();
        assert!(matches!(out, GroupStep::Skipped { .. }), "{out:?}");
        for p in &t {
            assert_eq!(p.to_vec::<f32>().unwrap(), vec![1.0, 1.0]);
            assert!(p.grad().is_none());
        }
    }
}
