//! A tied head's product from the file's blocks. A GGUF model whose output projection is its
//! token embedding (SmolLM2, Gemma, Qwen's small models) stores that matrix once, often as
//! Q8_0; the embedding's lookups read it dense, but the head's product reads all of it at every
//! decode step, and reading the blocks instead of F32 reads a quarter of the bytes (llama.cpp
//! multiplies by `token_embd`'s blocks too). The product reads the activations as F32
//! (`QuantizedMatrix::with_exact_activations`), so the logits are the dense product's up to
//! the order of the sums: rounding them to 8 bits as llama.cpp does changed a greedy reply.
//!
//! They are attached only to an F32 embedding (in BF16 the dense product would multiply the
//! embedding rounded to BF16, and the two paths would disagree), and stand for it only while it
//! holds the values they were read with: the same storage, not written since. A fine-tuned,
//! reloaded, moved or cast embedding turns them off, and so does a product that records a
//! gradient for it or a head set since; the dense product runs then.

use super::TransformerLm;
use crate::backend::StorageCell;
use crate::ops::quant_matmul::QuantizedMatrix;
use crate::{Error, Result, Tensor};
use std::sync::{Arc, Weak};

pub(super) struct HeadBlocks {
    blocks: QuantizedMatrix,
    storage: Weak<StorageCell>,
    version: u64,
}

impl HeadBlocks {
    /// The blocks while `weight` still holds what they were read with.
    fn current(&self, weight: &Tensor) -> Option<&QuantizedMatrix> {
        let same = Weak::ptr_eq(&self.storage, &Arc::downgrade(weight.storage_cell()))
            && weight.storage_version() == self.version
            && self.blocks.device() == weight.device();
        same.then_some(&self.blocks)
    }
}

impl TransformerLm {
    /// Lets the tied head multiply by `blocks`, the embedding's values as a file stored them
    /// ([vocab, d_model], on the model's device), while the embedding is unchanged.
    pub fn set_tied_head_blocks(&mut self, blocks: QuantizedMatrix) -> Result<()> {
        let weight = &self.embed_tokens.weight;
        if self.lm_head.is_some() {
            return Err(Error::invalid(
                "tied head blocks",
                "the model has its own head; its weight is quantized as a layer",
            ));
        }
        if blocks.shape().as_slice() != weight.shape() || blocks.device() != weight.device() {
            return Err(Error::invalid(
                "tied head blocks",
                format!(
                    "blocks {:?} on {:?} stand for an embedding {:?} on {:?}",
                    blocks.shape(),
                    blocks.device(),
                    weight.shape(),
                    weight.device()
                ),
            ));
        }
        self.head_blocks = Some(HeadBlocks {
            storage: Arc::downgrade(weight.storage_cell()),
            version: weight.storage_version(),
            blocks: blocks.with_exact_activations(),
        });
        Ok(())
    }

    /// The blocks the tied head multiplies `rows` rows by, if they still stand for the
    /// embedding, no gradient is wanted for it, and they read those rows directly (a product
    /// that would dequantize them all is the dense product with extra work).
    pub(super) fn tied_head_blocks(&self, rows: usize) -> Option<&QuantizedMatrix> {
        let weight = &self.embed_tokens.weight;
        // A head set since (the model untied) is the head.
        if self.lm_head.is_some() || weight.requires_grad() && crate::autograd::is_grad_enabled() {
            return None;
        }
        self.head_blocks
            .as_ref()?
            .current(weight)
            .filter(|b| b.streams(rows))
    }
}

#[cfg(test)]
mod tests {
    use super::super::gguf_export_tests::config;
    use super::super::{export_gguf, load_gguf, GgufDType, GgufExportOptions};
    use super::*;
    use crate::{no_grad, DType, Device, Generator};

    /// A tied model stored as Q8_0 (its embedding too) and loaded back with its blocks kept.
    fn tied_q8_0(name: &str) -> TransformerLm {
        let m = TransformerLm::new(config(true), &mut Generator::new(7)).unwrap();
        let dir = std::env::temp_dir().join(format!("rb_head_blocks_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let opts = GgufExportOptions {
            dtype: GgufDType::Q8_0,
            name: None,
        };
        export_gguf(&m, None, &path, &opts).unwrap();
        load_gguf(&path, DType::F32, Device::Cpu).unwrap().model
    }

    fn hidden() -> Tensor {
        let values = (0..64)
            .map(|i| ((i * 29 % 17) as f32 - 8.0) / 5.0)
            .collect();
        Tensor::from_vec(values, &[1, 1, 64]).unwrap()
    }

    fn logits(m: &TransformerLm) -> Vec<f32> {
        no_grad(|| m.project(&hidden()))
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    }

    #[test]
    fn a_tied_q8_0_head_reads_the_blocks_and_gives_the_dense_products_logits() {
        let mut m = tied_q8_0("logits.gguf");
        // Without no_grad the embedding (a parameter) would want its gradient.
        assert!(m.tied_head_blocks(1).is_none());
        assert!(
            no_grad(|| m.tied_head_blocks(1).is_some()),
            "the blocks were not kept"
        );
        let from_blocks = logits(&m);
        m.head_blocks = None;
        let dense = logits(&m);
        for (i, (b, d)) in from_blocks.iter().zip(&dense).enumerate() {
            assert!(
                (b - d).abs() <= 1e-5 * (1.0 + d.abs()),
                "logit {i}: {b} vs {d}"
            );
        }
    }

    #[test]
    fn a_written_embedding_turns_the_blocks_off() {
        let m = tied_q8_0("written.gguf");
        let before = logits(&m);
        no_grad(|| m.embed_tokens.weight.mul_scalar_(2.0)).unwrap();
        assert!(no_grad(|| m.tied_head_blocks(1).is_none()));
        let after = logits(&m);
        for (i, (a, b)) in after.iter().zip(&before).enumerate() {
            assert!(
                (a - 2.0 * b).abs() <= 1e-4 * (1.0 + a.abs()),
                "logit {i}: {a} vs 2 × {b}"
            );
        }
    }

    #[test]
    fn a_head_set_since_is_the_head() {
        let mut m = tied_q8_0("untied.gguf");
        let weight = Tensor::zeros(&[300, 64], DType::F32, Device::Cpu).unwrap();
        m.lm_head = Some(crate::nn::Linear::from_tensors(weight, None).unwrap());
        assert!(no_grad(|| m.tied_head_blocks(1).is_none()));
        assert!(logits(&m).iter().all(|&v| v == 0.0));
    }

    #[test]
    fn blocks_of_another_shape_are_refused() {
        let mut m = tied_q8_0("shape.gguf");
        let other = QuantizedMatrix::quantize(
            &Tensor::zeros(&[300, 32], DType::F32, Device::Cpu).unwrap(),
            crate::ops::quant_matmul::BlockFormat::Q8_0,
        )
        .unwrap();
        let err = m.set_tied_head_blocks(other).unwrap_err().to_string();
        assert!(
            err.contains("[300, 32]") && err.contains("[300, 64]"),
            "{err}"
        );
    }
}
