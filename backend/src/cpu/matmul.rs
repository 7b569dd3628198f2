//! Batched matmul through the `gemm` crate. Operands may be any strided views (transposes cost
//! nothing); batch dims may broadcast with stride 0. BF16 goes through f32.

use super::map::gather;
use super::CpuStorage;
use crate::{Layout, WithDType};
use gemm::Parallelism;
use rayon::prelude::*;

/// Work below this many multiply-adds runs on one thread.
const PARALLEL_FLOPS: usize = 1 << 18;
/// Rows up to which a large product is split by columns among the threads.
const FEW_ROWS: usize = 4;

#[derive(Clone, Copy)]
struct MatView {
    row_stride: isize,
    col_stride: isize,
}

fn batch_offsets(l: &Layout) -> Vec<usize> {
    let r = l.rank();
    let batch = Layout::new(
        l.shape()[..r - 2].to_vec(),
        l.strides()[..r - 2].to_vec(),
        l.offset(),
    );
    let mut out = Vec::with_capacity(batch.numel());
    batch.for_each_index(|i| out.push(i));
    out
}

fn gemm_t<T: WithDType + 'static>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<T> {
    let (ra, rb) = (la.rank(), lb.rank());
    let va = MatView {
        row_stride: la.strides()[ra - 2] as isize,
        col_stride: la.strides()[ra - 1] as isize,
    };
    let vb = MatView {
        row_stride: lb.strides()[rb - 2] as isize,
        col_stride: lb.strides()[rb - 1] as isize,
    };
    let (oa, ob) = (batch_offsets(la), batch_offsets(lb));
    let batches = oa.len();
    let mut out = vec![T::zero(); batches * m * n];
    if m * n == 0 {
        return out;
    }
    let big = m * n * k >= PARALLEL_FLOPS;
    // The product of the [m, k] view at `ia` with `cols` columns of the [k, n] view at `ib`,
    // into `dst` ([m, cols], row-major).
    let product = |dst: &mut [T], ia: usize, ib: usize, cols: usize, par: Parallelism| {
        // SAFETY: the layouts were checked against the storages by the op (every index that a
        // [m, k] / [k, n] view with these strides reaches is in bounds; callers pass columns
        // inside it), and `dst` holds m * cols.
        unsafe {
            gemm::gemm(
                m,
                cols,
                k,
                dst.as_mut_ptr(),
                1,
                cols as isize,
                false,
                a.as_ptr().add(ia),
                va.col_stride,
                va.row_stride,
                b.as_ptr().add(ib),
                vb.col_stride,
                vb.row_stride,
                T::zero(),
                T::from_f64(1.0),
                false,
                false,
                false,
                par,
            )
        }
    };
    let run = |dst: &mut [T], ia: usize, ib: usize, par: Parallelism| product(dst, ia, ib, n, par);
    if batches == 1 && big && m <= FEW_ROWS && rayon::current_num_threads() > 1 {
        // A few rows against a wide matrix (a decode step's head): each thread takes its own
        // columns, multiplied serially. gemm's own parallel split of such a product cost more
        // than it saved with two threads.
        let columns = n.div_ceil(rayon::current_num_threads()).max(256);
        let parts: Vec<(usize, Vec<T>)> = (0..n)
            .step_by(columns)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|c0| {
                let width = columns.min(n - c0);
                let mut part = vec![T::zero(); m * width];
                let ib = (ob[0] as isize + c0 as isize * vb.col_stride) as usize;
                product(&mut part, oa[0], ib, width, Parallelism::None);
                (c0, part)
            })
            .collect();
        for (c0, part) in parts {
            let width = part.len() / m;
            for r in 0..m {
                out[r * n + c0..][..width].copy_from_slice(&part[r * width..][..width]);
            }
        }
        return out;
    }
    // Many small products (a decode step's attention, one per head) share out among threads
    // only when together they are worth a worker's wake-up.
    if batches > 1 && !big && batches * m * n * k >= PARALLEL_FLOPS {
        out.par_chunks_mut(m * n)
            .zip(oa.par_iter().zip(ob.par_iter()))
            .for_each(|(d, (&ia, &ib))| run(d, ia, ib, Parallelism::None));
    } else {
        let par = if big {
            Parallelism::Rayon(0)
        } else {
            Parallelism::None
        };
        out.chunks_mut(m * n)
            .zip(oa.iter().zip(&ob))
            .for_each(|(d, (&ia, &ib))| run(d, ia, ib, par));
    }
    out
}

/// `a` is [batch.., m, k] and `b` is [batch.., k, n], both broadcast to the same batch shape.
/// Returns the contiguous [batch.., m, n] product. Integer dtypes are rejected by the op.
pub fn matmul(a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> CpuStorage {
    let r = la.rank();
    let (m, k, n) = (la.shape()[r - 2], la.shape()[r - 1], lb.shape()[r - 1]);
    match (a, b) {
        (CpuStorage::F32(x), CpuStorage::F32(y)) => CpuStorage::F32(gemm_t(x, la, y, lb, m, k, n)),
        (CpuStorage::F64(x), CpuStorage::F64(y)) => CpuStorage::F64(gemm_t(x, la, y, lb, m, k, n)),
        (CpuStorage::F16(x), CpuStorage::F16(y)) => CpuStorage::F16(gemm_t(x, la, y, lb, m, k, n)),
        (CpuStorage::BF16(x), CpuStorage::BF16(y)) => {
            let (xf, yf): (Vec<f32>, Vec<f32>) = (
                gather(x, la).iter().map(|v| v.to_f32()).collect(),
                gather(y, lb).iter().map(|v| v.to_f32()).collect(),
            );
            let (ca, cb) = (
                Layout::contiguous(la.shape()),
                Layout::contiguous(lb.shape()),
            );
            let out = gemm_t(&xf, &ca, &yf, &cb, m, k, n);
            CpuStorage::BF16(out.into_iter().map(half::bf16::from_f32).collect())
        }
        (x, y) => unreachable!(
            "matmul on {:?} x {:?}: the op checks dtypes first",
            x.dtype(),
            y.dtype()
        ),
    }
}

/// A plain product of contiguous row-major matrices, optionally transposed: op(a) [m, k] times
/// op(b) [k, n]. Used by conv2d's im2col path.
pub fn mm<T: WithDType + 'static>(
    a: &[T],
    trans_a: bool,
    b: &[T],
    trans_b: bool,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<T> {
    let la = if trans_a {
        Layout::contiguous(&[k, m]).permuted(&[1, 0])
    } else {
        Layout::contiguous(&[m, k])
    };
    let lb = if trans_b {
        Layout::contiguous(&[n, k]).permuted(&[1, 0])
    } else {
        Layout::contiguous(&[k, n])
    };
    gemm_t(a, &la, b, &lb, m, k, n)
}

#[cfg(test)]
mod column_split_tests {
    use super::*;

    /// A few rows against a wide transposed matrix, on two threads (the column split), equal
    /// to the plain sums of products.
    #[test]
    fn a_few_rows_split_by_columns_give_the_product() {
        let (m, k, n) = (3, 300, 1000);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
            .collect();
        // B [k, n] as the transpose of a contiguous [n, k] (a head's Wᵀ).
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 11 % 17) as f32 - 8.0) / 16.0)
            .collect();
        let la = Layout::contiguous(&[m, k]);
        let lb = Layout::contiguous(&[n, k]).permuted(&[1, 0]);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let got = pool.install(|| gemm_t(&a, &la, &w, &lb, m, k, n));
        for r in 0..m {
            for c in 0..n {
                let want: f32 = (0..k).map(|j| a[r * k + j] * w[c * k + j]).sum();
                let g = got[r * n + c];
                assert!(
                    (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "[{r}, {c}]: {g} vs {want}"
                );
            }
        }
    }
}
