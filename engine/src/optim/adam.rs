//! Adam (Kingma & Ba) as torch.optim.Adam: weight decay, when set, is L2 added to the gradient
//! of every parameter (AdamW decouples it instead), then AdamW's moments and bias-corrected
//! step:
//!
//! ```text
//! g <- g + wd p
//! m <- b1 m + (1 - b1) g
//! v <- b2 v + (1 - b2) g^2
//! p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//! ```

use super::adamw::moments_step;
use super::optimizer::{numbered, Optimizer, OptimizerCore, ParamState};
use crate::backend::spec::optim::UpdateRule;
use crate::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamConfig {
    /// PyTorch's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay).
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

pub struct Adam {
    core: OptimizerCore,
    pub config: AdamConfig,
}

impl Adam {
    pub fn new(params: Vec<Tensor>, config: AdamConfig) -> Result<Self> {
        Self::named(numbered(params), config)
    }

    pub fn named(params: Vec<(String, Tensor)>, config: AdamConfig) -> Result<Self> {
        let (b1, b2) = config.betas;
        if !((0.0..1.0).contains(&b1) && (0.0..1.0).contains(&b2)) {
            return Err(Error::invalid(
                "Adam",
                format!("betas must be in [0, 1), got {:?}", config.betas),
            ));
        }
        if !(config.eps >= 0.0 && config.weight_decay >= 0.0) {
            return Err(Error::invalid("Adam", "eps and weight_decay must be >= 0"));
        }
        Ok(Adam {
            core: OptimizerCore::new(params, config.lr)?,
            config,
        })
    }
}

impl Optimizer for Adam {
    fn core(&self) -> &OptimizerCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut OptimizerCore {
        &mut self.core
    }

    fn kind(&self) -> &'static str {
        "adam"
    }

    fn state_fields(&self) -> &'static [&'static str] {
        &["exp_avg", "exp_avg_sq"]
    }

    /// Without weight decay Adam is AdamW's rule with none, which the fused kernels run.
    fn fused_rule(&self) -> Option<UpdateRule> {
        let c = &self.config;
        (c.weight_decay == 0.0).then_some(UpdateRule::AdamW {
            betas: c.betas,
            eps: c.eps,
            weight_decay: 0.0,
            decay_1d_params: false,
        })
    }

    fn update(&self, p: &Tensor, g: &Tensor, st: &mut ParamState, lr: f64) -> Result<()> {
        let c = &self.config;
        let g = match c.weight_decay {
            0.0 => g.clone(),
            wd => g.add(&p.mul_scalar(wd)?)?,
        };
        moments_step(p, &g, st, lr, c.betas, c.eps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_decay_enters_through_the_gradient() {
        // One step from p = 1 with g = 0 and wd = 0.5: the gradient becomes 0.5, and Adam's
        // first step moves by lr * sign(g) = 0.1 whatever its size.
        let p = Tensor::from_slice(&[1.0f32], &[1])
            .unwrap()
            .requires_grad_()
            .unwrap();
        p.set_grad(Some(Tensor::from_slice(&[0.0f32], &[1]).unwrap()));
        let cfg = AdamConfig {
            lr: 0.1,
            weight_decay: 0.5,
            ..Default::default()
        };
        let mut opt = Adam::new(vec![p.clone()], cfg).unwrap();
        opt.step().unwrap();
        let got = p.to_vec_f64().unwrap()[0];
        assert!((got - 0.9).abs() < 1e-6, "{got}");
    }

    #[test]
    fn without_decay_it_steps_as_adamw_without_decay() {
        let run = |adam: bool| {
            let p = Tensor::from_slice(&[0.5f32, -1.0], &[2])
                .unwrap()
                .requires_grad_()
                .unwrap();
            let mut opt: Box<dyn Optimizer> = match adam {
                true => Box::new(Adam::new(vec![p.clone()], AdamConfig::default()).unwrap()),
                false => Box::new(
                    super::super::AdamW::new(
                        vec![p.clone()],
                        super::super::AdamWConfig {
                            weight_decay: 0.0,
                            ..Default::default()
                        },
                    )
                    .unwrap(),
                ),
            };
            for g in [0.3f32, -0.7, 0.1] {
                p.set_grad(Some(Tensor::from_slice(&[g, 2.0 * g], &[2]).unwrap()));
                opt.step().unwrap();
            }
            p.to_vec_f64().unwrap()
        };
        assert_eq!(run(true), run(false));
    }
}
