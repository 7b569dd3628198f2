//! The CUDA backend: device memory, NVRTC-compiled kernels from `kernels/`, and cuBLAS. Always
//! compiled in and chosen at run time; on a machine without the driver every entry point
//! returns `DeviceUnavailable` instead of touching cudarc.

pub mod attention;
pub mod batch_norm;
mod block_cache;
pub mod compile;
pub mod conv;
pub mod copy;
pub mod cudnn;
mod cudnn_graph;
pub mod decode_attention;
pub mod decode_gemv;
pub mod depthwise;
mod device;
pub mod elementwise;
pub mod graph;
pub mod group_norm;
pub mod grouped_matmul;
pub mod index;
pub(crate) mod launch;
pub mod loss;
pub mod matmul;
pub mod moe_route;
pub mod nccl;
pub mod nf4;
pub mod nms;
pub mod norm;
pub mod optim;
pub mod pool;
mod probe;
mod q4_k_layout;
pub mod quant_matmul;
pub mod random;
pub mod readback;
pub mod reduce;
pub mod rope;
pub mod softmax;
mod sorted_add;
mod storage;
pub mod swiglu;

pub(crate) use device::Launch;
pub use device::{availability, device, is_available, CudaDevice};
pub use storage::CudaStorage;

/// For tests: CUDA device 0, or `None` after saying on the test's output that it skipped. With
/// `RB_REQUIRE_CUDA=1` a missing device fails the test instead, so a GPU run cannot pass by
/// skipping.
pub fn device_for_test(test: &str) -> Option<crate::Device> {
    match availability() {
        Ok(_) => Some(crate::Device::Cuda(0)),
        Err(why) => {
            if std::env::var("RB_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("{test}: RB_REQUIRE_CUDA=1 but CUDA is not usable: {why}");
            }
            // Straight to the stream, past the test harness's capture, so the skip is visible.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: no CUDA device ({why})");
            None
        }
    }
}
