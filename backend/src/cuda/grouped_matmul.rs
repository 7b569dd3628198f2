//! Products over rows grouped by expert (kernels/grouped_matmul.cu): the group sizes stay on
//! the device as offsets, so a mixture of experts runs its experts with no host read and no
//! per-expert launch.

use super::compile::GROUPED_MATMUL;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::{Error, Layout, Result};

/// Mirrors GM_TILE, GM_THREADS and GMT_THREADS in the kernel file.
const TILE: usize = 64;
const THREADS: u32 = 256;
const MMA_THREADS: u32 = 128;

/// The kernel for `dtype` and its block size: tensor cores for BF16 and F16, the CUDA cores
/// (float accumulators, double for F64) otherwise.
fn kernel(product: &str, dtype: crate::DType) -> (String, u32) {
    match dtype {
        crate::DType::BF16 | crate::DType::F16 => {
            (format!("{product}_mma_{}", type_suffix(dtype)), MMA_THREADS)
        }
        _ => (format!("{product}_{}", type_suffix(dtype)), THREADS),
    }
}

/// An operand: its storage and the layout it is read through.
pub type Operand<'a> = (&'a CudaStorage, &'a Layout);

fn grid_dim(op: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n.div_ceil(TILE).max(1))
        .ok()
        .filter(|&g| g <= 65535)
        .ok_or_else(|| Error::invalid(op, format!("{n} rows or columns are too many for one grid")))
}

fn strides(l: &Layout) -> Vec<i64> {
    l.strides().iter().map(|&s| s as i64).collect()
}

/// out [M, N] = a [M, K] times b [E, N, K] transposed, row m by its group's b. `offsets` is
/// I64 [E + 1], contiguous, ascending from 0 to M.
pub fn grouped_rows(
    a: Operand,
    b: Operand,
    offsets: &CudaStorage,
    offsets_at: usize,
) -> Result<CudaStorage> {
    const OP: &str = "grouped_matmul";
    let (m, k) = (a.1.shape()[0], a.1.shape()[1]);
    let (experts, n) = (b.1.shape()[0], b.1.shape()[1]);
    let dev = a.0.cuda_device();
    let dtype = a.0.dtype();
    let out = CudaStorage::alloc(dev, m * n, dtype)?;
    if m == 0 || n == 0 {
        return Ok(out);
    }
    let row_tiles = u32::try_from(m.div_ceil(TILE) + experts)
        .map_err(|_| Error::invalid(OP, format!("{m} rows are too many for one grid")))?;
    let grid = (row_tiles, grid_dim(OP, n)?, 1);
    let (name, threads) = kernel("grouped_rows", dtype);
    let f = dev.function(&GROUPED_MATMUL, &name)?;
    let (sa, sb) = (strides(a.1), strides(b.1));
    let (pa, pb, po, poff) = (
        a.0.ptr_at(a.1.offset()),
        b.0.ptr_at(b.1.offset()),
        out.ptr(),
        offsets.ptr_at(offsets_at),
    );
    let (e, m, n, k) = (experts as i32, m as i64, n as i64, k as i64);
    let (a_m, a_k, b_e, b_n, b_k) = (sa[0], sa[1], sb[0], sb[1], sb[2]);
    // SAFETY: a and b are read within their layouts' shapes through their strides; the
    // kernel clamps the E + 1 offsets to [0, M], so every row a block reads or writes is below
    // M; out is a fresh [M, N] buffer.
    unsafe {
        dev.launch(
            f,
            grid,
            threads,
            0,
            &mut args![pa, pb, po, poff, e, m, n, k, a_m, a_k, b_e, b_n, b_k],
        )?
    };
    Ok(out)
}

/// out [E, N, K] with out[e] = a[rows of e]ᵀ b[rows of e] for a [M, N], b [M, K]; an empty
/// group gives zeros.
pub fn grouped_reduce(
    a: Operand,
    b: Operand,
    offsets: &CudaStorage,
    offsets_at: usize,
    experts: usize,
) -> Result<CudaStorage> {
    const OP: &str = "grouped_matmul backward";
    let (m, n, k) = (a.1.shape()[0], a.1.shape()[1], b.1.shape()[1]);
    let dev = a.0.cuda_device();
    let dtype = a.0.dtype();
    let out = CudaStorage::alloc(dev, experts * n * k, dtype)?;
    if experts == 0 || n == 0 || k == 0 {
        return Ok(out);
    }
    let z = u32::try_from(experts)
        .ok()
        .filter(|&z| z <= 65535)
        .ok_or_else(|| Error::invalid(OP, format!("{experts} groups are too many")))?;
    let grid = (grid_dim(OP, n)?, grid_dim(OP, k)?, z);
    let (name, threads) = kernel("grouped_reduce", dtype);
    let f = dev.function(&GROUPED_MATMUL, &name)?;
    let (sa, sb) = (strides(a.1), strides(b.1));
    let (pa, pb, po, poff) = (
        a.0.ptr_at(a.1.offset()),
        b.0.ptr_at(b.1.offset()),
        out.ptr(),
        offsets.ptr_at(offsets_at),
    );
    let (m, n, k) = (m as i64, n as i64, k as i64);
    let (a_m, a_n, b_m, b_k) = (sa[0], sa[1], sb[0], sb[1]);
    // SAFETY: as for grouped_rows; every group's rows lie below M in a and b, and out is a
    // fresh [E, N, K] buffer that every block writes its whole tile of.
    unsafe {
        dev.launch(
            f,
            grid,
            threads,
            0,
            &mut args![pa, pb, po, poff, m, n, k, a_m, a_n, b_m, b_k],
        )?
    };
    Ok(out)
}
