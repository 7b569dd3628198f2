//! Constructors and read-back: from Rust data, filled, ranges and seeded random draws.

use super::memory::check_alloc;
use super::Tensor;
use crate::backend::cuda::random::RANDOM_IN_CAPTURE;
use crate::backend::{CpuStorage, IntoCpuStorage, Storage};
use crate::random::{with_default, Generator};
use crate::{cpu_dispatch, DType, Device, Error, Result, WithDType};

/// Element types that tensors can be built from and read back into.
pub trait TensorData: IntoCpuStorage {}
impl<T: IntoCpuStorage> TensorData for T {}

/// The element count of `shape`. Zero dimensions are skipped when checking for overflow,
/// because strides and inner sizes are products over the other dimensions: `[0, 2^40, 2^40]`
/// holds nothing but would overflow `Layout::contiguous`.
fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    let span = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d.max(1)))
        .filter(|&s| s <= isize::MAX as usize)
        .ok_or_else(|| Error::invalid(op, format!("shape {shape:?} has too many elements")))?;
    Ok(if shape.contains(&0) { 0 } else { span })
}

fn check_numel(op: &'static str, len: usize, shape: &[usize]) -> Result<()> {
    match checked_numel(op, shape)? {
        n if n == len => Ok(()),
        n => Err(Error::invalid(
            op,
            format!("{len} values cannot fill shape {shape:?} ({n} elements)"),
        )),
    }
}

impl Tensor {
    pub fn from_vec<T: TensorData>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        check_numel("from_vec", data.len(), shape)?;
        Tensor::from_cpu(T::into_storage(data), shape)
    }

    pub fn from_slice<T: TensorData>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        Self::from_vec(data.to_vec(), shape)
    }

    /// f64 values converted to `dtype`, the path scripts use for literals.
    pub fn from_f64s(values: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
        check_numel("tensor", values.len(), shape)?;
        Tensor::from_cpu(CpuStorage::from_f64s(values, dtype), shape)
    }

    /// A 0-d tensor.
    pub fn scalar(value: f64, dtype: DType) -> Result<Tensor> {
        Self::from_f64s(&[value], &[], dtype)
    }

    pub fn full(value: f64, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Self::full_for("full", value, shape, dtype, device)
    }

    /// `full` whose errors (a shape too large for the device) name `op`, the caller's name
    /// for it (`zeros`, `ones`).
    pub fn full_for(
        op: &'static str,
        value: f64,
        shape: &[usize],
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let n = checked_numel(op, shape)?;
        check_alloc(op, shape, dtype, device)?;
        match device {
            Device::Cpu => Tensor::from_cpu(CpuStorage::full(value, n, dtype), shape),
            Device::Cuda(i) => {
                let dev = crate::backend::cuda::device(i)?;
                let s = crate::backend::cuda::copy::full(&dev, n, dtype, value)
                    .map_err(|e| e.in_op(op, shape, Some(dtype)))?;
                Tensor::from_storage(Storage::Cuda(s), shape)
            }
        }
    }

    pub fn zeros(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Self::full_for("zeros", 0.0, shape, dtype, device)
    }

    pub fn ones(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Self::full_for("ones", 1.0, shape, dtype, device)
    }

    pub fn full_like(t: &Tensor, value: f64) -> Result<Tensor> {
        Self::full(value, t.shape(), t.dtype(), t.device())
    }

    pub fn zeros_like(t: &Tensor) -> Result<Tensor> {
        Self::full_like(t, 0.0)
    }

    pub fn ones_like(t: &Tensor) -> Result<Tensor> {
        Self::full_like(t, 1.0)
    }

    /// Values start, start+step, ... below `end` (above it for a negative step).
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::invalid(
                "arange",
                format!("needs finite bounds and a non-zero step, got {start}..{end} step {step}"),
            ));
        }
        let n = ((end - start) / step).ceil().max(0.0);
        if n > 1e10 {
            return Err(Error::invalid(
                "arange",
                format!("{n} elements is too many"),
            ));
        }
        check_alloc("arange", &[n as usize], DType::F64, Device::Cpu)?;
        let values: Vec<f64> = (0..n as usize).map(|i| start + i as f64 * step).collect();
        Self::from_f64s(&values, &[values.len()], dtype)
    }

    /// `steps` evenly spaced values from start to end inclusive.
    pub fn linspace(start: f64, end: f64, steps: usize, dtype: DType) -> Result<Tensor> {
        check_alloc("linspace", &[steps], DType::F64, Device::Cpu)?;
        let values: Vec<f64> = match steps {
            0 => vec![],
            1 => vec![start],
            _ => (0..steps)
                .map(|i| start + (end - start) * i as f64 / (steps - 1) as f64)
                .collect(),
        };
        Self::from_f64s(&values, &[steps], dtype)
    }

    fn random_with(
        shape: &[usize],
        dtype: DType,
        gen: Option<&mut Generator>,
        draw: impl FnOnce(&mut Generator, usize) -> Vec<f64>,
    ) -> Result<Tensor> {
        let n = checked_numel("random", shape)?;
        // The draw is made in f64 and then converted: the f64 values are the larger buffer.
        check_alloc("random", shape, DType::F64, Device::Cpu)?;
        let values = match gen {
            Some(g) => draw(g, n),
            None => with_default(|g| draw(g, n)),
        };
        // BF16 and F16 round through f32 (each step to nearest even), which the CUDA draw
        // reproduces exactly; half's direct f64 conversion ignores the f64's low 32 bits when it
        // rounds, so it can round a near-tie the wrong way.
        let storage = match dtype {
            DType::BF16 => CpuStorage::BF16(
                values
                    .iter()
                    .map(|&v| half::bf16::from_f32(v as f32))
                    .collect(),
            ),
            DType::F16 => CpuStorage::F16(
                values
                    .iter()
                    .map(|&v| half::f16::from_f32(v as f32))
                    .collect(),
            ),
            _ => return Self::from_f64s(&values, shape, dtype),
        };
        Tensor::from_cpu(storage, shape)
    }

    /// Uniform [0, 1) from `gen`, or from the default generator (`manual_seed`).
    pub fn rand(shape: &[usize], dtype: DType, gen: Option<&mut Generator>) -> Result<Tensor> {
        Self::random_with(shape, dtype, gen, |g, n| g.uniform(n))
    }

    pub fn randn(shape: &[usize], dtype: DType, gen: Option<&mut Generator>) -> Result<Tensor> {
        Self::random_with(shape, dtype, gen, |g, n| g.normal(n))
    }

    /// `rand` drawn on `device`: on CUDA the device computes the same Philox stream, so the
    /// values (bit for bit) and the generator's advance are those of the CPU draw.
    pub fn rand_on(
        shape: &[usize],
        dtype: DType,
        device: Device,
        gen: Option<&mut Generator>,
    ) -> Result<Tensor> {
        use crate::backend::cuda::random::Distribution;
        match device {
            Device::Cpu => Self::rand(shape, dtype, gen),
            Device::Cuda(i) => Self::random_on_cuda(i, shape, dtype, gen, Distribution::Uniform),
        }
    }

    /// `randn` drawn on `device`, with the CPU draw's generator advance; on CUDA the values
    /// match the CPU's up to the last ulp of the device's log and cos (computed in f64, so F32
    /// and narrower results almost always match bit for bit).
    pub fn randn_on(
        shape: &[usize],
        dtype: DType,
        device: Device,
        gen: Option<&mut Generator>,
    ) -> Result<Tensor> {
        use crate::backend::cuda::random::Distribution;
        match device {
            Device::Cpu => Self::randn(shape, dtype, gen),
            Device::Cuda(i) => Self::random_on_cuda(i, shape, dtype, gen, Distribution::Normal),
        }
    }

    fn random_on_cuda(
        ordinal: usize,
        shape: &[usize],
        dtype: DType,
        gen: Option<&mut Generator>,
        dist: crate::backend::cuda::random::Distribution,
    ) -> Result<Tensor> {
        let n = checked_numel("random", shape)?;
        check_alloc("random", shape, dtype, Device::Cuda(ordinal))?;
        let dev = crate::backend::cuda::device(ordinal)?;
        // Refused (as `draw` refuses) before the generator moves, so a capture that fails here
        // leaves the draws after it as they would have been.
        dev.refuse_in_capture(RANDOM_IN_CAPTURE)?;
        // The generator moves only once the device is known to be there, as a failed CPU
        // draw would leave it.
        let (seed, start) = match gen {
            Some(g) => (g.seed(), g.advance(dist.words(n))),
            None => with_default(|g| (g.seed(), g.advance(dist.words(n)))),
        };
        let s = crate::backend::cuda::random::draw(&dev, n, dtype, dist, seed, start)
            .map_err(|e| e.in_op("random", shape, Some(dtype)))?;
        Tensor::from_storage(Storage::Cuda(s), shape)
    }

    /// Integers in [low, high).
    pub fn randint(
        low: i64,
        high: i64,
        shape: &[usize],
        gen: Option<&mut Generator>,
    ) -> Result<Tensor> {
        if high <= low {
            return Err(Error::invalid(
                "randint",
                format!("needs low < high, got {low} and {high}"),
            ));
        }
        let n = checked_numel("randint", shape)?;
        check_alloc("randint", shape, DType::I64, Device::Cpu)?;
        let values = match gen {
            Some(g) => g.integers(low, high, n),
            None => with_default(|g| g.integers(low, high, n)),
        };
        Self::from_vec(values, shape)
    }

    // ----- read-back -----

    /// The elements in row-major order, converted to `T`.
    pub fn to_vec<T: TensorData>(&self) -> Result<Vec<T>> {
        let t = self.to_device(Device::Cpu)?;
        let t = if t.dtype() == T::DTYPE {
            t
        } else {
            t.to_dtype(T::DTYPE)?
        };
        let storage = t.storage();
        let Storage::Cpu(s) = &*storage else {
            return Err(Error::invalid("to_vec", "the data did not reach the host"));
        };
        let v = T::slice(s).ok_or_else(|| Error::invalid("to_vec", "dtype conversion failed"))?;
        Ok(crate::backend::cpu::map::gather(v, t.layout()))
    }

    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        let t = self.to_device(Device::Cpu)?;
        let storage = t.storage();
        let Storage::Cpu(s) = &*storage else {
            return Err(Error::invalid("to_vec", "the data did not reach the host"));
        };
        Ok(cpu_dispatch!(s, v => crate::backend::cpu::map::map(v, t.layout(), |x| x.to_f64())))
    }

    pub fn to_vec_f32(&self) -> Result<Vec<f32>> {
        self.to_vec::<f32>()
    }

    /// The value of a one-element tensor.
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::invalid(
                "item",
                format!("needs a one-element tensor, got shape {:?}", self.shape()),
            ));
        }
        Ok(self.to_vec_f64()?[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_shapes_with_huge_dimensions_are_errors_not_overflows() {
        let huge = [0, 1 << 40, 1 << 40];
        assert!(Tensor::zeros(&huge, DType::F32, Device::Cpu).is_err());
        assert!(Tensor::from_vec(Vec::<f32>::new(), &huge).is_err());
        assert!(Tensor::rand(&[1 << 40, 1 << 40, 0], DType::F32, None).is_err());
        assert!(Tensor::randint(0, 2, &[1 << 40, 1 << 40, 0], None).is_err());
        assert_eq!(
            Tensor::zeros(&[0, 3], DType::F32, Device::Cpu)
                .unwrap()
                .shape(),
            &[0, 3]
        );
    }
}
