//! The optimizer step when every parameter lives on one CUDA device: one gradient-norm launch,
//! then fused update launches (backend/cuda/optim/), and nothing the host waits for. The
//! device decides whether the step applies (a non-finite norm skips it) and keeps the step
//! counts in a counter buffer; the host keeps the counts it expects (every queued step
//! applied) and corrects them when a read shows a skip. It reads the buffer when asked
//! (`step_count`, `skipped_steps`, `state_dict`) and otherwise picks up a snapshot queued at
//! the end of each step once it has landed, to warn about skipped steps without waiting.

use super::device_steps::{words, DeviceSteps};
use super::optimizer::{state_dtype, NormScope, Optimizer, OptimizerCore, ParamState, StepOutcome};
use crate::backend::cuda::optim::{
    fused_update, grad_norm, scale_by_norm, DevSlice, UpdateItem, COUNTER_HEAD,
};
use crate::backend::cuda::{self, CudaDevice, CudaStorage};
use crate::backend::spec::optim::{LrSource, UpdateRule};
use crate::backend::Storage;
use crate::{no_grad, Device, Error, Result, Tensor};
use std::sync::Arc;

/// The address and size of a contiguous CUDA tensor's elements.
fn slice_in(storage: &Storage, t: &Tensor) -> Result<DevSlice> {
    match storage {
        Storage::Cuda(s) if t.is_contiguous() => Ok(DevSlice {
            ptr: s.ptr_at(t.layout().offset()),
            numel: t.numel(),
            dtype: t.dtype(),
        }),
        Storage::Cuda(_) => Err(Error::invalid(
            "optimizer",
            "a tensor for a fused kernel must be contiguous",
        )),
        Storage::Cpu(_) => Err(Error::UnsupportedDevice {
            op: "fused optimizer kernel",
            device: Device::Cpu,
        }),
    }
}

pub(super) fn device_slice(t: &Tensor) -> Result<DevSlice> {
    slice_in(&t.storage(), t)
}

/// Like `device_slice` for a tensor the kernels will write: takes the write lock for a moment,
/// which bumps the storage version, so a backward that saved this tensor fails instead of
/// reading the new values.
pub(super) fn written_slice(t: &Tensor) -> Result<DevSlice> {
    slice_in(&t.storage_cell().write(), t)
}

/// The CUDA device holding every tensor, if there are tensors and they all live on one.
pub(super) fn cuda_ordinal(tensors: &[Tensor]) -> Option<usize> {
    let Device::Cuda(n) = tensors.first()?.device() else {
        return None;
    };
    tensors
        .iter()
        .all(|t| t.device() == Device::Cuda(n))
        .then_some(n)
}

/// Each parameter's gradient as a contiguous tensor on the parameter's device, with its index
/// (parameters without a gradient are left out). A gradient that is a strided view, or that
/// shares storage with its parameter, is copied first (queued, no wait).
fn gradients(params: &[Tensor]) -> Result<Vec<(usize, Tensor)>> {
    let mut out = Vec::new();
    for (i, p) in params.iter().enumerate() {
        let Some(g) = p.grad() else { continue };
        if g.device() != p.device() {
            return Err(Error::DeviceMismatch {
                op: "optimizer step",
                lhs: p.device(),
                rhs: g.device(),
            });
        }
        if g.shape() != p.shape() {
            return Err(Error::invalid(
                "optimizer step",
                format!(
                    "gradient of shape {:?} for a parameter of shape {:?}",
                    g.shape(),
                    p.shape()
                ),
            ));
        }
        let g = if g.is_contiguous() && !g.shares_storage(p) {
            g
        } else {
            no_grad(|| g.contiguous_copy())?
        };
        out.push((i, g));
    }
    Ok(out)
}

fn norm_tensor(norm: CudaStorage) -> Result<Tensor> {
    Tensor::from_storage(Storage::Cuda(norm), &[])
}

/// The global norm of the gradients of parameters on CUDA device `ordinal`, as a 0-d F32
/// tensor there.
pub(super) fn grad_norm_on_device(params: &[Tensor], ordinal: usize) -> Result<Tensor> {
    let dev = cuda::device(ordinal)?;
    let grads = gradients(params)?;
    let slices = grads
        .iter()
        .map(|(_, g)| device_slice(g))
        .collect::<Result<Vec<_>>>()?;
    // SAFETY: the slices address gradients held alive by `grads` until after the launches.
    norm_tensor(unsafe { grad_norm(&dev, &slices, 0)? })
}

/// `clip_grad_norm` on CUDA device `ordinal`: each gradient is replaced by a scaled copy whose
/// factor the kernel works out from the norm on the device; returns that norm as a 0-d F32
/// tensor there. Nothing waits.
pub(super) fn clip_on_device(params: &[Tensor], ordinal: usize, max_norm: f64) -> Result<Tensor> {
    let dev = cuda::device(ordinal)?;
    let grads = gradients(params)?;
    let slices = grads
        .iter()
        .map(|(_, g)| device_slice(g))
        .collect::<Result<Vec<_>>>()?;
    // SAFETY: as in grad_norm_on_device.
    let norm = unsafe { grad_norm(&dev, &slices, 0)? };
    let mut outs = Vec::with_capacity(grads.len());
    let mut pairs = Vec::with_capacity(grads.len());
    for ((_, g), s) in grads.iter().zip(&slices) {
        let out = CudaStorage::alloc(&dev, g.numel(), g.dtype())?;
        pairs.push((*s, out.ptr()));
        outs.push(out);
    }
    // SAFETY: sources are live gradients, destinations fresh allocations of the same size and
    // dtype, and `norm` one F32, all on `dev`.
    unsafe { scale_by_norm(&dev, &pairs, norm.ptr(), max_norm)? };
    for ((i, g), out) in grads.iter().zip(outs) {
        params[*i].set_grad(Some(Tensor::from_storage(Storage::Cuda(out), g.shape())?));
    }
    norm_tensor(norm)
}

/// Reads the device counters (a synchronization) and makes the host's counts exact: the step
/// count, the skip count, the learning rate and every parameter's step (a state whose only
/// step was skipped is dropped, as the CPU would never have made it).
fn refresh(core: &mut OptimizerCore) -> Result<()> {
    let Some(ds) = core.device.get_mut().unwrap_or_else(|e| e.into_inner()) else {
        return Ok(());
    };
    let c = ds.read()?;
    ds.needs_refresh = false;
    let (base_step, base_lr) = (ds.base_step, ds.base_lr);
    core.step = c[0].max(0) as u64;
    core.skipped = c[1].max(0) as u64;
    if let Some(s) = &core.schedule {
        core.lr = if core.step > base_step {
            s.lr_at(core.step)
        } else {
            base_lr
        };
    }
    for (i, slot) in core.states.iter_mut().enumerate() {
        let step = c.get(COUNTER_HEAD + i).copied().unwrap_or(0).max(0) as u64;
        match slot {
            Some(_) if step == 0 => *slot = None,
            Some(st) => st.step = step,
            None => {}
        }
    }
    Ok(())
}

/// The exact counters when the optimizer counts on a device (a synchronization), else `None`.
pub(super) fn exact_counters(core: &OptimizerCore) -> Result<Option<Vec<i64>>> {
    let mut guard = core.device.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_mut() {
        Some(ds) => ds.read().map(Some),
        None => Ok(None),
    }
}

/// The learning rate that goes with an exact step count read from the device.
pub(super) fn lr_for(core: &OptimizerCore, exact_step: u64) -> f64 {
    let guard = core.device.lock().unwrap_or_else(|e| e.into_inner());
    match (&*guard, &core.schedule) {
        (Some(ds), Some(s)) if exact_step != core.step => {
            if exact_step > ds.base_step {
                s.lr_at(exact_step)
            } else {
                ds.base_lr
            }
        }
        _ => core.lr,
    }
}

fn steps_mut(core: &mut OptimizerCore) -> Result<&mut DeviceSteps> {
    core.device
        .get_mut()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .ok_or_else(|| Error::Cuda("the optimizer's device step counters are missing".into()))
}

/// Every device address a fused step reads or writes besides its own temporaries: each
/// parameter's, each state tensor's and the counter buffer's.
pub(super) fn addresses(core: &OptimizerCore) -> Vec<u64> {
    let params = core.params().iter().map(|p| p.tensor.data_address());
    let states = core
        .states
        .iter()
        .flatten()
        .flat_map(|st| st.tensors.iter().map(Tensor::data_address));
    let counters = core
        .device
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map_or(0, |ds| ds.counters.data_address());
    params.chain(states).chain([counters]).collect()
}

/// Before a step's kernels: makes the counter buffer on the first step, and otherwise picks up
/// the snapshot of the counters that an earlier step queued, once it has landed, warning about
/// the skips it shows and making the host's counts exact if it found any. Nothing here waits
/// for the device, and while a CUDA graph is captured nothing here reads it.
fn catch_up(core: &mut OptimizerCore, dev: &Arc<CudaDevice>) -> Result<()> {
    if core
        .device
        .get_mut()
        .unwrap_or_else(|e| e.into_inner())
        .is_none()
    {
        let ds = DeviceSteps::new(dev, core)?;
        *core.device.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(ds);
    }
    if dev.capturing() {
        return Ok(());
    }
    let warn = core.warn_skips;
    let needs_refresh = {
        let ds = steps_mut(core)?;
        ds.warn = warn;
        if let Some(head) = ds.snapshot.poll()? {
            ds.report(&words(&head));
        }
        ds.needs_refresh
    };
    if needs_refresh {
        refresh(core)?;
    }
    Ok(())
}

/// The host's side of a queued step, as if it applies (a read that finds it skipped corrects
/// the counts): each updated parameter's step count, the step count and the scheduled rate.
fn account(core: &mut OptimizerCore, updated: &[usize]) {
    for &i in updated {
        if let Some(st) = core.states.get_mut(i).and_then(|s| s.as_mut()) {
            st.step += 1;
        }
    }
    core.step += 1;
    if let Some(s) = &core.schedule {
        core.lr = s.lr_at(core.step);
    }
}

/// After a step's kernels: queues a copy of the counters' head for a later step to poll.
fn start_snapshot(core: &mut OptimizerCore) -> Result<()> {
    let ds = steps_mut(core)?;
    let counters = ds.ptr()?;
    // SAFETY: `counters` is this buffer, which holds at least COUNTER_HEAD i64s.
    unsafe { ds.snapshot.start(counters, COUNTER_HEAD * 8)? };
    Ok(())
}

/// Catches the host's step counts up with the device's before a step whose kernels a CUDA
/// graph replays (`replayed_step`): a read that finds a skipped step may drop a state (one
/// whose only step was skipped), which the replay must not find gone. The caller checks that
/// the state it captured against is still there after this. Returns false, touching nothing,
/// when the optimizer's parameters are not all on CUDA device `ordinal` (its steps are not
/// the fused kernels there).
pub fn settle_step_counts(core: &mut OptimizerCore, ordinal: usize) -> Result<bool> {
    if cuda_ordinal(&core.tensors()) != Some(ordinal) {
        return Ok(false);
    }
    catch_up(core, &cuda::device(ordinal)?)?;
    Ok(true)
}

/// The host's side of one replay of a step captured in a CUDA graph, after
/// `settle_step_counts`: `replay` queues the kernels, then each updated parameter's storage
/// version moves on (a cast cached against it, or a backward that saved it, must see the
/// write, as `step`'s own writes bump it) and the counts advance as `step`'s do. `updated` is
/// what the captured step recorded (`OptimizerCore::take_captured_update`). Returns the step's
/// number and rate, as `step`'s `Queued` outcome gives them.
pub fn replayed_step(
    core: &mut OptimizerCore,
    updated: &[usize],
    replay: impl FnOnce() -> Result<()>,
) -> Result<(u64, f64)> {
    replay()?;
    for &i in updated {
        if let Some(p) = core.params().get(i) {
            drop(p.tensor.storage_cell().write());
        }
    }
    account(core, updated);
    // The step is queued and counted: a snapshot that cannot start only delays the warning
    // about a skipped step, which a later step's snapshot or a read of the counts gives.
    if let Err(e) = start_snapshot(core) {
        crate::messages::warn(&format!(
            "the optimizer's step counters could not be read back: {e}"
        ));
    }
    Ok((core.step, core.lr))
}

/// One optimizer step with the fused kernels; every parameter, and every one of `scope`, is on
/// CUDA device `ordinal`. The norm is taken over `scope.params` and opens this optimizer's
/// step in its counters.
pub(super) fn step<O: Optimizer + ?Sized>(
    opt: &mut O,
    rule: UpdateRule,
    ordinal: usize,
    scope: NormScope,
) -> Result<StepOutcome> {
    let dev = cuda::device(ordinal)?;
    let fields = opt.state_fields().len();
    let core = opt.core_mut();
    catch_up(core, &dev)?;
    let counters = steps_mut(core)?.ptr()?;

    let tensors = core.tensors();
    let mut grads = gradients(&tensors)?;
    // Sharded, this rank updates its own parameters; the norm still spans the scope.
    grads.retain(|(i, _)| core.owns(*i));
    let slices = grads
        .iter()
        .map(|(_, g)| device_slice(g))
        .collect::<Result<Vec<_>>>()?;
    let scope_grads = gradients(scope.params)?;
    let scope_slices = scope_grads
        .iter()
        .map(|(_, g)| device_slice(g))
        .collect::<Result<Vec<_>>>()?;
    // SAFETY: the slices address gradients that `scope_grads` keeps alive; `counters` is this
    // optimizer's buffer, with a slot for every parameter.
    let norm = unsafe { grad_norm(&dev, &scope_slices, counters)? };
    let norm_ptr = norm.ptr();
    let grad_norm = norm_tensor(norm)?;

    let lr_source = match &core.schedule {
        Some(s) => LrSource::Schedule(s.on_device()),
        None => LrSource::Fixed(core.lr),
    };
    let max_norm = scope.max_norm;
    let mut states = std::mem::take(&mut core.states);
    states.resize(tensors.len(), None);
    let queued = no_grad(|| -> Result<()> {
        let mut items = Vec::with_capacity(grads.len());
        let mut write_back = Vec::new();
        for ((i, _), gs) in grads.iter().zip(&slices) {
            let p = &tensors[*i];
            let st = fit_state(&mut states[*i], p, fields, dev.capturing())?;
            let mut state = [0u64; 2];
            for (s, t) in state.iter_mut().zip(&st.tensors) {
                *s = device_slice(t)?.ptr;
            }
            let param = if p.is_contiguous() {
                written_slice(p)?
            } else {
                // A strided parameter is updated in a packed copy, written back after.
                let packed = p.contiguous_copy()?;
                let s = device_slice(&packed)?;
                write_back.push(packed);
                s
            };
            items.push(UpdateItem {
                param,
                grad: *gs,
                state,
                slot: *i,
                decay: rule.decays(p.rank()),
            });
        }
        // SAFETY: every item addresses a live parameter (or its packed copy), gradient and
        // state tensors held by `tensors`, `grads`, `states` and `write_back` until after the
        // launches; states are contiguous in `state_dtype`; `norm_ptr` is this step's norm.
        unsafe {
            fused_update(
                &dev, &rule, &lr_source, max_norm, norm_ptr, counters, &items,
            )?
        };
        let strided = grads
            .iter()
            .map(|(i, _)| &tensors[*i])
            .filter(|p| !p.is_contiguous());
        for (p, packed) in strided.zip(&write_back) {
            p.copy_(packed)?;
        }
        Ok(())
    });
    core.states = states;
    if queued.is_err() {
        // The norm kernel may have counted the step already: trust the device's counts.
        steps_mut(core)?.needs_refresh = true;
    }
    queued?;
    let updated: Vec<usize> = grads.iter().map(|(i, _)| *i).collect();
    if dev.capturing() {
        // Recorded, not run: the host's side runs at each replay (`replayed_step`), which
        // needs to know whose counts the step advances. Nothing is read back in a capture.
        core.captured_update = Some(updated);
    } else {
        account(core, &updated);
        start_snapshot(core)?;
    }
    Ok(StepOutcome::Queued {
        step: core.step,
        lr: core.lr,
        grad_norm,
    })
}

/// The parameter's state, made on first use (zeros) and otherwise brought to the parameter's
/// device, state dtype and a contiguous layout (a state loaded from a CPU save, for one).
fn fit_state<'a>(
    slot: &'a mut Option<ParamState>,
    p: &Tensor,
    fields: usize,
    capturing: bool,
) -> Result<&'a ParamState> {
    let dtype = state_dtype(p);
    let fits = |t: &Tensor| {
        t.device() == p.device()
            && t.dtype() == dtype
            && t.is_contiguous()
            && t.shape() == p.shape()
    };
    // State made in a CUDA graph capture would live in memory only the graph has.
    let made_here = slot.as_ref().is_none_or(|st| !st.tensors.iter().all(&fits));
    if capturing && made_here {
        return Err(Error::invalid(
            "optimizer step",
            "a parameter's state would be made inside a CUDA graph capture; step once op by op \
             first",
        ));
    }
    let st = match slot {
        Some(st) => st,
        None => slot.insert(ParamState {
            step: 0,
            tensors: (0..fields)
                .map(|_| Tensor::zeros(p.shape(), dtype, p.device()))
                .collect::<Result<_>>()?,
        }),
    };
    for t in st.tensors.iter_mut() {
        if !fits(t) {
            if t.numel() != p.numel() {
                return Err(Error::invalid(
                    "optimizer step",
                    format!(
                        "state of shape {:?} for a parameter of shape {:?}",
                        t.shape(),
                        p.shape()
                    ),
                ));
            }
            *t = t
                .to_device(p.device())?
                .to_dtype(dtype)?
                .contiguous_copy()?
                .reshape_to(p.shape())?;
        }
    }
    Ok(st)
}
