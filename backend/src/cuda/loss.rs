//! Fused cross-entropy over contiguous logits [rows, cols] with i64 targets (kernels/loss.cu).
//! A target out of range (and not ignore_index) sets the device error word, reported at the
//! next host read, instead of a host round trip per call.

use super::compile::LOSS;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::spec::CrossEntropySpec;
use crate::{DType, Result};

/// Per-row loss, logsumexp and 1/0 for rows that count toward the mean (compute dtype).
pub struct CrossEntropyRows {
    pub loss: CudaStorage,
    pub lse: CudaStorage,
    pub valid: CudaStorage,
}

/// `x` holds rows*cols logits from `x_offset`; `t` points at `rows` i64 targets.
pub fn cross_entropy_forward(
    x: &CudaStorage,
    x_offset: usize,
    t: u64,
    spec: CrossEntropySpec,
) -> Result<CrossEntropyRows> {
    if x.dtype() == DType::F32 {
        return Ok(rows_kernel(x, x_offset, t, spec, None)?.0);
    }
    let dev = x.cuda_device();
    let cdt = x.dtype().compute_dtype();
    let out = CrossEntropyRows::alloc(x, spec.rows, cdt)?;
    if spec.rows > 0 {
        let f = dev.function(&LOSS, &format!("ce_fwd_{}", type_suffix(x.dtype())))?;
        let (grid, block) = row_geometry(spec, dev.sm_count());
        // SAFETY: x holds rows*cols logits, t rows i64s, the outputs rows compute values each.
        unsafe { out.launch(f, (grid, block), x, x_offset, t, spec, None)? };
    }
    Ok(out)
}

/// The loss rows of logits (F32, or BF16/F16) and, in the same kernel, their gradient in `grad`
/// (any of the three from F32 logits, else the logits' dtype) for an upstream gradient of 1 on
/// each counted row (0 on ignored rows): the head of a language model, whose chunk of logits
/// is then read once from memory instead of twice.
pub fn cross_entropy_with_gradient(
    x: &CudaStorage,
    x_offset: usize,
    t: u64,
    spec: CrossEntropySpec,
    grad: DType,
) -> Result<(CrossEntropyRows, CudaStorage)> {
    let (rows, dx) = rows_kernel(x, x_offset, t, spec, Some(grad))?;
    Ok((rows, dx.expect("a gradient was asked for")))
}

impl CrossEntropyRows {
    /// Launches a row kernel that writes these outputs: `ce_fwd_*`, or with `dx` (a gradient
    /// pointer, 0 for none) `ce_rows_*`, whose signature has it after the row outputs.
    ///
    /// # Safety
    /// `f` is one of those kernels; x holds rows*cols logits from `x_offset`, `t` points at rows
    /// i64 targets, and a non-zero `dx` at rows*cols elements of the kernel's gradient dtype.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        f: cudarc::driver::sys::CUfunction,
        (grid, block): (u32, u32),
        x: &CudaStorage,
        x_offset: usize,
        t: u64,
        spec: CrossEntropySpec,
        dx: Option<u64>,
    ) -> Result<()> {
        let dev = x.cuda_device();
        let (px, pl, pe, pv, err) = (
            x.ptr_at(x_offset),
            self.loss.ptr(),
            self.lse.ptr(),
            self.valid.ptr(),
            dev.error_word(),
        );
        let (rows, cols, ignore, smoothing) = (
            spec.rows as i64,
            spec.cols as i64,
            spec.ignore,
            spec.smoothing,
        );
        let grid = (grid, 1, 1);
        match dx {
            None => {
                let mut a = args![px, t, pl, pe, pv, rows, cols, ignore, smoothing, err];
                dev.launch(f, grid, block, 0, &mut a)
            }
            Some(pd) => {
                let mut a = args![px, t, pl, pe, pv, pd, rows, cols, ignore, smoothing, err];
                dev.launch(f, grid, block, 0, &mut a)
            }
        }
    }

    fn alloc(x: &CudaStorage, rows: usize, dtype: DType) -> Result<Self> {
        let dev = x.cuda_device();
        Ok(Self {
            loss: CudaStorage::alloc(dev, rows, dtype)?,
            lse: CudaStorage::alloc(dev, rows, dtype)?,
            valid: CudaStorage::alloc(dev, rows, dtype)?,
        })
    }
}

/// kernels/loss.cu `ce_rows_*`: F32 logits (or BF16/F16 ones with a gradient of their dtype),
/// the gradient written when `grad` names its dtype.
fn rows_kernel(
    x: &CudaStorage,
    x_offset: usize,
    t: u64,
    spec: CrossEntropySpec,
    grad: Option<DType>,
) -> Result<(CrossEntropyRows, Option<CudaStorage>)> {
    const OP: &str = "cross_entropy";
    let dev = x.cuda_device();
    let name = match (x.dtype(), grad) {
        (DType::F32, None | Some(DType::F32)) => "ce_rows_f32",
        (DType::F32, Some(DType::BF16)) => "ce_rows_f32_bf16",
        (DType::F32, Some(DType::F16)) => "ce_rows_f32_f16",
        (DType::BF16, None | Some(DType::BF16)) => "ce_rows_bf16_bf16",
        (DType::F16, None | Some(DType::F16)) => "ce_rows_f16_f16",
        (logits, grad) => {
            return Err(crate::Error::invalid(
                OP,
                format!(
                    "the fused loss reads F32 logits (any gradient) or half-precision ones \
                     (a gradient of their dtype), not {logits} logits with a {} gradient",
                    grad.map_or("missing".to_string(), |g| g.to_string())
                ),
            ))
        }
    };
    let out = CrossEntropyRows::alloc(x, spec.rows, DType::F32)?;
    let dx = grad
        .map(|g| CudaStorage::alloc(dev, spec.rows * spec.cols, g))
        .transpose()?;
    if spec.rows == 0 {
        return Ok((out, dx));
    }
    let f = dev.function(&LOSS, name)?;
    // With a gradient, 1024 threads on each SM keep the rows between the passes in L2.
    let (grid, block) = match grad {
        Some(_) if spec.cols >= 4096 => {
            let threads = gradient_block();
            let blocks = dev.sm_count() as usize * (1024 / threads as usize);
            (spec.rows.min(blocks) as u32, threads)
        }
        _ => row_geometry(spec, dev.sm_count()),
    };
    let pd = dx.as_ref().map_or(0, |d| d.ptr());
    // SAFETY: x holds rows*cols F32 logits, t rows i64s, the three row outputs rows F32s each,
    // dx (when not null) rows*cols of the gradient's dtype.
    unsafe { out.launch(f, (grid, block), x, x_offset, t, spec, Some(pd))? };
    Ok((out, dx))
}

/// Threads a block of the loss-and-gradient kernel on long rows: 1024 (one block an SM), unless
/// `RB_CE_THREADS` (256, 512 or 1024; read once, for measuring) sets another.
fn gradient_block() -> u32 {
    static THREADS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::env::var("RB_CE_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|t| [256, 512, 1024].contains(t))
            .unwrap_or(1024)
    })
}

/// The kernels give each row a block: (grid, block) for the row count and length.
fn row_geometry(spec: CrossEntropySpec, sm_count: u32) -> (u32, u32) {
    let block = match spec.cols {
        c if c >= 4096 => 512,
        c if c >= 1024 => 256,
        c if c >= 256 => 128,
        _ => 32,
    };
    (spec.rows.min(sm_count as usize * 32) as u32, block)
}

/// The logits' gradient in their own dtype. `g` is the gradient of each row's loss and `lse` the
/// forward's logsumexp, both `rows` contiguous compute values.
pub fn cross_entropy_backward(
    x: &CudaStorage,
    x_offset: usize,
    t: u64,
    lse: &CudaStorage,
    g: u64,
    spec: CrossEntropySpec,
) -> Result<CudaStorage> {
    let dev = x.cuda_device();
    let n = spec.rows * spec.cols;
    let dx = CudaStorage::alloc(dev, n, x.dtype())?;
    if n > 0 {
        let name = format!("ce_bwd_{}", type_suffix(x.dtype()));
        let f = dev.function(&LOSS, &name)?;
        let (grid, block) = row_geometry(spec, dev.sm_count());
        let (px, pe, pd) = (x.ptr_at(x_offset), lse.ptr(), dx.ptr());
        let (rows, cols, ignore, smoothing) = (
            spec.rows as i64,
            spec.cols as i64,
            spec.ignore,
            spec.smoothing,
        );
        // SAFETY: x and dx hold rows*cols elements, t, lse and g hold rows.
        unsafe {
            dev.launch(
                f,
                (grid, 1, 1),
                block,
                0,
                &mut args![px, t, pe, g, pd, rows, cols, ignore, smoothing],
            )?
        };
    }
    Ok(dx)
}
