//! Seeded weight initializers, as torch.nn.init. Each fills an existing tensor in place (under
//! no_grad, so parameters can be re-initialized) from an explicit generator, so one seed gives
//! the same weights on every run and device.

use crate::{no_grad, Error, Generator, Result, Tensor};

/// Which fan Kaiming initialization preserves: `FanIn` keeps forward activations' variance,
/// `FanOut` keeps backward gradients' variance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanMode {
    FanIn,
    FanOut,
}

/// (fan_in, fan_out) of a weight shaped [out, in, k...], as torch's `_calculate_fan_in_and_fan_out`.
pub fn fan_in_and_fan_out(shape: &[usize]) -> Result<(usize, usize)> {
    if shape.len() < 2 {
        return Err(Error::invalid(
            "init",
            format!("fan in and fan out need at least 2 dims, got shape {shape:?}"),
        ));
    }
    let receptive: usize = shape[2..].iter().product();
    Ok((shape[1] * receptive, shape[0] * receptive))
}

/// The gain of leaky ReLU with negative slope `a`: sqrt(2 / (1 + a^2)).
pub fn leaky_relu_gain(a: f64) -> f64 {
    (2.0 / (1.0 + a * a)).sqrt()
}

fn fill_with(t: &Tensor, values: Vec<f64>) -> Result<()> {
    let src = Tensor::from_f64s(&values, t.shape(), t.dtype())?;
    no_grad(|| t.copy_(&src))
}

/// U(low, high).
pub fn uniform_(t: &Tensor, low: f64, high: f64, gen: &mut Generator) -> Result<()> {
    let values = gen
        .uniform(t.numel())
        .into_iter()
        .map(|u| low + (high - low) * u)
        .collect();
    fill_with(t, values)
}

/// N(mean, std^2).
pub fn normal_(t: &Tensor, mean: f64, std: f64, gen: &mut Generator) -> Result<()> {
    let values = gen
        .normal(t.numel())
        .into_iter()
        .map(|z| mean + std * z)
        .collect();
    fill_with(t, values)
}

pub fn zeros_(t: &Tensor) -> Result<()> {
    no_grad(|| t.fill_(0.0))
}

pub fn ones_(t: &Tensor) -> Result<()> {
    no_grad(|| t.fill_(1.0))
}

fn fan(shape: &[usize], mode: FanMode) -> Result<f64> {
    let (fan_in, fan_out) = fan_in_and_fan_out(shape)?;
    let f = match mode {
        FanMode::FanIn => fan_in,
        FanMode::FanOut => fan_out,
    };
    if f == 0 {
        return Err(Error::invalid(
            "init",
            format!("shape {shape:?} has a zero fan"),
        ));
    }
    Ok(f as f64)
}

/// U(-b, b) with b = gain * sqrt(3 / fan), gain = sqrt(2 / (1 + a^2)). With a = sqrt(5) and
/// fan-in this is U(+-1/sqrt(fan_in)), PyTorch's default for Linear and Conv weights.
pub fn kaiming_uniform_(t: &Tensor, a: f64, mode: FanMode, gen: &mut Generator) -> Result<()> {
    let bound = leaky_relu_gain(a) * (3.0 / fan(t.shape(), mode)?).sqrt();
    uniform_(t, -bound, bound, gen)
}

/// N(0, std^2) with std = gain / sqrt(fan).
pub fn kaiming_normal_(t: &Tensor, a: f64, mode: FanMode, gen: &mut Generator) -> Result<()> {
    let std = leaky_relu_gain(a) / fan(t.shape(), mode)?.sqrt();
    normal_(t, 0.0, std, gen)
}

/// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
pub fn xavier_uniform_(t: &Tensor, gain: f64, gen: &mut Generator) -> Result<()> {
    let (fi, fo) = fan_in_and_fan_out(t.shape())?;
    let bound = gain * (6.0 / (fi + fo).max(1) as f64).sqrt();
    uniform_(t, -bound, bound, gen)
}

/// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
pub fn xavier_normal_(t: &Tensor, gain: f64, gen: &mut Generator) -> Result<()> {
    let (fi, fo) = fan_in_and_fan_out(t.shape())?;
    let std = gain * (2.0 / (fi + fo).max(1) as f64).sqrt();
    normal_(t, 0.0, std, gen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device};

    #[test]
    fn kaiming_uniform_with_a_sqrt5_is_bounded_by_one_over_sqrt_fan_in() {
        let t = Tensor::zeros(&[64, 25], DType::F32, Device::Cpu).unwrap();
        kaiming_uniform_(&t, 5f64.sqrt(), FanMode::FanIn, &mut Generator::new(0)).unwrap();
        let v = t.to_vec_f64().unwrap();
        let max = v.iter().fold(0f64, |m, x| m.max(x.abs()));
        // Bound 0.2; a sample of 1600 comes close to it.
        assert!(max <= 0.2 + 1e-7 && max > 0.19, "max |w| = {max}");
    }

    #[test]
    fn initializers_are_reproducible_from_the_seed() {
        let draw = |seed| {
            let t = Tensor::zeros(&[8, 4, 3, 3], DType::F32, Device::Cpu).unwrap();
            xavier_normal_(&t, 1.0, &mut Generator::new(seed)).unwrap();
            t.to_vec_f32().unwrap()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn fan_counts_the_receptive_field() {
        assert_eq!(fan_in_and_fan_out(&[16, 8, 3, 3]).unwrap(), (72, 144));
        assert!(fan_in_and_fan_out(&[5]).is_err());
    }
}
