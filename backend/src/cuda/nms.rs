//! Batched non-maximum suppression of a YOLO head output on the device (kernels/nms.cu): the
//! candidates, their order and the greedy suppression of every image in three launches, with
//! only the kept rows (at most `max_det` per image) read back. The rows equal the CPU path's
//! (engine/src/vision/nms.rs) exactly; the kernel file says how.

use super::compile::NMS;
use super::launch::{args, type_suffix};
use super::CudaStorage;
use crate::CpuStorage;
use crate::{DType, Error, Result};

/// Mirrors `struct NmsGeom` in kernels/nms.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct NmsGeom {
    batch: i32,
    channels: i32,
    anchors: i32,
    nc: i32,
    multi_label: i32,
    max_nms: i32,
    max_det: i32,
    cap: i32,
    conf: f32,
    offset: f32,
    iou: f64,
}

pub use crate::spec::nms::{KeptRow, NmsParams, MAX_NMS_ROWS};

/// Sort buffers for one launch stay within this many bytes; a larger batch runs in groups.
const KEYS_BUDGET: usize = 256 << 20;

const BLOCK: u32 = 256;
const SORT_BLOCK: u32 = 1024;

/// NMS of `pred` [batch, channels, anchors] (F32, F16 or BF16, contiguous from `offset`): the
/// kept rows of each image in descending score order.
pub fn non_max_suppression(
    pred: &CudaStorage,
    offset: usize,
    [batch, channels, anchors]: [usize; 3],
    p: &NmsParams,
) -> Result<Vec<Vec<KeptRow>>> {
    let fail = |msg: String| Error::invalid("non_max_suppression", msg);
    let dtype = pred.dtype();
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(fail(format!(
            "expects F32, F16 or BF16 scores, got {dtype:?}"
        )));
    }
    if p.nc == 0 || 4 + p.nc > channels || p.keep_class.len() != p.nc {
        return Err(fail(format!(
            "{channels} channels and {} class flags do not fit {} classes",
            p.keep_class.len(),
            p.nc
        )));
    }
    if batch == 0 || anchors == 0 || p.max_det == 0 {
        return Ok(vec![Vec::new(); batch]);
    }
    let labels = if p.multi_label { p.nc } else { 1 };
    let rows_per_image = anchors
        .checked_mul(labels)
        .filter(|&r| r <= i32::MAX as usize / 2)
        .ok_or_else(|| {
            fail(format!(
                "{anchors} anchors × {labels} labels is too many rows"
            ))
        })?;
    let cap = rows_per_image.next_power_of_two();
    let max_nms = p.max_nms.min(cap);
    if max_nms > MAX_NMS_ROWS || channels * anchors > i32::MAX as usize {
        return Err(fail(format!(
            "max_nms {} and {channels}×{anchors} outputs exceed the device kernel's limits",
            p.max_nms
        )));
    }
    let dev = pred.cuda_device();
    let mask = CpuStorage::U8(p.keep_class.iter().map(|&k| k as u8).collect());
    let keep_class = CudaStorage::from_cpu(dev, &mask)?;
    let group = (KEYS_BUDGET / (cap * 8)).clamp(1, batch.max(1));
    let mut out = Vec::with_capacity(batch);
    for b0 in (0..batch).step_by(group) {
        let images = group.min(batch - b0);
        let g = NmsGeom {
            batch: images as i32,
            channels: channels as i32,
            anchors: anchors as i32,
            nc: p.nc as i32,
            multi_label: p.multi_label as i32,
            max_nms: max_nms as i32,
            max_det: p.max_det as i32,
            cap: cap as i32,
            conf: p.conf,
            offset: p.offset,
            iou: p.iou,
        };
        let start = pred.ptr_at(offset + b0 * channels * anchors);
        out.extend(run_group(pred, start, &keep_class, g)?);
    }
    Ok(out)
}

/// The three launches for `g.batch` images from `start`, and the kept rows read back.
fn run_group(
    pred: &CudaStorage,
    start: u64,
    keep_class: &CudaStorage,
    g: NmsGeom,
) -> Result<Vec<Vec<KeptRow>>> {
    let dev = pred.cuda_device();
    let suffix = type_suffix(pred.dtype());
    let (images, cap, max_det) = (g.batch as usize, g.cap as usize, g.max_det as usize);
    let keys = CudaStorage::alloc(dev, images * cap, DType::I64)?;
    let counts = CudaStorage::from_cpu(dev, &CpuStorage::U32(vec![0; images]))?;
    let boxes = CudaStorage::alloc(dev, images * g.max_nms as usize * 5, DType::F32)?;
    let out_rows = CudaStorage::alloc(dev, images * max_det, DType::U32)?;
    let out_vals = CudaStorage::alloc(dev, images * max_det * 5, DType::F32)?;
    let out_counts = CudaStorage::alloc(dev, images, DType::U32)?;
    let (mask, k, c) = (keep_class.ptr(), keys.ptr(), counts.ptr());
    let (bx, rows, vals, kept) = (
        boxes.ptr(),
        out_rows.ptr(),
        out_vals.ptr(),
        out_counts.ptr(),
    );

    let total = images * g.anchors as usize;
    let grid = total.div_ceil(BLOCK as usize) as u32;
    // A block of consecutive (image, anchor) items touches at most this many images.
    let span = BLOCK as usize / g.anchors as usize + 2;
    let f = dev.function(&NMS, &format!("nms_candidates_{suffix}"))?;
    // SAFETY: `start` holds images × channels × anchors elements of the head output, `mask`
    // nc flags, `keys` images × cap slots (every image's rows fit its cap) and `counts` one
    // counter per image; the shared memory holds two ints per image a block touches.
    unsafe {
        dev.launch(
            f,
            (grid, 1, 1),
            BLOCK,
            (2 * span * 4) as u32,
            &mut args![start, mask, k, c, g],
        )?
    };
    let f = dev.function(&NMS, "nms_sort")?;
    // SAFETY: one block per image sorts within its own `cap` slots.
    unsafe { dev.launch(f, (images as u32, 1, 1), SORT_BLOCK, 0, &mut args![k, c, g])? };
    let f = dev.function(&NMS, &format!("nms_suppress_{suffix}"))?;
    let bits = (g.max_nms as usize).div_ceil(32) * 4;
    // SAFETY: `boxes` holds max_nms boxes per image, the outputs max_det rows per image, and
    // the shared memory one bit per row entering suppression (within MAX_NMS_ROWS).
    unsafe {
        dev.launch(
            f,
            (images as u32, 1, 1),
            BLOCK,
            bits as u32,
            &mut args![start, k, c, bx, rows, vals, kept, g],
        )?
    };

    let (CpuStorage::U32(kept), CpuStorage::U32(rows), CpuStorage::F32(vals)) =
        (out_counts.to_cpu()?, out_rows.to_cpu()?, out_vals.to_cpu()?)
    else {
        return Err(Error::invalid(
            "non_max_suppression",
            "read back the wrong dtypes",
        ));
    };
    Ok((0..images)
        .map(|b| {
            (0..(kept[b] as usize).min(max_det))
                .map(|t| {
                    let o = b * max_det + t;
                    (rows[o], std::array::from_fn(|c| vals[o * 5 + c]))
                })
                .collect()
        })
        .collect())
}
