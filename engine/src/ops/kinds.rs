//! The elementwise op kinds that every backend implements. Each kind's math is written once
//! here, generic over the compute type, and the CPU kernels call it directly.

use crate::backend::cpu::real::Real;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    GeluTanh,
    Silu,
    Sign,
    /// x^e for a scalar exponent.
    Pow(f64),
    Clamp(f64, f64),
    /// x * mul + add: scalar arithmetic without a broadcast.
    Affine(f64, f64),
    /// Derivatives used by backward passes; not user-facing ops.
    GeluGrad,
    GeluTanhGrad,
    SiluGrad,
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_TANH_C: f64 = 0.044_715;

impl UnaryOp {
    // Always inlined: the CPU loops call it with a constant op, and only once inlined does the
    // `match` fold to one arm so that the loop vectorizes. As a plain `#[inline]` LLVM judged
    // the whole match too big and called it out of line for every element.
    #[inline(always)]
    pub fn eval<R: Real>(self, x: R) -> R {
        let one = R::c(1.0);
        let half = R::c(0.5);
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => one / x.sqrt(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => sigmoid(x),
            UnaryOp::Relu => {
                if x > R::c(0.0) {
                    x
                } else {
                    R::c(0.0)
                }
            }
            UnaryOp::Gelu => half * x * (one + (x * R::c(std::f64::consts::FRAC_1_SQRT_2)).erf()),
            UnaryOp::GeluTanh => half * x * (one + gelu_tanh_inner(x).tanh()),
            UnaryOp::Silu => x * sigmoid(x),
            UnaryOp::Sign => {
                if x > R::c(0.0) {
                    one
                } else if x < R::c(0.0) {
                    -one
                } else {
                    R::c(0.0)
                }
            }
            UnaryOp::Pow(e) => x.powf(R::c(e)),
            UnaryOp::Clamp(lo, hi) => {
                if x.is_nan() {
                    x
                } else {
                    x.max(R::c(lo)).min(R::c(hi))
                }
            }
            UnaryOp::Affine(m, a) => x * R::c(m) + R::c(a),
            UnaryOp::GeluGrad => {
                let cdf = half * (one + (x * R::c(std::f64::consts::FRAC_1_SQRT_2)).erf());
                let pdf = (-(x * x) * half).exp() * R::c(0.398_942_280_401_432_7);
                cdf + x * pdf
            }
            UnaryOp::GeluTanhGrad => {
                let t = gelu_tanh_inner(x).tanh();
                let dinner = R::c(SQRT_2_OVER_PI) * (one + R::c(3.0 * GELU_TANH_C) * x * x);
                half * (one + t) + half * x * (one - t * t) * dinner
            }
            UnaryOp::SiluGrad => {
                let s = sigmoid(x);
                s * (one + x * (one - s))
            }
        }
    }

    /// Ops that keep integer inputs integer (the rest produce floats).
    pub fn keeps_int(self) -> bool {
        matches!(
            self,
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Sign | UnaryOp::Clamp(..)
        )
    }
}

#[inline]
fn sigmoid<R: Real>(x: R) -> R {
    // Two branches keep exp from overflowing for large |x|.
    let one = R::c(1.0);
    if x >= R::c(0.0) {
        one / (one + (-x).exp())
    } else {
        let e = x.exp();
        e / (one + e)
    }
}

#[inline]
fn gelu_tanh_inner<R: Real>(x: R) -> R {
    R::c(SQRT_2_OVER_PI) * (x + R::c(GELU_TANH_C) * x * x * x)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
}

impl BinaryOp {
    #[inline]
    pub fn eval<R: Real>(self, a: R, b: R) -> R {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Maximum => a.max(b),
            BinaryOp::Minimum => a.min(b),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    #[inline]
    pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    ArgMax,
    ArgMin,
}
