//! Tokenizer benchmarks, one JSON line each: BPE training on the repository's own text
//! (docs/ and engine/src, about 1 MB) at vocab 2048, encoding throughput on that text, and
//! encoding one 50 KB piece with no whitespace (the case where quadratic merging would show;
//! the goal is under 50 ms).
//!
//!     cargo run --release -p rb_benches --bin tokenizer_bench

use rusting_brain::text::{collect_files, train_bpe_files, SplitPattern, Tokenizer, TrainOptions};
use rusting_brain::Result;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

/// Letters from a fixed LCG, so the piece is the same on every run.
fn letters(n: usize) -> String {
    let alphabet = b"etaoinshrdlucmfwypvbgkjqxzETAOINSHRDLU";
    let mut state = 12345u64;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            alphabet[((state >> 33) % alphabet.len() as u64) as usize] as char
        })
        .collect()
}

fn best_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

fn corpus_files() -> Result<Vec<PathBuf>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    collect_files(
        &[root.join("docs"), root.join("engine/src")],
        &["md".to_string(), "rs".to_string()],
    )
}

fn bench_pattern(pattern: SplitPattern, name: &str, files: &[PathBuf], bytes: usize) -> Result<()> {
    let options = TrainOptions {
        vocab_size: 2048,
        pattern,
        ..TrainOptions::default()
    };
    let t = Instant::now();
    let tok: Tokenizer = train_bpe_files(files, &options)?;
    let train_s = t.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"bench": "bpe_train", "pattern": name, "files": files.len(), "bytes": bytes,
               "vocab_size": 2048, "merges": tok.merges().len(), "seconds": train_s})
    );

    let text: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect();
    let mut ids = 0;
    let ms = best_ms(3, || {
        ids = tok.encode(&text)?.len();
        Ok(())
    })?;
    println!(
        "{}",
        json!({"bench": "bpe_encode_corpus", "pattern": name, "bytes": text.len(), "ids": ids,
               "ms": ms, "mb_per_s": text.len() as f64 / ms / 1e3,
               "bytes_per_token": text.len() as f64 / ids as f64})
    );

    for n in [5_000, 50_000] {
        let piece = letters(n);
        let pieces = tok.pre_tokenizer().pieces(&piece)?.len();
        let ms = best_ms(10, || tok.encode(&piece).map(drop))?;
        println!(
            "{}",
            json!({"bench": "bpe_encode_single_piece", "pattern": name, "bytes": n,
                   "pieces": pieces, "ms": ms, "goal_ms": if n == 50_000 { Some(50) } else { None }})
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let files = corpus_files()?;
    let bytes: usize = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len() as usize).unwrap_or(0))
        .sum();
    bench_pattern(SplitPattern::Gpt2, "gpt2", &files, bytes)?;
    bench_pattern(SplitPattern::Llama3, "llama3", &files, bytes)?;
    Ok(())
}
