//! decode_attention: one query per row and head against a key/value cache, where each row sees
//! a window of the cache whose bounds are tensors, not host numbers. A decode step that keeps
//! its cursor in device memory can then be captured once in a CUDA graph and replayed at every
//! position.
//!
//! On CUDA the keys are split into chunks scored in parallel and merged by log-sum-exp
//! (flash-decoding, backend/cuda/decode_attention.rs), so long caches fill the device at batch
//! 1. The CPU composes the masked product from other ops. Inference only: there is no backward.

use super::attention::{check, AttentionOptions};
use super::dispatch::{cuda_kernel, CudaOperand};
use crate::autograd::{is_grad_enabled, no_grad};
use crate::backend::cpu::decode_attention as cpu;
use crate::backend::cuda::decode_attention as cuda;
use crate::backend::spec::AttentionSpec;
use crate::backend::{CpuStorage, Storage};
use crate::tensor::dispatch::{dispatch, CpuOperand};
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "decode_attention";

impl Tensor {
    /// Attention of `self` [batch, heads, 1, head_dim] over the cache k, v [batch, kv_heads,
    /// capacity, head_dim], where row b sees keys `first[b] ..= last` (I64 tensors: `first`
    /// [batch], `last` [1] or [batch]); keys outside the window, written or not, are ignored.
    /// `scale` defaults to 1 / sqrt(head_dim). Returns [batch, heads, 1, head_dim].
    pub fn decode_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        first: &Tensor,
        last: &Tensor,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        let opts = AttentionOptions {
            causal: false,
            scale,
        };
        let spec = check(OP, self, k, v, opts)?;
        if spec.tq != 1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "takes one query per row and head, got {} (use scaled_dot_product_attention)",
                    spec.tq
                ),
            ));
        }
        let b = spec.batch;
        for (name, t, sizes) in [("first", first, vec![b]), ("last", last, vec![1, b])] {
            t.check_same_device(OP, self)?;
            if t.dtype() != DType::I64 || t.rank() != 1 || !sizes.contains(&t.shape()[0]) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "{name} must be I64 of shape {:?}, got {} {:?}",
                        sizes.iter().map(|&n| [n]).collect::<Vec<_>>(),
                        t.dtype(),
                        t.shape()
                    ),
                ));
            }
        }
        if is_grad_enabled() && [self, k, v].iter().any(|t| t.requires_grad()) {
            return Err(Error::invalid(
                OP,
                "has no backward (it serves decoding); call it under no_grad",
            ));
        }
        let low = crate::amp::matmul_operand_dtype(self.device(), self.dtype());
        no_grad(|| {
            let cast = |t: &Tensor| match low {
                Some(d) => t.to_dtype(d)?.contiguous(),
                None => t.contiguous(),
            };
            let (q, k, v) = (cast(self)?, cast(k)?, cast(v)?);
            match q.device() {
                Device::Cuda(_) if cuda::supports(&spec, q.dtype()) => {
                    let (first, last) = (first.contiguous()?, last.contiguous()?);
                    let last_stride = (last.numel() > 1) as usize;
                    let out = cuda_kernel(OP, [&q, &k, &v, &first, &last], |[q, k, v, f, l]| {
                        cuda::decode_attention(
                            at(q),
                            at(k),
                            at(v),
                            at(f),
                            at(l),
                            last_stride,
                            &spec,
                        )
                    })?;
                    Tensor::from_storage(Storage::Cuda(out), q.shape())
                }
                Device::Cpu if q.dtype() == DType::F32 => on_host(&q, &k, &v, first, last, &spec),
                _ => composed(&q, &k, &v, first, last, spec.scale),
            }
        })
    }
}

/// A contiguous operand as the kernel takes it: its storage and first element.
fn at<'a>((s, l): CudaOperand<'a>) -> cuda::At<'a> {
    (s, l.offset())
}

/// The CPU's kernel (`cpu::decode_attention`), which scores only the keys in each window.
fn on_host(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    first: &Tensor,
    last: &Tensor,
    spec: &AttentionSpec,
) -> Result<Tensor> {
    let first: Vec<i64> = first.to_vec()?;
    let last: Vec<i64> = last.to_vec()?;
    let out = dispatch(
        OP,
        [q, k, v],
        |[q, k, v]| cpu::decode_attention(f32s(q)?, f32s(k)?, f32s(v)?, &first, &last, spec),
        |_| Err(Error::invalid(OP, "the CPU path was given device storage")),
    )?;
    Tensor::from_vec(out, q.shape())
}

/// The values of a contiguous F32 operand.
fn f32s<'a>((s, l): CpuOperand<'a>) -> Result<&'a [f32]> {
    match (s, l.contiguous_range()) {
        (CpuStorage::F32(values), Some(range)) => Ok(&values[range]),
        _ => Err(Error::invalid(OP, "the CPU kernel reads contiguous F32")),
    }
}

/// The masked product from other ops, the window read on the host: the reference the kernels
/// (the CPU's and CUDA's) are tested against, and the path of other dtypes on the CPU.
fn composed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    first: &Tensor,
    last: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let (b, h, hd) = (q.shape()[0], q.shape()[1], q.shape()[3]);
    let (kvh, tk) = (k.shape()[1], k.shape()[2]);
    let first: Vec<i64> = first.to_device(Device::Cpu)?.to_vec()?;
    let last: Vec<i64> = last.to_device(Device::Cpu)?.to_vec()?;
    let mut bias = Vec::with_capacity(b * tk);
    // A row whose window holds no key gets zeros, as on CUDA: its scores stay finite here and
    // its output is multiplied by 0.
    let mut keep = Vec::with_capacity(b);
    for (row, &lo) in first.iter().enumerate() {
        let hi = last[row.min(last.len() - 1)];
        let empty = (0..tk as i64).all(|j| !(lo..=hi).contains(&j));
        keep.push(if empty { 0f32 } else { 1.0 });
        bias.extend((0..tk as i64).map(|j| {
            if empty || (lo..=hi).contains(&j) {
                0f32
            } else {
                f32::NEG_INFINITY
            }
        }));
    }
    let keep = Tensor::from_vec(keep, &[b, 1, 1, 1])?
        .to_device(q.device())?
        .to_dtype(q.dtype())?;
    let bias = Tensor::from_vec(bias, &[b, 1, 1, tk])?
        .to_device(q.device())?
        .to_dtype(q.dtype())?;
    let scores = q
        .mul_scalar(scale)?
        .reshape_to(&[b, kvh, h / kvh, hd])?
        .matmul(&k.transpose(-1, -2)?)?
        .add(&bias)?;
    scores
        .softmax(-1)?
        .matmul(v)?
        .reshape_to(&[b, h, 1, hd])?
        .mul(&keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttentionOptions, Generator};

    fn i64s(v: Vec<i64>) -> Tensor {
        let n = v.len();
        Tensor::from_vec(v, &[n]).unwrap()
    }

    #[test]
    fn a_window_is_attention_over_the_keys_inside_it() {
        let mut g = Generator::new(1);
        let q = Tensor::randn(&[2, 4, 1, 8], DType::F32, Some(&mut g)).unwrap();
        let k = Tensor::randn(&[2, 2, 12, 8], DType::F32, Some(&mut g)).unwrap();
        let v = Tensor::randn(&[2, 2, 12, 8], DType::F32, Some(&mut g)).unwrap();
        let out = q
            .decode_attention(&k, &v, &i64s(vec![0, 3]), &i64s(vec![6]), None)
            .unwrap();
        for (row, lo) in [(0, 0), (1, 3)] {
            let pick = |t: &Tensor| t.narrow(0, row, 1).unwrap().narrow(2, lo, 7 - lo).unwrap();
            let want = q
                .narrow(0, row, 1)
                .unwrap()
                .scaled_dot_product_attention(&pick(&k), &pick(&v), AttentionOptions::default())
                .unwrap();
            let got = out.narrow(0, row, 1).unwrap();
            let err = want
                .to_vec_f32()
                .unwrap()
                .iter()
                .zip(got.to_vec_f32().unwrap())
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(err < 1e-6, "row {row}: off by {err}");
        }
    }

    #[test]
    fn the_host_kernel_equals_the_composed_product_with_grouped_heads_and_any_window() {
        let mut g = Generator::new(2);
        // 6 query heads over 2 key/value heads; head_dim 12 leaves a remainder past 8 lanes.
        let q = Tensor::randn(&[3, 6, 1, 12], DType::F32, Some(&mut g)).unwrap();
        let k = Tensor::randn(&[3, 2, 10, 12], DType::F32, Some(&mut g)).unwrap();
        let v = Tensor::randn(&[3, 2, 10, 12], DType::F32, Some(&mut g)).unwrap();
        // Rows: a window inside the cache, one past its end (clamped), one holding no key.
        let (first, last) = (i64s(vec![2, 4, 8]), i64s(vec![6, 20, 7]));
        let got = q
            .decode_attention(&k, &v, &first, &last, Some(0.3))
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let want = composed(&q, &k, &v, &first, &last, 0.3)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() < 1e-5, "value {i}: {a} vs {b}");
        }
        assert!(got[2 * 6 * 12..].iter().all(|&x| x == 0.0));
    }

    #[test]
    fn more_than_one_query_or_a_misshaped_window_is_refused() {
        let q = Tensor::zeros(&[1, 2, 2, 8], DType::F32, Device::Cpu).unwrap();
        let kv = Tensor::zeros(&[1, 2, 5, 8], DType::F32, Device::Cpu).unwrap();
        let e = q.decode_attention(&kv, &kv, &i64s(vec![0]), &i64s(vec![1]), None);
        assert!(e.unwrap_err().to_string().contains("one query"));
        let q = q.narrow(2, 0, 1).unwrap();
        let e = q.decode_attention(&kv, &kv, &i64s(vec![0, 0]), &i64s(vec![1]), None);
        assert!(e.unwrap_err().to_string().contains("first must be I64"));
    }
}
