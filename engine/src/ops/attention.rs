//! scaled_dot_product_attention: softmax(q k^T * scale [+ causal mask]) v with grouped-query
//! heads, as torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True) except for
//! the causal mask's alignment: here the last query sees every key (j <= i + keys - queries,
//! what a step after a KV cache needs), where torch aligns the first (j <= i). With as many keys
//! as queries the two agree.
//!
//! On CUDA, BF16 and F16 inputs with heads up to 128 wide run the fused kernels
//! (backend/cuda/attention.rs; heads narrower than 64 or 128 zero-padded to it): one node whose
//! backward recomputes the probabilities from the saved log-sum-exp, so the [queries, keys]
//! scores never reach memory. Everything else (the CPU, F32, heads wider than 128) runs the
//! unfused composition of matmul, mask and softmax, whose gradient comes from those ops.

use super::backward_fn;
use super::dispatch::{cuda_kernel, CudaOperand};
use super::rearrange::PadMode;
use crate::autograd::{no_grad, SavedTensor};
use crate::backend::cuda::attention::{self as cuda, Operand};
use crate::backend::spec::AttentionSpec;
use crate::backend::{CudaStorage, Storage};
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "scaled_dot_product_attention";

/// How attention is computed.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionOptions {
    /// Query i sees keys j <= i + (keys - queries): the last query sees every key.
    pub causal: bool,
    /// The scores' scale; `None` is 1 / sqrt(head_dim).
    pub scale: Option<f64>,
}

impl Tensor {
    /// Attention of queries `self` [batch, heads, tq, head_dim] over keys and values
    /// [batch, kv_heads, tk, head_dim]; heads must be a multiple of kv_heads (query head h reads
    /// key/value head h / (heads / kv_heads)). Returns [batch, heads, tq, head_dim].
    pub fn scaled_dot_product_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        opts: AttentionOptions,
    ) -> Result<Tensor> {
        let spec = check(OP, self, k, v, opts)?;
        // Mixed precision: like the matrix products it replaces, attention runs in the low dtype.
        let low = crate::amp::matmul_operand_dtype(self.device(), self.dtype());
        let cast = |t: &Tensor| match low {
            Some(d) => t.to_dtype(d),
            None => Ok(t.clone()),
        };
        let (q, k, v) = (cast(self)?, cast(k)?, cast(v)?);
        if let Device::Cuda(i) = q.device() {
            // A head narrower than a kernel's width runs zero-padded to it: the zeros add
            // nothing to q·k or to the output's kept columns (SD 1.5's heads are 40 and 80
            // wide; FlashAttention pads the same way), and the scores never reach memory.
            let width = cuda::HEAD_DIMS.into_iter().find(|&w| w >= spec.head_dim);
            if let Some(width) = width {
                let padded = AttentionSpec {
                    head_dim: width,
                    ..spec
                };
                if cuda::supports(&*crate::backend::cuda::device(i)?, q.dtype(), &padded) {
                    if width == spec.head_dim {
                        return fused(&q, &k, &v, spec);
                    }
                    let pad =
                        |t: &Tensor| t.pad(&[0, width - spec.head_dim], PadMode::Constant(0.0));
                    let out = fused(&pad(&q)?, &pad(&k)?, &pad(&v)?, padded)?;
                    return out.narrow(3, 0, spec.head_dim);
                }
            }
        }
        composite(&q, &k, &v, &spec)
    }
}

/// Shapes, dtypes and devices; the problem as the kernels see it.
pub(super) fn check(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: AttentionOptions,
) -> Result<AttentionSpec> {
    for t in [q, k, v] {
        t.check_float(op)?;
        if t.rank() != 4 {
            return Err(Error::invalid(
                op,
                format!(
                    "q, k and v are [batch, heads, tokens, head_dim]; got a tensor of shape {:?}",
                    t.shape()
                ),
            ));
        }
    }
    q.check_same_device(op, k)?;
    q.check_same_device(op, v)?;
    if k.dtype() != q.dtype() || v.dtype() != q.dtype() {
        return Err(Error::invalid(
            op,
            format!(
                "q, k and v need one dtype; got {}, {} and {}",
                q.dtype(),
                k.dtype(),
                v.dtype()
            ),
        ));
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if ks != vs || ks[0] != qs[0] || ks[3] != qs[3] {
        return Err(Error::invalid(
            op,
            format!("q {qs:?} needs k and v of shape [{}, kv_heads, keys, {}]; got k {ks:?} and v {vs:?}", qs[0], qs[3]),
        ));
    }
    if ks[1] == 0 || !qs[1].is_multiple_of(ks[1]) {
        return Err(Error::invalid(
            op,
            format!(
                "{} query heads cannot share {} key/value heads evenly",
                qs[1], ks[1]
            ),
        ));
    }
    if opts.causal && ks[2] < qs[2] {
        return Err(Error::invalid(
            op,
            format!(
                "causal attention needs at least as many keys as queries; got {} keys for {} queries",
                ks[2], qs[2]
            ),
        ));
    }
    let scale = opts.scale.unwrap_or(1.0 / (qs[3] as f64).sqrt());
    if !scale.is_finite() {
        return Err(Error::invalid(
            op,
            format!("scale must be finite, got {scale}"),
        ));
    }
    Ok(AttentionSpec {
        batch: qs[0],
        heads: qs[1],
        kv_heads: ks[1],
        tq: qs[2],
        tk: ks[2],
        head_dim: qs[3],
        causal: opts.causal,
        scale,
    })
}

/// The additive causal mask [tq, tk] for the composition: 0 where key j <= i + (tk - tq),
/// -inf elsewhere.
fn causal_bias(tq: usize, tk: usize, dtype: DType, device: Device) -> Result<Tensor> {
    super::constant_table::cached("causal mask", (tq, tk, dtype), device, || {
        let mut bias = Vec::with_capacity(tq * tk);
        for i in 0..tq {
            let last = i + (tk - tq);
            bias.extend((0..tk).map(|j| if j <= last { 0f32 } else { f32::NEG_INFINITY }));
        }
        Tensor::from_vec(bias, &[tq, tk])?.to_dtype(dtype)
    })
}

/// The unfused path: grouped queries [B, KV, group * tq, hd] against the shared keys, so no key
/// or value is repeated.
fn composite(q: &Tensor, k: &Tensor, v: &Tensor, spec: &AttentionSpec) -> Result<Tensor> {
    let (b, kv, group) = (spec.batch, spec.kv_heads, spec.heads / spec.kv_heads);
    let (tq, tk, hd) = (spec.tq, spec.tk, spec.head_dim);
    let q = q
        .mul_scalar(spec.scale)?
        .reshape_to(&[b, kv, group * tq, hd])?;
    let scores = q.matmul(&k.transpose(-1, -2)?)?;
    let scores = if spec.causal {
        // Each head of a group sees the same [tq, tk] mask.
        let bias = causal_bias(tq, tk, scores.dtype(), scores.device())?;
        scores
            .reshape_to(&[b, kv, group, tq, tk])?
            .add(&bias)?
            .reshape_to(&[b, kv, group * tq, tk])?
    } else {
        scores
    };
    scores
        .softmax(-1)?
        .matmul(v)?
        .reshape_to(&[b, spec.heads, tq, hd])
}

/// A [batch, heads, tokens, head_dim] tensor as the kernels read it: last dim contiguous,
/// 16-byte aligned rows; anything else is copied first.
fn kernel_ready(t: &Tensor) -> Result<Tensor> {
    let l = t.layout();
    let s = l.strides();
    if s[3] == 1 && cuda::aligned(l.offset(), [s[0], s[1], s[2]]) {
        Ok(t.clone())
    } else {
        no_grad(|| t.contiguous())
    }
}

fn operand<'a>((storage, l): CudaOperand<'a>) -> Operand<'a> {
    let st = l.strides();
    Operand {
        storage,
        offset: l.offset(),
        strides: [st[0], st[1], st[2]],
    }
}

/// A token-major buffer [batch, tokens, heads, hd] as the [batch, heads, tokens, hd] tensor.
fn token_major(
    s: CudaStorage,
    batch: usize,
    tokens: usize,
    heads: usize,
    hd: usize,
) -> Result<Tensor> {
    Tensor::from_storage(Storage::Cuda(s), &[batch, tokens, heads, hd])?.transpose(1, 2)
}

fn fused(q: &Tensor, k: &Tensor, v: &Tensor, spec: AttentionSpec) -> Result<Tensor> {
    let (qr, kr, vr) = (kernel_ready(q)?, kernel_ready(k)?, kernel_ready(v)?);
    let (o, lse) = cuda_kernel(OP, [&qr, &kr, &vr], |[q, k, v]| {
        cuda::forward(operand(q), operand(k), operand(v), &spec)
    })?;
    let out = no_grad(|| token_major(o, spec.batch, spec.tq, spec.heads, spec.head_dim))?;
    Ok(out.recorded_with_output(&[q, k, v], move |out| {
        let saved = [&qr, &kr, &vr, out].map(|t| SavedTensor::new(OP, t));
        backward_fn(OP, move |g, needs| {
            let [q, k, v, o] = [0, 1, 2, 3].map(|i| saved[i].get());
            let (q, k, v, o) = (q?, k?, v?, o?);
            let g = kernel_ready(&no_grad(|| g.to_dtype(q.dtype()))?)?;
            let (dq, dk, dv) = cuda_kernel(OP, [q, k, v, o, &g], |[q, k, v, o, dout]| {
                let inputs = cuda::BackwardInputs {
                    q: operand(q),
                    k: operand(k),
                    v: operand(v),
                    o: operand(o),
                    dout: operand(dout),
                    lse: &lse,
                };
                cuda::backward(&inputs, &spec)
            })?;
            let (b, hd) = (spec.batch, spec.head_dim);
            let grads = [
                (dq, spec.tq, spec.heads),
                (dk, spec.tk, spec.kv_heads),
                (dv, spec.tk, spec.kv_heads),
            ];
            let mut out = Vec::with_capacity(3);
            for ((s, tokens, heads), &need) in grads.into_iter().zip(needs) {
                out.push(match need {
                    true => Some(token_major(s, b, tokens, heads, hd)?),
                    false => None,
                });
            }
            Ok(out)
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Generator;

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, DType::F64, Some(&mut Generator::new(seed))).unwrap()
    }

    /// Attention written out one (batch, head, query) at a time, with key/value head
    /// h / group and query i seeing keys up to i + (tk - tq) when causal.
    fn naive(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool, scale: f64) -> Vec<f64> {
        let (qs, ks) = (q.shape().to_vec(), k.shape().to_vec());
        let (b, h, tq, d, kv, tk) = (qs[0], qs[1], qs[2], qs[3], ks[1], ks[2]);
        let (q, k, v): (Vec<f64>, Vec<f64>, Vec<f64>) = (
            q.to_vec().unwrap(),
            k.to_vec().unwrap(),
            v.to_vec().unwrap(),
        );
        let mut out = Vec::new();
        for bi in 0..b {
            for hi in 0..h {
                let g = hi / (h / kv);
                for i in 0..tq {
                    let qrow = &q[((bi * h + hi) * tq + i) * d..][..d];
                    let seen = if causal { i + tk - tq + 1 } else { tk };
                    let scores: Vec<f64> = (0..seen)
                        .map(|j| {
                            let krow = &k[((bi * kv + g) * tk + j) * d..][..d];
                            qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>() * scale
                        })
                        .collect();
                    let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                    let total: f64 = w.iter().sum();
                    for c in 0..d {
                        let acc: f64 = (0..seen)
                            .map(|j| w[j] * v[((bi * kv + g) * tk + j) * d + c])
                            .sum();
                        out.push(acc / total);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn grouped_causal_attention_with_cached_keys_matches_the_written_out_formula() {
        // 4 query heads on 2 key/value heads; 3 new queries after 2 cached keys.
        let (q, k, v) = (
            randn(&[2, 4, 3, 5], 1),
            randn(&[2, 2, 5, 5], 2),
            randn(&[2, 2, 5, 5], 3),
        );
        for causal in [true, false] {
            let opts = AttentionOptions {
                causal,
                scale: Some(0.3),
            };
            let got: Vec<f64> = q
                .scaled_dot_product_attention(&k, &v, opts)
                .unwrap()
                .to_vec()
                .unwrap();
            let want = naive(&q, &k, &v, causal, 0.3);
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-12, "causal {causal}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn mismatched_heads_keys_and_shapes_are_errors_naming_the_problem() {
        let causal = AttentionOptions {
            causal: true,
            scale: None,
        };
        let err = |q: &[usize], kv: &[usize]| {
            randn(q, 1)
                .scaled_dot_product_attention(&randn(kv, 2), &randn(kv, 3), causal)
                .unwrap_err()
                .to_string()
        };
        assert!(err(&[1, 3, 4, 8], &[1, 2, 4, 8]).contains("3 query heads cannot share 2"));
        assert!(err(&[1, 2, 4, 8], &[1, 2, 3, 8]).contains("at least as many keys as queries"));
        assert!(err(&[1, 2, 4, 8], &[1, 2, 4, 6]).contains("needs k and v of shape"));
        assert!(err(&[2, 4, 8], &[1, 2, 4, 8]).contains("[batch, heads, tokens, head_dim]"));
    }
}
