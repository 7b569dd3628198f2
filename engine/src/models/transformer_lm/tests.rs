use super::*;
use crate::nn::Module;
use crate::{no_grad, DType, Generator, Tensor};

fn tiny(kv_heads: usize) -> LmConfig {
    let mut c = LmConfig::new(37, 16, 2, 4);
    c.n_kv_heads = kv_heads;
    c.ffn_hidden = 24;
    c.max_seq_len = 32;
    c.init_std = 0.2;
    c
}

fn ids(v: &[i64], b: usize) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[b, v.len() / b]).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn parameter_names_follow_hugging_face_llama() {
    let m = TransformerLm::new(tiny(2), &mut Generator::new(0)).unwrap();
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    for name in [
        "model.embed_tokens.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.1.post_attention_layernorm.weight",
        "model.norm.weight",
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "{name} missing from {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n == "lm_head.weight"),
        "tied models have no lm_head"
    );
    // embed 37*16, per layer: q 16*16, k and v 8*16 each, o 16*16, mlp 3*16*24, norms 2*16.
    let per_layer = 256 + 128 + 128 + 256 + 3 * 16 * 24 + 32;
    assert_eq!(m.num_parameters(), 37 * 16 + 2 * per_layer + 16);
    let k = &m.state_dict()["model.layers.0.self_attn.k_proj.weight"];
    assert_eq!(k.shape(), [8, 16]);
}

#[test]
fn untied_models_have_an_lm_head() {
    let mut c = tiny(4);
    c.tied_embeddings = false;
    let m = TransformerLm::new(c, &mut Generator::new(0)).unwrap();
    assert_eq!(m.state_dict()["lm_head.weight"].shape(), [37, 16]);
}

#[test]
fn causal_logits_ignore_later_tokens_and_bidirectional_ones_do_not() {
    for bidirectional in [false, true] {
        let mut c = tiny(2);
        c.bidirectional = bidirectional;
        let m = TransformerLm::new(c, &mut Generator::new(1)).unwrap();
        let a = m.forward(&ids(&[1, 2, 3, 4], 1)).unwrap();
        let b = m.forward(&ids(&[1, 2, 3, 9], 1)).unwrap();
        let early = |t: &Tensor| t.narrow(1, 0, 3).unwrap();
        let d = max_diff(&early(&a), &early(&b));
        if bidirectional {
            assert!(d > 1e-4, "bidirectional positions must see the last token");
        } else {
            assert_eq!(d, 0.0, "causal positions must not see later tokens");
        }
    }
}

#[test]
fn cached_decoding_gives_the_logits_of_a_full_forward() {
    let m = TransformerLm::new(tiny(2), &mut Generator::new(2)).unwrap();
    let seq = [5i64, 1, 7, 7, 30, 2, 11];
    let full = no_grad(|| m.forward(&ids(&seq, 1))).unwrap();
    let mut cache = m.new_cache(1, 16).unwrap();
    let prompt = no_grad(|| m.project(&m.hidden(&ids(&seq[..4], 1), Some(&mut cache))?)).unwrap();
    assert!(max_diff(&prompt, &full.narrow(1, 0, 4).unwrap()) < 1e-5);
    for (i, &tok) in seq.iter().enumerate().skip(4) {
        let step = no_grad(|| m.project(&m.hidden(&ids(&[tok], 1), Some(&mut cache))?)).unwrap();
        assert!(
            max_diff(&step, &full.narrow(1, i, 1).unwrap()) < 1e-5,
            "step {i}"
        );
    }
    assert_eq!(cache.len(), seq.len());
}

#[test]
fn a_left_padded_row_decodes_like_the_sequence_alone() {
    let m = TransformerLm::new(tiny(2), &mut Generator::new(3)).unwrap();
    let alone = no_grad(|| m.forward(&ids(&[4, 8, 15], 1))).unwrap();
    let mut cache = m.new_cache(2, 8).unwrap();
    cache.set_pads(vec![2, 0]).unwrap();
    // Row 0 is [pad, pad, 4, 8, 15] padded; row 1 is a full-length other sequence.
    let batch = ids(&[0, 0, 4, 8, 15, 3, 1, 4, 1, 5], 2);
    let out = no_grad(|| m.project(&m.hidden(&batch, Some(&mut cache))?)).unwrap();
    let row0 = out.narrow(0, 0, 1).unwrap().narrow(1, 2, 3).unwrap();
    assert!(max_diff(&row0, &alone) < 1e-5);
}

#[test]
fn a_bf16_copy_keeps_the_logits_close() {
    let m = TransformerLm::new(tiny(4), &mut Generator::new(4)).unwrap();
    let x = ids(&[1, 2, 3, 4, 5, 6], 2);
    let full = no_grad(|| m.forward(&x)).unwrap();
    let half = m.with_dtype(DType::BF16).unwrap();
    assert_eq!(half.dtype(), DType::BF16);
    let low = no_grad(|| half.forward(&x))
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    assert!(max_diff(&full, &low) < 0.1, "{}", max_diff(&full, &low));
}

#[test]
fn loading_reports_every_missing_and_misshaped_tensor() {
    let m = TransformerLm::new(tiny(2), &mut Generator::new(0)).unwrap();
    let mut state = m.state_dict();
    state.remove("model.norm.weight");
    state.insert(
        "model.layers.0.self_attn.q_proj.weight".into(),
        Tensor::zeros(&[3, 3], DType::F32, crate::Device::Cpu).unwrap(),
    );
    state.insert(
        "extra.weight".into(),
        Tensor::scalar(1.0, DType::F32).unwrap(),
    );
    let msg = match TransformerLm::from_tensors(tiny(2), &state, DType::F32, crate::Device::Cpu) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a broken state dict loaded"),
    };
    for needle in [
        "missing 1: model.norm.weight",
        "q_proj.weight is [3, 3] in the file",
        "unexpected 1: extra.weight",
    ] {
        assert!(msg.contains(needle), "{needle:?} not in {msg}");
    }
}

#[test]
fn a_config_larger_than_its_weights_is_refused_before_anything_is_allocated() {
    let state = TransformerLm::new(tiny(2), &mut Generator::new(0))
        .unwrap()
        .state_dict();
    let load = |c: LmConfig| match TransformerLm::from_tensors(
        c,
        &state,
        DType::F32,
        crate::Device::Cpu,
    ) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a config that does not match its weights loaded"),
    };
    let mut wide = tiny(2);
    (wide.d_model, wide.n_heads, wide.n_kv_heads) = (1 << 17, 1 << 13, 1 << 12);
    let msg = load(wide);
    assert!(msg.contains("vocab_size and hidden_size"), "{msg}");
    let mut deep = tiny(2);
    deep.n_layers = 4000;
    let msg = load(deep);
    assert!(msg.contains("the config has 4000 layers"), "{msg}");
    let mut ffn = tiny(2);
    ffn.ffn_hidden = 1 << 20;
    assert!(load(ffn).contains("intermediate_size"));
}

#[test]
fn missing_tensors_are_reported_without_allocating_stand_ins() {
    let mut c = tiny(2);
    // A terabyte of embedding: a stand-in of this shape could not be allocated at all.
    (c.vocab_size, c.d_model) = (1 << 24, 1 << 14);
    (c.n_heads, c.n_kv_heads, c.ffn_hidden) = (128, 128, 64);
    // Only the layer count is right: every weight but the norms is absent, so nothing but
    // the config bounds the shapes.
    let mut state = std::collections::BTreeMap::new();
    for i in 0..c.n_layers {
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            state.insert(
                format!("model.layers.{i}.{norm}.weight"),
                Tensor::ones(&[c.d_model], DType::F32, crate::Device::Cpu).unwrap(),
            );
        }
    }
    let msg = match TransformerLm::from_tensors(c, &state, DType::F32, crate::Device::Cpu) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a model without weights loaded"),
    };
    assert!(msg.contains("missing "), "{msg}");
    assert!(msg.contains("model.embed_tokens.weight"), "{msg}");
    assert!(msg.contains("model.layers.1.mlp.down_proj.weight"), "{msg}");
}

#[test]
fn a_few_steps_of_training_lower_the_loss() {
    use crate::optim::{AdamW, AdamWConfig, Optimizer};
    let m = TransformerLm::new(tiny(2), &mut Generator::new(5)).unwrap();
    let x = ids(&[1, 2, 3, 4, 1, 2, 3, 4], 2);
    let y = ids(&[2, 3, 4, 1, 2, 3, 4, 1], 2);
    let mut opt = AdamW::new(
        m.parameters(),
        AdamWConfig {
            lr: 1e-2,
            ..Default::default()
        },
    )
    .unwrap();
    let first = m.loss(&x, &y).unwrap().item().unwrap();
    for _ in 0..20 {
        let loss = m.loss(&x, &y).unwrap();
        opt.zero_grad();
        loss.backward().unwrap();
        opt.step().unwrap();
    }
    let last = m.loss(&x, &y).unwrap().item().unwrap();
    assert!(last < first * 0.5, "loss {first} -> {last}");
}

#[test]
fn integer_parameters_are_refused_by_every_constructor() {
    let c = tiny(2);
    let err = TransformerLm::new_on(
        c.clone(),
        &mut Generator::new(0),
        DType::I64,
        crate::Device::Cpu,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("float dtype"), "{err}");
    let m = TransformerLm::new(c.clone(), &mut Generator::new(0)).unwrap();
    let err = TransformerLm::from_tensors(c, &m.state_dict(), DType::U8, crate::Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("float dtype"), "{err}");
}

#[test]
fn the_printed_model_folds_its_identical_decoder_layers() {
    let m = TransformerLm::new(tiny(2), &mut Generator::new(0)).unwrap();
    let expected = "\
TransformerLm(
  llama, vocab=37, d_model=16, layers=2, heads=4, kv_heads=2, ffn=24, max_seq_len=32
  (embed_tokens): Embedding(37, 16)  592 params
  (layers): ModuleList(
    (0-1): 2 x Block(
      (input_layernorm): RMSNorm(16, eps=1e-5)  16 params
      (self_attn): Attention(
        heads=4, kv_heads=2, head_dim=4, causal=true
        (q_proj): Linear(in=16, out=16, bias=false)  256 params
        (k_proj): Linear(in=16, out=8, bias=false)  128 params
        (v_proj): Linear(in=16, out=8, bias=false)  128 params
        (o_proj): Linear(in=16, out=16, bias=false)  256 params
      )
      (post_attention_layernorm): RMSNorm(16, eps=1e-5)  16 params
      (mlp): GatedMlp(
        (gate_proj): Linear(in=16, out=24, bias=false)  384 params
        (up_proj): Linear(in=16, out=24, bias=false)  384 params
        (down_proj): Linear(in=24, out=16, bias=false)  384 params
      )
    )
  )
  (norm): RMSNorm(16, eps=1e-5)  16 params
  (lm_head): tied to embed_tokens
)
Total: 4,512 parameters";
    assert_eq!(crate::nn::describe(&m), expected);
}
