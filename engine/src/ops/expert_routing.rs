//! A mixture of experts' routing: each token's top k experts by router probability, and the
//! tokens' assignments sorted by expert, with each expert's first row (what `grouped_matmul`
//! takes). On CUDA both are kernels that leave everything on the device (a layer reads nothing
//! back, so a graph can record it); the CPU computes the same on the host.
//!
//! Ties go to the lower expert and each expert's assignments keep their order (a stable
//! sort), on both devices, so the same routing gives the same sums.

use crate::backend::cuda::moe_route as cuda;
use crate::backend::Storage;
use crate::tensor::dispatch::cuda_kernel;
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "expert routing";

/// The assignments (token, slot) sorted by expert, all I64 on the router's device.
pub struct ExpertDispatch {
    /// Sorted position p holds assignment order[p] ([tokens * k]).
    pub order: Tensor,
    /// The token of sorted position p ([tokens * k]).
    pub token: Tensor,
    /// Assignment a sits at sorted position slot[a] ([tokens * k]).
    pub slot: Tensor,
    /// Expert e's assignments are positions offsets[e] .. offsets[e + 1] ([experts + 1]).
    pub offsets: Tensor,
}

/// The `k` most probable experts of each row of `probs` (F32 [tokens, experts]), best first:
/// I64 [tokens, k]. Not differentiable: gather the probabilities through it.
pub fn top_experts(probs: &Tensor, k: usize) -> Result<Tensor> {
    let (tokens, experts) = match probs.shape() {
        [t, e] if probs.dtype() == DType::F32 => (*t, *e),
        s => {
            return Err(Error::invalid(
                OP,
                format!(
                    "takes F32 probabilities [tokens, experts], got {} {s:?}",
                    probs.dtype()
                ),
            ))
        }
    };
    if k == 0 || k > experts.min(cuda::MAX_K) {
        return Err(Error::invalid(
            OP,
            format!(
                "top k must be in 1..={} for {experts} experts, got {k}",
                experts.min(cuda::MAX_K)
            ),
        ));
    }
    let probs = probs.detach().contiguous()?;
    match probs.device() {
        Device::Cpu => {
            let p = probs.to_vec::<f32>()?;
            let mut chosen = Vec::with_capacity(tokens * k);
            for row in p.chunks(experts.max(1)) {
                let key = |e: usize| {
                    if row[e].is_nan() {
                        f32::NEG_INFINITY
                    } else {
                        row[e]
                    }
                };
                let mut idx: Vec<usize> = (0..experts).collect();
                // Stable: equal probabilities keep the lower expert first.
                idx.sort_by(|&a, &b| key(b).total_cmp(&key(a)));
                chosen.extend(idx[..k].iter().map(|&e| e as i64));
            }
            Tensor::from_vec(chosen, &[tokens, k])
        }
        Device::Cuda(_) => {
            let s = cuda_kernel(OP, [&probs], |[(ps, pl)]| {
                cuda::top_k(ps, pl.offset(), tokens, experts, k)
            })?;
            Tensor::from_storage(Storage::Cuda(s), &[tokens, k])
        }
    }
}

/// The assignments of `chosen` (I64 [tokens, k], each below `experts`) sorted by expert.
pub fn dispatch_by_expert(chosen: &Tensor, experts: usize) -> Result<ExpertDispatch> {
    let [tokens, k] = chosen.shape() else {
        return Err(Error::invalid(
            OP,
            format!("takes chosen experts [tokens, k], got {:?}", chosen.shape()),
        ));
    };
    let (tokens, k) = (*tokens, *k);
    let n = tokens * k;
    let chosen = chosen.detach().contiguous()?;
    match chosen.device() {
        Device::Cpu => {
            let c = chosen.to_vec::<i64>()?;
            if let Some(bad) = c.iter().find(|&&e| e < 0 || e as usize >= experts) {
                return Err(Error::invalid(
                    OP,
                    format!("expert {bad} is outside the {experts} experts"),
                ));
            }
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|&a| c[a]);
            let mut slot = vec![0i64; n];
            let mut offsets = vec![0i64; experts + 1];
            for (p, &a) in order.iter().enumerate() {
                slot[a] = p as i64;
                offsets[c[a] as usize + 1] += 1;
            }
            for e in 0..experts {
                offsets[e + 1] += offsets[e];
            }
            let token: Vec<i64> = order.iter().map(|&a| (a / k) as i64).collect();
            Ok(ExpertDispatch {
                order: Tensor::from_vec(order.iter().map(|&a| a as i64).collect(), &[n])?,
                token: Tensor::from_vec(token, &[n])?,
                slot: Tensor::from_vec(slot, &[n])?,
                offsets: Tensor::from_vec(offsets, &[experts + 1])?,
            })
        }
        Device::Cuda(_) => {
            let placed = cuda_kernel(OP, [&chosen], |[(cs, cl)]| {
                cuda::place(cs, cl.offset(), n, experts, k)
            })?;
            let wrap = |s, len| Tensor::from_storage(Storage::Cuda(s), &[len]);
            Ok(ExpertDispatch {
                order: wrap(placed.order, n)?,
                token: wrap(placed.token, n)?,
                slot: wrap(placed.slot, n)?,
                offsets: wrap(placed.offsets, experts + 1)?,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_probable_experts_come_first_ties_to_the_lower() {
        let p = Tensor::from_vec(vec![0.1f32, 0.4, 0.4, 0.1, 0.7, 0.0, 0.2, 0.1], &[2, 4]).unwrap();
        let chosen = top_experts(&p, 2).unwrap();
        assert_eq!(chosen.to_vec::<i64>().unwrap(), [1, 2, 0, 2]);
    }

    #[test]
    fn assignments_sort_by_expert_keeping_their_order() {
        // Tokens 0..3, k = 2: experts (1, 2), (0, 2), (2, 1).
        let chosen = Tensor::from_vec(vec![1i64, 2, 0, 2, 2, 1], &[3, 2]).unwrap();
        let d = dispatch_by_expert(&chosen, 4).unwrap();
        assert_eq!(d.order.to_vec::<i64>().unwrap(), [2, 0, 5, 1, 3, 4]);
        assert_eq!(d.token.to_vec::<i64>().unwrap(), [1, 0, 2, 0, 1, 2]);
        assert_eq!(d.slot.to_vec::<i64>().unwrap(), [1, 3, 0, 4, 5, 2]);
        assert_eq!(d.offsets.to_vec::<i64>().unwrap(), [0, 1, 3, 6, 6]);
    }

    #[test]
    fn an_expert_outside_the_layer_is_an_error() {
        let chosen = Tensor::from_vec(vec![0i64, 4], &[1, 2]).unwrap();
        let e = dispatch_by_expert(&chosen, 4).err().unwrap().to_string();
        assert!(e.contains("expert 4 is outside the 4 experts"), "{e}");
    }
}
