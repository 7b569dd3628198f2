//! The `llama` (SentencePiece) tokenizer built from GGUF metadata: llama.cpp's defaults, the
//! keys it reads beside the tokens, and the errors for broken vocabularies, each naming its key.

use crate::io::gguf::{Array, GgufFile, GgufWriter, Value};
use crate::text::gguf::{read_tokenizer, GgufTokenizer};

/// Control tokens, the bytes of "é" (C3 A9), "▁" and letters with a few scored merges.
const VOCAB: &[(&str, f32, i32)] = &[
    ("<unk>", 0.0, 2),
    ("<s>", 0.0, 3),
    ("</s>", 0.0, 3),
    ("<0xC3>", 0.0, 6),
    ("<0xA9>", 0.0, 6),
    ("▁", -1.0, 1),
    ("a", -1.0, 1),
    ("b", -1.0, 1),
    ("ab", -2.0, 1),
    ("▁a", -3.0, 1),
];

fn tokens() -> Vec<String> {
    VOCAB.iter().map(|v| v.0.to_string()).collect()
}

/// A file of `VOCAB` with `tokenizer.ggml.model = "llama"` and `extra` keys.
fn file(extra: Vec<(&str, Value)>) -> GgufFile<std::io::Cursor<Vec<u8>>> {
    let mut w = GgufWriter::new();
    w.add("tokenizer.ggml.model", Value::String("llama".into()))
        .unwrap();
    w.add(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(tokens())),
    )
    .unwrap();
    let types = VOCAB.iter().map(|v| v.2).collect();
    w.add("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
        .unwrap();
    let mut scores = Some(Value::Array(Array::F32(
        VOCAB.iter().map(|v| v.1).collect(),
    )));
    for (key, value) in extra {
        if key == "tokenizer.ggml.scores" {
            scores = None;
        }
        w.add(key, value).unwrap();
    }
    if let Some(s) = scores {
        w.add("tokenizer.ggml.scores", s).unwrap();
    }
    GgufFile::from_bytes(w.to_bytes(), "spm.gguf").unwrap()
}

fn read(extra: Vec<(&str, Value)>) -> GgufTokenizer {
    read_tokenizer(&file(extra).metadata).unwrap().unwrap()
}

fn error(extra: Vec<(&str, Value)>) -> String {
    read_tokenizer(&file(extra).metadata)
        .unwrap_err()
        .to_string()
}

fn names(tok: &GgufTokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&i| tok.tokenizer.id_to_token(i).unwrap())
        .collect()
}

#[test]
fn a_llama_vocabulary_merges_by_score_with_llama_cpps_defaults() {
    let tok = read(vec![]);
    assert_eq!((tok.model.as_str(), tok.pre.as_str()), ("llama", "default"));
    assert_eq!(
        (tok.bos_id, tok.eos_id, tok.unk_id, tok.pad_id),
        (Some(1), Some(2), Some(0), None)
    );
    assert!(tok.add_bos && !tok.add_eos);
    // "ab" (-2) merges before the pair left of it, "▁a" (-3).
    let ids = tok.tokenizer.encode_with_template("ab é</s>").unwrap();
    assert_eq!(
        names(&tok, &ids),
        ["<s>", "▁", "ab", "▁", "<0xC3>", "<0xA9>", "</s>"]
    );
    assert_eq!(tok.tokenizer.decode(&ids, true).unwrap(), "ab é");
}

#[test]
fn add_space_prefix_false_marks_only_the_spaces_in_the_text() {
    let tok = read(vec![(
        "tokenizer.ggml.add_space_prefix",
        Value::Bool(false),
    )]);
    let ids = tok.tokenizer.encode("ab a").unwrap();
    assert_eq!(names(&tok, &ids), ["ab", "▁a"]);
}

#[test]
fn integer_scores_and_absent_scores_are_read_as_llama_cpp_reads_them() {
    let ints: Vec<i32> = VOCAB.iter().map(|v| v.1 as i32).collect();
    let tok = read(vec![(
        "tokenizer.ggml.scores",
        Value::Array(Array::I32(ints)),
    )]);
    assert_eq!(
        names(&tok, &tok.tokenizer.encode("ab").unwrap()),
        ["▁", "ab"]
    );
    // Without scores every token scores 0: the leftmost pair merges first.
    let mut w = GgufWriter::new();
    w.add("tokenizer.ggml.model", Value::String("llama".into()))
        .unwrap();
    w.add(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(tokens())),
    )
    .unwrap();
    let f = GgufFile::from_bytes(w.to_bytes(), "spm.gguf").unwrap();
    let tok = read_tokenizer(&f.metadata).unwrap().unwrap();
    assert_eq!(
        names(&tok, &tok.tokenizer.encode("ab").unwrap()),
        ["▁a", "b"]
    );
}

#[test]
fn scores_of_the_wrong_length_type_or_value_are_refused_by_key() {
    let short = error(vec![(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0; 3])),
    )]);
    assert!(
        short.contains("tokenizer.ggml.scores") && short.contains("3 scores for 10 tokens"),
        "{short}"
    );
    let mut with_nan: Vec<f32> = VOCAB.iter().map(|v| v.1).collect();
    with_nan[7] = f32::NAN;
    let nan = error(vec![(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(with_nan)),
    )]);
    assert!(
        nan.contains("tokenizer.ggml.scores") && nan.contains("token 7 is NaN"),
        "{nan}"
    );
    let strings = error(vec![(
        "tokenizer.ggml.scores",
        Value::Array(Array::String(tokens())),
    )]);
    assert!(
        strings.contains("tokenizer.ggml.scores") && strings.contains("array of string"),
        "{strings}"
    );
}

#[test]
fn a_repeated_token_is_refused_by_key() {
    let mut w = GgufWriter::new();
    w.add("tokenizer.ggml.model", Value::String("llama".into()))
        .unwrap();
    let repeated = vec!["a".to_string(), "b".into(), "a".into()];
    w.add(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(repeated)),
    )
    .unwrap();
    let f = GgufFile::from_bytes(w.to_bytes(), "spm.gguf").unwrap();
    let msg = read_tokenizer(&f.metadata).unwrap_err().to_string();
    assert!(
        msg.contains("tokenizer.ggml.tokens") && msg.contains("ids 0 and 2"),
        "{msg}"
    );
}

#[test]
fn a_character_without_its_byte_fallback_token_is_an_encode_error_naming_the_vocabulary() {
    let tok = read(vec![]);
    // "ü" is C3 BC: <0xC3> is there, <0xBC> is not.
    let msg = tok.tokenizer.encode("aü").unwrap_err().to_string();
    assert!(
        msg.contains("tokenizer.ggml.tokens of spm.gguf")
            && msg.contains("<0xBC>")
            && msg.contains("\"ü\""),
        "{msg}"
    );
}
