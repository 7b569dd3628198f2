//! Copies, casts and fills between views on one device (kernels/copy.cu).

use super::compile::COPY;
use super::launch::{args, grid_for, type_suffix, Strided};
use super::CudaStorage;
use crate::{DType, Layout, Result};

const BLOCK: u32 = 256;

/// Writes the elements of `src` seen through `sl` into `dst` seen through `dl` (same numel),
/// converting the dtype when the two differ.
pub fn copy_view(src: &CudaStorage, sl: &Layout, dst: &CudaStorage, dl: &Layout) -> Result<()> {
    let n = sl.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = src.cuda_device();
    let (xs, ys) = (Strided::of("copy", sl)?, Strided::of("copy", dl)?);
    if src.dtype() == dst.dtype() && xs.is_contiguous() && ys.is_contiguous() {
        let size = src.dtype().size_in_bytes();
        return dev.copy_device(dst.ptr_at(dl.offset()), src.ptr_at(sl.offset()), n * size);
    }
    let (from, to) = (src.ptr_at(sl.offset()), dst.ptr_at(dl.offset()));
    if xs.is_contiguous() && ys.is_contiguous() && vector_cast(src.dtype(), dst.dtype(), from, to) {
        return cast_vec(dev, (from, src.dtype()), (to, dst.dtype()), n);
    }
    if src.dtype() == dst.dtype() {
        if let Some(words) = row_words(src.dtype(), (from, sl), (to, dl)) {
            let f = dev.function(&COPY, "copy_rows16")?;
            let (x_ld, y_ld, rows, words) = words;
            let grid = grid_for((rows * words) as usize, BLOCK, dev.sm_count());
            // SAFETY: both views hold `rows` rows of `words` aligned 16-byte words at these
            // strides inside their allocations (their layouts are checked when built).
            return unsafe {
                dev.launch(
                    f,
                    (grid, 1, 1),
                    BLOCK,
                    0,
                    &mut args![from, x_ld, to, y_ld, rows, words],
                )
            };
        }
    }
    let name = if src.dtype() == dst.dtype() {
        format!("copy_{}", src.dtype().size_in_bytes())
    } else {
        format!(
            "cast_{}_{}",
            type_suffix(src.dtype()),
            type_suffix(dst.dtype())
        )
    };
    let f = dev.function(&COPY, &name)?;
    let (x, y, n) = (src.ptr(), dst.ptr(), n as i64);
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: both views lie inside their allocations (layouts are checked when built).
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![x, xs, y, ys, n]) }
}

/// (source row stride, destination row stride, rows, words per row), in 16-byte words, when
/// both views are the same rows (`shared_rows`) of whole aligned words: the strided kernel
/// then moves a word per thread instead of an element with an index division per dim.
fn row_words(
    dtype: DType,
    (from, sl): (u64, &Layout),
    (to, dl): (u64, &Layout),
) -> Option<(i64, i64, i64, i64)> {
    let (rows, cols, s_ld, d_ld) = shared_rows(sl, dl)?;
    let size = dtype.size_in_bytes();
    let words = |n: usize| {
        (n * size)
            .is_multiple_of(16)
            .then_some((n * size / 16) as i64)
    };
    (from.is_multiple_of(16) && to.is_multiple_of(16)).then_some(())?;
    Some((words(s_ld)?, words(d_ld)?, rows as i64, words(cols)?))
}

/// Two views as the same `rows` rows of `cols` contiguous elements, at row strides
/// (`src_ld`, `dst_ld`): (rows, cols, src_ld, dst_ld). Trailing dims that are dense in both
/// views join the row, so a slab of a channel concatenation ([N, C, H, W] inside
/// [N, C_total, H, W]) is N rows of C*H*W, not N*C*H rows of W. Views of different shapes
/// are compared as `Layout::as_rows` sees them.
fn shared_rows(a: &Layout, b: &Layout) -> Option<(usize, usize, usize, usize)> {
    if a.shape() != b.shape() {
        let ((rows, cols, a_ld), (rows2, cols2, b_ld)) = (a.as_rows()?, b.as_rows()?);
        return (rows == rows2 && cols == cols2).then_some((rows, cols, a_ld, b_ld));
    }
    // (size, stride in a, stride in b) of each dim that is not 1, innermost first.
    let mut dims = a
        .shape()
        .iter()
        .zip(a.strides().iter().zip(b.strides()))
        .filter(|(&n, _)| n != 1)
        .map(|(&n, (&sa, &sb))| (n, sa, sb))
        .rev()
        .peekable();
    let Some(&(cols, 1, 1)) = dims.peek() else {
        // Only size-1 dims (one element), or a last dim that is not contiguous in both.
        return (a.numel() == 1).then_some((1, 1, 1, 1));
    };
    dims.next();
    let mut cols = cols;
    while let Some(&(n, sa, sb)) = dims.peek() {
        if sa != cols || sb != cols {
            break;
        }
        cols *= n;
        dims.next();
    }
    // The rest must step evenly in both: one stride each for all leading dims together.
    let lead: Vec<(usize, usize, usize)> = dims.collect();
    let Some(&(_, a_ld, b_ld)) = lead.first() else {
        return Some((1, cols, cols, cols));
    };
    let even = lead
        .windows(2)
        .all(|w| w[1].1 == w[0].1 * w[0].0 && w[1].2 == w[0].2 * w[0].0);
    let rows = lead.iter().map(|&(n, _, _)| n).product();
    (even && a_ld >= cols && b_ld >= cols).then_some((rows, cols, a_ld, b_ld))
}

/// Whether a contiguous cast between these dtypes at these addresses takes the 16-byte kernel:
/// both 16- or 32-bit floats, both addresses 16-byte aligned. The strided kernel converts one
/// element per thread through double, which left the casts of a mixed-precision step (the normed
/// activations, the gradients) at a third of the bandwidth.
fn vector_cast(from: DType, to: DType, src: u64, dst: u64) -> bool {
    let float = |d| matches!(d, DType::F32 | DType::BF16 | DType::F16);
    from != to && float(from) && float(to) && src.is_multiple_of(16) && dst.is_multiple_of(16)
}

/// Converts `n` contiguous elements at device address `src` (of its dtype) into `dst` from
/// its start. For a backend kernel's input that arrives in another dtype than the kernel reads.
pub(crate) fn cast_from_address(src: (u64, DType), dst: &CudaStorage, n: usize) -> Result<()> {
    let dev = dst.cuda_device();
    if n == 0 {
        return Ok(());
    }
    if vector_cast(src.1, dst.dtype(), src.0, dst.ptr()) {
        return cast_vec(dev, src, (dst.ptr(), dst.dtype()), n);
    }
    let name = format!("cast_{}_{}", type_suffix(src.1), type_suffix(dst.dtype()));
    let f = dev.function(&COPY, &name)?;
    let (x, y, whole, n) = (src.0, dst.ptr(), Strided::contiguous(0), n as i64);
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: the caller's address holds n elements of its dtype; dst holds at least n.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![x, whole, y, whole, n]) }
}

/// The 16-byte cast kernel over `n` contiguous elements (addresses as `vector_cast` allows).
fn cast_vec(
    dev: &std::sync::Arc<super::CudaDevice>,
    (from, from_dtype): (u64, DType),
    (to, to_dtype): (u64, DType),
    n: usize,
) -> Result<()> {
    let name = format!(
        "cast_vec_{}_{}",
        type_suffix(from_dtype),
        type_suffix(to_dtype)
    );
    let f = dev.function(&COPY, &name)?;
    let grid = grid_for(n.div_ceil(8), BLOCK, dev.sm_count());
    let n = n as i64;
    // SAFETY: both addresses hold n elements of their dtypes, 16-byte aligned.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![from, to, n]) }
}

/// A new contiguous storage holding `s` seen through `l`, converted to `dtype`.
pub fn cast(s: &CudaStorage, l: &Layout, dtype: DType) -> Result<CudaStorage> {
    let out = CudaStorage::alloc(s.cuda_device(), l.numel(), dtype)?;
    copy_view(s, l, &out, &Layout::contiguous(l.shape()))?;
    Ok(out)
}

/// Writes `value` (converted to the storage's dtype) into the view `l` of `s`.
pub fn fill(s: &CudaStorage, l: &Layout, value: f64) -> Result<()> {
    let n = l.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = s.cuda_device();
    let value = if s.dtype() == DType::Bool {
        (value != 0.0) as u8 as f64
    } else {
        value
    };
    let f = dev.function(&COPY, &format!("fill_{}", type_suffix(s.dtype())))?;
    let (y, ys, n) = (s.ptr(), Strided::of("fill", l)?, n as i64);
    let grid = grid_for(n as usize, BLOCK, dev.sm_count());
    // SAFETY: the view lies inside the allocation.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![y, ys, value, n]) }
}

/// `n` copies of `value` on the device.
pub fn full(
    device: &std::sync::Arc<super::CudaDevice>,
    n: usize,
    dtype: DType,
    value: f64,
) -> Result<CudaStorage> {
    let out = CudaStorage::alloc(device, n, dtype)?;
    fill(&out, &Layout::contiguous(&[n]), value)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::shared_rows;
    use crate::Layout;

    fn view(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
        Layout::new(shape.to_vec(), strides.to_vec(), offset)
    }

    #[test]
    fn a_channel_slab_of_a_concatenation_is_one_row_per_image() {
        // [2, 3, 4, 5] written into channels 3..6 of a [2, 8, 4, 5] buffer.
        let src = Layout::contiguous(&[2, 3, 4, 5]);
        let dst = view(&[2, 3, 4, 5], &[160, 20, 5, 1], 60);
        assert_eq!(shared_rows(&src, &dst), Some((2, 60, 60, 160)));
    }

    #[test]
    fn contiguous_views_are_one_row_and_transposes_are_no_rows() {
        let a = Layout::contiguous(&[3, 4, 5]);
        assert_eq!(shared_rows(&a, &a), Some((1, 60, 60, 60)));
        let t = view(&[4, 3], &[1, 4], 0);
        assert_eq!(shared_rows(&Layout::contiguous(&[4, 3]), &t), None);
    }

    #[test]
    fn leading_dims_must_step_evenly_in_both_views() {
        // Rows of 5 at strides 8 in both, over a [2, 3] grid of rows: even in a (8, 24), not in
        // b (8, 32).
        let a = view(&[2, 3, 5], &[24, 8, 1], 0);
        let b = view(&[2, 3, 5], &[32, 8, 1], 0);
        assert_eq!(shared_rows(&a, &a), Some((6, 5, 8, 8)));
        assert_eq!(shared_rows(&a, &b), None);
    }
}
