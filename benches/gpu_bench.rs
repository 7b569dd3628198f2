//! GPU benchmarks of the CUDA backend, printed as one JSON object: BF16 GEMM through
//! Tensor::matmul, device copy bandwidth, elementwise bandwidth, softmax and rms_norm forward
//! plus backward, an AdamW step over 124M parameters, and the host cost of a tiny op.
//! `benches/torch_gpu_bench.py` measures the same things with PyTorch and prints the same names,
//! so the two compare side by side.
//!
//! cargo build --release -p rb_benches --bin gpu_bench && target/release/gpu_bench
//!
//! Each figure is the median of timed repetitions after a warm-up; a repetition runs the op a
//! few times between two device synchronizations. Without a usable GPU it prints
//! {"error": ...} and exits with code 2.

use rusting_brain::backend::cuda::{self, CudaDevice};
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer};
use rusting_brain::{DType, Device, Generator, Result, Tensor};
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Instant;

const GIB: usize = 1 << 30;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds per call of `f`: `warmup` untimed calls, then `reps` repetitions of `inner`
/// calls each, with the device synchronized before and after each repetition.
fn time_per_call(
    dev: &CudaDevice,
    warmup: usize,
    reps: usize,
    inner: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    dev.synchronize()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..inner {
            f()?;
        }
        dev.synchronize()?;
        times.push(t.elapsed().as_secs_f64() / inner as f64);
    }
    Ok(median(times))
}

/// One result: a name shared with the PyTorch script, the figure, its unit and a short label.
fn figure(name: &str, value: f64, unit: &str, label: &str) -> Value {
    json!({"name": name, "value": value, "unit": unit, "label": label})
}

fn gemm(dev: &CudaDevice, d: Device, n: usize, out: &mut Vec<Value>) -> Result<()> {
    let mut gen = Generator::new(n as u64);
    let a = Tensor::randn_on(&[n, n], DType::BF16, d, Some(&mut gen))?;
    let b = Tensor::randn_on(&[n, n], DType::BF16, d, Some(&mut gen))?;
    let inner = if n >= 8192 { 5 } else { 20 };
    let secs = time_per_call(dev, 3, 10, inner, || a.matmul(&b).map(drop))?;
    let flops = 2.0 * (n as f64).powi(3);
    out.push(figure(
        &format!("gemm_bf16_{n}"),
        flops / secs / 1e12,
        "TFLOP/s",
        &format!("BF16 [{n}, {n}] x [{n}, {n}] via Tensor::matmul (FP32 accumulate)"),
    ));
    out.push(figure(
        &format!("gemm_bf16_{n}_ms"),
        secs * 1e3,
        "ms",
        "time per GEMM",
    ));
    Ok(())
}

/// Copy and elementwise bandwidth over 1 GiB tensors.
fn bandwidth(dev: &CudaDevice, d: Device, out: &mut Vec<Value>) -> Result<()> {
    let n = GIB / 4;
    let x = Tensor::full(1.5, &[n], DType::F32, d)?;
    let copy = time_per_call(dev, 2, 10, 5, || x.contiguous_copy().map(drop))?;
    let copy_gbps = 2.0 * GIB as f64 / copy / 1e9;
    out.push(figure(
        "copy_1gib",
        copy_gbps,
        "GB/s",
        "device-to-device copy of a contiguous 1 GiB F32 tensor (contiguous_copy), read + write",
    ));
    let scale = time_per_call(dev, 2, 10, 5, || x.affine(2.0, 0.0).map(drop))?;
    let scale_gbps = 2.0 * GIB as f64 / scale / 1e9;
    out.push(figure(
        "scale_f32_1gib",
        scale_gbps,
        "GB/s",
        "x * 2 over 1 GiB of F32 (Tensor::affine), read + write",
    ));
    out.push(figure(
        "scale_f32_1gib_of_copy",
        scale_gbps / copy_gbps,
        "fraction",
        "the scale's bandwidth as a fraction of the copy's",
    ));
    drop(x);
    let n = GIB / 2;
    let a = Tensor::full(1.5, &[n], DType::BF16, d)?;
    let b = Tensor::full(-0.5, &[n], DType::BF16, d)?;
    let add = time_per_call(dev, 2, 10, 5, || a.add(&b).map(drop))?;
    let add_gbps = 3.0 * GIB as f64 / add / 1e9;
    out.push(figure(
        "add_bf16_1gib",
        add_gbps,
        "GB/s",
        "a + b over two 1 GiB BF16 tensors, two reads + one write",
    ));
    out.push(figure(
        "add_bf16_1gib_of_copy",
        add_gbps / copy_gbps,
        "fraction",
        "the add's bandwidth as a fraction of the copy's",
    ));
    Ok(())
}

/// Forward, and forward plus backward, of `f` on a [16384, 4096] BF16 input.
fn fwd_bwd(
    dev: &CudaDevice,
    d: Device,
    name: &str,
    label: &str,
    params: &[Tensor],
    f: impl Fn(&Tensor) -> Result<Tensor>,
    out: &mut Vec<Value>,
) -> Result<()> {
    let shape = [16384, 4096];
    let mut gen = Generator::new(7);
    let x = Tensor::randn_on(&shape, DType::BF16, d, Some(&mut gen))?.requires_grad_()?;
    let dy = Tensor::randn_on(&shape, DType::BF16, d, Some(&mut gen))?;
    let fwd = time_per_call(dev, 3, 10, 10, || {
        rusting_brain::no_grad(|| f(&x)).map(drop)
    })?;
    let both = time_per_call(dev, 3, 10, 10, || {
        x.set_grad(None);
        for p in params {
            p.set_grad(None);
        }
        f(&x)?.backward_with(Some(dy.clone()), false)
    })?;
    out.push(figure(
        &format!("{name}_fwd_ms"),
        fwd * 1e3,
        "ms",
        &format!("{label} forward on [16384, 4096] BF16"),
    ));
    out.push(figure(
        &format!("{name}_fwd_bwd_ms"),
        both * 1e3,
        "ms",
        &format!("{label} forward + backward on [16384, 4096] BF16"),
    ));
    Ok(())
}

/// GPT-2 small's parameter shapes: 124,439,808 parameters in 148 tensors.
fn gpt2_small_shapes() -> Vec<Vec<usize>> {
    let (d, v, ctx, layers) = (768, 50257, 1024, 12);
    let mut s = vec![vec![v, d], vec![ctx, d]];
    for _ in 0..layers {
        s.extend([
            vec![d],
            vec![d],
            vec![d, 3 * d],
            vec![3 * d],
            vec![d, d],
            vec![d],
            vec![d],
            vec![d],
            vec![d, 4 * d],
            vec![4 * d],
            vec![4 * d, d],
            vec![d],
        ]);
    }
    s.extend([vec![d], vec![d]]);
    s
}

fn adamw(dev: &CudaDevice, d: Device, out: &mut Vec<Value>) -> Result<()> {
    let shapes = gpt2_small_shapes();
    let mut params = Vec::with_capacity(shapes.len());
    for s in &shapes {
        let p = Tensor::full(0.02, s, DType::F32, d)?.requires_grad_()?;
        p.set_grad(Some(Tensor::full(1e-3, s, DType::F32, d)?));
        params.push(p);
    }
    let count: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    let mut opt = AdamW::new(params, AdamWConfig::default())?;
    let secs = time_per_call(dev, 3, 10, 5, || opt.step().map(drop))?;
    out.push(figure(
        "adamw_124m_ms",
        secs * 1e3,
        "ms",
        &format!(
            "one AdamW step over {count} F32 parameters in {} tensors (engine optim::AdamW)",
            shapes.len()
        ),
    ));
    out.push(figure(
        "adamw_124m_gbps",
        count as f64 * 28.0 / secs / 1e9,
        "GB/s",
        "the step's traffic at 28 bytes per parameter (param, exp_avg, exp_avg_sq read + write; grad read)",
    ));
    Ok(())
}

fn tiny_op(dev: &CudaDevice, d: Device, out: &mut Vec<Value>) -> Result<()> {
    let a = Tensor::full(1.0, &[16], DType::F32, d)?;
    let b = Tensor::full(2.0, &[16], DType::F32, d)?;
    for _ in 0..1000 {
        black_box(a.add(&b)?);
    }
    dev.synchronize()?;
    let n = 10_000;
    let mut queued = Vec::new();
    let mut drained = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            black_box(a.add(&b)?);
        }
        queued.push(t.elapsed().as_secs_f64() / n as f64);
        dev.synchronize()?;
        drained.push(t.elapsed().as_secs_f64() / n as f64);
    }
    out.push(figure(
        "tiny_add_us",
        median(queued) * 1e6,
        "us/op",
        "host time per [16]-element F32 add on the GPU, 10k adds queued without a sync",
    ));
    out.push(figure(
        "tiny_add_drained_us",
        median(drained) * 1e6,
        "us/op",
        "the same 10k adds including the final sync",
    ));
    let n = 2_000;
    let synced = time_per_call(dev, 10, 5, n, || {
        black_box(a.add(&b)?);
        dev.synchronize()
    })?;
    out.push(figure(
        "tiny_add_sync_us",
        synced * 1e6,
        "us/op",
        "one [16]-element add followed by a device synchronize",
    ));
    Ok(())
}

/// Runs one section; a failure is recorded under its name and the other sections still run.
fn section(out: &mut Vec<Value>, name: &str, f: impl FnOnce(&mut Vec<Value>) -> Result<()>) {
    let t = Instant::now();
    if let Err(e) = f(out) {
        out.push(json!({"name": name, "error": e.to_string()}));
    }
    eprintln!("gpu_bench: {name} took {:.1} s", t.elapsed().as_secs_f64());
}

fn main() {
    let start = Instant::now();
    if let Err(why) = cuda::availability() {
        println!(
            "{}",
            json!({"bench": "gpu", "error": format!("no usable CUDA device: {why}")})
        );
        eprintln!("gpu_bench: no usable CUDA device: {why}");
        std::process::exit(2);
    }
    let dev = match cuda::device(0) {
        Ok(dev) => dev,
        Err(e) => {
            println!(
                "{}",
                json!({"bench": "gpu", "error": format!("CUDA device 0 did not start: {e}")})
            );
            eprintln!("gpu_bench: CUDA device 0 did not start: {e}");
            std::process::exit(2);
        }
    };
    let d = Device::Cuda(0);
    let dev = &*dev;
    let mut results = Vec::new();
    section(&mut results, "gemm_bf16_4096", |o| gemm(dev, d, 4096, o));
    section(&mut results, "gemm_bf16_8192", |o| gemm(dev, d, 8192, o));
    section(&mut results, "bandwidth", |o| bandwidth(dev, d, o));
    section(&mut results, "softmax", |o| {
        fwd_bwd(
            dev,
            d,
            "softmax_bf16",
            "softmax over the last dim",
            &[],
            |x| x.softmax(-1),
            o,
        )
    });
    section(&mut results, "rms_norm", |o| {
        let w = Tensor::full(1.0, &[4096], DType::BF16, d)?.requires_grad_()?;
        fwd_bwd(
            dev,
            d,
            "rms_norm_bf16",
            "Tensor::rms_norm with a [4096] BF16 weight (eps 1e-6)",
            std::slice::from_ref(&w),
            |x| x.rms_norm(Some(&w), 1e-6),
            o,
        )
    });
    section(&mut results, "adamw", |o| adamw(dev, d, o));
    section(&mut results, "tiny_op", |o| tiny_op(dev, d, o));
    let (cap, sms) = (dev.capability(), dev.sm_count());
    let memory = dev.memory_info().map(|(_, total)| total).unwrap_or(0);
    println!(
        "{}",
        json!({
            "bench": "gpu",
            "framework": "rusting_brain",
            "device": dev.name(),
            "capability": format!("{}.{}", cap.0, cap.1),
            "sm_count": sms,
            "memory_bytes": memory,
            "results": results,
            "seconds": start.elapsed().as_secs_f64(),
        })
    );
}
