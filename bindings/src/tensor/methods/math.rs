//! Elementwise math (unary functions, powers, affine maps, clamping, SwiGLU) and the matrix
//! product.

use crate::convert;
use crate::error::guard;
use crate::help::Api;
use rhai::{Array, Dynamic};
use rusting_brain::Tensor;

pub fn register(api: &mut Api) {
    unary_methods! { api;
        "neg" => neg, "Elementwise negation.";
        "abs" => abs, "Elementwise absolute value.";
        "exp" => exp, "Elementwise e^x.";
        "log" => log, "Elementwise natural logarithm.";
        "sqrt" => sqrt, "Elementwise square root.";
        "rsqrt" => rsqrt, "Elementwise 1/sqrt(x).";
        "sin" => sin, "Elementwise sine.";
        "cos" => cos, "Elementwise cosine.";
        "atan" => atan, "Elementwise arctangent, in (-pi/2, pi/2).";
        "tanh" => tanh, "Elementwise tanh.";
        "sigmoid" => sigmoid, "Elementwise logistic sigmoid.";
        "relu" => relu, "Elementwise max(x, 0).";
        "gelu" => gelu, "Exact (erf) GELU.";
        "gelu_tanh" => gelu_tanh, "GELU with the tanh approximation.";
        "quick_gelu" => quick_gelu, "x * sigmoid(1.702 x) (CLIP's quick GELU).";
        "silu" => silu, "x * sigmoid(x) (swish).";
        "softplus" => softplus, "log(1 + exp(x)), and x itself above 20 (as torch's softplus).";
        "mish" => mish, "x * tanh(softplus(x)).";
        "selu" => selu, "SELU: 1.0507 * elu(x, 1.6733) (torch's selu).";
        "relu6" => relu6, "min(max(x, 0), 6) (torch's relu6).";
        "hardsigmoid" => hardsigmoid, "relu6(x + 3) / 6 (torch's hardsigmoid).";
        "hardswish" => hardswish, "x * relu6(x + 3) / 6 (torch's hardswish, MobileNetV3's activation).";
        "softsign" => softsign, "x / (1 + |x|).";
        "log_sigmoid" => log_sigmoid, "log(sigmoid(x)), finite for every x (torch's logsigmoid).";
        "sign" => sign, "-1, 0 or 1 by the sign of each element.";
        "erf" => erf, "The error function.";
        "floor" => floor, "Rounds down (zero gradient).";
        "ceil" => ceil, "Rounds up (zero gradient).";
        "round" => round, "Rounds to the nearest integer, halves to even as torch.round (zero gradient).";
        "square" => square, "Elementwise x^2.";
    }
    api.func(
        "swiglu",
        "gate.swiglu(up) -> Tensor",
        "silu(gate) * up (SwiGLU's gating), one fused op on CUDA.",
        "let g = randn([2, 4]); let u = randn([2, 4]); g.swiglu(u)",
        |g: &mut Tensor, u: Tensor| guard(|| g.swiglu(&u)),
    );
    api.func(
        "matmul",
        "a.matmul(b) -> Tensor",
        "Matrix product with batch broadcasting (1-D operands as in PyTorch).",
        "let x = randn([2, 3]); let w = randn([3, 4]); let y = x.matmul(w);",
        |a: &mut Tensor, b: Tensor| guard(|| a.matmul(&b)),
    );
    api.func(
        "grouped_matmul",
        "x.grouped_matmul(weights, offsets) -> Tensor",
        "Rows of x [M, K] in consecutive groups, group e (rows offsets[e] .. offsets[e + 1]) times weights[e]ᵀ (weights [E, N, K]): [M, N], as a mixture of experts runs its experts over the tokens sorted by expert. offsets is an i64 tensor [E + 1] rising from 0 to M on x's device; on CUDA one kernel runs every group (tensor cores for bf16/f16), with gradients.",
        "let x = randn([5, 3]); let w = randn([2, 4, 3]); let y = x.grouped_matmul(w, tensor([0, 2, 5]).to(\"i64\")); print(y.shape);",
        |x: &mut Tensor, w: Tensor, offsets: Tensor| guard(|| x.grouped_matmul(&w, &offsets)),
    );
    api.func(
        "einsum",
        "einsum(equation, tensors) -> Tensor",
        "Einstein summation as torch.einsum: \"bij,bjk->bik\", \"bhqd,bhkd->bhqk\", \"i,j->ij\", \"ij->\", with ... for shared leading dims and an implicit output when -> is left out (diagonals such as \"ii->i\" are not supported). Runs as permutes, sums and batched products, with gradients.",
        "let q = randn([2, 4, 5, 8]); let k = randn([2, 4, 6, 8]); let scores = einsum(\"bhqd,bhkd->bhqk\", [q, k]); print(scores.shape);",
        |equation: &str, ts: Array| {
            let ts = convert::tensors(&ts, "einsum", "operand")?;
            guard(|| Tensor::einsum(equation, &ts))
        },
    );
    api.func(
        "pow",
        "t.pow(exponent) -> Tensor",
        "Elementwise x^exponent for a scalar exponent.",
        "let x = randn([3]); x.pow(2.0)",
        |t: &mut Tensor, e: Dynamic| {
            let e = convert::number(&e, "pow")?;
            guard(|| t.pow_scalar(e))
        },
    );
    api.func(
        "**",
        "t ** exponent -> Tensor",
        "Elementwise power with a number exponent, as Python's x ** 2 (Rhai's power operator).",
        "let x = tensor([1.0, 2.0, 3.0]); x ** 2",
        |t: Tensor, e: Dynamic| {
            let e = convert::number(&e, "**")?;
            guard(|| t.pow_scalar(e))
        },
    );
    api.func(
        "affine",
        "t.affine(mul, add) -> Tensor",
        "t * mul + add in one pass, keeping t's dtype.",
        "let x = randn([3]); x.affine(2.0, 1.0)",
        |t: &mut Tensor, m: Dynamic, a: Dynamic| {
            let (m, a) = (
                convert::number(&m, "affine")?,
                convert::number(&a, "affine")?,
            );
            guard(|| t.affine(m, a))
        },
    );
    // The parametrised activations, each with torch's default when called without one.
    api.func(
        "leaky_relu",
        "t.leaky_relu(negative_slope) -> Tensor",
        "x, and negative_slope * x below 0 (torch's leaky_relu; without an argument the slope is 0.01).",
        "let x = randn([3]); x.leaky_relu(0.2)",
        |t: &mut Tensor, slope: Dynamic| {
            let slope = convert::number(&slope, "leaky_relu")?;
            guard(|| t.leaky_relu(slope))
        },
    );
    api.func(
        "leaky_relu",
        "t.leaky_relu() -> Tensor",
        "x, and 0.01 * x below 0 (torch's default slope).",
        "let x = randn([3]); x.leaky_relu()",
        |t: &mut Tensor| guard(|| t.leaky_relu(0.01)),
    );
    api.func(
        "elu",
        "t.elu(alpha) -> Tensor",
        "x, and alpha * (exp(x) - 1) at or below 0 (torch's elu; alpha 1 without an argument).",
        "let x = randn([3]); x.elu(1.0)",
        |t: &mut Tensor, alpha: Dynamic| {
            let alpha = convert::number(&alpha, "elu")?;
            guard(|| t.elu(alpha))
        },
    );
    api.func(
        "elu",
        "t.elu() -> Tensor",
        "elu with alpha 1 (torch's default).",
        "let x = randn([3]); x.elu()",
        |t: &mut Tensor| guard(|| t.elu(1.0)),
    );
    api.func(
        "celu",
        "t.celu(alpha) -> Tensor",
        "max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) (torch's celu; alpha 1 without an argument).",
        "let x = randn([3]); x.celu(1.5)",
        |t: &mut Tensor, alpha: Dynamic| {
            let alpha = convert::number(&alpha, "celu")?;
            guard(|| t.celu(alpha))
        },
    );
    api.func(
        "celu",
        "t.celu() -> Tensor",
        "celu with alpha 1 (torch's default).",
        "let x = randn([3]); x.celu()",
        |t: &mut Tensor| guard(|| t.celu(1.0)),
    );
    api.func(
        "hardtanh",
        "t.hardtanh(min, max) -> Tensor",
        "x limited to [min, max] (-1, 1 without arguments), the gradient passing only strictly inside (torch's hardtanh; clamp passes it at the bounds too).",
        "let x = randn([3]); x.hardtanh(-1.0, 1.0)",
        |t: &mut Tensor, lo: Dynamic, hi: Dynamic| {
            let (lo, hi) = (
                convert::number(&lo, "hardtanh")?,
                convert::number(&hi, "hardtanh")?,
            );
            guard(|| t.hardtanh(lo, hi))
        },
    );
    api.func(
        "hardtanh",
        "t.hardtanh() -> Tensor",
        "hardtanh to [-1, 1] (torch's default).",
        "let x = randn([3]); x.hardtanh()",
        |t: &mut Tensor| guard(|| t.hardtanh(-1.0, 1.0)),
    );
    api.func(
        "clamp",
        "t.clamp(min, max) -> Tensor",
        "Limits every element to [min, max].",
        "let x = randn([3]); x.clamp(-1.0, 1.0)",
        |t: &mut Tensor, lo: Dynamic, hi: Dynamic| {
            let (lo, hi) = (
                convert::number(&lo, "clamp")?,
                convert::number(&hi, "clamp")?,
            );
            guard(|| t.clamp(lo, hi))
        },
    );
}
