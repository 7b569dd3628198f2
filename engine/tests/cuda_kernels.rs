//! The kernel sources compile with NVRTC wherever NVRTC is installed (no GPU needed), so a
//! syntax error in kernels/*.cu shows up before a run on the device.

use rusting_brain::backend::cuda::compile;

#[test]
fn cuda_kernels_compile_with_nvrtc_for_hopper() {
    if !nvrtc_here("cuda_kernels_compile_with_nvrtc_for_hopper") {
        return;
    }
    let built = compile::compile_all((9, 0)).unwrap_or_else(|e| panic!("{e}"));
    let mut total = 0.0;
    for (file, bytes, seconds) in &built {
        assert!(*bytes > 0, "kernels/{file} compiled to an empty image");
        eprintln!("kernels/{file}: whole file {bytes} bytes in {seconds:.2} s");
        total += seconds;
    }
    eprintln!("every file whole: {total:.1} s");
    assert_eq!(built.len(), compile::ALL_FILES.len());
}

/// NVRTC is here, or the test skips (fails under `RB_REQUIRE_CUDA=1`).
fn nvrtc_here(test: &str) -> bool {
    if compile::nvrtc_available() {
        return true;
    }
    if std::env::var("RB_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
        panic!("RB_REQUIRE_CUDA=1 but libnvrtc was not found");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: libnvrtc not found");
    false
}

fn holds(image: &[u8], name: &str) -> bool {
    // A CUBIN is an ELF file: its kernels' names are NUL-terminated strings in a string table.
    let wanted = [name.as_bytes(), b"\0"].concat();
    image.windows(wanted.len()).any(|w| w == wanted.as_slice())
}

#[test]
fn one_kernel_compiles_without_the_rest_of_its_file() {
    if !nvrtc_here("one_kernel_compiles_without_the_rest_of_its_file") {
        return;
    }
    let image = compile::compile_kernel(&compile::COPY, "cast_f32_bf16", (9, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(holds(&image, "cast_f32_bf16"), "the wanted kernel is missing");
    for other in ["cast_f32_f16", "cast_bf16_f32", "copy_4", "fill_f32"] {
        assert!(!holds(&image, other), "{other} was compiled too");
    }
}

#[test]
fn a_kernel_name_that_is_not_an_identifier_is_refused() {
    let err = compile::compile_kernel(&compile::COPY, "copy_4 x", (9, 0))
        .expect_err("a name with a space went into a #define");
    assert!(err.to_string().contains("not a C identifier"), "{err}");
}

/// A `__global__` written out instead of through `RB_KERNEL` would be compiled into every
/// program of its file, and every kernel of that file would pay for it.
#[test]
fn every_kernel_entry_is_declared_through_rb_kernel() {
    for file in compile::ALL_FILES {
        let text = format!("{}\n{}", (file.generated)(), file.source);
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            assert!(
                !code.contains("__global__"),
                "kernels/{} (or its generated prelude) line {}: a __global__ outside RB_KERNEL: {line}",
                file.name,
                n + 1
            );
        }
    }
}
