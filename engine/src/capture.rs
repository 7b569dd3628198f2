//! Work recorded once into a device graph and replayed: the one mechanism behind every
//! captured loop (a language model's decode step, its training step). A `Replay` runs the
//! first step op by op (it compiles kernels and makes state, which a capture cannot), records
//! the second and replays it, and replays every later step. A capture that fails is reported
//! once and the steps run op by op from then on: the same kernels, so the same results.
//!
//! A replay repeats the recorded kernels with the arguments they were given, so whatever the
//! kernels took from the host is the capture's `Key`, and a step whose key differs goes back
//! through a warm-up and is captured again. Each participant adds its own part of the key (the
//! model its mode and its tensors' addresses, the optimizer its rule and rate, the caller the
//! batches' shapes), so no list of fields grows here. A cache that several loops share and a
//! graph reads without owning (the causal masks) bumps one host epoch when it frees a tensor
//! (`bump_epoch`); every key holds the epoch, and the graph holds what it read of it. A cache
//! one model owns (its rotary tables) is that model's part of the key instead, so one model's
//! regrowth does not send every other loop back through a warm-up.

use crate::{Device, DeviceGraph, Error, Result};
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};

static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Marks that a cache freed or regrew a tensor that a captured graph may read: every key made
/// after this differs from those made before, so no graph replays against the old tensor.
pub fn bump_epoch() {
    EPOCH.fetch_add(1, Ordering::Relaxed);
}

/// What the kernels of one step took from the host, contributed by its participants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Key {
    text: String,
    words: Vec<u64>,
}

impl Key {
    /// A key that starts with the host epoch.
    pub fn new() -> Self {
        Key {
            text: String::new(),
            words: vec![EPOCH.load(Ordering::Relaxed)],
        }
    }

    /// Adds a labelled value (its `Debug` form, which is exact for floats).
    pub fn add(&mut self, label: &str, value: impl Debug) -> &mut Self {
        use std::fmt::Write;
        let _ = write!(self.text, "{label}={value:?};");
        self
    }

    /// Adds plain numbers (device addresses, flags), cheaper than text for long lists.
    pub fn add_words(&mut self, words: impl IntoIterator<Item = u64>) -> &mut Self {
        self.words.extend(words);
        self
    }
}

/// What a captured step does besides the graph: made, recorded and replayed by the loop that
/// owns the `Replay`.
pub trait Step {
    /// What a recorded step keeps beside its graph (its buffers, what it holds alive).
    type Recorded;
    type Output;
    /// What the step's kernels take from the host now. Asked before each step and, after a
    /// warm-up, again (the warm-up may make state the key names, such as an optimizer's
    /// moments). A step that never changes what it gives its kernels returns `Key::new()`.
    fn key(&self) -> Key;
    /// The step op by op.
    fn run(&mut self) -> Result<Self::Output>;
    /// Records the step into a graph on `device` (nothing runs yet).
    fn record(&mut self, device: Device) -> Result<(DeviceGraph, Self::Recorded)>;
    /// Runs the recorded step: the host's part around `graph.replay()`.
    fn replay(&mut self, graph: &DeviceGraph, recorded: &Self::Recorded) -> Result<Self::Output>;
    /// Undoes what a failed recording left (gradients in memory only the graph had).
    fn abandon(&mut self) {}
    /// Called after a recorded graph is dropped, to give its memory back.
    fn forget(&mut self, _device: Device) {}
}

enum Phase<R> {
    /// The next step runs op by op, and the one after is recorded.
    WarmingUp,
    Ready,
    /// Declared graph first: it is dropped (after the device drains) before what it reads.
    Captured(DeviceGraph, R),
    /// Every step runs op by op.
    Off,
}

/// The state of one captured loop: see the module's text.
pub struct Replay<R> {
    phase: Phase<R>,
    key: Option<Key>,
    /// What the warnings call the loop ("generate: the decode step").
    what: &'static str,
}

impl<R> Replay<R> {
    /// A loop that captures from its second step on.
    pub fn new(what: &'static str) -> Self {
        Replay {
            phase: Phase::WarmingUp,
            key: None,
            what,
        }
    }

    /// A loop that never captures (the CPU, graphs switched off).
    pub fn off(what: &'static str) -> Self {
        Replay {
            phase: Phase::Off,
            key: None,
            what,
        }
    }

    /// Whether steps now replay a recorded graph.
    pub fn is_captured(&self) -> bool {
        matches!(self.phase, Phase::Captured(..))
    }

    pub fn is_off(&self) -> bool {
        matches!(self.phase, Phase::Off)
    }

    /// One step on `device`: op by op, recorded, or replayed (see the module's text).
    pub fn step<S: Step<Recorded = R>>(
        &mut self,
        device: Device,
        step: &mut S,
    ) -> Result<S::Output> {
        if self.is_off() {
            return step.run();
        }
        if self.key.as_ref() != Some(&step.key()) {
            self.discard(device, step);
        }
        match std::mem::replace(&mut self.phase, Phase::WarmingUp) {
            Phase::WarmingUp | Phase::Off => {
                let out = step.run()?;
                self.key = Some(step.key());
                self.phase = Phase::Ready;
                Ok(out)
            }
            Phase::Ready => match step.record(device) {
                Ok((graph, recorded)) => {
                    self.phase = Phase::Captured(graph, recorded);
                    self.replay(step)
                }
                Err(e) => {
                    step.abandon();
                    if matches!(e, Error::Cancelled) {
                        // Not the step's fault: the next one is recorded.
                        self.phase = Phase::Ready;
                        return Err(e);
                    }
                    self.turn_off(&format!("could not be captured as a CUDA graph ({e})"));
                    step.run()
                }
            },
            captured @ Phase::Captured(..) => {
                self.phase = captured;
                self.replay(step)
            }
        }
    }

    fn replay<S: Step<Recorded = R>>(&mut self, step: &mut S) -> Result<S::Output> {
        let Phase::Captured(graph, recorded) = &self.phase else {
            return Err(Error::invalid(self.what, "no captured step to replay"));
        };
        step.replay(graph, recorded).inspect_err(|e| {
            // A cancel is the user's, not the graph's: the next step replays again.
            if !matches!(e, Error::Cancelled) {
                self.turn_off(&format!("failed to replay as a CUDA graph ({e})"));
            }
        })
    }

    /// Drops the recorded step, if any (the next step warms up again), and gives its memory
    /// back: a graph's allocations would stay reserved beside what the warm-up step takes.
    fn discard<S: Step<Recorded = R>>(&mut self, device: Device, step: &mut S) {
        let old = std::mem::replace(&mut self.phase, Phase::WarmingUp);
        let had_graph = matches!(old, Phase::Captured(..));
        drop(old);
        if had_graph {
            step.forget(device);
        }
    }

    /// Every later step runs op by op, after one warning saying why.
    fn turn_off(&mut self, why: &str) {
        crate::messages::warn(&format!("{} {why}; the steps run op by op", self.what));
        self.phase = Phase::Off;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step that counts its runs and recordings; recording fails with `fail`.
    struct Counting {
        runs: usize,
        records: usize,
        abandoned: usize,
        fail: fn() -> Error,
        key: u64,
    }

    impl Step for Counting {
        type Recorded = ();
        type Output = usize;
        fn key(&self) -> Key {
            let mut k = Key::new();
            k.add("key", self.key);
            k
        }
        fn run(&mut self) -> Result<usize> {
            self.runs += 1;
            Ok(self.runs)
        }
        fn record(&mut self, _device: Device) -> Result<(DeviceGraph, ())> {
            self.records += 1;
            Err((self.fail)())
        }
        fn replay(&mut self, _graph: &DeviceGraph, _: &()) -> Result<usize> {
            unreachable!("nothing was recorded")
        }
        fn abandon(&mut self) {
            self.abandoned += 1;
        }
    }

    fn counting(fail: fn() -> Error) -> Counting {
        Counting {
            runs: 0,
            records: 0,
            abandoned: 0,
            fail,
            key: 0,
        }
    }

    #[test]
    fn a_step_that_cannot_be_recorded_runs_op_by_op_from_then_on() {
        let mut replay = Replay::<()>::new("test step");
        let mut step = counting(|| Error::invalid("capture", "reads the host"));
        for _ in 0..4 {
            replay.step(Device::Cpu, &mut step).unwrap();
        }
        // Warm-up, a failed recording (run op by op instead), then op by op.
        assert_eq!((step.runs, step.records, step.abandoned), (4, 1, 1));
        assert!(replay.is_off() && !replay.is_captured());
    }

    #[test]
    fn a_cancelled_recording_is_tried_again_at_the_next_step() {
        let mut replay = Replay::<()>::new("test step");
        let mut step = counting(|| Error::Cancelled);
        replay.step(Device::Cpu, &mut step).unwrap();
        assert!(matches!(
            replay.step(Device::Cpu, &mut step),
            Err(Error::Cancelled)
        ));
        assert!(!replay.is_off());
        let _ = replay.step(Device::Cpu, &mut step);
        assert_eq!(step.records, 2, "the next step records again");
    }

    #[test]
    fn a_changed_key_sends_the_step_back_through_a_warm_up() {
        let mut replay = Replay::<()>::new("test step");
        let mut step = counting(|| Error::invalid("capture", "reads the host"));
        replay.step(Device::Cpu, &mut step).unwrap();
        step.key = 1;
        replay.step(Device::Cpu, &mut step).unwrap();
        assert_eq!(
            step.records, 0,
            "a changed key warms up again instead of recording"
        );
        replay.step(Device::Cpu, &mut step).unwrap();
        assert_eq!(step.records, 1);
    }

    #[test]
    fn the_epoch_is_part_of_every_key() {
        let before = Key::new();
        bump_epoch();
        assert_ne!(Key::new(), before);
    }

    #[test]
    fn a_step_that_never_captures_only_runs() {
        let mut replay = Replay::<()>::off("test step");
        let mut step = counting(|| Error::Cancelled);
        for _ in 0..3 {
            replay.step(Device::Cpu, &mut step).unwrap();
        }
        assert_eq!((step.runs, step.records), (3, 0));
    }
}
