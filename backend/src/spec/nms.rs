//! Non-maximum suppression of a detection head on a device: the knobs the engine resolves
//! and the rows the kernels give back.

/// The knobs, as the engine has resolved them.
#[derive(Clone, Debug)]
pub struct NmsParams {
    /// Rows need a class score strictly above this (already rounded as the input's dtype).
    pub conf: f32,
    /// Rows whose IoU with a kept row is strictly above this are suppressed.
    pub iou: f64,
    /// Class scores per anchor (channels 4..4+nc).
    pub nc: usize,
    /// One row per class above `conf`, instead of the best class only.
    pub multi_label: bool,
    pub max_nms: usize,
    pub max_det: usize,
    /// The per-class coordinate shift that keeps classes apart (0: class-agnostic).
    pub offset: f32,
    /// Which classes may give rows, `nc` of them.
    pub keep_class: Vec<bool>,
}

/// One kept row: its index `anchor * nc + class`, and `[x1, y1, x2, y2, score]`.
pub type KeptRow = (u32, [f32; 5]);

/// Rows entering suppression are marked in shared memory, a bit each, within 48 KiB.
pub const MAX_NMS_ROWS: usize = 48 * 1024 * 8;
