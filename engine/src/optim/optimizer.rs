//! The `Optimizer` trait and the machinery every algorithm shares: the parameter list, the step
//! count (from 1), the learning rate and its schedule, gradient clipping, and skipping a step
//! whose gradients are not finite. An algorithm only writes `update` for one parameter and the
//! save/load of its per-parameter state; one that also names its `fused_rule` runs as fused
//! kernels when its parameters live on a CUDA device (fused.rs).

use super::clip::global_grad_norm;
use super::device_steps::DeviceSteps;
use super::fused;
use super::schedule::Schedule;
use super::state::{param_key, OptimizerState, StateReader};
use crate::backend::spec::optim::UpdateRule;
use crate::backend::spec::optim::COUNTER_HEAD;
use crate::dist::zero::StateShard;
use crate::{no_grad, DType, Error, Result, Tensor};
use std::collections::BTreeSet;
use std::sync::Mutex;

/// What `step` did.
#[derive(Clone, Debug)]
pub enum StepOutcome {
    /// The parameters were updated; `grad_norm` is the global norm before clipping.
    Applied { step: u64, lr: f64, grad_norm: f64 },
    /// The global gradient norm was not finite: nothing was updated, the gradients were cleared
    /// and the step count did not advance.
    Skipped { norm: f64 },
    /// The step was queued on a CUDA device, which decides there whether it applies (a
    /// non-finite norm skips it, as on the CPU, but the gradients are kept because the host
    /// does not know yet), so the host never waits for it. `step` and `lr` are the step's
    /// number and rate unless it or an earlier step not yet read back was skipped; a skip is
    /// warned about once read (`skipped_steps`, `step_count`, or a later step that finds the
    /// device's counters). `grad_norm` is the global norm before clipping as a 0-d F32 tensor
    /// on the device: reading it (`item`) waits for the step.
    Queued {
        step: u64,
        lr: f64,
        grad_norm: Tensor,
    },
}

/// A parameter and the name its state is saved under.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub tensor: Tensor,
}

/// One parameter's optimizer state: how many updates it has had (from 1; the per-parameter
/// count, as PyTorch keeps it, so a parameter unused for a while still gets the right bias
/// correction) and one tensor per `Optimizer::state_fields` entry, shaped like the parameter.
#[derive(Clone, Debug)]
pub struct ParamState {
    pub step: u64,
    pub tensors: Vec<Tensor>,
}

/// State shared by every optimizer.
pub struct OptimizerCore {
    params: Vec<Param>,
    /// Created on a parameter's first update.
    pub(super) states: Vec<Option<ParamState>>,
    /// Applied steps. With parameters on CUDA, the steps queued so far as if none were skipped,
    /// corrected whenever a read of the device's counters finds a skip.
    pub(super) step: u64,
    /// Skipped steps (on CUDA, those the host has read back).
    pub(super) skipped: u64,
    pub(super) lr: f64,
    /// The device's step counters, made on the first step on CUDA and dropped by a load.
    pub(super) device: Mutex<Option<DeviceSteps>>,
    /// Clip the global gradient norm to this before each update.
    pub max_grad_norm: Option<f64>,
    /// When set, the learning rate of step t is `schedule.lr_at(t)`.
    pub schedule: Option<Schedule>,
    /// Whether this optimizer warns about its skipped steps. An optimizer that shares its
    /// norm with others (`NormScope`) skips exactly when they do, so one of them speaks for all.
    pub warn_skips: bool,
    /// Under ZeRO-1 (`shard_state`), the parameters whose state this rank keeps and updates.
    pub(super) shard: Option<StateShard>,
    /// The parameters that a step recorded into a CUDA graph updated, kept for the host's side
    /// of its replays (`take_captured_update`).
    pub(super) captured_update: Option<Vec<usize>>,
}

/// The gradient norm a step clips to `max_norm` and skips on when it is not finite. A step's
/// default scope is its own parameters and `max_grad_norm`; a wider one lets several
/// optimizers clip by one global norm and skip together (ultralytics' three parameter groups
/// under one `clip_grad_norm_`), which on CUDA stays on the device.
#[derive(Clone, Copy)]
pub struct NormScope<'a> {
    /// Every parameter whose gradient counts in the norm (the optimizer's own among them).
    pub params: &'a [Tensor],
    pub max_norm: Option<f64>,
}

impl OptimizerCore {
    /// Parameters must be float leaves that require grad, with distinct names.
    pub fn new(params: Vec<(String, Tensor)>, lr: f64) -> Result<Self> {
        check_lr(lr)?;
        let mut seen = BTreeSet::new();
        for (name, t) in &params {
            if !seen.insert(name.as_str()) {
                return Err(Error::invalid(
                    "optimizer",
                    format!("parameter name {name} appears twice"),
                ));
            }
            if !t.is_leaf() || !t.requires_grad() {
                return Err(Error::invalid(
                    "optimizer",
                    format!("parameter {name} must be a leaf that requires grad"),
                ));
            }
        }
        Ok(OptimizerCore {
            params: params
                .into_iter()
                .map(|(name, tensor)| Param { name, tensor })
                .collect(),
            states: Vec::new(),
            step: 0,
            skipped: 0,
            lr,
            device: Mutex::new(None),
            max_grad_norm: None,
            schedule: None,
            warn_skips: true,
            shard: None,
            captured_update: None,
        })
    }

    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The device addresses a fused step reads and writes besides its temporaries: every
    /// parameter's, state tensor's and the step counters'. A step captured in a CUDA graph
    /// stays valid while they are the same (a load, say, replaces the state).
    pub fn step_addresses(&self) -> Vec<u64> {
        fused::addresses(self)
    }

    /// Which parameters the last step recorded into a CUDA graph updated (the fused step
    /// notes them while it is captured), for `replayed_step`; `None` when no step was captured
    /// since the last call.
    pub fn take_captured_update(&mut self) -> Option<Vec<usize>> {
        self.captured_update.take()
    }

    pub fn tensors(&self) -> Vec<Tensor> {
        self.params.iter().map(|p| p.tensor.clone()).collect()
    }

    /// The ZeRO-1 shard, once `shard_state` has made one.
    pub fn shard(&self) -> Option<&StateShard> {
        self.shard.as_ref()
    }

    /// Whether this rank keeps and updates parameter `index` (every one, unless sharded).
    pub fn owns(&self, index: usize) -> bool {
        self.shard.as_ref().is_none_or(|s| s.owns(index))
    }

    /// Shards the state as `shard` says (`Optimizer::shard_state` takes this rank's shard of
    /// the run), dropping the state of the parameters this rank does not own.
    pub fn set_shard(&mut self, shard: StateShard) {
        self.shard = Some(shard);
        self.drop_unowned_states();
    }

    /// Drops the state of the parameters this rank does not own.
    fn drop_unowned_states(&mut self) {
        for i in 0..self.states.len() {
            if !self.owns(i) {
                self.states[i] = None;
            }
        }
    }

    /// The state of parameter `index`, if it has been updated. With parameters on CUDA its
    /// `step` counts queued updates until a read of the device's counters corrects it (a step
    /// does when it finds a skip; `state_dict` always reads them).
    pub fn param_state(&self, index: usize) -> Option<&ParamState> {
        self.states.get(index)?.as_ref()
    }

    /// (applied steps, skipped steps), exact: with parameters on CUDA this reads the device's
    /// counters, waiting for queued steps, and warns about skips found there. A failed read is
    /// warned about and the host's counts are returned.
    fn counts(&self) -> (u64, u64) {
        match fused::exact_counters(self) {
            Ok(Some(c)) => (c[0].max(0) as u64, c[1].max(0) as u64),
            Ok(None) => (self.step, self.skipped),
            Err(e) => {
                crate::messages::warn(&format!(
                    "could not read the optimizer's step counts from the device: {e}"
                ));
                (self.step, self.skipped)
            }
        }
    }
}

/// Each parameter's step count on its owner, from counts that are 0 on every other rank: their
/// sum over the ranks (on the device of `like`).
fn gather_counts(counts: &[u64], like: &Tensor) -> Result<Vec<u64>> {
    let values: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    let t = Tensor::from_f64s(&values, &[values.len()], DType::F64)?.to_device(like.device())?;
    crate::dist::current()?.all_reduce_sum_(&t)?;
    Ok(t.to_vec_f64()?.into_iter().map(|c| c as u64).collect())
}

/// Unnamed parameters are named by position, as PyTorch's optimizer state is.
pub fn numbered(params: Vec<Tensor>) -> Vec<(String, Tensor)> {
    params
        .into_iter()
        .enumerate()
        .map(|(i, t)| (i.to_string(), t))
        .collect()
}

fn check_lr(lr: f64) -> Result<()> {
    if !(lr.is_finite() && lr >= 0.0) {
        return Err(Error::invalid(
            "optimizer",
            format!("learning rate must be finite and >= 0, got {lr}"),
        ));
    }
    Ok(())
}

/// The dtype optimizer state and update math use: f32 (f64 for f64 parameters), so bf16
/// parameters still get f32 moments.
pub fn state_dtype(param: &Tensor) -> DType {
    param.dtype().compute_dtype()
}

pub trait Optimizer: Send {
    fn core(&self) -> &OptimizerCore;
    fn core_mut(&mut self) -> &mut OptimizerCore;

    /// "adamw", "sgd", "lion": saved with the state so it cannot load into another algorithm.
    fn kind(&self) -> &'static str;

    /// Names of the per-parameter state tensors ("exp_avg", ...), in `ParamState` order.
    fn state_fields(&self) -> &'static [&'static str];

    /// Updates one parameter in place (grad mode is off). `state.step` has already been
    /// advanced (it is 1 on the first update, when the state tensors are zeros). `grad` is
    /// clipped and in `state_dtype(param)`; it may share storage with the parameter's
    /// `.grad()`, so it must never be written into.
    fn update(&self, param: &Tensor, grad: &Tensor, state: &mut ParamState, lr: f64) -> Result<()>;

    /// The same update as one rule of the fused CUDA kernels, for parameters on a CUDA device;
    /// `None` (the default) runs `update` tensor by tensor there too.
    fn fused_rule(&self) -> Option<UpdateRule> {
        None
    }

    /// What a captured step's kernels take from this optimizer's host side
    /// (`capture::Key`): the rule, the rate when it is fixed (a kernel argument; a schedule
    /// runs on the device), the clip norm, which parameters train and where the state lives.
    fn capture_key(&self, key: &mut crate::capture::Key) {
        let core = self.core();
        let trains: Vec<bool> = core.tensors().iter().map(Tensor::requires_grad).collect();
        key.add("rule", self.fused_rule())
            .add("fixed_lr", core.schedule.is_none().then(|| self.lr()))
            .add("schedule", &core.schedule)
            .add("max_grad_norm", core.max_grad_norm)
            .add("trains", trains)
            .add_words(core.step_addresses());
    }

    fn step(&mut self) -> Result<StepOutcome> {
        let params = self.core().tensors();
        let max_norm = self.core().max_grad_norm;
        step_impl(
            self,
            NormScope {
                params: &params,
                max_norm,
            },
            true,
        )
    }

    /// A step that clips by and skips on the norm over `scope.params` instead of its own
    /// (`max_grad_norm` is not used). No gradient is rewritten, not even by a skip (clearing
    /// them is the caller's), so every optimizer sharing the scope sees the same norm.
    fn step_in_scope(&mut self, scope: NormScope) -> Result<StepOutcome> {
        step_impl(self, scope, false)
    }

    /// ZeRO stage 1 under `brain launch`: from now on this rank keeps the state of its share
    /// of the parameters only (`dist::zero`), updates those, and broadcasts them to the other
    /// ranks after each step. The gradients must be summed across the ranks before each step,
    /// as `train_step` does. `state_dict` then gathers every rank's share, so every rank must
    /// call it (saving a checkpoint does). A run of one owns everything.
    fn shard_state(&mut self) -> Result<()> {
        let dist = crate::dist::current()?;
        let sizes: Vec<usize> = self
            .core()
            .params
            .iter()
            .map(|p| p.tensor.numel())
            .collect();
        let shard = StateShard::new(dist.rank, dist.world_size, &sizes)?;
        self.core_mut().set_shard(shard);
        Ok(())
    }

    /// Clears every parameter's gradient.
    fn zero_grad(&mut self) {
        for p in &self.core().params {
            p.tensor.set_grad(None);
        }
    }

    fn lr(&self) -> f64 {
        self.core().lr
    }

    /// Sets the rate for the next step; a schedule, if set, overrides it at each step.
    fn set_lr(&mut self, lr: f64) -> Result<()> {
        check_lr(lr)?;
        self.core_mut().lr = lr;
        Ok(())
    }

    /// Steps taken so far (skipped ones do not count); the next step is `step_count() + 1`.
    /// With parameters on CUDA this waits for the queued steps, to read the device's count.
    fn step_count(&self) -> u64 {
        self.core().counts().0
    }

    /// Steps skipped for a non-finite gradient norm. With parameters on CUDA this waits for the
    /// queued steps and warns about the skips it finds, as the CPU warns at each skip.
    fn skipped_steps(&self) -> u64 {
        self.core().counts().1
    }

    fn set_schedule(&mut self, schedule: Option<Schedule>) -> Result<()> {
        if let Some(s) = &schedule {
            s.validate()?;
        }
        self.core_mut().schedule = schedule;
        Ok(())
    }

    fn set_max_grad_norm(&mut self, max_norm: Option<f64>) -> Result<()> {
        if let Some(m) = max_norm {
            if !(m.is_finite() && m > 0.0) {
                return Err(Error::invalid(
                    "optimizer",
                    format!("max_grad_norm must be finite and > 0, got {m}"),
                ));
            }
        }
        self.core_mut().max_grad_norm = max_norm;
        Ok(())
    }

    /// The step count, the learning rate and every parameter's state, as copies on the CPU:
    /// `state.<param>.step` and `state.<param>.<field>`. With parameters on CUDA this first
    /// reads the device's step counts (waiting for the queued steps).
    fn state_dict(&self) -> Result<OptimizerState> {
        collect_state(self, true)
    }

    /// A sharded state's gather, on a rank that does not keep the result: under `brain
    /// launch` every rank takes part in `state_dict`'s broadcasts, and the ranks that do not
    /// write the checkpoint call this instead, so they copy nothing to the CPU.
    fn join_state_gather(&self) -> Result<()> {
        collect_state(self, false).map(drop)
    }

    /// Restores a `state_dict`, putting each state tensor on its parameter's device. On any
    /// problem (another optimizer's state, a missing, mis-shaped or unexpected entry) it
    /// returns one error naming all of them and changes nothing.
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
        let mut reader = StateReader::new(state, self.kind());
        let step = reader.scalar("step");
        let lr = reader.scalar("lr");
        let fields = self.state_fields();
        let states: Vec<Option<ParamState>> = self
            .core()
            .params
            .iter()
            .map(|p| {
                let step_key = param_key(&p.name, "step");
                if !reader.has_scalar(&step_key) {
                    return None;
                }
                let step = reader.scalar(&step_key)? as u64;
                let tensors: Vec<Option<Tensor>> = fields
                    .iter()
                    .map(|f| reader.tensor(&param_key(&p.name, f), p.tensor.shape()))
                    .collect();
                let tensors = tensors.into_iter().collect::<Option<Vec<_>>>()?;
                Some(ParamState { step, tensors })
            })
            .collect();
        reader.finish()?;
        // A sharded optimizer keeps only its own share: the rest never reaches the device.
        let core = self.core();
        let states = states
            .into_iter()
            .zip(&core.params)
            .enumerate()
            .map(|(i, (st, p))| {
                st.filter(|_| core.owns(i))
                    .map(|st| -> Result<ParamState> {
                        let dtype = state_dtype(&p.tensor);
                        let tensors = st
                            .tensors
                            .iter()
                            .map(|t| t.to_device(p.tensor.device())?.to_dtype(dtype))
                            .collect::<Result<_>>()?;
                        Ok(ParamState {
                            step: st.step,
                            tensors,
                        })
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let core = self.core_mut();
        // The device's counters restart from the loaded counts at the next step (dropping the
        // old ones first warns about any skip not yet read).
        *core.device.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        core.step = step.unwrap_or_default() as u64;
        core.lr = lr.unwrap_or(core.lr);
        core.states = states;
        Ok(())
    }
}

/// `state_dict`'s work; `keep: false` takes part in a sharded state's gather and keeps only
/// the scalars.
fn collect_state<O: Optimizer + ?Sized>(opt: &O, keep: bool) -> Result<OptimizerState> {
    let core = opt.core();
    let exact = fused::exact_counters(core)?;
    let step = exact.as_ref().map_or(core.step, |c| c[0].max(0) as u64);
    let mut out = OptimizerState::new(opt.kind());
    out.scalars.insert("step".into(), step as f64);
    out.scalars.insert("lr".into(), fused::lr_for(core, step));
    // Each parameter's own step count; 0 for one without state here.
    let mut steps: Vec<u64> = core
        .states
        .iter()
        .enumerate()
        .map(|(i, st)| match (st, &exact) {
            (None, _) => 0,
            (Some(_), Some(c)) => c.get(COUNTER_HEAD + i).copied().unwrap_or(0).max(0) as u64,
            (Some(st), None) => st.step,
        })
        .collect();
    steps.resize(core.params.len(), 0);
    let shard = core
        .shard()
        .filter(|s| s.world_size > 1 && !core.params.is_empty());
    if shard.is_some() {
        // Every parameter's count from its owner (the others hold 0 for it).
        steps = gather_counts(&steps, &core.params[0].tensor)?;
    }
    for (i, p) in core.params.iter().enumerate() {
        if steps[i] == 0 {
            // No state, or made by a step that the device skipped: the CPU would have none.
            continue;
        }
        out.scalars
            .insert(param_key(&p.name, "step"), steps[i] as f64);
        let own = core.states.get(i).and_then(Option::as_ref);
        for (f, field) in opt.state_fields().iter().enumerate() {
            let t = match (shard, own) {
                (Some(shard), own) => {
                    // Every rank takes part; the owner's tensor goes to the others.
                    let t = match own {
                        Some(st) if shard.owns(i) => st.tensors[f].clone(),
                        _ => Tensor::zeros(
                            p.tensor.shape(),
                            state_dtype(&p.tensor),
                            p.tensor.device(),
                        )?,
                    };
                    crate::dist::current()?.broadcast_(&t, shard.owner(i))?;
                    t
                }
                (None, Some(st)) => st.tensors[f].clone(),
                (None, None) => continue,
            };
            if keep {
                out.put_tensor(param_key(&p.name, field), &t)?;
            }
        }
    }
    Ok(out)
}

/// The shared step: gradient norm over the scope, skip or clip, schedule, then each
/// parameter's update. With every parameter on one CUDA device and a fused rule, all of that
/// runs as fused kernels.
/// A skip clears the optimizer's own gradients when `clear_on_skip`.
/// Sharded (ZeRO-1), each rank updates the parameters it owns and then every parameter takes
/// its owner's values.
fn step_impl<O: Optimizer + ?Sized>(
    opt: &mut O,
    scope: NormScope,
    clear_on_skip: bool,
) -> Result<StepOutcome> {
    let outcome = update_impl(opt, scope, clear_on_skip)?;
    if let Some(shard) = opt.core().shard() {
        crate::dist::current()?.broadcast_from_owners(&opt.core().tensors(), shard)?;
    }
    Ok(outcome)
}

fn update_impl<O: Optimizer + ?Sized>(
    opt: &mut O,
    scope: NormScope,
    clear_on_skip: bool,
) -> Result<StepOutcome> {
    crate::cancel::check()?;
    let tensors = opt.core().tensors();
    if let (Some(rule), Some(ordinal)) = (opt.fused_rule(), fused::cuda_ordinal(scope.params)) {
        if fused::cuda_ordinal(&tensors) == Some(ordinal) {
            return fused::step(opt, rule, ordinal, scope);
        }
    }
    let norm = global_grad_norm(scope.params)?;
    if !norm.is_finite() {
        let next = opt.core().step + 1;
        opt.core_mut().skipped += 1;
        if clear_on_skip {
            opt.zero_grad();
        }
        if opt.core().warn_skips {
            let grads = if clear_on_skip { "cleared" } else { "kept" };
            crate::messages::warn(&format!(
                "optimizer step {next} skipped: the gradient norm is {norm}; parameters were \
                 not updated and gradients were {grads}"
            ));
        }
        return Ok(StepOutcome::Skipped { norm });
    }
    // The clip factor scales each gradient as it goes into the update, so the stored gradients
    // (which other optimizers of the scope may still measure) stay as they are.
    let clip = scope
        .max_norm
        .filter(|&max| norm > max)
        .map(|max| max / (norm + 1e-6));
    let core = opt.core_mut();
    core.step += 1;
    if let Some(s) = &core.schedule {
        core.lr = s.lr_at(core.step);
    }
    let (step, lr) = (core.step, core.lr);
    let mut states = std::mem::take(&mut core.states);
    states.resize(tensors.len(), None);
    let fields = opt.state_fields().len();
    let result = no_grad(|| -> Result<()> {
        for (i, (p, slot)) in tensors.iter().zip(states.iter_mut()).enumerate() {
            // Parameters without a gradient (unused this step) are left alone, as in PyTorch;
            // so are those another rank owns.
            let Some(g) = p.grad().filter(|_| opt.core().owns(i)) else {
                continue;
            };
            let dtype = state_dtype(p);
            if slot.is_none() {
                let zeros = (0..fields)
                    .map(|_| Tensor::zeros(p.shape(), dtype, p.device()))
                    .collect::<Result<_>>()?;
                *slot = Some(ParamState {
                    step: 0,
                    tensors: zeros,
                });
            }
            let st = slot.as_mut().expect("created above");
            st.step += 1;
            let g = g.to_dtype(dtype)?;
            let g = match clip {
                Some(factor) => g.mul_scalar(factor)?,
                None => g,
            };
            opt.update(p, &g, st, lr)?;
        }
        Ok(())
    });
    opt.core_mut().states = states;
    result?;
    Ok(StepOutcome::Applied {
        step,
        lr,
        grad_norm: norm,
    })
}
