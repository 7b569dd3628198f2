//! The tokenizers of GGUF files against llama.cpp's own tokenizer, on llama.cpp's test
//! vocabularies (fetched by scripts/fetch_test_assets.sh from llama-cpp-python 0.3.36's sdist):
//! - its two SentencePiece vocabularies (LLaMA's and Phi-3's) and its byte-level ones under each
//!   pre-tokenizer name we read (GPT-2, LLaMA-3, Qwen2, StarCoder, Refact, DeepSeek-LLM,
//!   DeepSeek-Coder): llama.cpp's test inputs (`.inp`) give exactly its expected ids (`.out`),
//!   as its test-tokenizer-0 runs them (no BOS, special tokens not parsed);
//! - 60 varied strings give the ids that llama-cpp-python recorded in
//!   `tests/fixtures/gguf/spm_tokenizer_llama_cpp.json` (make_spm_tokenizer_fixture.py), with
//!   BOS and with and without special tokens parsed;
//! - decoding those ids gives llama-cpp-python's `detokenize` text, with and without special
//!   tokens, and streaming decode gives the same text piece by piece.

use rb_integration_tests::assets::asset;
use rusting_brain::io::gguf::GgufFile;
use rusting_brain::text::gguf::{read_tokenizer, GgufTokenizer};
use rusting_brain::text::StreamDecoder;
use serde_json::Value;
use std::path::{Path, PathBuf};

const LLAMA_SPM: &str = "ggml-vocab-llama-spm.gguf";
const PHI3: &str = "ggml-vocab-phi-3.gguf";

fn vocab(test: &str, name: &str) -> Option<(GgufTokenizer, PathBuf)> {
    let path = asset(test, &format!("llama_cpp_vocab/{name}"))?;
    let file = GgufFile::open(&path).unwrap();
    Some((read_tokenizer(&file.metadata).unwrap().unwrap(), path))
}

/// llama.cpp's test cases: inputs separated by a line `__ggml_vocab_test__`, read as its
/// test-tokenizer-0 reads them, and one line of ids per input.
fn llama_cpp_cases(path: &Path) -> Vec<(String, Vec<u32>)> {
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let inp = std::fs::read_to_string(path.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(path.with_extension("gguf.out")).unwrap();
    let mut inputs = Vec::new();
    let mut pos = 0;
    while pos < inp.len() {
        match inp[pos..].find(SEP) {
            Some(at) => {
                inputs.push(inp[pos..pos + at].to_string());
                pos += at + SEP.len();
            }
            None => {
                inputs.push(inp[pos..].to_string());
                break;
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|i| i.parse().unwrap()).collect())
        .collect();
    assert_eq!(inputs.len(), ids.len());
    inputs.into_iter().zip(ids).collect()
}

fn matches_llama_cpps_test_ids(test: &str, name: &str) {
    let Some((tok, path)) = vocab(test, name) else {
        return;
    };
    let cases = llama_cpp_cases(&path);
    assert_eq!(cases.len(), 46);
    for (text, ids) in &cases {
        assert_eq!(
            &tok.tokenizer.encode_ordinary(text).unwrap(),
            ids,
            "{text:?}"
        );
    }
}

/// LLaMA's SentencePiece vocabulary has no token that runs from a word into the next space
/// mark, so its words are cut apart before merging (the fast path); the ids stay llama.cpp's.
#[test]
fn llama_spm_vocab_merges_its_words_apart() {
    let test = "llama_spm_vocab_merges_its_words_apart";
    let Some((tok, _)) = vocab(test, LLAMA_SPM) else {
        return;
    };
    assert_eq!(tok.tokenizer.pre_tokenizer().steps.len(), 1);
}

#[test]
fn llama_spm_vocab_gives_llama_cpps_expected_ids_on_its_test_inputs() {
    matches_llama_cpps_test_ids(
        "llama_spm_vocab_gives_llama_cpps_expected_ids_on_its_test_inputs",
        LLAMA_SPM,
    );
}

#[test]
fn phi3_vocab_gives_llama_cpps_expected_ids_on_its_test_inputs() {
    matches_llama_cpps_test_ids(
        "phi3_vocab_gives_llama_cpps_expected_ids_on_its_test_inputs",
        PHI3,
    );
}

/// Every byte-level vocabulary of llama.cpp's tests whose pre-tokenizer we read by name.
#[test]
fn byte_level_vocabs_give_llama_cpps_expected_ids_under_every_pre_tokenizer_name() {
    const TEST: &str =
        "byte_level_vocabs_give_llama_cpps_expected_ids_under_every_pre_tokenizer_name";
    for (name, pre) in [
        ("gpt-2", "gpt-2"),
        ("llama-bpe", "llama-bpe"),
        ("qwen2", "qwen2"),
        ("starcoder", "starcoder"),
        ("refact", "refact"),
        ("deepseek-llm", "deepseek-llm"),
        ("deepseek-coder", "deepseek-coder"),
    ] {
        let file = format!("ggml-vocab-{name}.gguf");
        let Some((tok, _)) = vocab(TEST, &file) else {
            return;
        };
        assert_eq!(
            (tok.model.as_str(), tok.pre.as_str()),
            ("gpt2", pre),
            "{file}"
        );
        matches_llama_cpps_test_ids(TEST, &file);
    }
}

/// One recorded string: its text, its ids with special tokens parsed and without (both with
/// BOS), and llama-cpp-python's detokenized text of the first without and with special tokens.
struct Case {
    text: String,
    ids: Vec<u32>,
    ids_plain: Vec<u32>,
    detokenized: String,
    detokenized_special: String,
}

fn fixture_cases(name: &str) -> Vec<Case> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/gguf/spm_tokenizer_llama_cpp.json");
    let root: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect()
    };
    let text = |v: &Value| v.as_str().unwrap().to_string();
    let cases: Vec<Case> = root["vocabs"][name]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            text: text(&c["text"]),
            ids: ids(&c["ids"]),
            ids_plain: ids(&c["ids_plain"]),
            detokenized: text(&c["detokenized"]),
            detokenized_special: text(&c["detokenized_special"]),
        })
        .collect();
    assert_eq!(cases.len(), 60);
    cases
}

fn with_bos(tok: &GgufTokenizer, mut ids: Vec<u32>) -> Vec<u32> {
    ids.insert(0, tok.bos_id.unwrap());
    ids
}

#[test]
fn fixture_strings_encode_to_llama_cpps_ids_with_and_without_special_tokens() {
    for name in [LLAMA_SPM, PHI3] {
        let Some((tok, _)) = vocab(
            "fixture_strings_encode_to_llama_cpps_ids_with_and_without_special_tokens",
            name,
        ) else {
            return;
        };
        assert!(tok.add_bos && !tok.add_eos, "{name}");
        for case in fixture_cases(name) {
            let t = &case.text;
            let ids = tok.tokenizer.encode_with_template(t).unwrap();
            assert_eq!(ids, case.ids, "{name} {t:?}");
            let plain = with_bos(&tok, tok.tokenizer.encode_ordinary(t).unwrap());
            assert_eq!(
                plain, case.ids_plain,
                "{name} {t:?} (special tokens as text)"
            );
        }
    }
}

#[test]
fn decoding_the_fixture_ids_gives_llama_cpps_detokenized_text() {
    for name in [LLAMA_SPM, PHI3] {
        let Some((tok, _)) = vocab(
            "decoding_the_fixture_ids_gives_llama_cpps_detokenized_text",
            name,
        ) else {
            return;
        };
        let mut round_trips = 0;
        for case in fixture_cases(name) {
            let t = &case.text;
            let text = tok.tokenizer.decode(&case.ids, true).unwrap();
            assert_eq!(text, case.detokenized, "{name} {t:?}");
            let special = tok.tokenizer.decode(&case.ids, false).unwrap();
            assert_eq!(special, case.detokenized_special, "{name} {t:?} (special)");
            let ours = tok.tokenizer.encode_with_template(t).unwrap();
            if tok.tokenizer.decode(&ours, true).unwrap() == *t {
                round_trips += 1;
            }
        }
        // Those that do not come back are special tokens (dropped) and a literal "▁".
        let expected = if name == LLAMA_SPM { 52 } else { 46 };
        assert_eq!(round_trips, expected, "{name}");
    }
}

#[test]
fn streaming_decode_of_the_fixture_ids_equals_the_whole_decode() {
    for name in [LLAMA_SPM, PHI3] {
        let Some((tok, _)) = vocab(
            "streaming_decode_of_the_fixture_ids_equals_the_whole_decode",
            name,
        ) else {
            return;
        };
        for case in fixture_cases(name) {
            for skip_special in [true, false] {
                let mut stream = StreamDecoder::new(tok.tokenizer.clone(), skip_special);
                let mut text = String::new();
                for &id in &case.ids {
                    text.push_str(&stream.push(id).unwrap());
                }
                text.push_str(&stream.finish());
                let whole = tok.tokenizer.decode(&case.ids, skip_special).unwrap();
                assert_eq!(text, whole, "{name} {:?} skip {skip_special}", case.text);
            }
        }
    }
}

#[test]
fn phi3_vocab_carries_its_special_ids_and_chat_template() {
    let Some((tok, _)) = vocab("phi3_vocab_carries_its_special_ids_and_chat_template", PHI3) else {
        return;
    };
    assert_eq!(tok.model, "llama");
    assert_eq!(
        (tok.bos_id, tok.eos_id, tok.unk_id, tok.pad_id),
        (Some(1), Some(32000), Some(0), Some(32000))
    );
    assert!(tok.chat_template.unwrap().contains("<|assistant|>"));
    assert_eq!(tok.tokenizer.eos_id(), Some(32000));
}

/// A vocabulary-only file: its tokenizer loads alone (`text::load_gguf` in a script), and
/// loading it as a model says where its tokenizer is instead of naming a missing key.
#[test]
fn a_vocabulary_only_file_gives_its_tokenizer_and_no_model() {
    let test = "a_vocabulary_only_file_gives_its_tokenizer_and_no_model";
    let Some(path) = asset(test, "llama_cpp_vocab/ggml-vocab-starcoder.gguf") else {
        return;
    };
    let tok = rusting_brain::text::gguf::load_tokenizer(&path).unwrap();
    assert_eq!(tok.pre, "starcoder");
    assert!(!tok.tokenizer.encode("fn main() {}").unwrap().is_empty());
    let err = rusting_brain::models::transformer_lm::load_gguf(
        &path,
        rusting_brain::DType::F32,
        rusting_brain::Device::Cpu,
    )
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("vocabulary only") && err.contains("load_tokenizer"),
        "{err}"
    );
}
