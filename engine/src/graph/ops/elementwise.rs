//! Elementwise operators: activations, arithmetic with NumPy broadcasting, comparisons, logic,
//! Where, Clip and Cast.

use super::{one, OpFn};
use crate::graph::node::{colocate, input_pair, Node};
use crate::io::onnx::onnx_dtype;
use crate::{DType, Result, Tensor};

pub const OPS: &[(&str, OpFn)] = &[
    ("Identity", |n| one(n.input(0)?.clone())),
    ("Relu", |n| unary(n, Tensor::relu)),
    ("Sigmoid", |n| unary(n, Tensor::sigmoid)),
    ("Tanh", |n| unary(n, Tensor::tanh)),
    ("Exp", |n| unary(n, Tensor::exp)),
    ("Log", |n| unary(n, Tensor::log)),
    ("Sqrt", |n| unary(n, Tensor::sqrt)),
    ("Neg", |n| unary(n, Tensor::neg)),
    ("Abs", |n| unary(n, Tensor::abs)),
    ("Sign", |n| unary(n, Tensor::sign)),
    ("Erf", |n| unary(n, Tensor::erf)),
    ("Sin", |n| unary(n, Tensor::sin)),
    ("Cos", |n| unary(n, Tensor::cos)),
    ("Floor", |n| unary(n, Tensor::floor)),
    ("Ceil", |n| unary(n, Tensor::ceil)),
    ("Round", |n| unary(n, Tensor::round)),
    ("Softplus", |n| unary(n, Tensor::softplus)),
    ("Mish", |n| unary(n, Tensor::mish)),
    ("Reciprocal", |n| unary(n, |x| x.pow_scalar(-1.0))),
    ("Softsign", |n| unary(n, Tensor::softsign)),
    ("Gelu", gelu),
    ("HardSigmoid", |n| {
        let (alpha, beta) = (n.float("alpha", 0.2)?, n.float("beta", 0.5)?);
        unary(n, |x| hard_sigmoid(x, alpha.into(), beta.into()))
    }),
    ("HardSwish", |n| unary(n, Tensor::hardswish)),
    ("LeakyRelu", |n| {
        let alpha = f64::from(n.float("alpha", 0.01)?);
        unary(n, |x| x.leaky_relu(alpha))
    }),
    ("Elu", |n| {
        let alpha = f64::from(n.float("alpha", 1.0)?);
        unary(n, |x| x.elu(alpha))
    }),
    ("Celu", |n| {
        let alpha = f64::from(n.float("alpha", 1.0)?);
        unary(n, |x| x.celu(alpha))
    }),
    ("Selu", |n| {
        let alpha = f64::from(n.float("alpha", 1.673_263_2)?);
        let gamma = f64::from(n.float("gamma", 1.050_701)?);
        unary(n, |x| x.elu(alpha)?.mul_scalar(gamma))
    }),
    ("PRelu", |n| {
        let [x, slope] = input_pair(n)?;
        one(Tensor::where_cond(&x.lt_scalar(0.0)?, &x.mul(&slope)?, &x)?)
    }),
    ("Dropout", dropout),
    ("ThresholdedRelu", |n| {
        let alpha = f64::from(n.float("alpha", 1.0)?);
        unary(n, |x| {
            Tensor::where_cond(&x.gt_scalar(alpha)?, x, &Tensor::zeros_like(x)?)
        })
    }),
    ("IsNaN", |n| unary(n, |x| x.ne(x))),
    ("IsInf", |n| {
        let (neg, pos) = (
            n.int("detect_negative", 1)? != 0,
            n.int("detect_positive", 1)? != 0,
        );
        unary(n, |x| {
            let p = x
                .eq_scalar(f64::INFINITY)?
                .logical_and(&Tensor::scalar(if pos { 1.0 } else { 0.0 }, DType::Bool)?)?;
            let m = x
                .eq_scalar(f64::NEG_INFINITY)?
                .logical_and(&Tensor::scalar(if neg { 1.0 } else { 0.0 }, DType::Bool)?)?;
            p.logical_not()?
                .logical_and(&m.logical_not()?)?
                .logical_not()
        })
    }),
    ("Atan", |n| unary(n, Tensor::atan)),
    ("Tan", |n| unary(n, |x| x.sin()?.div(&x.cos()?))),
    ("Mod", |n| {
        let fmod = n.int("fmod", 0)? != 0;
        binary(n, |a, b| modulo(a, b, fmod))
    }),
    ("Add", |n| binary(n, Tensor::add)),
    ("Sub", |n| binary(n, Tensor::sub)),
    ("Mul", |n| binary(n, Tensor::mul)),
    ("Div", |n| binary(n, divide)),
    ("Pow", pow),
    ("Equal", |n| binary(n, Tensor::eq)),
    ("Less", |n| binary(n, Tensor::lt)),
    ("LessOrEqual", |n| binary(n, Tensor::le)),
    ("Greater", |n| binary(n, Tensor::gt)),
    ("GreaterOrEqual", |n| binary(n, Tensor::ge)),
    ("And", |n| binary(n, Tensor::logical_and)),
    ("Or", |n| {
        binary(n, |a, b| {
            a.logical_not()?
                .logical_and(&b.logical_not()?)?
                .logical_not()
        })
    }),
    ("Xor", |n| {
        binary(n, |a, b| {
            a.to_dtype(DType::Bool)?.ne(&b.to_dtype(DType::Bool)?)
        })
    }),
    ("Not", |n| unary(n, Tensor::logical_not)),
    ("Max", |n| variadic(n, Tensor::maximum)),
    ("Min", |n| variadic(n, Tensor::minimum)),
    ("Sum", |n| variadic(n, Tensor::add)),
    ("Mean", |n| {
        let count = n.inputs.len() as f64;
        one(variadic(n, Tensor::add)?.remove(0).div_scalar(count)?)
    }),
    ("Where", |n| {
        let t = colocate(&n.all_inputs()?)?;
        if t.len() != 3 {
            return Err(n.error("needs condition, X and Y"));
        }
        one(Tensor::where_cond(&t[0], &t[1], &t[2])?)
    }),
    ("Clip", clip),
    ("Cast", |n| {
        let to = n.int("to", 0)?;
        let dtype = onnx_dtype(to as i32)
            .ok_or_else(|| n.error(format!("cast to ONNX data type {to} is not supported")))?;
        one(n.input(0)?.to_dtype(dtype)?)
    }),
    ("CastLike", |n| {
        one(n.input(0)?.to_dtype(n.input(1)?.dtype())?)
    }),
];

fn unary(n: &Node, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Vec<Tensor>> {
    one(f(n.input(0)?)?)
}

fn binary(n: &Node, f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>) -> Result<Vec<Tensor>> {
    let [a, b] = input_pair(n)?;
    one(f(&a, &b)?)
}

/// Max, Min, Sum: a fold over every input, with broadcasting.
fn variadic(n: &Node, f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>) -> Result<Vec<Tensor>> {
    let inputs = colocate(&n.all_inputs()?)?;
    let (first, rest) = inputs
        .split_first()
        .ok_or_else(|| n.error("needs at least one input"))?;
    one(rest.iter().try_fold(first.clone(), |acc, t| f(&acc, t))?)
}

/// max(0, min(1, alpha x + beta)).
fn hard_sigmoid(x: &Tensor, alpha: f64, beta: f64) -> Result<Tensor> {
    x.affine(alpha, beta)?.clamp(0.0, 1.0)
}

fn gelu(n: &Node) -> Result<Vec<Tensor>> {
    match n.string("approximate", "none")?.as_str() {
        "none" => unary(n, Tensor::gelu),
        "tanh" => unary(n, Tensor::gelu_tanh),
        other => Err(n.error(format!("approximate = `{other}` is not a GELU form"))),
    }
}

/// In inference Dropout passes its input on; the mask output, when asked for, is all true.
fn dropout(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?.clone();
    if n.opt_input(2).is_some() {
        let training = n.host_ints(2)?;
        n.require(training.iter().all(|&t| t == 0), "training_mode = true")?;
    }
    let mut out = vec![x.clone()];
    if n.def.outputs.len() > 1 {
        out.push(Tensor::full(1.0, x.shape(), DType::Bool, x.device())?);
    }
    Ok(out)
}

/// a mod b in a's type: with `fmod` the remainder takes a's sign (C's fmod), else b's (Python's
/// %), as ONNX's Mod defines both.
fn modulo(a: &Tensor, b: &Tensor, fmod: bool) -> Result<Tensor> {
    let (x, y) = (a.to_dtype(DType::F64)?, b.to_dtype(DType::F64)?);
    let q = x.div(&y)?;
    let whole = if fmod { truncate(&q)? } else { q.floor()? };
    x.sub(&whole.mul(&y)?)?.to_dtype(a.dtype())
}

/// Division; between integers it truncates toward zero, as in C (the engine's `div` is true
/// division, as torch's).
fn divide(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.dtype().is_float() || b.dtype().is_float() {
        return a.div(b);
    }
    let q = a.to_dtype(DType::F64)?.div(&b.to_dtype(DType::F64)?)?;
    truncate(&q)?.to_dtype(a.dtype())
}

/// Rounding toward zero (C's integer division and fmod).
fn truncate(q: &Tensor) -> Result<Tensor> {
    Tensor::where_cond(&q.lt_scalar(0.0)?, &q.ceil()?, &q.floor()?)
}

/// x^y, in x's type: a power by one number runs as one op, a tensor of exponents as
/// exp(y log x). Integer powers are computed in f64 and rounded.
fn pow(n: &Node) -> Result<Vec<Tensor>> {
    let [x, y] = input_pair(n)?;
    let base = if x.dtype().is_float() {
        x.clone()
    } else {
        x.to_dtype(DType::F64)?
    };
    // A 1-element y of rank at most x's broadcasts without adding dims: one scalar power.
    let out = if y.numel() == 1 && y.rank() <= x.rank() {
        base.pow_scalar(y.to_vec_f64()?[0])?
    } else {
        y.to_dtype(base.dtype())?.mul(&base.log()?)?.exp()?
    };
    one(if x.dtype().is_float() {
        out.to_dtype(x.dtype())?
    } else {
        out.round()?.to_dtype(x.dtype())?
    })
}

/// Clip: bounds as attributes before opset 11, as optional inputs after.
fn clip(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let (lo, hi) = if n.opset < 11 {
        (
            f64::from(n.float("min", f32::MIN)?),
            f64::from(n.float("max", f32::MAX)?),
        )
    } else {
        let bound = |i: usize, default: f64| -> Result<f64> {
            Ok(n.host_floats(i)?
                .and_then(|v| v.first().copied())
                .unwrap_or(default))
        };
        (bound(1, f64::NEG_INFINITY)?, bound(2, f64::INFINITY)?)
    };
    one(x.clamp(lo, hi)?)
}
