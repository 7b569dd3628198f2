//! Run-time compilation of `kernels/*.cu` with NVRTC for the device's compute capability, one
//! kernel at a time as a run first launches it, cached on disk by source hash, kernel,
//! architecture and NVRTC version. A program holds one kernel of its file (common.cuh's
//! `RB_KERNEL` leaves the others as templates nobody instantiates), so a run compiles what it
//! launches, about 0.1-0.3 s a kernel, where a whole file (every dtype and variant) took up to
//! a minute; a second run reads the cache.

use crate::{Error, Result};
use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};
use std::ffi::CString;
use std::path::PathBuf;

/// One kernel source file, embedded in the binary, with the code the engine generates for it
/// (op tables as `case` lists), which goes before the file.
pub struct KernelFile {
    pub name: &'static str,
    pub source: &'static str,
    pub generated: fn() -> String,
}

impl KernelFile {
    /// The translation unit NVRTC compiles: which entry points to emit (one kernel, or all of
    /// them), the shared helpers, the generated code, then the file (`#line` keeps the log's
    /// line numbers those of the .cu file itself).
    fn text(&self, entries: Entries) -> String {
        let select = match entries {
            Entries::One(kernel) => format!("#define RB_WANT_{kernel} ~, 1"),
            Entries::All => "#define RB_ALL_KERNELS".to_string(),
        };
        format!(
            "{select}\n{COMMON}\n{}\n#line 1 \"{}\"\n{}",
            (self.generated)(),
            self.name,
            self.source
        )
    }
}

/// Which of a file's entry points a program emits.
#[derive(Clone, Copy)]
enum Entries<'a> {
    One(&'a str),
    All,
}

/// A kernel's name goes into a `#define`, so it must be a C identifier.
fn check_kernel_name(file: &KernelFile, kernel: &str) -> Result<()> {
    let mut chars = kernel.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(Error::Cuda(format!(
            "kernels/{} has no kernel `{kernel}`: not a C identifier",
            file.name
        )))
    }
}

macro_rules! kernel_file {
    ($ident:ident, $file:literal) => {
        kernel_file!($ident, $file, String::new);
    };
    ($ident:ident, $file:literal, $generated:expr) => {
        pub const $ident: KernelFile = KernelFile {
            name: $file,
            source: include_str!(concat!("../../../kernels/", $file)),
            generated: $generated,
        };
    };
}

/// Shared helpers (dtype conversions, strided indexing), prepended to every file.
const COMMON: &str = include_str!("../../../kernels/common.cuh");

/// A header as a file's generated text, after `#line` so NVRTC's log names its own lines.
fn header(name: &str, text: &str) -> String {
    format!("#line 1 \"{name}\"\n{text}\n")
}

const QUANT_BLOCKS: &str = include_str!("../../../kernels/quant_blocks.cuh");
const DECODE_SHARED: &str = include_str!("../../../kernels/decode_gemv.cuh");

/// ggml's block formats as the kernels read them.
fn quant_blocks() -> String {
    header("quant_blocks.cuh", QUANT_BLOCKS)
}

/// What the fused decode products share.
fn decode_shared() -> String {
    header("decode_gemv.cuh", DECODE_SHARED)
}

/// The block formats and what the decode products share.
fn decode_blocks() -> String {
    quant_blocks() + &decode_shared()
}

kernel_file!(COPY, "copy.cu");
kernel_file!(ELEMENTWISE, "elementwise.cu", super::elementwise::op_cases);
kernel_file!(REDUCE, "reduce.cu");
kernel_file!(SOFTMAX, "softmax.cu");
kernel_file!(NORM, "norm.cu");
kernel_file!(BATCH_NORM, "batch_norm.cu");
kernel_file!(GROUP_NORM, "group_norm.cu");
kernel_file!(LOSS, "loss.cu");
kernel_file!(RANDOM, "random.cu");
kernel_file!(INDEX, "index.cu");
kernel_file!(CONV, "conv.cu");
kernel_file!(DEPTHWISE, "depthwise.cu");
kernel_file!(NMS, "nms.cu");
kernel_file!(QUANT_MATMUL, "quant_matmul.cu", quant_blocks);
kernel_file!(NF4, "nf4.cu", super::nf4::tables);
kernel_file!(POOL, "pool.cu");
kernel_file!(OPTIM, "optim.cu");
kernel_file!(ATTENTION, "attention.cu");
kernel_file!(DECODE_ATTENTION, "decode_attention.cu");
kernel_file!(ROPE, "rope.cu");
kernel_file!(SWIGLU, "swiglu.cu");
kernel_file!(GROUPED_MATMUL, "grouped_matmul.cu");
kernel_file!(MOE_ROUTE, "moe_route.cu");
kernel_file!(DECODE_GEMV, "decode_gemv.cu", decode_shared);
kernel_file!(DECODE_QGEMV, "decode_qgemv.cu", decode_blocks);

/// Every kernel file, for the test that compiles them all.
pub const ALL_FILES: &[&KernelFile] = &[
    &COPY,
    &ELEMENTWISE,
    &REDUCE,
    &SOFTMAX,
    &INDEX,
    &CONV,
    &DEPTHWISE,
    &NMS,
    &QUANT_MATMUL,
    &NF4,
    &POOL,
    &OPTIM,
    &NORM,
    &BATCH_NORM,
    &GROUP_NORM,
    &LOSS,
    &RANDOM,
    &ATTENTION,
    &DECODE_ATTENTION,
    &ROPE,
    &SWIGLU,
    &GROUPED_MATMUL,
    &MOE_ROUTE,
    &DECODE_GEMV,
    &DECODE_QGEMV,
];

fn cuda_home() -> PathBuf {
    std::env::var_os("CUDA_HOME")
        .or_else(|| std::env::var_os("CUDA_PATH"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/local/cuda"))
}

/// Whether libnvrtc can be loaded (compiling needs no GPU).
pub fn nvrtc_available() -> bool {
    cudarc::get_lib_name_candidates("nvrtc")
        .iter()
        // SAFETY: loading libnvrtc runs no code with preconditions.
        .any(|name| unsafe { libloading::Library::new(name) }.is_ok())
}

fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::Cuda(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// FNV-1a: a stable 64-bit hash for cache keys (not for security).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("RB_KERNEL_CACHE") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("rusting_brain").join("kernels"))
}

fn options(arch: (i32, i32)) -> Vec<String> {
    vec![
        format!("--gpu-architecture=sm_{}{}", arch.0, arch.1),
        format!("--include-path={}", cuda_home().join("include").display()),
        "--std=c++17".into(),
        "--device-as-default-execution-space".into(),
    ]
}

/// The loadable image (a CUBIN) of `kernel` from `file` for `arch`, from the disk cache or
/// compiled now.
pub(crate) fn compiled(file: &KernelFile, kernel: &str, arch: (i32, i32)) -> Result<Vec<u8>> {
    check_kernel_name(file, kernel)?;
    let version = nvrtc_version()?;
    let opts = options(arch);
    let text = file.text(Entries::One(kernel));
    let key = fnv1a(&[
        text.as_bytes(),
        opts.join(" ").as_bytes(),
        format!("{version:?}").as_bytes(),
    ]);
    let stem = file.name.trim_end_matches(".cu");
    let cached = cache_dir().map(|d| {
        d.join(format!(
            "{stem}.{kernel}-{key:016x}-sm{}{}-nvrtc{}.{}.cubin",
            arch.0, arch.1, version.0, version.1
        ))
    });
    if let Some(path) = &cached {
        if let Ok(bytes) = std::fs::read(path) {
            if !bytes.is_empty() {
                return Ok(bytes);
            }
        }
    }
    announce_first_compile(arch);
    let started = std::time::Instant::now();
    let image = compile_text(file.name, &text, &opts)?;
    let seconds = started.elapsed().as_secs_f64();
    if seconds >= SLOW_COMPILE_S {
        crate::messages::info(&format!(
            "compiled {kernel} (kernels/{}) for sm_{}{} in {seconds:.2} s",
            file.name, arch.0, arch.1
        ));
    }
    if let Some(path) = cached {
        write_atomically(&path, &image);
    }
    Ok(image)
}

/// A kernel that takes this long to compile is named as it finishes; the rest are quiet.
const SLOW_COMPILE_S: f64 = 2.0;

/// Says once per process that kernels are being compiled, and where they will be kept, so the
/// first run's pause has an explanation.
fn announce_first_compile(arch: (i32, i32)) {
    static ANNOUNCED: std::sync::Once = std::sync::Once::new();
    ANNOUNCED.call_once(|| {
        let kept = match cache_dir() {
            Some(dir) => format!("kept in {}", dir.display()),
            None => "not kept: no cache directory (set RB_KERNEL_CACHE)".to_string(),
        };
        crate::messages::info(&format!(
            "compiling CUDA kernels for sm_{}{} as they are first used ({kept})",
            arch.0, arch.1
        ));
    });
}

/// Writes to a temporary file and renames it into place, so a reader never sees half a file;
/// a cache that cannot be written is only a lost speed-up.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Compiles every kernel of one file into one image; a failure names the file and carries
/// NVRTC's log.
pub fn compile(file: &KernelFile, opts: &[String]) -> Result<Vec<u8>> {
    compile_text(file.name, &file.text(Entries::All), opts)
}

/// Compiles one kernel of `file` for `arch`, as a run does on first launch (without the disk
/// cache); for tests that look at what one program holds.
pub fn compile_kernel(file: &KernelFile, kernel: &str, arch: (i32, i32)) -> Result<Vec<u8>> {
    check_kernel_name(file, kernel)?;
    compile_text(file.name, &file.text(Entries::One(kernel)), &options(arch))
}

fn compile_text(file_name: &'static str, text: &str, opts: &[String]) -> Result<Vec<u8>> {
    let src = CString::new(text)
        .map_err(|_| Error::Cuda(format!("kernels/{file_name} has a NUL byte")))?;
    let name = CString::new(file_name).unwrap_or_default();
    let prog = nvrtc::create_program(&src, Some(&name)).map_err(|e| {
        Error::Cuda(format!(
            "nvrtcCreateProgram for kernels/{}: {e:?}",
            file_name
        ))
    })?;
    // SAFETY: `prog` is live until destroyed below; `src` and `name` outlive it.
    unsafe {
        let compiled = nvrtc::compile_program(prog, opts);
        let log = nvrtc::get_program_log(prog)
            .map(|l| {
                let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        if let Err(e) = compiled {
            let _ = nvrtc::destroy_program(prog);
            return Err(Error::KernelCompile {
                file: file_name,
                log: format!("{e:?}\n{log}"),
            });
        }
        let mut size = 0usize;
        let got = nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size).result();
        let mut image = vec![0u8; size];
        let got =
            got.and_then(|_| nvrtc_sys::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut _).result());
        let _ = nvrtc::destroy_program(prog);
        got.map_err(|e| Error::Cuda(format!("nvrtcGetCUBIN for kernels/{}: {e:?}", file_name)))?;
        Ok(image)
    }
}

/// Compiles every kernel file whole for `arch` without a GPU, with each file's image and
/// compile time; used by the test that keeps the kernel sources compiling wherever NVRTC is
/// installed.
pub fn compile_all(arch: (i32, i32)) -> Result<Vec<(&'static str, Vec<u8>, f64)>> {
    let opts = options(arch);
    ALL_FILES
        .iter()
        .map(|f| {
            let started = std::time::Instant::now();
            compile(f, &opts).map(|img| (f.name, img, started.elapsed().as_secs_f64()))
        })
        .collect()
}
