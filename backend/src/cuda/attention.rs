//! Fused scaled-dot-product attention (kernels/attention.cu): BF16 and F16, head dims 64 and
//! 128, any batch/head/token strides with a contiguous last dim. Outputs are written
//! token-major ([batch, tokens, heads, head_dim] in memory), so the caller's
//! `transpose(1, 2).reshape([batch, tokens, heads * head_dim])` is free.

use super::compile::ATTENTION;
use super::launch::args;
use super::{CudaDevice, CudaStorage};
use crate::spec::AttentionSpec;
use crate::{DType, Error, Result};
use std::sync::Arc;

/// The forward's block per head dim: (queries, threads), 16 query rows a warp. Mirrors
/// `FwdTile` in kernels/attention.cu.
fn forward_block(head_dim: usize) -> (usize, u32) {
    match head_dim {
        64 => (128, 256),
        _ => (64, 128),
    }
}

/// The backward's blocks per head dim: (keys, threads) of `attn_bwd_kv` and (queries, threads)
/// of `attn_bwd_q`, 16 rows a warp. Mirrors `BwdTile` in kernels/attention.cu.
fn backward_blocks(head_dim: usize) -> ((usize, u32), (usize, u32)) {
    match head_dim {
        64 => ((128, 256), (128, 256)),
        _ => ((64, 128), (64, 128)),
    }
}

/// Dynamic shared memory of the fused `attn_bwd_kvq`, in bytes: two stages of a Q and a dO tile,
/// the block's K and the dS^T of one dQ product (2-byte elements). Mirrors `attn_bwd_kv` with DQ.
fn bwd_kvq_shared(head_dim: usize) -> u32 {
    // (query tile, queries a dQ product, keys) of `BwdTile`.
    let (tile, dq_cols, keys) = match head_dim {
        64 => (64, 64, 128),
        _ => (32, 16, 64),
    };
    ((4 * tile * head_dim + keys * head_dim + keys * dq_cols) * 2) as u32
}

/// How the backward computes dQ. `Fused` (FlashAttention-2's five products) adds each key
/// block's share into an F32 buffer with atomics, so dQ's last bits may vary between runs;
/// `Split` runs a second kernel per query block that recomputes the probabilities (eight
/// products) and repeats bit for bit. `RB_ATTN_BWD=split` picks the split one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DqPath {
    Fused,
    Split,
}

impl DqPath {
    /// The default, or the one `RB_ATTN_BWD` (`fused` or `split`) names.
    pub fn from_env() -> DqPath {
        match std::env::var("RB_ATTN_BWD").as_deref() {
            Ok("split") => DqPath::Split,
            _ => DqPath::Fused,
        }
    }
}

/// Strides of a [batch, heads, tokens, head_dim] view, in elements; mirrors `AttnView`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AttnView {
    sb: i64,
    sh: i64,
    st: i64,
}

/// Mirrors `AttnShape` in kernels/attention.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AttnShape {
    batch: i32,
    heads: i32,
    kv_heads: i32,
    tq: i32,
    tk: i32,
    causal: i32,
    scale: f32,
    scale_log2: f32,
}

/// One [batch, heads, tokens, head_dim] operand: its storage, element offset and the strides of
/// its first three dims (the last is contiguous).
#[derive(Clone, Copy)]
pub struct Operand<'a> {
    pub storage: &'a CudaStorage,
    pub offset: usize,
    pub strides: [usize; 3],
}

impl Operand<'_> {
    fn ptr(&self) -> u64 {
        self.storage.ptr_at(self.offset)
    }

    fn view(&self) -> AttnView {
        let [sb, sh, st] = self.strides.map(|s| s as i64);
        AttnView { sb, sh, st }
    }
}

/// What the kernels need of the problem, in their own structs.
trait KernelParams {
    fn shape(&self) -> AttnShape;
    fn token_major(&self, tokens: usize, heads: usize) -> AttnView;
}

impl KernelParams for AttentionSpec {
    fn shape(&self) -> AttnShape {
        AttnShape {
            batch: self.batch as i32,
            heads: self.heads as i32,
            kv_heads: self.kv_heads as i32,
            tq: self.tq as i32,
            tk: self.tk as i32,
            causal: self.causal as i32,
            scale: self.scale as f32,
            scale_log2: (self.scale * std::f64::consts::LOG2_E) as f32,
        }
    }

    /// The kernels' view of a fresh token-major [batch, tokens, heads, head_dim] buffer as
    /// [batch, heads, tokens, head_dim].
    fn token_major(&self, tokens: usize, heads: usize) -> AttnView {
        let d = self.head_dim as i64;
        let (tokens, heads) = (tokens as i64, heads as i64);
        AttnView {
            sb: tokens * heads * d,
            sh: d,
            st: heads * d,
        }
    }
}

/// The head widths the fused kernels are built for.
pub const HEAD_DIMS: [usize; 2] = [64, 128];

/// Whether the fused kernels take this problem: the dtype, head dim, sizes and the device's
/// tensor cores (sm_80 or newer).
pub fn supports(dev: &CudaDevice, dtype: DType, spec: &AttentionSpec) -> bool {
    let fits = |n: usize| n > 0 && n < i32::MAX as usize / 2;
    matches!(dtype, DType::BF16 | DType::F16)
        && HEAD_DIMS.contains(&spec.head_dim)
        && dev.capability().0 >= 8
        && [spec.batch, spec.heads, spec.kv_heads, spec.tq, spec.tk]
            .into_iter()
            .all(fits)
        && spec.heads.is_multiple_of(spec.kv_heads)
        && spec.batch <= 65535
        && spec.heads <= 65535
}

/// Whether an operand's layout suits the kernels' 16-byte loads: offset and strides multiples
/// of 8 elements.
pub fn aligned(offset: usize, strides: [usize; 3]) -> bool {
    offset.is_multiple_of(8) && strides.iter().all(|s| s.is_multiple_of(8))
}

fn kernel(
    dev: &Arc<CudaDevice>,
    stage: &str,
    dtype: DType,
    d: usize,
) -> Result<cudarc::driver::sys::CUfunction> {
    let name = match dtype {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        other => {
            return Err(Error::invalid(
                "scaled_dot_product_attention",
                format!("the fused kernel takes bf16 or f16, not {other}"),
            ))
        }
    };
    dev.function(&ATTENTION, &format!("attn_{stage}_{name}_{d}"))
}

/// The forward: o (token-major [batch, tq, heads, head_dim]) and the rows' base-2 log-sum-exp
/// of the scaled scores ([batch, heads, tq], F32), which the backward needs.
pub fn forward(
    q: Operand,
    k: Operand,
    v: Operand,
    spec: &AttentionSpec,
) -> Result<(CudaStorage, CudaStorage)> {
    let dev = q.storage.cuda_device();
    let dtype = q.storage.dtype();
    let o = CudaStorage::alloc(
        dev,
        spec.batch * spec.tq * spec.heads * spec.head_dim,
        dtype,
    )?;
    let lse = CudaStorage::alloc(dev, spec.batch * spec.heads * spec.tq, DType::F32)?;
    let f = kernel(dev, "fwd", dtype, spec.head_dim)?;
    let (qp, qv, kp, kv, vp, vv, op, ovv, lp, s) = (
        q.ptr(),
        q.view(),
        k.ptr(),
        k.view(),
        v.ptr(),
        v.view(),
        o.ptr(),
        spec.token_major(spec.tq, spec.heads),
        lse.ptr(),
        spec.shape(),
    );
    let (queries, threads) = forward_block(spec.head_dim);
    let grid = (
        spec.tq.div_ceil(queries) as u32,
        spec.heads as u32,
        spec.batch as u32,
    );
    // SAFETY: every view addresses [batch, heads, tokens, head_dim] inside its storage (checked
    // by the caller), o and lse are fresh allocations of exactly the sizes the kernel writes.
    unsafe {
        dev.launch(
            f,
            grid,
            threads,
            0,
            &mut args![qp, qv, kp, kv, vp, vv, op, ovv, lp, s],
        )?
    };
    Ok((o, lse))
}

/// What the backward reads: the forward's inputs, output and log-sum-exp, and dO.
pub struct BackwardInputs<'a> {
    pub q: Operand<'a>,
    pub k: Operand<'a>,
    pub v: Operand<'a>,
    pub o: Operand<'a>,
    pub dout: Operand<'a>,
    pub lse: &'a CudaStorage,
}

/// dq (token-major [batch, tq, heads, head_dim]) and dk, dv (token-major
/// [batch, tk, kv_heads, head_dim]), by the path `RB_ATTN_BWD` picks.
pub fn backward(
    x: &BackwardInputs,
    spec: &AttentionSpec,
) -> Result<(CudaStorage, CudaStorage, CudaStorage)> {
    backward_by(x, spec, DqPath::from_env())
}

/// As `backward`, by the given path.
pub fn backward_by(
    x: &BackwardInputs,
    spec: &AttentionSpec,
    path: DqPath,
) -> Result<(CudaStorage, CudaStorage, CudaStorage)> {
    let dev = x.q.storage.cuda_device();
    let dtype = x.q.storage.dtype();
    let d = spec.head_dim;
    let rows = spec.batch * spec.heads * spec.tq;
    let dd = CudaStorage::alloc(dev, rows, DType::F32)?;
    let dq = CudaStorage::alloc(dev, spec.batch * spec.tq * spec.heads * d, dtype)?;
    let kv_len = spec.batch * spec.tk * spec.kv_heads * d;
    let dk = CudaStorage::alloc(dev, kv_len, dtype)?;
    let dv = CudaStorage::alloc(dev, kv_len, dtype)?;
    let s = spec.shape();
    let (qp, qv, kp, kv, vp, vv) = (
        x.q.ptr(),
        x.q.view(),
        x.k.ptr(),
        x.k.view(),
        x.v.ptr(),
        x.v.view(),
    );
    let (op, ov, gp, gv, lp, ddp) = (
        x.o.ptr(),
        x.o.view(),
        x.dout.ptr(),
        x.dout.view(),
        x.lse.ptr(),
        dd.ptr(),
    );

    // The fused path's F32 dQ, [batch, heads, tq, head_dim], zeroed by `attn_bwd_dot`.
    let dqacc = match path {
        DqPath::Fused => Some(CudaStorage::alloc(dev, rows * d, DType::F32)?),
        DqPath::Split => None,
    };
    let accp = dqacc.as_ref().map_or(0u64, |a| a.ptr());
    // `attn_bwd_dot` and `attn_bwd_dq`: a thread per 8 elements of a row.
    let lanes_grid = ((rows * (d / 8)).div_ceil(256) as u32, 1, 1);
    let f = kernel(dev, "bwd_dot", dtype, d)?;
    // SAFETY: o and dout are [batch, heads, tq, head_dim] views; dd holds one F32 per row and
    // dqacc, where not null, head_dim per row.
    unsafe {
        dev.launch(
            f,
            lanes_grid,
            256,
            0,
            &mut args![op, ov, gp, gv, ddp, accp, s],
        )?
    };

    let (dkp, dvp) = (dk.ptr(), dv.ptr());
    let dkv = spec.token_major(spec.tk, spec.kv_heads);
    let ((keys, kv_threads), (queries, q_threads)) = backward_blocks(d);
    let grid = (
        spec.tk.div_ceil(keys) as u32,
        spec.kv_heads as u32,
        spec.batch as u32,
    );
    let (dqp, dqv) = (dq.ptr(), spec.token_major(spec.tq, spec.heads));
    if path == DqPath::Fused {
        let f = kernel(dev, "bwd_kvq", dtype, d)?;
        let shared = bwd_kvq_shared(d);
        if dev.allow_all_shared(f)? < shared as usize {
            return Err(Error::Cuda(format!(
                "the fused attention backward needs {shared} bytes of shared memory a block"
            )));
        }
        // SAFETY: as the forward; dk and dv are fresh token-major buffers the kernel fills,
        // dqacc the zeroed [batch, heads, tq, head_dim] F32 buffer it adds into.
        unsafe {
            dev.launch(
                f,
                grid,
                kv_threads,
                shared,
                &mut args![qp, qv, kp, kv, vp, vv, gp, gv, lp, ddp, dkp, dkv, dvp, dkv, accp, s],
            )?
        };
        let f = kernel(dev, "bwd_dq", dtype, d)?;
        // SAFETY: dqacc holds head_dim F32 per row; dq is a fresh token-major buffer.
        unsafe { dev.launch(f, lanes_grid, 256, 0, &mut args![accp, dqp, dqv, s])? };
        return Ok((dq, dk, dv));
    }

    let f = kernel(dev, "bwd_kv", dtype, d)?;
    // SAFETY: as the forward; dk and dv are fresh token-major buffers the kernel fills.
    unsafe {
        dev.launch(
            f,
            grid,
            kv_threads,
            0,
            &mut args![qp, qv, kp, kv, vp, vv, gp, gv, lp, ddp, dkp, dkv, dvp, dkv, s],
        )?
    };

    let f = kernel(dev, "bwd_q", dtype, d)?;
    let grid = (
        spec.tq.div_ceil(queries) as u32,
        spec.heads as u32,
        spec.batch as u32,
    );
    // SAFETY: as above; dq is a fresh token-major buffer.
    unsafe {
        dev.launch(
            f,
            grid,
            q_threads,
            0,
            &mut args![qp, qv, kp, kv, vp, vv, gp, gv, lp, ddp, dqp, dqv, s],
        )?
    };
    Ok((dq, dk, dv))
}
