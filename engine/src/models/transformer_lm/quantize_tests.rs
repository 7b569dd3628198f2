//! A language model with quantized projections: how close it stays, what it refuses, that an
//! adapter over it trains, and that saving writes its dequantized values.

use super::*;
use crate::nn::Module;
use crate::ops::quant_matmul::BlockFormat;
use crate::optim::{AdamW, AdamWConfig};
use crate::{no_grad, Generator, Tensor};

/// Widths that hold whole Q8_0 blocks (32), an untied head.
fn config() -> LmConfig {
    let mut c = LmConfig::new(40, 32, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 64;
    c.max_seq_len = 16;
    c.init_std = 0.2;
    c.tied_embeddings = false;
    c
}

/// Ten rows: the quantized products multiply the dequantized weights (up to eight rows take the
/// CPU's block product, which rounds the activations to 8 bits, as a decode step does).
fn ids() -> Tensor {
    Tensor::from_vec(vec![1i64, 5, 9, 2, 33, 7, 0, 12, 39, 3], &[1, 10]).unwrap()
}

fn logits(m: &TransformerLm) -> Vec<f32> {
    no_grad(|| m.forward(&ids())).unwrap().to_vec_f32().unwrap()
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let max_ref = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let max_diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    max_diff / max_ref
}

#[test]
fn q8_0_projections_keep_the_logits_within_the_formats_rounding() {
    let dense = TransformerLm::new(config(), &mut Generator::new(1)).unwrap();
    let mut q = TransformerLm::new(config(), &mut Generator::new(1)).unwrap();
    q.quantize(BlockFormat::Q8_0).unwrap();
    // 2 layers x 7 projections, and the head.
    assert_eq!(q.quantized_layers().len(), 15);
    let rel = max_rel_diff(&logits(&q), &logits(&dense));
    // Q8_0 rounds each weight by up to 1/254 of its block's range; through two layers and
    // the head the logits move by a few times that (measured: 2.1%).
    assert!(rel > 0.0 && rel < 4e-2, "Q8_0 vs dense: {rel}");
    let names: Vec<String> = q.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert!(
        !names.iter().any(|n| n.ends_with("proj.weight")),
        "quantized weights are not parameters: {names:?}"
    );
}

#[test]
fn a_width_that_does_not_hold_whole_blocks_is_refused_and_nothing_changes() {
    let mut m = TransformerLm::new(config(), &mut Generator::new(2)).unwrap();
    let before = logits(&m);
    let err = m.quantize(BlockFormat::Q4_K).unwrap_err().to_string();
    assert!(
        err.contains("cannot quantize to Q4_K")
            && err.contains("model.layers.0.self_attn.q_proj")
            && err.contains("blocks of 256"),
        "{err}"
    );
    assert!(m.quantized_layers().is_empty());
    assert_eq!(logits(&m), before);
    m.quantize(BlockFormat::Q8_0).unwrap();
    let again = m.quantize(BlockFormat::Q8_0).unwrap_err().to_string();
    assert!(again.contains("already quantized"), "{again}");
}

/// `config` with its projections quantized to `format` and rank-4 adapters on q_proj and
/// down_proj, trained five AdamW steps: the model, and its loss before and after.
fn adapters_trained_over(
    config: LmConfig,
    format: BlockFormat,
    seed: u64,
) -> (TransformerLm, f32, f32) {
    let mut m = TransformerLm::new(config, &mut Generator::new(seed)).unwrap();
    m.quantize(format).unwrap();
    m.add_lora(LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: vec!["q_proj".into(), "down_proj".into()],
        use_rslora: false,
        seed,
    })
    .unwrap();
    let seq: Vec<i64> = (0..25).map(|i| (i * 7) % 40).collect();
    let x = Tensor::from_vec(seq[..24].to_vec(), &[2, 12]).unwrap();
    let y = Tensor::from_vec(seq[1..].to_vec(), &[2, 12]).unwrap();
    let cfg = AdamWConfig {
        lr: 1e-2,
        ..Default::default()
    };
    let mut opt = AdamW::new(m.trainable_parameters(), cfg).unwrap();
    let first = no_grad(|| m.loss(&x, &y)).unwrap().to_vec_f32().unwrap()[0];
    for _ in 0..5 {
        train_step(&m, &mut opt, &[(x.clone(), y.clone())]).unwrap();
    }
    let last = no_grad(|| m.loss(&x, &y)).unwrap().to_vec_f32().unwrap()[0];
    (m, first, last)
}

#[test]
fn adapters_over_a_quantized_base_train_through_it() {
    let (m, first, last) = adapters_trained_over(config(), BlockFormat::Q8_0, 3);
    // Only the q_proj adapters (ahead of every down_proj) see a gradient that went through
    // quantized layers; they must have moved.
    let a = &m
        .named_parameters()
        .into_iter()
        .find(|(n, _)| n == "model.layers.0.self_attn.q_proj.lora_B.weight")
        .unwrap()
        .1;
    assert!(a.to_vec_f32().unwrap().iter().any(|&v| v != 0.0));
    assert!(last < first, "loss {first} -> {last}");
}

#[test]
fn save_pretrained_writes_the_dequantized_weights() {
    let mut m = TransformerLm::new(config(), &mut Generator::new(4)).unwrap();
    m.quantize(BlockFormat::Q8_0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    pretrained::save_pretrained(&m, dir.path(), &Default::default()).unwrap();
    let back =
        pretrained::load_pretrained(dir.path(), crate::DType::F32, crate::Device::Cpu).unwrap();
    assert!(back.quantized_layers().is_empty());
    assert_eq!(logits(&back), logits(&m));
}

/// Widths of whole NF4 blocks (64), an untied head.
fn nf4_config() -> LmConfig {
    let mut c = config();
    c.d_model = 64;
    c.ffn_hidden = 128;
    c
}

#[test]
fn nf4_projections_compute_with_their_dequantized_values_and_stay_near_the_dense_ones() {
    let dense = TransformerLm::new(nf4_config(), &mut Generator::new(5)).unwrap();
    let mut q = TransformerLm::new(nf4_config(), &mut Generator::new(5)).unwrap();
    q.quantize(BlockFormat::Nf4).unwrap();
    assert_eq!(q.quantized_layers().len(), 15);
    assert!(q
        .quantized_layers()
        .iter()
        .all(|(_, f)| *f == BlockFormat::Nf4));
    // A dense model holding the NF4 values gives the quantized model's logits.
    let state = q.dense_state().unwrap();
    let held = TransformerLm::new(nf4_config(), &mut Generator::new(9)).unwrap();
    held.load_state_dict(&state.iter().cloned().collect(), true)
        .unwrap();
    let rel = max_rel_diff(&logits(&q), &logits(&held));
    assert!(rel < 1e-5, "NF4 vs its dequantized values: {rel}");
    // Sixteen levels a block: the weights move by about 9% of their norm (bitsandbytes on
    // normal values: 9.2%).
    let dense_state: std::collections::BTreeMap<_, _> =
        dense.dense_state().unwrap().into_iter().collect();
    for (name, w) in &state {
        if !name.ends_with("proj.weight") && name != "lm_head.weight" {
            continue;
        }
        let d = &dense_state[name];
        let norm = |t: &Tensor| t.square().unwrap().sum().unwrap().item().unwrap().sqrt();
        let err = norm(&w.sub(d).unwrap()) / norm(d);
        assert!(err > 0.0 && err < 0.11, "{name}: NF4 error {err}");
    }
}

#[test]
fn adapters_over_an_nf4_base_train_through_it() {
    let (_, first, last) = adapters_trained_over(nf4_config(), BlockFormat::Nf4, 6);
    assert!(last < first, "loss {first} -> {last}");
}
