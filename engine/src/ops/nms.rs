//! Non-maximum suppression of a detection head's output where it lives, on the device: the
//! whole batch in three launches, and only the kept rows come back to the host. The semantics,
//! and the host path it equals row for row, are in `vision/nms.rs`.

use super::dispatch::cuda_kernel;
use crate::backend::cuda::nms as cuda;
use crate::backend::spec::nms::{KeptRow, NmsParams};
use crate::{Result, Tensor};

/// The kept rows of each image of `pred` [batch, channels, anchors] (F32, F16 or BF16, on a
/// GPU), in descending score order; an error naming the op for a tensor on the CPU.
pub fn suppress_on_device(pred: &Tensor, params: &NmsParams) -> Result<Vec<Vec<KeptRow>>> {
    let dims: [usize; 3] = pred.shape().try_into().map_err(|_| {
        crate::Error::invalid("non_max_suppression", "expects [batch, channels, anchors]")
    })?;
    let pred = pred.contiguous()?;
    cuda_kernel("non_max_suppression", [&pred], |[(s, l)]| {
        cuda::non_max_suppression(s, l.offset(), dims, params)
    })
}
