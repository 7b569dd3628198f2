//! `export_gguf` read back by `load_gguf`: the same logits (F32 exactly, F16 within its
//! rounding, quantized types within a bound), the same tokenizer ids, llama.cpp's names and
//! storage types, and the refusals.

use super::*;
use crate::io::gguf::ggml_type as ty;
use crate::io::gguf::quantize::quantize;
use crate::io::gguf::{quants, GgufFile};
use crate::nn::Module;
use crate::text::{pretokenize::SplitPattern, train_bpe, TrainOptions};
use crate::{DType, Device, Generator, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub(super) fn config(tied: bool) -> LmConfig {
    let mut c = LmConfig::new(300, 64, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 80;
    c.max_seq_len = 64;
    c.init_std = 0.2;
    c.tied_embeddings = tied;
    c
}

/// A random model whose norm weights differ from one (so swapped norms would show).
fn model(tied: bool) -> TransformerLm {
    let m = TransformerLm::new(config(tied), &mut Generator::new(7)).unwrap();
    let mut gen = Generator::new(8);
    let state: BTreeMap<String, Tensor> = m
        .state_dict()
        .into_iter()
        .map(|(k, t)| {
            if k.ends_with("norm.weight") || k.ends_with("layernorm.weight") {
                let noise = Tensor::randn(t.dims(), DType::F32, Some(&mut gen)).unwrap();
                (k, t.add(&noise.mul_scalar(0.3).unwrap()).unwrap())
            } else {
                (k, t)
            }
        })
        .collect();
    TransformerLm::from_tensors(config(tied), &state, DType::F32, Device::Cpu).unwrap()
}

fn out_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rb_gguf_export_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn logits(m: &TransformerLm) -> Vec<f32> {
    let ids: Vec<i64> = (0..24).map(|i| (i * 37 + 5) % 300).collect();
    let x = Tensor::from_vec(ids, &[2, 12]).unwrap();
    m.forward(&x).unwrap().to_vec::<f32>().unwrap()
}

fn export(
    m: &TransformerLm,
    tok: Option<&crate::text::Tokenizer>,
    dtype: GgufDType,
    name: &str,
) -> (GgufModel, GgufExport) {
    let path = out_path(name);
    let opts = GgufExportOptions {
        dtype,
        name: Some("test".into()),
    };
    let report = export_gguf(m, tok, &path, &opts).unwrap();
    (load_gguf(&path, DType::F32, Device::Cpu).unwrap(), report)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn an_f32_export_loads_back_with_identical_weights_and_logits() {
    for tied in [true, false] {
        let m = model(tied);
        let (back, _) = export(&m, None, GgufDType::F32, &format!("f32_{tied}.gguf"));
        assert_eq!(back.model.config.tied_embeddings, tied);
        let (a, b) = (m.state_dict(), back.model.state_dict());
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (k, t) in &a {
            assert_eq!(
                t.to_vec::<f32>().unwrap(),
                b[k].to_vec::<f32>().unwrap(),
                "{k}"
            );
        }
        assert_eq!(logits(&m), logits(&back.model));
    }
}

#[test]
fn an_f16_export_gives_the_logits_of_the_f16_rounded_weights() {
    let m = model(false);
    let rounded: BTreeMap<String, Tensor> = m
        .state_dict()
        .into_iter()
        .map(|(k, t)| {
            let r = if t.dims().len() == 2 {
                t.to_dtype(DType::F16)
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap()
            } else {
                t
            };
            (k, r)
        })
        .collect();
    let m16 =
        TransformerLm::from_tensors(config(false), &rounded, DType::F32, Device::Cpu).unwrap();
    let (back, report) = export(&m, None, GgufDType::F16, "f16.gguf");
    assert_eq!(logits(&back.model), logits(&m16));
    // 2 layers x 7 matrices + embedding + head in F16; 2 x 2 norms + the final norm in F32.
    assert_eq!(report.tensor_types.get("F16"), Some(&16));
    assert_eq!(report.tensor_types.get("F32"), Some(&5));
    assert!(max_abs_diff(&logits(&back.model), &logits(&m)) < 0.05);
}

/// The model with each weight replaced by what its storage type keeps of it.
fn stored(m: &TransformerLm, dtype: GgufDType) -> TransformerLm {
    let state: BTreeMap<String, Tensor> = m
        .state_dict()
        .into_iter()
        .map(|(k, t)| {
            let t_ = storage_type(dtype, t.dims());
            let v = t.to_vec::<f32>().unwrap();
            let back = quants::dequantize(t_, &quantize(t_, &v).unwrap()).unwrap();
            (k, Tensor::from_vec(back, t.dims()).unwrap())
        })
        .collect();
    TransformerLm::from_tensors(m.config.clone(), &state, DType::F32, Device::Cpu).unwrap()
}

#[test]
fn a_quantized_export_loads_as_the_model_of_its_quantized_weights() {
    // Quantization is per row block and the query/key permutation moves whole rows, so the
    // loaded model equals the original with each weight quantized in place, to the bit.
    let m = model(true);
    for dtype in [
        GgufDType::BF16,
        GgufDType::Q8_0,
        GgufDType::Q4_0,
        GgufDType::Q4_K,
    ] {
        let (back, _) = export(&m, None, dtype, &format!("{dtype:?}.gguf"));
        assert_eq!(logits(&back.model), logits(&stored(&m, dtype)), "{dtype:?}");
    }
}

#[test]
fn bf16_and_q8_0_exports_stay_close_to_the_model() {
    let m = model(true);
    let reference = logits(&m);
    let scale = reference.iter().fold(0f32, |a, v| a.max(v.abs()));
    // This random model (weights of std 0.2) amplifies errors: BF16 moves its logits by
    // about 1.4% of the largest, Q8_0 by about 3%.
    for (dtype, bound) in [(GgufDType::BF16, 0.03), (GgufDType::Q8_0, 0.06)] {
        let (back, _) = export(&m, None, dtype, &format!("close_{dtype:?}.gguf"));
        let worst = max_abs_diff(&logits(&back.model), &reference) / scale;
        assert!(worst < bound, "{dtype:?}: {worst}");
    }
}

#[test]
fn names_hyperparameters_and_types_are_llama_cpps() {
    let m = model(false);
    let path = out_path("names.gguf");
    let opts = GgufExportOptions {
        dtype: GgufDType::Q4_K,
        name: None,
    };
    let report = export_gguf(&m, None, &path, &opts).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let names: Vec<&str> = f.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names[0], "token_embd.weight");
    assert_eq!(
        names[1..10],
        [
            "blk.0.attn_k.weight",
            "blk.0.attn_norm.weight",
            "blk.0.attn_output.weight",
            "blk.0.attn_q.weight",
            "blk.0.attn_v.weight",
            "blk.0.ffn_down.weight",
            "blk.0.ffn_gate.weight",
            "blk.0.ffn_norm.weight",
            "blk.0.ffn_up.weight"
        ]
    );
    assert_eq!(
        names[names.len() - 2..],
        ["output.weight", "output_norm.weight"]
    );
    let t = |n: &str| f.tensor_info(n).unwrap().ggml_type;
    // Rows of 64 are not whole 256-blocks: Q4_K falls back to Q5_0; ffn_down's rows are 80
    // wide, not whole 32-blocks either: F16. Norms stay F32.
    assert_eq!(t("blk.0.attn_q.weight"), ty::Q5_0);
    assert_eq!(t("blk.0.ffn_down.weight"), ty::F16);
    assert_eq!(t("blk.0.attn_norm.weight"), ty::F32);
    assert!(report
        .fallbacks
        .contains(&("blk.1.ffn_down.weight".into(), "F16".into())));
    let m_ = &f.metadata;
    assert_eq!(m_.str("general.architecture").unwrap(), "llama");
    for (k, v) in [
        ("context_length", 64),
        ("embedding_length", 64),
        ("block_count", 2),
        ("feed_forward_length", 80),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
        ("vocab_size", 300),
        ("rope.dimension_count", 16),
    ] {
        assert_eq!(m_.u64(&format!("llama.{k}")).unwrap(), v, "{k}");
    }
    assert_eq!(m_.opt_f64("llama.rope.freq_base").unwrap(), Some(10000.0));
}

/// Without a tokenizer the file still names a tokenizer model, llama.cpp's "none" (it
/// refuses a file without the key), with a warning, and reads back with no tokenizer.
#[test]
fn an_export_without_a_tokenizer_says_none_and_warns() {
    let path = out_path("no_tokenizer.gguf");
    let r = export_gguf(&model(true), None, &path, &GgufExportOptions::default()).unwrap();
    assert!(
        r.warnings.iter().any(|w| w.contains("\"none\"")),
        "{:?}",
        r.warnings
    );
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.metadata.str("tokenizer.ggml.model").unwrap(), "none");
    assert!(crate::text::gguf::read_tokenizer(&f.metadata)
        .unwrap()
        .is_none());
}

#[test]
fn a_tied_export_has_no_output_weight() {
    let path = out_path("tied.gguf");
    export_gguf(&model(true), None, &path, &GgufExportOptions::default()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert!(
        f.tensor_info("output.weight").is_none() && f.tensor_info("token_embd.weight").is_some()
    );
}

#[test]
fn q4_k_applies_to_rows_of_256() {
    let mut c = LmConfig::new(40, 256, 1, 2);
    c.ffn_hidden = 512;
    let m = TransformerLm::new(c, &mut Generator::new(1)).unwrap();
    let path = out_path("q4k.gguf");
    let r = export_gguf(
        &m,
        None,
        &path,
        &GgufExportOptions {
            dtype: GgufDType::Q4_K,
            name: None,
        },
    )
    .unwrap();
    assert!(r.fallbacks.is_empty(), "{:?}", r.fallbacks);
    assert_eq!(r.tensor_types.get("Q4_K"), Some(&8));
}

fn texts() -> Vec<String> {
    let base = "The quick brown fox jumps over the lazy dog. It's 2024, and I'll pay $1,234.56! \
                fn main() { println!(\"hi\"); }  \n\n  tabs\tand    spaces; naïve café 東京 🦙";
    (0..20)
        .map(|i| format!("{base} {i} {}", base.to_uppercase()))
        .collect()
}

fn tokenizer(pattern: SplitPattern) -> crate::text::Tokenizer {
    let opts = TrainOptions {
        vocab_size: 300,
        pattern,
        ..TrainOptions::default()
    };
    train_bpe(texts(), &opts).unwrap()
}

#[test]
fn a_byte_level_tokenizer_round_trips_with_the_same_ids() {
    for (pattern, pre) in [
        (SplitPattern::Gpt2, "gpt-2"),
        (SplitPattern::Llama3, "llama-bpe"),
    ] {
        let tok = tokenizer(pattern);
        let (back, _) = export(
            &model(true),
            Some(&tok),
            GgufDType::F16,
            &format!("tok_{pre}.gguf"),
        );
        let g = back.tokenizer.unwrap();
        assert_eq!(g.pre, pre);
        assert_eq!(g.eos_id, tok.eos_id());
        let probe = "Hello <|endoftext|> world 12345 it's  \n\t x+=1; ünïcödé 🦙🦙 東京";
        for text in texts().iter().map(String::as_str).chain([probe]) {
            assert_eq!(
                g.tokenizer.encode(text).unwrap(),
                tok.encode(text).unwrap(),
                "{pre}: {text:?}"
            );
        }
    }
}

#[test]
fn bad_requests_are_refused_by_name() {
    let msg = GgufDType::parse("q6_k").unwrap_err().to_string();
    assert!(msg.contains("q6_k") && msg.contains("q4_k"), "{msg}");
    let mut c = config(true);
    c.bidirectional = true;
    let m = TransformerLm::new(c, &mut Generator::new(0)).unwrap();
    let msg = export_gguf(&m, None, out_path("bi.gguf"), &GgufExportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("bidirectional"), "{msg}");
    // A tokenizer with more ids than the model's embedding.
    let small = TransformerLm::new(LmConfig::new(100, 16, 1, 2), &mut Generator::new(0)).unwrap();
    let msg = export_gguf(
        &small,
        Some(&tokenizer(SplitPattern::Gpt2)),
        out_path("v.gguf"),
        &GgufExportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("300 ids") && msg.contains("100"), "{msg}");
}

#[test]
fn a_pre_tokenizer_llama_cpp_does_not_know_is_refused() {
    let json = r#"{"version":"1.0","added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]},
        "post_processor":null,"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
        "model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
        "vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]}}"#;
    let tok = crate::text::Tokenizer::from_json_str(json, "t.json").unwrap();
    let m = TransformerLm::new(LmConfig::new(8, 16, 1, 2), &mut Generator::new(0)).unwrap();
    let msg = export_gguf(
        &m,
        Some(&tok),
        out_path("digits.gguf"),
        &GgufExportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("pre-tokenizer") && msg.contains("Digits") && msg.contains("llama-bpe"),
        "{msg}"
    );
}
