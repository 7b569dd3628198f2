//! What every GPU benchmark binary shares: the device, or a JSON line saying why there is none.

use rusting_brain::backend::cuda::{self, CudaDevice};
use serde_json::json;
use std::sync::Arc;

/// CUDA device 0; without a usable one, prints `{"bench": name, "error": ...}` and exits 2.
pub fn cuda_or_exit(bench: &str) -> Arc<CudaDevice> {
    match cuda::availability()
        .map_err(|e| e.to_string())
        .and_then(|_| cuda::device(0).map_err(|e| e.to_string()))
    {
        Ok(dev) => dev,
        Err(why) => {
            println!(
                "{}",
                json!({"bench": bench, "error": format!("no usable CUDA device: {why}")})
            );
            std::process::exit(2);
        }
    }
}

/// The number after `name` on the command line (`--batch 256`), else `default`.
#[allow(dead_code)] // lm_bench reads its flags its own way
pub fn num(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Seconds a call of `f`, over `steps` calls between two device synchronisations.
#[allow(dead_code)] // the benches that time on the host leave it unused
pub fn timed(
    dev: &CudaDevice,
    steps: usize,
    mut f: impl FnMut() -> rusting_brain::Result<()>,
) -> rusting_brain::Result<f64> {
    dev.synchronize()?;
    let t = std::time::Instant::now();
    for _ in 0..steps {
        f()?;
    }
    dev.synchronize()?;
    Ok(t.elapsed().as_secs_f64() / steps as f64)
}

/// One call of `f` inside the profiler's capture range, when `--profile <what>` asks for it
/// (for `ncu --profile-from-start off`).
#[allow(dead_code)] // only the benches with a --profile flag call it
pub fn profiled(
    dev: &CudaDevice,
    what: &str,
    mut f: impl FnMut() -> rusting_brain::Result<()>,
) -> rusting_brain::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.windows(2).any(|w| w[0] == "--profile" && w[1] == what) {
        dev.synchronize()?;
        dev.profiler_capture(true)?;
        f()?;
        dev.synchronize()?;
        dev.profiler_capture(false)?;
    }
    Ok(())
}

/// Bytes as GiB, to two decimals.
#[allow(dead_code)] // the benches that report memory call it
pub fn gib(bytes: u64) -> f64 {
    (bytes as f64 / (1u64 << 30) as f64 * 100.0).round() / 100.0
}
