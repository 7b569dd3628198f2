//! Devices and precision from scripts: whether CUDA is usable, mixed precision, TF32, and a
//! synchronization point for timing.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Engine, Module, FLOAT};
use rusting_brain::{amp, DType, Device};

fn mixed_precision(dtype: &str) -> RhaiResult<()> {
    let d = match dtype {
        "off" | "none" | "f32" => None,
        other => Some(DType::parse(other).ok_or_else(|| {
            runtime_error(format!(
                "mixed_precision: unknown dtype \"{other}\"; use \"bf16\", \"f16\" or \"off\""
            ))
        })?),
    };
    guard(|| amp::set_autocast(d))
}

/// The script's GPU: its default device, or CUDA device 0 while the default is the CPU.
fn cuda_device() -> Device {
    match crate::tensor::default_device() {
        Device::Cpu => Device::Cuda(0),
        gpu => gpu,
    }
}

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, None);
        api.func(
            "cuda_available",
            "cuda_available() -> bool",
            "Whether a CUDA device can be used (the driver and libraries were found).",
            "if cuda_available() { print(\"GPU\") }",
            Device::cuda_is_available,
        );
        api.func(
            "mixed_precision",
            "mixed_precision(dtype)",
            "On CUDA, run matrix products on \"bf16\" (or \"f16\") operands with FP32 accumulation while parameters, gradients, norms, softmax, losses and optimizer state stay FP32; \"off\" turns it off.",
            "mixed_precision(\"bf16\");",
            mixed_precision,
        );
        api.func(
            "allow_tf32",
            "allow_tf32(on)",
            "Lets F32 matrix products on the GPU use TF32 tensor cores (faster, about 1e-3 relative error).",
            "if cuda_available() { allow_tf32(true); }",
            |on: bool| -> RhaiResult<()> { guard(|| cuda_device().set_tf32_allowed(on)) },
        );
        api.func(
            "synchronize",
            "synchronize()",
            "Waits until the GPU has finished the queued work (for timing); a no-op on the CPU.",
            "synchronize();",
            || -> RhaiResult<()> { guard(|| crate::tensor::default_device().synchronize()) },
        );
        api.func(
            "peak_memory_gib",
            "peak_memory_gib() -> float",
            "The most memory the script's GPU has held at once so far, in GiB (tensors and caches of this process); 0.0 on the CPU.",
            "print(`peak ${peak_memory_gib()} GiB`);",
            || -> RhaiResult<FLOAT> {
                guard(|| crate::tensor::default_device().peak_memory())
                    .map(|b| b as FLOAT / (1u64 << 30) as FLOAT)
            },
        );
    }
    engine.register_global_module(module.into());
}
