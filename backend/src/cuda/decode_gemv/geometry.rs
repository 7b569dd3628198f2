//! The launch geometry of the decode products: which shapes and dtypes a kernel takes, how many
//! rows a block stages, its shared memory, the tensor-core tiles, clusters and resident blocks.

use super::*;

/// Blocks of a thread-block cluster for the tensor-core kernels on sm_90 and later, for `rows`
/// rows: the blocks of a cluster read the staged rows from L2 once between them (multicast bulk
/// copies). At 16 rows, one 1.1B layer's four products took 55.7 µs with a copy per block, 46.3
/// µs in clusters of 2 and 48.2 in clusters of 4 (4 lost on the down product, whose 189 KB of
/// staged rows leave one block an SM and fewer whole clusters); the whole decode step at batch
/// 16 ran at 10,839 tokens/s without clusters, 11,134-11,249 with 2, 10,677 with 4. At 1 row
/// there is little to share and the cluster's barriers cost: 912 tokens/s without, 844-860 in
/// clusters of 2. `RB_DECODE_CLUSTER` sets the size above 2 rows, to measure it (1: none).
pub(super) fn cluster_blocks(rows: usize) -> u32 {
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
pub(super) const THREADS: u32 = 256;
pub(super) const WARPS: usize = 8;
pub(super) const TARGETS: usize = 4;

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
pub(super) fn block_rows(rows: usize) -> usize {
    rows.next_power_of_two()
}

/// Dynamic shared memory of a block-format launch: the staged BF16 rows, the int8 codes and
/// (scale, scale * sum) pairs of the compiled rows, and the norms.
pub(super) fn block_shared_bytes(rows: usize, k: usize) -> usize {
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

/// The weights of one launch; mirrors `struct GemvTargets` in the kernel file.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Targets {
    pub(super) w: [u64; TARGETS],
    pub(super) y: [u64; TARGETS],
    pub(super) end: [i64; TARGETS],
    pub(super) count: i32,
}

impl Targets {
    /// A table for `count` targets, every address still zero.
    pub(super) fn new(count: usize) -> Targets {
        Targets {
            w: [0; TARGETS],
            y: [0; TARGETS],
            end: [0; TARGETS],
            count: count as i32,
        }
    }
}

/// Whether products with weights of `dtype` and k columns take the tensor-core kernels.
pub(super) fn tensor_cores(k: usize, dtype: DType) -> bool {
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
pub(super) fn mma_stride(k: usize) -> usize {
    k + 8
}

/// The compiled row count a launch of `rows` rows runs, and its output rows per tile (the
/// kernel file's RB_DECODE_GEMV_ROWS).
pub(super) fn compiled_rows(rows: usize) -> (usize, usize) {
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
pub(super) const PROLOGUE_IN_BLOCK_ROWS: usize = 2;

/// Whether a launch of `rows` rows computes `prologue` in a kernel of its own first.
pub(super) fn prologue_apart(prologue: &Prologue, rows: usize) -> bool {
    rows > PROLOGUE_IN_BLOCK_ROWS && !matches!(prologue, Prologue::Plain { .. })
}

/// Whether the tensor-core kernel keeps two work items of weights in flight per warp instead of
/// one (the `_deep` kernels: plain inputs only, which is what a down product takes): where k
/// spans more than one item a warp (64 chunks of 64), the next item's loads then overlap the
/// current one's multiplies. Measured on the 1.1B down product (k 5632): 7.7 µs instead of 8.8
/// at 1 row, 10.3 instead of 11.1 at 16; at k 2048 two items in flight lost.
pub(super) fn deep_rows(prologue: &Prologue, k: usize) -> bool {
    matches!(prologue, Prologue::Plain { .. }) && k >= 4096
}

/// n-tiles (8 activation rows each) of the tensor-core kernel for `rows` rows.
pub(super) fn mma_tiles(rows: usize) -> usize {
    rows.div_ceil(8)
}

/// Dynamic shared memory of a launch: the staged rows, the cross-warp sums and the norms (and
/// for the tensor-core kernels, the 8-byte barrier of their bulk copies, 16-byte aligned).
pub(super) fn shared_bytes(rows: usize, k: usize, dtype: DType) -> usize {
    if tensor_cores(k, dtype) {
        let sums = WARPS * mma_tiles(rows) * 16 * 8;
        return rows * mma_stride(k) * dtype.size_in_bytes() + (sums + MAX_ROWS) * 4 + 16;
    }
    let (rt, rb) = compiled_rows(rows);
    rows * k * dtype.size_in_bytes() + (WARPS * rb * rt + rt) * 4
}

/// The kernels' code for the dtype of an operand other than the weights.
pub(super) fn dtype_code(dtype: DType) -> Result<i32> {
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
pub(super) fn resident_blocks(
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
