//! Devices and precision from scripts: whether CUDA is usable, mixed precision, TF32, and a
//! synchronization point for timing.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Engine, Module, FLOAT};
use rusting_brain::backend::cuda;
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

fn cuda_device() -> RhaiResult<std::sync::Arc<cuda::CudaDevice>> {
    match crate::tensor::default_device() {
        Device::Cuda(n) => guard(|| cuda::device(n)),
        Device::Cpu => guard(|| cuda::device(0)),
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
            cuda::is_available,
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
            |on: bool| -> RhaiResult<()> {
                cuda_device()?.set_allow_tf32(on);
                Ok(())
            },
        );
        api.func(
            "synchronize",
            "synchronize()",
            "Waits until the GPU has finished the queued work (for timing); a no-op on the CPU.",
            "synchronize();",
            || -> RhaiResult<()> {
                match crate::tensor::default_device() {
                    Device::Cuda(n) => guard(|| cuda::device(n)?.synchronize()),
                    Device::Cpu => Ok(()),
                }
            },
        );
        api.func(
            "peak_memory_gib",
            "peak_memory_gib() -> float",
            "The most memory the script's GPU has held at once so far, in GiB (tensors and caches of this process); 0.0 on the CPU.",
            "print(`peak ${peak_memory_gib()} GiB`);",
            || -> RhaiResult<FLOAT> {
                match crate::tensor::default_device() {
                    Device::Cuda(n) => guard(|| cuda::device(n)?.peak_memory())
                        .map(|b| b as FLOAT / (1u64 << 30) as FLOAT),
                    Device::Cpu => Ok(0.0),
                }
            },
        );
    }
    engine.register_global_module(module.into());
}
