//! Where a model's weights come from while it is built: fresh random init, or a map of named
//! tensors (a checkpoint). Building through one source keeps the names in one place and lets
//! a load report every missing, mis-shaped and unexpected tensor at once.
//!
//! A config is only a claim about the weights beside it. Before a load builds anything,
//! `check_config_against` compares the sizes that decide what is allocated (vocab, width,
//! layer count, FFN width, key/value width) with the tensors' own shapes; a missing or
//! mis-shaped tensor then gets a placeholder that allocates nothing (one zero seen through a
//! broadcast view) until `finish` reports them all.

use super::LmConfig;
use crate::nn::init::normal_;
use crate::nn::{Embedding, Linear, NameReport, RmsNorm};
use crate::ops::quant_matmul::QuantizedMatrix;
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
        /// Projection weights kept in block formats, by the same names.
        quantized: &'a BTreeMap<String, QuantizedMatrix>,
        dtype: DType,
        device: Device,
        used: BTreeSet<String>,
        problems: NameReport,
    },
}

#[derive(Clone, Copy)]
enum Fill {
    Normal,
    Ones,
    Zeros,
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

    pub fn tensors(
        map: &'a BTreeMap<String, Tensor>,
        quantized: &'a BTreeMap<String, QuantizedMatrix>,
        dtype: DType,
        device: Device,
    ) -> Self {
        ParamSource::Tensors {
            map,
            quantized,
            dtype,
            device,
            used: BTreeSet::new(),
            problems: NameReport::new(),
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
                (Fill::Zeros, _) => Tensor::zeros(shape, *dtype, *device)?,
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
                quantized: _,
                problems,
            } => {
                used.insert(name.to_string());
                match map.get(name) {
                    Some(t) if t.shape() == shape => {
                        no_grad(|| t.to(*device, *dtype)?.contiguous_copy())?
                    }
                    Some(t) => {
                        problems.misshaped(name, t.shape(), shape);
                        placeholder(shape, *dtype, *device)?
                    }
                    None => {
                        problems.missing(name);
                        placeholder(shape, *dtype, *device)?
                    }
                }
            }
        };
        t.set_requires_grad(true)?;
        Ok(t)
    }

    /// A projection with `{name}.bias` [out] when `bias` (zeros at init, as transformers'),
    /// else `linear`.
    pub fn linear_biased(
        &mut self,
        name: &str,
        inp: usize,
        out: usize,
        bias: bool,
    ) -> Result<Linear> {
        let mut layer = self.linear(name, inp, out)?;
        if bias {
            layer.bias = Some(self.tensor(&format!("{name}.bias"), &[out], Fill::Zeros)?);
        }
        Ok(layer)
    }

    /// A bias-free projection `{name}.weight` [out, in]: quantized when the source holds it so.
    pub fn linear(&mut self, name: &str, inp: usize, out: usize) -> Result<Linear> {
        let key = format!("{name}.weight");
        if let ParamSource::Tensors {
            quantized,
            dtype,
            device,
            used,
            problems,
            ..
        } = self
        {
            if let Some(q) = quantized.get(&key) {
                used.insert(key.clone());
                if q.shape() == [out, inp] {
                    let q = q.to_device(*device)?.with_dtype(*dtype);
                    return Linear::from_quantized(q, None);
                }
                problems.misshaped(&key, &q.shape(), &[out, inp]);
            }
        }
        Linear::from_tensors(
            self.tensor(&format!("{name}.weight"), &[out, inp], Fill::Normal)?,
            None,
        )
    }

    /// Projections stored as one weight `{name}.weight` [sum of outs, in], its rows split in
    /// order (Phi-3's `qkv_proj` and `gate_up_proj`). Fresh ones are drawn as the one weight,
    /// so a seed gives transformers' numbers.
    pub fn fused_linears<const N: usize>(
        &mut self,
        name: &str,
        inp: usize,
        outs: [usize; N],
    ) -> Result<[Linear; N]> {
        let key = format!("{name}.weight");
        if let ParamSource::Tensors { quantized, .. } = self {
            if quantized.contains_key(&key) {
                return Err(Error::invalid(
                    "TransformerLm",
                    format!("{key} is stored in blocks; fused projections load only dense"),
                ));
            }
        }
        let total: usize = outs.iter().sum();
        let fused = self.tensor(&key, &[total, inp], Fill::Normal)?;
        let mut start = 0;
        let parts = outs.map(|rows| {
            let part = no_grad(|| fused.narrow(0, start, rows)?.contiguous_copy());
            start += rows;
            part
        });
        let mut out = Vec::with_capacity(N);
        for part in parts {
            let part = part?;
            part.set_requires_grad(true)?;
            out.push(Linear::from_tensors(part, None)?);
        }
        Ok(out
            .try_into()
            .unwrap_or_else(|_| unreachable!("N parts give N layers")))
    }

    /// A bias-free projection under `name`, or under `alt` where the source holds it there
    /// instead (a family's checkpoint name: Mixtral's `block_sparse_moe.gate`).
    pub fn linear_aliased(
        &mut self,
        name: &str,
        alt: &str,
        inp: usize,
        out: usize,
    ) -> Result<Linear> {
        let use_alt = match self {
            ParamSource::Tensors { map, .. } => {
                !map.contains_key(&format!("{name}.weight"))
                    && map.contains_key(&format!("{alt}.weight"))
            }
            ParamSource::Init { .. } => false,
        };
        self.linear(if use_alt { alt } else { name }, inp, out)
    }

    /// Experts' weights stacked, `name` [experts, rows, cols]; where the source holds them
    /// expert by expert instead (transformers' files), expert e's are the tensors `parts(e)`
    /// ([r, cols] each, in row order), read and stacked.
    pub fn experts(
        &mut self,
        name: &str,
        shape: [usize; 3],
        parts: &dyn Fn(usize) -> Vec<(String, usize)>,
    ) -> Result<Tensor> {
        let per_expert = match self {
            ParamSource::Tensors { map, .. } => {
                !map.contains_key(name)
                    && parts(0).first().is_some_and(|(n, _)| map.contains_key(n))
            }
            ParamSource::Init { .. } => false,
        };
        if !per_expert {
            return self.tensor(name, &shape, Fill::Normal);
        }
        let mut stacked = Vec::with_capacity(shape[0]);
        for e in 0..shape[0] {
            let rows = parts(e)
                .into_iter()
                .map(|(n, r)| self.tensor(&n, &[r, shape[2]], Fill::Normal))
                .collect::<Result<Vec<_>>>()?;
            stacked.push(no_grad(|| Tensor::cat(&rows, 0)?.unsqueeze(0))?);
        }
        let t = no_grad(|| Tensor::cat(&stacked, 0))?;
        t.set_requires_grad(true)?;
        Ok(t)
    }

    /// A decoder norm [d_model]: Gemma's scale by 1 + weight and start at zero.
    pub fn rms_norm(&mut self, name: &str, c: &LmConfig) -> Result<RmsNorm> {
        let offset = c.norm_offset();
        let fill = if offset == 0.0 {
            Fill::Ones
        } else {
            Fill::Zeros
        };
        let weight = self.tensor(&format!("{name}.weight"), &[c.d_model], fill)?;
        Ok(RmsNorm::from_tensor(weight, c.norm_eps)?.with_offset(offset))
    }

    /// An RMS norm `{name}.weight` [width] (a head's, for q/k norms).
    pub fn rms_norm_of(&mut self, name: &str, width: usize, eps: f64) -> Result<RmsNorm> {
        RmsNorm::from_tensor(
            self.tensor(&format!("{name}.weight"), &[width], Fill::Ones)?,
            eps,
        )
    }

    /// The token embedding; a fresh one starts its padding row at zero, as transformers'
    /// init does (the row never gets a gradient, so it would keep its draw for good).
    pub fn embedding(&mut self, name: &str, c: &LmConfig) -> Result<Embedding> {
        let weight = self.tensor(
            &format!("{name}.weight"),
            &[c.vocab_size, c.d_model],
            Fill::Normal,
        )?;
        if let (ParamSource::Init { .. }, Some(row)) = (&*self, c.padding_row()) {
            no_grad(|| weight.narrow(0, row, 1)?.zero_())?;
        }
        Ok(Embedding::from_tensor(weight)?.with_padding_idx(c.padding_row()))
    }

    /// Every problem of a load in one error; unused tensors in the map count as problems too,
    /// since a checkpoint with extra weights was made for a different config.
    pub fn finish(self) -> Result<()> {
        let ParamSource::Tensors {
            map,
            quantized,
            used,
            mut problems,
            ..
        } = self
        else {
            return Ok(());
        };
        for name in map.keys().chain(quantized.keys()) {
            if !used.contains(name) {
                problems.unexpected(name);
            }
        }
        problems.into_result("")
    }
}

/// Stands in for a tensor a load lacks, so the build can go on to find every other problem:
/// a single zero broadcast to `shape`, whatever the shape claims.
fn placeholder(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    Tensor::zeros(&[], dtype, device)?.expand(shape)
}

/// The layer indices `model.layers.{i}.` that `map` holds tensors for, counted without
/// trusting any size: at most one entry per tensor.
fn layer_count(map: &BTreeMap<String, Vec<usize>>) -> usize {
    map.keys()
        .filter_map(|k| {
            k.strip_prefix("model.layers.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .map(|i| i.saturating_add(1))
        .max()
        .unwrap_or(0)
}

/// The config's sizes against the weights', before a load allocates anything: the layer count
/// must be the one the tensors have, and every size-bearing tensor that is there must have
/// the shape the config gives it. Tensors that are absent are reported later by `finish`.
pub(super) fn check_config_against(c: &LmConfig, map: &BTreeMap<String, Vec<usize>>) -> Result<()> {
    let mut problems = Vec::new();
    let layers = layer_count(map);
    if c.n_layers != layers {
        problems.push(format!(
            "the config has {} layers (num_hidden_layers), the weights {layers}",
            c.n_layers
        ));
    }
    let kv_width = c.n_kv_heads * c.head_dim();
    let mut expect = |name: &str, what: &str, shape: [usize; 2]| {
        if let Some(t) = map.get(name).filter(|t| t.as_slice() != shape) {
            problems.push(format!(
                "{what}: the config needs {name} of shape {shape:?}, the weights have {t:?}"
            ));
        }
    };
    let (v, d) = (c.vocab_size, c.d_model);
    expect(
        "model.embed_tokens.weight",
        "vocab_size and hidden_size",
        [v, d],
    );
    if !c.tied_embeddings {
        expect("lm_head.weight", "vocab_size and hidden_size", [v, d]);
    }
    expect(
        "model.layers.0.mlp.gate_proj.weight",
        "intermediate_size",
        [c.ffn_hidden, d],
    );
    expect(
        "model.layers.0.self_attn.k_proj.weight",
        "num_key_value_heads",
        [kv_width, d],
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::StateDict(format!(
            "the model config does not match the weights: {}",
            problems.join("; ")
        )))
    }
}
