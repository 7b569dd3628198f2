//! `train_step` recorded once as a CUDA graph and replayed at the steps after: one launch a step
//! instead of about five hundred, so the device runs the kernels back to back instead of
//! waiting between them for the launches.
//!
//! A replay repeats what the capture recorded, the kernels and their arguments, so:
//! - the batches go through buffers made here, which each step's batches are copied into;
//! - the loss and the gradient norm land in buffers made here, and each step returns copies;
//! - the optimizer's host side (step counts, the scheduled rate, the read-back of its device
//!   counters) runs around each replay (`optim::replayed_step`);
//! - whatever else the step took from the host is in the capture's key: the optimizer's rule,
//!   its rate (an argument when fixed; a schedule runs on the device), the clip norm, the
//!   model's precision and mode, the autocast setting, TF32, which parameters train, the
//!   batches' shapes, the addresses of the model's tensors and of the optimizer's state, and
//!   whether the rotary tables or the cached causal masks were made again (elsewhere; the
//!   graph also holds the ones it read, so none is freed under a replay). A step whose key
//!   differs runs op by op and the one after it is captured again.
//!
//! The first step runs op by op: it compiles the kernels and makes the optimizer's state, which
//! a capture cannot do (it may not keep memory it allocates, nor read the host). The second is
//! captured and replayed, the rest replay. A step that cannot be captured (an op that reads the
//! host or draws random numbers, such as LoRA's dropout) is reported once and the steps run op
//! by op from then on. So do data-parallel runs (NCCL) and sharded optimizer state.

use super::model::Precision;
use super::train::train_step;
use super::TransformerLm;
use crate::backend::cuda::graph::CudaGraph;
use crate::backend::spec::optim::UpdateRule;
use crate::nn::Module;
use crate::ops::attention::{cached_causal_masks, causal_mask_generation};
use crate::optim::{replayed_step, settle_step_counts, Optimizer, Schedule, StepOutcome};
use crate::{no_grad, DType, Device, Error, Result, Tensor};

/// What the captured kernels took from the host: a step with another key cannot replay them.
#[derive(Clone, Debug, PartialEq)]
struct CaptureKey {
    rule: Option<UpdateRule>,
    /// The rate when fixed (then it is a kernel argument); `None` under a schedule.
    fixed_lr: Option<f64>,
    schedule: Option<Schedule>,
    max_grad_norm: Option<f64>,
    precision: Precision,
    training: bool,
    tf32: bool,
    /// The autocast setting around the step (the backward runs under it).
    autocast: Option<DType>,
    /// Which of the optimizer's parameters, then the model's, take gradients.
    trains: Vec<bool>,
    /// The optimizer's (`OptimizerCore::step_addresses`) and the model's parameters'.
    addresses: Vec<u64>,
    /// The rotary tables' rows: the tables are made again, elsewhere, when a longer sequence
    /// (a generation between steps) needs more rows.
    rotary_rows: usize,
    /// Changes when the cached causal masks (the attention's composition reads one) are freed.
    causal_masks: u64,
    batches: Vec<[(Vec<usize>, DType); 2]>,
}

impl CaptureKey {
    fn of(
        model: &TransformerLm,
        opt: &dyn Optimizer,
        batches: &[(Tensor, Tensor)],
        tf32: bool,
    ) -> Self {
        let core = opt.core();
        let params = model.named_parameters();
        CaptureKey {
            tf32,
            rule: opt.fused_rule(),
            fixed_lr: core.schedule.is_none().then(|| opt.lr()),
            schedule: core.schedule.clone(),
            max_grad_norm: core.max_grad_norm,
            precision: model.precision(),
            training: model.is_training(),
            autocast: crate::amp::autocast_dtype(),
            trains: core
                .tensors()
                .iter()
                .chain(params.iter().map(|(_, t)| t))
                .map(Tensor::requires_grad)
                .collect(),
            addresses: core
                .step_addresses()
                .into_iter()
                .chain(params.iter().map(|(_, t)| t.data_address()))
                .chain(model.named_buffers().iter().map(|(_, t)| t.data_address()))
                .collect(),
            rotary_rows: model.rotary().rows(),
            causal_masks: causal_mask_generation(),
            batches: batches
                .iter()
                .map(|(x, y)| {
                    [
                        (x.shape().to_vec(), x.dtype()),
                        (y.shape().to_vec(), y.dtype()),
                    ]
                })
                .collect(),
        }
    }
}

/// The buffers a captured step reads its batches from and writes its results into.
struct Buffers {
    batches: Vec<(Tensor, Tensor)>,
    loss: Tensor,
    grad_norm: Tensor,
}

impl Buffers {
    fn new(batches: &[(Tensor, Tensor)], device: Device) -> Result<Buffers> {
        let batches = no_grad(|| {
            batches
                .iter()
                .map(|(x, y)| {
                    let copy = |t: &Tensor| t.to_device(device)?.contiguous_copy();
                    Ok((copy(x)?, copy(y)?))
                })
                .collect::<Result<Vec<_>>>()
        })?;
        Ok(Buffers {
            batches,
            loss: Tensor::zeros(&[], DType::F32, device)?,
            grad_norm: Tensor::zeros(&[], DType::F32, device)?,
        })
    }

    /// This step's batches into the buffers the graph reads.
    fn fill(&self, batches: &[(Tensor, Tensor)]) -> Result<()> {
        no_grad(|| {
            for ((bx, by), (x, y)) in self.batches.iter().zip(batches) {
                let device = bx.device();
                bx.copy_(&x.to_device(device)?)?;
                by.copy_(&y.to_device(device)?)?;
            }
            Ok(())
        })
    }
}

enum Phase {
    /// The next step runs op by op, and the one after is captured.
    WarmingUp,
    Ready,
    Captured {
        /// Declared first, so it is dropped (after the stream drains) before the buffers it
        /// reads.
        graph: CudaGraph,
        buffers: Buffers,
        /// The parameters the captured optimizer step updates.
        updated: Vec<usize>,
        /// What the graph reads that a cache elsewhere owns (the rotary tables, the causal
        /// masks): held, so that no eviction or regrowth frees it under a replay. (The key
        /// notices them changing; this keeps a replay between the check and the launch right.)
        _pinned: Vec<Tensor>,
    },
    /// A capture failed: every step runs op by op.
    Off,
}

/// `train_step` through a CUDA graph on one CUDA device (see the module's text); elsewhere
/// each step is `train_step`. Keep one per model and optimizer pair and pass every step
/// through it.
pub struct TrainGraph {
    phase: Phase,
    key: Option<CaptureKey>,
}

impl Default for TrainGraph {
    fn default() -> Self {
        Self::new()
    }
}

impl TrainGraph {
    pub fn new() -> Self {
        TrainGraph {
            phase: Phase::WarmingUp,
            key: None,
        }
    }

    /// Whether the steps now replay a captured graph.
    pub fn is_captured(&self) -> bool {
        matches!(self.phase, Phase::Captured { .. })
    }

    /// One optimizer step over `micro_batches`, as `train_step` takes it and with the same
    /// results. The loss and the outcome's gradient norm are fresh tensors on the device.
    pub fn step(
        &mut self,
        model: &TransformerLm,
        opt: &mut dyn Optimizer,
        micro_batches: &[(Tensor, Tensor)],
    ) -> Result<(Tensor, StepOutcome)> {
        crate::cancel::check()?;
        let ordinal = match model.device() {
            Device::Cuda(i) if !matches!(self.phase, Phase::Off) => i,
            _ => return train_step(model, opt, micro_batches),
        };
        let fused = opt.fused_rule().is_some() && opt.core().shard().is_none();
        if !fused || crate::dist::current()?.reduces() {
            return train_step(model, opt, micro_batches);
        }
        // Before the key: catching up may drop a state that a replay would write.
        if !settle_step_counts(opt.core_mut(), ordinal)? {
            return train_step(model, opt, micro_batches);
        }
        let tf32 = crate::backend::cuda::device(ordinal)?.allow_tf32();
        let key = |opt: &dyn Optimizer| CaptureKey::of(model, opt, micro_batches, tf32);
        if self.key.as_ref() != Some(&key(opt)) {
            self.discard(ordinal);
        }
        match std::mem::replace(&mut self.phase, Phase::WarmingUp) {
            Phase::WarmingUp | Phase::Off => {
                let out = train_step(model, opt, micro_batches)?;
                // The key as this step leaves it: the optimizer's state exists from now on.
                self.key = Some(key(opt));
                self.phase = Phase::Ready;
                Ok(out)
            }
            Phase::Ready => match self.capture(model, opt, micro_batches, ordinal) {
                Ok(()) => self.replay(opt, micro_batches),
                Err(e) => {
                    // A failed capture may leave gradients in memory the graph never made.
                    opt.zero_grad();
                    for (_, p) in model.named_parameters() {
                        p.set_grad(None);
                    }
                    opt.core_mut().take_captured_update();
                    if matches!(e, Error::Cancelled) {
                        // Not the step's fault: the next one is captured.
                        self.phase = Phase::Ready;
                        return Err(e);
                    }
                    self.turn_off(&format!("could not be captured ({e})"));
                    train_step(model, opt, micro_batches)
                }
            },
            captured @ Phase::Captured { .. } => {
                self.phase = captured;
                self.replay(opt, micro_batches)
            }
        }
    }

    /// Every later step runs op by op, after one warning saying why.
    fn turn_off(&mut self, why: &str) {
        crate::messages::warn(&format!(
            "train_step as a CUDA graph {why}; the steps run op by op"
        ));
        self.phase = Phase::Off;
    }

    /// Drops the captured step, if any (the next step warms up again), and gives its memory
    /// back: the graph's allocations would stay reserved beside what the warm-up step takes.
    fn discard(&mut self, ordinal: usize) {
        let had_graph = self.is_captured();
        self.phase = Phase::WarmingUp;
        if had_graph {
            if let Ok(dev) = crate::backend::cuda::device(ordinal) {
                let _ = dev.trim_graph_memory();
            }
        }
    }

    /// Records one step into a graph, which `self.phase` then holds; nothing runs yet.
    fn capture(
        &mut self,
        model: &TransformerLm,
        opt: &mut dyn Optimizer,
        micro_batches: &[(Tensor, Tensor)],
        ordinal: usize,
    ) -> Result<()> {
        let dev = crate::backend::cuda::device(ordinal)?;
        let buffers = Buffers::new(micro_batches, model.device())?;
        // Held from before the capture: what it reads of these is cached already (making one
        // would copy from the host, which a capture refuses).
        let mut pinned = model.rotary().held_tables();
        pinned.extend(cached_causal_masks());
        // The warm-up step's memory sits in the allocator's cache; the graph's own allocations
        // take the same room.
        dev.release_cached_blocks()?;
        let graph = CudaGraph::capture(&dev, || {
            let (loss, outcome) = train_step(model, opt, &buffers.batches)?;
            no_grad(|| {
                buffers.loss.copy_(&loss)?;
                match &outcome {
                    StepOutcome::Queued { grad_norm, .. } => buffers.grad_norm.copy_(grad_norm),
                    _ => Err(Error::invalid(
                        "train_step",
                        "only an optimizer with fused CUDA kernels steps inside a CUDA graph",
                    )),
                }
            })
        })?;
        let updated = opt.core_mut().take_captured_update().ok_or_else(|| {
            Error::invalid("train_step", "the captured step did not record its update")
        })?;
        self.phase = Phase::Captured {
            graph,
            buffers,
            updated,
            _pinned: pinned,
        };
        Ok(())
    }

    /// Copies the batches in, replays the graph with the optimizer's host side around it, and
    /// returns copies of the loss and the norm. A replay the driver refuses (its memory, say)
    /// turns the graph off.
    fn replay(
        &mut self,
        opt: &mut dyn Optimizer,
        micro_batches: &[(Tensor, Tensor)],
    ) -> Result<(Tensor, StepOutcome)> {
        crate::cancel::check()?;
        let Phase::Captured {
            graph,
            buffers,
            updated,
            ..
        } = &self.phase
        else {
            return Err(Error::invalid("train_step", "no captured step to replay"));
        };
        buffers.fill(micro_batches)?;
        let (step, lr) = match replayed_step(opt.core_mut(), updated, || graph.replay()) {
            Ok(done) => done,
            Err(e) => {
                self.turn_off(&format!("failed to replay ({e})"));
                return Err(e);
            }
        };
        let (loss, grad_norm) = no_grad(|| {
            Ok((
                buffers.loss.contiguous_copy()?,
                buffers.grad_norm.contiguous_copy()?,
            ))
        })?;
        Ok((
            loss,
            StepOutcome::Queued {
                step,
                lr,
                grad_norm,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::transformer_lm::LmConfig;
    use crate::optim::AdamW;
    use crate::{Generator, Tensor};

    fn setup() -> (TransformerLm, AdamW, Vec<(Tensor, Tensor)>) {
        let mut c = LmConfig::new(40, 16, 1, 2);
        c.max_seq_len = 8;
        let model = TransformerLm::new(c, &mut Generator::new(1)).unwrap();
        let mut opt = AdamW::new(model.parameters(), Default::default()).unwrap();
        opt.set_schedule(Some(Schedule::WarmupCosine {
            peak_lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 2,
            total_steps: 10,
        }))
        .unwrap();
        let ids = Tensor::from_vec((0..16i64).collect(), &[2, 8]).unwrap();
        (model, opt, vec![(ids.clone(), ids)])
    }

    /// The key a warm-up step leaves is the key the next step finds, though the scheduled rate
    /// moved: a key that drifted from step to step would warm up forever and never capture.
    #[test]
    fn the_key_holds_still_between_steps_under_a_schedule() {
        let (model, mut opt, batches) = setup();
        train_step(&model, &mut opt, &batches).unwrap();
        let after = CaptureKey::of(&model, &opt, &batches, false);
        let lr = opt.lr();
        train_step(&model, &mut opt, &batches).unwrap();
        assert_ne!(opt.lr(), lr, "the schedule moves the rate");
        assert_eq!(CaptureKey::of(&model, &opt, &batches, false), after);
    }

    /// What the kernels take as arguments changes the key: a fixed rate, the clip norm, the
    /// batches' shapes, a frozen parameter.
    #[test]
    fn the_key_changes_with_what_the_kernels_were_given() {
        let (model, mut opt, batches) = setup();
        let key =
            |opt: &AdamW, batches: &[(Tensor, Tensor)]| CaptureKey::of(&model, opt, batches, false);
        let before = key(&opt, &batches);
        opt.set_schedule(None).unwrap();
        let fixed = key(&opt, &batches);
        assert_ne!(fixed, before);
        opt.set_lr(5e-4).unwrap();
        let rated = key(&opt, &batches);
        assert_ne!(rated, fixed);
        opt.set_max_grad_norm(Some(1.0)).unwrap();
        let clipped = key(&opt, &batches);
        assert_ne!(clipped, rated);
        let short = Tensor::from_vec((0..8i64).collect(), &[1, 8]).unwrap();
        assert_ne!(key(&opt, &[(short.clone(), short)]), clipped);
        model.norm.weight.set_requires_grad(false).unwrap();
        assert_ne!(key(&opt, &batches), clipped);
    }
}
