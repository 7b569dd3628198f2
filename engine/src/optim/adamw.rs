//! AdamW (Loshchilov & Hutter): Adam with weight decay applied to the parameter directly
//! ("decoupled"), not through the gradient, exactly as torch.optim.AdamW orders it:
//!
//! ```text
//! p   <- p * (1 - lr * wd)                      (only where decay applies)
//! m   <- b1 m + (1 - b1) g
//! v   <- b2 v + (1 - b2) g^2
//! p   <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//! ```
//!
//! with t the parameter's step, from 1. By default decay skips 1-D parameters (biases and norm
//! weights), the usual practice for transformers; `decay_1d_params` turns it on for them.

use super::optimizer::{numbered, Optimizer, OptimizerCore, ParamState};
use crate::backend::spec::optim::UpdateRule;
use crate::{Error, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    /// Also decay parameters of rank <= 1 (biases, norm weights).
    pub decay_1d_params: bool,
}

impl Default for AdamWConfig {
    /// PyTorch's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01).
    fn default() -> Self {
        AdamWConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.01,
            decay_1d_params: false,
        }
    }
}

pub struct AdamW {
    core: OptimizerCore,
    pub config: AdamWConfig,
}

impl AdamW {
    pub fn new(params: Vec<Tensor>, config: AdamWConfig) -> Result<Self> {
        Self::named(numbered(params), config)
    }

    /// With parameter names (a module's `named_parameters()`) as the state's keys.
    pub fn named(params: Vec<(String, Tensor)>, config: AdamWConfig) -> Result<Self> {
        let (b1, b2) = config.betas;
        if !((0.0..1.0).contains(&b1) && (0.0..1.0).contains(&b2)) {
            return Err(Error::invalid(
                "AdamW",
                format!("betas must be in [0, 1), got {:?}", config.betas),
            ));
        }
        if !(config.eps >= 0.0 && config.weight_decay >= 0.0) {
            return Err(Error::invalid("AdamW", "eps and weight_decay must be >= 0"));
        }
        Ok(AdamW {
            core: OptimizerCore::new(params, config.lr)?,
            config,
        })
    }
}

impl Optimizer for AdamW {
    fn core(&self) -> &OptimizerCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut OptimizerCore {
        &mut self.core
    }

    fn kind(&self) -> &'static str {
        "adamw"
    }

    fn state_fields(&self) -> &'static [&'static str] {
        &["exp_avg", "exp_avg_sq"]
    }

    fn fused_rule(&self) -> Option<UpdateRule> {
        let c = &self.config;
        Some(UpdateRule::AdamW {
            betas: c.betas,
            eps: c.eps,
            weight_decay: c.weight_decay,
            decay_1d_params: c.decay_1d_params,
        })
    }

    fn update(&self, p: &Tensor, g: &Tensor, st: &mut ParamState, lr: f64) -> Result<()> {
        let c = &self.config;
        if c.weight_decay != 0.0 && (p.rank() >= 2 || c.decay_1d_params) {
            p.mul_scalar_(1.0 - lr * c.weight_decay)?;
        }
        moments_step(p, g, st, lr, c.betas, c.eps)
    }
}

/// Adam's moments and bias-corrected step (Adam and AdamW differ only in where the decay goes).
pub(super) fn moments_step(
    p: &Tensor,
    g: &Tensor,
    st: &mut ParamState,
    lr: f64,
    (b1, b2): (f64, f64),
    eps: f64,
) -> Result<()> {
    let (m, v) = (&st.tensors[0], &st.tensors[1]);
    m.mul_scalar_(b1)?;
    m.add_(&g.mul_scalar(1.0 - b1)?)?;
    v.mul_scalar_(b2)?;
    v.add_(&g.square()?.mul_scalar(1.0 - b2)?)?;
    let t = st.step as i32;
    let bias1 = 1.0 - b1.powi(t);
    let bias2 = 1.0 - b2.powi(t);
    let denom = v.sqrt()?.mul_scalar(1.0 / bias2.sqrt())?.add_scalar(eps)?;
    p.sub_(&m.div(&denom)?.mul_scalar(lr / bias1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(values: &[f32]) -> Tensor {
        Tensor::from_slice(values, &[values.len() / 2, 2])
            .unwrap()
            .requires_grad_()
            .unwrap()
    }

    #[test]
    fn adamw_one_step_matches_hand_computation_with_bias_correction_and_decoupled_decay() {
        let p = param(&[1.0, -2.0]);
        p.set_grad(Some(Tensor::from_slice(&[0.5f32, -1.0], &[1, 2]).unwrap()));
        let cfg = AdamWConfig {
            lr: 0.1,
            betas: (0.9, 0.99),
            eps: 1e-8,
            weight_decay: 0.5,
            decay_1d_params: false,
        };
        let mut opt = AdamW::new(vec![p.clone()], cfg).unwrap();
        opt.step().unwrap();
        // t = 1: m = 0.1 g, v = 0.01 g^2; m_hat = g, v_hat = g^2, so the Adam step is
        // lr * g / (|g| + eps) = 0.1 * sign(g). Decay first scales p by 1 - 0.1 * 0.5.
        let expect = |p0: f64, g: f64| {
            let m_hat = 0.1 * g / (1.0 - 0.9);
            let v_hat = 0.01 * g * g / (1.0 - 0.99);
            p0 * (1.0 - 0.05) - 0.1 * m_hat / (v_hat.sqrt() + 1e-8)
        };
        let got = p.to_vec_f64().unwrap();
        let want = [expect(1.0, 0.5), expect(-2.0, -1.0)];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
        assert!((want[0] - 0.85).abs() < 1e-6, "the hand formula itself");
    }

    #[test]
    fn adamw_second_step_uses_bias_correction_at_t_2() {
        let p = param(&[0.0, 0.0]);
        let cfg = AdamWConfig {
            lr: 1.0,
            weight_decay: 0.0,
            ..Default::default()
        };
        let mut opt = AdamW::new(vec![p.clone()], cfg).unwrap();
        for g in [1.0f32, 3.0] {
            p.set_grad(Some(Tensor::from_slice(&[g, g], &[1, 2]).unwrap()));
            opt.step().unwrap();
        }
        // After g=1 then g=3: m = 0.9*0.1 + 0.1*3 = 0.39, v = 0.999*0.001 + 0.001*9 = 0.009999.
        let (m_hat, v_hat) = (0.39 / (1.0 - 0.81), 0.009999 / (1.0 - 0.998001));
        let want = -1.0 - m_hat / (f64::sqrt(v_hat) + 1e-8);
        let got = p.to_vec_f64().unwrap()[0];
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }

    #[test]
    fn adamw_skips_weight_decay_on_1d_params_unless_configured() {
        let run = |decay_1d_params| {
            let bias = Tensor::from_slice(&[1.0f32], &[1])
                .unwrap()
                .requires_grad_()
                .unwrap();
            bias.set_grad(Some(Tensor::from_slice(&[0.0f32], &[1]).unwrap()));
            let cfg = AdamWConfig {
                lr: 0.1,
                weight_decay: 1.0,
                decay_1d_params,
                ..Default::default()
            };
            let mut opt = AdamW::new(vec![bias.clone()], cfg).unwrap();
            opt.step().unwrap();
            bias.to_vec_f64().unwrap()[0]
        };
        assert_eq!(run(false), 1.0);
        assert!((run(true) - 0.9).abs() < 1e-7);
    }
}
