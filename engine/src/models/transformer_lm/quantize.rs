//! A language model whose projections keep block-quantized weights: loaded that way from a
//! GGUF file, or quantized in place (`quantize`) for decoding or as a QLoRA base. The
//! embedding and the norms stay dense (a gather and vectors gain nothing from blocks), and so
//! does a tied head, which is the embedding.

use super::TransformerLm;
use crate::nn::{prefixed, Linear, Module};
use crate::ops::quant_matmul::BlockFormat;
use crate::{Error, Result, Tensor};

impl TransformerLm {
    /// Every projection, then an untied head: full name and layer.
    pub(super) fn linears(&self) -> Vec<(String, &Linear)> {
        let mut out: Vec<(String, &Linear)> = self
            .projections()
            .into_iter()
            .map(|(name, _, l)| (name, l))
            .collect();
        out.extend(self.lm_head.as_ref().map(|h| ("lm_head".to_string(), h)));
        out
    }

    fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let mut out: Vec<(String, &mut Linear)> = Vec::new();
        for (i, layer) in self.layers.iter_mut().enumerate() {
            for (name, l) in layer.self_attn.projections_mut() {
                out.push((format!("model.layers.{i}.self_attn.{name}"), l));
            }
            for (name, l) in layer.mlp.projections_mut() {
                out.push((format!("model.layers.{i}.mlp.{name}"), l));
            }
        }
        out.extend(self.lm_head.as_mut().map(|h| ("lm_head".to_string(), h)));
        out
    }

    /// Quantizes every projection and an untied head to `format`, in place. Every layer is
    /// checked first (a row must hold whole blocks: 256 values for Q4_K, 32 for Q8_0), so a
    /// refusal leaves the model as it was.
    pub fn quantize(&mut self, format: BlockFormat) -> Result<()> {
        let mut problems = Vec::new();
        for (name, l) in self.linears() {
            if l.quantized_weight().is_some() {
                problems.push(format!("{name} is already quantized"));
            } else if let Err(e) = format.matrix_bytes(l.out_features(), l.in_features()) {
                problems.push(format!("{name}: {e}"));
            }
        }
        if !problems.is_empty() {
            return Err(Error::invalid(
                "quantize",
                format!(
                    "cannot quantize to {}: {}",
                    format.name(),
                    problems.join("; ")
                ),
            ));
        }
        for (_, l) in self.linears_mut() {
            l.quantize(format)?;
        }
        Ok(())
    }

    /// The layers whose weights are quantized, with their format.
    pub fn quantized_layers(&self) -> Vec<(String, BlockFormat)> {
        self.linears()
            .into_iter()
            .filter_map(|(name, l)| l.quantized_weight().map(|q| (name, q.format())))
            .collect()
    }

    /// The quantized weights' blocks, as buffers (`{layer}.weight_blocks`), so moving the
    /// model or checkpointing it carries them.
    pub(super) fn quantized_buffers(&self) -> Vec<(String, Tensor)> {
        self.linears()
            .into_iter()
            .flat_map(|(name, l)| prefixed(&name, l.named_buffers()))
            .collect()
    }

    /// Every weight under its Hugging Face name, with quantized weights dequantized to the
    /// model's dtype: what a dense copy of the model holds (`save_pretrained` and the GGUF
    /// export write this), in the model's order.
    pub fn dense_state(&self) -> Result<Vec<(String, Tensor)>> {
        let mut state: Vec<(String, Tensor)> = self
            .named_parameters()
            .into_iter()
            .map(|(n, t)| (n, t.detach()))
            .collect();
        for (name, l) in self.linears() {
            if l.quantized_weight().is_some() {
                state.push((format!("{name}.weight"), l.weight_values(self.dtype())?));
            }
        }
        Ok(state)
    }
}
