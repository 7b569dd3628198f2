//! The unary elementwise ops, each defined once. One line of the table below gives an op's
//! enum variant (with its scalar parameters), its name, whether it keeps integer inputs
//! integer, its value and its derivative for the CPU (generic over `Real`), and the same two
//! as CUDA C expressions. From that line come the enum, `name()`, `keeps_int()`, the CPU
//! bodies, the op code the CUDA kernel switches on (the line's position) and the kernel's
//! `case` for it (`cuda_cases`, prepended to kernels/elementwise.cu), so no op code is kept
//! by hand anywhere.
//!
//! The derivative is written in terms of x and y = f(x), whichever is cheaper; the backward
//! of every unary op is then one elementwise pass g * f'(x, y). CUDA expressions see `x`,
//! `y`, the parameters under their names, and the type `C` (float for F32/BF16/F16, double
//! otherwise); the helpers they call (`sigmoid_c`, `gelu_c`...) live in kernels/elementwise.cu.

use super::real::Real;

/// One op's CUDA C: its value and its derivative, with the parameter names both use.
#[derive(Clone, Copy, Debug)]
pub struct UnaryCuda {
    pub name: &'static str,
    pub params: &'static [&'static str],
    pub value: &'static str,
    pub derivative: &'static str,
}

macro_rules! unary_ops {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident $(($($p:ident),+))? = $name:literal $(, $int:ident)? {
            value: |$x:ident| $f:expr,
            derivative: |$dx:ident, $dy:ident| $df:expr,
            cuda: $cf:literal, $cdf:literal $(,)?
        }
    )*) => {
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum UnaryOp {
            $( $(#[doc = $doc])* $variant $(($(unary_ops!(@f64 $p)),+))? ),*
        }

        /// The op codes: a variant's position in the table.
        #[allow(clippy::upper_case_acronyms)]
        #[repr(usize)]
        enum Code { $($variant),* }

        impl UnaryOp {
            /// Every op's CUDA C, indexed by op code.
            pub const CUDA: &'static [UnaryCuda] = &[ $( UnaryCuda {
                name: $name,
                params: &[$($(stringify!($p)),+)?],
                value: $cf,
                derivative: $cdf,
            } ),* ];

            pub fn name(self) -> &'static str {
                match self { $( Self::$variant { .. } => $name ),* }
            }

            /// Ops that keep integer inputs integer (the rest compute in float).
            pub fn keeps_int(self) -> bool {
                match self { $( Self::$variant { .. } => unary_ops!(@int $($int)?) ),* }
            }

            /// The code the CUDA kernel switches on.
            pub fn code(self) -> usize {
                match self { $( Self::$variant { .. } => Code::$variant as usize ),* }
            }

            /// The scalar parameters (unused ones are 0).
            pub fn params(self) -> [f64; 2] {
                match self { $( Self::$variant $(($($p),+))? => unary_ops!(@params $($($p),+)?) ),* }
            }

            #[inline(always)]
            pub fn eval<R: Real>(self, x: R) -> R {
                match self { $( Self::$variant $(($($p),+))? => {
                    $($( let $p: R = R::c($p); let _ = $p; )+)?
                    let $x = x;
                    $f
                } ),* }
            }

            /// f'(x), given x and y = f(x).
            #[inline(always)]
            pub fn derivative<R: Real>(self, x: R, y: R) -> R {
                match self { $( Self::$variant $(($($p),+))? => {
                    $($( let $p: R = R::c($p); let _ = $p; )+)?
                    let ($dx, $dy) = (x, y);
                    $df
                } ),* }
            }

            /// The op of `code` with `params`: with a constant code (see `Fixed`) this folds
            /// to one variant.
            #[inline(always)]
            fn from_code(code: usize, params: [f64; 2]) -> Self {
                $( if code == Code::$variant as usize {
                    return unary_ops!(@build $variant, params, [$($($p),+)?]);
                } )*
                unreachable!("unary op code {code} is out of the table")
            }

            /// Calls `visitor` with this op as a `Fixed`, whose kind is a compile-time
            /// constant, so a loop written once is compiled once per kind and vectorizes.
            #[inline(always)]
            pub fn specialize<V: UnaryVisitor>(self, visitor: V) -> V::Output {
                let params = self.params();
                match self { $( Self::$variant { .. } => {
                    visitor.visit(Fixed::<{ Code::$variant as usize }> { params })
                } ),* }
            }
        }
    };
    (@f64 $p:ident) => { f64 };
    (@int int) => { true };
    (@int) => { false };
    (@params) => { [0.0, 0.0] };
    (@params $a:ident) => { [$a, 0.0] };
    (@params $a:ident, $b:ident) => { [$a, $b] };
    (@build $v:ident, $ps:ident, []) => { Self::$v };
    (@build $v:ident, $ps:ident, [$a:ident]) => { Self::$v($ps[0]) };
    (@build $v:ident, $ps:ident, [$a:ident, $b:ident]) => { Self::$v($ps[0], $ps[1]) };
}

/// A unary op whose kind is the constant `CODE`.
#[derive(Clone, Copy, Debug)]
pub struct Fixed<const CODE: usize> {
    params: [f64; 2],
}

impl<const CODE: usize> Fixed<CODE> {
    #[inline(always)]
    pub fn op(self) -> UnaryOp {
        UnaryOp::from_code(CODE, self.params)
    }
}

/// A loop over elements, generic over the op kind it applies (see `UnaryOp::specialize`).
pub trait UnaryVisitor {
    type Output;
    fn visit<const CODE: usize>(self, op: Fixed<CODE>) -> Self::Output;
}

const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_TANH_C: f64 = 0.044_715;
/// Above this softplus returns x itself, as torch.nn.functional.softplus (threshold 20).
const SOFTPLUS_THRESHOLD: f64 = 20.0;

unary_ops! {
    Neg = "neg", int {
        value: |x| -x,
        derivative: |_x, _y| R::c(-1.0),
        cuda: "-x", "(C)-1",
    }
    Abs = "abs", int {
        value: |x| x.abs(),
        derivative: |x, _y| sign(x),
        cuda: "x < (C)0 ? -x : x", "sign_c(x)",
    }
    Exp = "exp" {
        value: |x| x.exp(),
        derivative: |_x, y| y,
        cuda: "rb_exp(x)", "y",
    }
    Log = "log" {
        value: |x| x.ln(),
        derivative: |x, _y| R::c(1.0) / x,
        cuda: "log(x)", "(C)1 / x",
    }
    Sqrt = "sqrt" {
        value: |x| x.sqrt(),
        derivative: |_x, y| R::c(0.5) / y,
        cuda: "sqrt(x)", "(C)0.5 / y",
    }
    Rsqrt = "rsqrt" {
        value: |x| R::c(1.0) / x.sqrt(),
        derivative: |_x, y| R::c(-0.5) * y * y * y,
        cuda: "(C)1 / sqrt(x)", "(C)-0.5 * y * y * y",
    }
    Sin = "sin" {
        value: |x| x.sin(),
        derivative: |x, _y| x.cos(),
        cuda: "sin(x)", "cos(x)",
    }
    Cos = "cos" {
        value: |x| x.cos(),
        derivative: |x, _y| -x.sin(),
        cuda: "cos(x)", "-sin(x)",
    }
    /// The arctangent, in (-pi/2, pi/2) (CIoU's aspect-ratio term).
    Atan = "atan" {
        value: |x| x.atan(),
        derivative: |x, _y| R::c(1.0) / (R::c(1.0) + x * x),
        cuda: "atan(x)", "(C)1 / ((C)1 + x * x)",
    }
    Tanh = "tanh" {
        value: |x| x.tanh(),
        derivative: |_x, y| R::c(1.0) - y * y,
        cuda: "tanh(x)", "(C)1 - y * y",
    }
    Sigmoid = "sigmoid" {
        value: |x| sigmoid(x),
        derivative: |_x, y| y * (R::c(1.0) - y),
        cuda: "sigmoid_c(x)", "y * ((C)1 - y)",
    }
    /// max(x, 0), written as a select so that it vectorizes (NaN stays NaN).
    Relu = "relu", int {
        value: |x| if x < R::c(0.0) { R::c(0.0) } else { x },
        derivative: |x, _y| if x > R::c(0.0) { R::c(1.0) } else { R::c(0.0) },
        cuda: "x < (C)0 ? (C)0 : x", "x > (C)0 ? (C)1 : (C)0",
    }
    /// Exact GELU (erf form).
    Gelu = "gelu" {
        value: |x| R::c(0.5) * x * (R::c(1.0) + (x * R::c(std::f64::consts::FRAC_1_SQRT_2)).erf()),
        derivative: |x, _y| gelu_derivative(x),
        cuda: "gelu_c(x)", "gelu_derivative_c(x)",
    }
    /// GELU with the tanh approximation.
    GeluTanh = "gelu_tanh" {
        value: |x| R::c(0.5) * x * (R::c(1.0) + gelu_tanh_inner(x).tanh()),
        derivative: |x, _y| gelu_tanh_derivative(x),
        cuda: "gelu_tanh_c(x)", "gelu_tanh_derivative_c(x)",
    }
    /// x * sigmoid(1.702 x): CLIP's quick GELU, one pass instead of three.
    QuickGelu = "quick_gelu" {
        value: |x| x * sigmoid(R::c(QUICK_GELU_K) * x),
        derivative: |x, _y| {
            let s = sigmoid(R::c(QUICK_GELU_K) * x);
            s + R::c(QUICK_GELU_K) * x * s * (R::c(1.0) - s)
        },
        cuda: "x * sigmoid_c((C)1.702 * x)", "quick_gelu_derivative_c(x)",
    }
    /// x * sigmoid(x) (swish).
    Silu = "silu" {
        value: |x| x * sigmoid(x),
        derivative: |x, _y| {
            let s = sigmoid(x);
            s * (R::c(1.0) + x * (R::c(1.0) - s))
        },
        cuda: "x * sigmoid_c(x)", "silu_derivative_c(x)",
    }
    Sign = "sign", int {
        value: |x| sign(x),
        derivative: |_x, _y| R::c(0.0),
        cuda: "sign_c(x)", "(C)0",
    }
    /// log(1 + exp(x)), and x itself above 20 (torch's default threshold).
    Softplus = "softplus" {
        value: |x| softplus(x),
        derivative: |x, _y| {
            if x > R::c(SOFTPLUS_THRESHOLD) { R::c(1.0) } else { sigmoid(x) }
        },
        cuda: "softplus_c(x)", "x > (C)20 ? (C)1 : sigmoid_c(x)",
    }
    /// x * tanh(softplus(x)).
    Mish = "mish" {
        value: |x| x * softplus(x).tanh(),
        derivative: |x, _y| {
            let t = softplus(x).tanh();
            t + x * sigmoid(x) * (R::c(1.0) - t * t)
        },
        cuda: "x * tanh(softplus_c(x))", "mish_derivative_c(x)",
    }
    /// The error function (ONNX's Erf; exported GELUs are built from it).
    Erf = "erf" {
        value: |x| x.erf(),
        derivative: |x, _y| R::c(2.0 * FRAC_1_SQRT_2PI * std::f64::consts::SQRT_2) * (-(x * x)).exp(),
        cuda: "erf(x)", "(C)1.1283791670955126 * exp(-x * x)",
    }
    /// Rounds down; its gradient is zero (as torch's).
    Floor = "floor" {
        value: |x| x.floor(),
        derivative: |_x, _y| R::c(0.0),
        cuda: "floor(x)", "(C)0",
    }
    /// Rounds up; its gradient is zero.
    Ceil = "ceil" {
        value: |x| x.ceil(),
        derivative: |_x, _y| R::c(0.0),
        cuda: "ceil(x)", "(C)0",
    }
    /// The nearest integer, halves to even (torch.round, ONNX's Round); its gradient is zero.
    Round = "round" {
        value: |x| x.round_even(),
        derivative: |_x, _y| R::c(0.0),
        cuda: "rint(x)", "(C)0",
    }
    /// x^e for a scalar exponent.
    Pow(e) = "pow" {
        value: |x| x.powf(e),
        derivative: |x, _y| e * x.powf(e - R::c(1.0)),
        cuda: "pow(x, e)", "e * pow(x, e - (C)1)",
    }
    /// x limited to [lo, hi]; NaN stays NaN. The gradient passes where lo <= x <= hi.
    Clamp(lo, hi) = "clamp", int {
        value: |x| if x.is_nan() { x } else { x.max(lo).min(hi) },
        derivative: |x, _y| if x >= lo && x <= hi { R::c(1.0) } else { R::c(0.0) },
        cuda: "x != x ? x : fmin(fmax(x, lo), hi)", "(x >= lo && x <= hi) ? (C)1 : (C)0",
    }
    /// x * mul + add: scalar arithmetic without a broadcast.
    Affine(mul, add) = "affine", int {
        value: |x| x * mul + add,
        derivative: |_x, _y| mul,
        cuda: "x * mul + add", "mul",
    }
    /// x, and slope · x below 0 (torch's leaky_relu; the gradient at 0 is the slope's).
    LeakyRelu(slope) = "leaky_relu" {
        value: |x| if x > R::c(0.0) { x } else { x * slope },
        derivative: |x, _y| if x > R::c(0.0) { R::c(1.0) } else { slope },
        cuda: "x > (C)0 ? x : x * slope", "x > (C)0 ? (C)1 : slope",
    }
    /// x, and alpha · (e^x - 1) at or below 0 (torch's elu).
    Elu(alpha) = "elu" {
        value: |x| if x > R::c(0.0) { x } else { alpha * x.exp_m1() },
        // From x, as torch's: y + alpha loses the value in BF16 where y is near -alpha.
        derivative: |x, _y| if x > R::c(0.0) { R::c(1.0) } else { alpha * x.exp() },
        cuda: "x > (C)0 ? x : alpha * expm1(x)", "x > (C)0 ? (C)1 : alpha * rb_exp(x)",
    }
    /// SELU: scale · elu(x, alpha) with the self-normalising constants.
    Selu = "selu" {
        value: |x| {
            R::c(SELU_SCALE) * if x > R::c(0.0) { x } else { R::c(SELU_ALPHA) * x.exp_m1() }
        },
        derivative: |x, _y| {
            if x > R::c(0.0) { R::c(SELU_SCALE) } else { R::c(SELU_SCALE * SELU_ALPHA) * x.exp() }
        },
        cuda: "x > (C)0 ? (C)1.0507009873554805 * x : (C)1.7580993408473766 * expm1(x)",
        "x > (C)0 ? (C)1.0507009873554805 : (C)1.7580993408473766 * rb_exp(x)",
    }
    /// max(0, x) + min(0, alpha · (e^(x/alpha) - 1)) (torch's celu).
    Celu(alpha) = "celu" {
        value: |x| if x > R::c(0.0) { x } else { alpha * (x / alpha).exp_m1() },
        derivative: |x, _y| if x > R::c(0.0) { R::c(1.0) } else { (x / alpha).exp() },
        cuda: "x > (C)0 ? x : alpha * expm1(x / alpha)", "x > (C)0 ? (C)1 : rb_exp(x / alpha)",
    }
    /// x limited to [lo, hi], whose gradient passes only strictly inside (torch's hardtanh,
    /// and relu6 as hardtanh(0, 6); `clamp` passes it at the bounds too).
    Hardtanh(lo, hi) = "hardtanh" {
        value: |x| if x.is_nan() { x } else { x.max(lo).min(hi) },
        // A NaN passes its gradient, as torch's (x <= lo || x >= hi) ? 0 : g.
        derivative: |x, _y| if x <= lo || x >= hi { R::c(0.0) } else { R::c(1.0) },
        cuda: "x != x ? x : fmin(fmax(x, lo), hi)", "(x <= lo || x >= hi) ? (C)0 : (C)1",
    }
    /// relu6(x + 3) / 6 (torch's hardsigmoid).
    Hardsigmoid = "hardsigmoid" {
        value: |x| (x / R::c(6.0) + R::c(0.5)).max(R::c(0.0)).min(R::c(1.0)),
        derivative: |x, _y| {
            if x > R::c(-3.0) && x < R::c(3.0) { R::c(1.0 / 6.0) } else { R::c(0.0) }
        },
        cuda: "x != x ? x : fmin(fmax(x / (C)6 + (C)0.5, (C)0), (C)1)",
        "(x > (C)-3 && x < (C)3) ? (C)1 / (C)6 : (C)0",
    }
    /// x · relu6(x + 3) / 6 (torch's hardswish; its gradient as torch's at the joints).
    Hardswish = "hardswish" {
        value: |x| x * (x / R::c(6.0) + R::c(0.5)).max(R::c(0.0)).min(R::c(1.0)),
        derivative: |x, _y| {
            if x < R::c(-3.0) {
                R::c(0.0)
            } else if x <= R::c(3.0) {
                x / R::c(3.0) + R::c(0.5)
            } else {
                R::c(1.0)
            }
        },
        cuda: "x * fmin(fmax(x / (C)6 + (C)0.5, (C)0), (C)1)",
        "x < (C)-3 ? (C)0 : (x <= (C)3 ? x / (C)3 + (C)0.5 : (C)1)",
    }
    /// x / (1 + |x|).
    Softsign = "softsign" {
        value: |x| x / (R::c(1.0) + x.abs()),
        derivative: |x, _y| {
            let d = R::c(1.0) + x.abs();
            R::c(1.0) / (d * d)
        },
        cuda: "x / ((C)1 + fabs(x))", "(C)1 / (((C)1 + fabs(x)) * ((C)1 + fabs(x)))",
    }
    /// log(sigmoid(x)), as min(x, 0) - log(1 + e^-|x|) so it stays finite.
    LogSigmoid = "log_sigmoid" {
        value: |x| x.min(R::c(0.0)) - (-x.abs()).exp().ln_1p(),
        derivative: |x, _y| sigmoid(-x),
        cuda: "fmin(x, (C)0) - log1p(rb_exp(-fabs(x)))", "sigmoid_c(-x)",
    }
}

/// SELU's constants (Klambauer et al. 2017, as torch writes them).
pub const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;
pub const SELU_SCALE: f64 = 1.050_700_987_355_480_5;

#[inline(always)]
fn sign<R: Real>(x: R) -> R {
    if x > R::c(0.0) {
        R::c(1.0)
    } else if x < R::c(0.0) {
        R::c(-1.0)
    } else {
        R::c(0.0)
    }
}

#[inline(always)]
pub fn sigmoid<R: Real>(x: R) -> R {
    // Two branches keep exp from overflowing for large |x|.
    let one = R::c(1.0);
    if x >= R::c(0.0) {
        one / (one + (-x).exp())
    } else {
        let e = x.exp();
        e / (one + e)
    }
}

#[inline(always)]
fn softplus<R: Real>(x: R) -> R {
    if x > R::c(SOFTPLUS_THRESHOLD) {
        x
    } else {
        x.exp().ln_1p()
    }
}

#[inline(always)]
fn gelu_derivative<R: Real>(x: R) -> R {
    let half = R::c(0.5);
    let cdf = half * (R::c(1.0) + (x * R::c(std::f64::consts::FRAC_1_SQRT_2)).erf());
    let pdf = (-(x * x) * half).exp() * R::c(FRAC_1_SQRT_2PI);
    cdf + x * pdf
}

/// The slope of CLIP's quick GELU, x * sigmoid(1.702 x).
pub const QUICK_GELU_K: f64 = 1.702;

#[inline(always)]
fn gelu_tanh_inner<R: Real>(x: R) -> R {
    R::c(SQRT_2_OVER_PI) * (x + R::c(GELU_TANH_C) * x * x * x)
}

#[inline(always)]
fn gelu_tanh_derivative<R: Real>(x: R) -> R {
    let (half, one) = (R::c(0.5), R::c(1.0));
    let t = gelu_tanh_inner(x).tanh();
    let dinner = R::c(SQRT_2_OVER_PI) * (one + R::c(3.0 * GELU_TANH_C) * x * x);
    half * (one + t) + half * x * (one - t * t) * dinner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_table_and_name_its_cuda_entry() {
        for (code, entry) in UnaryOp::CUDA.iter().enumerate() {
            let op = UnaryOp::from_code(code, [2.0, 3.0]);
            assert_eq!(op.code(), code);
            assert_eq!(op.name(), entry.name);
        }
    }

    #[test]
    fn specialize_hands_the_visitor_the_same_op() {
        struct Echo;
        impl UnaryVisitor for Echo {
            type Output = UnaryOp;
            fn visit<const CODE: usize>(self, op: Fixed<CODE>) -> UnaryOp {
                op.op()
            }
        }
        for op in [UnaryOp::Mish, UnaryOp::Clamp(-1.0, 2.5), UnaryOp::Pow(3.0)] {
            assert_eq!(op.specialize(Echo), op);
        }
    }

    #[test]
    fn derivatives_match_central_differences() {
        let ops = [
            UnaryOp::Exp,
            UnaryOp::Log,
            UnaryOp::Sqrt,
            UnaryOp::Rsqrt,
            UnaryOp::Sin,
            UnaryOp::Cos,
            UnaryOp::Atan,
            UnaryOp::Tanh,
            UnaryOp::Sigmoid,
            UnaryOp::Gelu,
            UnaryOp::GeluTanh,
            UnaryOp::QuickGelu,
            UnaryOp::Silu,
            UnaryOp::Softplus,
            UnaryOp::Mish,
            UnaryOp::Pow(2.5),
            UnaryOp::Erf,
            UnaryOp::Affine(-1.5, 2.0),
        ];
        for op in ops {
            for x in [0.3f64, 1.7, 4.0] {
                let h = 1e-6;
                let numeric = (op.eval(x + h) - op.eval(x - h)) / (2.0 * h);
                let analytic = op.derivative(x, op.eval(x));
                assert!(
                    (numeric - analytic).abs() < 1e-6 * (1.0 + analytic.abs()),
                    "{} at {x}: {analytic} vs {numeric}",
                    op.name()
                );
            }
        }
    }

    #[test]
    fn softplus_and_mish_match_their_formulas_and_stay_finite() {
        let x = 1.25f64;
        assert!((UnaryOp::Softplus.eval(x) - (1.0 + x.exp()).ln()).abs() < 1e-12);
        assert!((UnaryOp::Mish.eval(x) - x * (1.0 + x.exp()).ln().tanh()).abs() < 1e-12);
        assert_eq!(UnaryOp::Softplus.eval(50.0f32), 50.0);
        assert_eq!(UnaryOp::Mish.eval(100.0f32), 100.0);
        assert!(UnaryOp::Softplus.eval(-100.0f32) >= 0.0);
        assert!(UnaryOp::Mish.eval(-100.0f32).abs() < 1e-30);
    }
}
