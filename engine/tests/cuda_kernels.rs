//! The kernel sources compile with NVRTC wherever NVRTC is installed (no GPU needed), so a
//! syntax error in kernels/*.cu shows up before a run on the device.

use rusting_brain::backend::cuda::compile;

#[test]
fn cuda_kernels_compile_with_nvrtc_for_hopper() {
    if !nvrtc_here("cuda_kernels_compile_with_nvrtc_for_hopper") {
        return;
    }
    let built = compile::compile_all((9, 0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(built.len(), compile::ALL_FILES.len());
    let mut total = 0.0;
    for ((name, image, seconds), file) in built.iter().zip(compile::ALL_FILES) {
        eprintln!(
            "kernels/{name}: whole file {} bytes in {seconds:.2} s",
            image.len()
        );
        total += seconds;
        // The programs runs compile hold one kernel each: the file's first compiles alone too.
        let kernel = first_kernel(image).unwrap_or_else(|| panic!("kernels/{name} has no kernel"));
        let started = std::time::Instant::now();
        let alone = compile::compile_kernel(file, &kernel, (9, 0))
            .unwrap_or_else(|e| panic!("{kernel} alone: {e}"));
        eprintln!(
            "  {kernel} alone: {} bytes in {:.2} s",
            alone.len(),
            started.elapsed().as_secs_f64()
        );
        assert!(holds(&alone, &kernel), "{kernel} compiled alone is missing");
    }
    eprintln!("every file whole: {total:.1} s");
}

/// The first kernel in a CUBIN: its code is in an ELF section named `.text.<kernel>`.
fn first_kernel(image: &[u8]) -> Option<String> {
    let tag = b".text.";
    let at = image.windows(tag.len()).position(|w| w == tag)? + tag.len();
    let name: Vec<u8> = image[at..]
        .iter()
        .take_while(|&&b| b != 0)
        .copied()
        .collect();
    String::from_utf8(name).ok().filter(|n| !n.is_empty())
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
    assert!(
        holds(&image, "cast_f32_bf16"),
        "the wanted kernel is missing"
    );
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
