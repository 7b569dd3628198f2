//! RMSprop as torch.optim.RMSprop (Hinton's running mean of squared gradients), with L2 weight
//! decay, momentum and the centered variant:
//!
//! ```text
//! g   <- g + wd p
//! v   <- alpha v + (1 - alpha) g^2
//! avg <- sqrt(v - gm^2) + eps, gm <- alpha gm + (1 - alpha) g   (centered)
//!        sqrt(v) + eps                                          (otherwise)
//! b   <- mu b + g / avg;  p <- p - lr b                         (momentum)
//! p   <- p - lr g / avg                                         (otherwise)
//! ```

use super::optimizer::{numbered, Optimizer, OptimizerCore, ParamState};
use crate::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmspropConfig {
    pub lr: f64,
    pub alpha: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub centered: bool,
}

impl Default for RmspropConfig {
    /// PyTorch's defaults (lr 1e-2, alpha 0.99, eps 1e-8, no decay, no momentum, uncentered).
    fn default() -> Self {
        RmspropConfig {
            lr: 1e-2,
            alpha: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
        }
    }
}

pub struct Rmsprop {
    core: OptimizerCore,
    pub config: RmspropConfig,
}

impl Rmsprop {
    pub fn new(params: Vec<Tensor>, config: RmspropConfig) -> Result<Self> {
        Self::named(numbered(params), config)
    }

    pub fn named(params: Vec<(String, Tensor)>, config: RmspropConfig) -> Result<Self> {
        let c = &config;
        if !((0.0..=1.0).contains(&c.alpha)
            && c.eps >= 0.0
            && c.weight_decay >= 0.0
            && c.momentum >= 0.0)
        {
            return Err(Error::invalid(
                "RMSprop",
                format!("alpha must be in [0, 1] and eps, weight_decay, momentum >= 0, got {c:?}"),
            ));
        }
        Ok(Rmsprop {
            core: OptimizerCore::new(params, config.lr)?,
            config,
        })
    }
}

impl Optimizer for Rmsprop {
    fn core(&self) -> &OptimizerCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut OptimizerCore {
        &mut self.core
    }

    fn kind(&self) -> &'static str {
        "rmsprop"
    }

    /// PyTorch's state names; the momentum buffer and the gradient average only when used.
    fn state_fields(&self) -> &'static [&'static str] {
        match (self.config.momentum > 0.0, self.config.centered) {
            (false, false) => &["square_avg"],
            (true, false) => &["square_avg", "momentum_buffer"],
            (false, true) => &["square_avg", "grad_avg"],
            (true, true) => &["square_avg", "momentum_buffer", "grad_avg"],
        }
    }

    fn update(&self, p: &Tensor, g: &Tensor, st: &mut ParamState, lr: f64) -> Result<()> {
        let c = &self.config;
        let g = match c.weight_decay {
            0.0 => g.clone(),
            wd => g.add(&p.mul_scalar(wd)?)?,
        };
        let square_avg = &st.tensors[0];
        square_avg.mul_scalar_(c.alpha)?;
        square_avg.add_(&g.square()?.mul_scalar(1.0 - c.alpha)?)?;
        let momentum = c.momentum > 0.0;
        let avg = if c.centered {
            let grad_avg = &st.tensors[if momentum { 2 } else { 1 }];
            grad_avg.mul_scalar_(c.alpha)?;
            grad_avg.add_(&g.mul_scalar(1.0 - c.alpha)?)?;
            square_avg.sub(&grad_avg.square()?)?.sqrt()?
        } else {
            square_avg.sqrt()?
        }
        .add_scalar(c.eps)?;
        if momentum {
            let buf = &st.tensors[1];
            buf.mul_scalar_(c.momentum)?;
            buf.add_(&g.div(&avg)?)?;
            p.sub_(&buf.mul_scalar(lr)?)
        } else {
            p.sub_(&g.div(&avg)?.mul_scalar(lr)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: RmspropConfig, grads: &[f32]) -> f64 {
        let p = Tensor::from_slice(&[1.0f32], &[1])
            .unwrap()
            .requires_grad_()
            .unwrap();
        let mut opt = Rmsprop::new(vec![p.clone()], config).unwrap();
        for &g in grads {
            p.set_grad(Some(Tensor::from_slice(&[g], &[1]).unwrap()));
            opt.step().unwrap();
        }
        p.to_vec_f64().unwrap()[0]
    }

    #[test]
    fn two_plain_steps_match_the_formula() {
        let c = RmspropConfig {
            lr: 0.1,
            alpha: 0.9,
            eps: 0.0,
            ..Default::default()
        };
        // v1 = 0.1 * 4 = 0.4, p1 = 1 - 0.1 * 2 / sqrt(0.4); v2 = 0.36 + 0.1 = 0.46.
        let p1 = 1.0 - 0.1 * 2.0 / 0.4f64.sqrt();
        let want = p1 - 0.1 * 1.0 / 0.46f64.sqrt();
        assert!((run(c, &[2.0, 1.0]) - want).abs() < 1e-6);
    }

    #[test]
    fn centered_momentum_steps_match_the_formula() {
        let c = RmspropConfig {
            lr: 0.1,
            alpha: 0.9,
            eps: 0.0,
            momentum: 0.5,
            centered: true,
            ..Default::default()
        };
        // Step 1 (g = 2): v = 0.4, gm = 0.2, avg = sqrt(0.4 - 0.04), b = 2 / avg.
        let b1 = 2.0 / (0.4f64 - 0.04).sqrt();
        let p1 = 1.0 - 0.1 * b1;
        // Step 2 (g = 1): v = 0.46, gm = 0.28, avg = sqrt(0.46 - 0.0784), b = 0.5 b1 + 1 / avg.
        let b2 = 0.5 * b1 + 1.0 / (0.46f64 - 0.0784).sqrt();
        let want = p1 - 0.1 * b2;
        assert!((run(c, &[2.0, 1.0]) - want).abs() < 1e-5);
    }
}
