//! LoRA and Hugging Face directories from scripts: `lm::lora`, `merge_lora`, PEFT adapter
//! directories and the options of `save_pretrained`.

use rhai::Dynamic;

fn eval(src: &str) -> Result<Dynamic, String> {
    rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .map_err(|e| e.to_string())
}

const SETUP: &str = r#"
    let make = || lm::transformer(#{ vocab: 20, d_model: 16, layers: 2, heads: 2, kv_heads: 1, max_seq_len: 32, seed: 1 });
    let model = make.call();
    let x = tensor([[1, 2, 3, 4, 5, 6, 7, 8]], #{ dtype: "i64" });
    let y = tensor([[2, 3, 4, 5, 6, 7, 8, 9]], #{ dtype: "i64" });
    let max_diff = |a, b| (a - b).abs().max().item();
"#;

fn run(body: &str) -> Result<Dynamic, String> {
    eval(&format!("{SETUP}\n{body}"))
}

#[test]
fn lora_trains_only_the_adapters_and_an_adapter_dir_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        r#"let before = model.forward(x);
        lm::lora(model, #{{ rank: 2, alpha: 4, targets: ["q_proj", "v_proj", "up_proj"], seed: 3 }});
        let n = model.parameters().len();
        let opt = optim::adamw(model.parameters(), #{{ lr: 0.05, weight_decay: 0.0 }});
        let first = model.train_step([x, y], opt).item();
        let last = first;
        for i in 0..10 {{ last = model.train_step([x, y], opt).item(); }}
        model.save_adapter("{d}");
        let adapted = model.forward(x);
        let other = lm::load_adapter(make.call(), "{d}");
        let reloaded = max_diff.call(other.forward(x), adapted);
        model.merge_lora();
        [n, last < first, max_diff.call(adapted, before) > 1e-3, reloaded, max_diff.call(model.forward(x), adapted), type_of(model.lora_config()) == "()"]"#,
        d = dir.path().display()
    );
    let out = run(&src).unwrap().cast::<rhai::Array>();
    assert_eq!(
        out[0].as_int().unwrap(),
        2 * 3 * 2,
        "A and B per target per layer"
    );
    assert!(out[1].as_bool().unwrap(), "training must lower the loss");
    assert!(
        out[2].as_bool().unwrap(),
        "the trained adapters must change the logits"
    );
    assert_eq!(
        out[3].as_float().unwrap(),
        0.0,
        "reloaded adapters give the same logits"
    );
    assert!(out[4].as_float().unwrap() < 1e-4, "merged: {}", out[4]);
    assert!(out[5].as_bool().unwrap(), "no adapters after merging");
    assert!(dir.path().join("adapter_config.json").exists());
    assert!(dir.path().join("adapter_model.safetensors").exists());
}

#[test]
fn bad_lora_settings_and_a_missing_adapter_get_errors_that_name_them() {
    let e = run("lm::lora(model, #{ rank: 0 })").unwrap_err();
    assert!(e.contains("rank must be at least 1"), "{e}");
    let e = run("lm::lora(model, #{ targets: [\"q_proj\", \"qkv\"] })").unwrap_err();
    assert!(e.contains("unknown target `qkv`"), "{e}");
    let e = run("lm::lora(model, #{ rnak: 4 })").unwrap_err();
    assert!(e.contains("unknown option rnak"), "{e}");
    let e = run("lm::load_adapter(model, \"/nonexistent/adapter\")").unwrap_err();
    assert!(
        e.contains("/nonexistent/adapter/adapter_config.json"),
        "{e}"
    );
    let e = run("model.merge_lora()").unwrap_err();
    assert!(e.contains("no LoRA adapters"), "{e}");
}

#[test]
fn save_pretrained_writes_shards_and_the_tokenizer_and_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    std::fs::write(&corpus, "the cat sat on the mat. the dog sat on the log.").unwrap();
    let out = dir.path().join("hf");
    let src = format!(
        r#"let tok = text::train_bpe("{c}", #{{ vocab_size: 270, special_tokens: ["<|endoftext|>"] }});
        let model = lm::transformer(#{{ vocab: tok.vocab_size, d_model: 16, layers: 2, heads: 2, max_seq_len: 32, tied: false }});
        model.save_pretrained("{o}", #{{ tokenizer: tok, max_shard_size: "10KB" }});
        let back = lm::load_pretrained("{o}");
        let ids = tensor([[1, 2, 3, 4]], #{{ dtype: "i64" }});
        (model.forward(ids) - back.forward(ids)).abs().max().item()"#,
        c = corpus.display(),
        o = out.display()
    );
    assert_eq!(run(&src).unwrap().as_float().unwrap(), 0.0);
    assert!(out.join("model.safetensors.index.json").exists());
    assert!(out.join("model-00001-of-00006.safetensors").exists());
    assert!(out.join("tokenizer.json").exists());
    let generation = std::fs::read_to_string(out.join("generation_config.json")).unwrap();
    assert!(generation.contains("\"eos_token_id\": 0"), "{generation}");
}
