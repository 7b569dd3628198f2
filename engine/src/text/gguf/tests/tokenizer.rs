//! The tokenizer built from GGUF metadata: ids against the `tokenizers` library on the tiny
//! fixture, the special ids and flags, and the errors for what is not supported.

use crate::io::gguf::tests::builder::Builder;
use crate::io::gguf::tests::fixture;
use crate::io::gguf::GgufFile;
use crate::text::gguf::read_tokenizer;
use std::collections::BTreeMap;

#[test]
fn tiny_fixture_ids_equal_the_tokenizers_library_with_llama_cpps_smollm_split() {
    let f = GgufFile::open(fixture("tiny_llama.gguf")).unwrap();
    let tok = read_tokenizer(&f.metadata).unwrap().unwrap();
    let expected_file = GgufFile::open(fixture("tiny_llama_expected.gguf")).unwrap();
    let text = expected_file.metadata.str("expected.ids").unwrap();
    let expected: BTreeMap<String, Vec<u32>> = serde_json::from_str(text).unwrap();
    assert_eq!(expected.len(), 4);
    for (text, ids) in &expected {
        assert_eq!(&tok.tokenizer.encode(text).unwrap(), ids, "{text:?}");
        assert_eq!(&tok.tokenizer.decode(ids, false).unwrap(), text);
    }
    assert_eq!(
        (tok.bos_id, tok.eos_id, tok.unk_id, tok.pad_id),
        (Some(1), Some(2), Some(0), Some(2))
    );
    assert!(!tok.add_bos && !tok.add_eos);
    assert_eq!(tok.pre, "smollm");
    assert!(tok.chat_template.unwrap().contains("<|im_start|>"));
    // Control tokens are special (skipped by decode), user-defined ones are not.
    assert_eq!(
        tok.tokenizer.decode(&[1, 90, 267], true).unwrap(),
        "x<think>"
    );
}

fn with_tokenizer(model: &str, pre: Option<&str>) -> Builder {
    let tokens: Vec<u8> = ["a", "b", "ab"]
        .iter()
        .flat_map(|t| crate::io::gguf::tests::builder::string(t))
        .collect();
    let mut arr = 8u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&3u64.to_le_bytes());
    arr.extend_from_slice(&tokens);
    let mut merges = 8u32.to_le_bytes().to_vec();
    merges.extend_from_slice(&1u64.to_le_bytes());
    merges.extend_from_slice(&crate::io::gguf::tests::builder::string("a b"));
    let b = Builder::new()
        .str_kv("tokenizer.ggml.model", model)
        .kv("tokenizer.ggml.tokens", 9, &arr)
        .kv("tokenizer.ggml.merges", 9, &merges)
        .u32_kv("tokenizer.ggml.bos_token_id", 0);
    match pre {
        Some(p) => b.str_kv("tokenizer.ggml.pre", p),
        None => b,
    }
}

fn tokenizer_error(b: &Builder) -> String {
    let f = GgufFile::from_bytes(b.bytes(), "t.gguf").unwrap();
    read_tokenizer(&f.metadata).unwrap_err().to_string()
}

#[test]
fn known_pre_tokenizer_names_map_and_llama3_adds_bos_by_default() {
    for (pre, bos) in [
        ("gpt-2", false),
        ("smollm", false),
        ("llama-bpe", true),
        ("llama3", true),
        ("qwen2", false),
    ] {
        let f = GgufFile::from_bytes(with_tokenizer("gpt2", Some(pre)).bytes(), "t.gguf").unwrap();
        let tok = read_tokenizer(&f.metadata).unwrap().unwrap();
        assert_eq!(tok.add_bos, bos, "{pre}");
        let prefix: &[u32] = if bos { &[0] } else { &[] };
        assert_eq!(tok.tokenizer.template().prefix, prefix, "{pre}");
        assert_eq!(tok.tokenizer.encode("ab").unwrap(), [2], "{pre}");
    }
}

#[test]
fn unknown_pre_tokenizers_and_tokenizer_models_are_refused_by_name() {
    let msg = tokenizer_error(&with_tokenizer("gpt2", Some("falcon")));
    assert!(
        msg.contains("tokenizer.ggml.pre") && msg.contains("\"falcon\""),
        "{msg}"
    );
    let msg = tokenizer_error(&with_tokenizer("gpt2", None));
    assert!(msg.contains("\"default\" is not supported"), "{msg}");
    let msg = tokenizer_error(&with_tokenizer("bert", None));
    assert!(
        msg.contains("tokenizer.ggml.model") && msg.contains("\"bert\" is not supported"),
        "{msg}"
    );
}

#[test]
fn a_file_without_tokenizer_metadata_has_no_tokenizer() {
    let f = GgufFile::from_bytes(Builder::new().bytes(), "t.gguf").unwrap();
    assert!(read_tokenizer(&f.metadata).unwrap().is_none());
}

#[test]
fn special_ids_beyond_the_vocabulary_are_refused_by_key() {
    let b = with_tokenizer("gpt2", Some("gpt-2")).u32_kv("tokenizer.ggml.eos_token_id", 3);
    let msg = tokenizer_error(&b);
    assert!(
        msg.contains("tokenizer.ggml.eos_token_id") && msg.contains("id 3"),
        "{msg}"
    );
}

/// Every split the loader accepts by name is written back under its name: a published SmolLM2
/// file (`smollm`) or a Qwen2 one exports as it came.
#[test]
fn every_loaded_pre_tokenizer_exports_under_its_name() {
    use crate::io::gguf::metadata::Value;
    use crate::text::gguf::write_tokenizer::tokenizer_metadata;
    for (pre, written) in [
        ("gpt-2", "gpt-2"),
        ("smollm", "smollm"),
        ("llama-bpe", "llama-bpe"),
        ("llama3", "llama-bpe"),
        ("qwen2", "qwen2"),
        ("deepseek-r1-qwen", "qwen2"),
    ] {
        let f = GgufFile::from_bytes(with_tokenizer("gpt2", Some(pre)).bytes(), "t.gguf").unwrap();
        let tok = read_tokenizer(&f.metadata).unwrap().unwrap().tokenizer;
        let meta = tokenizer_metadata(&tok, 3).unwrap_or_else(|e| panic!("{pre}: {e}"));
        let got = meta
            .iter()
            .find(|(k, _)| k == "tokenizer.ggml.pre")
            .map(|(_, v)| v);
        assert!(
            matches!(got, Some(Value::String(s)) if s == written),
            "{pre}: {got:?}"
        );
    }
}
