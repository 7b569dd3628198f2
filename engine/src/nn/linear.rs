//! Linear: y = x W^T + b, with W shaped [out, in] as in PyTorch so checkpoints load unchanged.
//! It may carry a LoRA adapter (`add_lora`), whose low-rank term its forward adds.

use super::init::{kaiming_uniform_, uniform_, FanMode};
use super::lora::{LoraAdapter, LoraSpec};
use super::module::{new_parameter, weight_and_bias, Module};
use super::summary::Summary;
use crate::{no_grad, Error, Generator, Result, Tensor};

pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    lora: Option<LoraAdapter>,
    training: bool,
}

impl Linear {
    /// PyTorch's default init: kaiming_uniform(a = sqrt(5)) for the weight, which is
    /// U(+-1/sqrt(in)), and the same bound for the bias.
    pub fn new(
        in_features: usize,
        out_features: usize,
        bias: bool,
        gen: &mut Generator,
    ) -> Result<Self> {
        if in_features == 0 {
            return Err(Error::invalid("Linear", "in_features must be positive"));
        }
        let weight = new_parameter(&[out_features, in_features], |t| {
            kaiming_uniform_(t, 5f64.sqrt(), FanMode::FanIn, gen)
        })?;
        let bound = 1.0 / (in_features as f64).sqrt();
        let bias = bias
            .then(|| new_parameter(&[out_features], |t| uniform_(t, -bound, bound, gen)))
            .transpose()?;
        Ok(Linear {
            weight,
            bias,
            lora: None,
            training: true,
        })
    }

    /// Wraps existing tensors (weight [out, in], bias [out]).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        if weight.rank() != 2 {
            return Err(Error::invalid(
                "Linear",
                format!("weight must be [out, in], got {:?}", weight.shape()),
            ));
        }
        if let Some(b) = &bias {
            if b.shape() != [weight.shape()[0]] {
                return Err(Error::ShapeMismatch {
                    op: "Linear bias",
                    lhs: vec![weight.shape()[0]],
                    rhs: b.shape().to_vec(),
                });
            }
        }
        Ok(Linear {
            weight,
            bias,
            lora: None,
            training: true,
        })
    }

    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    /// Freezes the weight and bias and adds a fresh LoRA adapter in the weight's dtype and
    /// device.
    pub fn add_lora(&mut self, spec: LoraSpec, gen: &mut Generator) -> Result<()> {
        if self.lora.is_some() {
            return Err(Error::invalid(
                "lora",
                format!(
                    "Linear({}→{}) already has a LoRA adapter",
                    self.in_features(),
                    self.out_features()
                ),
            ));
        }
        let placement = (self.weight.dtype(), self.weight.device());
        let adapter = LoraAdapter::new(
            self.in_features(),
            self.out_features(),
            spec,
            placement,
            gen,
        )?;
        for (_, t) in weight_and_bias(Some(&self.weight), self.bias.as_ref()) {
            t.set_grad(None);
            t.set_requires_grad(false)?;
        }
        self.lora = Some(adapter);
        Ok(())
    }

    pub fn lora(&self) -> Option<&LoraAdapter> {
        self.lora.as_ref()
    }

    /// Folds the adapter into the weight (W += B A * scale, in place) and drops it; returns
    /// whether there was one. The weight stays frozen: the caller decides what trains next.
    pub fn merge_lora(&mut self) -> Result<bool> {
        let Some(lora) = &self.lora else {
            return Ok(false);
        };
        let delta = lora.merged_weight_delta()?;
        no_grad(|| {
            let merged = self.weight.add(&delta.to_dtype(self.weight.dtype())?)?;
            self.weight.copy_(&merged)
        })?;
        self.lora = None;
        Ok(true)
    }
}

impl Module for Linear {
    /// x [..., in] -> [..., out].
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() == 0 || x.shape()[x.rank() - 1] != self.in_features() {
            return Err(Error::layer_input(
                format!("Linear({}→{})", self.in_features(), self.out_features()),
                super::module::trailing_dims(&[self.in_features()]),
                format!("{:?}", x.shape()),
            ));
        }
        // Leading dims flattened into rows: one GEMM, and in backward the weight's gradient is
        // one GEMM over all rows instead of a batch of products summed afterwards.
        let product = |rows: &Tensor| -> Result<Tensor> {
            let y = rows.matmul(&self.weight.t()?)?;
            match &self.lora {
                Some(lora) => y.add(&lora.delta(rows, self.training)?),
                None => Ok(y),
            }
        };
        let y = if x.rank() > 2 {
            let rows = x.numel() / self.in_features();
            let mut shape = x.shape().to_vec();
            shape[x.rank() - 1] = self.out_features();
            product(&x.reshape_to(&[rows, self.in_features()])?)?.reshape_to(&shape)?
        } else {
            product(x)?
        };
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// The weight and bias, then the adapter's factors (`lora_A.weight`, `lora_B.weight`).
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = weight_and_bias(Some(&self.weight), self.bias.as_ref());
        if let Some(lora) = &self.lora {
            out.extend(lora.named_parameters());
        }
        out
    }

    fn train(&mut self, on: bool) {
        self.training = on;
    }

    fn is_training(&self) -> bool {
        self.training
    }

    fn summary(&self) -> Summary {
        let mut line = format!(
            "Linear(in={}, out={}, bias={}",
            self.in_features(),
            self.out_features(),
            self.bias.is_some()
        );
        if let Some(lora) = &self.lora {
            line.push_str(&format!(", lora_rank={}", lora.spec().rank));
        }
        line.push(')');
        Summary::leaf(line, self.num_parameters())
    }

    fn input_shape(&self) -> Option<Vec<usize>> {
        Some(vec![self.weight.shape()[1]])
    }

    /// x W^T (+ b) as MatMul with the transposed weight, so inputs of any rank work. A LoRA
    /// adapter is exported merged (W + B A · scale), the eval-mode forward's value.
    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::OnnxGraph,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        let weight = match &self.lora {
            Some(lora) => no_grad(|| self.weight.add(&lora.merged_weight_delta()?))?,
            None => self.weight.clone(),
        };
        let wt = g.initializer(&format!("{prefix}weight_t"), &weight.t()?.contiguous()?)?;
        let y = g.node("MatMul", &[x, &wt], &[]);
        match &self.bias {
            Some(b) => {
                let b = g.initializer(&format!("{prefix}bias"), b)?;
                Ok(g.node("Add", &[&y, &b], &[]))
            }
            None => Ok(y),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_forward_matches_a_hand_computation() {
        let w = Tensor::from_vec(vec![1f32, 2., 3., -1., 0., 0.5], &[2, 3]).unwrap();
        let b = Tensor::from_vec(vec![0.5f32, -2.], &[2]).unwrap();
        let lin = Linear::from_tensors(w, Some(b)).unwrap();
        let x = Tensor::from_vec(vec![1f32, 1., 1., 2., 0., -4.], &[2, 3]).unwrap();
        let y = lin.forward(&x).unwrap();
        assert_eq!(y.shape(), [2, 2]);
        // Row 0: [1+2+3+0.5, -1+0+0.5-2]; row 1: [2-12+0.5, -2-2-2].
        assert_eq!(y.to_vec_f32().unwrap(), [6.5, -2.5, -9.5, -6.0]);
    }

    #[test]
    fn linear_init_is_uniform_within_one_over_sqrt_in_features() {
        let lin = Linear::new(16, 300, true, &mut Generator::new(0)).unwrap();
        for (name, t) in lin.named_parameters() {
            let v = t.to_vec_f64().unwrap();
            let max = v.iter().fold(0f64, |m, x| m.max(x.abs()));
            assert!(max <= 0.25 && max > 0.24, "{name}: max |value| {max}");
            assert!(t.requires_grad());
        }
    }

    #[test]
    fn linear_rejects_a_wrong_input_width_saying_which_width_it_expects() {
        let lin = Linear::new(3, 2, false, &mut Generator::new(0)).unwrap();
        let x = Tensor::from_vec(vec![1f32; 4], &[1, 4]).unwrap();
        let err = lin.forward(&x).err().unwrap().to_string();
        assert_eq!(err, "Linear(3→2) expects input [..., 3], got [1, 4]");
    }
}
