//! CPU micro-benchmarks that print one JSON line each: f32 matmul (GFLOP/s), elementwise ops
//! over 16M f32 elements (GB/s of memory traffic), and the engine's fixed cost of one tiny op.
//! `benches/numpy_bench.py` prints the same lines for numpy, so the two compare side by side.

use rusting_brain::{DType, Generator, Result, Tensor};
use serde_json::json;
use std::time::Instant;

/// Best wall time of `reps` runs of `f`, after `warmup` untimed runs.
fn best_of(warmup: usize, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn matmul(gen: &mut Generator, n: usize, reps: usize) -> Result<()> {
    let a = Tensor::randn(&[n, n], DType::F32, Some(gen))?;
    let b = Tensor::randn(&[n, n], DType::F32, Some(gen))?;
    let secs = best_of(1, reps, || a.matmul(&b).map(drop))?;
    let flops = 2.0 * (n as f64).powi(3);
    println!(
        "{}",
        json!({"bench": "matmul_f32", "size": n, "seconds": secs, "gflops": flops / secs / 1e9})
    );
    Ok(())
}

/// `bytes_per_elem` counts reads plus writes, as numpy's side does.
fn elementwise(
    name: &str,
    n: usize,
    bytes_per_elem: usize,
    f: impl FnMut() -> Result<()>,
) -> Result<()> {
    let secs = best_of(2, 10, f)?;
    let gbps = (n * bytes_per_elem) as f64 / secs / 1e9;
    println!(
        "{}",
        json!({"bench": format!("{name}_f32"), "n": n, "seconds": secs, "gbps": gbps})
    );
    Ok(())
}

fn tiny_add() -> Result<()> {
    let a = Tensor::from_vec(vec![1.0f32], &[1])?;
    let b = Tensor::from_vec(vec![2.0f32], &[1])?;
    let iters = 100_000;
    let secs = best_of(1, 5, || {
        for _ in 0..iters {
            std::hint::black_box(a.add(&b)?);
        }
        Ok(())
    })?;
    println!(
        "{}",
        json!({"bench": "tiny_add_f32", "n": 1, "ns_per_op": secs / iters as f64 * 1e9})
    );
    Ok(())
}

fn main() -> Result<()> {
    let mut gen = Generator::new(0);
    matmul(&mut gen, 256, 50)?;
    matmul(&mut gen, 1024, 10)?;
    matmul(&mut gen, 2048, 3)?;

    let n = 1 << 24;
    let a = Tensor::randn(&[n], DType::F32, Some(&mut gen))?;
    let b = Tensor::randn(&[n], DType::F32, Some(&mut gen))?;
    elementwise("add", n, 12, || a.add(&b).map(drop))?;
    elementwise("mul", n, 12, || a.mul(&b).map(drop))?;
    elementwise("exp", n, 8, || a.exp().map(drop))?;
    elementwise("relu", n, 8, || a.relu().map(drop))?;
    elementwise("sum", n, 4, || a.sum().map(drop))?;
    // A comparison: two f32 reads, one bool (byte) write.
    elementwise("gt", n, 9, || a.gt(&b).map(drop))?;
    tiny_add()
}
