//! Operators: `+ - * /` with tensors and numbers on either side, unary minus, `< <= > >=`
//! giving bool tensors, and compound assignment.

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{FLOAT, INT};
use rusting_brain::backend::spec::BinaryOp;
use rusting_brain::{is_grad_enabled, Result, Tensor};

fn apply(a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor> {
    match op {
        BinaryOp::Add => a.add(b),
        BinaryOp::Sub => a.sub(b),
        BinaryOp::Mul => a.mul(b),
        BinaryOp::Div => a.div(b),
        BinaryOp::Maximum => a.maximum(b),
        BinaryOp::Minimum => a.minimum(b),
    }
}

/// `x op= y`; see `store`.
fn compound(x: &mut Tensor, y: &Tensor, op: BinaryOp) -> Result<()> {
    let result = apply(x, y, op)?;
    store(x, result, y.requires_grad())
}

/// Puts `result` into the variable that holds `x` (`x op= y`, `x[mask] = v`): written in place
/// when that cannot change what autograd sees (neither x nor the other inputs take part in a
/// graph, and the result keeps x's shape and dtype), so every handle on x sees it; otherwise the
/// variable is rebound to the new tensor, so `total += loss` builds a graph as in PyTorch.
pub(crate) fn store(x: &mut Tensor, result: Tensor, inputs_track_grad: bool) -> Result<()> {
    let in_place_safe = writes_in_place(x, inputs_track_grad)
        && result.dtype() == x.dtype()
        && result.shape() == x.shape();
    if in_place_safe {
        x.copy_(&result)
    } else {
        *x = result;
        Ok(())
    }
}

/// Whether a write into `x` may go into its storage: with gradients off (PyTorch's
/// `with torch.no_grad(): w -= lr * g` writes the parameter itself), or when neither x nor the
/// written values take part in a graph autograd would have to see.
pub(crate) fn writes_in_place(x: &Tensor, inputs_track_grad: bool) -> bool {
    !is_grad_enabled() || !(x.requires_grad() || inputs_track_grad)
}

macro_rules! arithmetic {
    ($api:expr, $sym:literal, $assign:literal, $op:expr, $word:literal) => {
        $api.func(
            $sym,
            concat!("a ", $sym, " b -> Tensor"),
            concat!(
                "Elementwise ",
                $word,
                " with broadcasting; either side may be a number."
            ),
            concat!("let x = randn([3]); x ", $sym, " 2.0"),
            |a: Tensor, b: Tensor| guard(|| apply(&a, &b, $op)),
        );
        $api.func(
            $sym,
            concat!("t ", $sym, " float"),
            concat!("Elementwise ", $word, " with a float."),
            concat!("let x = randn([3]); x ", $sym, " 0.5"),
            |a: Tensor, b: FLOAT| guard(|| apply(&a, &a.scalar_like(b)?, $op)),
        );
        $api.func(
            $sym,
            concat!("t ", $sym, " int"),
            concat!("Elementwise ", $word, " with an int."),
            concat!("let x = randn([3]); x ", $sym, " 2"),
            |a: Tensor, b: INT| guard(|| apply(&a, &a.scalar_like(b as f64)?, $op)),
        );
        $api.func(
            $sym,
            concat!("float ", $sym, " t"),
            concat!("Elementwise ", $word, " of a float and a tensor."),
            concat!("let x = randn([3]); 1.0 ", $sym, " x"),
            |a: FLOAT, b: Tensor| guard(|| apply(&b.scalar_like(a)?, &b, $op)),
        );
        $api.func(
            $sym,
            concat!("int ", $sym, " t"),
            concat!("Elementwise ", $word, " of an int and a tensor."),
            concat!("let x = randn([3]); 1 ", $sym, " x"),
            |a: INT, b: Tensor| guard(|| apply(&b.scalar_like(a as f64)?, &b, $op)),
        );
        $api.func(
            $assign,
            concat!("x ", $assign, " y"),
            concat!(
                "Compound ",
                $word,
                ": in place when no gradient is involved, else rebinds x."
            ),
            concat!(
                "let total = ones([2]); let loss = randn([2]); total ",
                $assign,
                " loss"
            ),
            |a: &mut Tensor, b: Tensor| guard(|| compound(a, &b, $op)),
        );
        $api.func(
            $assign,
            concat!("x ", $assign, " float"),
            concat!("Compound ", $word, " with a float."),
            concat!("let x = randn([3]); x ", $assign, " 1.0"),
            |a: &mut Tensor, b: FLOAT| -> RhaiResult<()> {
                let b = guard(|| a.scalar_like(b))?;
                guard(|| compound(a, &b, $op))
            },
        );
        $api.func(
            $assign,
            concat!("x ", $assign, " int"),
            concat!("Compound ", $word, " with an int."),
            concat!("let x = randn([3]); x ", $assign, " 1"),
            |a: &mut Tensor, b: INT| -> RhaiResult<()> {
                let b = guard(|| a.scalar_like(b as f64))?;
                guard(|| compound(a, &b, $op))
            },
        );
    };
}

macro_rules! comparison {
    ($api:expr, $sym:literal, $method:ident) => {
        $api.func(
            $sym,
            concat!("a ", $sym, " b -> Tensor"),
            concat!("Elementwise a ", $sym, " b as a bool tensor."),
            concat!("let x = randn([3]); let y = randn([3]); x ", $sym, " y"),
            |a: Tensor, b: Tensor| guard(|| a.$method(&b)),
        );
        $api.func(
            $sym,
            concat!("t ", $sym, " float -> Tensor"),
            concat!("Elementwise t ", $sym, " a float, as a bool tensor."),
            concat!("let x = randn([3]); x ", $sym, " 0.0"),
            |a: Tensor, b: FLOAT| guard(|| a.$method(&a.scalar_like(b)?)),
        );
        $api.func(
            $sym,
            concat!("t ", $sym, " int -> Tensor"),
            concat!("Elementwise t ", $sym, " an int, as a bool tensor."),
            concat!("let x = randn([3]); x ", $sym, " 0"),
            |a: Tensor, b: INT| guard(|| a.$method(&a.scalar_like(b as f64)?)),
        );
    };
}

pub fn register(api: &mut Api) {
    arithmetic!(api, "+", "+=", BinaryOp::Add, "addition");
    arithmetic!(api, "-", "-=", BinaryOp::Sub, "subtraction");
    arithmetic!(api, "*", "*=", BinaryOp::Mul, "multiplication");
    arithmetic!(api, "/", "/=", BinaryOp::Div, "division");
    api.func(
        "-",
        "-t -> Tensor",
        "Elementwise negation.",
        "let x = randn([3]); -x",
        |a: Tensor| guard(|| a.neg()),
    );
    comparison!(api, "<", lt);
    comparison!(api, "<=", le);
    comparison!(api, ">", gt);
    comparison!(api, ">=", ge);
}
