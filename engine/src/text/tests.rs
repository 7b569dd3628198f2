//! Tokenizer tests: splits, encode/decode, training, the file format and its errors, merge
//! scaling, and parity with Hugging Face through committed fixtures.

use super::pretokenize::SplitPattern;
use super::*;
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer")
}

fn multilingual() -> String {
    std::fs::read_to_string(fixture_dir().join("multilingual.txt")).unwrap()
}

fn options(vocab_size: usize, pattern: SplitPattern) -> TrainOptions {
    TrainOptions {
        vocab_size,
        special_tokens: vec!["<|endoftext|>".into()],
        pattern,
        ..TrainOptions::default()
    }
}

/// A small tokenizer trained on the multilingual text (shared by several tests).
fn small(pattern: SplitPattern) -> Tokenizer {
    train_bpe([multilingual()], &options(400, pattern)).unwrap()
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rb_text_{}_{name}", std::process::id()))
}

fn pieces(pattern: SplitPattern, text: &str) -> Vec<String> {
    pattern.pre_tokenizer().unwrap().pieces(text).unwrap()
}

// ---- pre-tokenization ----

#[test]
fn gpt2_pattern_splits_words_contractions_and_space_runs() {
    assert_eq!(
        pieces(SplitPattern::Gpt2, "Hello world's  end\n"),
        ["Hello", " world", "'s", " ", " end", "\n"]
    );
    assert_eq!(
        pieces(SplitPattern::Gpt2, "I'm 12345 DON'T\n\nx!!"),
        ["I", "'m", " 12345", " DON", "'", "T", "\n", "\n", "x", "!!"]
    );
}

#[test]
fn llama3_pattern_groups_digits_by_three_and_ignores_case_in_contractions() {
    assert_eq!(
        pieces(SplitPattern::Llama3, "Hello world's  end\n"),
        ["Hello", " world", "'s", " ", " end", "\n"]
    );
    assert_eq!(
        pieces(SplitPattern::Llama3, "DON'T 12345.\n\nx"),
        ["DON", "'T", " ", "123", "45", ".\n\n", "x"]
    );
}

// ---- encode / decode ----

#[test]
fn encode_then_decode_gives_back_multilingual_text() {
    let text = multilingual();
    for pattern in [SplitPattern::Gpt2, SplitPattern::Llama3] {
        let tok = small(pattern);
        let ids = tok.encode(&text).unwrap();
        assert!(ids.len() < text.len(), "{pattern:?}: no merges applied");
        assert_eq!(tok.decode(&ids, false).unwrap(), text, "{pattern:?}");
    }
}

#[test]
fn special_tokens_encode_to_their_ids_and_decode_can_skip_them() {
    let tok = small(SplitPattern::Gpt2);
    let eos = tok.special_id("<|endoftext|>").unwrap();
    assert_eq!(tok.eos_id(), Some(eos));
    let ids = tok.encode("ab<|endoftext|>cd").unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == eos).count(), 1);
    assert_eq!(tok.decode(&ids, false).unwrap(), "ab<|endoftext|>cd");
    assert_eq!(tok.decode(&ids, true).unwrap(), "abcd");
    // encode_ordinary reads the same string as plain text.
    assert!(!tok.encode_ordinary("<|endoftext|>").unwrap().contains(&eos));
}

#[test]
fn unknown_ids_and_special_names_are_errors() {
    let tok = small(SplitPattern::Gpt2);
    let err = tok.decode(&[tok.vocab_size() as u32], false).unwrap_err();
    assert!(err.to_string().contains("not in the vocabulary"), "{err}");
    let err = tok.special_id("<pad>").unwrap_err();
    assert!(err.to_string().contains("<|endoftext|>"), "{err}");
}

#[test]
fn stream_decoder_holds_back_a_character_cut_between_tokens() {
    // With no merges every byte is its own token, so "中" (3 bytes) spans three ids.
    let tok = train_bpe(["x".to_string()], &options(257, SplitPattern::Gpt2)).unwrap();
    let ids = tok.encode("a中b").unwrap();
    assert_eq!(ids.len(), 5);
    let mut stream = StreamDecoder::new(tok.clone(), false);
    let out: Vec<String> = ids.iter().map(|&i| stream.push(i).unwrap()).collect();
    assert_eq!(out, ["a", "", "", "中", "b"]);
    let mut cut = StreamDecoder::new(tok, false);
    cut.push(ids[1]).unwrap();
    assert_eq!(cut.finish(), "\u{FFFD}");
}

// ---- training ----

#[test]
fn trainer_learns_the_most_frequent_pair_first() {
    // "a a" occurs 6 times (twice in each of three words), more than any other pair.
    let tok = train_bpe(
        ["aaab aaab aaab".to_string()],
        &options(258, SplitPattern::Gpt2),
    )
    .unwrap();
    assert_eq!(tok.merges()[0], ("a".to_string(), "a".to_string()));
    assert_eq!(tok.encode("aa").unwrap().len(), 1);
}

#[test]
fn trainer_breaks_ties_by_the_smaller_pair() {
    // "xy" and "ab" occur equally often; "a" has the smaller id, so "ab" comes first.
    let tok = train_bpe(["xy ab".to_string()], &options(259, SplitPattern::Gpt2)).unwrap();
    let first: Vec<(String, String)> = tok.merges().into_iter().take(2).collect();
    assert_eq!(first[0], ("a".to_string(), "b".to_string()));
}

#[test]
fn special_tokens_take_the_lowest_ids_then_bytes_in_code_point_order() {
    let mut o = options(300, SplitPattern::Gpt2);
    o.special_tokens = vec!["<|endoftext|>".into(), "<pad>".into()];
    let tok = train_bpe([multilingual()], &o).unwrap();
    assert_eq!(tok.token_to_id("<|endoftext|>"), Some(0));
    assert_eq!(tok.token_to_id("<pad>"), Some(1));
    assert_eq!(tok.token_to_id("!"), Some(2));
    assert_eq!(tok.token_to_id("Ġ"), Some(2 + 188 + 32));
    assert_eq!(tok.vocab_size(), 300);
}

#[test]
fn training_is_deterministic() {
    let a = small(SplitPattern::Llama3);
    let b = small(SplitPattern::Llama3);
    assert_eq!(a.to_json_string().unwrap(), b.to_json_string().unwrap());
}

#[test]
fn special_token_strings_in_training_text_are_not_learned_from() {
    let text = "<|endoftext|>".repeat(50);
    let tok = train_bpe([text], &options(300, SplitPattern::Gpt2)).unwrap();
    assert!(tok.merges().is_empty(), "{:?}", tok.merges());
}

#[test]
fn a_vocab_size_below_the_byte_alphabet_is_an_error() {
    let err = train_bpe(["x".to_string()], &options(200, SplitPattern::Gpt2)).unwrap_err();
    assert!(err.to_string().contains("vocab_size 200"), "{err}");
}

#[test]
fn training_from_files_equals_training_from_their_text() {
    let text = multilingual();
    let path = temp_path("train.txt");
    std::fs::write(&path, &text).unwrap();
    let from_file = train_bpe_files(
        std::slice::from_ref(&path),
        &options(400, SplitPattern::Gpt2),
    )
    .unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(
        from_file.to_json_string().unwrap(),
        small(SplitPattern::Gpt2).to_json_string().unwrap()
    );
}

// ---- tokenizer.json ----

#[test]
fn save_then_load_gives_identical_encodes() {
    let text = multilingual();
    for pattern in [SplitPattern::Gpt2, SplitPattern::Llama3] {
        let tok = small(pattern);
        let path = temp_path(&format!("{pattern:?}.json"));
        tok.save(&path).unwrap();
        let back = Tokenizer::load(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(back.encode(&text).unwrap(), tok.encode(&text).unwrap());
        assert_eq!(
            back.to_json_string().unwrap(),
            tok.to_json_string().unwrap()
        );
    }
}

/// A minimal valid file: bytes "a", "b", "c", the merge "a b", and `<eos>` as id 4.
fn tiny_json() -> serde_json::Value {
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 4, "content": "<eos>", "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3}, "merges": ["a b"]}
    })
}

fn load_value(v: &serde_json::Value) -> crate::Result<Tokenizer> {
    Tokenizer::from_json_str(&v.to_string(), "test.json")
}

#[test]
fn merges_load_as_strings_or_pairs() {
    let mut v = tiny_json();
    assert_eq!(load_value(&v).unwrap().encode("abc").unwrap(), [3, 2]);
    v["model"]["merges"] = serde_json::json!([["a", "b"]]);
    assert_eq!(
        load_value(&v).unwrap().encode("abc<eos>").unwrap(),
        [3, 2, 4]
    );
}

#[test]
fn corrupt_json_is_an_error_naming_the_file() {
    let path = temp_path("corrupt.json");
    std::fs::write(&path, "{\"model\": [").unwrap();
    let err = Tokenizer::load(&path).unwrap_err().to_string();
    std::fs::remove_file(&path).ok();
    assert!(
        err.contains(&path.display().to_string()) && err.contains("not valid JSON"),
        "{err}"
    );
}

#[test]
fn a_merge_with_a_token_missing_from_the_vocab_is_an_error() {
    let mut v = tiny_json();
    v["model"]["merges"] = serde_json::json!(["a b", "b z"]);
    let err = load_value(&v).unwrap_err().to_string();
    assert!(
        err.contains("model.merges[1]") && err.contains("\"z\""),
        "{err}"
    );
}

#[test]
fn unsupported_model_type_is_an_error_naming_the_field() {
    let mut v = tiny_json();
    v["model"]["type"] = "WordLevel".into();
    let err = load_value(&v).unwrap_err().to_string();
    assert!(
        err.contains("model.type") && err.contains("WordLevel"),
        "{err}"
    );
}

#[test]
fn unsupported_normalizer_pre_tokenizer_and_decoder_are_errors_naming_the_field() {
    let mut v = tiny_json();
    v["normalizer"] = serde_json::json!({"type": "Sequence", "normalizers": [
        {"type": "NFC"}, {"type": "ByteLevel"}]});
    let err = load_value(&v).unwrap_err().to_string();
    assert!(
        err.contains("normalizer.normalizers[1]") && err.contains("ByteLevel"),
        "{err}"
    );
    let mut v = tiny_json();
    v["decoder"] = serde_json::json!({"type": "Wordy"});
    let err = load_value(&v).unwrap_err().to_string();
    assert!(err.contains("decoder") && err.contains("Wordy"), "{err}");
    let mut v = tiny_json();
    v["pre_tokenizer"] = serde_json::json!({"type": "UnicodeScripts"});
    let err = load_value(&v).unwrap_err().to_string();
    assert!(
        err.contains("pre_tokenizer") && err.contains("UnicodeScripts"),
        "{err}"
    );
}

#[test]
fn template_processing_adds_its_tokens_only_with_encode_with_template() {
    let mut v = tiny_json();
    v["post_processor"] = serde_json::json!({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<eos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<eos>": {"id": "<eos>", "ids": [4], "tokens": ["<eos>"]}}});
    let tok = load_value(&v).unwrap();
    assert_eq!(tok.encode("ab").unwrap(), [3]);
    assert_eq!(tok.encode_with_template("ab").unwrap(), [4, 3]);
}

#[test]
fn llama3_style_file_with_split_then_byte_level_loads() {
    let mut v = tiny_json();
    v["pre_tokenizer"] = serde_json::json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]});
    let tok = load_value(&v).unwrap();
    assert_eq!(tok.encode("abab").unwrap(), [3, 3]);
}

// ---- merge scaling ----

/// Letters from a fixed LCG: a single piece with no spaces for the pre-tokenizer to cut.
fn letters(n: usize) -> String {
    let alphabet = b"etaoinshrdlucmfwypvbgkjqxz";
    let mut state = 12345u64;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            alphabet[((state >> 33) % alphabet.len() as u64) as usize] as char
        })
        .collect()
}

fn best_time(tok: &Tokenizer, text: &str, reps: usize) -> f64 {
    (0..reps)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(tok.encode(text).unwrap());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn merging_a_single_50kb_piece_is_near_linear() {
    let corpus: Vec<String> = (0..40).map(|i| letters(1000 + i)).collect();
    let tok = train_bpe(corpus, &options(600, SplitPattern::Gpt2)).unwrap();
    let (small_text, big_text) = (letters(5_000), letters(50_000));
    assert_eq!(tok.pre_tokenizer().pieces(&big_text).unwrap().len(), 1);
    best_time(&tok, &big_text, 1);
    let small_t = best_time(&tok, &small_text, 7);
    let big_t = best_time(&tok, &big_text, 5);
    let ratio = big_t / small_t;
    assert!(
        ratio < 15.0,
        "50 KB took {:.2} ms, 5 KB {:.2} ms: {ratio:.1}x (quadratic merging would be ~100x)",
        big_t * 1e3,
        small_t * 1e3
    );
}

// ---- parity with Hugging Face (fixtures made by make_tokenizer_fixtures.py) ----

/// The cases of an ids fixture: (text, ids) pairs; `None` (with a note) if it is absent.
fn hf_cases(name: &str) -> Option<Vec<(String, Vec<u32>)>> {
    let path = fixture_dir().join(name);
    let Ok(text) = std::fs::read_to_string(&path) else {
        println!(
            "skipped: {} is absent; run tests/fixtures/tokenizer/make_tokenizer_fixtures.py on a machine with `tokenizers`",
            path.display()
        );
        return None;
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = v["cases"].as_array().unwrap();
    Some(
        cases
            .iter()
            .map(|c| {
                let text = c["text"].as_str().unwrap().to_string();
                let ids = c["ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect();
                (text, ids)
            })
            .collect(),
    )
}

fn assert_same_ids(tokenizer_file: &str, ids_file: &str) {
    let Some(cases) = hf_cases(ids_file) else {
        return;
    };
    let tok = Tokenizer::load(fixture_dir().join(tokenizer_file)).unwrap();
    assert!(!cases.is_empty());
    for (text, want) in cases {
        let got = tok.encode(&text).unwrap();
        assert_eq!(
            got, want,
            "{tokenizer_file}: ids differ from Hugging Face's for {text:?}"
        );
    }
}

#[test]
fn engine_trained_gpt2_tokenizer_gives_hugging_face_ids() {
    assert_same_ids("engine_gpt2.tokenizer.json", "engine_gpt2.hf_ids.json");
}

#[test]
fn engine_trained_llama3_tokenizer_gives_hugging_face_ids() {
    assert_same_ids("engine_llama3.tokenizer.json", "engine_llama3.hf_ids.json");
}

#[test]
fn hugging_face_trained_gpt2_tokenizer_gives_the_same_ids_here() {
    assert_same_ids("hf_gpt2.tokenizer.json", "hf_gpt2.hf_ids.json");
}

#[test]
fn hugging_face_trained_llama3_tokenizer_gives_the_same_ids_here() {
    assert_same_ids("hf_llama3.tokenizer.json", "hf_llama3.hf_ids.json");
}

/// The settings both trainers use for the fixtures (the script mirrors them).
fn fixture_options(pattern: SplitPattern) -> TrainOptions {
    options(600, pattern)
}

fn fixture_training_text() -> String {
    std::fs::read_to_string(fixture_dir().join("train.txt")).unwrap()
}

#[test]
fn trainer_reproduces_hugging_face_trainer_merges() {
    for (pattern, file) in [
        (SplitPattern::Gpt2, "hf_gpt2.tokenizer.json"),
        (SplitPattern::Llama3, "hf_llama3.tokenizer.json"),
    ] {
        let path = fixture_dir().join(file);
        if !path.exists() {
            println!("skipped: {} is absent", path.display());
            continue;
        }
        let hf = Tokenizer::load(&path).unwrap();
        let ours = train_bpe([fixture_training_text()], &fixture_options(pattern)).unwrap();
        let (a, b) = (ours.merges(), hf.merges());
        let first_diff = a.iter().zip(&b).position(|(x, y)| x != y);
        assert!(
            a == b,
            "{file}: merges differ ({} here, {} there), first at {first_diff:?}",
            a.len(),
            b.len()
        );
    }
}

#[test]
fn committed_engine_fixtures_are_what_the_trainer_makes() {
    for (pattern, file) in [
        (SplitPattern::Gpt2, "engine_gpt2.tokenizer.json"),
        (SplitPattern::Llama3, "engine_llama3.tokenizer.json"),
    ] {
        let Ok(committed) = std::fs::read_to_string(fixture_dir().join(file)) else {
            println!("skipped: {file} is absent");
            continue;
        };
        let ours = train_bpe([fixture_training_text()], &fixture_options(pattern)).unwrap();
        assert!(ours.to_json_string().unwrap() == committed, "{file} differs from a fresh training; rerun `cargo test -p rusting_brain --lib write_engine_tokenizer_fixtures -- --ignored`");
    }
}

/// Writes the engine-trained fixtures that the Python script loads in Hugging Face.
#[test]
#[ignore]
fn write_engine_tokenizer_fixtures() {
    for (pattern, file) in [
        (SplitPattern::Gpt2, "engine_gpt2.tokenizer.json"),
        (SplitPattern::Llama3, "engine_llama3.tokenizer.json"),
    ] {
        let tok = train_bpe([fixture_training_text()], &fixture_options(pattern)).unwrap();
        tok.save(fixture_dir().join(file)).unwrap();
    }
}

/// The edits `make_tokenizer_fixtures.py` makes to an engine fixture to cover more of the
/// format (the script applies the same ones before asking Hugging Face for ids).
fn variant(name: &str) -> (Tokenizer, bool) {
    let base = |file: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(fixture_dir().join(file)).unwrap()).unwrap()
    };
    let mut v = base("engine_gpt2.tokenizer.json");
    let mut with_template = false;
    match name {
        "add_prefix_space" => v["pre_tokenizer"]["add_prefix_space"] = true.into(),
        "ignore_merges" => {
            v = base("engine_llama3.tokenizer.json");
            v["model"]["ignore_merges"] = true.into();
        }
        "template" => {
            with_template = true;
            let eos = serde_json::json!({"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}});
            v["post_processor"] = serde_json::json!({"type": "TemplateProcessing",
                "single": [eos, {"Sequence": {"id": "A", "type_id": 0}}, eos],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}});
        }
        "strip_added_tokens" => {
            let added = v["added_tokens"].as_array_mut().unwrap();
            added.push(
                serde_json::json!({"id": 600, "content": " lead", "single_word": false,
                "lstrip": false, "rstrip": true, "normalized": false, "special": false}),
            );
            added.push(
                serde_json::json!({"id": 601, "content": "<mask>", "single_word": false,
                "lstrip": true, "rstrip": false, "normalized": false, "special": true}),
            );
        }
        other => panic!("unknown variant {other}"),
    }
    (
        Tokenizer::from_json_str(&v.to_string(), name).unwrap(),
        with_template,
    )
}

#[test]
fn format_variants_give_hugging_face_ids() {
    let path = fixture_dir().join("variants.hf_ids.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        println!("skipped: {} is absent", path.display());
        return;
    };
    let all: serde_json::Value = serde_json::from_str(&text).unwrap();
    let variants = all["variants"].as_object().unwrap();
    assert_eq!(variants.len(), 4);
    for (name, cases) in variants {
        let (tok, with_template) = variant(name);
        for c in cases.as_array().unwrap() {
            let text = c["text"].as_str().unwrap();
            let want: Vec<u32> = c["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            let got = if with_template {
                tok.encode_with_template(text).unwrap()
            } else {
                tok.encode(text).unwrap()
            };
            assert_eq!(
                got, want,
                "variant {name}: ids differ from Hugging Face's for {text:?}"
            );
        }
    }
}

/// Tokens added at run time (textual inversion's) are cut out of the text as the file's own
/// added tokens are: a normalized one matches the lower-cased text, takes the id given, and
/// the tokenizer it came from is left as it was; a content or id already taken is refused.
#[test]
fn tokens_added_at_run_time_are_cut_out_like_the_files_own() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/diffusion/sd_tiny/tokenizer/tokenizer.json");
    let tok = Tokenizer::load(&path).unwrap();
    let id = tok.vocab_size() as u32;
    let token = |content: &str, id: u32| AddedToken {
        id,
        content: content.into(),
        special: false,
        lstrip: false,
        rstrip: false,
        normalized: true,
        single_word: false,
    };
    let more = tok.with_added_tokens(vec![token("<cat-toy>", id)]).unwrap();
    let mut want = tok.encode("a ").unwrap();
    want.push(id);
    assert_eq!(more.encode("a <Cat-Toy>").unwrap(), want);
    assert_eq!(more.token_to_id("<cat-toy>"), Some(id));
    assert!(!tok.encode("a <cat-toy>").unwrap().contains(&id));
    let e = more
        .with_added_tokens(vec![token("<cat-toy>", id + 1)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`<cat-toy>` is already a token"), "{e}");
    let e = more
        .with_added_tokens(vec![token("<other>", id)])
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("id {id} is already taken")), "{e}");
}
