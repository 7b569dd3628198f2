//! QLoRA from scripts: `model.quantize("nf4")` then `lm::lora` trains the adapters over a
//! frozen NF4 base; `model.quantized_layers()` names what is quantized; bad formats and widths
//! are errors that say why.

use rhai::{Array, Dynamic, Map};

fn eval(src: &str) -> Result<Dynamic, String> {
    rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .map_err(|e| e.to_string())
}

const SETUP: &str = r#"
    let model = lm::transformer(#{ vocab: 64, d_model: 64, layers: 2, heads: 2, ffn: 128, max_seq_len: 32, tied: false, seed: 1 });
    let x = tensor([[1, 2, 3, 4, 5, 6, 7, 8]], #{ dtype: "i64" });
    let y = tensor([[2, 3, 4, 5, 6, 7, 8, 9]], #{ dtype: "i64" });
"#;

#[test]
fn a_script_fine_tunes_adapters_over_an_nf4_base() {
    let src = format!(
        r#"{SETUP}
        let dense = model.forward(x);
        model.quantize("nf4");
        let layers = model.quantized_layers();
        let moved = (model.forward(x) - dense).abs().max().item();
        lm::lora(model, #{{ rank: 4, alpha: 8, targets: ["q_proj", "v_proj"], seed: 2 }});
        let opt = optim::adamw(model.parameters(), #{{ lr: 0.05, weight_decay: 0.0 }});
        let first = model.train_step([x, y], opt).item();
        let last = first;
        for i in 0..10 {{ last = model.train_step([x, y], opt).item(); }}
        [layers, moved, model.parameters().len(), first, last]"#
    );
    let out = eval(&src).unwrap().cast::<Array>();
    let layers = out[0].clone().cast::<Map>();
    // 2 layers × 7 projections and the untied head.
    assert_eq!(layers.len(), 15);
    assert_eq!(
        layers["model.layers.1.mlp.down_proj"]
            .clone()
            .into_string()
            .unwrap(),
        "nf4"
    );
    assert!(layers.contains_key("lm_head"));
    let moved = out[1].as_float().unwrap();
    assert!(
        moved > 0.0 && moved < 0.5,
        "NF4 moves the logits a little: {moved}"
    );
    assert_eq!(
        out[2].as_int().unwrap(),
        2 * 2 * 2,
        "A and B per target per layer"
    );
    let (first, last) = (out[3].as_float().unwrap(), out[4].as_float().unwrap());
    assert!(last < first, "loss {first} -> {last}");
}

#[test]
fn an_unknown_format_or_a_width_without_whole_blocks_is_an_error_that_says_so() {
    let e = eval(&format!("{SETUP} model.quantize(\"nf8\");")).unwrap_err();
    assert!(
        e.contains("unknown format \"nf8\"") && e.contains("nf4, q8_0"),
        "{e}"
    );
    let src = r#"let model = lm::transformer(#{ vocab: 64, d_model: 32, layers: 1, heads: 2, max_seq_len: 32 });
        model.quantize("nf4");"#;
    let e = eval(src).unwrap_err();
    assert!(
        e.contains("cannot quantize to NF4") && e.contains("blocks of 64"),
        "{e}"
    );
    let src = r#"let model = lm::transformer(#{ vocab: 64, d_model: 32, layers: 1, heads: 2, max_seq_len: 32 });
        try { model.quantize("nf4") } catch { }
        model.quantized_layers().len()"#;
    assert_eq!(eval(src).unwrap().as_int().unwrap(), 0);
}
