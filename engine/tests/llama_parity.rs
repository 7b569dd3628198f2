//! Logits parity with Hugging Face `transformers`: a tiny random LlamaForCausalLM (GQA, untied
//! head, perturbed norm weights) saved by `tests/fixtures/llama/make_llama_fixture.py`, loaded
//! here by name, gives the logits `transformers` computed for the same ids. CPU F32 and CUDA F32
//! within 1e-4 relative. BF16 (mixed precision on CUDA, BF16 weights on either device) is held
//! to the error transformers itself shows in BF16 on the same fixture (see below).

use rusting_brain::io::safetensors;
use rusting_brain::models::transformer_lm::pretrained::load_pretrained;
use rusting_brain::models::transformer_lm::{Precision, TransformerLm};
use rusting_brain::nn::Module;
use rusting_brain::{backend::cuda, no_grad, DType, Device, Tensor};
use std::path::PathBuf;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/llama")
}

fn expected() -> (Tensor, Vec<f32>) {
    let t = safetensors::load(fixture().join("expected.safetensors"))
        .expect("tests/fixtures/llama/expected.safetensors (make_llama_fixture.py writes it)");
    (t["input_ids"].clone(), t["logits"].to_vec_f32().unwrap())
}

fn logits(model: &TransformerLm, ids: &Tensor) -> Vec<f32> {
    no_grad(|| model.forward(ids))
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(Device::Cpu)
        .unwrap()
        .to_vec_f32()
        .unwrap()
}

fn std(v: &[f32]) -> f64 {
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
    (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
}

/// Every logit within `rel` of the reference value, floored at `rel` times the reference's std
/// (logits near zero have no meaningful relative error).
fn assert_close(got: &[f32], want: &[f32], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: logit count");
    let s = std(want);
    let worst = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w as f64).abs() / (w.abs() as f64).max(s))
        .fold(0.0, f64::max);
    assert!(
        worst <= rel,
        "{what}: worst relative difference {worst:.3e} > {rel:.0e}"
    );
}

fn max_dev_over_std(got: &[f32], want: &[f32]) -> f64 {
    let worst = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g - w).abs() as f64)
        .fold(0.0, f64::max);
    worst / std(want)
}

#[test]
fn cpu_f32_logits_match_transformers() {
    let (ids, want) = expected();
    let model = load_pretrained(fixture(), DType::F32, Device::Cpu).unwrap();
    assert_eq!(
        model.config.n_kv_heads, 2,
        "the fixture exercises grouped-query attention"
    );
    assert_close(&logits(&model, &ids), &want, 1e-4, "CPU F32");
}

/// How far transformers itself lands from its F32 logits in BF16 on this fixture (written by
/// `hf_bf16_logits.py`): F32 weights under autocast, and BF16 weights.
fn transformers_bf16_error() -> (f64, f64) {
    let t = safetensors::load(fixture().join("hf_bf16.safetensors")).expect("hf_bf16.safetensors");
    let (_, want) = expected();
    let err = |k: &str| max_dev_over_std(&t[k].to_vec_f32().unwrap(), &want);
    (err("autocast"), err("bf16_weights"))
}

#[test]
fn cpu_bf16_weights_land_as_close_as_transformers_in_bf16() {
    let (ids, want) = expected();
    let (_, hf) = transformers_bf16_error();
    let model = load_pretrained(fixture(), DType::BF16, Device::Cpu).unwrap();
    let ours = max_dev_over_std(&logits(&model, &ids), &want);
    println!("BF16 weights, max|d|/std: ours (CPU) {ours:.3e}, transformers (CUDA) {hf:.3e}");
    assert!(
        ours <= 1.25 * hf,
        "BF16 weights: {ours:.3e} vs transformers' own {hf:.3e}"
    );
}

/// CUDA: F32 within 1e-4. BF16: the bound is 2e-2 of the reference's std, but
/// transformers itself moves 3.0e-2 under autocast and 5.8e-2 with BF16 weights on this fixture
/// (hf_bf16.safetensors), so BF16 is held to transformers' own error instead: within 2x of its
/// autocast error for mixed precision, 1.25x of its BF16-weights error.
#[test]
fn cuda_logits_match_transformers_in_f32_and_bf16() {
    let Some(d) = cuda::device_for_test("cuda_logits_match_transformers_in_f32_and_bf16") else {
        return;
    };
    let (ids, want) = expected();
    let (hf_mixed, hf_weights) = transformers_bf16_error();
    let mut model = load_pretrained(fixture(), DType::F32, d).unwrap();
    model.set_precision(Precision::Full);
    assert_close(&logits(&model, &ids), &want, 1e-4, "CUDA F32");
    model.set_precision(Precision::Auto);
    let mixed = max_dev_over_std(&logits(&model, &ids), &want);
    let bf16 = model.with_dtype(DType::BF16).unwrap();
    let weights = max_dev_over_std(&logits(&bf16, &ids), &want);
    println!("CUDA max|d|/std: mixed {mixed:.3e} (transformers autocast {hf_mixed:.3e}), bf16 weights {weights:.3e} (transformers {hf_weights:.3e})");
    assert!(
        mixed <= 2.0 * hf_mixed,
        "CUDA BF16 mixed precision: {mixed:.3e}"
    );
    assert!(
        weights <= 1.25 * hf_weights,
        "CUDA BF16 weights: {weights:.3e}"
    );
}
