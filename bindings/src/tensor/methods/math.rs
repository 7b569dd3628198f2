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
