//! The `text::` namespace and the token-data part of `data::` from scripts: training,
//! encode/decode, save/load, token files, windows and the unigram baseline.

use rhai::Dynamic;

fn eval(src: &str) -> Result<Dynamic, String> {
    rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .map_err(|e| e.to_string())
}

/// A temp folder with a small corpus: two Markdown files and one file to be filtered out.
struct Corpus(std::path::PathBuf);

impl Corpus {
    fn new(name: &str) -> Corpus {
        let dir = std::env::temp_dir().join(format!("rb_text_api_{}_{name}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let text = "The quick brown fox jumps over the lazy dog. Grüße, 世界! don't stop.\n";
        std::fs::write(dir.join("a.md"), text.repeat(30)).unwrap();
        std::fs::write(dir.join("sub/b.md"), text.repeat(20)).unwrap();
        std::fs::write(dir.join("skip.bin"), [0xFFu8, 0xFE]).unwrap();
        Corpus(dir)
    }

    /// The folder as a Rhai string literal.
    fn path(&self) -> String {
        format!("{:?}", self.0.display().to_string())
    }
}

impl Drop for Corpus {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

#[test]
fn a_script_trains_encodes_decodes_saves_and_loads_a_tokenizer() {
    let c = Corpus::new("tok");
    let out = eval(&format!(
        r#"
        let dir = {dir};
        let tok = text::train_bpe([dir], #{{ vocab_size: 300, special_tokens: ["<|endoftext|>"], extensions: ["md"] }});
        let ids = tok.encode("The quick fox<|endoftext|>");
        let eos = tok.token_id("<|endoftext|>");
        tok.save(dir + "/tok.json");
        let back = text::load_tokenizer(dir + "/tok.json");
        [tok.vocab_size, eos, tok.decode(ids), tok.decode(ids, #{{ skip_special: true }}),
         back.encode("The quick fox<|endoftext|>") == ids, ids[-1] == tok.eos_id,
         tok.decode(tok.encode_tensor("Grüße"))]
        "#,
        dir = c.path()
    ))
    .unwrap();
    let v = out.into_array().unwrap();
    assert_eq!(v[0].as_int().unwrap(), 300);
    assert_eq!(v[1].as_int().unwrap(), 0);
    assert_eq!(
        v[2].clone().into_string().unwrap(),
        "The quick fox<|endoftext|>"
    );
    assert_eq!(v[3].clone().into_string().unwrap(), "The quick fox");
    assert!(v[4].as_bool().unwrap() && v[5].as_bool().unwrap());
    assert_eq!(v[6].clone().into_string().unwrap(), "Grüße");
}

#[test]
fn files_walks_directories_sorted_by_extension() {
    let c = Corpus::new("files");
    let found = eval(&format!(
        "text::files([{}], #{{ extensions: [\"md\"] }})",
        c.path()
    ))
    .unwrap()
    .into_array()
    .unwrap();
    let names: Vec<String> = found
        .into_iter()
        .map(|d| d.into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(
        names[0].ends_with("a.md") && names[1].ends_with("b.md"),
        "{names:?}"
    );
}

#[test]
fn token_files_give_windows_splits_and_a_unigram_baseline() {
    let c = Corpus::new("data");
    let out = eval(&format!(
        r#"
        let dir = {dir};
        let tok = text::train_bpe([dir], #{{ vocab_size: 300, extensions: ["md"] }});
        let tokens = data::token_file(tok, [dir], dir + "/corpus.tokens", #{{ extensions: ["md"] }});
        let again = data::open_tokens(dir + "/corpus.tokens");
        let parts = tokens.split(0.8);
        let train = parts[0];
        let val = parts[1];
        let b1 = train.batch(5, 4, 16, #{{ seed: 3 }});
        let b2 = train.batch(5, 4, 16, #{{ seed: 3 }});
        let evals = val.eval_batches(2, 16, 3);
        [again.len() == tokens.len(), train.len() + val.len() == tokens.len(),
         b1[0].shape, b1[0].tolist() == b2[0].tolist() && b1[1].tolist() != b1[0].tolist(), evals.len(),
         data::unigram_cross_entropy(train, val), train.unigram_entropy(), tokens.vocab_size]
        "#,
        dir = c.path()
    ))
    .unwrap();
    let v = out.into_array().unwrap();
    assert!(v[0].as_bool().unwrap() && v[1].as_bool().unwrap());
    let shape: Vec<i64> = v[2]
        .clone()
        .into_array()
        .unwrap()
        .iter()
        .map(|d| d.as_int().unwrap())
        .collect();
    assert_eq!(shape, [4, 16]);
    assert!(
        v[3].as_bool().unwrap(),
        "the same step gave different windows"
    );
    assert!(v[4].as_int().unwrap() >= 1);
    let (ce, h) = (v[5].as_float().unwrap(), v[6].as_float().unwrap());
    assert!(ce > 0.0 && h > 0.0 && ce.is_finite(), "{ce} {h}");
    assert_eq!(v[7].as_int().unwrap(), 300);
}

#[test]
fn unknown_options_and_bad_patterns_are_errors() {
    let c = Corpus::new("errors");
    let err = eval(&format!(
        "text::train_bpe([{}], #{{ vocab: 300 }})",
        c.path()
    ))
    .unwrap_err();
    assert!(err.contains("unknown option vocab"), "{err}");
    let err = eval(&format!(
        "text::train_bpe([{}], #{{ pattern: \"gpt4\" }})",
        c.path()
    ))
    .unwrap_err();
    assert!(err.contains("gpt4"), "{err}");
    let err = eval("text::load_tokenizer(\"/nonexistent/tokenizer.json\")").unwrap_err();
    assert!(err.contains("/nonexistent/tokenizer.json"), "{err}");
}

#[test]
fn every_text_and_token_function_has_help() {
    let _engine = rusting_brain_rhai::new_engine();
    for name in [
        "text::train_bpe",
        "text::load_tokenizer",
        "text::files",
        "encode",
        "decode",
        "save",
        "token_id",
        "data::token_file",
        "data::open_tokens",
        "data::unigram_cross_entropy",
        "batch",
        "eval_batches",
        "split",
        "unigram_entropy",
        "vocab_size",
    ] {
        assert!(
            !rusting_brain_rhai::help::lookup(name).is_empty(),
            "no help for {name}"
        );
    }
}

#[test]
fn encode_adds_the_template_tokens_only_when_asked() {
    // A published-style file whose post-processor puts <|endoftext|> (id 0) before the text.
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/tokenizer/hf_gpt2.tokenizer.json"
    );
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    v["post_processor"] = serde_json::json!({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<|endoftext|>":
            {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}});
    let dir = std::env::temp_dir().join(format!("rb_text_api_template_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let src = format!(
        "let tok = text::load_tokenizer({:?}); \
         [tok.encode(\"the cat\"), tok.encode(\"the cat\", #{{ add_special_tokens: true }}), \
          tok.encode(\"the cat\", #{{ add_special_tokens: false }})]",
        path.display().to_string()
    );
    let out = eval(&src).unwrap().into_array().unwrap();
    let ids = |d: &Dynamic| -> Vec<i64> {
        d.clone()
            .into_array()
            .unwrap()
            .into_iter()
            .map(|x| x.as_int().unwrap())
            .collect()
    };
    let (plain, templated, off) = (ids(&out[0]), ids(&out[1]), ids(&out[2]));
    assert_eq!(templated[0], 0);
    assert_eq!(templated[1..], plain[..]);
    assert_eq!(off, plain);
    let typo = eval(&src.replace("add_special_tokens: true", "add_special: true")).unwrap_err();
    assert!(typo.contains("add_special_tokens"), "{typo}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A chat template renders a conversation from a script; a bad message and a template's own
/// error are named (the message's index, the template's line).
#[test]
fn a_script_renders_a_chat_template_and_errors_name_what_failed() {
    let out = eval(
        r#"let t = text::chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
        t.render([#{ role: "system", content: "Be brief." }, #{ role: "user", content: "Hi" }],
                 #{ add_generation_prompt: true })"#,
    )
    .unwrap();
    assert_eq!(
        out.into_string().unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let bad =
        eval(r#"text::chat_template("{{ x }}").render([#{ role: "user" }], #{})"#).unwrap_err();
    assert!(bad.contains("entry 0 has no string content"), "{bad}");
    let raised = eval(
        r#"text::chat_template("ok\n{{ raise_exception('roles must alternate') }}").render([], #{})"#,
    )
    .unwrap_err();
    assert!(
        raised.contains("line 2") && raised.contains("roles must alternate"),
        "{raised}"
    );
}
