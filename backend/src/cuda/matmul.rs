//! Batched matrix products through cuBLAS: BF16 and F16 operands accumulate in FP32, F32 runs
//! in FP32 (or TF32 when the device allows it), F64 in FP64. Transposed views and broadcast
//! batches go to cuBLAS as flags and strides, without a copy.

use super::copy::cast;
use super::CudaStorage;
use crate::{DType, Error, Layout, Result};
use cudarc::cublas::result as blas;
use cudarc::cublas::sys::{
    cublasComputeType_t as Compute, cublasGemmAlgo_t, cublasOperation_t as Op, cudaDataType as Data,
};
use std::ffi::c_void;

/// How cuBLAS should read one operand: its row-major matrices as stored, or transposed, with
/// one stride between batch entries.
struct Operand {
    op_row_major_t: bool,
    ld: i64,
    batch_stride: i64,
    offset: usize,
}

/// The single stride between consecutive batch entries, if the batch dims have one.
fn batch_stride(shape: &[usize], strides: &[usize]) -> Option<i64> {
    let dims: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(&n, _)| n != 1)
        .map(|(&n, &s)| (n, s))
        .collect();
    let Some(&(_, last)) = dims.last() else {
        return Some(0);
    };
    let mut expect = last;
    for &(n, s) in dims.iter().rev() {
        if s != expect {
            return None;
        }
        expect = s * n;
    }
    Some(last as i64)
}

/// Reads a [batch.., rows, cols] view as cuBLAS operand, or None when it must be packed.
fn operand(l: &Layout) -> Option<Operand> {
    let r = l.rank();
    let (rows, cols) = (l.shape()[r - 2], l.shape()[r - 1]);
    let (rs, cs) = (l.strides()[r - 2], l.strides()[r - 1]);
    let bs = batch_stride(&l.shape()[..r - 2], &l.strides()[..r - 2])?;
    if cs == 1 && (rs == cols || rows == 1) {
        Some(Operand {
            op_row_major_t: false,
            ld: cols.max(1) as i64,
            batch_stride: bs,
            offset: l.offset(),
        })
    } else if rs == 1 && (cs == rows || cols == 1) {
        Some(Operand {
            op_row_major_t: true,
            ld: rows.max(1) as i64,
            batch_stride: bs,
            offset: l.offset(),
        })
    } else {
        None
    }
}

fn int(op: &'static str, v: i64) -> Result<i32> {
    i32::try_from(v)
        .map_err(|_| Error::invalid(op, format!("dimension {v} is too large for cuBLAS")))
}

/// `a` [batch.., m, k] times `b` [batch.., k, n], both broadcast to the full batch shape.
pub fn matmul(a: &CudaStorage, la: &Layout, b: &CudaStorage, lb: &Layout) -> Result<CudaStorage> {
    matmul_into_dtype(a, la, b, lb, a.dtype())
}

/// The product written in `out_dtype`: F32 output from BF16/F16 operands keeps cuBLAS's FP32
/// accumulator instead of rounding it to 8 bits of mantissa (used for logits).
pub fn matmul_into_dtype(
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
    out_dtype: DType,
) -> Result<CudaStorage> {
    let dev = a.cuda_device();
    let Some(out_data) = output_type(a.dtype(), out_dtype) else {
        return Err(Error::invalid(
            "matmul",
            format!(
                "{} operands cannot write a {out_dtype} product on CUDA",
                a.dtype()
            ),
        ));
    };
    let (batch, m, k, n) = product_dims(la, lb);
    let out = CudaStorage::alloc(dev, batch * m * n, out_dtype)?;
    if out.is_empty() {
        return Ok(out);
    }
    if k == 0 {
        super::copy::fill(&out, &Layout::contiguous(&[batch * m * n]), 0.0)?;
        return Ok(out);
    }
    gemm(a, la, b, lb, (&out, out_data), 0.0)?;
    Ok(out)
}

/// out += a b for [m, k] by [k, n] operands of one dtype into an existing contiguous [m, n]
/// `out` of their dtype or F32 (a sum over chunks of rows, such as a weight's gradient, added
/// by the product's own epilogue instead of a pass of its own).
pub fn matmul_accumulate(
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
    out: &CudaStorage,
) -> Result<()> {
    let fits = la.rank() == 2
        && lb.rank() == 2
        && la.shape()[1] == lb.shape()[0]
        && out.len() == la.shape()[0] * lb.shape()[1]
        && a.dtype() == b.dtype();
    let out_data = output_type(a.dtype(), out.dtype());
    let (Some(out_data), true) = (out_data, fits) else {
        return Err(Error::invalid(
            "matmul",
            format!(
                "cannot add {:?} x {:?} ({}) into {} {} elements",
                la.shape(),
                lb.shape(),
                a.dtype(),
                out.len(),
                out.dtype()
            ),
        ));
    };
    if out.is_empty() || la.shape()[1] == 0 {
        return Ok(());
    }
    gemm(a, la, b, lb, (out, out_data), 1.0)
}

/// The cuBLAS type of a product of `operands` written as `out`: `Some(None)` for the operands'
/// own, `Some(Some(F32))` for the FP32 accumulator of half-precision operands, `None` when
/// cuBLAS cannot write it.
fn output_type(operands: DType, out: DType) -> Option<Option<Data>> {
    match (operands, out) {
        (x, y) if x == y => Some(None),
        (DType::BF16 | DType::F16, DType::F32) => Some(Some(Data::CUDA_R_32F)),
        _ => None,
    }
}

/// (batch, m, k, n) of `a` [batch.., m, k] times `b` [.., k, n].
fn product_dims(la: &Layout, lb: &Layout) -> (usize, usize, usize, usize) {
    let r = la.rank();
    let batch = la.shape()[..r - 2].iter().product();
    (
        batch,
        la.shape()[r - 2],
        la.shape()[r - 1],
        lb.shape()[lb.rank() - 1],
    )
}

/// C = a b + beta C into `out` (contiguous, `c_data` its cuBLAS type when it differs from the
/// operands'), for the operands' broadcast batch; k > 0.
fn gemm(
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
    (out, out_data): (&CudaStorage, Option<Data>),
    beta_value: f64,
) -> Result<()> {
    let dev = a.cuda_device();
    let (batch, m, k, n) = product_dims(la, lb);
    let (pa, pb);
    let (a, oa) = match operand(la) {
        Some(o) => (a, o),
        None => {
            pa = cast(a, la, a.dtype())?;
            (
                &pa,
                operand(&Layout::contiguous(la.shape())).expect("contiguous operand"),
            )
        }
    };
    let (b, ob) = match operand(lb) {
        Some(o) => (b, o),
        None => {
            pb = cast(b, lb, b.dtype())?;
            (
                &pb,
                operand(&Layout::contiguous(lb.shape())).expect("contiguous operand"),
            )
        }
    };
    let (data, compute) = match a.dtype() {
        DType::F32 if dev.allow_tf32() => (Data::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (Data::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F),
        DType::BF16 => (Data::CUDA_R_16BF, Compute::CUBLAS_COMPUTE_32F),
        DType::F16 => (Data::CUDA_R_16F, Compute::CUBLAS_COMPUTE_32F),
        DType::F64 => (Data::CUDA_R_64F, Compute::CUBLAS_COMPUTE_64F),
        other => {
            return Err(Error::UnsupportedDType {
                op: "matmul",
                dtype: other,
                detail: " on CUDA".into(),
            })
        }
    };
    let c_data = out_data.unwrap_or(data);
    let (alpha32, beta32, alpha64, beta64) = (1.0f32, beta_value as f32, 1.0f64, beta_value);
    let (alpha, beta): (*const c_void, *const c_void) = if a.dtype() == DType::F64 {
        (&alpha64 as *const f64 as _, &beta64 as *const f64 as _)
    } else {
        (&alpha32 as *const f32 as _, &beta32 as *const f32 as _)
    };
    // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS sees B first, with n rows.
    let flag = |t: bool| if t { Op::CUBLAS_OP_T } else { Op::CUBLAS_OP_N };
    dev.bind()?;
    let (m_, n_, k_) = (
        int("matmul", m as i64)?,
        int("matmul", n as i64)?,
        int("matmul", k as i64)?,
    );
    let (lda, ldb) = (int("matmul", oa.ld)?, int("matmul", ob.ld)?);
    let (pa, pb, pc) = (
        a.ptr_at(oa.offset) as *const c_void,
        b.ptr_at(ob.offset) as *const c_void,
        out.ptr() as *mut c_void,
    );
    let algo = cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    let failed = |e| {
        Error::Cuda(format!(
            "cuBLAS GEMM ({m}x{k} by {k}x{n}, batch {batch}): {e:?}"
        ))
    };
    // SAFETY: the operands' views lie inside their allocations (checked by their layouts), the
    // output holds batch*m*n elements, and the handle is bound to this device's stream.
    unsafe {
        if batch == 1 {
            // The plain GEMM, not a batch of one: cuBLAS picks from its full set of kernels
            // (the entry PyTorch uses for a single matrix product).
            blas::gemm_ex(
                dev.blas(),
                flag(ob.op_row_major_t),
                flag(oa.op_row_major_t),
                n_,
                m_,
                k_,
                alpha,
                pb,
                data,
                ldb,
                pa,
                data,
                lda,
                beta,
                pc,
                c_data,
                n_,
                compute,
                algo,
            )
            .map_err(failed)?;
        } else {
            blas::gemm_strided_batched_ex(
                dev.blas(),
                flag(ob.op_row_major_t),
                flag(oa.op_row_major_t),
                n_,
                m_,
                k_,
                alpha,
                pb,
                data,
                ldb,
                ob.batch_stride,
                pa,
                data,
                lda,
                oa.batch_stride,
                beta,
                pc,
                c_data,
                n_,
                (m * n) as i64,
                int("matmul", batch as i64)?,
                compute,
                algo,
            )
            .map_err(failed)?;
        }
    }
    Ok(())
}
