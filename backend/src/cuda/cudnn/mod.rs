//! Convolutions through cuDNN, loaded at run time. The algorithm for each shape is chosen by
//! measurement (`cudnnFind*`, as PyTorch's `cudnn.benchmark` does) the first time the shape is
//! seen, and cached. Any cuDNN failure is an `Err` (never a panic), and the caller falls back
//! to the im2col path; a machine without cuDNN says so once and uses that path throughout.
//!
//! Images are NCHW with OIHW weights, or channels-last (NHWC with O·kh·kw·C weights), dense. FP32 accumulates in FP32 on FMA kernels
//! unless TF32 is allowed on the device; BF16/F16 run on tensor cores with FP32 accumulation.

use super::cudnn_graph::{self, Buffers, GraphPlan};
use super::{CudaDevice, CudaStorage};
use crate::spec::Conv2dGeometry;
use crate::{DType, Error, Result};
use cudarc::cudnn::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

mod descriptors;
use descriptors::*;

/// cuDNN 9 or newer: the legacy convolution API with the 9.x symbol set cudarc binds.
const MIN_VERSION: usize = 90000;

/// Largest workspace an algorithm may ask for; faster algorithms needing more are skipped.
const MAX_WORKSPACE: usize = 1 << 30;

static LIBRARY: OnceLock<std::result::Result<usize, String>> = OnceLock::new();

/// cuDNN's version, or why it cannot be used. Probed once, with the file names cudarc tries,
/// before cudarc is asked for a symbol (it panics on a missing library).
pub fn availability() -> std::result::Result<usize, String> {
    LIBRARY
        .get_or_init(|| {
            if std::env::var("RB_DISABLE_CUDNN").as_deref() == Ok("1") {
                return Err("RB_DISABLE_CUDNN=1".into());
            }
            let candidates = cudarc::get_lib_name_candidates("cudnn");
            // SAFETY: loading a CUDA library runs its initializers, which have no preconditions.
            let found = candidates
                .iter()
                .any(|name| unsafe { libloading::Library::new(name) }.is_ok());
            if !found {
                return Err("libcudnn.so.9 was not found on LD_LIBRARY_PATH".into());
            }
            // SAFETY: the library loaded above; cudnnGetVersion takes no arguments.
            let version = unsafe { sys::cudnnGetVersion() };
            if version < MIN_VERSION {
                return Err(format!("cuDNN {version} is older than 9.0"));
            }
            Ok(version)
        })
        .clone()
}

/// Whether convolutions go through cuDNN; the first call without it says why, once.
pub fn enabled() -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    match availability() {
        Ok(_) => true,
        Err(why) => {
            SAID.call_once(|| {
                eprintln!("note: cuDNN is not used ({why}); convolutions run on im2col + cuBLAS")
            });
            false
        }
    }
}

pub(super) fn check(what: &str, status: sys::cudnnStatus_t) -> Result<()> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda(format!("{what}: {status:?}")))
    }
}

/// One cuDNN handle per device, bound to the device's stream.
struct Handle(sys::cudnnHandle_t);
// SAFETY: used only under the device's single-stream discipline (see CudaDevice).
unsafe impl Send for Handle {}

static HANDLES: Mutex<Vec<(usize, Handle)>> = Mutex::new(Vec::new());

fn handle(dev: &CudaDevice) -> Result<sys::cudnnHandle_t> {
    // The handle is bound to the device's stream, not a capture's.
    dev.refuse_in_capture("a cuDNN call")?;
    dev.bind()?;
    let mut handles = HANDLES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, h)) = handles.iter().find(|(o, _)| *o == dev.ordinal()) {
        return Ok(h.0);
    }
    let mut h = std::ptr::null_mut();
    // SAFETY: the device's context is current; the handle lives for the process.
    unsafe {
        check("cudnnCreate", sys::cudnnCreate(&mut h))?;
        check("cudnnSetStream", sys::cudnnSetStream(h, dev.stream() as _))?;
    }
    handles.push((dev.ordinal(), Handle(h)));
    Ok(h)
}

/// The three convolution products.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pass {
    Forward,
    InputGrad,
    WeightGrad,
}

/// The algorithm of one pass.
#[derive(Clone, Copy, Debug)]
enum Algo {
    Forward(sys::cudnnConvolutionFwdAlgo_t),
    InputGrad(sys::cudnnConvolutionBwdDataAlgo_t),
    WeightGrad(sys::cudnnConvolutionBwdFilterAlgo_t),
}

/// The measured choice for one shape: algorithm, math type, workspace bytes.
#[derive(Clone, Copy, Debug)]
struct Choice {
    algo: Algo,
    math: sys::cudnnMathType_t,
    workspace: usize,
}

/// Time spent measuring algorithms, so a benchmark can leave the search out as PyTorch's
/// `cudnn.benchmark` warm-up is left out.
static SEARCH_NANOS: AtomicU64 = AtomicU64::new(0);

/// Seconds spent so far in cuDNN's algorithm search (every shape's first call), process-wide.
pub fn search_seconds() -> f64 {
    SEARCH_NANOS.load(Ordering::Relaxed) as f64 * 1e-9
}

/// How images and weights are laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Images NCHW, weights OIHW (row-major).
    Nchw,
    /// Images NHWC, weights O·kh·kw·C (channels-last): the tensor-core kernels' own layout,
    /// with no transposes around them.
    Nhwc,
}

/// (device, pass, dtype, TF32 allowed, graph API, format, geometry)
type Key = (usize, Pass, DType, bool, bool, Format, [usize; 14]);

/// A shape's descriptors with its measured choice, made once per shape and reused: setting up
/// four descriptors on every call costs more host time than a small convolution takes.
struct Plan {
    kernel: Kernel,
    geometry: Conv2dGeometry,
}

/// Which API runs the shape: the graph API for half types (its engines include the fast
/// sm90 kernels), the legacy calls for F32/F64 (with their math-type control) and for
/// buffers off the 16-byte alignment the graph plans are built for.
enum Kernel {
    Legacy { d: Descriptors, choice: Choice },
    Graph(GraphPlan),
}

impl Plan {
    /// Bytes of scratch memory a call needs.
    fn workspace(&self) -> usize {
        match &self.kernel {
            Kernel::Legacy { choice, .. } => choice.workspace,
            Kernel::Graph(g) => g.workspace,
        }
    }
}
// SAFETY: the descriptors are host objects that cuDNN only reads during a call; calls are
// serialized by the device's single-stream discipline (see CudaDevice).
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

static CALLS: Mutex<()> = Mutex::new(());

static PLANS: Mutex<Option<HashMap<Key, Arc<Plan>>>> = Mutex::new(None);

/// Whether half-precision convolutions use the graph API (`RB_CUDNN_LEGACY=1` keeps them on
/// the legacy calls, to compare the two).
fn graph_api_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RB_CUDNN_LEGACY").as_deref() != Ok("1"))
}

/// One cached plan, for benchmarks and reports: which algorithm cuDNN's measurement chose.
#[derive(Clone, Debug)]
pub struct PlanSummary {
    pub pass: Pass,
    pub dtype: DType,
    pub format: Format,
    pub geometry: Conv2dGeometry,
    /// The algorithm and math type, as cuDNN names them.
    pub algorithm: String,
    pub workspace: usize,
}

/// Every plan made so far in this process.
pub fn plans() -> Vec<PlanSummary> {
    let plans = PLANS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(map) = plans.as_ref() else {
        return Vec::new();
    };
    map.iter()
        .map(|(key, p)| PlanSummary {
            pass: key.1,
            dtype: key.2,
            format: key.5,
            geometry: p.geometry,
            algorithm: match &p.kernel {
                Kernel::Legacy { choice, .. } => match choice.algo {
                    Algo::Forward(a) => format!("{a:?} {:?}", choice.math),
                    Algo::InputGrad(a) => format!("{a:?} {:?}", choice.math),
                    Algo::WeightGrad(a) => format!("{a:?} {:?}", choice.math),
                },
                Kernel::Graph(g) => format!("graph engine {}", g.engine),
            },
            workspace: p.workspace(),
        })
        .collect()
}

/// The plan for this shape: made the first time by measuring every algorithm of `pass` and
/// keeping the fastest that succeeds within the workspace budget and the allowed math.
#[allow(clippy::too_many_arguments)]
fn plan(
    dev: &Arc<CudaDevice>,
    h: sys::cudnnHandle_t,
    pass: Pass,
    g: &Conv2dGeometry,
    dtype: DType,
    format: Format,
    graph: bool,
    buffers: &Buffers,
) -> Result<Arc<Plan>> {
    let tf32 = dev.allow_tf32();
    let key: Key = (
        dev.ordinal(),
        pass,
        dtype,
        tf32,
        graph,
        format,
        [
            g.n,
            g.c,
            g.h,
            g.w,
            g.o,
            g.kh,
            g.kw,
            g.stride.0,
            g.stride.1,
            g.padding.0,
            g.padding.1,
            g.dilation.0,
            g.dilation.1,
            g.groups,
        ],
    );
    if let Some(p) = PLANS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return Ok(p.clone());
    }
    let started = Instant::now();
    let kernel = if graph {
        // Timing the candidates needs scratch memory; the largest asked for is kept until the
        // choice is made.
        let mut scratch: Option<CudaStorage> = None;
        let made = GraphPlan::measure(
            dev,
            h,
            pass,
            g,
            dtype,
            format,
            buffers,
            MAX_WORKSPACE,
            |size| {
                if scratch.as_ref().is_none_or(|s| s.len() < size.max(1)) {
                    scratch = Some(CudaStorage::alloc(dev, size.max(1), DType::U8)?);
                }
                Ok(scratch
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |s| s.ptr() as *mut c_void))
            },
        );
        match made {
            Ok(made) => {
                SEARCH_NANOS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                Kernel::Graph(made)
            }
            // A shape the graph API cannot plan still runs, on the legacy calls.
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!("note: cuDNN graph API: {e}; using the legacy calls for such shapes")
                });
                legacy_kernel(h, pass, g, dtype, format, tf32, started)?
            }
        }
    } else {
        legacy_kernel(h, pass, g, dtype, format, tf32, started)?
    };
    let plan = Arc::new(Plan {
        kernel,
        geometry: *g,
    });
    PLANS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, plan.clone());
    Ok(plan)
}

/// The legacy path's choice for a shape: every algorithm of `pass` measured by cuDNN's Find,
/// keeping the fastest that succeeds within the workspace budget and the allowed math.
fn legacy_kernel(
    h: sys::cudnnHandle_t,
    pass: Pass,
    g: &Conv2dGeometry,
    dtype: DType,
    format: Format,
    tf32: bool,
    started: Instant,
) -> Result<Kernel> {
    let d = Descriptors::new(g, dtype, format)?;
    d.set_math(requested_math(dtype, tf32))?;
    let allowed = allowed_math(dtype, tf32);
    const N: usize = 16;
    let mut found = 0i32;
    let status_ok = sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
    // The three Find calls differ only in their perf struct, descriptor order and algorithm
    // variant; the choice rule is one.
    macro_rules! measure {
        ($perf:ty, $find:ident, $name:literal, ($a:expr, $b:expr, $c:expr, $o:expr), $variant:ident) => {{
            let mut perf: [$perf; N] = std::mem::zeroed();
            check(
                $name,
                sys::$find(h, $a, $b, $c, $o, N as i32, &mut found, perf.as_mut_ptr()),
            )?;
            perf[..found.max(0) as usize]
                .iter()
                .find(|p| p.status == status_ok && p.memory <= MAX_WORKSPACE && allowed(p.mathType))
                .map(|p| Choice {
                    algo: Algo::$variant(p.algo),
                    math: p.mathType,
                    workspace: p.memory,
                })
        }};
    }
    // SAFETY: descriptors are live; the perf arrays hold N entries; cuDNN allocates its own
    // scratch buffers for the measurement and synchronizes before returning.
    let best = unsafe {
        match pass {
            Pass::Forward => measure!(
                sys::cudnnConvolutionFwdAlgoPerf_t,
                cudnnFindConvolutionForwardAlgorithm,
                "cudnnFindConvolutionForwardAlgorithm",
                (d.x, d.w, d.conv, d.y),
                Forward
            ),
            Pass::InputGrad => measure!(
                sys::cudnnConvolutionBwdDataAlgoPerf_t,
                cudnnFindConvolutionBackwardDataAlgorithm,
                "cudnnFindConvolutionBackwardDataAlgorithm",
                (d.w, d.y, d.conv, d.x),
                InputGrad
            ),
            Pass::WeightGrad => measure!(
                sys::cudnnConvolutionBwdFilterAlgoPerf_t,
                cudnnFindConvolutionBackwardFilterAlgorithm,
                "cudnnFindConvolutionBackwardFilterAlgorithm",
                (d.x, d.y, d.conv, d.w),
                WeightGrad
            ),
        }
    };
    SEARCH_NANOS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    let choice = best.ok_or_else(|| {
        Error::Cuda(format!(
            "cuDNN has no usable {pass:?} algorithm for {g:?} in {dtype:?}"
        ))
    })?;
    d.set_math(choice.math)?;
    Ok(Kernel::Legacy { d, choice })
}

/// Runs one pass. `a` and `b` are the pass's inputs (x and w; dy and w; x and dy), each a
/// dense tensor in `format` at an element offset in its storage; the output is allocated here,
/// in `format` too.
pub fn run(
    pass: Pass,
    format: Format,
    (a, a_offset): (&CudaStorage, usize),
    (b, b_offset): (&CudaStorage, usize),
    g: &Conv2dGeometry,
) -> Result<CudaStorage> {
    let dev = a.cuda_device();
    let dtype = a.dtype();
    // One call at a time: a handle, and the measurement behind a new plan, must not be used
    // from two threads at once (test harnesses and scripts may share a device across threads).
    let _one_at_a_time = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    let h = handle(dev)?;
    let out_len = match pass {
        Pass::Forward => g.n * g.o * g.ho * g.wo,
        Pass::InputGrad => g.n * g.c * g.h * g.w,
        Pass::WeightGrad => g.o * g.cg() * g.kh * g.kw,
    };
    let out = CudaStorage::alloc(dev, out_len, dtype)?;
    if out_len == 0 {
        return Ok(out);
    }
    let buffers = Buffers {
        a: a.ptr_at(a_offset) as *const c_void,
        b: b.ptr_at(b_offset) as *const c_void,
        out: out.ptr() as *mut c_void,
    };
    let aligned = [buffers.a as usize, buffers.b as usize, buffers.out as usize]
        .iter()
        .all(|p| p % cudnn_graph::ALIGNMENT == 0);
    let graph = matches!(dtype, DType::F16 | DType::BF16) && aligned && graph_api_enabled();
    let plan = plan(dev, h, pass, g, dtype, format, graph, &buffers)?;
    let ws_len = plan.workspace();
    let workspace = CudaStorage::alloc(dev, ws_len.max(1), DType::U8)?;
    let ws = workspace.ptr() as *mut c_void;
    let (d, choice) = match &plan.kernel {
        Kernel::Legacy { d, choice } => (d, *choice),
        Kernel::Graph(gp) => {
            gp.run(h, pass, &buffers, ws)?;
            return Ok(out);
        }
    };
    let o = buffers.out;
    let (pa, pb) = (buffers.a, buffers.b);
    // alpha/beta are doubles for F64 compute, floats otherwise.
    let (one_f, zero_f, one_d, zero_d) = (1f32, 0f32, 1f64, 0f64);
    let (alpha, beta): (*const c_void, *const c_void) = if dtype == DType::F64 {
        (&one_d as *const f64 as _, &zero_d as *const f64 as _)
    } else {
        (&one_f as *const f32 as _, &zero_f as *const f32 as _)
    };
    // SAFETY: every buffer lives on this device and holds its descriptor's elements; the
    // algorithm and workspace come from `choose` for these descriptors; the call is queued on
    // the device's stream, which orders it before any later use or free of these buffers.
    unsafe {
        match choice.algo {
            Algo::Forward(algo) => check(
                "cudnnConvolutionForward",
                sys::cudnnConvolutionForward(
                    h, alpha, d.x, pa, d.w, pb, d.conv, algo, ws, ws_len, beta, d.y, o,
                ),
            )?,
            Algo::InputGrad(algo) => check(
                "cudnnConvolutionBackwardData",
                sys::cudnnConvolutionBackwardData(
                    h, alpha, d.w, pb, d.y, pa, d.conv, algo, ws, ws_len, beta, d.x, o,
                ),
            )?,
            Algo::WeightGrad(algo) => check(
                "cudnnConvolutionBackwardFilter",
                sys::cudnnConvolutionBackwardFilter(
                    h, alpha, d.x, pa, d.y, pb, d.conv, algo, ws, ws_len, beta, d.w, o,
                ),
            )?,
        }
    }
    Ok(out)
}
