//! `TransformerLm`: a LLaMA-family decoder (or, with `bidirectional`, an encoder of the same
//! shape). Parameter names are Hugging Face's (`model.layers.0.self_attn.q_proj.weight`), so
//! a state dict maps one to one onto `LlamaForCausalLM`.

use super::attention::{Sight, Step, Visibility};
use super::block::Block;
use super::head_blocks::HeadBlocks;
use super::kv_cache::KvCache;
use super::lora::LoraConfig;
use super::mask::step_bias;
use super::params::{check_config_against, ParamSource};
use super::rope::{Positions, Rotary};
use super::LmConfig;
use crate::nn::Routing;
use crate::nn::{prefixed, Embedding, Linear, Module, RmsNorm, Summary};
use crate::ops::pre_norm::{Angles, CacheWrite, Stream};
use crate::ops::quant_matmul::QuantizedMatrix;
use crate::{DType, Device, Error, Generator, Result, Tensor};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// The dtype matrix products run in: `Auto` is BF16 mixed precision on CUDA and F32 on the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Auto,
    /// No autocast: products run in the parameters' dtype.
    Full,
    Mixed(DType),
}

pub struct TransformerLm {
    pub config: LmConfig,
    pub embed_tokens: Embedding,
    pub layers: Vec<Block>,
    pub norm: RmsNorm,
    /// `None` when the output projection is the embedding (tied).
    pub lm_head: Option<Linear>,
    rope: Rotary,
    precision: Precision,
    /// The adapters' config while the projections carry LoRA adapters (`add_lora`).
    pub(super) lora: Option<LoraConfig>,
    training: bool,
    /// The tied head's product from the file's blocks (`head_blocks`), while they stand for
    /// the embedding.
    pub(super) head_blocks: Option<HeadBlocks>,
}

/// What every constructor checks first: the config's sizes and a float parameter dtype.
fn check_setup(config: &LmConfig, dtype: DType) -> Result<()> {
    config.validate()?;
    if !dtype.is_float() {
        return Err(Error::invalid(
            "TransformerLm",
            format!("parameters must be a float dtype, not {dtype}"),
        ));
    }
    Ok(())
}

impl TransformerLm {
    /// Random init (N(0, init_std), norms at one), F32 on the CPU.
    pub fn new(config: LmConfig, gen: &mut Generator) -> Result<Self> {
        Self::new_on(config, gen, DType::F32, Device::Cpu)
    }

    /// Random init directly in `dtype` on `device`.
    pub fn new_on(
        config: LmConfig,
        gen: &mut Generator,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        check_setup(&config, dtype)?;
        let std = config.init_std;
        Self::build(config, ParamSource::init(gen, std, dtype, device))
    }

    /// A model over named tensors in Hugging Face's names, cast to `dtype` on `device`. Every
    /// missing, mis-shaped or unexpected name is reported in one error.
    pub fn from_tensors(
        config: LmConfig,
        tensors: &BTreeMap<String, Tensor>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        Self::from_weights(config, tensors, &BTreeMap::new(), dtype, device)
    }

    /// `from_tensors` with some projection weights kept in block formats (a GGUF file's):
    /// those layers compute from the blocks, the rest from `tensors` in `dtype`.
    pub fn from_weights(
        config: LmConfig,
        tensors: &BTreeMap<String, Tensor>,
        quantized: &BTreeMap<String, QuantizedMatrix>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        check_setup(&config, dtype)?;
        let shapes: BTreeMap<String, Vec<usize>> = tensors
            .iter()
            .map(|(n, t)| (n.clone(), t.shape().to_vec()))
            .chain(
                quantized
                    .iter()
                    .map(|(n, q)| (n.clone(), q.shape().to_vec())),
            )
            .collect();
        check_config_against(&config, &shapes)?;
        Self::build(
            config,
            ParamSource::tensors(tensors, quantized, dtype, device),
        )
    }

    fn build(config: LmConfig, mut params: ParamSource) -> Result<Self> {
        let embed_tokens = params.embedding("model.embed_tokens", &config)?;
        let layers = (0..config.n_layers)
            .map(|i| Block::build(&config, i, &format!("model.layers.{i}"), &mut params))
            .collect::<Result<Vec<_>>>()?;
        let norm = params.rms_norm("model.norm", &config)?;
        let lm_head = (!config.tied_embeddings)
            .then(|| params.linear("lm_head", config.d_model, config.vocab_size))
            .transpose()?;
        params.finish()?;
        Ok(TransformerLm {
            rope: Rotary::scaled(
                config.head_dim(),
                config.max_seq_len,
                config.rope_theta,
                config.rope_scaling.as_ref(),
            ),
            config,
            embed_tokens,
            layers,
            norm,
            lm_head,
            precision: Precision::Auto,
            lora: None,
            training: true,
            head_blocks: None,
        })
    }

    /// A copy with every parameter cast to `dtype` (BF16 weights for inference), adapters
    /// included.
    pub fn with_dtype(&self, dtype: DType) -> Result<Self> {
        if let Some((name, format)) = self.quantized_layers().first() {
            return Err(Error::invalid(
                "TransformerLm",
                format!(
                    "{name} holds {} blocks, which keep their own precision; a quantized \
                     model cannot be cast",
                    format.name()
                ),
            ));
        }
        let state = self.state_dict();
        let mut m = Self::from_tensors_with_lora(
            self.config.clone(),
            &state,
            self.lora.as_ref(),
            dtype,
            self.device(),
        )?;
        m.precision = self.precision;
        Ok(m)
    }

    /// Every projection of every layer: its full name (`model.layers.0.self_attn.q_proj`), its
    /// module name (`q_proj`) and the layer. The head is not among them.
    pub fn projections(&self) -> Vec<(String, &'static str, &Linear)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            for (name, l) in layer.self_attn.projections() {
                out.push((format!("model.layers.{i}.self_attn.{name}"), name, l));
            }
            for (name, l) in layer.mlp.projections() {
                out.push((format!("model.layers.{i}.mlp.{name}"), name, l));
            }
        }
        out
    }

    pub fn projections_mut(&mut self) -> Vec<(String, &'static str, &mut Linear)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter_mut().enumerate() {
            for (name, l) in layer.self_attn.projections_mut() {
                out.push((format!("model.layers.{i}.self_attn.{name}"), name, l));
            }
            for (name, l) in layer.mlp.projections_mut() {
                out.push((format!("model.layers.{i}.mlp.{name}"), name, l));
            }
        }
        out
    }

    pub fn device(&self) -> Device {
        self.embed_tokens.weight.device()
    }

    pub fn dtype(&self) -> DType {
        self.embed_tokens.weight.dtype()
    }

    /// The rotary tables' source (the ONNX export writes them out).
    pub(super) fn rotary(&self) -> &Rotary {
        &self.rope
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn set_precision(&mut self, p: Precision) {
        self.precision = p;
    }

    /// The autocast dtype for this model's products on its device.
    pub(super) fn autocast_dtype(&self) -> Option<DType> {
        match (self.precision, self.device()) {
            (Precision::Auto, Device::Cuda(_)) if self.dtype() == DType::F32 => Some(DType::BF16),
            (Precision::Mixed(d), _) => Some(d),
            _ => None,
        }
    }

    /// What the new queries of a call see, for the layers that attend every key (`full`) and
    /// for those with a sliding window: an additive mask for a left-padded batch (rows differ,
    /// so the fused causal path cannot take it), for a window that hides keys of this call,
    /// and for soft-capped layers (no fused kernel caps); else the fused paths' causal or
    /// all. Biases are in the scores' dtype: the products' under mixed precision, else the
    /// parameters'.
    fn masks(&self, t: usize, offset: usize, pads: &[usize]) -> Result<[Option<Tensor>; 2]> {
        let padded = pads.iter().any(|&p| p > 0);
        let dtype = self.autocast_dtype().unwrap_or(self.dtype());
        let of_kind = |windowed: bool| -> Result<Option<Tensor>> {
            let Some(attn) = self
                .layers
                .iter()
                .map(|l| &l.self_attn)
                .find(|a| a.window().is_some() == windowed)
            else {
                return Ok(None);
            };
            let capped = attn.softcaps() && attn.is_causal() && t > 1;
            match padded || capped || attn.window_hides(offset + t).is_some() {
                true => attn
                    .mask_spec(t, offset, pads)
                    .build_bias(self.device(), dtype)
                    .map(Some),
                false => Ok(None),
            }
        };
        Ok([of_kind(false)?, of_kind(true)?])
    }

    fn check_ids(&self, ids: &Tensor) -> Result<()> {
        if ids.rank() != 2 || ids.dtype().is_float() {
            return Err(Error::invalid(
                "TransformerLm",
                format!(
                    "token ids must be integers [batch, seq], got {} {:?}",
                    ids.dtype(),
                    ids.shape()
                ),
            ));
        }
        if ids.shape()[1] == 0 {
            return Err(Error::invalid("TransformerLm", "the sequence is empty"));
        }
        Ok(())
    }

    /// The final normed hidden states [B, T, d_model] for ids [B, T], in the residual stream's
    /// dtype; with a cache, the ids continue the cached sequences and their keys and values are
    /// appended.
    pub fn hidden(&self, ids: &Tensor, cache: Option<&mut KvCache>) -> Result<Tensor> {
        self.hidden_in(ids, cache, false, None)
    }

    /// `hidden` in the dtype the head's product reads (`head_reads_products`): under mixed
    /// precision the final norm writes BF16 itself, as every layer's norm does, instead of F32
    /// states that the head's product then casts (and whose gradient it casts back).
    pub(crate) fn hidden_for_head(
        &self,
        ids: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        self.hidden_in(ids, cache, self.head_reads_products(), None)
    }

    /// Whether the head's product reads its input in the products' dtype: a dense head does; a
    /// quantized one reads F32 (`project`).
    pub(super) fn head_reads_products(&self) -> bool {
        self.lm_head
            .as_ref()
            .is_none_or(|h| h.quantized_weight().is_none())
    }

    pub(super) fn hidden_in(
        &self,
        ids: &Tensor,
        cache: Option<&mut KvCache>,
        for_products: bool,
        routing: Option<&RefCell<Vec<Routing>>>,
    ) -> Result<Tensor> {
        self.check_ids(ids)?;
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let ids = ids.to_device(self.device())?;
        crate::amp::autocast(self.autocast_dtype(), || {
            let offset = cache.as_ref().map_or(0, |c| c.len());
            let pads: Vec<usize> = cache.as_ref().map_or(Vec::new(), |c| c.pads().to_vec());
            if let Some(c) = cache.as_ref() {
                c.check_room(t)?;
                if c.pads().len() != b {
                    return Err(Error::invalid(
                        "TransformerLm",
                        format!("the cache holds {} sequences, the ids {b}", c.pads().len()),
                    ));
                }
            } else if t > self.config.max_seq_len {
                return Err(Error::invalid(
                    "TransformerLm",
                    format!("{t} tokens exceed max_seq_len {}", self.config.max_seq_len),
                ));
            }
            let per_row;
            let positions = if pads.iter().any(|&p| p > 0) {
                let pos: Vec<i64> = pads
                    .iter()
                    .flat_map(|&p| (offset..offset + t).map(move |i| i.saturating_sub(p) as i64))
                    .collect();
                per_row = Tensor::from_vec(pos, &[b, t])?.to_device(self.device())?;
                Positions::PerRow {
                    ids: &per_row,
                    end: offset + t,
                }
            } else {
                Positions::From(offset)
            };
            let reach = cache.as_ref().map_or(0, |c| c.capacity());
            let (cos, sin) = self
                .rope
                .angles_reaching(t, self.device(), &positions, reach)?;
            let masks = self.masks(t, offset, &pads)?;
            let causal = self.layers.first().is_some_and(|l| l.self_attn.is_causal());
            let [full, windowed] = masks.each_ref().map(|bias| match bias {
                Some(bias) => Visibility::Bias(bias),
                None if causal && t > 1 => Visibility::Causal,
                None => Visibility::All,
            });
            let sight = Sight { full, windowed };
            let kv = cache.as_deref();
            let angles = Angles {
                cos: &cos,
                sin: &sin,
            };
            let cache_for = |i| kv.map(|c| c.appending(i));
            let out = self.decoder(&ids, angles, sight, cache_for, for_products, routing)?;
            if let Some(c) = cache {
                c.advance(t);
            }
            Ok(out)
        })
    }

    /// The decoder from token ids to the final norm's output: the embeddings, every layer,
    /// the final norm (in the head's dtype under `for_products`). One loop for training, a
    /// prompt and a decode step; `cache_for(i)` says where layer i writes its keys and values.
    fn decoder<'c>(
        &self,
        ids: &Tensor,
        angles: Angles,
        sight: Sight,
        cache_for: impl Fn(usize) -> Option<CacheWrite<'c>>,
        for_products: bool,
        routing: Option<&RefCell<Vec<Routing>>>,
    ) -> Result<Tensor> {
        let mut embedded = self.embed_tokens.forward(ids)?;
        if let Some(scale) = self.config.embedding_scale() {
            // Gemma's normalizer, rounded to the embeddings' dtype as transformers rounds it.
            embedded = embedded.mul_scalar(scale)?;
        }
        let mut x = Stream::new(embedded);
        for (i, layer) in self.layers.iter().enumerate() {
            let step = Step {
                routing,
                angles,
                visibility: match layer.self_attn.window() {
                    Some(_) => sight.windowed,
                    None => sight.full,
                },
                cache: cache_for(i),
            };
            x = layer.forward(x, &step)?;
        }
        let (scale, eps) = self.norm.parts()?;
        x.finish((&scale, eps), for_products)
    }

    /// The final normed hidden states [B, 1, d_model] of one new token per row (ids [B, 1] on
    /// the model's device), in the dtype the head reads (`hidden_for_head`), written into the
    /// cache at its device cursor. Nothing here reads a
    /// position on the host, so the step can be captured once in a CUDA graph and replayed at
    /// every position (after `KvCache::sync_cursor`). The caller checks the room first.
    pub fn decode_hidden(&self, ids: &Tensor, cache: &KvCache) -> Result<Tensor> {
        self.check_ids(ids)?;
        let b = ids.shape()[0];
        if ids.shape()[1] != 1 || cache.pads().len() != b || ids.device() != self.device() {
            return Err(Error::invalid(
                "decode step",
                format!(
                    "takes ids [{}, 1] on {:?} for the cache's sequences, got {:?} on {:?}",
                    cache.pads().len(),
                    self.device(),
                    ids.shape(),
                    ids.device()
                ),
            ));
        }
        crate::amp::autocast(self.autocast_dtype(), || {
            // Row b's position is the cursor less its padding, on the device.
            let rows = cache
                .cursor()
                .sub(cache.first_keys())?
                .reshape_to(&[b, 1])?;
            let (cos, sin) = self.rope.gather(self.device(), &rows, cache.capacity())?;
            let angles = Angles {
                cos: &cos,
                sin: &sin,
            };
            // A sliding window moves each row's first visible key up to cursor - window + 1
            // once the cache can hold more than the window.
            let windowed;
            let first_windowed = match self
                .layers
                .iter()
                .find_map(|l| l.self_attn.window_hides(cache.capacity()))
            {
                Some(w) => {
                    windowed = cache
                        .cursor()
                        .sub_scalar((w - 1) as f64)?
                        .maximum(cache.first_keys())?;
                    &windowed
                }
                None => cache.first_keys(),
            };
            let bounds = [cache.first_keys(), first_windowed];
            // Soft-capped layers read the bounds as a bias over the whole cache.
            let capped = self.layers.iter().any(|l| l.self_attn.softcaps());
            let dtype = self.autocast_dtype().unwrap_or(self.dtype());
            let bias = |first| step_bias(cache.key_positions(), first, cache.cursor(), dtype);
            let biases = match capped {
                true => Some([bias(bounds[0])?, bias(bounds[1])?]),
                false => None,
            };
            let [full, windowed] = match &biases {
                Some(b) => [Visibility::Bias(&b[0]), Visibility::Bias(&b[1])],
                None => bounds.map(|first| Visibility::Window {
                    first,
                    last: cache.cursor(),
                }),
            };
            let sight = Sight { full, windowed };
            let cache_for = |i| Some(cache.at_cursor(i));
            self.decoder(
                ids,
                angles,
                sight,
                cache_for,
                self.head_reads_products(),
                None,
            )
        })
    }

    /// A cache for `batch` sequences of up to `capacity` positions, in the dtype the keys
    /// and values are computed in.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        let dtype = self.autocast_dtype().unwrap_or(self.dtype());
        KvCache::new(&self.config, batch, capacity, dtype, self.device())
    }
}

impl Module for TransformerLm {
    /// ids [B, T] -> logits [B, T, vocab].
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        self.project(&self.hidden_for_head(ids, None)?)
    }

    /// The parameters' part, the precision, and the rotary tables' rows: the tables are made
    /// again (elsewhere) when a longer sequence needs more rows, and a graph that read the old
    /// ones must not replay.
    fn capture_key(&self, key: &mut crate::capture::Key) {
        crate::nn::parameters_key(self, key);
        key.add("precision", self.precision)
            .add("rotary_rows", self.rope.rows());
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = prefixed("model.embed_tokens", self.embed_tokens.named_parameters());
        for (i, layer) in self.layers.iter().enumerate() {
            out.extend(prefixed(
                &format!("model.layers.{i}"),
                layer.named_parameters(),
            ));
        }
        out.extend(prefixed("model.norm", self.norm.named_parameters()));
        if let Some(head) = &self.lm_head {
            out.extend(prefixed("lm_head", head.named_parameters()));
        }
        out
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        self.quantized_buffers()
    }

    /// Reaches the projections, whose LoRA adapters apply dropout only in train mode.
    fn train(&mut self, on: bool) {
        self.training = on;
        for (_, _, l) in self.projections_mut() {
            l.train(on);
        }
    }

    crate::nn::training_field!();

    /// The tree in Hugging Face's names; the decoder layers fold into `(0-N): N x Block`.
    fn summary(&self) -> Summary {
        let c = &self.config;
        let detail = format!(
            "{}, vocab={}, d_model={}, layers={}, heads={}, kv_heads={}, ffn={}, max_seq_len={}",
            c.family.model_type(),
            c.vocab_size,
            c.d_model,
            c.n_layers,
            c.n_heads,
            c.n_kv_heads,
            c.ffn_hidden,
            c.max_seq_len
        );
        let blocks = self.layers.iter().map(Block::summary).collect();
        let head = match &self.lm_head {
            Some(head) => head.summary(),
            None => Summary::leaf("tied to embed_tokens", 0),
        };
        Summary::node(
            "TransformerLm",
            vec![
                ("embed_tokens".into(), self.embed_tokens.summary()),
                ("layers".into(), Summary::indexed("ModuleList", blocks)),
                ("norm".into(), self.norm.summary()),
                ("lm_head".into(), head),
            ],
        )
        .with_detail(detail)
    }
}
