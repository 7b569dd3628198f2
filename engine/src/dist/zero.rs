//! ZeRO stage 1: the optimizer state sharded across the ranks of a data-parallel run. Each
//! parameter has one owner rank, which alone keeps its state (AdamW's two moments, 8 bytes a
//! parameter in F32) and updates it, then broadcasts the new values to the other ranks. The
//! gradients are summed on every rank as in plain data parallelism, so every rank measures
//! the same global norm and clips and skips alike; what shrinks is the state's memory, about
//! divided by the ranks. Owning whole parameters (as PyTorch's ZeroRedundancyOptimizer does,
//! where DeepSpeed splits one flat buffer) keeps each update one item of the fused kernels.

use super::Dist;
use crate::backend::cuda::nccl::Collective;
use crate::{Error, Result, Tensor};

/// Which rank owns each parameter's optimizer state.
#[derive(Clone, Debug, PartialEq)]
pub struct StateShard {
    pub rank: usize,
    pub world_size: usize,
    owners: Vec<usize>,
}

impl StateShard {
    /// The shard of `rank` of `world_size`, for parameters of `sizes` elements each.
    pub fn new(rank: usize, world_size: usize, sizes: &[usize]) -> Result<StateShard> {
        if world_size == 0 || rank >= world_size {
            return Err(Error::invalid(
                "shard_state",
                format!("rank {rank} does not fit a world of {world_size}"),
            ));
        }
        Ok(StateShard {
            rank,
            world_size,
            owners: owners(sizes, world_size),
        })
    }

    pub fn owner(&self, param: usize) -> usize {
        self.owners.get(param).copied().unwrap_or(0)
    }

    pub fn owns(&self, param: usize) -> bool {
        self.owner(param) == self.rank
    }
}

/// An owner for each parameter of `sizes` elements: the largest first, each to the rank that
/// owns the fewest elements so far (the lowest such rank on a tie), so the shards come out
/// within one parameter of even. Every rank computes the same owners.
pub fn owners(sizes: &[usize], ranks: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(sizes[i]), i));
    let mut load = vec![0usize; ranks.max(1)];
    let mut owner = vec![0; sizes.len()];
    for i in order {
        let r = (0..load.len()).min_by_key(|&r| (load[r], r)).unwrap_or(0);
        owner[i] = r;
        load[r] += sizes[i];
    }
    owner
}

impl Dist {
    /// Gives every rank each tensor's values from its owner in `shard` (the parameters after
    /// a sharded step), in place, as one NCCL group; the device's stream waits for it. A
    /// process `brain launch` did not start, with a shard of one, owns everything: nothing to
    /// do. (A shard made for more ranks still goes to NCCL, which refuses it on CUDA.)
    pub fn broadcast_from_owners(&self, ts: &[Tensor], shard: &StateShard) -> Result<()> {
        if !self.reduces() && shard.world_size == 1 {
            return Ok(());
        }
        let items: Vec<_> = ts
            .iter()
            .enumerate()
            .map(|(i, t)| (t, Collective::BroadcastFrom(shard.owner(i))))
            .collect();
        self.start_collectives(&items)?;
        self.wait_for_started(ts)
    }

    /// Gives every rank `t`'s values from rank `root`, in place; the device's stream waits.
    /// Alone (not under `brain launch`), `t` already is rank 0's; another root goes to NCCL,
    /// which refuses it on CUDA.
    pub fn broadcast_(&self, t: &Tensor, root: usize) -> Result<()> {
        if !self.reduces() && root == 0 {
            return Ok(());
        }
        self.start_collectives(&[(t, Collective::BroadcastFrom(root))])?;
        self.wait_for_started(std::slice::from_ref(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_balance_the_elements_largest_first() {
        // 100 and 60 go to ranks 0 and 1; 50 to rank 1 (60 < 100); 40 to rank 0 (100 < 110).
        assert_eq!(owners(&[40, 100, 50, 60], 2), [0, 0, 1, 1]);
        assert_eq!(owners(&[5, 5, 5], 1), [0, 0, 0]);
        // More ranks than parameters: the extra ranks own nothing.
        assert_eq!(owners(&[7, 9], 4), [1, 0]);
    }

    #[test]
    fn a_shard_owns_its_rank_s_parameters_and_refuses_a_rank_outside_the_world() {
        let s = StateShard::new(1, 2, &[40, 100, 50, 60]).unwrap();
        let owned: Vec<bool> = (0..4).map(|i| s.owns(i)).collect();
        assert_eq!(owned, [false, false, true, true]);
        let err = StateShard::new(2, 2, &[1]).unwrap_err().to_string();
        assert!(
            err.contains("rank 2") && err.contains("world of 2"),
            "{err}"
        );
    }
}
