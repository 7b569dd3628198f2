//! Published `tokenizer.json` files give Hugging Face's ids and text here: LLaMA-2 (legacy
//! SentencePiece normalizer, byte fallback, `<s>` template), LLaMA-3, Qwen3 (NFC), DeepSeek-V3
//! and Gemma-3 as published, and pipelines we have no published file for on their real
//! vocabularies: Mistral's and older SentencePiece conversions' Metaspace, StarCoder2's Digits,
//! every Split behaviour, other normalizers, an added token matched after normalization.
//!
//! The files come from `scripts/fetch_test_assets.sh`; the expected values from Hugging Face
//! `tokenizers` (`tests/fixtures/tokenizers/make_fixtures.py`), for a fixed list of tricky
//! strings and seeded random multilingual ones. Each case checks the ids without and with
//! special tokens, `decode` with and without skipping them, and that streaming decode pieces
//! join to the same text.

use rb_integration_tests::assets::asset;
use rusting_brain::data::token_file::{TokenFile, TokenFileOptions};
use rusting_brain::text::{StreamDecoder, Tokenizer};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/tokenizers")
}

fn read_json(path: &PathBuf) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an id array")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// What Hugging Face gave for one tokenizer (see make_fixtures.py).
struct Expected {
    texts: Vec<String>,
    tricky: usize,
    base: String,
    edits: serde_json::Map<String, Value>,
    /// How many of the seeded random texts follow the tricky ones.
    random: usize,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    ids: Vec<Vec<u32>>,
    /// decode(ids), where it differs from the text.
    decoded: HashMap<usize, String>,
    /// decode(template ids) keeping special tokens, where it differs from decode(ids).
    decoded_template: HashMap<usize, String>,
    /// decode(template ids) skipping special tokens, where it differs from decode(ids).
    decoded_template_skip: HashMap<usize, String>,
}

fn text_map(v: &Value) -> HashMap<usize, String> {
    v.as_object()
        .expect("a map")
        .iter()
        .map(|(k, t)| {
            (
                k.parse().expect("an index"),
                t.as_str().expect("text").to_string(),
            )
        })
        .collect()
}

fn expected(name: &str) -> Expected {
    let texts = read_json(&fixture_dir().join("texts.json"));
    let f = read_json(&fixture_dir().join(format!("{name}.json")));
    Expected {
        texts: texts["texts"]
            .as_array()
            .expect("texts")
            .iter()
            .map(|t| t.as_str().expect("a text").to_string())
            .collect(),
        tricky: texts["tricky"].as_u64().expect("tricky count") as usize,
        base: f["base"].as_str().expect("base").to_string(),
        edits: f["edits"].as_object().expect("edits").clone(),
        random: f["random"].as_u64().expect("random count") as usize,
        prefix: ids(&f["prefix"]),
        suffix: ids(&f["suffix"]),
        ids: f["ids"].as_array().expect("ids").iter().map(ids).collect(),
        decoded: text_map(&f["decoded"]),
        decoded_template: text_map(&f["decoded_template"]),
        decoded_template_skip: text_map(&f["decoded_template_skip"]),
    }
}

/// The fixture's tokenizer: the base file with the fixture's top-level fields replaced. A base
/// is a committed file (`bases/`, converted from a published model by make_bases.py) or a
/// fetched one; `None` (after SKIPPED) when a fetched file is missing.
fn load(test: &str, e: &Expected) -> Option<Tokenizer> {
    let committed = fixture_dir().join("bases").join(format!("{}.json", e.base));
    let path = if committed.exists() {
        committed
    } else {
        asset(test, &format!("tokenizers/{}/tokenizer.json", e.base))?
    };
    if e.edits.is_empty() {
        return Some(Tokenizer::load(&path).unwrap_or_else(|err| panic!("{test}: {err}")));
    }
    let mut doc = read_json(&path);
    for (key, value) in &e.edits {
        doc[key] = value.clone();
    }
    Some(
        Tokenizer::from_json_str(&doc.to_string(), test)
            .unwrap_or_else(|err| panic!("{test}: {err}")),
    )
}

fn stream(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> String {
    let mut s = StreamDecoder::new(tok.clone(), skip_special);
    let mut out: String = ids.iter().map(|&id| s.push(id).unwrap()).collect();
    out.push_str(&s.finish());
    out
}

/// The differences from Hugging Face over every case of fixture `name`.
fn mismatches(tok: &Tokenizer, e: &Expected) -> Vec<String> {
    let mut bad = Vec::new();
    for (i, want) in e.ids.iter().enumerate() {
        let text = &e.texts[i];
        let mut check = |what: &str, ok: bool, detail: String| {
            if !ok {
                bad.push(format!("text {i} {text:?}: {what}: {detail}"));
            }
        };
        let got = tok.encode(text).unwrap();
        check("ids", &got == want, format!("got {got:?}, want {want:?}"));
        let full: Vec<u32> = [&e.prefix[..], want, &e.suffix[..]].concat();
        let got = tok.encode_with_template(text).unwrap();
        check(
            "ids with special tokens",
            got == full,
            format!("got {got:?}, want {full:?}"),
        );
        let decoded = e.decoded.get(&i).unwrap_or(text);
        let got = tok.decode(want, false).unwrap();
        check(
            "decode",
            &got == decoded,
            format!("got {got:?}, want {decoded:?}"),
        );
        let got = stream(tok, want, false);
        check(
            "stream decode",
            &got == decoded,
            format!("got {got:?}, want {decoded:?}"),
        );
        let skip = e.decoded_template_skip.get(&i).unwrap_or(decoded);
        let got = tok.decode(&full, true).unwrap();
        check(
            "decode skipping specials",
            &got == skip,
            format!("got {got:?}, want {skip:?}"),
        );
        let got = stream(tok, &full, true);
        check(
            "stream decode skipping specials",
            &got == skip,
            format!("got {got:?}, want {skip:?}"),
        );
        if i < e.tricky {
            let kept = e.decoded_template.get(&i).unwrap_or(decoded);
            let got = tok.decode(&full, false).unwrap();
            check(
                "decode with specials",
                &got == kept,
                format!("got {got:?}, want {kept:?}"),
            );
        }
    }
    bad
}

fn assert_matches_hugging_face(name: &str) {
    let e = expected(name);
    let Some(tok) = load(name, &e) else {
        return;
    };
    assert_eq!(e.ids.len(), e.tricky + e.random);
    let bad = mismatches(&tok, &e);
    assert!(
        bad.is_empty(),
        "{name}: {} checks over {} texts differ from Hugging Face; the first:\n{}",
        bad.len(),
        e.ids.len(),
        bad[..bad.len().min(8)].join("\n")
    );
}

#[test]
fn llama2_matches_hugging_face() {
    assert_matches_hugging_face("llama2");
}

#[test]
fn llama3_matches_hugging_face() {
    assert_matches_hugging_face("llama3");
}

#[test]
fn qwen3_with_nfc_matches_hugging_face() {
    assert_matches_hugging_face("qwen3");
}

#[test]
fn deepseek_v3_matches_hugging_face() {
    assert_matches_hugging_face("deepseek_v3");
}

#[test]
fn gemma3_matches_hugging_face() {
    assert_matches_hugging_face("gemma3");
}

#[test]
fn mistral_metaspace_first_without_split_matches_hugging_face() {
    assert_matches_hugging_face("mistral_metaspace");
}

#[test]
fn metaspace_always_with_split_and_metaspace_decoder_matches_hugging_face() {
    assert_matches_hugging_face("metaspace_always");
}

#[test]
fn metaspace_never_matches_hugging_face() {
    assert_matches_hugging_face("metaspace_never");
}

#[test]
fn added_token_matched_after_normalization_matches_hugging_face() {
    assert_matches_hugging_face("llama2_normalized_eos");
}

#[test]
fn starcoder2_individual_digits_match_hugging_face() {
    assert_matches_hugging_face("starcoder2_digits");
}

#[test]
fn contiguous_digits_match_hugging_face() {
    assert_matches_hugging_face("digits_contiguous");
}

#[test]
fn split_behaviors_and_invert_match_hugging_face() {
    assert_matches_hugging_face("split_behaviors");
}

#[test]
fn nfkc_then_lowercase_matches_hugging_face() {
    assert_matches_hugging_face("nfkc_lowercase");
}

#[test]
fn nfd_matches_hugging_face() {
    assert_matches_hugging_face("nfd");
}

#[test]
fn nfkd_regex_replace_and_prepend_match_hugging_face() {
    assert_matches_hugging_face("nfkd_replace");
}

#[test]
fn bert_wordpiece_matches_hugging_face() {
    assert_matches_hugging_face("minilm");
}

#[test]
fn bert_processing_matches_hugging_face() {
    assert_matches_hugging_face("minilm_bert_processing");
}

#[test]
fn whitespace_strip_and_strip_accents_match_hugging_face() {
    assert_matches_hugging_face("minilm_whitespace");
}

#[test]
fn whitespace_split_punctuation_nmt_and_ctc_match_hugging_face() {
    assert_matches_hugging_face("minilm_split_punctuation");
}

#[test]
fn contiguous_punctuation_and_bert_normalizer_options_match_hugging_face() {
    assert_matches_hugging_face("minilm_punctuation_contiguous");
}

#[test]
fn merged_punctuation_left_strip_and_plain_ctc_match_hugging_face() {
    assert_matches_hugging_face("minilm_punctuation_merged");
}

#[test]
fn single_word_added_tokens_match_hugging_face() {
    assert_matches_hugging_face("llama3_single_word");
}

#[test]
fn clip_bpe_with_end_of_word_suffix_matches_hugging_face() {
    assert_matches_hugging_face("clip");
}

#[test]
fn bpe_decoder_matches_hugging_face() {
    assert_matches_hugging_face("clip_bpe_decoder");
}

#[test]
fn unigram_with_a_precompiled_normalizer_matches_hugging_face() {
    assert_matches_hugging_face("unigram_t5");
}

#[test]
fn bpe_with_a_continuing_subword_prefix_matches_hugging_face() {
    assert_matches_hugging_face("bpe_prefix");
}

#[test]
fn bpe_with_prefix_and_suffix_matches_hugging_face() {
    assert_matches_hugging_face("bpe_suffix_prefix");
}

/// all-MiniLM-L6-v2's file as published truncates to 128 tokens and pads to 128 with [PAD]
/// (id 0): Hugging Face's default `encode` cuts the text's ids to leave room for [CLS] and
/// [SEP], then pads; `encode_with_template` does the same and plain `encode` neither.
#[test]
fn published_truncation_and_padding_apply_to_encode_with_template() {
    let test = "published_truncation_and_padding_apply_to_encode_with_template";
    let e = expected("minilm");
    let Some(path) = asset(test, "tokenizers/minilm/tokenizer.json") else {
        return;
    };
    let tok = Tokenizer::load(&path).unwrap();
    let (cls, sep) = (101, 102);
    let full = |ids: &[u32]| {
        let mut out = vec![cls];
        out.extend(ids.iter().take(126));
        out.push(sep);
        out.resize(128, 0);
        out
    };
    for (i, want) in e.ids.iter().enumerate() {
        let text = &e.texts[i];
        assert_eq!(&tok.encode(text).unwrap(), want, "{text:?}");
        assert_eq!(
            tok.encode_with_template(text).unwrap(),
            full(want),
            "{text:?}"
        );
    }
    let long = "hello ".repeat(200);
    let ids = tok.encode(&long).unwrap();
    assert_eq!(ids.len(), 200);
    assert_eq!(tok.encode_with_template(&long).unwrap(), full(&ids));
}

/// `save` writes every stage back: the saved file encodes and decodes as the original.
#[test]
fn saved_tokenizers_load_back_with_the_same_ids_and_text() {
    for name in [
        "llama2",
        "qwen3",
        "gemma3",
        "mistral_metaspace",
        "metaspace_always",
        "starcoder2_digits",
        "split_behaviors",
        "nfkd_replace",
        "minilm",
        "minilm_split_punctuation",
        "minilm_punctuation_contiguous",
        "llama3_single_word",
        "clip",
        "clip_bpe_decoder",
        "unigram_t5",
        "bpe_suffix_prefix",
    ] {
        let e = expected(name);
        let Some(tok) = load("saved_tokenizers_load_back_with_the_same_ids_and_text", &e) else {
            return;
        };
        let back = Tokenizer::from_json_str(&tok.to_json_string().unwrap(), name).unwrap();
        for (i, want) in e.ids.iter().enumerate() {
            let text = &e.texts[i];
            assert_eq!(&back.encode(text).unwrap(), want, "{name}: {text:?}");
            assert_eq!(
                back.encode_with_template(text).unwrap(),
                tok.encode_with_template(text).unwrap(),
                "{name}: {text:?}"
            );
            assert_eq!(
                back.decode(want, false).unwrap(),
                tok.decode(want, false).unwrap(),
                "{name}: {text:?}"
            );
        }
    }
}

/// A text file of about `bytes` bytes: the fixture texts as lines, again and again, each pass
/// with its own number, so chunk cuts land before many kinds of line start.
fn corpus(e: &Expected, bytes: usize) -> String {
    let mut text = String::new();
    for pass in 0.. {
        for (i, t) in e.texts.iter().enumerate() {
            text.push_str(t);
            text.push_str(if (i + pass) % 3 == 0 { ".\n" } else { "\n" });
            if text.len() >= bytes {
                return text;
            }
        }
        text.push_str(&format!("Pass {pass} done\n"));
    }
    unreachable!()
}

/// The fixtures whose tokenizers restart at a line: a file is cut into chunks for them.
/// Gemma-3's vocabulary joins newlines to other text and its pre-tokenizer does not split;
/// the split behaviours and the regex replacement could match across the newline.
const RESTART_AT_LINES: &[&str] = &[
    "llama2",
    "llama2_normalized_eos",
    "llama3",
    "qwen3",
    "deepseek_v3",
    "mistral_metaspace",
    "metaspace_always",
    "metaspace_never",
    "starcoder2_digits",
    "digits_contiguous",
    "nfkc_lowercase",
    "nfd",
];

/// A 3 MiB text file in a token file (cut into chunks where its tokenizer allows, each later
/// chunk encoded as a continuation) holds exactly the ids of the whole text, for every family.
#[test]
fn token_files_of_big_texts_equal_the_whole_text_encoded() {
    let dir = std::env::temp_dir().join(format!("rb_token_chunks_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut restarting = Vec::new();
    for name in [
        "llama2",
        "llama2_normalized_eos",
        "llama3",
        "qwen3",
        "deepseek_v3",
        "gemma3",
        "mistral_metaspace",
        "metaspace_always",
        "metaspace_never",
        "starcoder2_digits",
        "digits_contiguous",
        "split_behaviors",
        "nfkc_lowercase",
        "nfd",
        "nfkd_replace",
    ] {
        let e = expected(name);
        let Some(tok) = load("token_files_of_big_texts_equal_the_whole_text_encoded", &e) else {
            return;
        };
        if rusting_brain::text::chunks::restarts_at_lines(&tok) {
            restarting.push(name);
        }
        let text = corpus(&e, 3 << 20);
        let path = dir.join(format!("{name}.txt"));
        std::fs::write(&path, &text).unwrap();
        let options = TokenFileOptions {
            chunk_bytes: 64 << 10,
            ..TokenFileOptions::default()
        };
        let out = dir.join(format!("{name}.tok"));
        let file = TokenFile::write_from_texts(&tok, &[path], &out, &options).unwrap();
        let written = file.read(0, file.len() as usize).unwrap();
        let whole = tok.encode(&text).unwrap();
        let first_difference = written.iter().zip(&whole).position(|(a, b)| a != b);
        assert!(
            written == whole,
            "{name}: the token file differs from the whole text's {} ids (it has {}), first at {first_difference:?}",
            whole.len(),
            written.len()
        );
    }
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        restarting, RESTART_AT_LINES,
        "the tokenizers that restart at a line"
    );
}
