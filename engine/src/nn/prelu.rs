//! PReLU: max(0, x) + a * min(0, x) with a learned slope `a`, one for all channels or one per
//! channel (dim 1 of the input), as torch.nn.PReLU.

use super::module::{new_parameter, Module};
use crate::io::onnx::export::GraphBuilder;
use crate::{Error, Result, Tensor};

pub struct PRelu {
    /// [num_parameters]: the slope of the negative side, per channel or shared.
    pub weight: Tensor,
    training: bool,
}

impl PRelu {
    /// `num_parameters` slopes starting at `init` (torch's default 0.25).
    pub fn new(num_parameters: usize, init: f64) -> Result<Self> {
        if num_parameters == 0 {
            return Err(Error::invalid("PReLU", "num_parameters must be at least 1"));
        }
        let weight = new_parameter(&[num_parameters], |t| t.fill_(init))?;
        Ok(PRelu {
            weight,
            training: true,
        })
    }

    fn num_parameters(&self) -> usize {
        self.weight.shape()[0]
    }

    /// The slopes shaped to broadcast over `x`: [C, 1, ...] against dim 1, or the one slope.
    fn slope_for(&self, x: &Tensor) -> Result<Tensor> {
        let n = self.num_parameters();
        if n == 1 {
            // Shaped as x's rank of ones, so a 0-d input stays 0-d.
            return self.weight.reshape_to(&vec![1; x.rank()]);
        }
        if x.rank() < 2 || x.shape()[1] != n {
            return Err(Error::layer_input(
                self.title(),
                format!("{n} channels at dim 1"),
                format!("{:?}", x.shape()),
            ));
        }
        let mut shape = vec![n];
        shape.resize(x.rank() - 1, 1);
        self.weight.reshape_to(&shape)
    }
}

impl Module for PRelu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let slope = self.slope_for(x)?.to_dtype(x.dtype())?;
        // x where x > 0, else a x: at exactly 0 the gradient is the slope's, as torch's.
        x.gt_scalar(0.0)?.where_cond_of(x, &x.mul(&slope)?)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".into(), self.weight.clone())]
    }

    super::module::training_field!();

    fn title(&self) -> String {
        format!("PReLU(num_parameters={})", self.num_parameters())
    }

    /// ONNX's PRelu broadcasts the slope from the right, so per-channel slopes are reshaped
    /// in the graph to [C, 1, ...] with as many ones as the input has dims after the channel
    /// (the graph does not fix the input's rank).
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let w = g.initializer(&format!("{prefix}weight"), &self.weight)?;
        if self.num_parameters() == 1 {
            return Ok(g.node("PRelu", &[x, &w], &[]));
        }
        // Ones for the dims after the channel: the shape from dim 2 on, times 0, plus 1.
        let shape = g.node("Shape", &[x], &[]);
        let (from, to, axis) = (
            g.ints("from", &[2])?,
            g.ints("to", &[i64::MAX])?,
            g.ints("axis", &[0])?,
        );
        let tail = g.node("Slice", &[&shape, &from, &to, &axis], &[]);
        let (zero, one) = (g.ints("zero", &[0])?, g.ints("one", &[1])?);
        let zeros = g.node("Mul", &[&tail, &zero], &[]);
        let ones = g.node("Add", &[&zeros, &one], &[]);
        let channels = g.ints("channels", &[self.num_parameters() as i64])?;
        let target = g.concat(&[channels, ones], 0);
        let slope = g.node("Reshape", &[&w, &target], &[]);
        Ok(g.node("PRelu", &[x, &slope], &[]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_slope_applies_to_every_element_whatever_the_rank() {
        let prelu = PRelu::new(1, 0.5).unwrap();
        let x = Tensor::from_vec(vec![-2f32, 3.0, -1.0], &[3]).unwrap();
        let y = prelu.forward(&x).unwrap().to_vec_f32().unwrap();
        assert_eq!(y, [-1.0, 3.0, -0.5]);
        let scalar = Tensor::from_vec(vec![-4f32], &[]).unwrap();
        assert_eq!(prelu.forward(&scalar).unwrap().shape(), &[] as &[usize]);
    }

    /// At exactly 0 the input's gradient is the slope, as torch's backward (x > 0 ? g : a g).
    #[test]
    fn the_gradient_at_zero_is_the_slopes() {
        let prelu = PRelu::new(1, 0.25).unwrap();
        let x = Tensor::from_vec(vec![0f32, 2.0], &[2])
            .unwrap()
            .requires_grad_()
            .unwrap();
        prelu
            .forward(&x)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(x.grad().unwrap().to_vec_f32().unwrap(), [0.25, 1.0]);
    }

    #[test]
    fn per_channel_slopes_need_their_channels_at_dim_1() {
        let prelu = PRelu::new(3, 0.25).unwrap();
        let x = Tensor::zeros(&[2, 4, 5], crate::DType::F32, crate::Device::Cpu).unwrap();
        let err = prelu.forward(&x).err().unwrap().to_string();
        assert_eq!(
            err,
            "PReLU(num_parameters=3) expects 3 channels at dim 1, got [2, 4, 5]"
        );
        assert!(PRelu::new(0, 0.25).is_err());
    }
}
