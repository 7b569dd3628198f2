//! `train_step` recorded once as a CUDA graph and replayed at the steps after: one launch a step
//! instead of about five hundred, so the device runs the kernels back to back instead of
//! waiting between them for the launches. The phases (warm-up, record, replay, op by op after
//! a failure) are `capture::Replay`'s, which the decode step shares; this file says what a
//! training step records and what its key holds.
//!
//! A replay repeats what the capture recorded, the kernels and their arguments, so:
//! - the batches go through buffers made here, which each step's batches are copied into;
//! - the loss and the gradient norm land in buffers made here, and each step returns copies;
//! - the optimizer's host side (step counts, the scheduled rate, the read-back of its device
//!   counters) runs around each replay (`optim::replayed_step`);
//! - whatever else the step took from the host is in the capture's key, each participant
//!   adding its part: the model (`Module::capture_key`: mode, which parameters train, their
//!   addresses, its precision and its rotary tables' rows), the optimizer
//!   (`Optimizer::capture_key`: rule, fixed rate, clip norm, state addresses), the autocast
//!   setting, TF32 and the batches' shapes. The cached causal masks, shared by every model,
//!   bump the host epoch when they are freed. The graph also holds the tables and masks it
//!   read, so none is freed under a replay. A step whose key differs runs op by op and the one
//!   after it is captured again.
//!
//! A step that cannot be captured (an op that reads the host or draws random numbers, such as
//! LoRA's dropout) is reported once and the steps run op by op from then on. So do
//! data-parallel runs (NCCL) and sharded optimizer state.

use super::train::train_step;
use super::TransformerLm;
use crate::capture::{self, Key, Replay};
use crate::nn::Module;
use crate::optim::{replayed_step, settle_step_counts, Optimizer, StepOutcome};
use crate::{no_grad, DType, Device, DeviceGraph, Error, Result, Tensor};

/// What the captured kernels took from the host: a step with another key cannot replay them.
fn capture_key(
    model: &TransformerLm,
    opt: &dyn Optimizer,
    batches: &[(Tensor, Tensor)],
    tf32: bool,
) -> Key {
    let mut key = Key::new();
    model.capture_key(&mut key);
    opt.capture_key(&mut key);
    let shapes: Vec<_> = batches
        .iter()
        .map(|(x, y)| [(x.shape(), x.dtype()), (y.shape(), y.dtype())])
        .collect();
    key.add("tf32", tf32)
        .add("autocast", crate::amp::autocast_dtype())
        .add("batches", shapes);
    key
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

/// What a recorded step keeps beside its graph.
pub struct Recorded {
    buffers: Buffers,
    /// The parameters the captured optimizer step updates.
    updated: Vec<usize>,
    /// What the graph reads that a cache elsewhere owns (the rotary tables, the causal masks):
    /// held, so that no eviction or regrowth frees it under a replay. (The key notices them
    /// changing; this keeps a replay between the check and the launch right.)
    _pinned: Vec<Tensor>,
}

/// One training step's participants, for `capture::Replay`.
struct Step<'a> {
    model: &'a TransformerLm,
    opt: &'a mut dyn Optimizer,
    batches: &'a [(Tensor, Tensor)],
    tf32: bool,
}

impl capture::Step for Step<'_> {
    type Recorded = Recorded;
    type Output = (Tensor, StepOutcome);

    fn key(&self) -> Key {
        capture_key(self.model, &*self.opt, self.batches, self.tf32)
    }

    fn run(&mut self) -> Result<Self::Output> {
        train_step(self.model, self.opt, self.batches)
    }

    /// Records one step into a graph; nothing runs yet.
    fn record(&mut self, device: Device) -> Result<(DeviceGraph, Recorded)> {
        let buffers = Buffers::new(self.batches, device)?;
        // Held from before the capture: what it reads of these is cached already (making one
        // would copy from the host, which a capture refuses).
        let mut pinned = self.model.rotary().held_tables();
        pinned.extend(crate::ops::constant_table::all());
        // The warm-up step's memory sits in the allocator's cache; the graph's own allocations
        // take the same room.
        device.release_cached_memory()?;
        let (model, opt) = (self.model, &mut *self.opt);
        let graph = device.capture(|| {
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
        let updated = self.opt.core_mut().take_captured_update().ok_or_else(|| {
            Error::invalid("train_step", "the captured step did not record its update")
        })?;
        let recorded = Recorded {
            buffers,
            updated,
            _pinned: pinned,
        };
        Ok((graph, recorded))
    }

    /// Copies the batches in, replays the graph with the optimizer's host side around it, and
    /// returns copies of the loss and the norm.
    fn replay(&mut self, graph: &DeviceGraph, rec: &Recorded) -> Result<Self::Output> {
        crate::cancel::check()?;
        rec.buffers.fill(self.batches)?;
        let (step, lr) = replayed_step(self.opt.core_mut(), &rec.updated, || graph.replay())?;
        let (loss, grad_norm) = no_grad(|| {
            Ok((
                rec.buffers.loss.contiguous_copy()?,
                rec.buffers.grad_norm.contiguous_copy()?,
            ))
        })?;
        let outcome = StepOutcome::Queued {
            step,
            lr,
            grad_norm,
        };
        Ok((loss, outcome))
    }

    /// A failed capture may leave gradients in memory the graph never made.
    fn abandon(&mut self) {
        self.opt.zero_grad();
        for (_, p) in self.model.named_parameters() {
            p.set_grad(None);
        }
        self.opt.core_mut().take_captured_update();
    }

    fn forget(&mut self, device: Device) {
        let _ = device.trim_graph_memory();
    }
}

/// `train_step` through a CUDA graph on one CUDA device (see the module's text); elsewhere
/// each step is `train_step`. Keep one per model and optimizer pair and pass every step
/// through it.
pub struct TrainGraph {
    replay: Replay<Recorded>,
}

impl Default for TrainGraph {
    fn default() -> Self {
        Self::new()
    }
}

impl TrainGraph {
    pub fn new() -> Self {
        TrainGraph {
            replay: Replay::new("train_step"),
        }
    }

    /// Whether the steps now replay a captured graph.
    pub fn is_captured(&self) -> bool {
        self.replay.is_captured()
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
        let device = model.device();
        let ordinal = match device {
            Device::Cuda(i) if !self.replay.is_off() => i,
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
        let mut step = Step {
            model,
            opt,
            batches: micro_batches,
            tf32: device.tf32_allowed()?,
        };
        self.replay.step(device, &mut step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::transformer_lm::LmConfig;
    use crate::optim::{AdamW, Schedule};
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
        let after = capture_key(&model, &opt, &batches, false);
        let lr = opt.lr();
        train_step(&model, &mut opt, &batches).unwrap();
        assert_ne!(opt.lr(), lr, "the schedule moves the rate");
        assert_eq!(capture_key(&model, &opt, &batches, false), after);
    }

    /// What the kernels take as arguments changes the key: a fixed rate, the clip norm, the
    /// batches' shapes, a frozen parameter.
    #[test]
    fn the_key_changes_with_what_the_kernels_were_given() {
        let (model, mut opt, batches) = setup();
        let key =
            |opt: &AdamW, batches: &[(Tensor, Tensor)]| capture_key(&model, opt, batches, false);
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
