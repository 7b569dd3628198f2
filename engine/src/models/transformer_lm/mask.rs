//! Which keys each query may not see. Queries are laid out grouped (see attention.rs): row
//! r of a [group * seq, keys] score matrix is query step r % seq, so one mask row pattern
//! repeats per query head of a key/value group.

use crate::{DType, Device, Result, Tensor};

/// What the mask depends on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MaskSpec {
    /// Query heads per key/value head.
    pub group: usize,
    /// New query steps in this call.
    pub seq: usize,
    /// Keys visible in total (cached ones included).
    pub keys: usize,
    /// Absolute position of the first new query (the number of cached keys before this call).
    pub offset: usize,
    pub causal: bool,
    /// Left padding per batch row: keys below it are padding and never attended.
    pub pads: Vec<usize>,
    /// A sliding window: keys `window` or more positions before the query are hidden.
    pub window: Option<usize>,
}

impl MaskSpec {
    /// A bool tensor [rows, 1, group * seq, keys], true where the score is hidden; rows is the
    /// batch with padding, else 1 (it broadcasts).
    pub fn build(&self, device: Device) -> Result<Tensor> {
        let (hidden, shape) = self.hidden();
        Tensor::from_vec(hidden, &shape)?
            .to_dtype(DType::Bool)?
            .to_device(device)
    }

    /// 1 where hidden, with the mask's shape.
    fn hidden(&self) -> (Vec<u8>, [usize; 4]) {
        let rows = self.pads.len().max(1);
        let (q, k) = (self.group * self.seq, self.keys);
        let mut hidden = Vec::with_capacity(rows * q * k);
        for row in 0..rows {
            let pad = self.pads.get(row).copied().unwrap_or(0);
            for r in 0..q {
                let pos = self.offset + r % self.seq;
                for key in 0..k {
                    // Padding queries still see the padding before them, so no row is fully
                    // masked: a softmax over nothing would put NaN into the cache.
                    let pad_key = key < pad && pos >= pad;
                    let outside_window = self.window.is_some_and(|w| pos >= key + w);
                    hidden.push(u8::from(
                        (self.causal && key > pos) || pad_key || outside_window,
                    ));
                }
            }
        }
        (hidden, [rows, 1, q, k])
    }

    /// The mask as an additive bias in `dtype`: 0 where visible, -inf where hidden. Adding it
    /// costs one broadcast add forward and nothing backward (the bias needs no gradient),
    /// where a masked fill also runs a select in the backward pass.
    pub fn build_bias(&self, device: Device, dtype: DType) -> Result<Tensor> {
        let (hidden, shape) = self.hidden();
        let bias: Vec<f32> = hidden
            .into_iter()
            .map(|h| if h == 1 { f32::NEG_INFINITY } else { 0.0 })
            .collect();
        Tensor::from_vec(bias, &shape)?
            .to_dtype(dtype)?
            .to_device(device)
    }
}

/// A decode step's window as an additive bias [batch, 1, 1, keys] in `dtype`: row b sees the
/// keys at `positions` [1, keys] (I64) from `first[b]` to `last` (I64 [batch] and [1], on the
/// device). Built from device tensors only, so a captured step rebuilds it at each replay.
pub fn step_bias(
    positions: &Tensor,
    first: &Tensor,
    last: &Tensor,
    dtype: DType,
) -> Result<Tensor> {
    let (b, keys) = (first.numel(), positions.numel());
    let visible = positions
        .ge(&first.reshape_to(&[b, 1])?)?
        .logical_and(&positions.le(last)?)?;
    Tensor::zeros(&[b, keys], dtype, positions.device())?
        .masked_fill(&visible.logical_not()?, f64::NEG_INFINITY)?
        .reshape_to(&[b, 1, 1, keys])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_rows_repeat_per_query_head_of_a_group() {
        let spec = MaskSpec {
            group: 2,
            seq: 2,
            keys: 3,
            offset: 1,
            causal: true,
            pads: vec![],
            window: None,
        };
        let m = spec.build(Device::Cpu).unwrap();
        assert_eq!(m.shape(), [1, 1, 4, 3]);
        let v: Vec<u8> = m.to_dtype(DType::U8).unwrap().to_vec().unwrap();
        // Steps at positions 1 and 2 see keys 0..=1 and 0..=2; the pattern repeats for head 2.
        assert_eq!(v, [0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    }

    /// The built mask as 0/1 bytes.
    fn hidden_flags(spec: &MaskSpec) -> Vec<u8> {
        spec.build(Device::Cpu)
            .unwrap()
            .to_dtype(DType::U8)
            .unwrap()
            .to_vec()
            .unwrap()
    }

    #[test]
    fn padding_hides_the_leading_keys_of_its_row_only() {
        let spec = MaskSpec {
            group: 1,
            seq: 1,
            keys: 3,
            offset: 2,
            causal: true,
            pads: vec![0, 2],
            window: None,
        };
        let v = hidden_flags(&spec);
        assert_eq!(v, [0, 0, 0, 1, 1, 0]);
    }

    #[test]
    fn a_sliding_window_hides_keys_that_far_back() {
        let spec = MaskSpec {
            group: 1,
            seq: 4,
            keys: 4,
            offset: 0,
            causal: true,
            pads: vec![],
            window: Some(2),
        };
        let v = hidden_flags(&spec);
        // Position p sees p - 1 and p (Mistral's window of 2 includes the query itself).
        #[rustfmt::skip]
        assert_eq!(v, [
            0, 1, 1, 1,
            0, 0, 1, 1,
            1, 0, 0, 1,
            1, 1, 0, 0,
        ]);
    }
}
