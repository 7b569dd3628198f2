//! BatchNorm2d as torch.nn.BatchNorm2d. In train mode it normalizes with the batch statistics
//! (biased variance) and updates the running statistics with
//! `running = (1 - momentum) * running + momentum * batch`, using the *unbiased* batch variance;
//! in eval mode it normalizes with the running statistics. `num_batches_tracked` counts train
//! steps, and with `momentum = None` gives a cumulative average, as in PyTorch.

use super::init::{ones_, zeros_};
use super::module::{new_parameter, weight_and_bias, Module};
use crate::backend::spec::{NormAct, UnaryOp};
use crate::{no_grad, DType, Device, Error, Result, Tensor};

pub struct BatchNorm2d {
    pub weight: Option<Tensor>,
    pub bias: Option<Tensor>,
    pub running_mean: Tensor,
    pub running_var: Tensor,
    /// I64 scalar, as PyTorch saves it.
    pub num_batches_tracked: Tensor,
    pub eps: f64,
    /// `None`: a cumulative moving average (factor 1 / num_batches_tracked).
    pub momentum: Option<f64>,
    training: bool,
}

impl BatchNorm2d {
    /// eps 1e-5, momentum 0.1, affine weight (ones) and bias (zeros).
    pub fn new(num_features: usize) -> Result<Self> {
        Ok(BatchNorm2d {
            weight: Some(new_parameter(&[num_features], ones_)?),
            bias: Some(new_parameter(&[num_features], zeros_)?),
            running_mean: Tensor::zeros(&[num_features], DType::F32, Device::Cpu)?,
            running_var: Tensor::ones(&[num_features], DType::F32, Device::Cpu)?,
            num_batches_tracked: Tensor::zeros(&[], DType::I64, Device::Cpu)?,
            eps: 1e-5,
            momentum: Some(0.1),
            training: true,
        })
    }

    pub fn num_features(&self) -> usize {
        self.running_mean.shape()[0]
    }

    /// The weight of this batch in the running statistics: `momentum`, or 1 / batches so far
    /// (this one included) for a cumulative average.
    fn update_factor(&self) -> Result<f64> {
        match self.momentum {
            Some(m) => Ok(m),
            None => Ok(1.0 / (self.num_batches_tracked.item()? + 1.0)),
        }
    }
}

impl BatchNorm2d {
    /// The norm followed by `act`: SiLU and ReLU fuse into the norm's kernels (one node, one
    /// pass each way); any other activation runs after it.
    pub fn forward_act(&self, x: &Tensor, act: Option<UnaryOp>) -> Result<Tensor> {
        match act {
            Some(UnaryOp::Silu) => self.normalize(x, NormAct::Silu),
            Some(UnaryOp::Relu) => self.normalize(x, NormAct::Relu),
            Some(op) => self.normalize(x, NormAct::None)?.unary(op),
            None => self.normalize(x, NormAct::None),
        }
    }

    fn normalize(&self, x: &Tensor, act: NormAct) -> Result<Tensor> {
        let c = self.num_features();
        if x.rank() != 4 || x.shape()[1] != c {
            return Err(Error::layer_input(
                format!("BatchNorm2d({c})"),
                format!("input [N, {c}, H, W]"),
                format!("{:?}", x.shape()),
            ));
        }
        let running = (&self.running_mean, &self.running_var);
        let momentum = if self.training {
            self.update_factor()?
        } else {
            0.0
        };
        let y = x.batch_norm_act(
            Some(running),
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.training,
            momentum,
            self.eps,
            act,
        )?;
        if self.training {
            // Counted after the step succeeded, as the running statistics were updated.
            no_grad(|| self.num_batches_tracked.add_scalar_(1.0))?;
        }
        Ok(y)
    }
}

impl Module for BatchNorm2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.normalize(x, NormAct::None)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        weight_and_bias(self.weight.as_ref(), self.bias.as_ref())
    }

    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        vec![
            ("running_mean".into(), self.running_mean.clone()),
            ("running_var".into(), self.running_var.clone()),
            (
                "num_batches_tracked".into(),
                self.num_batches_tracked.clone(),
            ),
        ]
    }

    super::module::training_field!();

    /// Eval mode: BatchNormalization over the running statistics (ones and zeros stand in
    /// for a missing affine weight and bias).
    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        use crate::io::onnx::export::Attr;
        let n = self.running_mean.numel();
        let ones = Tensor::ones(&[n], DType::F32, Device::Cpu)?;
        let zeros = Tensor::zeros(&[n], DType::F32, Device::Cpu)?;
        let scale = g.initializer(
            &format!("{prefix}weight"),
            self.weight.as_ref().unwrap_or(&ones),
        )?;
        let bias = g.initializer(
            &format!("{prefix}bias"),
            self.bias.as_ref().unwrap_or(&zeros),
        )?;
        let mean = g.initializer(&format!("{prefix}running_mean"), &self.running_mean)?;
        let var = g.initializer(&format!("{prefix}running_var"), &self.running_var)?;
        let eps = ("epsilon", Attr::Float(self.eps as f32));
        Ok(g.node(
            "BatchNormalization",
            &[x, &scale, &bias, &mean, &var],
            &[eps],
        ))
    }

    fn title(&self) -> String {
        let momentum = self.momentum.map_or("none".to_string(), |m| m.to_string());
        format!(
            "BatchNorm2d({}, eps={:e}, momentum={momentum}, affine={})",
            self.running_mean.numel(),
            self.eps,
            self.weight.is_some()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_norm_rejects_other_channels_saying_what_it_expects() {
        let bn = BatchNorm2d::new(3).unwrap();
        let err = bn.forward(&batch()).err().unwrap().to_string();
        assert_eq!(
            err,
            "BatchNorm2d(3) expects input [N, 3, H, W], got [2, 2, 1, 2]"
        );
    }

    /// x [2, 2, 1, 2]: channel 0 holds 1, 2, 3, 6; channel 1 holds 0, 0, 4, 4.
    fn batch() -> Tensor {
        Tensor::from_vec(vec![1f32, 2., 0., 0., 3., 6., 4., 4.], &[2, 2, 1, 2]).unwrap()
    }

    #[test]
    fn batch_norm_running_stats_after_one_train_step_match_pytorch_formula() {
        let bn = BatchNorm2d::new(2).unwrap();
        let y = bn.forward(&batch()).unwrap();
        // Channel 0: mean 3, biased var (4+1+0+9)/4 = 3.5, unbiased 14/3.
        // Channel 1: mean 2, biased var 4, unbiased 16/3.
        let rm = bn.running_mean.to_vec_f64().unwrap();
        let rv = bn.running_var.to_vec_f64().unwrap();
        let expect_rm = [0.9 * 0.0 + 0.1 * 3.0, 0.1 * 2.0];
        let expect_rv = [0.9 + 0.1 * 14.0 / 3.0, 0.9 + 0.1 * 16.0 / 3.0];
        for i in 0..2 {
            assert!((rm[i] - expect_rm[i]).abs() < 1e-6, "running_mean {rm:?}");
            assert!((rv[i] - expect_rv[i]).abs() < 1e-6, "running_var {rv:?}");
        }
        assert_eq!(bn.num_batches_tracked.to_vec::<i64>().unwrap(), [1]);
        // The output uses the biased batch variance.
        let y = y.to_vec_f64().unwrap();
        let s0 = 1.0 / (3.5f64 + 1e-5).sqrt();
        assert!((y[0] - (1.0 - 3.0) * s0).abs() < 1e-5, "{y:?}");
    }

    #[test]
    fn batch_norm_eval_normalizes_with_running_stats_and_leaves_them_alone() {
        let mut bn = BatchNorm2d::new(2).unwrap();
        bn.forward(&batch()).unwrap();
        bn.eval();
        let (rm, rv) = (
            bn.running_mean.to_vec_f64().unwrap(),
            bn.running_var.to_vec_f64().unwrap(),
        );
        let y = bn.forward(&batch()).unwrap().to_vec_f64().unwrap();
        assert!((y[0] - (1.0 - rm[0]) / (rv[0] + 1e-5).sqrt()).abs() < 1e-5);
        assert_eq!(bn.running_mean.to_vec_f64().unwrap(), rm);
        assert_eq!(bn.num_batches_tracked.to_vec::<i64>().unwrap(), [1]);
        let names: Vec<String> = bn.state_dict().into_keys().collect();
        assert_eq!(
            names,
            [
                "bias",
                "num_batches_tracked",
                "running_mean",
                "running_var",
                "weight"
            ]
        );
    }

    #[test]
    fn batch_norm_gradient_flows_to_input_and_affine_parameters() {
        let bn = BatchNorm2d::new(2).unwrap();
        let x = batch().requires_grad_().unwrap();
        bn.forward(&x)
            .unwrap()
            .square()
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        assert!(x.grad().is_some());
        assert!(bn.weight.as_ref().unwrap().grad().is_some());
    }
}
