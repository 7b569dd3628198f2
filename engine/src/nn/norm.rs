//! LayerNorm and RMSNorm modules over the fused `layer_norm` and `rms_norm` ops (ops/norm.rs),
//! and GroupNorm over `group_norm`:
//! statistics in f32 even for bf16/f16 inputs (the mixed precision rule: norm statistics stay
//! FP32), the result in the input dtype, each parameter's gradient in its own dtype.

use super::init::{ones_, zeros_};
use super::module::{new_parameter, trailing_dims, weight_and_bias, Module};
use crate::{Error, Result, Tensor};

/// The last `shape.len()` dims of `x` must equal `shape`; `layer` describes the norm in the
/// error (`LayerNorm([64])`).
fn check_trailing(layer: impl FnOnce() -> String, x: &Tensor, shape: &[usize]) -> Result<()> {
    let r = x.rank();
    if r < shape.len() || &x.shape()[r - shape.len()..] != shape {
        return Err(Error::layer_input(
            layer(),
            trailing_dims(shape),
            format!("{:?}", x.shape()),
        ));
    }
    Ok(())
}

/// (x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape` dims, with
/// the biased variance, as torch.nn.LayerNorm.
pub struct LayerNorm {
    pub weight: Option<Tensor>,
    pub bias: Option<Tensor>,
    pub eps: f64,
    normalized_shape: Vec<usize>,
    training: bool,
}

impl LayerNorm {
    pub fn new(normalized_shape: &[usize], eps: f64, affine: bool) -> Result<Self> {
        let (weight, bias) = if affine {
            (
                Some(new_parameter(normalized_shape, ones_)?),
                Some(new_parameter(normalized_shape, zeros_)?),
            )
        } else {
            (None, None)
        };
        Ok(LayerNorm {
            weight,
            bias,
            eps,
            normalized_shape: normalized_shape.to_vec(),
            training: true,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let layer = || format!("LayerNorm({:?})", self.normalized_shape);
        check_trailing(layer, x, &self.normalized_shape)?;
        if self.weight.is_some() || self.bias.is_some() {
            return x.layer_norm(self.weight.as_ref(), self.bias.as_ref(), self.eps);
        }
        // No parameters to say which dims: normalize the trailing dims flattened into one.
        let lead = x.rank() - self.normalized_shape.len();
        let mut rows_shape = x.shape()[..lead].to_vec();
        rows_shape.push(self.normalized_shape.iter().product());
        x.reshape_to(&rows_shape)?
            .layer_norm(None, None, self.eps)?
            .reshape_to(x.shape())
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(self.weight.as_ref(), self.bias.as_ref())
    }

    super::module::training_field!();

    fn title(&self) -> String {
        let line = format!(
            "LayerNorm({:?}, eps={:e}, affine={})",
            self.normalized_shape,
            self.eps,
            self.weight.is_some()
        );
        line
    }
}

/// Group normalization as torch.nn.GroupNorm: the channels of x [N, C, ...] in `groups` runs,
/// each normalized over its channels and positions, then a per-channel weight and bias.
pub struct GroupNorm {
    pub weight: Option<Tensor>,
    pub bias: Option<Tensor>,
    pub eps: f64,
    groups: usize,
    channels: usize,
    training: bool,
}

impl GroupNorm {
    pub fn new(groups: usize, channels: usize, eps: f64, affine: bool) -> Result<Self> {
        if groups == 0 || !channels.is_multiple_of(groups) {
            return Err(Error::invalid(
                "GroupNorm",
                format!("{channels} channels do not split into {groups} groups"),
            ));
        }
        let (weight, bias) = match affine {
            true => (
                Some(new_parameter(&[channels], ones_)?),
                Some(new_parameter(&[channels], zeros_)?),
            ),
            false => (None, None),
        };
        Ok(GroupNorm {
            weight,
            bias,
            eps,
            groups,
            channels,
            training: true,
        })
    }
}

impl GroupNorm {
    fn check_input(&self, x: &Tensor) -> Result<()> {
        match x.rank() >= 2 && x.shape()[1] == self.channels {
            true => Ok(()),
            false => Err(Error::layer_input(
                self.title(),
                format!("input [N, {}, ...]", self.channels),
                format!("{:?}", x.shape()),
            )),
        }
    }

    /// silu(self.forward(x)), one kernel at inference on CUDA (`Tensor::group_norm_silu`).
    pub fn forward_silu(&self, x: &Tensor) -> Result<Tensor> {
        self.check_input(x)?;
        x.group_norm_silu(
            self.groups,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }
}

impl Module for GroupNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.check_input(x)?;
        x.group_norm(
            self.groups,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(self.weight.as_ref(), self.bias.as_ref())
    }

    super::module::training_field!();

    fn title(&self) -> String {
        format!(
            "GroupNorm({}, {}, eps={:e}, affine={})",
            self.groups,
            self.channels,
            self.eps,
            self.weight.is_some()
        )
    }
}

/// x / sqrt(mean(x^2) + eps) * weight over the last dim, as LLaMA's RMSNorm. The product with
/// the weight is taken in f32 and rounded once to the input dtype, which is also the output's.
pub struct RmsNorm {
    pub weight: Tensor,
    pub eps: f64,
    /// Added to the weight before it scales (Gemma's norms scale by 1 + weight, so their
    /// weights start at zero); 0 for every other model.
    pub offset: f64,
    training: bool,
}

impl RmsNorm {
    pub fn new(dim: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm {
            weight: new_parameter(&[dim], ones_)?,
            eps,
            offset: 0.0,
            training: true,
        })
    }

    /// The norm scaling by `offset` + weight (Gemma: 1 + weight).
    pub fn with_offset(mut self, offset: f64) -> Self {
        self.offset = offset;
        self
    }

    /// What the normed values are multiplied by: the weight, plus the offset where there is
    /// one (recorded, so the weight's gradient flows through it).
    pub fn scale(&self) -> Result<Tensor> {
        match self.offset {
            0.0 => Ok(self.weight.clone()),
            o => self.weight.add_scalar(o),
        }
    }

    /// forward(x) as the products under the current autocast read it: the values of
    /// `amp::for_products(&forward(x))`, normed and cast in one op (`rms_norm_as`).
    pub fn forward_for_products(&self, x: &Tensor) -> Result<Tensor> {
        let layer = || format!("RMSNorm({})", self.weight.shape()[0]);
        check_trailing(layer, x, self.weight.shape())?;
        x.rms_norm_as(
            Some(&self.scale()?),
            self.eps,
            crate::amp::products_dtype(x),
        )
    }

    /// x + addend (x alone without one), and that sum normed into `dtype`: a residual add and
    /// the norm after it as one op (`Tensor::add_rms_norm_as`).
    pub fn add_forward_as(
        &self,
        x: &Tensor,
        addend: Option<&Tensor>,
        dtype: crate::DType,
    ) -> Result<(Tensor, Tensor)> {
        let layer = || format!("RMSNorm({})", self.weight.shape()[0]);
        check_trailing(layer, x, self.weight.shape())?;
        let scale = self.scale()?;
        match addend {
            Some(a) => x.add_rms_norm_as(a, &scale, self.eps, dtype),
            None => Ok((x.clone(), x.rms_norm_as(Some(&scale), self.eps, dtype)?)),
        }
    }

    /// The scale and eps, as the fused ops of a pre-norm layer take them (`ops::pre_norm`).
    pub fn parts(&self) -> Result<(Tensor, f64)> {
        Ok((self.scale()?, self.eps))
    }

    /// Wraps an existing weight [dim].
    pub fn from_tensor(weight: Tensor, eps: f64) -> Result<Self> {
        if weight.rank() != 1 {
            return Err(Error::invalid(
                "RMSNorm",
                format!("weight must be [dim], got {:?}", weight.shape()),
            ));
        }
        Ok(RmsNorm {
            weight,
            eps,
            offset: 0.0,
            training: true,
        })
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let layer = || format!("RMSNorm({})", self.weight.shape()[0]);
        check_trailing(layer, x, self.weight.shape())?;
        x.rms_norm(Some(&self.scale()?), self.eps)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".into(), self.weight.clone())]
    }

    super::module::training_field!();

    fn title(&self) -> String {
        let mut line = format!("RMSNorm({}, eps={:e})", self.weight.shape()[0], self.eps);
        if self.offset != 0.0 {
            line = line.replace(')', &format!(", scale={} + weight)", self.offset));
        }
        line
    }

    /// x / sqrt(mean(x²) + eps) · weight in primitive operators (opset 13+ has no RMSNorm).
    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        let w = g.initializer(&format!("{prefix}weight"), &self.scale()?)?;
        let eps = g.scalar("eps", self.eps as f32)?;
        let squares = g.node("Mul", &[x, x], &[]);
        let mean = g.mean_last_axis(&squares)?;
        let shifted = g.node("Add", &[&mean, &eps], &[]);
        let rms = g.node("Sqrt", &[&shifted], &[]);
        let normed = g.node("Div", &[x, &rms], &[]);
        Ok(g.node("Mul", &[&normed, &w], &[]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn close(a: &[f32], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((*x as f64 - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn layer_norm_matches_a_hand_computation() {
        let ln = LayerNorm::new(&[4], 1e-5, true).unwrap();
        let x = Tensor::from_vec(vec![1f32, 2., 3., 4., -1., -1., 1., 1.], &[2, 4]).unwrap();
        let y = ln.forward(&x).unwrap().to_vec_f32().unwrap();
        // Row 0: mean 2.5, biased var 1.25; row 1: mean 0, var 1.
        let s0 = 1.0 / (1.25f64 + 1e-5).sqrt();
        let s1 = 1.0 / (1.0f64 + 1e-5).sqrt();
        close(
            &y,
            &[-1.5 * s0, -0.5 * s0, 0.5 * s0, 1.5 * s0, -s1, -s1, s1, s1],
        );
    }

    #[test]
    fn rms_norm_matches_a_hand_computation_for_f32_and_bf16_inputs() {
        let n = RmsNorm::new(2, 1e-6).unwrap();
        let x = Tensor::from_vec(vec![3f32, 4.], &[1, 2]).unwrap();
        // rms = sqrt((9 + 16) / 2).
        let r = (12.5f64 + 1e-6).sqrt();
        close(
            &n.forward(&x).unwrap().to_vec_f32().unwrap(),
            &[3.0 / r, 4.0 / r],
        );
        // 3 and 4 are exact in bf16; the statistics run in f32, only the output is rounded.
        let yb = n.forward(&x.to_dtype(DType::BF16).unwrap()).unwrap();
        let yb = yb.to_vec_f64().unwrap();
        assert!(
            (yb[0] - 3.0 / r).abs() < 4e-3 && (yb[1] - 4.0 / r).abs() < 4e-3,
            "{yb:?}"
        );
    }

    #[test]
    fn norms_reject_other_trailing_dims_saying_what_they_expect() {
        let x = Tensor::zeros(&[2, 32], DType::F32, crate::Device::Cpu).unwrap();
        let ln = LayerNorm::new(&[64], 1e-5, true).unwrap();
        let err = ln.forward(&x).err().unwrap().to_string();
        assert_eq!(err, "LayerNorm([64]) expects input [..., 64], got [2, 32]");
        let rms = RmsNorm::new(64, 1e-6).unwrap();
        let err = rms.forward(&x).err().unwrap().to_string();
        assert_eq!(err, "RMSNorm(64) expects input [..., 64], got [2, 32]");
    }
}
