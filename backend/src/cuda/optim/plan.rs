//! Splitting a list of tensors into launches: each launch's table holds at most a fixed number
//! of tensors, and its blocks (one per chunk of elements) are numbered in i32.

use crate::{Error, Result};
use std::ops::Range;

/// Splits tensors of these sizes into launches of at most `max` tensors whose block counts
/// (chunks of `chunk` elements) fit the kernels' i32 block offsets. Returns each launch's
/// tensor range and its block offsets (one more than the tensors).
pub(super) fn plan(
    numels: &[usize],
    max: usize,
    chunk: usize,
) -> Result<Vec<(Range<usize>, Vec<i32>)>> {
    let mut launches = Vec::new();
    let (mut first, mut starts) = (0usize, vec![0i64]);
    for (i, &n) in numels.iter().enumerate() {
        let blocks = n.div_ceil(chunk) as i64;
        if blocks > i32::MAX as i64 {
            return Err(Error::invalid(
                "optimizer",
                format!("a tensor of {n} elements is too large for one kernel"),
            ));
        }
        let end = starts.last().copied().unwrap_or(0) + blocks;
        if i > first && (i - first == max || end > i32::MAX as i64) {
            launches.push((first..i, starts.iter().map(|&s| s as i32).collect()));
            first = i;
            starts = vec![0, blocks];
        } else {
            starts.push(end);
        }
    }
    if numels.len() > first {
        launches.push((
            first..numels.len(),
            starts.iter().map(|&s| s as i32).collect(),
        ));
    }
    Ok(launches)
}

/// Copies a launch's block offsets into its table's `block_start` and returns the launch's
/// block count.
pub(super) fn set_block_starts(block_start: &mut [i32], starts: &[i32]) -> i32 {
    block_start[..starts.len()].copy_from_slice(starts);
    starts.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::super::clip::{NORM_CHUNK, NORM_MAX};
    use super::super::update::{UPDATE_CHUNK, UPDATE_MAX};
    use super::*;

    #[test]
    fn plan_splits_by_tensor_count_and_keeps_block_offsets_per_launch() {
        let numels = vec![1, 4096, 4097, 0, 10];
        let got = plan(&numels, 2, 4096).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (0..2, vec![0, 1, 2]));
        assert_eq!(got[1], (2..4, vec![0, 2, 2]));
        assert_eq!(got[2], (4..5, vec![0, 1]));
        let many: Vec<usize> = (0..600).map(|i| i + 1).collect();
        let launches = plan(&many, UPDATE_MAX, UPDATE_CHUNK).unwrap();
        assert_eq!(
            launches.iter().map(|(r, _)| r.len()).collect::<Vec<_>>(),
            [256, 256, 88]
        );
        assert!(plan(&[], NORM_MAX, NORM_CHUNK).unwrap().is_empty());
    }
}
