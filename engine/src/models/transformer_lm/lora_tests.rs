//! LoRA on the language model: what trains, what merging keeps, and what is refused.

use super::*;
use crate::nn::Module;
use crate::optim::{AdamW, AdamWConfig};
use crate::{no_grad, DType, Device, Generator, Tensor};

fn config() -> LmConfig {
    let mut c = LmConfig::new(40, 16, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 24;
    c.max_seq_len = 16;
    c.init_std = 0.2;
    c
}

fn lora(targets: &[&str]) -> LoraConfig {
    LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: targets.iter().map(|t| t.to_string()).collect(),
        use_rslora: false,
        seed: 3,
    }
}

fn batch(step: i64) -> Vec<(Tensor, Tensor)> {
    let seq: Vec<i64> = (0..25).map(|i| (i * 7 + step * 3) % 40).collect();
    let x = Tensor::from_vec(seq[..24].to_vec(), &[2, 12]).unwrap();
    let y = Tensor::from_vec(seq[1..].to_vec(), &[2, 12]).unwrap();
    vec![(x, y)]
}

fn ids() -> Tensor {
    Tensor::from_vec(vec![1i64, 5, 9, 2, 33, 7, 0, 12], &[1, 8]).unwrap()
}

fn logits(m: &TransformerLm) -> Vec<f32> {
    no_grad(|| m.forward(&ids())).unwrap().to_vec_f32().unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// A model with adapters on three projections, trained for a few AdamW steps.
fn trained(seed: u64) -> TransformerLm {
    let mut m = TransformerLm::new(config(), &mut Generator::new(seed)).unwrap();
    m.add_lora(lora(&["q_proj", "v_proj", "down_proj"]))
        .unwrap();
    let cfg = AdamWConfig {
        lr: 1e-2,
        ..Default::default()
    };
    let mut opt = AdamW::new(m.trainable_parameters(), cfg).unwrap();
    for s in 0..4 {
        train_step(&m, &mut opt, &batch(s)).unwrap();
    }
    m
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let max_ref = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let max_diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    max_diff / max_ref
}

#[test]
fn lora_training_changes_the_adapters_and_leaves_every_base_weight_bit_equal() {
    let base = TransformerLm::new(config(), &mut Generator::new(1)).unwrap();
    let m = trained(1);
    let trainable: Vec<String> = m
        .named_parameters()
        .into_iter()
        .filter(|(_, t)| t.requires_grad())
        .map(|(n, _)| n)
        .collect();
    // 2 layers x 3 targets x (A, B).
    assert_eq!(trainable.len(), 12, "{trainable:?}");
    assert!(
        trainable.iter().all(|n| is_adapter_name(n)),
        "{trainable:?}"
    );
    let before = base.state_dict();
    for (name, t) in m.named_parameters() {
        match before.get(&name) {
            Some(b) => assert_eq!(bits(&t), bits(b), "{name} changed"),
            None if name.contains("lora_B") => {
                let v = t.to_vec_f32().unwrap();
                assert!(v.iter().any(|&x| x != 0.0), "{name} did not train");
            }
            None => assert!(name.contains("lora_A"), "unexpected {name}"),
        }
    }
}

#[test]
fn a_fresh_adapter_leaves_the_logits_unchanged_and_training_moves_them() {
    let base = TransformerLm::new(config(), &mut Generator::new(2)).unwrap();
    let mut fresh = TransformerLm::new(config(), &mut Generator::new(2)).unwrap();
    fresh.add_lora(lora(&["q_proj", "k_proj"])).unwrap();
    assert_eq!(logits(&fresh), logits(&base));
    assert!(max_rel_diff(&logits(&trained(2)), &logits(&base)) > 1e-3);
}

#[test]
fn merged_model_gives_the_adapted_model_logits_and_trains_every_parameter_again() {
    let mut m = trained(3);
    let adapted = logits(&m);
    m.merge_lora().unwrap();
    let merged = logits(&m);
    let rel = max_rel_diff(&merged, &adapted);
    assert!(rel < 1e-5, "merged vs adapted: {rel}");
    assert!(m.lora_config().is_none());
    let named = m.named_parameters();
    assert!(named.iter().all(|(n, _)| !is_adapter_name(n)));
    assert!(named.iter().all(|(_, t)| t.requires_grad()));
    assert_eq!(m.trainable_parameters().len(), named.len());
}

#[test]
fn add_lora_names_each_bad_setting() {
    let mut m = TransformerLm::new(config(), &mut Generator::new(4)).unwrap();
    let mut bad = lora(&["q_proj", "qkv_proj", "lm_head"]);
    bad.rank = 0;
    let msg = m.add_lora(bad).unwrap_err().to_string();
    for needle in [
        "rank must be at least 1",
        "unknown target `qkv_proj`",
        "unknown target `lm_head`",
    ] {
        assert!(msg.contains(needle), "{needle:?} not in {msg}");
    }
    assert!(
        m.lora_config().is_none(),
        "a refused config changes nothing"
    );
    assert!(m.parameters().iter().all(|t| t.requires_grad()));
    m.add_lora(lora(&["o_proj"])).unwrap();
    let msg = m.add_lora(lora(&["o_proj"])).unwrap_err().to_string();
    assert!(msg.contains("already has LoRA adapters"), "{msg}");
    let msg = TransformerLm::new(config(), &mut Generator::new(4))
        .unwrap()
        .merge_lora()
        .unwrap_err()
        .to_string();
    assert!(msg.contains("no LoRA adapters"), "{msg}");
}

#[test]
fn a_training_checkpoint_of_an_adapted_model_brings_the_adapters_back() {
    let m = trained(5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lora.safetensors");
    checkpoint::save(&path, &m, None, &TrainState::default()).unwrap();
    let back = checkpoint::load(&path)
        .unwrap()
        .model(DType::F32, Device::Cpu)
        .unwrap();
    assert_eq!(back.lora_config(), m.lora_config());
    assert_eq!(logits(&back), logits(&m));
    assert_eq!(back.trainable_parameters().len(), 12);
}
