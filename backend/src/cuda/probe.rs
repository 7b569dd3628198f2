//! Finds the CUDA driver and libraries before cudarc is asked to load them: cudarc panics on a
//! missing library or symbol, and a panic would end a REPL session. The probe tries the same
//! file names cudarc tries, so a library the probe finds is one cudarc will load.

use cudarc::driver::sys;

/// The oldest driver API this build's bindings are generated against (CUDA 13.0).
const MIN_DRIVER_VERSION: i32 = 13000;

/// The libraries the backend loads, by cudarc's short names.
const LIBRARIES: [&str; 4] = ["cuda", "nvrtc", "cublas", "cublasLt"];

/// Checks that every library loads and that the driver is new enough; the error says what was
/// looked for, so a user can fix `LD_LIBRARY_PATH` or the driver.
pub(crate) fn probe() -> Result<(), String> {
    for lib in LIBRARIES {
        let hint = if lib == "cuda" {
            "is the NVIDIA driver installed?"
        } else {
            "is the CUDA toolkit's lib64 on LD_LIBRARY_PATH?"
        };
        find_library(lib, hint)?;
    }
    let mut version = 0;
    // SAFETY: libcuda loaded above; cuDriverGetVersion only writes the int it is given.
    let rc = unsafe { sys::cuDriverGetVersion(&mut version) };
    if rc != sys::cudaError_enum::CUDA_SUCCESS {
        return Err(format!("cuDriverGetVersion failed: {rc:?}"));
    }
    if version < MIN_DRIVER_VERSION {
        return Err(format!(
            "the NVIDIA driver supports CUDA {}.{}, and this build needs {}.{} or newer",
            version / 1000,
            (version % 1000) / 10,
            MIN_DRIVER_VERSION / 1000,
            (MIN_DRIVER_VERSION % 1000) / 10
        ));
    }
    Ok(())
}

/// Whether cudarc's library `lib` (its short name: "cublas", "nccl") loads under one of the
/// file names cudarc tries; the error lists the names looked for, then `hint`.
pub(crate) fn find_library(lib: &str, hint: &str) -> Result<(), String> {
    let candidates = cudarc::get_lib_name_candidates(lib);
    // SAFETY: loading a CUDA library runs its initializers, which have no preconditions.
    let found = candidates
        .iter()
        .any(|name| unsafe { libloading::Library::new(name) }.is_ok());
    if found {
        return Ok(());
    }
    let prefix = format!("lib{lib}.so");
    let mut shown: Vec<&str> = candidates
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with(&prefix))
        .collect();
    shown.dedup();
    Err(format!(
        "lib{lib} was not found (looked for {}); {hint}",
        shown.join(", ")
    ))
}
