//! A fused product's kernel launch: the operands laid out as the kernel reads them (the
//! prologue's inputs, the weights in the product's dtype or their blocks, the residual), and
//! the launch itself with its epilogue (store, gate, add the residual, or rotate and write the
//! cache). `plan` answers `None` wherever the composition runs instead (`policy`).

use super::policy::{block_products, product_dtype, rows_limit};
use super::{output_shape, RotaryCache};
use crate::amp;
use crate::autograd::{is_grad_enabled, no_grad};
use crate::backend::cuda::decode_gemv::{
    self as cuda, At, Epilogue, Prologue, RotaryWrite, Weights,
};
use crate::backend::cuda::quant_matmul::BlockFormat;
use crate::backend::cuda::rope::CacheSlot;
use crate::backend::Storage;
use crate::ops::dispatch::{cuda_kernel_all_into, CudaOperand};
use crate::ops::product_weight::{all_dense, ProductWeight};
use crate::{DType, Device, Result, Tensor};

/// What the kernel computes before the products; its inputs are the plan's `staged` tensors
/// (x and the norm weight, gate and up, or x).
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Norm(f64),
    Swiglu,
    Plain,
}

/// What the kernel does with the products (the residual, if any, comes with the plan).
pub(super) enum Finish<'a> {
    /// One output per weight.
    Store,
    /// silu(y_0) * y_1 of two weights, one output.
    Gated,
    /// q rotated, one output [B, heads, 1, head_dim]; k rotated and v into the caches.
    Rotary {
        cache: RotaryCache<'a>,
        head_dim: usize,
    },
}

/// A kernel launch decided on: the prologue's inputs and the residual (contiguous), the
/// weights in the product's dtype, and the output shapes.
pub(super) struct Plan {
    pub(super) rows: usize,
    pub(super) k: usize,
    pub(super) staged: Vec<Tensor>,
    /// Dense weights in the product's dtype, or the blocks (U8) of quantized ones.
    pub(super) weights: Vec<Tensor>,
    /// The weights' rows.
    pub(super) widths: Vec<usize>,
    /// The quantized weights' format; `None` for dense ones.
    pub(super) blocks: Option<BlockFormat>,
    pub(super) residual: Option<Tensor>,
    pub(super) shapes: Vec<Vec<usize>>,
    pub(super) dtype: DType,
}

/// The kernel launch for these operands, or `None` where the composition runs: not CUDA, a
/// gradient needed, a dtype or layout the kernels do not take, or what `dense_operands` or
/// `block_operands` refuses (too many rows, rows beyond shared memory). `activation` is the dtype of the tensor the composition multiplies
/// (the normed or gated input); `staged` are the prologue's inputs (x, or gate and up, and
/// the norm weight), read 16 bytes at a time. Strided inputs and residuals (a few rows) are
/// copied contiguous; weights must be contiguous already (a copy would cost more than the
/// composition).
pub(super) fn plan(
    x: &Tensor,
    k: usize,
    activation: DType,
    staged: &[&Tensor],
    weights: &[ProductWeight],
    residual: Option<&Tensor>,
) -> Result<Option<Plan>> {
    let Device::Cuda(ordinal) = x.device() else {
        return Ok(None);
    };
    let dense = all_dense(weights);
    let mut all = staged
        .iter()
        .chain(dense.iter().flatten())
        .chain(residual.iter());
    if is_grad_enabled() && all.any(|t| t.requires_grad()) {
        return Ok(None);
    }
    let rows = x.numel().checked_div(k).unwrap_or(0);
    let dev = crate::backend::cuda::device(ordinal)?;
    let taken = |t: &Tensor| matches!(t.dtype(), DType::F32 | DType::BF16 | DType::F16);
    if !staged.iter().chain(residual.iter()).all(|t| taken(t)) {
        return Ok(None);
    }
    let operands = match dense {
        Some(dense) => {
            dense_operands(x, k, activation, rows, &dense, &dev)?.map(|(w, dtype)| (w, dtype, None))
        }
        None => block_operands(k, activation, rows, weights, &dev)
            .map(|(w, format)| (w, DType::BF16, Some(format))),
    };
    let Some((products, dtype, blocks)) = operands else {
        return Ok(None);
    };
    let Some((staged, residual)) = laid_out(staged, residual, &products)? else {
        return Ok(None);
    };
    let widths: Vec<usize> = weights.iter().map(|w| w.shape()[0]).collect();
    let shapes = widths.iter().map(|&n| output_shape(x, n)).collect();
    Ok(Some(Plan {
        rows,
        k,
        staged,
        weights: products,
        widths,
        blocks,
        residual,
        shapes,
        dtype,
    }))
}

/// The dense weights as the kernel takes them, in the product's dtype (returned), or `None`
/// where they compose: too many rows, mixed dtypes, an F32 product while TF32 is allowed, a
/// strided weight, or rows beyond shared memory.
fn dense_operands(
    x: &Tensor,
    k: usize,
    activation: DType,
    rows: usize,
    weights: &[&Tensor],
    dev: &crate::backend::cuda::CudaDevice,
) -> Result<Option<(Vec<Tensor>, DType)>> {
    let dtype = product_dtype(x.device(), activation, weights[0].dtype());
    let one_dtype = weights
        .iter()
        .all(|w| product_dtype(x.device(), activation, w.dtype()) == dtype);
    let fits = rows <= rows_limit(k, dtype)
        && one_dtype
        && !(dtype == DType::F32 && dev.allow_tf32())
        && weights.iter().all(|w| w.is_contiguous())
        && cuda::supports(dev, rows, k, dtype)?;
    if !fits {
        return Ok(None);
    }
    // Outside autograd a parameter's cast is cached for the autocast scope, as matmul's is.
    let weights = weights
        .iter()
        .map(|w| amp::operand(w, dtype))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some((weights, dtype)))
}

/// The staged inputs and the residual made contiguous (a few rows: copied where strided),
/// or `None` where they or the weights do not start on the 16 bytes the kernels load at once
/// (weights are not copied: that would cost more than the composition).
fn laid_out(
    staged: &[&Tensor],
    residual: Option<&Tensor>,
    weights: &[Tensor],
) -> Result<Option<(Vec<Tensor>, Option<Tensor>)>> {
    let contiguous = |t: &Tensor| no_grad(|| t.contiguous());
    let aligned = |t: &Tensor| (t.layout().offset() * t.dtype().size_in_bytes()).is_multiple_of(16);
    let staged = staged
        .iter()
        .map(|t| contiguous(t))
        .collect::<Result<Vec<_>>>()?;
    let residual = residual.map(contiguous).transpose()?;
    let fits = staged
        .iter()
        .chain(weights)
        .all(|t| t.is_contiguous() && aligned(t));
    Ok(fits.then_some((staged, residual)))
}

/// The blocks (U8) of block-quantized weights as the kernel takes them, and their format, or
/// `None` where they compose: the kernels off (`RB_DECODE_BLOCKS`), a dense weight among them,
/// mixed formats, an activation other than BF16 (the composition's product runs in the
/// activation's dtype, BF16 through the int8 GEMV), or what `supports_blocks` refuses.
fn block_operands(
    k: usize,
    activation: DType,
    rows: usize,
    weights: &[ProductWeight],
    dev: &crate::backend::cuda::CudaDevice,
) -> Option<(Vec<Tensor>, BlockFormat)> {
    let blocks: Vec<_> = weights
        .iter()
        .map(|w| match w {
            ProductWeight::Blocks(q) => Some(q),
            ProductWeight::Dense(_) => None,
        })
        .collect::<Option<_>>()?;
    let format = blocks[0].format();
    let fits = block_products().load(std::sync::atomic::Ordering::Relaxed)
        && activation == DType::BF16
        && blocks.iter().all(|q| q.format() == format)
        && cuda::supports_blocks(dev, rows, k, blocks.len(), format);
    fits.then(|| (blocks.iter().map(|q| q.blocks().clone()).collect(), format))
}

impl Plan {
    /// Launches the kernel: one output per weight, of the product's dtype, or of the residual
    /// add's (the residual's and the product's promoted) with a residual; or what `finish`
    /// says.
    pub(super) fn run(self, op: &'static str, kind: Kind, finish: Finish) -> Result<Vec<Tensor>> {
        let out_dtype = self
            .residual
            .as_ref()
            .map_or(self.dtype, |r| r.dtype().promote(self.dtype));
        let (ns, nw) = (self.staged.len(), self.weights.len());
        // The rotary epilogue also reads the tables and the cursor, and writes the caches
        // (`takes` checked their layouts).
        let (rotary, written) = match &finish {
            Finish::Rotary { cache, .. } => {
                cache.k_cache.check_inplace(op)?;
                cache.v_cache.check_inplace(op)?;
                (
                    vec![cache.cos, cache.sin, cache.cursor],
                    vec![cache.k_cache, cache.v_cache],
                )
            }
            _ => (Vec::new(), Vec::new()),
        };
        let operands: Vec<&Tensor> = self
            .staged
            .iter()
            .chain(&self.weights)
            .chain(&self.residual)
            .chain(rotary)
            .collect();
        let nr = usize::from(self.residual.is_some());
        let (rows, k) = (self.rows, self.k);
        let storages = cuda_kernel_all_into(op, &written, &operands, |caches, views| {
            let at = |i: usize| -> At { at(views[i]) };
            let prologue = match kind {
                Kind::Norm(eps) => Prologue::RmsNorm {
                    x: at(0),
                    weight: at(1),
                    eps,
                },
                Kind::Swiglu => Prologue::Swiglu {
                    gate: at(0),
                    up: at(1),
                },
                Kind::Plain => Prologue::Plain { x: at(0) },
            };
            let list: Vec<(At, usize)> = (0..nw).map(|i| (at(ns + i), self.widths[i])).collect();
            let weights = match self.blocks {
                Some(format) => Weights::Blocks(&list, format),
                None => Weights::Dense(&list),
            };
            let epilogue = match (&self.residual, &finish) {
                (Some(_), _) => Epilogue::Residual(at(ns + nw)),
                (None, Finish::Store) => Epilogue::Products,
                (None, Finish::Gated) => Epilogue::Swiglu,
                (None, Finish::Rotary { cache, head_dim }) => {
                    let Ok([(kc, _), (vc, _)]) = <[_; 2]>::try_from(caches) else {
                        unreachable!("the rotary epilogue writes the two caches")
                    };
                    let table = ns + nw + nr;
                    let rotary = RotaryWrite {
                        cos: at(table),
                        sin: at(table + 1),
                        table_stride: cache.cos.layout().strides()[0],
                        head_dim: *head_dim,
                        cache: CacheSlot {
                            k: kc,
                            v: vc,
                            capacity: cache.k_cache.shape()[2],
                            cursor: at(table + 2),
                        },
                    };
                    return cuda::decode_gemv(
                        &prologue,
                        rows,
                        k,
                        weights,
                        Epilogue::Rotary(rotary),
                        out_dtype,
                    );
                }
            };
            cuda::decode_gemv(&prologue, rows, k, weights, epilogue, out_dtype)
        })?;
        let shapes = match finish {
            Finish::Rotary { head_dim, .. } => {
                let [b, _, n] = self.shapes[0][..] else {
                    unreachable!("`takes` checked q's shape")
                };
                vec![vec![b, n / head_dim, 1, head_dim]]
            }
            _ => self.shapes,
        };
        storages
            .into_iter()
            .zip(&shapes)
            .map(|(s, shape)| Tensor::from_storage(Storage::Cuda(s), shape))
            .collect()
    }
}

/// A contiguous operand as the kernel takes it: its storage and first element.
fn at<'a>((s, l): CudaOperand<'a>) -> At<'a> {
    (s, l.offset())
}
