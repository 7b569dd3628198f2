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
/// Blocks of a thread-block cluster for the tensor-core kernels on sm_90 and later, for `rows`
/// rows: the blocks of a cluster read the staged rows from L2 once between them (multicast bulk
/// copies). At 16 rows, one 1.1B layer's four products took 55.7 µs with a copy per block, 46.3
/// µs in clusters of 2 and 48.2 in clusters of 4 (4 lost on the down product, whose 189 KB of
/// staged rows leave one block an SM and fewer whole clusters); the whole decode step at batch
/// 16 ran at 10,839 tokens/s without clusters, 11,134-11,249 with 2, 10,677 with 4. At 1 row
/// there is little to share and the cluster's barriers cost: 912 tokens/s without, 844-860 in
/// clusters of 2. `RB_DECODE_CLUSTER` sets the size above 2 rows, to measure it (1: none).
fn cluster_blocks(rows: usize) -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    if rows <= 2 {
        return 1;
    }
    *N.get_or_init(|| {
        std::env::var("RB_DECODE_CLUSTER")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &u32| (1..=8).contains(&n) && n.is_power_of_two())
            .unwrap_or(2)
    })
}
/// Mirrors GEMV_THREADS, GEMV_WARPS and GEMV_TARGETS.
const THREADS: u32 = 256;
const WARPS: usize = 8;
const TARGETS: usize = 4;

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

/// The most activation rows of a launch with weights in `format` (the int4 kernels' largest
/// compiled row count, as for `quant_gemv`).
pub const BLOCK_MAX_ROWS: usize = 8;

/// Whether the fused kernels take weights in `format` with k columns: Q4_K with whole blocks.
/// Q4_1 could take the same loop, but each format's kernels cost about a minute of NVRTC and
/// ptxas at the first decode step (kernels/decode_qgemv.cu); it composes.
pub fn takes_blocks(format: BlockFormat, k: usize) -> bool {
    format == BlockFormat::Q4_K && k > 0 && k.is_multiple_of(256)
}

/// The compiled activation rows of the block kernels for `rows` rows.
fn block_rows(rows: usize) -> usize {
    rows.next_power_of_two()
}

/// Dynamic shared memory of a block-format launch: the staged BF16 rows, the int8 codes and
/// (scale, scale * sum) pairs of the compiled rows, and the norms.
fn block_shared_bytes(rows: usize, k: usize) -> usize {
    let m = block_rows(rows);
    rows * k * 2 + m * k + m * (k / 32) * 8 + MAX_ROWS * 4
}

/// Whether one block-format launch takes `rows` rows of k and `weights` weights on `dev`.
pub fn supports_blocks(
    dev: &CudaDevice,
    rows: usize,
    k: usize,
    weights: usize,
    format: BlockFormat,
) -> bool {
    (1..=TARGETS).contains(&weights)
        && (1..=BLOCK_MAX_ROWS).contains(&rows)
        && takes_blocks(format, k)
        && rows * k <= i32::MAX as usize
        && block_shared_bytes(rows, k) <= dev.shared_limit()
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

/// The weights of one launch; mirrors `struct GemvTargets` in the kernel file.
#[repr(C)]
#[derive(Clone, Copy)]
struct Targets {
    w: [u64; TARGETS],
    y: [u64; TARGETS],
    end: [i64; TARGETS],
    count: i32,
}

impl Targets {
    /// A table for `count` targets, every address still zero.
    fn new(count: usize) -> Targets {
        Targets {
            w: [0; TARGETS],
            y: [0; TARGETS],
            end: [0; TARGETS],
            count: count as i32,
        }
    }
}

/// Whether products with weights of `dtype` and k columns take the tensor-core kernels.
fn tensor_cores(k: usize, dtype: DType) -> bool {
    matches!(dtype, DType::BF16 | DType::F16) && k.is_multiple_of(64)
}

/// The most activation rows for which one fused launch beats the composition (norm or gating,
/// then cuBLAS products, then the add). Measured on the H200 with the 1.1B decode shapes
/// (docs/baseline.md, `RB_DECODE_FUSED_ROWS`): the tensor-core kernels are ahead up to 16
/// rows since every block copies its staged rows in asynchronously (8,588 tokens/s against
/// 7,897 at batch 16; staged through registers, 16 rows had lost, 6,598 against 7,812); the
/// CUDA-core ones fall below cuBLAS from 4 rows (19-29% of the bandwidth at 4, 8-18% at 16),
/// since their multiplies grow with the rows.
pub fn fused_max_rows(k: usize, dtype: DType) -> usize {
    if tensor_cores(k, dtype) {
        MAX_ROWS
    } else {
        2
    }
}

/// The tensor-core kernels' staged row stride in elements (kernels/decode_gemv.cu's
/// `gemv_mma_stride`): rows 16 bytes apart modulo 128 bytes, so the two rows a quarter-warp
/// reads fall in different banks.
fn mma_stride(k: usize) -> usize {
    k + 8
}

/// The compiled row count a launch of `rows` rows runs, and its output rows per tile (the
/// kernel file's RB_DECODE_GEMV_ROWS).
fn compiled_rows(rows: usize) -> (usize, usize) {
    match rows {
        1 => (1, 8),
        2 => (2, 8),
        3..=4 => (4, 8),
        5..=8 => (8, 4),
        _ => (16, 4),
    }
}

/// Above this many rows, the tensor-core launches compute the gating or the norm in a kernel of
/// its own, once, instead of in every block. For 16 rows of 5632 the gating in every block cost
/// more than the products. The norm in every block cost a 1.1B layer's products 45.6 µs at 16
/// rows against 40.4 µs with the norm apart (clusters of 2); at 1 row the launch costs more
/// than the norm (33.7 µs apart, 30.3 µs in the blocks).
const PROLOGUE_IN_BLOCK_ROWS: usize = 2;

/// Whether a launch of `rows` rows computes `prologue` in a kernel of its own first.
fn prologue_apart(prologue: &Prologue, rows: usize) -> bool {
    rows > PROLOGUE_IN_BLOCK_ROWS && !matches!(prologue, Prologue::Plain { .. })
}

/// Whether the tensor-core kernel keeps two work items of weights in flight per warp instead of
/// one (the `_deep` kernels: plain inputs only, which is what a down product takes): where k
/// spans more than one item a warp (64 chunks of 64), the next item's loads then overlap the
/// current one's multiplies. Measured on the 1.1B down product (k 5632): 7.7 µs instead of 8.8
/// at 1 row, 10.3 instead of 11.1 at 16; at k 2048 two items in flight lost.
fn deep_rows(prologue: &Prologue, k: usize) -> bool {
    matches!(prologue, Prologue::Plain { .. }) && k >= 4096
}

/// n-tiles (8 activation rows each) of the tensor-core kernel for `rows` rows.
fn mma_tiles(rows: usize) -> usize {
    rows.div_ceil(8)
}

/// Dynamic shared memory of a launch: the staged rows, the cross-warp sums and the norms (and
/// for the tensor-core kernels, the 8-byte barrier of their bulk copies, 16-byte aligned).
fn shared_bytes(rows: usize, k: usize, dtype: DType) -> usize {
    if tensor_cores(k, dtype) {
        let sums = WARPS * mma_tiles(rows) * 16 * 8;
        return rows * mma_stride(k) * dtype.size_in_bytes() + (sums + MAX_ROWS) * 4 + 16;
    }
    let (rt, rb) = compiled_rows(rows);
    rows * k * dtype.size_in_bytes() + (WARPS * rb * rt + rt) * 4
}

/// The kernels' code for the dtype of an operand other than the weights.
fn dtype_code(dtype: DType) -> Result<i32> {
    match dtype {
        DType::F32 => Ok(0),
        DType::BF16 => Ok(1),
        DType::F16 => Ok(2),
        other => Err(Error::UnsupportedDType {
            op: OP,
            dtype: other,
            detail: ": the decode products take F32, BF16 and F16".into(),
        }),
    }
}

/// Whether one launch takes `rows` rows of `k` values with weights of `dtype` on `dev`: the
/// row count, the dtype, k a multiple of 8, and the staged rows within shared memory.
pub fn supports(dev: &CudaDevice, rows: usize, k: usize, dtype: DType) -> Result<bool> {
    Ok((1..=MAX_ROWS).contains(&rows)
        && matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
        && k > 0
        && k.is_multiple_of(8)
        && rows * k <= i32::MAX as usize
        && shared_bytes(rows, k, dtype) <= dev.shared_limit())
}

/// Blocks of `f` resident at once on the whole device with `shared` bytes each, launched as
/// `how` says, after letting `f` use up to the device's limit of dynamic shared memory: a
/// multiple of `how.cluster`, or 0 where no whole cluster fits. Cached per function, size and
/// cluster.
fn resident_blocks(
    dev: &Arc<CudaDevice>,
    f: sys::CUfunction,
    shared: usize,
    how: Launch,
) -> Result<u32> {
    type Key = (usize, usize, u32);
    static CACHE: Mutex<Option<HashMap<Key, u32>>> = Mutex::new(None);
    let key = (f as usize, shared, how.cluster);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(&n) = cache.get(&key) {
        return Ok(n);
    }
    dev.allow_all_shared(f)?;
    let n = if how.cluster > 1 {
        how.cluster * dev.resident_clusters(how, f, THREADS, shared as u32)?
    } else {
        // SAFETY: `f` is loaded in this device's context, which `allow_all_shared` made current.
        let per_sm = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(f, THREADS as i32, shared)
        }
        .map_err(|e| Error::Cuda(format!("{OP}: occupancy of {shared} shared bytes: {e:?}")))?;
        dev.sm_count() * per_sm.max(1) as u32
    };
    cache.insert(key, n);
    Ok(n)
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

/// The block-format form of `decode_gemv` (`Weights::Blocks`): a store, residual or SwiGLU
/// epilogue, BF16 products.
fn decode_gemv_blocks(
    prologue: &Prologue,
    rows: usize,
    k: usize,
    weights: &[(At, usize)],
    format: BlockFormat,
    epilogue: Epilogue,
    out_dtype: DType,
) -> Result<Vec<CudaStorage>> {
    let dev = weights[0].0 .0.cuda_device();
    if !supports_blocks(dev, rows, k, weights.len(), format) {
        return Err(invalid(format!(
            "{rows} rows of {k} with {} {} weights are outside the kernels (1..={BLOCK_MAX_ROWS} rows, 1..={TARGETS} weights, Q4_K with whole blocks, {} bytes of shared memory at most)",
            weights.len(),
            format.name(),
            dev.shared_limit()
        )));
    }
    let (residual, pair) = match epilogue {
        Epilogue::Products => (None, false),
        Epilogue::Rotary(_) => {
            return Err(invalid(
                "the rotary epilogue takes dense weights, not blocks".into(),
            ))
        }
        Epilogue::Residual(r) if weights.len() == 1 => (Some(r), false),
        Epilogue::Swiglu if matches!(weights, [(_, a), (_, b)] if a == b)
            && !matches!(prologue, Prologue::Swiglu { .. }) =>
        {
            (None, true)
        }
        _ => {
            return Err(invalid(format!(
                "block-format weights take a store, a residual (one weight) or the SwiGLU epilogue (gate and up of one width, after a norm or a plain input); got {} weights",
                weights.len()
            )))
        }
    };
    if prologue_apart(prologue, rows) {
        let staged = prologue_alone(prologue, rows, k, DType::BF16)?;
        let plain = Prologue::Plain { x: (&staged, 0) };
        return decode_gemv_blocks(&plain, rows, k, weights, format, epilogue, out_dtype);
    }
    let (in0, in1, in_dt, aux_dt, eps) = prologue_args(prologue, rows, k)?;
    let out_dt = dtype_code(out_dtype)?;
    let (res, res_dt) = residual_args(residual, rows * weights[0].1)?;
    let mut t = Targets::new(weights.len());
    let mut total = 0usize;
    for (i, &(w, n)) in weights.iter().enumerate() {
        if w.0.dtype() != DType::U8 {
            return Err(invalid(format!(
                "weight {i} holds {} blocks as U8, got {:?}",
                format.name(),
                w.0.dtype()
            )));
        }
        t.w[i] = check_span(&format!("weight {i}"), w, format.stored_bytes(n, k)?, true)?;
        total += n;
        t.end[i] = total as i64;
    }
    let outs = weights[..if pair { 1 } else { weights.len() }]
        .iter()
        .map(|&(_, n)| CudaStorage::alloc(dev, rows * n, out_dtype))
        .collect::<Result<Vec<_>>>()?;
    for (slot, o) in outs.iter().enumerate() {
        t.y[slot] = o.ptr();
    }
    let m = block_rows(rows);
    let name = format!(
        "decode_qgemv_{}_{}_m{m}{}",
        prologue.name(),
        format.name(),
        if pair { "_pair" } else { "" }
    );
    let f = dev.function(&DECODE_QGEMV, &name)?;
    let shared = block_shared_bytes(rows, k);
    // The kernel waits for the kernel before it first thing, so it may always start early.
    let how = Launch {
        dependent: FIXED_WEIGHTS.get(),
        cluster: 1,
    };
    let resident = resident_blocks(dev, f, shared, how)?;
    // Row groups of the int4 loop (kernels/quant_blocks.cuh's Int4Rows: 4 rows a warp up to 2
    // activation rows, else 2; paired, half of them in each weight), a warp each.
    let group = if m <= 2 { 4 } else { 2 };
    let groups: usize = if pair {
        weights[0].1.div_ceil(group / 2)
    } else {
        weights.iter().map(|&(_, n)| n.div_ceil(group)).sum()
    };
    let grid = groups.div_ceil(WARPS).clamp(1, resident.max(1) as usize) as u32;
    let (rows32, k32) = (rows as i32, k as i32);
    // SAFETY: the inputs' spans were checked (`prologue_args`, the residual rows × n_0), each
    // weight holds the stored bytes of its n_i × k blocks, the outputs are fresh buffers of
    // rows × n_i (or rows × n_0 gated), and `shared` is what the kernel carves for `rows` rows,
    // allowed on `f` by `resident_blocks`.
    let params = &mut args![t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows32, k32, eps];
    unsafe { dev.launch_with(how, f, (grid, 1, 1), THREADS, shared as u32, params)? };
    Ok(outs)
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

/// The rotary epilogue's operands: the F32 cos and sin rows [rows, head_dim] with row stride
/// `table_stride`, and the caches [rows, kv_heads, capacity, head_dim] of the weights' dtype.
pub struct RotaryWrite<'a> {
    pub cos: At<'a>,
    pub sin: At<'a>,
    pub table_stride: usize,
    pub head_dim: usize,
    pub cache: CacheSlot<'a>,
}

/// Mirrors `struct GemvRotary` in the kernel file.
#[repr(C)]
#[derive(Clone, Copy)]
struct RotaryArgs {
    cos: u64,
    sin: u64,
    table_sb: i64,
    k_cache: u64,
    v_cache: u64,
    cursor: u64,
    err: u64,
    capacity: i32,
    head_dim: i32,
    code: i32,
}

/// Whether `Epilogue::Rotary` takes products with weights of `dtype`, k columns and heads of
/// `head_dim`: the tensor-core kernels, whose 16-row tiles pair 8 dims of a head with the 8 a
/// half head on, so head_dim a multiple of 16.
pub fn rotates(k: usize, dtype: DType, head_dim: usize) -> bool {
    tensor_cores(k, dtype) && head_dim > 0 && head_dim.is_multiple_of(16)
}

/// The checks of `Epilogue::Rotary` on `rows` rows of products with `weights` (rows of each)
/// of `dtype`, writing `out_dtype`; the kernel's arguments.
fn rotary_args(
    r: &RotaryWrite,
    rows: usize,
    k: usize,
    weights: &[usize],
    dtype: DType,
    out_dtype: DType,
    dev: &CudaDevice,
) -> Result<RotaryArgs> {
    let hd = r.head_dim;
    if !rotates(k, dtype, hd) {
        return Err(invalid(format!(
            "the rotary epilogue needs BF16/F16 weights with k a multiple of 64 and a head_dim a multiple of 16, got {dtype:?}, k {k} and head_dim {hd}"
        )));
    }
    let [n_q, n_k, n_v] = weights else {
        return Err(invalid(format!(
            "the rotary epilogue takes three weights (q, k, v), got {}",
            weights.len()
        )));
    };
    if !n_q.is_multiple_of(hd) || n_k != n_v || !n_k.is_multiple_of(hd) || *n_k == 0 {
        return Err(invalid(format!(
            "q, k and v of {n_q}, {n_k} and {n_v} rows are not whole heads of {hd} with k and v alike"
        )));
    }
    let cache = &r.cache;
    for (name, c) in [("key", &*cache.k), ("value", &*cache.v)] {
        if c.dtype() != dtype || c.len() < rows * n_k * cache.capacity {
            return Err(invalid(format!(
                "the {name} cache ({:?}, {} elements) must be {dtype:?} and hold {rows} rows of {} heads x {} positions x {hd}",
                c.dtype(),
                c.len(),
                n_k / hd,
                cache.capacity
            )));
        }
    }
    if out_dtype != dtype {
        return Err(invalid(format!(
            "the rotated q is stored in the weights' dtype {dtype:?}, not {out_dtype:?}"
        )));
    }
    for (name, (t, _)) in [("cos", r.cos), ("sin", r.sin)] {
        if t.dtype() != DType::F32 {
            return Err(invalid(format!(
                "the {name} table must be F32, got {:?}",
                t.dtype()
            )));
        }
    }
    let span = (rows - 1) * r.table_stride + hd;
    let (cos, sin) = (
        check_span("the cos table", r.cos, span, false)?,
        check_span("the sin table", r.sin, span, false)?,
    );
    if cache.cursor.0.dtype() != DType::I64 {
        return Err(invalid(format!(
            "the cache cursor must be I64, got {:?}",
            cache.cursor.0.dtype()
        )));
    }
    if rows * n_k * cache.capacity > i64::MAX as usize || cache.capacity > i32::MAX as usize {
        return Err(invalid(format!(
            "a cache of {} positions is too large",
            cache.capacity
        )));
    }
    Ok(RotaryArgs {
        cos,
        sin,
        table_sb: r.table_stride as i64,
        k_cache: cache.k.ptr(),
        v_cache: cache.v.ptr(),
        cursor: check_span("the cache cursor", cache.cursor, 1, false)?,
        err: dev.error_word(),
        capacity: cache.capacity as i32,
        head_dim: hd as i32,
        code: FLAG_CACHE_CURSOR as i32,
    })
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
