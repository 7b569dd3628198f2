//! Generation beyond one token at a time on the family fixtures.
//!
//! Beam search against transformers' `generate(num_beams=…)`: the hypotheses it returns (every
//! one, in order) and their scores, on the family fixtures, for one prompt and for a batch of
//! two unequal ones, under each `early_stopping` and three length penalties
//! (`tests/fixtures/lm_families/make_beams.py` made `beams.json` with transformers 5.17 on
//! the CPU). On CUDA
//! also with the decode step captured as a graph, the cache reordered between replays.

use rusting_brain::models::transformer_lm::generate::{
    beam_search, generate, generate_speculative, BeamOptions, Drafter, EarlyStopping, Flow,
    GenerateOptions, SamplingOptions,
};
use rusting_brain::models::transformer_lm::pretrained::load_pretrained;
use rusting_brain::models::transformer_lm::{Precision, TransformerLm};
use rusting_brain::{DType, Device};
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/lm_families")
}

fn cases() -> Vec<Value> {
    let path = fixtures().join("beams.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} (make_beams.py): {e}", path.display()));
    let json: Value = serde_json::from_str(&text).unwrap();
    json["cases"].as_array().unwrap().clone()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn options(case: &Value, cuda_graph: bool) -> BeamOptions {
    BeamOptions {
        num_beams: case["num_beams"].as_u64().unwrap() as usize,
        max_new_tokens: case["max_new_tokens"].as_u64().unwrap() as usize,
        length_penalty: case["length_penalty"].as_f64().unwrap(),
        early_stopping: match &case["early_stopping"] {
            Value::Bool(true) => EarlyStopping::WhenFull,
            Value::Bool(false) => EarlyStopping::Heuristic,
            _ => EarlyStopping::Never,
        },
        stop_tokens: vec![case["eos"].as_u64().unwrap() as u32],
        cuda_graph,
    }
}

/// Every case of `family` through `model`: the same hypotheses in the same order, scores
/// within 1e-4.
fn check(model: &TransformerLm, family: &str, cuda_graph: bool) -> usize {
    let mut checked = 0;
    for case in cases().iter().filter(|c| c["family"] == family) {
        let prompts: Vec<Vec<u32>> = case["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(ids)
            .collect();
        let opts = options(case, cuda_graph);
        let got = beam_search(model, &prompts, &opts).unwrap();
        let what = format!("{family} {opts:?} prompts {prompts:?}");
        for (row, want) in got.iter().zip(case["beams"].as_array().unwrap()) {
            let want = want.as_array().unwrap();
            let got_tokens: Vec<&Vec<u32>> = row.iter().map(|b| &b.tokens).collect();
            let want_tokens: Vec<Vec<u32>> = want.iter().map(|b| ids(&b["tokens"])).collect();
            assert_eq!(got_tokens, want_tokens.iter().collect::<Vec<_>>(), "{what}");
            for (b, w) in row.iter().zip(want) {
                let w = w["score"].as_f64().unwrap();
                assert!(
                    (b.score - w).abs() < 1e-4 * w.abs().max(1.0),
                    "{what}: {} vs {w}",
                    b.score
                );
            }
        }
        checked += 1;
    }
    checked
}

#[test]
fn beam_search_returns_transformers_hypotheses() {
    for family in ["qwen2", "gemma2", "mixtral"] {
        let model = load_pretrained(fixtures().join(family), DType::F32, Device::Cpu).unwrap();
        assert_eq!(
            check(&model, family, false),
            6,
            "{family}: cases in beams.json"
        );
    }
}

#[test]
fn cuda_beam_search_returns_transformers_hypotheses() {
    let Some(d) = rusting_brain::backend::cuda::device_for_test(
        "cuda_beam_search_returns_transformers_hypotheses",
    ) else {
        return;
    };
    for family in ["qwen2", "gemma2", "mixtral"] {
        let mut model = load_pretrained(fixtures().join(family), DType::F32, d).unwrap();
        model.set_precision(Precision::Full);
        for cuda_graph in [false, true] {
            assert_eq!(check(&model, family, cuda_graph), 6, "{family}");
        }
    }
}

/// Speculative decoding on CUDA: a Qwen2 target with the Mixtral fixture (same vocabulary) as
/// its draft, whose steps replay as a CUDA graph, and with prompt lookup, gives the target's
/// own greedy tokens.
#[test]
fn cuda_speculative_decoding_gives_the_targets_greedy_tokens() {
    let Some(d) = rusting_brain::backend::cuda::device_for_test(
        "cuda_speculative_decoding_gives_the_targets_greedy_tokens",
    ) else {
        return;
    };
    let load = |family| {
        let mut m = load_pretrained(fixtures().join(family), DType::F32, d).unwrap();
        m.set_precision(Precision::Full);
        m
    };
    let (target, draft) = (load("qwen2"), load("mixtral"));
    let prompt = [1u32, 17, 33, 5, 9, 17, 33, 5];
    let opts = GenerateOptions {
        max_new_tokens: 24,
        sampling: SamplingOptions::greedy(),
        ..Default::default()
    };
    let plain = generate(&target, &[prompt.to_vec()], &opts, &mut |_, _| {
        Ok(Flow::Continue)
    })
    .unwrap()
    .remove(0);
    for drafter in [
        Drafter::Model {
            model: &draft,
            tokens: 4,
        },
        Drafter::PromptLookup {
            tokens: 6,
            max_ngram: 2,
        },
    ] {
        let (got, stats) = generate_speculative(&target, drafter, &prompt, &opts, &mut |_| {
            Ok(Flow::Continue)
        })
        .unwrap();
        assert_eq!(got, plain, "{stats:?}");
    }
}
