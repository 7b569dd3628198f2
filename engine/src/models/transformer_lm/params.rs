//! Where a model's weights come from while it is built: fresh random init, or a map of named
//! tensors (a checkpoint). Building through one source keeps the names in one place and lets
//! a load report every missing, mis-shaped and unexpected tensor at once.

use super::LmConfig;
use crate::nn::init::normal_;
use crate::nn::{Embedding, Linear, RmsNorm};
use crate::{no_grad, DType, Device, Error, Generator, Result, Tensor};
use std::collections::{BTreeMap, BTreeSet};

pub enum ParamSource<'a> {
    /// N(0, std) for projections and embeddings, ones for norms (as `transformers` initializes).
    Init {
        gen: &'a mut Generator,
        std: f64,
        dtype: DType,
        device: Device,
    },
    Tensors {
        map: &'a BTreeMap<String, Tensor>,
        dtype: DType,
        device: Device,
        used: BTreeSet<String>,
        problems: Vec<String>,
    },
}

#[derive(Clone, Copy)]
enum Fill {
    Normal,
    Ones,
}

impl<'a> ParamSource<'a> {
    /// Fresh weights drawn where they will live: a large model on a GPU never passes through
    /// host memory. The device draws the same numbers as the CPU (one Philox stream).
    pub fn init(gen: &'a mut Generator, std: f64, dtype: DType, device: Device) -> Self {
        ParamSource::Init {
            gen,
            std,
            dtype,
            device,
        }
    }

    pub fn tensors(map: &'a BTreeMap<String, Tensor>, dtype: DType, device: Device) -> Self {
        ParamSource::Tensors {
            map,
            dtype,
            device,
            used: BTreeSet::new(),
            problems: Vec::new(),
        }
    }

    fn tensor(&mut self, name: &str, shape: &[usize], fill: Fill) -> Result<Tensor> {
        let t = match self {
            ParamSource::Init {
                gen,
                std,
                dtype,
                device,
            } => match (fill, *device) {
                (Fill::Ones, _) => Tensor::ones(shape, *dtype, *device)?,
                (Fill::Normal, Device::Cpu) => {
                    let t = Tensor::zeros(shape, *dtype, Device::Cpu)?;
                    normal_(&t, 0.0, *std, gen)?;
                    t
                }
                (Fill::Normal, _) => {
                    Tensor::randn_on(shape, *dtype, *device, Some(&mut **gen))?.mul_scalar(*std)?
                }
            },
            ParamSource::Tensors {
                map,
                dtype,
                device,
                used,
                problems,
            } => {
                used.insert(name.to_string());
                match map.get(name) {
                    Some(t) if t.shape() == shape => {
                        no_grad(|| t.to(*device, *dtype)?.contiguous_copy())?
                    }
                    Some(t) => {
                        problems.push(format!(
                            "{name} has shape {:?}, the config needs {shape:?}",
                            t.shape()
                        ));
                        Tensor::zeros(shape, *dtype, *device)?
                    }
                    None => {
                        problems.push(format!("{name} is missing"));
                        Tensor::zeros(shape, *dtype, *device)?
                    }
                }
            }
        };
        t.set_requires_grad(true)?;
        Ok(t)
    }

    /// A bias-free projection `{name}.weight` [out, in].
    pub fn linear(&mut self, name: &str, inp: usize, out: usize) -> Result<Linear> {
        Linear::from_tensors(
            self.tensor(&format!("{name}.weight"), &[out, inp], Fill::Normal)?,
            None,
        )
    }

    pub fn rms_norm(&mut self, name: &str, c: &LmConfig) -> Result<RmsNorm> {
        RmsNorm::from_tensor(
            self.tensor(&format!("{name}.weight"), &[c.d_model], Fill::Ones)?,
            c.norm_eps,
        )
    }

    pub fn embedding(&mut self, name: &str, c: &LmConfig) -> Result<Embedding> {
        Embedding::from_tensor(self.tensor(
            &format!("{name}.weight"),
            &[c.vocab_size, c.d_model],
            Fill::Normal,
        )?)
    }

    /// Every problem of a load in one error; unused tensors in the map count as problems too,
    /// since a checkpoint with extra weights was made for a different config.
    pub fn finish(self) -> Result<()> {
        let ParamSource::Tensors {
            map,
            used,
            mut problems,
            ..
        } = self
        else {
            return Ok(());
        };
        let unexpected: Vec<&str> = map
            .keys()
            .filter(|k| !used.contains(*k))
            .map(|k| k.as_str())
            .collect();
        if !unexpected.is_empty() {
            problems.push(format!("unexpected: {}", unexpected.join(", ")));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::StateDict(problems.join("; ")))
        }
    }
}
