//! GGUF export checked by llama.cpp's own Python reader: each exported file is read by the
//! `gguf` package through `tests/fixtures/gguf/read_with_gguf.py`, which compares every tensor
//! with an F32 export of the same model (bit-equal for F16/BF16/F32 and for the quantizers the
//! package ports bit-exactly: Q8_0, Q4_0, Q5_0; within the format's error for Q4_K) and returns
//! the metadata it read. The Python is `RB_GGUF_PYTHON`; unset, the tests print SKIPPED. With
//! `RB_GGML_LIB` naming a llama.cpp build's `libggml-base.so`, Q4_K bytes are also compared
//! with ggml's own quantizer (`ggml_quantize_chunk`).

use rusting_brain::models::transformer_lm::{
    export_gguf, GgufDType, GgufExportOptions, LmConfig, TransformerLm,
};
use rusting_brain::text::{train_bpe, SplitPattern, Tokenizer, TrainOptions};
use rusting_brain::Generator;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python with `gguf` importable, or `None` after printing SKIPPED.
fn gguf_python(test: &str) -> Option<String> {
    let Ok(py) = std::env::var("RB_GGUF_PYTHON") else {
        eprintln!("SKIPPED {test}: RB_GGUF_PYTHON is not set (a Python with the gguf package)");
        return None;
    };
    let ok = Command::new(&py)
        .args(["-c", "import gguf, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "RB_GGUF_PYTHON={py} cannot import gguf and numpy");
    Some(py)
}

/// A model whose matrices have rows of 256 (Q4_K applies) and one of 320 (Q4_K falls back to
/// Q5_0), with a byte-level tokenizer.
fn model_and_tokenizer(pattern: SplitPattern) -> (TransformerLm, Tokenizer) {
    let text = "The quick brown fox jumps over the lazy dog; fn main() { let x = 42; } 東京 🦙\n";
    let texts = (0..30).map(|i| format!("{text} {i} {}", text.repeat(i % 3 + 1)));
    let opts = TrainOptions {
        vocab_size: 320,
        pattern,
        ..TrainOptions::default()
    };
    let tok = train_bpe(texts, &opts).unwrap();
    let mut c = LmConfig::new(320, 256, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 320;
    c.tied_embeddings = false;
    let model = TransformerLm::new(c, &mut Generator::new(3)).unwrap();
    (model, tok)
}

fn export(m: &TransformerLm, tok: &Tokenizer, dtype: GgufDType, path: &Path) {
    let opts = GgufExportOptions {
        dtype,
        name: Some("gguf export test".into()),
    };
    export_gguf(m, Some(tok), path, &opts).unwrap();
}

/// The script's summary of `path` against `reference`; fails the test if the script does.
fn read_with_gguf(py: &str, path: &Path, reference: &Path) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/gguf/read_with_gguf.py");
    let out_json = path.with_extension("json");
    let out = Command::new(py)
        .arg(script)
        .arg(path)
        .arg(reference)
        .arg(&out_json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "read_with_gguf.py failed on {}:\n{}\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(out_json).unwrap()).unwrap()
}

#[test]
fn every_dtype_reads_back_in_the_gguf_package_as_written() {
    let Some(py) = gguf_python("every_dtype_reads_back_in_the_gguf_package_as_written") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (m, tok) = model_and_tokenizer(SplitPattern::Gpt2);
    let reference = dir.path().join("f32.gguf");
    export(&m, &tok, GgufDType::F32, &reference);
    for (dtype, main_type) in [
        (GgufDType::F32, "F32"),
        (GgufDType::F16, "F16"),
        (GgufDType::BF16, "BF16"),
        (GgufDType::Q8_0, "Q8_0"),
        (GgufDType::Q4_0, "Q4_0"),
        (GgufDType::Q4_K, "Q4_K"),
    ] {
        let path = dir.path().join(format!("{main_type}.gguf"));
        export(&m, &tok, dtype, &path);
        let s = read_with_gguf(&py, &path, &reference);
        let tensors = s["tensors"].as_object().unwrap();
        // Embedding, head, final norm, and 9 tensors per layer.
        assert_eq!(tensors.len(), 3 + 2 * 9, "{main_type}");
        let ty = |n: &str| tensors[n]["type"].as_str().unwrap().to_string();
        assert_eq!(ty("blk.0.attn_q.weight"), main_type);
        assert_eq!(ty("blk.1.ffn_norm.weight"), "F32");
        if dtype == GgufDType::Q4_K {
            // ffn_down's rows are 320 wide: not whole 256-blocks.
            assert_eq!(ty("blk.0.ffn_down.weight"), "Q5_0");
            // With a llama.cpp build at hand, the bytes equal ggml's own Q4_K quantizer's.
            if std::env::var_os("RB_GGML_LIB").is_some() {
                assert_eq!(tensors["blk.0.attn_q.weight"]["bit_equal_ggml"], true);
            }
        }
        if matches!(
            dtype,
            GgufDType::F16 | GgufDType::BF16 | GgufDType::Q8_0 | GgufDType::Q4_0
        ) {
            assert_eq!(
                tensors["blk.0.attn_k.weight"]["bit_equal"], true,
                "{main_type}"
            );
        }
        assert_eq!(s["version"], 3);
        assert_eq!(s["alignment"], 32);
    }
}

#[test]
fn the_gguf_package_reads_llama_metadata_and_the_tokenizer() {
    let Some(py) = gguf_python("the_gguf_package_reads_llama_metadata_and_the_tokenizer") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (m, tok) = model_and_tokenizer(SplitPattern::Llama3);
    let path = dir.path().join("m.gguf");
    export(&m, &tok, GgufDType::F16, &path);
    let s = read_with_gguf(&py, &path, &path);
    let meta = &s["metadata"];
    let expect = [
        ("general.architecture", Value::from("llama")),
        ("general.name", Value::from("gguf export test")),
        ("llama.block_count", Value::from(2)),
        ("llama.embedding_length", Value::from(256)),
        ("llama.feed_forward_length", Value::from(320)),
        ("llama.attention.head_count", Value::from(4)),
        ("llama.attention.head_count_kv", Value::from(2)),
        ("llama.context_length", Value::from(m.config.max_seq_len)),
        ("llama.vocab_size", Value::from(320)),
        ("llama.rope.freq_base", Value::from(10000.0)),
        ("tokenizer.ggml.model", Value::from("gpt2")),
        ("tokenizer.ggml.pre", Value::from("llama-bpe")),
        ("tokenizer.ggml.tokens", Value::from("<320 entries>")),
        (
            "tokenizer.ggml.eos_token_id",
            Value::from(tok.eos_id().unwrap()),
        ),
        ("tokenizer.ggml.add_bos_token", Value::from(false)),
    ];
    for (k, v) in expect {
        assert_eq!(meta[k], v, "{k}");
    }
    let eps = meta["llama.attention.layer_norm_rms_epsilon"]
        .as_f64()
        .unwrap();
    assert!((eps - m.config.norm_eps).abs() < 1e-9, "{eps}");
}
