//! One decode step for the whole batch, after the prompt: a token per row in, the greedy picks
//! or the logits out. On CUDA the step is captured once as a CUDA graph and then replayed at
//! every position, so a token costs one launch instead of a few hundred. The step's inputs and
//! outputs live in buffers made once here, and its position in the cache's device cursor
//! (`KvCache::sync_cursor`), so the replays need no new kernel arguments.
//!
//! The phases are `capture::Replay`'s, which the training step shares. The first step runs op
//! by op: it compiles the kernels and sizes the tables that the capture then finds ready (a
//! capture cannot copy from the host). A capture that fails (an op that needs the host) is
//! reported once and the steps run op by op: the same kernels, so the same tokens.

use crate::capture::{self, Key, Replay};
use crate::models::transformer_lm::{KvCache, TransformerLm};
use crate::{no_grad, DType, Device, DeviceGraph, Result, Tensor};

/// What a step gives back to the host.
pub(super) enum StepOutput {
    /// The most likely token per row (picked on the device).
    Picks(Vec<u32>),
    /// The logits [batch, vocab] in F32, for the host's sampler.
    Logits(Vec<f32>),
}

pub(super) struct DecodeStep<'m> {
    model: &'m TransformerLm,
    /// This step's tokens [batch, 1] (I64, on the model's device).
    ids: Tensor,
    /// The picks [batch] (I64) or the logits [batch, vocab] (F32).
    out: Tensor,
    greedy: bool,
    graph: Replay<()>,
}

impl<'m> DecodeStep<'m> {
    pub fn new(
        model: &'m TransformerLm,
        batch: usize,
        greedy: bool,
        use_graph: bool,
    ) -> Result<Self> {
        let device = model.device();
        let out = if greedy {
            Tensor::zeros(&[batch], DType::I64, device)?
        } else {
            Tensor::zeros(&[batch, model.config.vocab_size], DType::F32, device)?
        };
        const WHAT: &str = "generate: the decode step";
        let graph = match device {
            Device::Cuda(_) if use_graph => Replay::new(WHAT),
            _ => Replay::off(WHAT),
        };
        Ok(DecodeStep {
            model,
            ids: Tensor::zeros(&[batch, 1], DType::I64, device)?,
            out,
            greedy,
            graph,
        })
    }

    /// Feeds `tokens` (one per row) at the cache's next position and advances it.
    pub fn run(&mut self, cache: &mut KvCache, tokens: &[u32]) -> Result<StepOutput> {
        cache.check_room(1)?;
        let host: Vec<i64> = tokens.iter().map(|&t| t as i64).collect();
        let n = host.len();
        let device = self.model.device();
        no_grad(|| {
            self.ids
                .copy_(&Tensor::from_vec(host, &[n, 1])?.to_device(device)?)
        })?;
        cache.sync_cursor()?;
        let mut step = Compute {
            model: self.model,
            ids: &self.ids,
            out: &self.out,
            greedy: self.greedy,
            cache: &*cache,
        };
        self.graph.step(device, &mut step)?;
        cache.advance(1);
        let host = self.out.to_device(Device::Cpu)?;
        Ok(if self.greedy {
            StepOutput::Picks(
                host.to_vec::<i64>()?
                    .into_iter()
                    .map(|t| t as u32)
                    .collect(),
            )
        } else {
            StepOutput::Logits(host.to_vec_f32()?)
        })
    }
}

/// One decode step's operands, for `capture::Replay`: the tokens and the position are in
/// device buffers, so what the kernels take from the host changes only with the rotary
/// tables (made again when a longer sequence needs more rows) and the host epoch.
struct Compute<'a> {
    model: &'a TransformerLm,
    ids: &'a Tensor,
    out: &'a Tensor,
    greedy: bool,
    cache: &'a KvCache,
}

impl capture::Step for Compute<'_> {
    type Recorded = ();
    type Output = ();

    fn key(&self) -> Key {
        let mut key = Key::new();
        key.add("rotary_rows", self.model.rotary().rows());
        key
    }

    /// The step reads the weights and never writes them: its decode products may start
    /// loading them while the kernel before each finishes.
    fn run(&mut self) -> Result<()> {
        let Compute {
            model,
            ids,
            out,
            greedy,
            cache,
        } = *self;
        crate::ops::fused_linear::with_fixed_weights(|| {
            no_grad(|| compute(model, ids, out, greedy, cache))
        })
    }

    fn record(&mut self, device: Device) -> Result<(DeviceGraph, ())> {
        Ok((device.capture(|| self.run())?, ()))
    }

    fn replay(&mut self, graph: &DeviceGraph, _: &()) -> Result<()> {
        graph.replay()
    }
}

/// The step itself: every buffer it makes is freed before it returns, so it can be captured.
fn compute(
    model: &TransformerLm,
    ids: &Tensor,
    out: &Tensor,
    greedy: bool,
    cache: &KvCache,
) -> Result<()> {
    let b = ids.shape()[0];
    let hidden = model.decode_hidden(ids, cache)?;
    let logits = model
        .project(&hidden)?
        .reshape_to(&[b, model.config.vocab_size])?;
    if greedy {
        out.copy_(&logits.argmax(Some(-1), false)?)
    } else {
        out.copy_(&logits)
    }
}
