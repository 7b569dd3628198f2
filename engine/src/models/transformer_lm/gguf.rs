//! A llama.cpp GGUF file as a `TransformerLm`, with the tokenizer it carries: the `llama`
//! (also Mistral, and Mixtral with experts), `qwen2`, `qwen3`, `gemma`, `gemma2`, `phi3`,
//! `qwen2moe`, `qwen3moe` and `olmoe` architectures. The file's hyperparameters become the
//! Hugging Face config and its tensors the Hugging Face names (`io::gguf::llama`), so the
//! model is built and checked by the same `from_tensors` as a `transformers` checkpoint.
//!
//! Projection weights in a block format the device's products read stay in it (on a GPU Q8_0,
//! Q4_1 and Q4_K; on the CPU Q8_0 and Q4_1): a decode step then reads a quarter to a half of
//! F16's bytes. Everything else is dequantized on load, to f32 and then `dtype`.

use super::{LmConfig, TransformerLm};
use crate::io::gguf::llama::HfWeight;
use crate::io::gguf::{llama, GgufFile};
use crate::ops::quant_matmul::QuantizedMatrix;
use crate::text::gguf::{read_tokenizer, GgufTokenizer};
use crate::{DType, Device, Error, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// What the file says about itself, beside the weights.
#[derive(Clone, Debug)]
pub struct GgufInfo {
    /// The file's path, as errors give it.
    pub file: String,
    /// The GGUF format version (2 or 3).
    pub version: u32,
    pub architecture: String,
    /// `general.name`.
    pub name: Option<String>,
    /// How many tensors of each ggml type the file stores (`Q4_1`: 210, `F32`: 61, ...).
    pub tensor_types: BTreeMap<String, usize>,
}

/// A loaded GGUF model.
pub struct GgufModel {
    pub model: TransformerLm,
    /// `None` when the file carries no tokenizer.
    pub tokenizer: Option<GgufTokenizer>,
    pub info: GgufInfo,
}

/// Loads the llama-architecture GGUF at `path` in `dtype` on `device` (the argument order of
/// `pretrained::load_pretrained`), keeping block-quantized projections quantized where the
/// device's products read their format.
pub fn load_gguf(path: impl AsRef<Path>, dtype: DType, device: Device) -> Result<GgufModel> {
    load_gguf_with(path, dtype, device, true)
}

/// `load_gguf`, saying whether projection weights in a format the kernels read stay in it
/// (`keep_quantized`) or are dequantized. The hyperparameters and the tokenizer are checked
/// before any tensor is read; tensors are read one at a time.
pub fn load_gguf_with(
    path: impl AsRef<Path>,
    dtype: DType,
    device: Device,
    keep_quantized: bool,
) -> Result<GgufModel> {
    let mut file = GgufFile::open(path)?;
    if file.tensors.is_empty() {
        return Err(crate::io::gguf::format_error(
            file.name(),
            "the file holds a vocabulary only (no tensors); read its tokenizer with \
             text::gguf::load_tokenizer (text::load_gguf in a script)",
        ));
    }
    let hyper = llama::hyperparameters(&file)?;
    let config = LmConfig::from_json(&hyper.hf_config().to_string())?;
    let tokenizer = read_tokenizer(&file.metadata)?;
    let mut tensor_types = BTreeMap::new();
    for t in &file.tensors {
        *tensor_types
            .entry(t.ggml_type.name.to_string())
            .or_insert(0) += 1;
    }
    let info = GgufInfo {
        file: file.name().to_string(),
        version: file.version,
        architecture: file.metadata.str("general.architecture")?.to_string(),
        name: file.metadata.opt_str("general.name")?.map(str::to_string),
        tensor_types,
    };
    // The embedding is a gather, and fused projections are split on load: both dense.
    let keep = |hf: &str, t| {
        keep_quantized
            && hf != "model.embed_tokens.weight"
            && !hf.ends_with("qkv_proj.weight")
            && !hf.ends_with("gate_up_proj.weight")
            && QuantizedMatrix::kept_on(t, device).is_some()
    };
    let (mut dense, mut quantized) = (BTreeMap::new(), BTreeMap::new());
    for (name, w) in llama::hf_tensors(&mut file, &hyper, dtype, keep)? {
        match w {
            HfWeight::Dense(t) => {
                dense.insert(name, t);
            }
            HfWeight::Blocks {
                bytes,
                ggml_type,
                shape,
            } => {
                let format = QuantizedMatrix::format_of(ggml_type).ok_or_else(|| {
                    Error::invalid("load_gguf", format!("{name}: {ggml_type} has no kernels"))
                })?;
                quantized.insert(name, QuantizedMatrix::new(bytes, format, shape)?);
            }
        }
    }
    let mut model = TransformerLm::from_weights(config, &dense, &quantized, dtype, device)?;
    // In F32 only: the blocks give the dense product's logits when the embedding holds their
    // values exactly (`head_blocks`).
    if keep_quantized && model.config.tied_embeddings && dtype == DType::F32 {
        if let Some(blocks) = tied_head_blocks(&mut file, device)? {
            model.set_tied_head_blocks(blocks)?;
        }
    }
    Ok(GgufModel {
        model,
        tokenizer,
        info,
    })
}

/// The embedding's blocks for a tied head's product (`head_blocks`), when the file stores
/// `token_embd` in a format the device's products read.
fn tied_head_blocks<R: std::io::Read + std::io::Seek>(
    file: &mut GgufFile<R>,
    device: Device,
) -> Result<Option<QuantizedMatrix>> {
    const EMBEDDING: &str = "token_embd.weight";
    let Some(info) = file.tensor_info(EMBEDDING).cloned() else {
        return Ok(None);
    };
    let (Some(format), &[rows, cols]) = (
        QuantizedMatrix::kept_on(info.ggml_type, device),
        info.shape().as_slice(),
    ) else {
        return Ok(None);
    };
    let blocks = QuantizedMatrix::new(file.raw(EMBEDDING)?, format, [rows, cols])?;
    Ok(Some(blocks.to_device(device)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::gguf::GgufFile;
    use crate::nn::Module;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/gguf")
            .join(name)
    }

    #[test]
    fn tiny_llama_loads_with_its_untied_head_and_the_source_weights() {
        // Every weight dequantized, to compare with the converter's values.
        let loaded =
            load_gguf_with(fixture("tiny_llama.gguf"), DType::F32, Device::Cpu, false).unwrap();
        let m = &loaded.model;
        assert!(!m.config.tied_embeddings && m.lm_head.is_some());
        assert_eq!((m.config.n_heads, m.config.n_kv_heads), (4, 2));
        let mut expected = GgufFile::open(fixture("tiny_llama_expected.gguf")).unwrap();
        let state = m.state_dict();
        assert_eq!(state.len(), expected.tensors.len());
        for (name, t) in state {
            let e = expected.tensor(&name).unwrap().to_vec::<f32>().unwrap();
            assert_eq!(t.to_vec::<f32>().unwrap(), e, "{name}");
        }
        assert_eq!(loaded.info.name.as_deref(), Some("tiny llama"));
        assert_eq!(loaded.info.tensor_types.get("Q4_0"), Some(&2));
        assert!(loaded.tokenizer.is_some());
    }

    #[test]
    fn projections_kept_in_their_blocks_give_the_dequantized_models_logits() {
        let dense = load_gguf_with(fixture("tiny_llama.gguf"), DType::F32, Device::Cpu, false);
        let kept = load_gguf_with(fixture("tiny_llama.gguf"), DType::F32, Device::Cpu, true);
        let (dense, kept) = (dense.unwrap().model, kept.unwrap().model);
        let names: Vec<String> = kept
            .quantized_layers()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        // Q4_1 keys (rows permuted by llama.cpp's converter), Q8_0 down projections and head;
        // Q4_0/Q5_x have no kernels and the embedding is a gather, so they are dequantized.
        assert_eq!(
            names,
            [
                "model.layers.0.self_attn.k_proj",
                "model.layers.0.mlp.down_proj",
                "model.layers.1.self_attn.k_proj",
                "model.layers.1.mlp.down_proj",
                "lm_head"
            ]
        );
        // Ten rows multiply the dequantized blocks: the dense model's logits exactly. One row
        // (a decode step) takes the CPU's block product, which quantizes the activations to
        // 8 bits as llama.cpp does: close to them, and the same next token.
        let logits = |m: &TransformerLm, ids: Vec<i64>| {
            let n = ids.len();
            let ids = crate::Tensor::from_vec(ids, &[1, n])?;
            crate::no_grad(|| m.forward(&ids))?.to_vec::<f32>()
        };
        let ten = vec![3i64, 17, 250, 9, 0, 41, 5, 77, 12, 8];
        assert_eq!(
            logits(&kept, ten.clone()).unwrap(),
            logits(&dense, ten).unwrap()
        );
        let (k, d) = (
            logits(&kept, vec![17]).unwrap(),
            logits(&dense, vec![17]).unwrap(),
        );
        let scale = d.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = k
            .iter()
            .zip(&d)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst > 0.0,
            "the one-row product did not take the block path"
        );
        assert!(
            worst <= 0.02 * scale,
            "{worst} against logits up to {scale}"
        );
        let argmax = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b]));
        assert_eq!(argmax(&k), argmax(&d));
    }

    #[test]
    fn a_file_whose_tokenizer_is_llamas_sentencepiece_loads_with_it() {
        use crate::io::gguf::{Array, GgufWriter, Value};
        // tiny_llama.gguf's weights and hyperparameters with a `llama` tokenizer instead.
        let mut source = GgufFile::open(fixture("tiny_llama.gguf")).unwrap();
        let mut w = GgufWriter::copy_of(&mut source, |k| !k.starts_with("tokenizer.")).unwrap();
        let tokens = ["<unk>", "<s>", "</s>", "▁", "h", "i", "hi", "▁hi"];
        let tokens = tokens.iter().map(|t| t.to_string()).collect();
        let scores = vec![0.0, 0.0, 0.0, -1.0, -1.0, -1.0, -2.0, -3.0];
        w.add("tokenizer.ggml.model", Value::String("llama".into()))
            .unwrap();
        w.add("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
            .unwrap();
        w.add("tokenizer.ggml.scores", Value::Array(Array::F32(scores)))
            .unwrap();
        let path = std::env::temp_dir().join(format!("rb_gguf_spm_{}.gguf", std::process::id()));
        w.write(&path).unwrap();
        let loaded = load_gguf(&path, DType::F32, Device::Cpu);
        std::fs::remove_file(&path).unwrap();
        let tok = loaded.unwrap().tokenizer.unwrap();
        assert_eq!(tok.model, "llama");
        assert_eq!(
            tok.tokenizer.encode_with_template("hi hi").unwrap(),
            [1, 7, 7]
        );
    }

    #[test]
    fn a_bf16_load_casts_every_weight() {
        let loaded =
            load_gguf_with(fixture("tiny_llama.gguf"), DType::BF16, Device::Cpu, false).unwrap();
        assert!(loaded
            .model
            .state_dict()
            .values()
            .all(|t| t.dtype() == DType::BF16));
    }

    #[test]
    fn a_file_of_another_architecture_is_refused_by_name() {
        let msg = load_gguf(fixture("quants.gguf"), DType::F32, Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(
            msg.contains("quants.gguf") && msg.contains("architecture \"test\""),
            "{msg}"
        );
    }
}
