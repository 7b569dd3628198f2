//! A mixture of experts' routing on the device (kernels/moe_route.cu): each token's top k
//! experts, and the assignments sorted by expert with the offsets of each expert's rows.

use super::compile::MOE_ROUTE;
use super::launch::{args, grid_for};
use super::CudaStorage;
use crate::{DType, Error, Result};

/// Mirrors MR_MAX_K in the kernel file.
pub const MAX_K: usize = 32;
const THREADS: u32 = 256;

/// The assignments sorted by expert (all I64): `order` [A] (sorted position to assignment),
/// `token` [A] (sorted position to token), `slot` [A] (assignment to sorted position),
/// `offsets` [E + 1].
pub struct Placement {
    pub order: CudaStorage,
    pub token: CudaStorage,
    pub slot: CudaStorage,
    pub offsets: CudaStorage,
}

/// The `k` most probable experts of each of `tokens` rows of `probs` (F32 [tokens, experts],
/// contiguous from `at`): I64 [tokens, k].
pub fn top_k(
    probs: &CudaStorage,
    at: usize,
    tokens: usize,
    experts: usize,
    k: usize,
) -> Result<CudaStorage> {
    if probs.dtype() != DType::F32 || k == 0 || k > MAX_K.min(experts) {
        return Err(Error::invalid(
            "expert routing",
            format!(
                "takes F32 probabilities and 0 < k <= min(32, experts), got {} and k = {k}",
                probs.dtype()
            ),
        ));
    }
    let dev = probs.cuda_device();
    let chosen = CudaStorage::alloc(dev, tokens * k, DType::I64)?;
    if tokens == 0 {
        return Ok(chosen);
    }
    let f = dev.function(&MOE_ROUTE, "moe_topk")?;
    let (pp, pc) = (probs.ptr_at(at), chosen.ptr());
    let (t, e, k) = (tokens as i64, experts as i32, k as i32);
    let grid = grid_for(tokens, THREADS, dev.sm_count());
    // SAFETY: probs holds tokens * experts F32 from `at`; chosen is a fresh [tokens, k].
    unsafe { dev.launch(f, (grid, 1, 1), THREADS, 0, &mut args![pp, pc, t, e, k])? };
    Ok(chosen)
}

/// The `assignments` entries of `chosen` (I64, each below `experts`, contiguous from `at`;
/// k per token) sorted by expert, stably.
pub fn place(
    chosen: &CudaStorage,
    at: usize,
    assignments: usize,
    experts: usize,
    k: usize,
) -> Result<Placement> {
    let dev = chosen.cuda_device();
    let alloc = |n| CudaStorage::alloc(dev, n, DType::I64);
    let (counts, offsets) = (alloc(experts)?, alloc(experts + 1)?);
    let (order, token, slot) = (
        alloc(assignments)?,
        alloc(assignments)?,
        alloc(assignments)?,
    );
    let blocks = u32::try_from(experts)
        .ok()
        .filter(|&b| b > 0 && b <= 65535)
        .ok_or_else(|| Error::invalid("expert routing", format!("{experts} experts")))?;
    let pch = chosen.ptr_at(at);
    let (pcount, poff) = (counts.ptr(), offsets.ptr());
    let (por, ptok, pslot) = (order.ptr(), token.ptr(), slot.ptr());
    let (a, e, k) = (assignments as i64, experts as i32, k as i32);
    let count = dev.function(&MOE_ROUTE, "moe_count")?;
    let place = dev.function(&MOE_ROUTE, "moe_place")?;
    // SAFETY: chosen holds `assignments` I64 from `at`; every buffer written is fresh and
    // sized as the kernels index it (counts [E], offsets [E + 1], the rest [assignments]);
    // an entry of chosen outside 0..E matches no block and is not placed.
    unsafe {
        dev.launch(
            count,
            (blocks, 1, 1),
            THREADS,
            0,
            &mut args![pch, pcount, a],
        )?;
        dev.launch(
            place,
            (blocks, 1, 1),
            THREADS,
            0,
            &mut args![pch, pcount, poff, por, ptok, pslot, a, e, k],
        )?;
    }
    Ok(Placement {
        order,
        token,
        slot,
        offsets,
    })
}
