//! The parity harness: builds a case's seeded inputs on the CPU, runs the op on the device under
//! test and on the CPU reference, backpropagates `(out * fixed random weights).sum()` through
//! both, and compares outputs and the gradients of every float input.
//!
//! Tolerances, by the case's dtype:
//! - F32: |got - want| <= 1e-4 |want| + 1e-6 sqrt(k) scale per element, with k the case's
//!   reduction length and scale the largest |want| of the tensor.
//! - F64: the same shape with 1e-9 and 1e-12.
//! - BF16 and F16: the reference runs in F32 on the same (up-cast) inputs, and each element of
//!   the device result, cast to F32, must satisfy |got - want| <= 2e-2 std(want) + u |want|,
//!   u = 2^-6 for BF16 and 2^-9 for F16 (two to four units in the last place of each value).
//!   The spread term alone (max |Δ| / std <= 2e-2) fails
//!   even the CPU's own BF16 path wherever values sit far from zero relative to their spread
//!   (log_softmax near -8, a variance near 1, a row sum): each op of a half-precision chain
//!   rounds its result to 8 significant bits, an error proportional to the value itself.
//! - Integer and bool outputs: exact.
//!
//! Non-finite reference values must be matched exactly (same infinity, or NaN for NaN).

use rusting_brain::ops::table::OpInfo;
use rusting_brain::{DType, Device, Generator, Result, Tensor};
use std::rc::Rc;

pub type OpFn = Rc<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>>;

/// How a value input's elements are drawn. Integer dtypes draw small integers instead (see
/// `int_range`), so integer results stay exact and in range.
#[derive(Clone, Copy, Debug)]
pub enum Dist {
    Normal,
    Uniform(f64, f64),
    /// Whole numbers in [lo, hi): ties for comparisons, exact in every dtype.
    Ints(i64, i64),
}

pub enum Source {
    /// Random values in the case's dtype.
    Value { shape: Vec<usize>, dist: Dist },
    /// The same tensor for every dtype (indices, masks), moved to the device as it is.
    Fixed(Tensor),
}

pub struct Input {
    pub source: Source,
    /// Whether its gradient is compared (float dtypes of differentiable ops only).
    pub grad: bool,
    /// Stored transposed (last two dims swapped) and handed to the op as a transposed view, so
    /// the op sees a non-contiguous input on the device too.
    pub transposed: bool,
}

impl Input {
    /// Without a gradient check (targets, anchors).
    pub fn frozen(mut self) -> Input {
        self.grad = false;
        self
    }

    /// A non-contiguous view: `shape` is the shape the op sees.
    pub fn t(mut self) -> Input {
        self.transposed = true;
        self
    }

    fn describe(&self, dtype: DType) -> String {
        let t = if self.transposed { " transposed" } else { "" };
        match &self.source {
            Source::Value { shape, dist } => format!("{shape:?} {dtype} {dist:?}{t}"),
            Source::Fixed(x) => format!("{:?} {} fixed{t}", x.shape(), x.dtype()),
        }
    }
}

pub fn value(shape: &[usize], dist: Dist) -> Input {
    Input {
        source: Source::Value {
            shape: shape.to_vec(),
            dist,
        },
        grad: true,
        transposed: false,
    }
}

pub fn normal(shape: &[usize]) -> Input {
    value(shape, Dist::Normal)
}

pub fn fixed(t: Tensor) -> Input {
    Input {
        source: Source::Fixed(t),
        grad: false,
        transposed: false,
    }
}

pub struct Case {
    pub label: String,
    pub inputs: Vec<Input>,
    /// The reduction length behind each output element (1 for elementwise ops).
    pub k: usize,
    /// The reduction length behind each gradient element, when it is not the default
    /// max(k, output elements / input elements).
    pub grad_k: Option<usize>,
    pub f: OpFn,
    /// Multiplies the BF16/F16 allowance, for composites whose half-precision chain cancels.
    pub half_slack: f64,
}

impl Case {
    pub fn new(
        label: impl Into<String>,
        inputs: Vec<Input>,
        k: usize,
        f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'static,
    ) -> Case {
        Case {
            label: label.into(),
            inputs,
            k: k.max(1),
            grad_k: None,
            f: Rc::new(f),
            half_slack: 1.0,
        }
    }

    pub fn half_slack(mut self, factor: f64) -> Case {
        self.half_slack = factor;
        self
    }

    pub fn grad_k(mut self, k: usize) -> Case {
        self.grad_k = Some(k.max(1));
        self
    }
}

/// FNV-1a, for seeds that depend only on the case and not on the order cases run in.
pub fn seed_of(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The integer range a dist maps to for integer and bool dtypes.
fn int_range(dist: Dist, dtype: DType) -> (i64, i64) {
    let (lo, hi) = match dist {
        Dist::Normal => (-8, 8),
        // Positive draws (divisors, logs) stay positive.
        Dist::Uniform(lo, _) if lo > 0.0 => (1, 9),
        Dist::Uniform(..) => (-8, 8),
        Dist::Ints(lo, hi) => (lo, hi),
    };
    match dtype {
        DType::Bool => (0, 2),
        DType::U8 | DType::U32 => (lo.max(0), hi.max(lo.max(0) + 1)),
        _ => (lo, hi),
    }
}

fn draw(shape: &[usize], dist: Dist, dtype: DType, seed: u64) -> Result<Tensor> {
    let mut g = Generator::new(seed);
    if !dtype.is_float() {
        let (lo, hi) = int_range(dist, dtype);
        return Tensor::randint(lo, hi, shape, Some(&mut g))?.to_dtype(dtype);
    }
    let x = match dist {
        Dist::Normal => Tensor::randn(shape, DType::F32, Some(&mut g))?,
        Dist::Uniform(lo, hi) => {
            Tensor::rand(shape, DType::F32, Some(&mut g))?.affine(hi - lo, lo)?
        }
        Dist::Ints(lo, hi) => Tensor::randint(lo, hi, shape, Some(&mut g))?.to_dtype(DType::F32)?,
    };
    x.to_dtype(dtype)
}

/// The tensor an input is stored as on the CPU (transposed inputs are stored swapped).
fn stored(input: &Input, dtype: DType, seed: u64) -> Result<Tensor> {
    match &input.source {
        Source::Value { shape, dist } => {
            let mut s = shape.clone();
            if input.transposed {
                let r = s.len();
                s.swap(r - 2, r - 1);
            }
            draw(&s, *dist, dtype, seed)
        }
        Source::Fixed(t) => Ok(t.clone()),
    }
}

/// A tensor read back to the host.
struct Read {
    dtype: DType,
    shape: Vec<usize>,
    device: Device,
    values: Vec<f64>,
}

fn read(t: &Tensor) -> Result<Read> {
    Ok(Read {
        dtype: t.dtype(),
        shape: t.shape().to_vec(),
        device: t.device(),
        values: t.to_vec_f64()?,
    })
}

struct Run {
    outs: Vec<Read>,
    grads: Vec<Option<Read>>,
}

/// Runs `f` on `inputs` moved to `device`, then backward from the weighted sum of its float
/// outputs. `weight(i, out)` gives output i's weights on that output's device and dtype.
fn execute(
    case: &Case,
    inputs: &[Tensor],
    wants_grad: &[bool],
    device: Device,
    weight: &dyn Fn(usize, &Tensor) -> Result<Tensor>,
) -> Result<Run> {
    let mut leaves = Vec::with_capacity(inputs.len());
    for (t, &g) in inputs.iter().zip(wants_grad) {
        // A fresh leaf: moving to the same device returns the same handle.
        let leaf = t.to_device(device)?.detach();
        if g {
            leaf.set_requires_grad(true)?;
        }
        leaves.push(leaf);
    }
    let args = leaves
        .iter()
        .zip(&case.inputs)
        .map(|(l, i)| {
            if i.transposed {
                l.transpose(-2, -1)
            } else {
                Ok(l.clone())
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let outs = (case.f)(&args)?;
    let mut loss: Option<Tensor> = None;
    for (i, out) in outs.iter().enumerate() {
        if !out.requires_grad() {
            continue;
        }
        let term = out.mul(&weight(i, out)?)?.sum()?;
        loss = Some(match loss {
            Some(l) => l.add(&term)?,
            None => term,
        });
    }
    if let Some(loss) = loss {
        loss.backward()?;
    }
    let outs = outs.iter().map(read).collect::<Result<Vec<_>>>()?;
    let grads = leaves
        .iter()
        .zip(wants_grad)
        .map(|(l, &g)| match (g, l.grad()) {
            (true, Some(gr)) => read(&gr).map(Some),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Run { outs, grads })
}

fn is_half(d: DType) -> bool {
    matches!(d, DType::BF16 | DType::F16)
}

/// The dtype the reference computes in: F32 for half-precision cases, else the case's own.
pub fn reference_dtype(d: DType) -> DType {
    if is_half(d) {
        DType::F32
    } else {
        d
    }
}

/// The weights an output is multiplied by before the sum: N(0, 1) rounded to the device
/// output's dtype, so the reference sees the same values.
fn weights(seed: u64, i: usize, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let mut g = Generator::new(seed ^ (0x9e37_79b9 + i as u64));
    Tensor::randn(shape, DType::F32, Some(&mut g))?.to_dtype(dtype)
}

/// Half precision: the allowed error as a fraction of the reference's standard deviation...
const SPREAD: f64 = 2e-2;
/// ...plus this fraction of each element's magnitude: two to four units in its last place
/// (BF16 keeps 8 significant bits, F16 11).
const HALF_ULPS_BF16: f64 = 4.0 / 256.0;
const HALF_ULPS_F16: f64 = 4.0 / 2048.0;

/// Compares two read-backs under the case dtype's rule; `Err` describes a failure, `Ok` gives
/// the worst element's error as a fraction of what is allowed (for the report).
fn compare(
    case_dtype: DType,
    got: &Read,
    want: &Read,
    k: usize,
    slack: f64,
) -> std::result::Result<f64, String> {
    if got.shape != want.shape {
        return Err(format!("shape {:?}, want {:?}", got.shape, want.shape));
    }
    let dtype_ok = got.dtype == want.dtype
        || (is_half(case_dtype) && want.dtype == DType::F32 && got.dtype == case_dtype);
    if !dtype_ok {
        return Err(format!("dtype {}, want {}", got.dtype, want.dtype));
    }
    let (g, w) = (&got.values, &want.values);
    for (i, (&a, &b)) in g.iter().zip(w).enumerate() {
        let same = if b.is_nan() {
            a.is_nan()
        } else {
            !b.is_finite() && a == b
        };
        if !b.is_finite() && !same {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
        if b.is_finite() && !a.is_finite() {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
    }
    let finite: Vec<(usize, f64, f64)> = g
        .iter()
        .zip(w)
        .enumerate()
        .filter(|(_, (_, b))| b.is_finite())
        .map(|(i, (&a, &b))| (i, a, b))
        .collect();
    if !want.dtype.is_float() || !got.dtype.is_float() {
        if let Some(&(i, a, b)) = finite.iter().find(|(_, a, b)| a != b) {
            let wrong = finite.iter().filter(|(_, a, b)| a != b).count();
            return Err(format!(
                "{wrong} of {} elements differ (exact compare); first at {i}: got {a}, want {b}",
                g.len()
            ));
        }
        return Ok(0.0);
    }
    if finite.is_empty() {
        return Ok(0.0);
    }
    if is_half(case_dtype) {
        let n = finite.len() as f64;
        let mean = finite.iter().map(|x| x.2).sum::<f64>() / n;
        let var = finite.iter().map(|x| (x.2 - mean).powi(2)).sum::<f64>() / n;
        let rms = (finite.iter().map(|x| x.2 * x.2).sum::<f64>() / n).sqrt();
        // One or two values, or a constant tensor, have no spread to measure against.
        let denom = if finite.len() >= 4 && var.sqrt() > 1e-3 * rms {
            var.sqrt()
        } else if rms > 0.0 {
            rms
        } else {
            1.0
        };
        // The spread term is the plain max |Δ| / std rule; the element term allows a few
        // roundings of each value, since every op of a half-precision chain rounds its result
        // (a log_softmax of 4097 classes is about -8.3, where one BF16 step is 0.0625 but the
        // spread is 1).
        let per_element = if case_dtype == DType::BF16 {
            HALF_ULPS_BF16
        } else {
            HALF_ULPS_F16
        };
        let mut worst = (0.0f64, finite[0]);
        for &(i, a, b) in &finite {
            let ratio = (a - b).abs() / (slack * (SPREAD * denom + per_element * b.abs()));
            if ratio > worst.0 {
                worst = (ratio, (i, a, b));
            }
        }
        let (ratio, (i, a, b)) = worst;
        let detail = format!(
            "|Δ| {:.3e} at {i} (got {a}, want {b}) is {:.0}% of the allowed {slack} x ({SPREAD:e} x spread {denom:.3e} + {per_element:e} x |want|) (max |Δ| / spread is {:.3e})",
            (a - b).abs(),
            ratio * 100.0,
            finite.iter().map(|x| (x.1 - x.2).abs()).fold(0.0, f64::max) / denom,
        );
        if ratio.is_nan() || ratio > 1.0 {
            return Err(detail);
        }
        return Ok(ratio);
    }
    let (rel, abs) = if want.dtype == DType::F64 && got.dtype == DType::F64 {
        (1e-9, 1e-12)
    } else {
        (1e-4, 1e-6)
    };
    let scale = finite.iter().map(|x| x.2.abs()).fold(0.0, f64::max);
    let abs_term = abs * (k as f64).sqrt() * scale;
    let mut worst = (
        0.0f64,
        finite[0].0,
        finite[0].1,
        finite[0].2,
        rel * finite[0].2.abs() + abs_term,
    );
    for &(i, a, b) in &finite {
        let allowed = rel * b.abs() + abs_term;
        let err = (a - b).abs();
        let ratio = if err == 0.0 {
            0.0
        } else if allowed > 0.0 {
            err / allowed
        } else {
            f64::INFINITY
        };
        if ratio > worst.0 {
            worst = (ratio, i, a, b, allowed);
        }
    }
    let (ratio, i, a, b, allowed) = worst;
    let detail = format!(
        "max error {:.3e} at {i} (got {a}, want {b}), allowed {allowed:.3e} ({rel:e} relative + {abs:e} sqrt(k={k}) scale {scale:.3e})",
        (a - b).abs()
    );
    if ratio > 1.0 {
        return Err(detail);
    }
    Ok(ratio)
}

/// The outcome of one op, case and dtype.
pub enum Outcome {
    /// Passed; the worst error as a fraction of the allowed one.
    Pass(f64),
    /// The reference itself errors (the dtype is not supported by the op): nothing to compare.
    ReferenceError(String),
    Fail(String),
}

/// Runs one case of `op` in `dtype` on `device` and on the CPU reference, and compares.
pub fn check(op: &OpInfo, case: &Case, dtype: DType, device: Device) -> Outcome {
    let what = format!(
        "{} {dtype} {} (inputs: {})",
        op.name,
        case.label,
        case.inputs
            .iter()
            .map(|i| i.describe(dtype))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let seed = seed_of(&[op.name, &case.label]);
    let built: Result<Vec<Tensor>> = case
        .inputs
        .iter()
        .enumerate()
        .map(|(j, i)| stored(i, dtype, seed.wrapping_add(j as u64)))
        .collect();
    let inputs = match built {
        Ok(v) => v,
        Err(e) => return Outcome::Fail(format!("{what}: building the inputs failed: {e}")),
    };
    let wants: Vec<bool> = case
        .inputs
        .iter()
        .zip(&inputs)
        .map(|(i, t)| i.grad && op.differentiable && t.dtype().is_float())
        .collect();
    let ref_dtype = reference_dtype(dtype);
    let ref_inputs: Result<Vec<Tensor>> = inputs
        .iter()
        .zip(&case.inputs)
        .map(|(t, i)| match i.source {
            Source::Value { .. } if t.dtype() != ref_dtype => t.to_dtype(ref_dtype),
            _ => Ok(t.clone()),
        })
        .collect();
    let ref_inputs = match ref_inputs {
        Ok(v) => v,
        Err(e) => {
            return Outcome::Fail(format!("{what}: casting the reference inputs failed: {e}"))
        }
    };

    // The device first: its output dtypes fix the weights both sides use.
    let out_dtypes = std::cell::RefCell::new(Vec::new());
    let dev_weight = |i: usize, out: &Tensor| -> Result<Tensor> {
        let mut d = out_dtypes.borrow_mut();
        if d.len() <= i {
            d.resize(i + 1, out.dtype());
        }
        d[i] = out.dtype();
        weights(seed, i, out.shape(), out.dtype())?.to_device(out.device())
    };
    let dev = execute(case, &inputs, &wants, device, &dev_weight);
    let ref_weight = |i: usize, out: &Tensor| -> Result<Tensor> {
        let d = out_dtypes.borrow().get(i).copied().unwrap_or(out.dtype());
        weights(seed, i, out.shape(), d)?.to_dtype(out.dtype())
    };
    let reference = execute(case, &ref_inputs, &wants, Device::Cpu, &ref_weight);
    let (dev, reference) = match (dev, reference) {
        (_, Err(e)) => return Outcome::ReferenceError(format!("{what}: {e}")),
        (Err(e), Ok(_)) => return Outcome::Fail(format!("{what}: failed on {device}: {e}")),
        (Ok(d), Ok(r)) => (d, r),
    };
    if dev.outs.len() != reference.outs.len() {
        return Outcome::Fail(format!(
            "{what}: {} outputs on {device}, {} on the CPU",
            dev.outs.len(),
            reference.outs.len()
        ));
    }
    let mut worst = 0.0f64;
    for (i, (g, w)) in dev.outs.iter().zip(&reference.outs).enumerate() {
        if g.device != device {
            return Outcome::Fail(format!(
                "{what}: output {i} came back on {}, not {device}",
                g.device
            ));
        }
        match compare(dtype, g, w, case.k, case.half_slack) {
            Ok(r) => worst = worst.max(r),
            Err(e) => {
                return Outcome::Fail(format!(
                    "{what}: output {i} ({} {:?}): {e}",
                    g.dtype, g.shape
                ))
            }
        }
    }
    let out_numel: usize = reference.outs.iter().map(|o| o.values.len()).sum();
    for (j, (g, w)) in dev.grads.iter().zip(&reference.grads).enumerate() {
        let (g, w) = match (g, w) {
            (None, None) => continue,
            (Some(g), Some(w)) => (g, w),
            (g, _) => {
                return Outcome::Fail(format!(
                    "{what}: input {j} has a gradient on {} but not on {}",
                    if g.is_some() { device } else { Device::Cpu },
                    if g.is_some() { Device::Cpu } else { device },
                ))
            }
        };
        if g.device != device {
            return Outcome::Fail(format!(
                "{what}: the gradient of input {j} came back on {}, not {device}",
                g.device
            ));
        }
        let k = case
            .grad_k
            .unwrap_or_else(|| case.k.max(out_numel.div_ceil(w.values.len().max(1))));
        match compare(dtype, g, w, k, case.half_slack) {
            Ok(r) => worst = worst.max(r),
            Err(e) => {
                return Outcome::Fail(format!(
                    "{what}: gradient of input {j} ({} {:?}): {e}",
                    g.dtype, g.shape
                ))
            }
        }
    }
    Outcome::Pass(worst)
}
