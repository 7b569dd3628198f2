//! Rectangular validation batches (`BaseDataset.set_rectangle`, ultralytics 8.4.190).
//!
//! Images are ordered by aspect ratio h / w, cut into consecutive batches, and each batch gets
//! one canvas: for a batch whose ratios lie in [lo, hi], `[hi, 1]` when hi < 1 (all wide),
//! `[1, 1 / lo]` when lo > 1 (all tall), else `[1, 1]`; each side then becomes
//! `ceil(s * imgsz / stride + pad) * stride` (pad is 0.5 for validation). The canvas is always
//! at least as large as the images `load_image` produced, so letterboxing only pads.
//!
//! ultralytics sorts with `np.argsort`'s default (quick/introsort, or a SIMD sort on AVX-512
//! machines), which is not stable: images of equal ratio come out in an order that depends on
//! the machine. We sort stably (equal ratios keep their file order); the batches' shapes are
//! the same either way.

/// The order of images (indices into `sizes`, given as (width, height)) for rect batches.
pub fn rect_order(sizes: &[(usize, usize)]) -> Vec<usize> {
    let ratio = |i: usize| sizes[i].1 as f64 / sizes[i].0 as f64;
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|&a, &b| ratio(a).total_cmp(&ratio(b)));
    order
}

/// The canvas (h, w) of each batch, for images already in [`rect_order`], as (width, height).
pub fn rect_batch_shapes(
    sorted_sizes: &[(usize, usize)],
    batch_size: usize,
    imgsz: usize,
    stride: usize,
    pad: f64,
) -> Vec<(usize, usize)> {
    let side = |s: f64| ((s * imgsz as f64 / stride as f64 + pad).ceil() as usize) * stride;
    sorted_sizes
        .chunks(batch_size.max(1))
        .map(|batch| {
            let ratios = batch.iter().map(|&(w, h)| h as f64 / w as f64);
            let lo = ratios.clone().fold(f64::INFINITY, f64::min);
            let hi = ratios.fold(f64::NEG_INFINITY, f64::max);
            let (sh, sw) = if hi < 1.0 {
                (hi, 1.0)
            } else if lo > 1.0 {
                (1.0, 1.0 / lo)
            } else {
                (1.0, 1.0)
            };
            (side(sh), side(sw))
        })
        .collect()
}
