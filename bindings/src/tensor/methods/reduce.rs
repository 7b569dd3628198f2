//! Reductions (sum, mean, max, min, logsumexp, var, std, norm, all, any), the running sum and
//! product, arg-reductions and softmax along a dim.

use super::one_dim;
use crate::convert::dims;
use crate::error::guard;
use crate::help::Api;
use rhai::{Array, INT};
use rusting_brain::Tensor;

/// Registers `name(dims...)` overloads of a reduction: all dims, one dim, several dims, each
/// with and without keepdim.
macro_rules! reduction {
    ($api:expr, $name:literal, $method:ident, $doc:literal) => {
        $api.func(
            $name,
            concat!("t.", $name, "() -> Tensor"),
            concat!($doc, " over all elements."),
            concat!("let x = randn([2, 3, 4]); x.", $name, "()"),
            |t: &mut Tensor| guard(|| t.$method(&[], false)),
        );
        $api.func(
            $name,
            concat!("t.", $name, "(dim) -> Tensor"),
            concat!($doc, " over one dim."),
            concat!("let x = randn([2, 3, 4]); x.", $name, "(1)"),
            |t: &mut Tensor, d: INT| guard(|| t.$method(&one_dim(d), false)),
        );
        $api.func(
            $name,
            concat!("t.", $name, "(dim, keepdim) -> Tensor"),
            concat!($doc, ", keeping the reduced dim as size 1."),
            concat!("let x = randn([2, 3, 4]); x.", $name, "(-1, true)"),
            |t: &mut Tensor, d: INT, k: bool| guard(|| t.$method(&one_dim(d), k)),
        );
        $api.func(
            $name,
            concat!("t.", $name, "(dims) -> Tensor"),
            concat!($doc, " over several dims."),
            concat!("let x = randn([2, 3, 4]); x.", $name, "([0, 2])"),
            |t: &mut Tensor, d: Array| {
                let d = dims(&d, $name)?;
                guard(|| t.$method(&d, false))
            },
        );
        $api.func(
            $name,
            concat!("t.", $name, "(dims, keepdim) -> Tensor"),
            concat!($doc, " over several dims, keeping them."),
            concat!("let x = randn([2, 3, 4]); x.", $name, "([0, 2], true)"),
            |t: &mut Tensor, d: Array, k: bool| {
                let d = dims(&d, $name)?;
                guard(|| t.$method(&d, k))
            },
        );
    };
}

pub fn register(api: &mut Api) {
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
    reduction!(
        api,
        "all",
        all_dims,
        "Whether every element is non-zero (bool)"
    );
    reduction!(
        api,
        "any",
        any_dims,
        "Whether any element is non-zero (bool)"
    );
    register_variance(api);
    register_norms(api);
    register_scans(api);
    register_arg_reductions(api);
    register_softmax(api);
}

fn register_variance(api: &mut Api) {
    api.func(
        "variance",
        "t.variance() -> Tensor",
        "Unbiased variance over all elements (PyTorch's var; `var` is a reserved word in Rhai).",
        "let x = randn([4, 3]); x.variance()",
        |t: &mut Tensor| guard(|| t.var_dims(&[], true, false)),
    );
    api.func(
        "variance",
        "t.variance(dim) -> Tensor",
        "Unbiased variance over one dim.",
        "let x = randn([4, 3]); x.variance(0)",
        |t: &mut Tensor, d: INT| guard(|| t.var_dims(&one_dim(d), true, false)),
    );
    api.func(
        "variance",
        "t.variance(dim, unbiased, keepdim) -> Tensor",
        "Variance over one dim, with or without Bessel's correction.",
        "let x = randn([4, 3]); x.variance(0, false, true)",
        |t: &mut Tensor, d: INT, u: bool, k: bool| guard(|| t.var_dims(&one_dim(d), u, k)),
    );
}

fn register_norms(api: &mut Api) {
    api.func(
        "std",
        "t.std() -> Tensor",
        "Unbiased standard deviation over all elements (torch.std).",
        "let x = randn([4, 3]); x.std()",
        |t: &mut Tensor| guard(|| t.std_dims(&[], true, false)),
    );
    api.func(
        "std",
        "t.std(dim) -> Tensor",
        "Unbiased standard deviation over one dim.",
        "let x = randn([4, 3]); x.std(0)",
        |t: &mut Tensor, d: INT| guard(|| t.std_dims(&one_dim(d), true, false)),
    );
    api.func(
        "std",
        "t.std(dim, unbiased, keepdim) -> Tensor",
        "Standard deviation over one dim, with or without Bessel's correction.",
        "let x = randn([4, 3]); x.std(0, false, true)",
        |t: &mut Tensor, d: INT, u: bool, k: bool| guard(|| t.std_dims(&one_dim(d), u, k)),
    );
    api.func(
        "norm",
        "t.norm() -> Tensor",
        "The Euclidean (2-) norm of all elements (torch.linalg.vector_norm).",
        "let x = tensor([3.0, 4.0]); x.norm()",
        |t: &mut Tensor| guard(|| t.norm_dims(2.0, &[], false)),
    );
    api.func(
        "norm",
        "t.norm(p) -> Tensor",
        "The p-norm of all elements: 1 the sum of magnitudes, 2 the length, 1.0 / 0.0 (infinity) the largest magnitude.",
        "let x = tensor([3.0, -4.0]); [x.norm(1), x.norm(1.0 / 0.0)]",
        |t: &mut Tensor, p: rhai::Dynamic| {
            let p = crate::convert::number(&p, "norm")?;
            guard(|| t.norm_dims(p, &[], false))
        },
    );
    api.func(
        "norm",
        "t.norm(p, dim) -> Tensor",
        "The p-norm over one dim.",
        "let x = randn([4, 3]); x.norm(2, -1)",
        |t: &mut Tensor, p: rhai::Dynamic, d: INT| {
            let p = crate::convert::number(&p, "norm")?;
            guard(|| t.norm_dims(p, &one_dim(d), false))
        },
    );
    api.func(
        "norm",
        "t.norm(p, dims, keepdim) -> Tensor",
        "The p-norm over several dims, kept or not.",
        "let x = randn([2, 3, 4]); x.norm(2, [1, 2], true)",
        |t: &mut Tensor, p: rhai::Dynamic, d: Array, k: bool| {
            let p = crate::convert::number(&p, "norm")?;
            let d = dims(&d, "norm")?;
            guard(|| t.norm_dims(p, &d, k))
        },
    );
}

fn register_scans(api: &mut Api) {
    api.func(
        "cumsum",
        "t.cumsum(dim) -> Tensor",
        "The running sum along dim (torch.cumsum); a bool tensor counts.",
        "let x = tensor([1, 2, 3]); x.cumsum(0)",
        |t: &mut Tensor, d: INT| guard(|| t.cumsum(d as isize)),
    );
    api.func(
        "cumprod",
        "t.cumprod(dim) -> Tensor",
        "The running product along dim (torch.cumprod).",
        "let x = tensor([1.0, 2.0, 3.0]); x.cumprod(0)",
        |t: &mut Tensor, d: INT| guard(|| t.cumprod(d as isize)),
    );
}

fn register_arg_reductions(api: &mut Api) {
    api.func(
        "argmax",
        "t.argmax() -> Tensor",
        "Index of the largest element of the flattened tensor.",
        "let x = randn([2, 3]); x.argmax()",
        |t: &mut Tensor| guard(|| t.argmax(None, false)),
    );
    api.func(
        "argmax",
        "t.argmax(dim) -> Tensor",
        "Indices of the largest values along dim.",
        "let logits = randn([2, 5]); logits.argmax(-1)",
        |t: &mut Tensor, d: INT| guard(|| t.argmax(Some(d as isize), false)),
    );
    api.func(
        "argmax",
        "t.argmax(dim, keepdim) -> Tensor",
        "argmax keeping the dim.",
        "let logits = randn([2, 5]); logits.argmax(-1, true)",
        |t: &mut Tensor, d: INT, k: bool| guard(|| t.argmax(Some(d as isize), k)),
    );
    api.func(
        "argmin",
        "t.argmin() -> Tensor",
        "Index of the smallest element of the flattened tensor.",
        "let x = randn([2, 3]); x.argmin()",
        |t: &mut Tensor| guard(|| t.argmin(None, false)),
    );
    api.func(
        "argmin",
        "t.argmin(dim) -> Tensor",
        "Indices of the smallest values along dim.",
        "let x = randn([2, 3]); x.argmin(0)",
        |t: &mut Tensor, d: INT| guard(|| t.argmin(Some(d as isize), false)),
    );
}

fn register_softmax(api: &mut Api) {
    api.func(
        "softmax",
        "t.softmax(dim) -> Tensor",
        "Softmax along dim.",
        "let logits = randn([2, 5]); logits.softmax(-1)",
        |t: &mut Tensor, d: INT| guard(|| t.softmax(d as isize)),
    );
    api.func(
        "log_softmax",
        "t.log_softmax(dim) -> Tensor",
        "Log-softmax along dim.",
        "let logits = randn([2, 5]); logits.log_softmax(-1)",
        |t: &mut Tensor, d: INT| guard(|| t.log_softmax(d as isize)),
    );
}
