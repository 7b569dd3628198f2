//! The tiny language model and LoRA adapter behind the Hugging Face parity fixtures
//! (`tests/fixtures/peft`, `tests/fixtures/hf`): made here from fixed seeds, saved as our
//! `save_pretrained` and `save_adapter` write them, and read by the Python scripts beside the
//! fixtures, which record what `transformers` and `peft` compute from the same files.

use rusting_brain::models::transformer_lm::{LmConfig, LoraConfig, TransformerLm};
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Device, Generator, Tensor};
use std::path::{Path, PathBuf};

/// `tests/fixtures/<name>`.
pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// vocab 64, width 32, 2 layers, 4 heads over 2 key/value heads, FFN 48, untied head (77 KB of
/// F32 weights). The norm weights are perturbed away from one, so a norm applied in the wrong
/// place shows in the logits.
pub fn tiny_base() -> TransformerLm {
    let mut c = LmConfig::new(64, 32, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 48;
    c.max_seq_len = 64;
    c.init_std = 0.1;
    c.tied_embeddings = false;
    let m = TransformerLm::new(c, &mut Generator::new(20240)).unwrap();
    let mut gen = Generator::new(7);
    for (name, t) in m.named_parameters() {
        if name.contains("norm") {
            let noise = Tensor::randn(t.shape(), DType::F32, Some(&mut gen)).unwrap();
            let perturbed = t.add(&noise.mul_scalar(0.1).unwrap()).unwrap();
            no_grad(|| t.copy_(&perturbed)).unwrap();
        }
    }
    m
}

/// `tiny_base` with rank-4 adapters on all seven projections, alpha 8, and B factors drawn
/// N(0, 0.05^2) rather than zero, so the adapters change the logits.
pub fn tiny_adapted() -> TransformerLm {
    let mut m = tiny_base();
    let targets = [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ];
    m.add_lora(LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.05,
        targets: targets.iter().map(|t| t.to_string()).collect(),
        use_rslora: false,
        seed: 11,
    })
    .unwrap();
    let mut gen = Generator::new(13);
    for (name, t) in m.named_parameters() {
        if name.contains("lora_B") {
            let b = Tensor::randn(t.shape(), DType::F32, Some(&mut gen)).unwrap();
            no_grad(|| t.copy_(&b.mul_scalar(0.05).unwrap())).unwrap();
        }
    }
    m
}

/// The fixture's token ids [rows, seq] from its expected.json (`input_ids`).
pub fn input_ids(expected: &serde_json::Value) -> Tensor {
    let rows = expected["input_ids"].as_array().expect("input_ids");
    let seq = rows[0].as_array().expect("a row of ids").len();
    let ids: Vec<i64> = rows
        .iter()
        .flat_map(|r| r.as_array().expect("a row of ids").iter())
        .map(|v| v.as_i64().expect("an id"))
        .collect();
    Tensor::from_vec(ids, &[rows.len(), seq]).unwrap()
}

/// expected.json, or `None` after printing SKIPPED when the GPU machine has not made it yet.
pub fn expected(test: &str, path: &Path, command: &str) -> Option<serde_json::Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(serde_json::from_str(&text).expect("expected.json parses")),
        Err(_) => {
            eprintln!(
                "SKIPPED {test}: {} does not exist yet (made by `{command}` on a machine with \
                 transformers)",
                path.display()
            );
            None
        }
    }
}

/// max |ours - reference| / max |reference| of the logits against `expected[key]` (flat, in
/// row-major order), after checking the shape.
pub fn relative_error(ours: &Tensor, expected: &serde_json::Value, key: &str) -> f64 {
    let shape: Vec<usize> = expected["logits_shape"]
        .as_array()
        .expect("logits_shape")
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(ours.shape(), shape.as_slice(), "{key} shape");
    let reference: Vec<f64> = expected[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in expected.json"))
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let ours = ours.to_vec_f64().unwrap();
    assert_eq!(ours.len(), reference.len(), "{key} length");
    let max_ref = reference.iter().fold(0f64, |m, v| m.max(v.abs()));
    let max_diff = ours
        .iter()
        .zip(&reference)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    max_diff / max_ref
}

/// Logits of `model` for `ids`, without gradients.
pub fn logits(model: &TransformerLm, ids: &Tensor) -> Tensor {
    no_grad(|| model.forward(ids)).unwrap()
}

/// Every file of `dir`, by name, as bytes.
pub fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().to_string();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Loads the committed base of a fixture in F32 on the CPU.
pub fn load_base(dir: &Path) -> TransformerLm {
    rusting_brain::models::transformer_lm::pretrained::load_pretrained(dir, DType::F32, Device::Cpu)
        .unwrap()
}
