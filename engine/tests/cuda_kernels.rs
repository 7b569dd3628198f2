//! The kernel sources compile with NVRTC wherever NVRTC is installed (no GPU needed), so a
//! syntax error in kernels/*.cu shows up before a run on the device.

use rusting_brain::backend::cuda::compile;

#[test]
fn cuda_kernels_compile_with_nvrtc_for_hopper() {
    if !compile::nvrtc_available() {
        if std::env::var("RB_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
            panic!("RB_REQUIRE_CUDA=1 but libnvrtc was not found");
        }
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED cuda_kernels_compile_with_nvrtc_for_hopper: libnvrtc not found"
        );
        return;
    }
    let built = compile::compile_all((9, 0)).unwrap_or_else(|e| panic!("{e}"));
    for (file, bytes) in &built {
        assert!(*bytes > 0, "kernels/{file} compiled to an empty image");
    }
    assert_eq!(built.len(), compile::ALL_FILES.len());
}
