//! The denoiser's call at each step of a walk. On CUDA it is captured once as a CUDA graph and
//! replayed at every later step, so a step costs one launch instead of the hundreds of kernels
//! of an MMDiT (whose launches otherwise bound the step at small batches: the GPU waits on the
//! host). UNets are not captured yet: their cuDNN convolutions cannot be, and the im2col they
//! fall back to inside a graph costs more than the launches save. The inputs that change from step to step (the latents, the timestep)
//! are copied into buffers made once here, and the prediction comes back in one, so the
//! replays need no new kernel arguments. What else the model reads from the host (timestep
//! frequencies, rotary angles) comes from `ops::constant_table`, made by the warm-up step.
//!
//! The phases are `capture::Replay`'s, shared with the language model's decode and training
//! steps: the first step runs op by op, the second is recorded, the rest replay; a capture
//! that fails is reported once and the steps run op by op (the same kernels, so the same
//! images).

use super::denoiser::Denoiser;
use super::prompt_encoder::Conditioning;
use super::AddedConditions;
use crate::capture::{self, Key, Replay};
use crate::{no_grad, DType, Device, DeviceGraph, Result, Tensor};

pub struct DenoiseStep<'a> {
    denoiser: &'a Denoiser,
    cond: &'a Conditioning,
    added: Option<&'a AddedConditions>,
    /// The guidance scale [1] (F32, on the device), for models that take it as an input.
    guidance: Tensor,
    /// This step's timestep [1] (F32, on the device).
    t: Tensor,
    /// This step's latents, as the model reads them.
    input: Option<Tensor>,
    /// The prediction, where the captured step leaves it.
    out: Option<Tensor>,
    device: Device,
    graph: Replay<Vec<Tensor>>,
}

impl<'a> DenoiseStep<'a> {
    /// Steps of `denoiser` under `cond` (and SDXL's `added`) with guidance scale `guidance`,
    /// on `device`: captured where the denoiser gains from it (`gains_from_capture`: the
    /// MMDiTs, not yet the UNets); `cuda_graph: false` runs every step op by op.
    pub fn new(
        denoiser: &'a Denoiser,
        cond: &'a Conditioning,
        added: Option<&'a AddedConditions>,
        guidance: f64,
        device: Device,
        cuda_graph: bool,
    ) -> Result<Self> {
        const WHAT: &str = "generate: the denoising step";
        let graph = match device {
            Device::Cuda(_) if cuda_graph && denoiser.gains_from_capture() => Replay::new(WHAT),
            _ => Replay::off(WHAT),
        };
        Ok(DenoiseStep {
            denoiser,
            cond,
            added,
            guidance: Tensor::from_f64s(&[guidance], &[1], DType::F32)?.to_device(device)?,
            t: Tensor::zeros(&[1], DType::F32, device)?,
            input: None,
            out: None,
            device,
            graph,
        })
    }

    /// Whether steps now replay a captured graph.
    pub fn is_captured(&self) -> bool {
        self.graph.is_captured()
    }

    /// The model's prediction for `latents` at timestep `t`.
    pub fn predict(&mut self, latents: &Tensor, t: f64) -> Result<Tensor> {
        no_grad(|| {
            if self.graph.is_off() {
                // Op by op the buffers buy nothing: the model reads the latents as given.
                let t = Tensor::from_f64s(&[t], &[1], DType::F32)?.to_device(self.device)?;
                return self
                    .denoiser
                    .predict(latents, &t, self.cond, self.added, &self.guidance);
            }
            let fits = |b: &Tensor| b.shape() == latents.shape() && b.dtype() == latents.dtype();
            if !self.input.as_ref().is_some_and(fits) {
                self.input = Some(Tensor::zeros(
                    latents.shape(),
                    latents.dtype(),
                    self.device,
                )?);
            }
            let input = self.input.as_ref().expect("made above");
            input.copy_(latents)?;
            self.t
                .copy_(&Tensor::from_f64s(&[t], &[1], DType::F32)?.to_device(self.device)?)?;
            let mut step = Compute {
                denoiser: self.denoiser,
                cond: self.cond,
                added: self.added,
                guidance: &self.guidance,
                t: &self.t,
                input,
                out: &mut self.out,
            };
            // A copy: the buffer is the next step's, and a scheduler may keep the prediction.
            self.graph.step(self.device, &mut step)?.contiguous_copy()
        })
    }
}

/// One step's operands, for `capture::Replay`.
struct Compute<'s> {
    denoiser: &'s Denoiser,
    cond: &'s Conditioning,
    added: Option<&'s AddedConditions>,
    guidance: &'s Tensor,
    t: &'s Tensor,
    input: &'s Tensor,
    out: &'s mut Option<Tensor>,
}

impl capture::Step for Compute<'_> {
    /// The cached tables, held while the graph that read them lives.
    type Recorded = Vec<Tensor>;
    type Output = Tensor;

    /// The model's part (its mode, its tensors' addresses) and the latents' shape, with which
    /// the buffers are made again.
    fn key(&self) -> Key {
        let mut key = Key::new();
        self.denoiser.module().capture_key(&mut key);
        key.add("input", (self.input.shape(), self.input.dtype()))
            .add("autocast", crate::amp::autocast_dtype());
        key
    }

    /// The prediction, written into the output buffer (made by the first step).
    fn run(&mut self) -> Result<Tensor> {
        let pred =
            self.denoiser
                .predict(self.input, self.t, self.cond, self.added, self.guidance)?;
        match self.out.as_ref() {
            Some(out) if out.shape() == pred.shape() && out.dtype() == pred.dtype() => {
                out.copy_(&pred)?;
                Ok(out.clone())
            }
            _ => {
                *self.out = Some(pred.clone());
                Ok(pred)
            }
        }
    }

    fn record(&mut self, device: Device) -> Result<(DeviceGraph, Vec<Tensor>)> {
        // Held from before the capture: what the step reads of them is cached already.
        let tables = crate::ops::constant_table::all();
        // The warm-up step's memory sits in the allocator's cache; the graph's own
        // allocations take the same room.
        device.release_cached_memory()?;
        let graph = device.capture(|| self.run().map(drop))?;
        Ok((graph, tables))
    }

    fn replay(&mut self, graph: &DeviceGraph, _tables: &Vec<Tensor>) -> Result<Tensor> {
        graph.replay()?;
        Ok(self
            .out
            .clone()
            .expect("the warm-up step made the output buffer"))
    }
}
