//! bias_act: act(x + bias[c]) with one bias per channel (dim 1 of [N, C, ...]), the tail of a
//! convolution. On CUDA, outside autograd, one kernel adds the bias and applies the activation
//! in a single pass over the output, where the composition reads and writes it twice (the
//! broadcast add, then the activation). While autograd records, and on the CPU, the
//! composition runs, so the backward is the composed ops' and the CPU stays the reference.

use super::dispatch::cuda_kernel;
use crate::autograd::{is_grad_enabled, no_grad};
use crate::backend::cuda::elementwise as cuda;
use crate::backend::spec::UnaryOp;
use crate::backend::Storage;
use crate::{Device, Error, Layout, Result, Tensor};

const OP: &str = "bias_act";

impl Tensor {
    /// `act(self + bias)` for `self` [N, C, ...] and `bias` [C], computed in `self`'s dtype (a
    /// bias of another dtype is cast, as a convolution under autocast adds its bias in the
    /// product's dtype). `act` None adds the bias only.
    pub fn bias_act(&self, bias: &Tensor, act: Option<UnaryOp>) -> Result<Tensor> {
        self.check_float(OP)?;
        self.check_same_device(OP, bias)?;
        let s = self.shape();
        if s.len() < 2 || bias.shape() != [s[1]] {
            return Err(Error::invalid(
                OP,
                format!(
                    "expects x [N, C, ...] and a bias [C]; got x {s:?} and bias {:?}",
                    bias.shape()
                ),
            ));
        }
        let bias = crate::amp::operand(bias, self.dtype())?;
        let recording = is_grad_enabled() && (self.requires_grad() || bias.requires_grad());
        if recording || self.device() == Device::Cpu {
            let mut bias_shape = vec![1; s.len()];
            bias_shape[1] = s[1];
            let y = self.add(&bias.reshape_to(&bias_shape)?)?;
            return match act {
                Some(op) => y.unary(op),
                None => Ok(y),
            };
        }
        // A dense x (row-major, or channels-last) is walked flat and keeps its layout.
        let x = if self.layout().is_dense() {
            self.clone()
        } else {
            no_grad(|| self.contiguous())?
        };
        let b = no_grad(|| bias.contiguous())?;
        let out_layout = x.layout().dense_like();
        // Elements between one channel and the next in the flat run.
        let inner = out_layout.strides()[1];
        let flat = Layout::new(vec![x.numel()], vec![1], x.layout().offset());
        let y = cuda_kernel(OP, [&x, &b], |[(xs, _), bv]| {
            cuda::bias_unary((xs, &flat), bv, inner, act)
        })?;
        Tensor::from_storage_in(Storage::Cuda(y), out_layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_act_adds_the_bias_per_channel_then_applies_the_activation() {
        // [N=1, C=2, 2]: channel 0 gets +1, channel 1 gets -2.
        let x = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 3.0], &[1, 2, 2]).unwrap();
        let b = Tensor::from_vec(vec![1.0f64, -2.0], &[2]).unwrap();
        let plain: Vec<f64> = x.bias_act(&b, None).unwrap().to_vec().unwrap();
        assert_eq!(plain, vec![1.0, 2.0, 0.0, 1.0]);
        let silu = |v: f64| v / (1.0 + (-v).exp());
        let got: Vec<f64> = x
            .bias_act(&b, Some(UnaryOp::Silu))
            .unwrap()
            .to_vec()
            .unwrap();
        for (g, p) in got.iter().zip(&plain) {
            assert!((g - silu(*p)).abs() < 1e-12, "{got:?}");
        }
    }

    #[test]
    fn bias_act_names_both_shapes_when_the_bias_does_not_fit() {
        let x = Tensor::zeros(&[1, 3, 2], crate::DType::F32, Device::Cpu).unwrap();
        let b = Tensor::zeros(&[2], crate::DType::F32, Device::Cpu).unwrap();
        let e = x.bias_act(&b, None).unwrap_err().to_string();
        assert!(e.contains("[1, 3, 2]") && e.contains("[2]"), "{e}");
    }
}
