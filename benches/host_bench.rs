//! Host benchmarks, printed as JSON lines: the start-up time of `brain run` on an empty script
//! (CUDA and everything heavy start lazily), and the cost of one Rhai call of a tensor op on a
//! 1-element tensor, beside the engine op alone and a bare registered Rhai function.
//!
//! On a CUDA device it also prints the host's cost of queuing small CUDA ops (the time to
//! queue many, with the device wait after them reported apart): what bounds a training step
//! made of thousands of small kernels.
//!
//! cargo build --release -p brain -p rb_benches && target/release/host_bench

use rhai::Engine;
use rusting_brain::{Conv2dOptions, DType, Device, Tensor};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

fn brain_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("BRAIN_BIN") {
        return p.into();
    }
    let me = std::env::current_exe().expect("current exe");
    me.with_file_name("brain")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn startup_ms() -> f64 {
    let dir = std::env::temp_dir().join(format!("rb-host-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let script = dir.join("empty.rhai");
    std::fs::write(&script, "").expect("write script");
    let bin = brain_bin();
    let mut times = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        let out = Command::new(&bin)
            .arg("run")
            .arg(&script)
            .arg("--device")
            .arg("cpu")
            .output()
            .expect("run brain (set BRAIN_BIN)");
        assert!(
            out.status.success(),
            "brain run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    median(times)
}

/// Seconds per iteration of `body` in a Rhai loop of `n` iterations, best of 5.
fn rhai_loop(engine: &Engine, setup: &str, body: &str, n: usize) -> f64 {
    let src = format!("{setup}\nfor i in 0..{n} {{ {body} }}");
    let ast = engine.compile(&src).expect("compile");
    (0..5)
        .map(|_| {
            let t = Instant::now();
            engine.run_ast(&ast).expect("run");
            t.elapsed().as_secs_f64() / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n = 200_000;
    let mut engine = rusting_brain_rhai::new_engine();
    engine.register_fn("nop", |x: rhai::INT| x);
    let empty_loop = rhai_loop(&engine, "let y = 0;", "y = i;", n);
    let nop_call = rhai_loop(&engine, "let y = 0;", "y = nop(i);", n) - empty_loop;
    let tensor_op = rhai_loop(
        &engine,
        "let x = tensor([1.0]); let y = x;",
        "y = x + x;",
        n,
    ) - empty_loop;

    let x = Tensor::from_f64s(&[1.0], &[1], DType::F32).expect("tensor");
    let mut engine_op = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(x.add(&x).expect("add"));
        }
        engine_op = engine_op.min(t.elapsed().as_secs_f64() / n as f64);
    }
    println!(
        "{}",
        serde_json::json!({ "bench": "brain_run_empty_script", "median_ms": startup_ms(), "target_ms": 50 })
    );
    println!(
        "{}",
        serde_json::json!({ "bench": "rhai_registered_fn_call", "ns": nop_call * 1e9 })
    );
    println!(
        "{}",
        serde_json::json!({ "bench": "rhai_tensor_add_1_element", "ns": tensor_op * 1e9, "target_ns": 2000 })
    );
    println!(
        "{}",
        serde_json::json!({ "bench": "engine_tensor_add_1_element", "ns": engine_op * 1e9 })
    );
    if rusting_brain::backend::cuda::is_available() {
        cuda_queue_costs();
    }
}

/// Host microseconds per call of `op`, queued `n` times (best of 5), and the device wait after.
fn queue_cost(name: &str, n: usize, mut op: impl FnMut()) {
    let cuda = rusting_brain::backend::cuda::device(0).expect("cuda:0");
    op();
    cuda.synchronize().expect("sync");
    let (mut best, mut wait) = (f64::INFINITY, 0.0);
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            op();
        }
        let queued = t.elapsed().as_secs_f64();
        cuda.synchronize().expect("sync");
        if queued < best {
            best = queued;
            wait = t.elapsed().as_secs_f64() - queued;
        }
    }
    println!(
        "{}",
        serde_json::json!({ "bench": format!("cuda_queue_{name}"), "host_us": best / n as f64 * 1e6,
                            "wait_after_ms": wait * 1e3 })
    );
}

fn cuda_queue_costs() {
    let dev = Device::Cuda(0);
    let n = 2000;
    let x = Tensor::from_f64s(&[1.0; 256], &[256], DType::F32)
        .and_then(|t| t.to_device(dev))
        .expect("cuda tensor");
    queue_cost("add", n, || drop(x.add(&x).expect("add")));
    queue_cost("add_scalar", n, || drop(x.add_scalar(1.0).expect("add")));
    queue_cost("affine", n, || drop(x.affine(1.0, 1.0).expect("affine")));
    let w = x
        .contiguous_copy()
        .and_then(|t| t.requires_grad_())
        .expect("leaf");
    queue_cost("add_recorded", n, || drop(x.add(&w).expect("add")));
    queue_cost("add_recorded_backward", n / 4, || {
        x.add(&w)
            .and_then(|y| y.sum())
            .and_then(|s| s.backward())
            .expect("backward");
        w.set_grad(None);
    });
    let img = Tensor::from_f64s(&vec![0.5; 2 * 16 * 16 * 16], &[2, 16, 16, 16], DType::BF16)
        .and_then(|t| t.to_device(dev))
        .expect("cuda tensor");
    let k = Tensor::from_f64s(&vec![0.01; 16 * 16 * 9], &[16, 16, 3, 3], DType::BF16)
        .and_then(|t| t.to_device(dev))
        .expect("cuda tensor");
    let opts = Conv2dOptions {
        padding: (1, 1),
        ..Default::default()
    };
    queue_cost("conv2d_bf16", n / 4, || {
        drop(img.conv2d(&k, None, opts).expect("conv2d"))
    });
}
