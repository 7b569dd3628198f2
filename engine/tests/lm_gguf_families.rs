//! GGUF files of every llama-shaped family, written by llama.cpp's own converter
//! (`tests/fixtures/lm_families/make_gguf.py` runs `convert_hf_to_gguf.py` on the family
//! fixtures), load as the models transformers runs: the logits of the fixture's ids within
//! 1e-4 of transformers' (`expected.safetensors`, made from the same weights).
//!
//! Two differences are llama.cpp's, not ours: its `llama` architecture has no sliding window
//! (Mistral's file runs with full attention, so only the positions within the window compare),
//! and its OLMoE converter writes an epsilon of 1e-5 whatever the config says (so OLMoE's
//! file compares with transformers run at that epsilon, `gguf/olmoe_expected.safetensors`).

use rusting_brain::io::safetensors;
use rusting_brain::models::transformer_lm::{
    load_gguf, Family, GgufDType, GgufExportOptions, TransformerLm,
};
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Device, Tensor};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/lm_families")
}

fn load(family: &str) -> TransformerLm {
    let path = fixtures().join("gguf").join(format!("{family}.gguf"));
    load_gguf(&path, DType::F32, Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .model
}

/// The worst difference relative to each reference value, floored at the reference's std.
fn worst_relative(got: &[f32], want: &[f32]) -> f64 {
    let n = want.len() as f64;
    let mean = want.iter().map(|&x| x as f64).sum::<f64>() / n;
    let std = (want.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
    got.iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w as f64).abs() / (w.abs() as f64).max(std))
        .fold(0.0, f64::max)
}

/// The first `positions` positions' logits of the fixture's ids against transformers'.
fn check(family: &str, positions: Option<usize>, family_is: Family) {
    let model = load(family);
    assert_eq!(model.config.family, family_is, "{family}");
    let reference = match family {
        "olmoe" => fixtures().join("gguf/olmoe_expected.safetensors"),
        _ => fixtures().join(family).join("expected.safetensors"),
    };
    let want = safetensors::load(reference).unwrap();
    let ids = &want["input_ids"];
    let t = positions.unwrap_or(ids.shape()[1]);
    let logits = no_grad(|| model.forward(ids)).unwrap();
    let got = logits.narrow(1, 0, t).unwrap().to_vec_f32().unwrap();
    let expected: Tensor = want["logits"].narrow(1, 0, t).unwrap();
    let worst = worst_relative(&got, &expected.to_vec_f32().unwrap());
    assert!(
        worst <= 1e-4,
        "{family}: worst relative difference {worst:.2e}"
    );
}

#[test]
fn qwen2_and_qwen3_files_run_as_transformers_runs_them() {
    check("qwen2", None, Family::Qwen2);
    check("qwen3", None, Family::Qwen3);
}

#[test]
fn gemma_files_take_one_off_each_norm_the_converter_raised() {
    check("gemma", None, Family::Gemma);
    check("gemma2", None, Family::Gemma2);
    let m = load("gemma2");
    assert_eq!(m.config.sliding_window, Some(6));
    assert_eq!(m.config.final_logit_softcapping, Some(30.0));
}

#[test]
fn phi3_files_split_the_fused_projections() {
    check("phi3", None, Family::Phi3);
}

#[test]
fn mistral_files_run_as_llama_within_the_window() {
    // The fixture's window is 5: positions 0..5 see every key either way.
    check("mistral", Some(5), Family::Llama);
}

#[test]
fn files_with_experts_run_as_their_families() {
    check("mixtral", None, Family::Mixtral);
    check("qwen2_moe", None, Family::Qwen2Moe);
    check("qwen3_moe", None, Family::Qwen3Moe);
    check("olmoe", None, Family::Olmoe);
}

/// Our export of each family's transformers checkpoint is the file llama.cpp's converter wrote
/// from it: the same tensors (names, shapes, F32 values) and the same architecture keys; and it
/// loads back to transformers' logits.
#[test]
fn export_gguf_writes_what_llama_cpps_converter_writes() {
    use rusting_brain::io::gguf::GgufFile;
    use rusting_brain::models::transformer_lm::export_gguf;
    use rusting_brain::models::transformer_lm::pretrained::load_pretrained;
    let dir = tempfile::tempdir().unwrap();
    let opts = f32_export();
    for family in [
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "phi3",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "olmoe",
    ] {
        let model = load_pretrained(fixtures().join(family), DType::F32, Device::Cpu).unwrap();
        let ours = dir.path().join(format!("{family}.gguf"));
        export_gguf(&model, None, &ours, &opts).unwrap_or_else(|e| panic!("{family}: {e}"));
        let mut theirs =
            GgufFile::open(fixtures().join("gguf").join(format!("{family}.gguf"))).unwrap();
        let mut mine = GgufFile::open(&ours).unwrap();
        let names = |f: &GgufFile<_>| {
            let mut n: Vec<(String, Vec<usize>)> = f
                .tensors
                .iter()
                .map(|t| (t.name.clone(), t.shape()))
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(&mine), names(&theirs), "{family}");
        for (name, _) in names(&theirs) {
            let a = mine.tensor(&name).unwrap().to_vec::<f32>().unwrap();
            let b = theirs.tensor(&name).unwrap().to_vec::<f32>().unwrap();
            assert_eq!(a, b, "{family} {name}");
        }
        let arch = theirs
            .metadata
            .str("general.architecture")
            .unwrap()
            .to_string();
        assert_eq!(mine.metadata.str("general.architecture").unwrap(), arch);
        for key in theirs
            .metadata
            .keys()
            .filter(|k| k.starts_with(&format!("{arch}.")))
        {
            // The converter writes OLMoE's epsilon as 1e-5 whatever the config says.
            if family == "olmoe" && key.ends_with("layer_norm_rms_epsilon") {
                continue;
            }
            // Phi-3's pretrained context, read by llama.cpp only beside LongRoPE's factors
            // (which the export refuses); the model keeps no copy of it without them.
            if key.ends_with("rope.scaling.original_context_length") {
                continue;
            }
            assert_eq!(
                mine.metadata.get(key),
                theirs.metadata.get(key),
                "{family} {key}"
            );
        }
        if family != "olmoe" {
            check_file(&ours, family);
        }
    }
}

/// The logits of the fixture's ids from the GGUF at `path` against transformers'.
fn check_file(path: &std::path::Path, family: &str) {
    let model = load_gguf(path, DType::F32, Device::Cpu).unwrap().model;
    let want = safetensors::load(fixtures().join(family).join("expected.safetensors")).unwrap();
    let got = no_grad(|| model.forward(&want["input_ids"]))
        .unwrap()
        .to_vec_f32()
        .unwrap();
    let worst = worst_relative(&got, &want["logits"].to_vec_f32().unwrap());
    assert!(
        worst <= 1e-4,
        "{family} (exported): worst relative difference {worst:.2e}"
    );
}

#[test]
fn export_refuses_what_llama_cpp_would_run_differently() {
    use rusting_brain::models::transformer_lm::export_gguf;
    use rusting_brain::models::transformer_lm::pretrained::load_pretrained;
    let dir = tempfile::tempdir().unwrap();
    let model = load_pretrained(fixtures().join("mistral"), DType::F32, Device::Cpu).unwrap();
    let err = export_gguf(
        &model,
        None,
        dir.path().join("m.gguf"),
        &GgufExportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("sliding windows") && err.contains("llama"),
        "{err}"
    );
    assert!(!dir.path().join("m.gguf").exists());
}

/// The families' files as `export_gguf` writes them (F32), for
/// `tests/fixtures/lm_families/check_llama_cpp.py` to run through llama.cpp. Ignored; run by
/// hand with `RB_GGUF_CHECK_DIR` set.
#[test]
#[ignore]
fn write_family_ggufs_for_llama_cpp() {
    use rusting_brain::models::transformer_lm::export_gguf;
    use rusting_brain::models::transformer_lm::pretrained::load_pretrained;
    let dir = PathBuf::from(std::env::var("RB_GGUF_CHECK_DIR").expect("RB_GGUF_CHECK_DIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let opts = f32_export();
    for family in LLAMA_CPP_FAMILIES {
        let model = load_pretrained(fixtures().join(family), DType::F32, Device::Cpu).unwrap();
        let bare = dir.join(format!("{family}.bare.gguf"));
        export_gguf(&model, None, &bare, &opts).unwrap();
        with_placeholder_vocabulary(&bare, &dir.join(format!("{family}.gguf")), 64);
        std::fs::remove_file(bare).unwrap();
    }
}

/// `from` with a SentencePiece vocabulary of `n` placeholder tokens (`<unk>`, `<s>`, `</s>`,
/// then `<3>`, `<4>`, ...): llama.cpp refuses a file without a vocabulary as large as the
/// embedding, and the fixtures have no tokenizer (the prompts go in as ids).
fn with_placeholder_vocabulary(from: &std::path::Path, to: &std::path::Path, n: usize) {
    use rusting_brain::io::gguf::{Array, GgufFile, GgufWriter, Value};
    let mut source = GgufFile::open(from).unwrap();
    let mut w = GgufWriter::copy_of(&mut source, |k| !k.starts_with("tokenizer.")).unwrap();
    let tokens: Vec<String> = (0..n)
        .map(|i| match i {
            0 => "<unk>".to_string(),
            1 => "<s>".to_string(),
            2 => "</s>".to_string(),
            i => format!("<{i}>"),
        })
        .collect();
    // llama.cpp's token types: 1 normal, 2 unknown, 3 control.
    let types: Vec<i32> = (0..n)
        .map(|i| match i {
            0 => 2,
            1 | 2 => 3,
            _ => 1,
        })
        .collect();
    w.add("tokenizer.ggml.model", Value::String("llama".into()))
        .unwrap();
    w.add("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
        .unwrap();
    w.add(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0; n])),
    )
    .unwrap();
    w.add("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
        .unwrap();
    for (key, id) in [("unknown", 0u32), ("bos", 1), ("eos", 2)] {
        w.add(&format!("tokenizer.ggml.{key}_token_id"), Value::U32(id))
            .unwrap();
    }
    w.write(to).unwrap();
}

/// The families llama.cpp runs as transformers does: not Mistral (llama.cpp's llama has no
/// window), nor the OLMoE fixture (llama.cpp's OLMoE takes the key norm as wide as the model,
/// i.e. as many key heads as query heads; the fixture has 2 of 4, so llama.cpp refuses the
/// file its own converter wrote).
const LLAMA_CPP_FAMILIES: [&str; 8] = [
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "phi3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
];

/// llama.cpp's greedy tokens on our exported files (`llama_cpp_greedy.json`, recorded by
/// check_llama_cpp.py) equal our greedy tokens from the same files.
#[test]
fn llama_cpp_continues_our_exported_files_as_we_do() {
    use rusting_brain::models::transformer_lm::export_gguf;
    use rusting_brain::models::transformer_lm::generate::{
        generate, Flow, GenerateOptions, SamplingOptions,
    };
    use rusting_brain::models::transformer_lm::pretrained::load_pretrained;
    let path = fixtures().join("gguf/llama_cpp_greedy.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} (check_llama_cpp.py): {e}", path.display()));
    let recorded: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = f32_export();
    for family in LLAMA_CPP_FAMILIES {
        let case = &recorded["families"][family];
        let ids = |v: &serde_json::Value| -> Vec<u32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect()
        };
        let (prompt, want) = (ids(&case["prompt"]), ids(&case["greedy"]));
        let model = load_pretrained(fixtures().join(family), DType::F32, Device::Cpu).unwrap();
        let file = dir.path().join(format!("{family}.gguf"));
        export_gguf(&model, None, &file, &opts).unwrap();
        let loaded = load_gguf(&file, DType::F32, Device::Cpu).unwrap().model;
        let gen = GenerateOptions {
            max_new_tokens: want.len(),
            sampling: SamplingOptions::greedy(),
            ..Default::default()
        };
        let got = generate(&loaded, &[prompt], &gen, &mut |_, _| Ok(Flow::Continue)).unwrap();
        assert_eq!(got[0], want, "{family}: ours against llama.cpp's");
    }
}

/// Export options for F32 files (the converter's fixtures are F32).
fn f32_export() -> GgufExportOptions {
    GgufExportOptions {
        dtype: GgufDType::F32,
        name: None,
    }
}
