//! Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"): the update is the
//! sign of an interpolation between momentum and gradient, so every coordinate moves by exactly
//! lr. It keeps one moment instead of Adam's two.
//!
//! ```text
//! p <- p * (1 - lr * wd)                    (decoupled; only where decay applies)
//! p <- p - lr * sign(b1 m + (1 - b1) g)
//! m <- b2 m + (1 - b2) g
//! ```
//!
//! Because its steps have unit size per coordinate, Lion wants a learning rate 3-10x smaller
//! than AdamW's and a weight decay 3-10x larger. As AdamW here, decay skips 1-D parameters
//! unless `decay_1d_params` is set.

use super::optimizer::{numbered, Optimizer, OptimizerCore, ParamState};
use crate::backend::spec::optim::UpdateRule;
use crate::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LionConfig {
    pub lr: f64,
    pub betas: (f64, f64),
    pub weight_decay: f64,
    pub decay_1d_params: bool,
}

impl Default for LionConfig {
    /// The paper's defaults: lr 1e-4, betas (0.9, 0.99).
    fn default() -> Self {
        LionConfig {
            lr: 1e-4,
            betas: (0.9, 0.99),
            weight_decay: 0.0,
            decay_1d_params: false,
        }
    }
}

pub struct Lion {
    core: OptimizerCore,
    pub config: LionConfig,
}

impl Lion {
    pub fn new(params: Vec<Tensor>, config: LionConfig) -> Result<Self> {
        Self::named(numbered(params), config)
    }

    pub fn named(params: Vec<(String, Tensor)>, config: LionConfig) -> Result<Self> {
        let (b1, b2) = config.betas;
        if !((0.0..=1.0).contains(&b1) && (0.0..=1.0).contains(&b2) && config.weight_decay >= 0.0) {
            return Err(Error::invalid(
                "Lion",
                format!("betas must be in [0, 1] and weight_decay >= 0, got {config:?}"),
            ));
        }
        Ok(Lion {
            core: OptimizerCore::new(params, config.lr)?,
            config,
        })
    }
}

impl Optimizer for Lion {
    fn core(&self) -> &OptimizerCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut OptimizerCore {
        &mut self.core
    }

    fn kind(&self) -> &'static str {
        "lion"
    }

    fn state_fields(&self) -> &'static [&'static str] {
        &["exp_avg"]
    }

    fn fused_rule(&self) -> Option<UpdateRule> {
        let c = &self.config;
        Some(UpdateRule::Lion {
            betas: c.betas,
            weight_decay: c.weight_decay,
            decay_1d_params: c.decay_1d_params,
        })
    }

    fn update(&self, p: &Tensor, g: &Tensor, st: &mut ParamState, lr: f64) -> Result<()> {
        let c = &self.config;
        let (b1, b2) = c.betas;
        if c.weight_decay != 0.0 && (p.rank() >= 2 || c.decay_1d_params) {
            p.mul_scalar_(1.0 - lr * c.weight_decay)?;
        }
        let m = &st.tensors[0];
        let direction = m.mul_scalar(b1)?.add(&g.mul_scalar(1.0 - b1)?)?.sign()?;
        p.sub_(&direction.mul_scalar(lr)?)?;
        m.mul_scalar_(b2)?;
        m.add_(&g.mul_scalar(1.0 - b2)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lion_moves_each_coordinate_by_lr_times_sign_and_tracks_momentum() {
        let p = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 1.0], &[2, 2])
            .unwrap()
            .requires_grad_()
            .unwrap();
        let cfg = LionConfig {
            lr: 0.1,
            weight_decay: 1.0,
            ..Default::default()
        };
        let mut opt = Lion::new(vec![p.clone()], cfg).unwrap();
        p.set_grad(Some(
            Tensor::from_slice(&[3.0f32, -0.01, 0.0, 2.0], &[2, 2]).unwrap(),
        ));
        opt.step().unwrap();
        // Decay: 1 * (1 - 0.1) = 0.9; then -0.1 * sign(0.1 g).
        assert_eq!(
            p.to_vec_f32().unwrap(),
            [0.9 - 0.1, 0.9 + 0.1, 0.9, 0.9 - 0.1]
        );
        // Step 2 with g = -1 everywhere: direction = sign(0.9 m - 0.1), m = 0.01 g1.
        // Coordinate 0: 0.9 * 0.03 - 0.1 < 0, so it moves up by lr after decay.
        p.set_grad(Some(Tensor::from_slice(&[-1.0f32; 4], &[2, 2]).unwrap()));
        opt.step().unwrap();
        let got = p.to_vec_f64().unwrap()[0];
        assert!((got - ((0.8 * 0.9) + 0.1)).abs() < 1e-6, "{got}");
        let m = opt.core().param_state(0).unwrap().tensors[0]
            .to_vec_f64()
            .unwrap();
        // m = 0.99 * 0.03 + 0.01 * (-1).
        assert!((m[0] - (0.99 * 0.03 - 0.01)).abs() < 1e-7, "{m:?}");
    }
}
