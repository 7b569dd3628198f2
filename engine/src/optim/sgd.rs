//! SGD with momentum, dampening, Nesterov and (coupled, L2) weight decay, as torch.optim.SGD:
//!
//! ```text
//! g <- g + wd p
//! b <- g                                  (first step)
//! b <- mu b + (1 - dampening) g           (later steps)
//! g <- g + mu b  (Nesterov)  or  g <- b
//! p <- p - lr g
//! ```

use super::optimizer::{numbered, Optimizer, OptimizerCore, ParamState};
use crate::backend::spec::optim::UpdateRule;
use crate::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 1e-2,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        }
    }
}

pub struct Sgd {
    core: OptimizerCore,
    pub config: SgdConfig,
}

impl Sgd {
    pub fn new(params: Vec<Tensor>, config: SgdConfig) -> Result<Self> {
        Self::named(numbered(params), config)
    }

    pub fn named(params: Vec<(String, Tensor)>, config: SgdConfig) -> Result<Self> {
        if !(config.momentum >= 0.0 && config.weight_decay >= 0.0) {
            return Err(Error::invalid(
                "SGD",
                "momentum and weight_decay must be >= 0",
            ));
        }
        if config.nesterov && (config.momentum <= 0.0 || config.dampening != 0.0) {
            return Err(Error::invalid(
                "SGD",
                "Nesterov momentum needs momentum > 0 and zero dampening",
            ));
        }
        Ok(Sgd {
            core: OptimizerCore::new(params, config.lr)?,
            config,
        })
    }
}

impl Optimizer for Sgd {
    fn core(&self) -> &OptimizerCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut OptimizerCore {
        &mut self.core
    }

    fn kind(&self) -> &'static str {
        "sgd"
    }

    fn state_fields(&self) -> &'static [&'static str] {
        if self.config.momentum != 0.0 {
            &["momentum_buffer"]
        } else {
            &[]
        }
    }

    fn fused_rule(&self) -> Option<UpdateRule> {
        let c = &self.config;
        Some(UpdateRule::Sgd {
            momentum: c.momentum,
            dampening: c.dampening,
            nesterov: c.nesterov,
            weight_decay: c.weight_decay,
        })
    }

    fn update(&self, p: &Tensor, g: &Tensor, st: &mut ParamState, lr: f64) -> Result<()> {
        let c = &self.config;
        let mut g = g.clone();
        if c.weight_decay != 0.0 {
            g = g.add(&p.to_dtype(g.dtype())?.mul_scalar(c.weight_decay)?)?;
        }
        if c.momentum != 0.0 {
            let buf = &st.tensors[0];
            if st.step == 1 {
                buf.copy_(&g)?;
            } else {
                buf.mul_scalar_(c.momentum)?;
                buf.add_(&g.mul_scalar(1.0 - c.dampening)?)?;
            }
            g = if c.nesterov {
                g.add(&buf.mul_scalar(c.momentum)?)?
            } else {
                buf.clone()
            };
        }
        p.sub_(&g.mul_scalar(lr)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cfg: SgdConfig, grads: &[f32]) -> f64 {
        let p = Tensor::from_slice(&[1.0f32], &[1])
            .unwrap()
            .requires_grad_()
            .unwrap();
        let mut opt = Sgd::new(vec![p.clone()], cfg).unwrap();
        for &g in grads {
            p.set_grad(Some(Tensor::from_slice(&[g], &[1]).unwrap()));
            opt.step().unwrap();
        }
        p.to_vec_f64().unwrap()[0]
    }

    #[test]
    fn sgd_nesterov_matches_hand_computation_over_two_steps() {
        let cfg = SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 0.1,
            ..Default::default()
        };
        // Step 1: g = 1 + 0.1*1 = 1.1, b = 1.1, update 1.1 + 0.9*1.1 = 2.09, p = 0.791.
        // Step 2: g = 2 + 0.1*0.791 = 2.0791, b = 0.99 + 2.0791 = 3.0691,
        //         update 2.0791 + 0.9*3.0691 = 4.84129, p = 0.791 - 0.484129 = 0.306871.
        let got = run(cfg, &[1.0, 2.0]);
        assert!((got - 0.306871).abs() < 1e-6, "{got}");
    }

    #[test]
    fn sgd_heavy_ball_momentum_with_dampening_matches_hand_computation() {
        let cfg = SgdConfig {
            lr: 0.5,
            momentum: 0.5,
            dampening: 0.5,
            ..Default::default()
        };
        // Step 1: b = 2 (no dampening on the first step), p = 1 - 1 = 0.
        // Step 2: b = 0.5*2 + 0.5*2 = 2, p = -1.
        assert!((run(cfg, &[2.0, 2.0]) + 1.0).abs() < 1e-7);
        assert!(
            (run(
                SgdConfig {
                    lr: 0.5,
                    ..Default::default()
                },
                &[2.0]
            ) - 0.0)
                .abs()
                < 1e-7
        );
    }

    #[test]
    fn sgd_momentum_buffer_never_aliases_the_gradient() {
        let p = Tensor::from_slice(&[1.0f32], &[1])
            .unwrap()
            .requires_grad_()
            .unwrap();
        let cfg = SgdConfig {
            momentum: 0.9,
            ..Default::default()
        };
        let mut opt = Sgd::new(vec![p.clone()], cfg).unwrap();
        let g = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        p.set_grad(Some(g.clone()));
        opt.step().unwrap();
        opt.step().unwrap();
        assert_eq!(g.to_vec_f32().unwrap(), [1.0]);
    }

    #[test]
    fn sgd_rejects_nesterov_without_momentum() {
        let p = Tensor::from_slice(&[1.0f32], &[1])
            .unwrap()
            .requires_grad_()
            .unwrap();
        let cfg = SgdConfig {
            nesterov: true,
            ..Default::default()
        };
        assert!(Sgd::new(vec![p], cfg).is_err());
    }
}
