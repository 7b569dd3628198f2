//! PyTorch-named tensor methods. Each is a thin call into the engine.

use super::operand;
use crate::convert::{self, dims, shape};
use crate::error::{guard, guard_rhai, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Array, Dynamic, FnPtr, NativeCallContext, FLOAT, INT};
use rusting_brain::{NoGradGuard, Tensor};

fn one_dim(d: INT) -> Vec<isize> {
    vec![d as isize]
}

fn tensors(arr: &Array, what: &str) -> RhaiResult<Vec<Tensor>> {
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            v.clone().try_cast::<Tensor>().ok_or_else(|| {
                runtime_error(format!(
                    "{what}: element {i} is a {}, not a Tensor",
                    v.type_name()
                ))
            })
        })
        .collect()
}

fn to_array(ts: Vec<Tensor>) -> Array {
    ts.into_iter().map(Dynamic::from).collect()
}

macro_rules! unary_methods {
    ($api:expr; $($name:literal => $method:ident, $doc:literal;)*) => {
        $( $api.func($name, concat!("t.", $name, "() -> Tensor"), $doc, concat!("x.", $name, "()"), |t: &mut Tensor| guard(|| t.$method())); )*
    };
}

/// Registers `name(dims...)` overloads of a reduction: all dims, one dim, several dims, each
/// with and without keepdim.
macro_rules! reduction {
    ($api:expr, $name:literal, $method:ident, $doc:literal) => {
        $api.func(
            $name,
            concat!("t.", $name, "() -> Tensor"),
            concat!($doc, " over all elements."),
            concat!("x.", $name, "()"),
            |t: &mut Tensor| guard(|| t.$method(&[], false)),
        );
        $api.func(
            $name,
            concat!("t.", $name, "(dim) -> Tensor"),
            concat!($doc, " over one dim."),
            concat!("x.", $name, "(1)"),
            |t: &mut Tensor, d: INT| guard(|| t.$method(&one_dim(d), false)),
        );
        $api.func(
            $name,
            concat!("t.", $name, "(dim, keepdim) -> Tensor"),
            concat!($doc, ", keeping the reduced dim as size 1."),
            concat!("x.", $name, "(-1, true)"),
            |t: &mut Tensor, d: INT, k: bool| guard(|| t.$method(&one_dim(d), k)),
        );
        $api.func(
            $name,
            concat!("t.", $name, "(dims) -> Tensor"),
            concat!($doc, " over several dims."),
            concat!("x.", $name, "([0, 2])"),
            |t: &mut Tensor, d: Array| {
                let d = dims(&d, $name)?;
                guard(|| t.$method(&d, false))
            },
        );
        $api.func(
            $name,
            concat!("t.", $name, "(dims, keepdim) -> Tensor"),
            concat!($doc, " over several dims, keeping them."),
            concat!("x.", $name, "([0, 2], true)"),
            |t: &mut Tensor, d: Array, k: bool| {
                let d = dims(&d, $name)?;
                guard(|| t.$method(&d, k))
            },
        );
    };
}

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
        "tanh" => tanh, "Elementwise tanh.";
        "sigmoid" => sigmoid, "Elementwise logistic sigmoid.";
        "relu" => relu, "Elementwise max(x, 0).";
        "gelu" => gelu, "Exact (erf) GELU.";
        "gelu_tanh" => gelu_tanh, "GELU with the tanh approximation.";
        "silu" => silu, "x * sigmoid(x) (swish).";
        "sign" => sign, "-1, 0 or 1 by the sign of each element.";
        "square" => square, "Elementwise x^2.";
        "contiguous" => contiguous, "The same values in a contiguous layout (copies only when needed).";
        "flatten" => flatten, "The tensor as 1-D.";
        "t" => t, "Transpose of the last two dims (a view).";
    }
    api.func(
        "swiglu",
        "gate.swiglu(up) -> Tensor",
        "silu(gate) * up (SwiGLU's gating), one fused op on CUDA.",
        "g.swiglu(u)",
        |g: &mut Tensor, u: Tensor| guard(|| g.swiglu(&u)),
    );
    reduction!(api, "sum", sum_dims, "Sum");
    reduction!(api, "mean", mean_dims, "Mean");
    reduction!(api, "max", max_dims, "Maximum");
    reduction!(api, "min", min_dims, "Minimum");
    reduction!(
        api,
        "logsumexp",
        logsumexp,
        "log(sum(exp(x))), computed stably,"
    );
    api.func(
        "var",
        "t.var() -> Tensor",
        "Unbiased variance over all elements.",
        "x.var()",
        |t: &mut Tensor| guard(|| t.var_dims(&[], true, false)),
    );
    api.func(
        "var",
        "t.var(dim) -> Tensor",
        "Unbiased variance over one dim.",
        "x.var(0)",
        |t: &mut Tensor, d: INT| guard(|| t.var_dims(&one_dim(d), true, false)),
    );
    api.func(
        "var",
        "t.var(dim, unbiased, keepdim) -> Tensor",
        "Variance over one dim, with or without Bessel's correction.",
        "x.var(0, false, true)",
        |t: &mut Tensor, d: INT, u: bool, k: bool| guard(|| t.var_dims(&one_dim(d), u, k)),
    );
    api.func(
        "argmax",
        "t.argmax() -> Tensor",
        "Index of the largest element of the flattened tensor.",
        "x.argmax()",
        |t: &mut Tensor| guard(|| t.argmax(None, false)),
    );
    api.func(
        "argmax",
        "t.argmax(dim) -> Tensor",
        "Indices of the largest values along dim.",
        "logits.argmax(-1)",
        |t: &mut Tensor, d: INT| guard(|| t.argmax(Some(d as isize), false)),
    );
    api.func(
        "argmax",
        "t.argmax(dim, keepdim) -> Tensor",
        "argmax keeping the dim.",
        "logits.argmax(-1, true)",
        |t: &mut Tensor, d: INT, k: bool| guard(|| t.argmax(Some(d as isize), k)),
    );
    api.func(
        "argmin",
        "t.argmin() -> Tensor",
        "Index of the smallest element of the flattened tensor.",
        "x.argmin()",
        |t: &mut Tensor| guard(|| t.argmin(None, false)),
    );
    api.func(
        "argmin",
        "t.argmin(dim) -> Tensor",
        "Indices of the smallest values along dim.",
        "x.argmin(0)",
        |t: &mut Tensor, d: INT| guard(|| t.argmin(Some(d as isize), false)),
    );
    api.func(
        "softmax",
        "t.softmax(dim) -> Tensor",
        "Softmax along dim.",
        "logits.softmax(-1)",
        |t: &mut Tensor, d: INT| guard(|| t.softmax(d as isize)),
    );
    api.func(
        "log_softmax",
        "t.log_softmax(dim) -> Tensor",
        "Log-softmax along dim.",
        "logits.log_softmax(-1)",
        |t: &mut Tensor, d: INT| guard(|| t.log_softmax(d as isize)),
    );

    api.func(
        "matmul",
        "a.matmul(b) -> Tensor",
        "Matrix product with batch broadcasting (1-D operands as in PyTorch).",
        "let y = x.matmul(w);",
        |a: &mut Tensor, b: Tensor| guard(|| a.matmul(&b)),
    );
    api.func(
        "pow",
        "t.pow(exponent) -> Tensor",
        "Elementwise x^exponent for a scalar exponent.",
        "x.pow(2.0)",
        |t: &mut Tensor, e: Dynamic| {
            let e = convert::number(&e, "pow")?;
            guard(|| t.pow_scalar(e))
        },
    );
    api.func(
        "affine",
        "t.affine(mul, add) -> Tensor",
        "t * mul + add in one pass, keeping t's dtype.",
        "x.affine(2.0, 1.0)",
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
        "x.clamp(-1.0, 1.0)",
        |t: &mut Tensor, lo: Dynamic, hi: Dynamic| {
            let (lo, hi) = (
                convert::number(&lo, "clamp")?,
                convert::number(&hi, "clamp")?,
            );
            guard(|| t.clamp(lo, hi))
        },
    );
    for (name, doc) in [
        (
            "maximum",
            "Elementwise maximum of two tensors (broadcasting).",
        ),
        (
            "minimum",
            "Elementwise minimum of two tensors (broadcasting).",
        ),
    ] {
        let is_max = name == "maximum";
        api.func(
            name,
            &format!("a.{name}(b) -> Tensor"),
            doc,
            &format!("a.{name}(b)"),
            move |a: &mut Tensor, b: Dynamic| {
                let b = operand(&b, a)?;
                guard(|| if is_max { a.maximum(&b) } else { a.minimum(&b) })
            },
        );
    }
    for (name, doc) in [
        ("eq", "=="),
        ("ne", "!="),
        ("lt", "<"),
        ("le", "<="),
        ("gt", ">"),
        ("ge", ">="),
    ] {
        let n = name;
        api.func(
            name,
            &format!("a.{name}(b) -> Tensor"),
            &format!("Elementwise a {doc} b as a bool tensor."),
            &format!("x.{name}(0.0)"),
            move |a: &mut Tensor, b: Dynamic| {
                let b = operand(&b, a)?;
                guard(|| match n {
                    "eq" => a.eq(&b),
                    "ne" => a.ne(&b),
                    "lt" => a.lt(&b),
                    "le" => a.le(&b),
                    "gt" => a.gt(&b),
                    _ => a.ge(&b),
                })
            },
        );
    }
    api.func(
        "where",
        "where(cond, a, b) -> Tensor",
        "Elements of a where cond is true, else of b (broadcasting; numbers allowed).",
        "where(x.gt(0.0), x, 0.0)",
        |cond: Tensor, a: Dynamic, b: Dynamic| {
            let like = a
                .clone()
                .try_cast::<Tensor>()
                .or_else(|| b.clone().try_cast::<Tensor>())
                .unwrap_or_else(|| cond.clone());
            let (a, b) = (operand(&a, &like)?, operand(&b, &like)?);
            guard(|| Tensor::where_cond(&cond, &a, &b))
        },
    );
    api.func(
        "masked_fill",
        "t.masked_fill(mask, value) -> Tensor",
        "value where mask is true, t elsewhere.",
        "scores.masked_fill(mask, -1e9)",
        |t: &mut Tensor, m: Tensor, v: Dynamic| {
            let v = convert::number(&v, "masked_fill")?;
            guard(|| t.masked_fill(&m, v))
        },
    );

    register_shape_methods(api);
    register_autograd_methods(api);
}

fn register_shape_methods(api: &mut Api) {
    api.func(
        "reshape",
        "t.reshape(shape) -> Tensor",
        "Same values in a new shape; one dim may be -1.",
        "x.reshape([2, -1])",
        |t: &mut Tensor, s: Array| {
            let s = dims(&s, "reshape")?;
            guard(|| t.reshape(&s))
        },
    );
    api.func(
        "view",
        "t.view(shape) -> Tensor",
        "Alias of reshape.",
        "x.view([-1])",
        |t: &mut Tensor, s: Array| {
            let s = dims(&s, "view")?;
            guard(|| t.reshape(&s))
        },
    );
    api.func(
        "permute",
        "t.permute(dims) -> Tensor",
        "Reorders dims (a view).",
        "x.permute([0, 2, 1])",
        |t: &mut Tensor, d: Array| {
            let d = dims(&d, "permute")?;
            guard(|| t.permute(&d))
        },
    );
    api.func(
        "transpose",
        "t.transpose(dim0, dim1) -> Tensor",
        "Swaps two dims (a view).",
        "x.transpose(0, 1)",
        |t: &mut Tensor, a: INT, b: INT| guard(|| t.transpose(a as isize, b as isize)),
    );
    api.func(
        "narrow",
        "t.narrow(dim, start, length) -> Tensor",
        "length entries from start along dim (a view).",
        "x.narrow(1, 0, 2)",
        |t: &mut Tensor, d: INT, s: INT, n: INT| {
            let (s, n) = (
                convert::usize_of(s, "narrow")?,
                convert::usize_of(n, "narrow")?,
            );
            guard(|| t.narrow(d as isize, s, n))
        },
    );
    api.func(
        "slice",
        "t.slice(dim, start, end) -> Tensor",
        "Python-style slice start..end along dim (negatives count from the end).",
        "x.slice(1, 1, -1)",
        |t: &mut Tensor, d: INT, s: INT, e: INT| {
            guard(|| t.slice(d as isize, s as isize, e as isize))
        },
    );
    api.func(
        "squeeze",
        "t.squeeze(dim) -> Tensor",
        "Drops dim if it has size 1.",
        "x.squeeze(0)",
        |t: &mut Tensor, d: INT| guard(|| t.squeeze(d as isize)),
    );
    api.func(
        "unsqueeze",
        "t.unsqueeze(dim) -> Tensor",
        "Inserts a size-1 dim.",
        "x.unsqueeze(0)",
        |t: &mut Tensor, d: INT| guard(|| t.unsqueeze(d as isize)),
    );
    api.func(
        "expand",
        "t.expand(shape) -> Tensor",
        "Broadcasts to shape without copying.",
        "b.expand([4, 3])",
        |t: &mut Tensor, s: Array| {
            let s = shape(&s, "expand")?;
            guard(|| t.expand(&s))
        },
    );
    api.func(
        "cat",
        "cat(tensors, dim) -> Tensor",
        "Concatenates along dim.",
        "cat([a, b], 0)",
        |ts: Array, d: INT| {
            let ts = tensors(&ts, "cat")?;
            guard(|| Tensor::cat(&ts, d as isize))
        },
    );
    api.func(
        "stack",
        "stack(tensors, dim) -> Tensor",
        "Stacks equal-shaped tensors along a new dim.",
        "stack([a, b], 0)",
        |ts: Array, d: INT| {
            let ts = tensors(&ts, "stack")?;
            guard(|| Tensor::stack(&ts, d as isize))
        },
    );
    api.func(
        "split",
        "t.split(size, dim) -> array",
        "Pieces of size along dim (the last may be smaller).",
        "let parts = x.split(2, 0);",
        |t: &mut Tensor, s: INT, d: INT| {
            let s = convert::usize_of(s, "split")?;
            guard(|| t.split(s, d as isize)).map(to_array)
        },
    );
    api.func(
        "chunk",
        "t.chunk(n, dim) -> array",
        "n nearly equal pieces along dim.",
        "let halves = x.chunk(2, -1);",
        |t: &mut Tensor, n: INT, d: INT| {
            let n = convert::usize_of(n, "chunk")?;
            guard(|| t.chunk(n, d as isize)).map(to_array)
        },
    );
    api.func(
        "index_select",
        "t.index_select(dim, indices) -> Tensor",
        "Entries indices (1-D ints) along dim.",
        "emb.index_select(0, ids)",
        |t: &mut Tensor, d: INT, i: Tensor| guard(|| t.index_select(d as isize, &i)),
    );
    api.func(
        "gather",
        "t.gather(dim, index) -> Tensor",
        "torch.gather: picks along dim by an index tensor.",
        "logp.gather(1, targets.unsqueeze(1))",
        |t: &mut Tensor, d: INT, i: Tensor| guard(|| t.gather(d as isize, &i)),
    );
    api.func(
        "scatter_add",
        "t.scatter_add(dim, index, src) -> Tensor",
        "A copy of t with src added at index along dim.",
        "zeros([3]).scatter_add(0, idx, ones([5]))",
        |t: &mut Tensor, d: INT, i: Tensor, s: Tensor| guard(|| t.scatter_add(d as isize, &i, &s)),
    );
    api.func(
        "to",
        "t.to(dtype_or_device) -> Tensor",
        "A copy in another dtype (\"bf16\") or on another device (\"cuda\").",
        "x.to(\"f64\")",
        |t: &mut Tensor, target: &str| match rusting_brain::DType::parse(target) {
            Some(d) => guard(|| t.to_dtype(d)),
            None => {
                let dev = convert::device(target).map_err(|_| {
                    runtime_error(format!("to: \"{target}\" is neither a dtype nor a device"))
                })?;
                guard(|| t.to_device(dev))
            }
        },
    );
    api.func(
        "float",
        "t.float() -> Tensor",
        "A copy as f32.",
        "labels.float()",
        |t: &mut Tensor| guard(|| t.to_dtype(rusting_brain::DType::F32)),
    );
    api.func(
        "long",
        "t.long() -> Tensor",
        "A copy as i64.",
        "x.long()",
        |t: &mut Tensor| guard(|| t.to_dtype(rusting_brain::DType::I64)),
    );
    api.func(
        "item",
        "t.item() -> float",
        "The value of a one-element tensor.",
        "loss.item()",
        |t: &mut Tensor| guard(|| t.item()).map(|v| v as FLOAT),
    );
    api.func(
        "tolist",
        "t.tolist() -> array",
        "The values as nested arrays.",
        "x.tolist()",
        |t: &mut Tensor| guard(|| convert::to_nested(t)),
    );
    api.func(
        "numel",
        "t.numel() -> int",
        "The number of elements.",
        "x.numel()",
        |t: &mut Tensor| t.numel() as INT,
    );
    api.func(
        "size",
        "t.size(dim) -> int",
        "The size of one dim (negative counts from the end).",
        "x.size(-1)",
        |t: &mut Tensor, d: INT| {
            let r = t.rank() as INT;
            let i = if d < 0 { d + r } else { d };
            if i < 0 || i >= r {
                return Err(runtime_error(format!(
                    "size: dim {d} is out of range for rank {r}"
                )));
            }
            Ok(t.shape()[i as usize] as INT)
        },
    );
}

fn register_autograd_methods(api: &mut Api) {
    api.func(
        "shares_with",
        "a.shares_with(b) -> bool",
        "Whether two tensors are views of the same storage.",
        "x.shares_with(x.t())",
        |a: &mut Tensor, b: Tensor| a.shares_storage(&b),
    );
    api.func(
        "backward",
        "t.backward()",
        "Backpropagates from a one-element tensor into the .grad of the leaves.",
        "loss.backward();",
        |t: &mut Tensor| guard(|| t.backward()),
    );
    api.func(
        "backward",
        "t.backward(grad)",
        "Backpropagates a given output gradient.",
        "y.backward(ones(y.shape));",
        |t: &mut Tensor, g: Tensor| guard(|| t.backward_with(Some(g), false)),
    );
    api.func(
        "requires_grad_",
        "t.requires_grad_() -> Tensor",
        "Marks a leaf so backward() fills its .grad; returns it.",
        "let w = randn([3]).requires_grad_();",
        |t: &mut Tensor| guard(|| t.set_requires_grad(true).cloned()),
    );
    api.func(
        "detach",
        "t.detach() -> Tensor",
        "The same data cut from the autograd graph.",
        "let y = x.detach();",
        |t: &mut Tensor| t.detach(),
    );
    api.func(
        "zero_grad",
        "t.zero_grad()",
        "Clears the accumulated gradient.",
        "w.zero_grad();",
        |t: &mut Tensor| t.zero_grad(),
    );
    api.func(
        "no_grad",
        "no_grad(|| ...) -> value",
        "Runs the closure with gradient recording off.",
        "let y = no_grad(|| model.forward(x));",
        |ctx: NativeCallContext, f: FnPtr| -> RhaiResult<Dynamic> {
            guard_rhai(|| {
                let _guard = NoGradGuard::new();
                f.call_within_context(&ctx, ())
            })
        },
    );
}
