//! Optimizer kernels (kernels/optim.cu): the global gradient norm of many tensors, clipping by
//! a norm that stays on the device, and fused AdamW / Lion / SGD updates of many parameters per
//! launch. Tensor pointers and sizes travel by value in a kernel-parameter table (one table per
//! launch, several launches for long parameter lists), so a step uploads nothing and waits for
//! nothing. The host learns about skipped steps later, through an i64 counter buffer it reads
//! when asked (or picks up from a `Snapshot` without waiting).
//!
//! The functions take raw device addresses because an optimizer step spans many tensors; the
//! caller keeps the tensors alive until the call returns (frees are stream-ordered, so dropping
//! them after the launches are queued is safe).

use super::compile::OPTIM;
use super::launch::args;
use super::{CudaDevice, CudaStorage};
use crate::optim::Schedule;
use crate::{DType, Error, Result};
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::sync::Arc;

/// Tensors per launch of the norm and scale kernels (`OPT_NORM_MAX`): enough that a GPT-2-sized
/// model takes one launch, since every launch ends with a partly idle tail.
pub const NORM_MAX: usize = 256;
/// Parameters per launch of a fused update (`OPT_UPDATE_MAX`).
pub const UPDATE_MAX: usize = 256;
/// Elements per block (`OPT_NORM_CHUNK`, `OPT_UPDATE_CHUNK`); multiples of 4 for the kernels'
/// float4 paths.
const NORM_CHUNK: usize = 16384;
const UPDATE_CHUNK: usize = 16384;
/// Threads per block (`OPT_BLOCK`, the kernels' launch bounds).
const BLOCK: u32 = 256;
/// How many skipped steps the counter buffer remembers (step number and norm) for the warning.
pub const SKIP_LOG: usize = 16;
/// Index of the first per-parameter step count in the counter buffer; before it are the
/// applied-step count, the skipped-step count and the skip log.
pub const COUNTER_HEAD: usize = 2 + 2 * SKIP_LOG;

/// Mirrors `struct NormTable` in optim.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct NormTable {
    src: [u64; NORM_MAX],
    dst: [u64; NORM_MAX],
    numel: [i64; NORM_MAX],
    dtype: [i32; NORM_MAX],
    block_start: [i32; NORM_MAX + 1],
    n: i32,
}
const _: () = assert!(std::mem::size_of::<NormTable>() == 8200);

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
    sched_a: i64,
    sched_b: i64,
    sched_c: i64,
    norm: u64,
    counters: u64,
    sched_kind: i32,
    nesterov: i32,
}
const _: () = assert!(std::mem::size_of::<Hyper>() == 128);
// Kernel parameters may take at most 32764 bytes (CUDA 12.1 and later, Volta and later).
const _: () = assert!(std::mem::size_of::<UpdateTable>() + std::mem::size_of::<Hyper>() <= 32764);
const _: () = assert!(std::mem::size_of::<NormTable>() + 8 + 4 <= 32764);
const _: () = assert!(NORM_CHUNK.is_multiple_of(4) && UPDATE_CHUNK.is_multiple_of(4));

/// A contiguous run of `numel` elements of `dtype` at device address `ptr`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevSlice {
    pub ptr: u64,
    pub numel: usize,
    pub dtype: DType,
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

/// The update rule and its hyperparameters, as the optimizers' configs hold them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UpdateRule {
    AdamW {
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        decay_1d_params: bool,
    },
    Lion {
        betas: (f64, f64),
        weight_decay: f64,
        decay_1d_params: bool,
    },
    Sgd {
        momentum: f64,
        dampening: f64,
        nesterov: bool,
        weight_decay: f64,
    },
}

impl UpdateRule {
    /// Whether weight decay applies to a parameter of this rank: AdamW and Lion decay only
    /// parameters of rank >= 2 unless asked to decay 1-D ones too; SGD's L2 term applies to all.
    pub fn decays(&self, rank: usize) -> bool {
        match *self {
            UpdateRule::AdamW {
                weight_decay,
                decay_1d_params,
                ..
            }
            | UpdateRule::Lion {
                weight_decay,
                decay_1d_params,
                ..
            } => weight_decay != 0.0 && (rank >= 2 || decay_1d_params),
            UpdateRule::Sgd { weight_decay, .. } => weight_decay != 0.0,
        }
    }
}

/// Where a step's learning rate comes from: a fixed rate, or a schedule evaluated on the device
/// at the device's step count (which a skipped step does not advance).
#[derive(Clone, Debug, PartialEq)]
pub enum LrSource {
    Fixed(f64),
    Schedule(Schedule),
}

/// The kernels' code for a float dtype.
fn dtype_code(op: &'static str, dtype: DType) -> Result<i32> {
    Ok(match dtype {
        DType::F32 => 0,
        DType::BF16 => 1,
        DType::F16 => 2,
        DType::F64 => 3,
        _ => {
            return Err(Error::UnsupportedDType {
                op,
                dtype,
                detail: ": optimizer kernels take float tensors".into(),
            })
        }
    })
}

/// Splits tensors of these sizes into launches of at most `max` tensors whose block counts
/// (chunks of `chunk` elements) fit the kernels' i32 block offsets. Returns each launch's
/// tensor range and its block offsets (one more than the tensors).
fn plan(
    numels: &[usize],
    max: usize,
    chunk: usize,
) -> Result<Vec<(std::ops::Range<usize>, Vec<i32>)>> {
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

/// The L2 norm over all `grads` as a one-element F32 device storage, summed in F32 in a fixed
/// order (per-block partials, then one block adds those up), so it repeats bit for bit. With
/// `counters` (an optimizer's counter buffer) the final kernel also opens the step: a finite
/// norm counts as an applied step, a non-finite one is logged as skipped.
///
/// # Safety
/// Every slice must address live device memory of its size and dtype on `dev`, and `counters`
/// must be 0 or a live counter buffer (at least `COUNTER_HEAD` i64s).
pub(crate) unsafe fn grad_norm(
    dev: &Arc<CudaDevice>,
    grads: &[DevSlice],
    counters: u64,
) -> Result<CudaStorage> {
    let grads: Vec<&DevSlice> = grads.iter().filter(|g| g.numel > 0).collect();
    let numels: Vec<usize> = grads.iter().map(|g| g.numel).collect();
    let launches = plan(&numels, NORM_MAX, NORM_CHUNK)?;
    let total: i64 = launches
        .iter()
        .map(|(_, s)| *s.last().unwrap_or(&0) as i64)
        .sum();
    let count = i32::try_from(total)
        .map_err(|_| Error::invalid("grad_norm", "too many gradient elements"))?;
    let partials = CudaStorage::alloc(dev, total as usize, DType::F32)?;
    let out = CudaStorage::alloc(dev, 1, DType::F32)?;
    let f = dev.function(&OPTIM, "grad_sq_norm")?;
    let (p, mut base) = (partials.ptr(), 0i32);
    for (range, starts) in &launches {
        let mut t = NormTable {
            src: [0; NORM_MAX],
            dst: [0; NORM_MAX],
            numel: [0; NORM_MAX],
            dtype: [0; NORM_MAX],
            block_start: [0; NORM_MAX + 1],
            n: range.len() as i32,
        };
        for (j, g) in grads[range.clone()].iter().enumerate() {
            t.src[j] = g.ptr;
            t.numel[j] = g.numel as i64;
            t.dtype[j] = dtype_code("grad_norm", g.dtype)?;
        }
        t.block_start[..starts.len()].copy_from_slice(starts);
        let blocks = *starts.last().unwrap_or(&0);
        // SAFETY: the table addresses live gradients (the caller's contract); partials has
        // room for every block of every launch.
        dev.launch(f, (blocks as u32, 1, 1), BLOCK, 0, &mut args![t, p, base])?;
        base += blocks;
    }
    let finish = dev.function(&OPTIM, "grad_norm_finish")?;
    let y = out.ptr();
    // SAFETY: partials holds `count` floats, out one, counters is the caller's buffer or 0.
    dev.launch(
        finish,
        (1, 1, 1),
        1024,
        0,
        &mut args![p, count, y, counters],
    )?;
    Ok(out)
}

/// Writes `src * clip factor` into each `dst`, where the factor is `max_norm / (norm + 1e-6)`
/// when the device `norm` is finite and above `max_norm`, else 1 (as `clip_grad_norm` on the
/// CPU). In a fused update, no clipping is a `max_norm` of infinity.
///
/// # Safety
/// Every source must address live device memory of its size and dtype, every destination room
/// for as many elements of that dtype, and `norm` one F32 on `dev`.
pub(crate) unsafe fn scale_by_norm(
    dev: &Arc<CudaDevice>,
    pairs: &[(DevSlice, u64)],
    norm: u64,
    max_norm: f64,
) -> Result<()> {
    let pairs: Vec<&(DevSlice, u64)> = pairs.iter().filter(|(g, _)| g.numel > 0).collect();
    let numels: Vec<usize> = pairs.iter().map(|(g, _)| g.numel).collect();
    let f = dev.function(&OPTIM, "grad_scale")?;
    for (range, starts) in plan(&numels, NORM_MAX, NORM_CHUNK)? {
        let mut t = NormTable {
            src: [0; NORM_MAX],
            dst: [0; NORM_MAX],
            numel: [0; NORM_MAX],
            dtype: [0; NORM_MAX],
            block_start: [0; NORM_MAX + 1],
            n: range.len() as i32,
        };
        for (j, (g, dst)) in pairs[range].iter().enumerate() {
            t.src[j] = g.ptr;
            t.dst[j] = *dst;
            t.numel[j] = g.numel as i64;
            t.dtype[j] = dtype_code("clip_grad_norm", g.dtype)?;
        }
        t.block_start[..starts.len()].copy_from_slice(&starts);
        let blocks = *starts.last().unwrap_or(&0) as u32;
        // SAFETY: the caller's contract.
        dev.launch(f, (blocks, 1, 1), BLOCK, 0, &mut args![t, norm, max_norm])?;
    }
    Ok(())
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
    let steps = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    match lr {
        LrSource::Fixed(lr) => h.lr = *lr,
        LrSource::Schedule(Schedule::Constant { lr }) => (h.sched_kind, h.sched_peak) = (0, *lr),
        LrSource::Schedule(Schedule::WarmupCosine {
            peak_lr,
            min_lr,
            warmup_steps,
            total_steps,
        }) => {
            (h.sched_kind, h.sched_peak, h.sched_min) = (1, *peak_lr, *min_lr);
            (h.sched_a, h.sched_b) = (steps(*warmup_steps), steps(*total_steps));
        }
        LrSource::Schedule(Schedule::WarmupStableDecay {
            peak_lr,
            min_lr,
            warmup_steps,
            stable_steps,
            decay_steps,
        }) => {
            (h.sched_kind, h.sched_peak, h.sched_min) = (2, *peak_lr, *min_lr);
            (h.sched_a, h.sched_b, h.sched_c) = (
                steps(*warmup_steps),
                steps(*stable_steps),
                steps(*decay_steps),
            );
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
pub(crate) unsafe fn fused_update(
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
        let mut t = UpdateTable {
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
            n: range.len() as i32,
        };
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
        t.block_start[..starts.len()].copy_from_slice(&starts);
        let blocks = *starts.last().unwrap_or(&0) as u32;
        // SAFETY: the caller's contract; the advance kernel only touches the counters.
        dev.launch(advance, (1, 1, 1), 64, 0, &mut args![t, h])?;
        dev.launch(f, (blocks, 1, 1), BLOCK, 0, &mut args![t, h])?;
    }
    Ok(())
}

/// A copy of a few device words into pinned host memory, queued behind the work already on the
/// stream, that the host can pick up later without waiting: the optimizer polls it at each
/// step to notice skipped steps, so no step ever synchronizes.
pub(crate) struct Snapshot {
    dev: Arc<CudaDevice>,
    host: *mut i64,
    len: usize,
    event: sys::CUevent,
    in_flight: bool,
}

// SAFETY: the pinned buffer and the event are owned by this value and only touched through
// `&mut self` (or in Drop); the driver calls are valid from any thread once the context is bound.
unsafe impl Send for Snapshot {}

fn driver(what: &'static str) -> impl Fn(result::DriverError) -> Error {
    move |e| Error::Cuda(format!("{what}: {e:?}"))
}

impl Snapshot {
    pub fn new(dev: &Arc<CudaDevice>, len: usize) -> Result<Snapshot> {
        dev.bind()?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(driver("cuEventCreate"))?;
        // SAFETY: a fresh pinned allocation of `len` i64s; only read after a copy into it has
        // completed.
        let host = match unsafe { result::malloc_host(len.max(1) * 8, 0) } {
            Ok(p) => p as *mut i64,
            Err(e) => {
                // SAFETY: the event was created above and is not used elsewhere.
                let _ = unsafe { result::event::destroy(event) };
                return Err(driver("cuMemHostAlloc")(e));
            }
        };
        Ok(Snapshot {
            dev: dev.clone(),
            host,
            len,
            event,
            in_flight: false,
        })
    }

    /// Queues a copy of `len` i64s from `src`, unless one is still in flight.
    ///
    /// # Safety
    /// `src` must be a live device buffer of at least `len` i64s on this device.
    pub unsafe fn start(&mut self, src: u64) -> Result<()> {
        if self.in_flight {
            return Ok(());
        }
        self.dev.bind()?;
        sys::cuMemcpyDtoHAsync_v2(
            self.host as *mut c_void,
            src,
            self.len * 8,
            self.dev.stream(),
        )
        .result()
        .map_err(driver("cuMemcpyDtoHAsync"))?;
        result::event::record(self.event, self.dev.stream()).map_err(driver("cuEventRecord"))?;
        self.in_flight = true;
        Ok(())
    }

    /// The words of the last copy once it has landed; `None` while it is still on its way or
    /// when none was queued. Never waits.
    pub fn poll(&mut self) -> Result<Option<Vec<i64>>> {
        if !self.in_flight {
            return Ok(None);
        }
        self.dev.bind()?;
        // SAFETY: the event belongs to this snapshot.
        match unsafe { result::event::query(self.event) } {
            Ok(()) => {}
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => return Ok(None),
            Err(e) => return Err(driver("cuEventQuery")(e)),
        }
        self.in_flight = false;
        // SAFETY: the copy into `host` has completed and nothing writes it until the next start.
        Ok(Some(
            unsafe { std::slice::from_raw_parts(self.host, self.len) }.to_vec(),
        ))
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if self.dev.bind().is_err() {
            return;
        }
        // SAFETY: waits for a copy still landing in `host` before freeing it; both handles are
        // owned here and freed once.
        unsafe {
            if self.in_flight {
                let _ = result::event::synchronize(self.event);
            }
            let _ = result::free_host(self.host as *mut c_void);
            let _ = result::event::destroy(self.event);
        }
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn hyper_carries_the_schedule_for_the_device() {
        let s = Schedule::WarmupStableDecay {
            peak_lr: 1.0,
            min_lr: 0.1,
            warmup_steps: 2,
            stable_steps: 3,
            decay_steps: 4,
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
