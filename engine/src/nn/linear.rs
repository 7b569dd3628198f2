//! Linear: y = x W^T + b, with W shaped [out, in] as in PyTorch so checkpoints load unchanged.
//! It may carry a LoRA adapter (`add_lora`), whose low-rank term its forward adds.
//!
//! W is a parameter, or a frozen block-quantized matrix (a GGUF file's Q8_0/Q4_K blocks kept
//! as they are, or a QLoRA base): the same forward multiplies by either, so a model's layers
//! do not know which they hold. A quantized weight is not a parameter: it trains no gradient,
//! but gradients flow through it to the input, which is what an adapter on top needs.

use super::init::{kaiming_uniform_, uniform_, FanMode};
use super::lora::{LoraAdapter, LoraSpec};
use super::module::{new_parameter, weight_and_bias, Module};
use crate::ops::pre_norm::{Project, Projection};
use crate::ops::product_weight::ProductWeight;
use crate::ops::quant_matmul::{BlockFormat, QuantizedMatrix};
use crate::{no_grad, DType, Error, Generator, Result, Tensor};

/// What a `Linear` multiplies by, [out, in].
#[derive(Clone)]
pub enum LinearWeight {
    Dense(Tensor),
    Quantized(QuantizedMatrix),
}

pub struct Linear {
    weight: LinearWeight,
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
            weight: LinearWeight::Dense(weight),
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
            weight: LinearWeight::Dense(weight),
            bias,
            lora: None,
            training: true,
        })
    }

    /// A layer over a frozen quantized weight [out, in], with an optional bias [out].
    pub fn from_quantized(weight: QuantizedMatrix, bias: Option<Tensor>) -> Result<Self> {
        let mut lin =
            Linear::from_tensors(Tensor::zeros(&[1, 1], DType::F32, weight.device())?, None)?;
        lin.weight = LinearWeight::Quantized(weight);
        if let Some(b) = &bias {
            if b.shape() != [lin.out_features()] {
                return Err(Error::ShapeMismatch {
                    op: "Linear bias",
                    lhs: vec![lin.out_features()],
                    rhs: b.shape().to_vec(),
                });
            }
        }
        lin.bias = bias;
        Ok(lin)
    }

    fn weight_shape(&self) -> [usize; 2] {
        match &self.weight {
            LinearWeight::Dense(w) => [w.shape()[0], w.shape()[1]],
            LinearWeight::Quantized(q) => q.shape(),
        }
    }

    pub fn in_features(&self) -> usize {
        self.weight_shape()[1]
    }

    pub fn out_features(&self) -> usize {
        self.weight_shape()[0]
    }

    pub fn weight(&self) -> &LinearWeight {
        &self.weight
    }

    /// The weight parameter; `None` when the weight is quantized.
    pub fn dense_weight(&self) -> Option<&Tensor> {
        match &self.weight {
            LinearWeight::Dense(w) => Some(w),
            LinearWeight::Quantized(_) => None,
        }
    }

    /// The weight when this layer is only `x W^T`, dense or quantized (no bias, no adapter):
    /// what the fused products (`rms_norm_linears`, `swiglu_linear`, `linear_residual`) take.
    pub fn product_weight(&self) -> Option<ProductWeight<'_>> {
        match (&self.weight, &self.bias, &self.lora) {
            (LinearWeight::Dense(w), None, None) => Some(ProductWeight::Dense(w)),
            (LinearWeight::Quantized(q), None, None) => Some(ProductWeight::Blocks(q)),
            _ => None,
        }
    }

    /// This layer as the fused ops of a pre-norm layer take a projection
    /// (`ops::pre_norm`): its plain weight where it has one, and itself for the rest.
    pub fn projection(&self) -> Projection<'_> {
        Projection {
            weight: self.product_weight(),
            module: self,
        }
    }

    /// The quantized weight; `None` when the weight is a parameter.
    pub fn quantized_weight(&self) -> Option<&QuantizedMatrix> {
        match &self.weight {
            LinearWeight::Dense(_) => None,
            LinearWeight::Quantized(q) => Some(q),
        }
    }

    /// W's values as a dense tensor: the parameter itself, or the quantized matrix
    /// dequantized to `dtype` (a frozen copy).
    pub fn weight_values(&self, dtype: DType) -> Result<Tensor> {
        match &self.weight {
            LinearWeight::Dense(w) => Ok(w.clone()),
            LinearWeight::Quantized(q) => q.dequantize(dtype),
        }
    }

    /// Replaces a dense weight by its quantization in `format`, on the weight's device (the
    /// blocks are made on the host). The layer's output changes by the format's rounding; the
    /// bias and any adapter stay as they are.
    pub fn quantize(&mut self, format: BlockFormat) -> Result<()> {
        let LinearWeight::Dense(w) = &self.weight else {
            return Err(Error::invalid(
                "quantize",
                format!(
                    "Linear({}→{}) is already quantized",
                    self.in_features(),
                    self.out_features()
                ),
            ));
        };
        let q = QuantizedMatrix::quantize(w, format)?;
        self.weight = LinearWeight::Quantized(q);
        Ok(())
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
        let placement = match &self.weight {
            LinearWeight::Dense(w) => (w.dtype(), w.device()),
            // Adapters over a quantized base train in BF16 on a GPU, F32 on the CPU (QLoRA's
            // compute dtype).
            LinearWeight::Quantized(q) => (q.compute_dtype(), q.device()),
        };
        let adapter = LoraAdapter::new(
            self.in_features(),
            self.out_features(),
            spec,
            placement,
            gen,
        )?;
        for (_, t) in weight_and_bias(self.dense_weight(), self.bias.as_ref()) {
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
        let LinearWeight::Dense(w) = &self.weight else {
            return Err(Error::invalid(
                "merge_lora",
                "the base weight is quantized; an adapter cannot be folded into its blocks \
                 (save the adapter instead, or load the base unquantized)",
            ));
        };
        let delta = lora.merged_weight_delta()?;
        no_grad(|| {
            let merged = w.add(&delta.to_dtype(w.dtype())?)?;
            w.copy_(&merged)
        })?;
        self.lora = None;
        Ok(true)
    }
}

impl Module for Linear {
    fn for_each_linear_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Linear) -> Result<()>,
    ) -> Result<()> {
        f(prefix, self)
    }

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
            let y = match &self.weight {
                LinearWeight::Dense(w) => rows.matmul(&w.t()?)?,
                LinearWeight::Quantized(q) => q.matmul_t(rows)?,
            };
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
            // Under autocast the product comes out in the low dtype; the bias joins it there,
            // as PyTorch's autocast runs `linear` (and our convolutions add their bias), so
            // the activations stay low precision instead of being promoted back to F32.
            Some(b)
                if crate::amp::autocast_dtype() == Some(y.dtype()) && b.dtype() != y.dtype() =>
            {
                y.add(&b.to_dtype(y.dtype())?)
            }
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// The weight and bias, then the adapter's factors (`lora_A.weight`, `lora_B.weight`).
    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = weight_and_bias(self.dense_weight(), self.bias.as_ref());
        if let Some(lora) = &self.lora {
            out.extend(lora.named_parameters());
        }
        out
    }

    /// A quantized weight's blocks (U8), so moving or checkpointing the layer carries them.
    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        match &self.weight {
            LinearWeight::Dense(_) => Vec::new(),
            LinearWeight::Quantized(q) => vec![("weight_blocks".to_string(), q.blocks().clone())],
        }
    }

    super::module::training_field!();

    fn title(&self) -> String {
        let mut line = format!(
            "Linear(in={}, out={}, bias={}",
            self.in_features(),
            self.out_features(),
            self.bias.is_some()
        );
        if let LinearWeight::Quantized(q) = &self.weight {
            line.push_str(&format!(", weight={}", q.format().name()));
        }
        if let Some(lora) = &self.lora {
            line.push_str(&format!(", lora_rank={}", lora.spec().rank));
        }
        line.push(')');
        line
    }

    fn input_shape(&self) -> Option<Vec<usize>> {
        Some(vec![self.in_features()])
    }

    /// x W^T (+ b) as MatMul with the transposed weight, so inputs of any rank work. A LoRA
    /// adapter is exported merged (W + B A · scale), the eval-mode forward's value.
    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        let weight = self.weight_values(DType::F32)?;
        let weight = match &self.lora {
            Some(lora) => no_grad(|| weight.add(&lora.merged_weight_delta()?))?,
            None => weight,
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

impl Project for Linear {
    fn project(&self, x: &Tensor) -> Result<Tensor> {
        self.forward(x)
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
