//! The fused update of many parameters (`optim_advance`, then `adamw_update`, `lion_update` or
//! `sgd_update` in optim.cu), with the rule's hyperparameters and the learning rate or encoded
//! schedule passed by value.

use super::plan::{plan, set_block_starts};
use super::{dtype_code, DevSlice, BLOCK};
use crate::cuda::compile::OPTIM;
use crate::cuda::launch::args;
use crate::cuda::CudaDevice;
use crate::spec::optim::{LrSource, UpdateRule};
use crate::{Error, Result};
use std::sync::Arc;

/// Parameters per launch of a fused update (`OPT_UPDATE_MAX`).
pub const UPDATE_MAX: usize = 256;
/// Elements per block (`OPT_UPDATE_CHUNK`); a multiple of 4 for the kernels' float4 paths.
pub(super) const UPDATE_CHUNK: usize = 16384;

/// Mirrors `struct UpdateTable` in optim.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct UpdateTable {
    param: [u64; UPDATE_MAX],
    grad: [u64; UPDATE_MAX],
    state0: [u64; UPDATE_MAX],
    state1: [u64; UPDATE_MAX],
    numel: [i64; UPDATE_MAX],
    block_start: [i32; UPDATE_MAX + 1],
    slot: [i32; UPDATE_MAX],
    pdtype: [i32; UPDATE_MAX],
    gdtype: [i32; UPDATE_MAX],
    decay: [i32; UPDATE_MAX],
    n: i32,
}
const _: () = assert!(std::mem::size_of::<UpdateTable>() == 15368);

/// Mirrors `struct Hyper` in optim.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Hyper {
    lr: f64,
    b1: f64,
    b2: f64,
    eps: f64,
    wd: f64,
    momentum: f64,
    dampening: f64,
    max_norm: f64,
    sched_peak: f64,
    sched_min: f64,
    sched_x: f64,
    sched_y: f64,
    sched_a: i64,
    sched_b: i64,
    sched_c: i64,
    norm: u64,
    counters: u64,
    sched_kind: i32,
    nesterov: i32,
}
const _: () = assert!(std::mem::size_of::<Hyper>() == 144);
// Kernel parameters may take at most 32764 bytes (CUDA 12.1 and later, Volta and later).
const _: () = assert!(std::mem::size_of::<UpdateTable>() + std::mem::size_of::<Hyper>() <= 32764);
const _: () = assert!(UPDATE_CHUNK.is_multiple_of(4));

impl UpdateTable {
    /// A table for `n` parameters, every entry still zero.
    fn new(n: usize) -> UpdateTable {
        UpdateTable {
            param: [0; UPDATE_MAX],
            grad: [0; UPDATE_MAX],
            state0: [0; UPDATE_MAX],
            state1: [0; UPDATE_MAX],
            numel: [0; UPDATE_MAX],
            block_start: [0; UPDATE_MAX + 1],
            slot: [0; UPDATE_MAX],
            pdtype: [0; UPDATE_MAX],
            gdtype: [0; UPDATE_MAX],
            decay: [0; UPDATE_MAX],
            n: n as i32,
        }
    }
}

/// One parameter of a fused update: its data, its gradient, its state tensors (0 where the
/// rule has none), its index among the optimizer's parameters (for its step count) and
/// whether weight decay applies to it.
#[derive(Clone, Copy, Debug)]
pub struct UpdateItem {
    pub param: DevSlice,
    pub grad: DevSlice,
    pub state: [u64; 2],
    pub slot: usize,
    pub decay: bool,
}

fn hyper(
    rule: &UpdateRule,
    lr: &LrSource,
    max_norm: Option<f64>,
    norm: u64,
    counters: u64,
) -> Hyper {
    let mut h = Hyper {
        norm,
        counters,
        max_norm: max_norm.unwrap_or(f64::INFINITY),
        sched_kind: -1,
        ..Default::default()
    };
    match *rule {
        UpdateRule::AdamW {
            betas,
            eps,
            weight_decay,
            ..
        } => {
            (h.b1, h.b2, h.eps, h.wd) = (betas.0, betas.1, eps, weight_decay);
        }
        UpdateRule::Lion {
            betas,
            weight_decay,
            ..
        } => (h.b1, h.b2, h.wd) = (betas.0, betas.1, weight_decay),
        UpdateRule::Sgd {
            momentum,
            dampening,
            nesterov,
            weight_decay,
        } => {
            (h.momentum, h.dampening, h.nesterov, h.wd) =
                (momentum, dampening, nesterov as i32, weight_decay);
        }
    }
    match *lr {
        LrSource::Fixed(lr) => h.lr = lr,
        LrSource::Schedule(s) => {
            (h.sched_kind, h.sched_peak, h.sched_min) = (s.kind, s.peak, s.min);
            [h.sched_x, h.sched_y] = s.aux;
            [h.sched_a, h.sched_b, h.sched_c] = s.steps;
        }
    }
    h
}

/// One fused optimizer step over `items`: for each launch's worth of parameters, one tiny
/// launch that advances their step counts and one that updates them. Both read the step's
/// `norm` on the device and do nothing when it is not finite.
///
/// # Safety
/// Every item must address live device memory of its size and dtype (state tensors in the
/// parameter's state dtype, F64 for F64 parameters and F32 otherwise, as many elements as the
/// parameter, where the rule uses them), `norm` must be one F32 and `counters` a counter buffer
/// with a slot for every item.
pub unsafe fn fused_update(
    dev: &Arc<CudaDevice>,
    rule: &UpdateRule,
    lr: &LrSource,
    max_norm: Option<f64>,
    norm: u64,
    counters: u64,
    items: &[UpdateItem],
) -> Result<()> {
    let items: Vec<&UpdateItem> = items.iter().filter(|u| u.param.numel > 0).collect();
    let kernel = match rule {
        UpdateRule::AdamW { .. } => "adamw_update",
        UpdateRule::Lion { .. } => "lion_update",
        UpdateRule::Sgd { .. } => "sgd_update",
    };
    let (f, advance) = (
        dev.function(&OPTIM, kernel)?,
        dev.function(&OPTIM, "optim_advance")?,
    );
    let h = hyper(rule, lr, max_norm, norm, counters);
    let numels: Vec<usize> = items.iter().map(|u| u.param.numel).collect();
    for (range, starts) in plan(&numels, UPDATE_MAX, UPDATE_CHUNK)? {
        let mut t = UpdateTable::new(range.len());
        for (j, u) in items[range].iter().enumerate() {
            if u.grad.numel != u.param.numel {
                return Err(Error::invalid(
                    "optimizer",
                    format!(
                        "a gradient of {} elements for a parameter of {}",
                        u.grad.numel, u.param.numel
                    ),
                ));
            }
            t.param[j] = u.param.ptr;
            t.grad[j] = u.grad.ptr;
            [t.state0[j], t.state1[j]] = u.state;
            t.numel[j] = u.param.numel as i64;
            t.slot[j] = i32::try_from(u.slot)
                .map_err(|_| Error::invalid("optimizer", "too many parameters"))?;
            t.pdtype[j] = dtype_code("optimizer", u.param.dtype)?;
            t.gdtype[j] = dtype_code("optimizer", u.grad.dtype)?;
            t.decay[j] = u.decay as i32;
        }
        let blocks = set_block_starts(&mut t.block_start, &starts) as u32;
        // SAFETY: the caller's contract; the advance kernel only touches the counters.
        dev.launch(advance, (1, 1, 1), 64, 0, &mut args![t, h])?;
        dev.launch(f, (blocks, 1, 1), BLOCK, 0, &mut args![t, h])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::optim::DeviceSchedule;

    #[test]
    fn hyper_carries_the_schedule_for_the_device() {
        let s = DeviceSchedule {
            kind: DeviceSchedule::WARMUP_STABLE_DECAY,
            peak: 1.0,
            min: 0.1,
            aux: [0.5, 2.5],
            steps: [2, 3, 4],
        };
        let h = hyper(
            &UpdateRule::Lion {
                betas: (0.9, 0.99),
                weight_decay: 0.1,
                decay_1d_params: false,
            },
            &LrSource::Schedule(s),
            Some(1.0),
            8,
            16,
        );
        assert_eq!(
            (h.sched_kind, h.sched_a, h.sched_b, h.sched_c),
            (2, 2, 3, 4)
        );
        assert_eq!((h.sched_x, h.sched_y), (0.5, 2.5));
        assert_eq!(
            (h.b1, h.b2, h.wd, h.max_norm, h.norm, h.counters),
            (0.9, 0.99, 0.1, 1.0, 8, 16)
        );
        let h = hyper(
            &UpdateRule::Sgd {
                momentum: 0.9,
                dampening: 0.0,
                nesterov: true,
                weight_decay: 0.0,
            },
            &LrSource::Fixed(0.5),
            None,
            0,
            0,
        );
        assert_eq!(
            (h.sched_kind, h.lr, h.nesterov, h.max_norm),
            (-1, 0.5, 1, f64::INFINITY)
        );
    }
}
