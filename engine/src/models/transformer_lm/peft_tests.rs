//! PEFT adapter directories: round trip, the exact names and config fields PEFT reads, and
//! the refusals.

use super::peft::{load_adapter, save_adapter, ADAPTER_CONFIG, ADAPTER_WEIGHTS};
use super::*;
use crate::nn::Module;
use crate::{no_grad, Generator, Tensor};
use std::path::Path;

fn config() -> LmConfig {
    let mut c = LmConfig::new(30, 16, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 24;
    c.max_seq_len = 16;
    c.init_std = 0.2;
    c
}

fn base() -> TransformerLm {
    TransformerLm::new(config(), &mut Generator::new(7)).unwrap()
}

/// A base with adapters on q_proj and gate_proj whose B factors are non-zero.
fn adapted() -> TransformerLm {
    let mut m = base();
    m.add_lora(LoraConfig {
        rank: 2,
        alpha: 6.0,
        dropout: 0.1,
        targets: vec!["q_proj".into(), "gate_proj".into()],
        use_rslora: false,
        seed: 1,
    })
    .unwrap();
    for (i, (name, t)) in m.named_parameters().into_iter().enumerate() {
        if name.contains("lora_B") {
            let v: Vec<f32> = (0..t.numel())
                .map(|k| ((k + i) % 7) as f32 * 0.05 - 0.15)
                .collect();
            no_grad(|| t.copy_(&Tensor::from_vec(v, t.shape()).unwrap())).unwrap();
        }
    }
    m
}

fn logits(m: &TransformerLm) -> Vec<f32> {
    let ids = Tensor::from_vec(vec![3i64, 1, 4, 1, 5, 9, 2, 6], &[1, 8]).unwrap();
    no_grad(|| m.forward(&ids)).unwrap().to_vec_f32().unwrap()
}

fn saved(dir: &Path) -> TransformerLm {
    let m = adapted();
    save_adapter(&m, dir, Some("tiny-base")).unwrap();
    m
}

#[test]
fn a_saved_adapter_loads_back_onto_the_same_base_with_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    let m = saved(dir.path());
    let mut back = base();
    let config = load_adapter(&mut back, dir.path()).unwrap();
    assert_eq!(config.rank, 2);
    assert_eq!(config.targets, ["q_proj", "gate_proj"]);
    assert_eq!(logits(&back), logits(&m));
    assert_ne!(logits(&back), logits(&base()), "the adapter must matter");
    assert_eq!(back.trainable_parameters().len(), 8);
}

#[test]
fn adapter_files_use_peft_names_and_config_fields() {
    let dir = tempfile::tempdir().unwrap();
    saved(dir.path());
    let names: Vec<String> = crate::io::safetensors::load(dir.path().join(ADAPTER_WEIGHTS))
        .unwrap()
        .into_iter()
        .map(|(n, t)| format!("{n} {:?}", t.shape()))
        .collect();
    assert_eq!(names.len(), 8);
    for n in [
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight [2, 16]",
        "base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight [24, 2]",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} not in {names:?}");
    }
    let text = std::fs::read_to_string(dir.path().join(ADAPTER_CONFIG)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["peft_type"], "LORA");
    assert_eq!(v["task_type"], "CAUSAL_LM");
    assert_eq!(v["r"], 2);
    assert_eq!(v["lora_alpha"], 6.0);
    assert_eq!(v["lora_dropout"], 0.1);
    assert_eq!(
        v["target_modules"],
        serde_json::json!(["q_proj", "gate_proj"])
    );
    assert_eq!(v["bias"], "none");
    assert_eq!(v["base_model_name_or_path"], "tiny-base");
}

fn load_error(dir: &Path) -> String {
    let mut m = base();
    let msg = load_adapter(&mut m, dir).unwrap_err().to_string();
    assert!(m.lora_config().is_none(), "a failed load changes nothing");
    msg
}

#[test]
fn a_missing_adapter_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    saved(dir.path());
    std::fs::remove_file(dir.path().join(ADAPTER_WEIGHTS)).unwrap();
    let msg = load_error(dir.path());
    assert!(msg.contains(ADAPTER_WEIGHTS), "{msg}");
    std::fs::remove_file(dir.path().join(ADAPTER_CONFIG)).unwrap();
    let msg = load_error(dir.path());
    assert!(msg.contains(ADAPTER_CONFIG), "{msg}");
}

#[test]
fn an_adapter_of_another_rank_or_width_is_refused_naming_the_tensors() {
    let dir = tempfile::tempdir().unwrap();
    saved(dir.path());
    let path = dir.path().join(ADAPTER_CONFIG);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("\"r\": 2", "\"r\": 3")).unwrap();
    let msg = load_error(dir.path());
    assert!(
        msg.contains("model.layers.0.self_attn.q_proj.lora_A.weight is [2, 16] in the file, [3, 16] in the model"),
        "{msg}"
    );
    // A base of another width: every factor is mis-shaped.
    std::fs::write(&path, text).unwrap();
    let mut c = config();
    c.ffn_hidden = 32;
    let mut wide = TransformerLm::new(c, &mut Generator::new(0)).unwrap();
    let msg = load_adapter(&mut wide, dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("mlp.gate_proj.lora_B.weight is [24, 2] in the file, [32, 2] in the model"),
        "{msg}"
    );
}

#[test]
fn unknown_targets_and_unsupported_peft_features_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    saved(dir.path());
    let path = dir.path().join(ADAPTER_CONFIG);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["target_modules"] = serde_json::json!(["q_proj", "lm_head"]);
    std::fs::write(&path, v.to_string()).unwrap();
    assert!(load_error(dir.path()).contains("unknown target `lm_head`"));
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["use_dora"] = true.into();
    v["bias"] = "all".into();
    std::fs::write(&path, v.to_string()).unwrap();
    let msg = load_error(dir.path());
    assert!(msg.contains("use_dora = true is not supported"), "{msg}");
    assert!(msg.contains("bias = \"all\" is not supported"), "{msg}");
}

#[test]
fn a_second_adapter_on_an_adapted_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = saved(dir.path());
    let msg = load_adapter(&mut m, dir.path()).unwrap_err().to_string();
    assert!(msg.contains("already has LoRA adapters"), "{msg}");
    let msg = save_adapter(&base(), dir.path(), None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("no LoRA adapters"), "{msg}");
}
