//! The CPU's block products alone, in a decode step's shapes: SmolLM2-135M's 30 layers of Q4_1
//! projections (q, k, v, o, gate, up, down) and its tied Q8_0 head (with int8 and with F32 activations), each multiplied by one
//! activation row, as `cpu::ggml::gemv` computes them for `gguf_cpu_decode`. Prints the time of
//! one step's products and the weight bytes read per second, one JSON line each for the layers
//! and the head. Threads: rayon's (`RAYON_NUM_THREADS=1` for one).
//!
//! cargo build --release -p rb_benches --bin cpu_qgemv && target/release/cpu_qgemv [--steps 30]

use rusting_brain::backend::cpu::ggml::gemv::{self, Activations};
use rusting_brain::backend::cpu::ggml::quantize;
use rusting_brain::backend::cuda::quant_matmul::{split, BlockFormat};
use rusting_brain::backend::spec::ggml as ty;
use serde_json::json;
use std::time::Instant;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
            (h % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

struct Matrix {
    format: BlockFormat,
    stored: Vec<u8>,
    shape: [usize; 2],
    activations: Activations,
}

fn matrix(format: BlockFormat, [n, k]: [usize; 2], seed: u32, activations: Activations) -> Matrix {
    let t = match format {
        BlockFormat::Q8_0 => ty::Q8_0,
        _ => ty::Q4_1,
    };
    let file = quantize::quantize(t, &values(n * k, seed)).expect("quantize");
    let stored = split(format, &file, [n, k]).expect("split");
    Matrix {
        format,
        stored,
        shape: [n, k],
        activations,
    }
}

/// Median seconds of one pass over `matrices`, and the bytes one pass reads.
fn time(matrices: &[Matrix], steps: usize) -> (f64, usize) {
    let bytes = matrices.iter().map(|m| m.stored.len()).sum();
    let xs: Vec<Vec<f32>> = matrices.iter().map(|m| values(m.shape[1], 9)).collect();
    let mut times: Vec<f64> = (0..steps + 2)
        .map(|_| {
            let t = Instant::now();
            for (m, x) in matrices.iter().zip(&xs) {
                let y = gemv::quant_gemv(m.format, &m.stored, m.shape, x, 1, m.activations)
                    .expect("gemv");
                std::hint::black_box(y);
            }
            t.elapsed().as_secs_f64()
        })
        .skip(2)
        .collect();
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], bytes)
}

fn main() {
    let steps: usize = std::env::args()
        .skip_while(|a| a != "--steps")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let (d, ff, kv) = (576, 1536, 192);
    let shapes = [[d, d], [kv, d], [kv, d], [d, d], [ff, d], [ff, d], [d, ff]];
    let layers: Vec<Matrix> = (0..30)
        .flat_map(|l| {
            shapes.iter().enumerate().map(move |(i, &s)| {
                matrix(BlockFormat::Q4_1, s, l * 7 + i as u32, Activations::Int8)
            })
        })
        .collect();
    let head = |activations| [matrix(BlockFormat::Q8_0, [49152, d], 1000, activations)];
    let (head_int8, head_f32) = (head(Activations::Int8), head(Activations::F32));
    let sets = [
        ("30 layers' Q4_1 projections, int8 activations", &layers[..]),
        ("Q8_0 head, int8 activations", &head_int8[..]),
        ("Q8_0 head, F32 activations", &head_f32[..]),
    ];
    for (name, set) in sets {
        let (s, bytes) = time(set, steps);
        println!(
            "{}",
            json!({
                "name": name,
                "threads": rayon::current_num_threads(),
                "simd": std::env::var("RB_CPU_SIMD").unwrap_or_else(|_| "best".into()),
                "ms": (s * 1e4).round() / 10.0,
                "weight_gb_per_s": (bytes as f64 / s / 1e8).round() / 10.0,
            })
        );
    }
}
