//! Fused decode products (kernels/decode_gemv.cu): a prologue on a few activation rows (an
//! RMS norm, SwiGLU's gating, or none) and their products with one or more weights, plus an
//! optional residual, in one launch. Engine side: engine/src/ops/fused_linear.rs.
//!
//! Two forms: BF16/F16 weights with k a multiple of 32 take the tensor-core kernels (mma on
//! tiles of 16 output rows, for 1 to 16 activation rows alike); other weights take the CUDA-core
//! kernels, which only pay below 3 rows (`fused_max_rows`).
//!
//! Every block stages the prologue's output for all rows in shared memory, so the grid is at
//! most the blocks resident at once (each loops over tiles of output rows): the launch sizes
//! itself from the occupancy calculator, which needs no host synchronization and no copy, so
//! it can be captured in a CUDA graph. On sm_90 the tensor-core kernels run in thread-block
//! clusters whose blocks read the staged rows from L2 once between them (`cluster_blocks`).
//!
//! Inside `with_fixed_weights` (a decode step) the tensor-core kernels are launched
//! dependently: each starts loading its first weights while the kernel before it finishes.
//!
//! Weights kept in Q4_K blocks (`Weights::Blocks`) take a third form
//! (kernels/decode_qgemv.cu): the
//! same prologue staged in BF16, rounded to int8 in shared memory, and the int4 GEMV's warp loop
//! (kernels/quant_blocks.cuh), for 1 to 8 rows: what `quant_matmul::quant_gemv` computes after
//! the separate norm, gating or cast, in one launch.

use super::compile::{DECODE_GEMV, DECODE_QGEMV};
use super::launch::{args, type_suffix};
use super::quant_matmul::BlockFormat;
use super::rope::{CacheSlot, FLAG_CACHE_CURSOR};
use super::{CudaDevice, CudaStorage, Launch};
use crate::{DType, Error, Result};
use cudarc::driver::{result, sys};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

mod blocks;
mod geometry;
mod rotary;

use blocks::*;
use geometry::*;
pub use geometry::{fused_max_rows, supports, supports_blocks, takes_blocks, BLOCK_MAX_ROWS};
use rotary::*;
pub use rotary::{rotates, RotaryWrite};

thread_local! {
    static FIXED_WEIGHTS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `work` with this thread's decode products launched dependently (programmatic
/// dependent launch): each tensor-core product loads its first weights before it waits for the
/// kernel queued ahead of it, which hides a launch and a memory latency per product. That is
/// only correct where no kernel writes a product's weights, so the caller promises it: a
/// decode step reads the weights and writes activations and its cache. `RB_DECODE_PDL=0`
/// turns it off, to measure it.
pub fn with_fixed_weights<R>(work: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            FIXED_WEIGHTS.set(self.0);
        }
    }
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("RB_DECODE_PDL").as_deref() != Ok("0"));
    let _restore = Restore(FIXED_WEIGHTS.replace(on));
    work()
}

const OP: &str = "decode_gemv";
/// The most activation rows one launch takes.
pub const MAX_ROWS: usize = 16;

/// A contiguous operand: its storage and the element offset where it starts.
pub type At<'a> = (&'a CudaStorage, usize);

/// The weights of one launch, each (storage and offset, rows n_i), all of one kind.
#[derive(Clone, Copy)]
pub enum Weights<'a> {
    /// Dense [n_i, k] matrices of one float dtype, which is the product's.
    Dense(&'a [(At<'a>, usize)]),
    /// Block-quantized matrices of one format (U8 storages, split as
    /// `quant_matmul::split` stores them); the product is BF16.
    Blocks(&'a [(At<'a>, usize)], BlockFormat),
}

impl<'a> Weights<'a> {
    fn list(&self) -> &'a [(At<'a>, usize)] {
        match *self {
            Weights::Dense(w) | Weights::Blocks(w, _) => w,
        }
    }
}

/// What the kernels compute from the inputs before the products, for `rows` rows of `k`.
pub enum Prologue<'a> {
    /// rms_norm(x) * weight, rounded to x's dtype (weight: k elements).
    RmsNorm { x: At<'a>, weight: At<'a>, eps: f64 },
    /// silu(gate) * up, rounded to gate's dtype (gate and up: one dtype).
    Swiglu { gate: At<'a>, up: At<'a> },
    /// x as it is.
    Plain { x: At<'a> },
}

impl Prologue<'_> {
    fn name(&self) -> &'static str {
        match self {
            Prologue::RmsNorm { .. } => "norm",
            Prologue::Swiglu { .. } => "swiglu",
            Prologue::Plain { .. } => "cast",
        }
    }
}

fn invalid(msg: String) -> Error {
    Error::invalid(OP, msg)
}

/// Checks that `len` elements from the operand's offset lie in its storage and, when
/// `aligned`, that they start on a 16-byte boundary (the kernels load 16 bytes at a time).
fn check_span(name: &str, (s, offset): At, len: usize, aligned: bool) -> Result<u64> {
    if offset + len > s.len() {
        return Err(invalid(format!(
            "{name}: {len} elements from offset {offset} overrun a storage of {}",
            s.len()
        )));
    }
    let ptr = s.ptr_at(offset);
    if aligned && !ptr.is_multiple_of(16) {
        return Err(invalid(format!(
            "{name} must start on a 16-byte boundary (element {offset} of its storage does not)"
        )));
    }
    Ok(ptr)
}

/// The norm or gating of `rows` rows once, in a kernel of its own, rounded to `dtype` [rows, k]:
/// what the products after it stage as it is (`prologue_apart`).
fn prologue_alone(prologue: &Prologue, rows: usize, k: usize, dtype: DType) -> Result<CudaStorage> {
    let (in0, in1, in_dt, aux_dt, eps) = prologue_args(prologue, rows, k)?;
    let dev = match *prologue {
        Prologue::RmsNorm { x, .. } | Prologue::Plain { x } => x.0.cuda_device(),
        Prologue::Swiglu { gate, .. } => gate.0.cuda_device(),
    };
    let staged = CudaStorage::alloc(dev, rows * k, dtype)?;
    let name = format!(
        "decode_gemv_prologue_{}_{}",
        prologue.name(),
        type_suffix(dtype)
    );
    let f = dev.function(&DECODE_GEMV, &name)?;
    let (k32, out) = (k as i32, staged.ptr());
    // SAFETY: `prologue_args` checked the inputs' spans (rows × k, and k or rows × k for in1);
    // `staged` holds rows × k of `dtype`, one block per row.
    unsafe {
        dev.launch(
            f,
            (rows as u32, 1, 1),
            THREADS,
            0,
            &mut args![in0, in1, in_dt, aux_dt, k32, eps, out],
        )?
    };
    Ok(staged)
}

/// The residual's pointer and dtype code (0 and 0 without one), after checking it holds
/// `len` elements.
fn residual_args(residual: Option<At>, len: usize) -> Result<(u64, i32)> {
    match residual {
        Some(r) => Ok((
            check_span("the residual", r, len, false)?,
            dtype_code(r.0.dtype())?,
        )),
        None => Ok((0, 0)),
    }
}

/// The pointers and dtype codes the kernel takes for the prologue's inputs: in0, in1, in_dt,
/// aux_dt, eps.
fn prologue_args(p: &Prologue, rows: usize, k: usize) -> Result<(u64, u64, i32, i32, f32)> {
    match *p {
        Prologue::RmsNorm { x, weight, eps } => Ok((
            check_span("x", x, rows * k, true)?,
            check_span("the norm weight", weight, k, true)?,
            dtype_code(x.0.dtype())?,
            dtype_code(weight.0.dtype())?,
            eps as f32,
        )),
        Prologue::Swiglu { gate, up } => {
            if gate.0.dtype() != up.0.dtype() {
                return Err(invalid(format!(
                    "gate and up need one dtype, got {:?} and {:?}",
                    gate.0.dtype(),
                    up.0.dtype()
                )));
            }
            Ok((
                check_span("gate", gate, rows * k, true)?,
                check_span("up", up, rows * k, true)?,
                dtype_code(gate.0.dtype())?,
                0,
                0.0,
            ))
        }
        Prologue::Plain { x } => Ok((
            check_span("x", x, rows * k, true)?,
            0,
            dtype_code(x.0.dtype())?,
            0,
            0.0,
        )),
    }
}

/// What the kernels do with the products before they store them.
pub enum Epilogue<'a> {
    /// Store each product.
    Products,
    /// Add a residual [rows, n_0] to the one product.
    Residual(At<'a>),
    /// silu(y_0) * y_1 of two products of one width (SwiGLU's gate and up), stored as the one
    /// output: the gated input of the down product, without either product in memory.
    /// Tensor-core weights only (`pairs_gate_and_up`).
    Swiglu,
    /// A decode step's q, k and v products (three weights: heads * hd, kv_heads * hd and
    /// kv_heads * hd rows): q and k rotated, q stored as the one output [rows, heads * hd], k
    /// and v written into the caches at the cursor. What `rope::rope_cache_write` does after
    /// the products, without them in memory. Tensor-core weights only (`rotates`).
    Rotary(RotaryWrite<'a>),
}

/// Whether `Epilogue::Swiglu` takes products with weights of `dtype` and k columns.
pub fn pairs_gate_and_up(k: usize, dtype: DType) -> bool {
    tensor_cores(k, dtype)
}

/// y_i [rows, n_i] = P(in) [rows, k] · W_iᵀ, then the epilogue, for the weights `weights` =
/// (W_i [n_i, k] contiguous, n_i): dense ones of one dtype (the product's), or block-quantized
/// ones of one format (a BF16 product), with outputs of `out_dtype` (the product's dtype, or
/// the residual add's). A residual takes one weight, the SwiGLU epilogue two of one width.
pub fn decode_gemv(
    prologue: &Prologue,
    rows: usize,
    k: usize,
    weights: Weights,
    epilogue: Epilogue,
    out_dtype: DType,
) -> Result<Vec<CudaStorage>> {
    let all = weights.list();
    let Some(&((first, _), _)) = all.first() else {
        return Err(invalid("needs at least one weight".into()));
    };
    let dev = first.cuda_device();
    if let Weights::Blocks(_, format) = weights {
        return decode_gemv_blocks(prologue, rows, k, all, format, epilogue, out_dtype);
    }
    let weights = all;
    let wdtype = first.dtype();
    if !supports(dev, rows, k, wdtype)? {
        return Err(invalid(format!(
            "{rows} rows of {k} with {wdtype:?} weights are outside the kernels (1..={MAX_ROWS} rows, k a multiple of 8, F32/BF16/F16, {} bytes of staged rows at most)",
            dev.shared_limit()
        )));
    }
    let residual = match epilogue {
        Epilogue::Residual(_) if weights.len() != 1 => {
            return Err(invalid(format!(
                "a residual takes exactly one weight, got {}",
                weights.len()
            )))
        }
        Epilogue::Residual(r) => Some(r),
        Epilogue::Products | Epilogue::Rotary(_) => None,
        Epilogue::Swiglu => {
            if matches!(prologue, Prologue::Swiglu { .. }) {
                return Err(invalid(
                    "the SwiGLU epilogue follows a norm or a plain input, not a gating".into(),
                ));
            }
            if !pairs_gate_and_up(k, wdtype) {
                return Err(invalid(format!(
                    "the SwiGLU epilogue needs BF16/F16 weights with k a multiple of 64, got {wdtype:?} and k {k}"
                )));
            }
            match weights {
                [(_, a), (_, b)] if a == b => None,
                _ => {
                    return Err(invalid(format!(
                        "the SwiGLU epilogue takes two weights of one width (gate, up), got {:?}",
                        weights.iter().map(|w| w.1).collect::<Vec<_>>()
                    )))
                }
            }
        }
    };
    let pair = matches!(epilogue, Epilogue::Swiglu);
    let widths: Vec<usize> = weights.iter().map(|w| w.1).collect();
    let rotary = match &epilogue {
        Epilogue::Rotary(r) => Some(rotary_args(r, rows, k, &widths, wdtype, out_dtype, dev)?),
        _ => None,
    };
    let (in0, in1, in_dt, aux_dt, eps) = prologue_args(prologue, rows, k)?;
    if tensor_cores(k, wdtype) && prologue_apart(prologue, rows) {
        let staged = prologue_alone(prologue, rows, k, wdtype)?;
        let plain = Prologue::Plain { x: (&staged, 0) };
        return decode_gemv(
            &plain,
            rows,
            k,
            Weights::Dense(weights),
            epilogue,
            out_dtype,
        );
    }
    let out_dt = dtype_code(out_dtype)?;
    let (res, res_dt) = residual_args(residual, rows * weights[0].1)?;
    let mut w_ptrs = Vec::with_capacity(weights.len());
    for (i, &(w, n)) in weights.iter().enumerate() {
        if w.0.dtype() != wdtype {
            return Err(invalid(format!(
                "the weights need one dtype, got {wdtype:?} and {:?}",
                w.0.dtype()
            )));
        }
        w_ptrs.push(check_span(&format!("weight {i}"), w, n * k, true)?);
    }
    let outs = weights[..if pair || rotary.is_some() {
        1
    } else {
        weights.len()
    }]
        .iter()
        .map(|&(_, n)| CudaStorage::alloc(dev, rows * n, out_dtype))
        .collect::<Result<Vec<_>>>()?;
    // Output rows per tile, and the kernel.
    let (rb, name) = if tensor_cores(k, wdtype) {
        let variant = if pair {
            "_pair"
        } else if rotary.is_some() {
            "_rotary"
        } else if deep_rows(prologue, k) {
            "_deep"
        } else {
            ""
        };
        let name = format!(
            "decode_gemv_mma_{}_{}_n{}{variant}",
            prologue.name(),
            type_suffix(wdtype),
            mma_tiles(rows),
        );
        (16, name)
    } else {
        let (rt, rb) = compiled_rows(rows);
        let name = format!(
            "decode_gemv_{}_{}_r{rt}",
            prologue.name(),
            type_suffix(wdtype)
        );
        (rb, name)
    };
    let f = dev.function(&DECODE_GEMV, &name)?;
    let shared = shared_bytes(rows, k, wdtype);
    // The tensor-core kernels wait for the kernel before them after their first weight loads
    // (and before anything else), so they may start early where weights are fixed; they run in
    // clusters where whole clusters fit (the CUDA-core ones ignore clusters: none).
    let mut how = Launch {
        dependent: tensor_cores(k, wdtype) && FIXED_WEIGHTS.get(),
        cluster: if tensor_cores(k, wdtype) && dev.capability().0 >= 9 {
            cluster_blocks(rows)
        } else {
            1
        },
    };
    let mut resident = resident_blocks(dev, f, shared, how)?;
    if resident == 0 {
        how.cluster = 1;
        resident = resident_blocks(dev, f, shared, how)?;
    }
    let (rows32, k32) = (rows as i32, k as i32);
    // More weights than one launch takes run as several launches, each with its prologue.
    for first in (0..weights.len()).step_by(TARGETS) {
        let chunk = first..(first + TARGETS).min(weights.len());
        let mut t = Targets::new(chunk.len());
        let mut total = 0usize;
        for (slot, i) in chunk.enumerate() {
            total += weights[i].1;
            t.w[slot] = w_ptrs[i];
            t.y[slot] = outs.get(i).map_or(0, CudaStorage::ptr);
            t.end[slot] = total as i64;
        }
        let tiles = total.div_ceil(rb);
        if tiles == 0 {
            continue;
        }
        // Blocks past the tiles still stage their share of a cluster's rows.
        let grid = tiles
            .next_multiple_of(how.cluster.max(1) as usize)
            .min(resident as usize) as u32;
        // SAFETY: every span was checked against its storage (inputs rows × k, the norm weight
        // k, weights n_i × k, the residual rows × n_0) and the 16-byte alignment the kernel's
        // vector loads need; the outputs are fresh buffers of rows × n_i; `shared` is what the
        // kernel carves for `rows` rows and was allowed on `f` by `resident_blocks`.
        // The rotary kernels also take the tables, the caches (spans checked by `rotary_args`)
        // and the cursor, which they check against the capacity before writing a cache.
        let (grid, block, shared) = ((grid, 1, 1), THREADS, shared as u32);
        match rotary {
            Some(rot) => {
                let params = &mut args![
                    t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows32, k32, eps, rot
                ];
                unsafe { dev.launch_with(how, f, grid, block, shared, params)? }
            }
            None => {
                let params =
                    &mut args![t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows32, k32, eps];
                unsafe { dev.launch_with(how, f, grid, block, shared, params)? }
            }
        };
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_holds_the_rows_in_the_weights_dtype_and_the_sums() {
        // 16 rows of 5632 BF16 values (TinyLlama's down projection) stay under H100/H200's
        // 227 KB; F32 ones do not.
        // BF16 with k a multiple of 32 is the tensor-core form: padded rows, 2 n-tiles of sums.
        assert_eq!(
            shared_bytes(16, 5632, DType::BF16),
            16 * 5640 * 2 + (8 * 2 * 128 + 16) * 4 + 16
        );
        assert!(shared_bytes(16, 5632, DType::BF16) <= 227 << 10);
        assert!(shared_bytes(16, 5632, DType::F32) > 227 << 10);
        assert_eq!(
            shared_bytes(4, 40, DType::BF16),
            4 * 40 * 2 + (8 * 8 * 4 + 4) * 4
        );
        assert_eq!(compiled_rows(3), (4, 8));
        assert_eq!(compiled_rows(9), (16, 4));
    }

    #[test]
    fn tensor_cores_take_16_rows_and_the_cuda_cores_2() {
        assert_eq!(fused_max_rows(2048, DType::BF16), 16);
        assert_eq!(fused_max_rows(5632, DType::F16), 16);
        assert_eq!(fused_max_rows(2048, DType::F32), 2);
        assert_eq!(fused_max_rows(40, DType::BF16), 2);
        assert_eq!(fused_max_rows(96, DType::BF16), 2);
        assert_eq!(mma_stride(2048), 2056);
    }

    #[test]
    fn block_formats_take_whole_blocks_and_8_rows() {
        assert!(takes_blocks(BlockFormat::Q4_K, 2048));
        assert!(takes_blocks(BlockFormat::Q4_K, 5632));
        assert!(
            !takes_blocks(BlockFormat::Q4_K, 96),
            "Q4_K blocks are 256 values"
        );
        assert!(!takes_blocks(BlockFormat::Q4_1, 96), "Q4_1 composes");
        assert!(
            !takes_blocks(BlockFormat::Q8_0, 2048),
            "Q8_0 has no int4 loop"
        );
        assert_eq!([1, 2, 3, 5, 8].map(block_rows), [1, 2, 4, 8, 8]);
        // 3 rows of 5632: BF16 rows, then codes and (scale, sum) pairs for the 4 compiled rows.
        assert_eq!(
            block_shared_bytes(3, 5632),
            3 * 5632 * 2 + 4 * 5632 + 4 * 176 * 8 + 16 * 4
        );
    }

    #[test]
    fn the_rotary_arguments_have_the_kernels_layout() {
        // Seven 8-byte words and three ints, padded to 8 bytes.
        assert_eq!(std::mem::size_of::<RotaryArgs>(), 72);
        assert!(rotates(2048, DType::BF16, 64));
        assert!(
            !rotates(2048, DType::BF16, 24),
            "tiles pair 8 dims with 8 a half head on"
        );
        assert!(
            !rotates(2048, DType::F32, 64),
            "the tensor-core kernels only"
        );
    }

    #[test]
    fn the_targets_struct_has_the_kernels_layout() {
        // Three arrays of four 8-byte words and an int, padded to 8 bytes.
        assert_eq!(std::mem::size_of::<Targets>(), 104);
        assert_eq!(std::mem::align_of::<Targets>(), 8);
    }
}
