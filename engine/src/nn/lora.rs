//! LoRA (Hu et al. 2021): a trainable low-rank update beside a frozen `Linear`,
//! y = base(x) + (dropout(x) A^T B^T) * scale, with A [rank, in] and B [out, rank].
//!
//! The adapter lives inside the `Linear` it adapts (`Linear::add_lora`), so a model's layers
//! keep calling `forward` and naming parameters as before; the adapter's tensors show up as
//! `lora_A.weight` and `lora_B.weight` under the layer's name, as PEFT names them once the
//! adapter name is dropped. Initialization follows PEFT: A is kaiming-uniform with
//! a = sqrt(5) (U(+-1/sqrt(in))), B is zero, so a new adapter leaves the output unchanged.

use super::dropout::Dropout;
use super::init::{kaiming_uniform_, FanMode};
use super::module::Module;
use crate::{is_grad_enabled, no_grad, DType, Device, Error, Generator, Result, Tensor};

/// The size and strength of an adapter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoraSpec {
    pub rank: usize,
    /// Multiplies the low-rank product: alpha / rank (or alpha / sqrt(rank) with rsLoRA).
    pub scale: f64,
    /// Dropout on the adapter's input while training.
    pub dropout: f64,
}

impl LoraSpec {
    pub fn validate(&self) -> Result<()> {
        if self.rank == 0 {
            return Err(Error::invalid("lora", "rank must be at least 1, got 0"));
        }
        if !self.scale.is_finite() {
            return Err(Error::invalid(
                "lora",
                format!("scale must be finite, got {}", self.scale),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::invalid(
                "lora",
                format!("dropout must be in [0, 1), got {}", self.dropout),
            ));
        }
        Ok(())
    }
}

pub struct LoraAdapter {
    /// [rank, in]
    pub a: Tensor,
    /// [out, rank]
    pub b: Tensor,
    spec: LoraSpec,
    dropout: Dropout,
}

impl LoraAdapter {
    /// A fresh adapter for a layer of `in_features` -> `out_features` whose weight has `dtype`
    /// on `device`; both factors require grad.
    pub fn new(
        in_features: usize,
        out_features: usize,
        spec: LoraSpec,
        (dtype, device): (DType, Device),
        gen: &mut Generator,
    ) -> Result<Self> {
        spec.validate()?;
        // Drawn on the CPU in F32 so an adapter does not depend on where the model lives.
        let a = Tensor::zeros(&[spec.rank, in_features], DType::F32, Device::Cpu)?;
        kaiming_uniform_(&a, 5f64.sqrt(), FanMode::FanIn, gen)?;
        let a = no_grad(|| a.to(device, dtype)?.contiguous_copy())?;
        let b = Tensor::zeros(&[out_features, spec.rank], dtype, device)?;
        a.set_requires_grad(true)?;
        b.set_requires_grad(true)?;
        Ok(LoraAdapter {
            a,
            b,
            spec,
            dropout: Dropout::new(spec.dropout, gen)?,
        })
    }

    pub fn spec(&self) -> LoraSpec {
        self.spec
    }

    /// The adapter's term for rows x [rows, in]. Dropout applies in train mode with gradients
    /// on: generation and evaluation run under `no_grad`, and scripts never switch a language
    /// model to eval, so without the second condition sampling would be noisy.
    pub fn delta(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        let x = if training && is_grad_enabled() && self.spec.dropout > 0.0 {
            self.dropout.forward(x)?
        } else {
            x.clone()
        };
        x.matmul(&self.a.t()?)?
            .matmul(&self.b.t()?)?
            .mul_scalar(self.spec.scale)
    }

    /// B A * scale [out, in]: what merging adds to the base weight.
    pub fn merged_weight_delta(&self) -> Result<Tensor> {
        no_grad(|| self.b.matmul(&self.a)?.mul_scalar(self.spec.scale))
    }

    /// `lora_A.weight` and `lora_B.weight`, PEFT's names without the adapter name.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("lora_A.weight".to_string(), self.a.clone()),
            ("lora_B.weight".to_string(), self.b.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::super::Linear;
    use super::*;

    fn spec(rank: usize) -> LoraSpec {
        LoraSpec {
            rank,
            scale: 2.0,
            dropout: 0.0,
        }
    }

    #[test]
    fn a_new_adapter_follows_peft_init_a_uniform_within_one_over_sqrt_in_and_b_zero() {
        let lora = LoraAdapter::new(
            64,
            3,
            spec(300),
            (DType::F32, Device::Cpu),
            &mut Generator::new(0),
        )
        .unwrap();
        let a = lora.a.to_vec_f32().unwrap();
        let max = a.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(max <= 0.125 && max > 0.12, "max |A| {max}");
        assert!(lora.b.to_vec_f32().unwrap().iter().all(|&v| v == 0.0));
        assert!(lora.a.requires_grad() && lora.b.requires_grad());
    }

    #[test]
    fn adapted_linear_adds_b_a_x_times_scale_to_the_base_output() {
        let w = Tensor::from_vec(vec![1f32, 0., 0., 1.], &[2, 2]).unwrap();
        let mut lin = Linear::from_tensors(w, None).unwrap();
        lin.add_lora(spec(1), &mut Generator::new(0)).unwrap();
        let lora = lin.lora().unwrap();
        no_grad(|| {
            lora.a
                .copy_(&Tensor::from_vec(vec![1f32, 2.], &[1, 2]).unwrap())?;
            lora.b
                .copy_(&Tensor::from_vec(vec![0.5f32, -1.], &[2, 1]).unwrap())
        })
        .unwrap();
        let x = Tensor::from_vec(vec![1f32, 1., 2., 0.], &[1, 2, 2]).unwrap();
        // Row [1, 1]: A x = 3, B A x * 2 = [3, -6]; row [2, 0]: A x = 2 -> [2, -4].
        let y = lin.forward(&x).unwrap();
        assert_eq!(y.shape(), [1, 2, 2]);
        assert_eq!(y.to_vec_f32().unwrap(), [4., -5., 4., -4.]);
        assert!(
            !lin.dense_weight().unwrap().requires_grad(),
            "the base weight is frozen"
        );

        let before = y.to_vec_f32().unwrap();
        lin.merge_lora().unwrap();
        assert!(lin.lora().is_none());
        assert_eq!(lin.forward(&x).unwrap().to_vec_f32().unwrap(), before);
    }

    #[test]
    fn rank_zero_and_a_second_adapter_are_refused() {
        let mut lin = Linear::new(4, 4, false, &mut Generator::new(0)).unwrap();
        let err = lin.add_lora(spec(0), &mut Generator::new(0)).unwrap_err();
        assert!(err.to_string().contains("rank must be at least 1"), "{err}");
        lin.add_lora(spec(2), &mut Generator::new(0)).unwrap();
        let err = lin.add_lora(spec(2), &mut Generator::new(0)).unwrap_err();
        assert!(
            err.to_string().contains("already has a LoRA adapter"),
            "{err}"
        );
    }
}
