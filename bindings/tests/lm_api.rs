//! The `lm::` namespace from scripts: building, both ways of writing a training step,
//! evaluation, generation (batch, streaming), checkpoints and the errors a typo gets.

use rhai::Dynamic;

fn eval(src: &str) -> Result<Dynamic, String> {
    rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .map_err(|e| e.to_string())
}

const SETUP: &str = r#"
    let model = lm::transformer(#{ vocab: 20, d_model: 16, layers: 1, heads: 2, kv_heads: 1, max_seq_len: 32, seed: 1 });
    let x = tensor([[1, 2, 3, 4, 5, 6, 7, 8]], #{ dtype: "i64" });
    let y = tensor([[2, 3, 4, 5, 6, 7, 8, 9]], #{ dtype: "i64" });
    let opt = optim::adamw(model.parameters(), #{ lr: 0.01, weight_decay: 0.0 });
"#;

fn run(body: &str) -> Result<Dynamic, String> {
    eval(&format!("{SETUP}\n{body}"))
}

#[test]
fn a_hand_written_step_and_train_step_both_lower_the_loss() {
    let by_hand = run("let first = model.loss(x, y).item();
        for i in 0..15 { let loss = model.loss(x, y); opt.zero_grad(); loss.backward(); opt.step(); }
        model.loss(x, y).item() / first")
    .unwrap()
    .as_float()
    .unwrap();
    assert!(by_hand < 0.6, "ratio {by_hand}");
    let shortcut = run("let first = model.train_step([x, y], opt).item();
        let last = first;
        for i in 0..15 { last = model.train_step([[x, y], [x, y]], opt).item(); }
        last / first")
    .unwrap()
    .as_float()
    .unwrap();
    assert!(shortcut < 0.6, "ratio {shortcut}");
}

#[test]
fn evaluation_returns_loss_and_perplexity() {
    let m = run("model.evaluate([[x, y], [x, y]])")
        .unwrap()
        .cast::<rhai::Map>();
    let loss = m["loss"].as_float().unwrap();
    let ppl = m["perplexity"].as_float().unwrap();
    assert!((ppl - loss.exp()).abs() < 1e-6 * ppl);
    assert_eq!(m["tokens"].as_int().unwrap(), 16);
}

#[test]
fn generation_returns_ids_for_one_prompt_a_batch_and_a_stream() {
    let one = run("model.generate([1, 2, 3], #{ max_new_tokens: 5, temperature: 0.0 })")
        .unwrap()
        .cast::<rhai::Array>();
    assert_eq!(one.len(), 5);
    let batch = run("model.generate([[1, 2, 3], [4]], #{ max_new_tokens: 4, top_k: 5, seed: 3 })")
        .unwrap()
        .cast::<rhai::Array>();
    assert_eq!(batch.len(), 2);
    let streamed = run("let seen = []; let out = model.stream([1, 2], #{ max_new_tokens: 6, temperature: 0.0 }, |id| { seen.push(id); seen.len() < 3 }); [seen.len(), out.len()]").unwrap().cast::<rhai::Array>();
    assert_eq!(
        streamed[0].as_int().unwrap(),
        3,
        "the closure's false stops the stream"
    );
    assert_eq!(streamed[1].as_int().unwrap(), 3);
    let lp = run("model.log_probabilities([1, 2, 3, 4])")
        .unwrap()
        .cast::<rhai::Array>();
    assert_eq!(lp.len(), 3);
}

#[test]
fn a_checkpoint_restores_model_optimizer_step_and_extra() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let src = format!(
        r#"for i in 0..3 {{ model.train_step([x, y], opt); }}
        model.save("{p}", #{{ optimizer: opt, step: 3, data_seed: 5, extra: #{{ losses: [1.5, 1.25] }} }});
        let ck = lm::load("{p}");
        let m2 = ck.model();
        let opt2 = optim::adamw(m2.parameters(), #{{ lr: 0.01, weight_decay: 0.0 }});
        ck.restore(opt2);
        let a = model.train_step([x, y], opt).item();
        let b = m2.train_step([x, y], opt2).item();
        [ck.step(), ck.data_seed(), ck.extra().losses[1], a == b]"#,
        p = path.display()
    );
    let out = run(&src).unwrap().cast::<rhai::Array>();
    assert_eq!(out[0].as_int().unwrap(), 3);
    assert_eq!(out[1].as_int().unwrap(), 5);
    assert_eq!(out[2].as_float().unwrap(), 1.25);
    assert!(
        out[3].as_bool().unwrap(),
        "the resumed step must repeat the original exactly"
    );
}

#[test]
fn typos_and_bad_inputs_get_errors_that_name_them() {
    let e = eval("lm::transformer(#{ vocab: 10, d_modl: 8 })").unwrap_err();
    assert!(
        e.contains("unknown option d_modl") && e.contains("d_model"),
        "{e}"
    );
    let e = eval("lm::transformer(#{ d_model: 8 })").unwrap_err();
    assert!(e.contains("vocab is required"), "{e}");
    let e = run("model.generate([1, 99], #{ max_new_tokens: 2 })").unwrap_err();
    assert!(e.contains("token 99"), "{e}");
    let e = run("model.generate([1], #{ top_p: 2.0, max_new_tokens: 2 })").unwrap_err();
    assert!(e.contains("top_p"), "{e}");
    let e = eval("lm::load(\"/nonexistent/ck.safetensors\")").unwrap_err();
    assert!(e.contains("/nonexistent/ck.safetensors"), "{e}");
}

#[test]
fn load_gguf_gives_a_model_that_generates_with_the_files_tokenizer() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gguf/tiny_llama.gguf");
    let out = eval(&format!(
        r#"let g = lm::load_gguf("{}");
        let text = g.model.generate(g.tokenizer, "the cat", #{{ max_new_tokens: 4, stop: [g.eos_id] }});
        [type_of(text), g.eos_id, g.bos_id, g.add_bos, g.name, g.tensor_types.Q8_0, g.model.config().layers,
         g.tokenizer.encode("the 12")]"#,
        path.display()
    ))
    .unwrap()
    .into_array()
    .unwrap();
    let shown: Vec<String> = out.iter().map(|v| v.to_string()).collect();
    assert_eq!(
        shown,
        [
            "string",
            "2",
            "1",
            "false",
            "tiny llama",
            "4",
            "2",
            "[86, 260, 223, 19, 20]"
        ]
    );
    let err = eval(r#"lm::load_gguf("no/such.gguf")"#).unwrap_err();
    assert!(err.contains("no/such.gguf"), "{err}");
}

#[test]
fn export_gguf_writes_a_file_that_load_gguf_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf").display().to_string();
    let out = run(&format!(
        r#"let model = lm::transformer(#{{ vocab: 40, d_model: 64, layers: 1, heads: 2, ffn: 128, max_seq_len: 32, seed: 1 }});
        let r = model.export_gguf("{path}", #{{ dtype: "q8_0", name: "tiny" }});
        let g = lm::load_gguf(r.path);
        [r.tensor_types.Q8_0, r.tensor_types.F32, g.name, g.model.config().d_model, (g.model.forward(x) - model.forward(x)).abs().max().item()]"#
    ))
    .unwrap();
    let v = out.into_array().unwrap();
    // 1 layer x 7 matrices + the embedding (tied: no head) in Q8_0; 3 norms in F32.
    assert_eq!(v[0].as_int().unwrap(), 8);
    assert_eq!(v[1].as_int().unwrap(), 3);
    assert_eq!(v[2].clone().into_string().unwrap(), "tiny");
    assert_eq!(v[3].as_int().unwrap(), 64);
    assert!(v[4].as_float().unwrap() < 0.05, "{}", v[4]);
}

#[test]
fn export_gguf_names_an_unknown_dtype_and_a_wrong_tokenizer() {
    let msg = run(r#"model.export_gguf("out/x.gguf", #{ dtype: "q3_k" })"#).unwrap_err();
    assert!(msg.contains("q3_k") && msg.contains("q4_k"), "{msg}");
    let msg = run(r#"model.export_gguf("out/x.gguf", #{ tokenizer: 3 })"#).unwrap_err();
    assert!(
        msg.contains("tokenizer") && msg.contains("Tokenizer"),
        "{msg}"
    );
}

/// `experts` builds a mixture of experts from a script (Mixtral's layout): its loss is the
/// cross-entropy plus the weighted router losses, and it trains; the router options without
/// experts are refused by name, and a dense model has no router losses.
#[test]
fn a_mixture_of_experts_from_a_script_adds_its_router_losses_and_trains() {
    let parts = eval(
        r#"let moe = lm::transformer(#{ vocab: 20, d_model: 16, layers: 2, heads: 2, experts: 4, router_aux_loss_coef: 0.02, router_z_loss_coef: 0.01, seed: 3 });
           let x = tensor([[1, 2, 3, 4, 5, 6, 7, 8]], #{ dtype: "i64" });
           let y = tensor([[2, 3, 4, 5, 6, 7, 8, 9]], #{ dtype: "i64" });
           let ce = nn::cross_entropy(moe.forward(x).reshape([8, 20]), y.reshape([8])).item();
           let total = moe.loss(x, y).item();
           let weighted = ce + 0.02 * moe.router_aux_loss(x).item() + 0.01 * moe.router_z_loss(x).item();
           let opt = optim::adamw(moe.parameters(), #{ lr: 0.01 });
           for i in 0..10 { let l = moe.loss(x, y); opt.zero_grad(); l.backward(); opt.step(); }
           [total, weighted, moe.loss(x, y).item() / total, moe.config().experts]"#,
    )
    .unwrap()
    .cast::<rhai::Array>();
    let (total, weighted) = (parts[0].as_float().unwrap(), parts[1].as_float().unwrap());
    assert!((total - weighted).abs() < 1e-5, "{total} vs {weighted}");
    assert!(parts[2].as_float().unwrap() < 0.9, "{:?}", parts[2]);
    assert_eq!(parts[3].as_int().unwrap(), 4);
    let err = eval("lm::transformer(#{ vocab: 20, router_z_loss_coef: 0.1 })").unwrap_err();
    assert!(
        err.contains("router_z_loss_coef is a mixture-of-experts option; give experts too"),
        "{err}"
    );
    let err =
        eval("lm::transformer(#{ vocab: 20, experts: 2, experts_per_token: 3 })").unwrap_err();
    assert!(
        err.contains("experts_per_token (3) must be between 1 and experts (2)"),
        "{err}"
    );
    let err = run("model.router_aux_loss(x)").unwrap_err();
    assert!(err.contains("has no experts"), "{err}");
}
