//! Greedy decode of a published GGUF on the CPU, as a laptop user runs one: the file loaded
//! as `lm::load_gguf` loads it (projections kept in their blocks where the CPU's products read
//! the format, the rest F32), a fixed prompt of token ids, then `--tokens` new tokens.
//! Prints prefill time and the steady decode rate (from the 4th new token on), one JSON line.
//! Threads: rayon's (`RAYON_NUM_THREADS=1` for one). Beside llama.cpp's `llama-bench -p 0 -n
//! 64 -t N` on the same file.
//!
//! cargo build --release -p rb_benches --bin gguf_cpu_decode
//! target/release/gguf_cpu_decode FILE.gguf [--tokens 64] [--prompt 16] [--dense]

use rusting_brain::models::transformer_lm::generate::{
    generate, Flow, GenerateOptions, SamplingOptions,
};
use rusting_brain::models::transformer_lm::load_gguf_with;
use rusting_brain::{DType, Device, Result};
use serde_json::json;
use std::time::Instant;

fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> Result<()> {
    let path = std::env::args()
        .nth(1)
        .filter(|a| !a.starts_with("--"))
        .unwrap_or_else(|| {
            eprintln!("usage: gguf_cpu_decode FILE.gguf [--tokens 64] [--prompt 16] [--dense]");
            std::process::exit(2)
        });
    let tokens: usize = flag("--tokens").and_then(|v| v.parse().ok()).unwrap_or(64);
    let prompt_len: usize = flag("--prompt").and_then(|v| v.parse().ok()).unwrap_or(16);
    // `--dense`: every weight dequantized to F32 at load (the path before blocks were read).
    let dense = std::env::args().any(|a| a == "--dense");
    let loaded = load_gguf_with(&path, DType::F32, Device::Cpu, !dense)?;
    let (model, types) = (loaded.model, loaded.info.tensor_types);
    let prompt: Vec<u32> = (0..prompt_len as u32)
        .map(|i| 100 + i * 37 % 5000)
        .collect();
    let opts = GenerateOptions {
        max_new_tokens: tokens,
        sampling: SamplingOptions::greedy(),
        ..Default::default()
    };
    let started = Instant::now();
    let mut marks = Vec::new();
    generate(&model, &[prompt], &opts, &mut |_, _| {
        marks.push(Instant::now());
        Ok(Flow::Continue)
    })?;
    let n = marks.len();
    let steady = (marks[n - 1] - marks[3]).as_secs_f64() / (n - 4) as f64;
    println!(
        "{}",
        json!({
            "name": format!("rusting_brain CPU greedy decode, {}", if dense { "dense F32" } else { "blocks kept" }),
            "file": path,
            "threads": rayon::current_num_threads(),
            "prefill_and_first_token_s": ((marks[0] - started).as_secs_f64() * 1e3).round() / 1e3,
            "tokens_per_s": (1.0 / steady * 10.0).round() / 10.0,
            "tokens": n,
            "tensor_types": types,
        })
    );
    Ok(())
}
