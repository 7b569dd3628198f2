//! The one list of every user-facing op: its name, whether gradients flow through it, and the
//! dtypes it accepts. Tests walk this table, so an op added here without a gradient check (and
//! later a CUDA parity test, a binding and a help entry) fails the suite.

use crate::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Creates a tensor from nothing (no inputs).
    Creation,
    /// A kernel of its own with a hand-written backward.
    Primitive,
    /// A new layout over the same storage.
    View,
    /// Built from other ops; its gradient comes from theirs.
    Composite,
}

#[derive(Clone, Copy, Debug)]
pub struct OpInfo {
    pub name: &'static str,
    pub kind: OpKind,
    pub differentiable: bool,
    pub dtypes: &'static [DType],
}

const FLOAT: &[DType] = &DType::FLOATS;
const ALL: &[DType] = &DType::ALL;
const INTS: &[DType] = &[DType::U8, DType::U32, DType::I64];
const INT_AND_FLOAT: &[DType] = &[
    DType::U8,
    DType::U32,
    DType::I64,
    DType::BF16,
    DType::F16,
    DType::F32,
    DType::F64,
];

macro_rules! ops {
    ($( $name:literal : $kind:ident, $diff:literal, $dtypes:expr; )*) => {
        pub static OPS: &[OpInfo] = &[ $( OpInfo { name: $name, kind: OpKind::$kind, differentiable: $diff, dtypes: $dtypes } ),* ];
    };
}

ops! {
    // creation and random
    "zeros": Creation, false, ALL;
    "ones": Creation, false, ALL;
    "full": Creation, false, ALL;
    "arange": Creation, false, INT_AND_FLOAT;
    "linspace": Creation, false, FLOAT;
    "rand": Creation, false, FLOAT;
    "randn": Creation, false, FLOAT;
    "randint": Creation, false, &[DType::I64];
    // unary
    "neg": Primitive, true, INT_AND_FLOAT;
    "abs": Primitive, true, INT_AND_FLOAT;
    "exp": Primitive, true, FLOAT;
    "log": Primitive, true, FLOAT;
    "sqrt": Primitive, true, FLOAT;
    "rsqrt": Primitive, true, FLOAT;
    "sin": Primitive, true, FLOAT;
    "cos": Primitive, true, FLOAT;
    "atan": Primitive, true, FLOAT;
    "tanh": Primitive, true, FLOAT;
    "sigmoid": Primitive, true, FLOAT;
    "relu": Primitive, true, INT_AND_FLOAT;
    "gelu": Primitive, true, FLOAT;
    "gelu_tanh": Primitive, true, FLOAT;
    "quick_gelu": Primitive, true, FLOAT;
    "silu": Primitive, true, FLOAT;
    "softplus": Primitive, true, FLOAT;
    "mish": Primitive, true, FLOAT;
    "sign": Primitive, true, INT_AND_FLOAT;
    "erf": Primitive, true, FLOAT;
    "floor": Primitive, true, FLOAT;
    "ceil": Primitive, true, FLOAT;
    "round": Primitive, true, FLOAT;
    "pow": Primitive, true, FLOAT;
    "clamp": Primitive, true, INT_AND_FLOAT;
    "leaky_relu": Primitive, true, FLOAT;
    "elu": Primitive, true, FLOAT;
    "selu": Primitive, true, FLOAT;
    "celu": Primitive, true, FLOAT;
    "hardtanh": Primitive, true, FLOAT;
    "relu6": Primitive, true, FLOAT;
    "hardsigmoid": Primitive, true, FLOAT;
    "hardswish": Primitive, true, FLOAT;
    "softsign": Primitive, true, FLOAT;
    "log_sigmoid": Primitive, true, FLOAT;
    "affine": Primitive, true, INT_AND_FLOAT;
    // binary, broadcasting
    "add": Primitive, true, ALL;
    "sub": Primitive, true, INT_AND_FLOAT;
    "mul": Primitive, true, ALL;
    "div": Primitive, true, INT_AND_FLOAT;
    "maximum": Primitive, true, INT_AND_FLOAT;
    "minimum": Primitive, true, INT_AND_FLOAT;
    // comparisons and selection
    "eq": Primitive, false, ALL;
    "ne": Primitive, false, ALL;
    "lt": Primitive, false, ALL;
    "le": Primitive, false, ALL;
    "gt": Primitive, false, ALL;
    "ge": Primitive, false, ALL;
    "where": Primitive, true, ALL;
    "masked_fill": Composite, true, ALL;
    // reductions
    "sum": Primitive, true, ALL;
    "mean": Composite, true, FLOAT;
    "max": Primitive, true, INT_AND_FLOAT;
    "min": Primitive, true, INT_AND_FLOAT;
    "argmax": Primitive, false, INT_AND_FLOAT;
    "argmin": Primitive, false, INT_AND_FLOAT;
    "var": Composite, true, FLOAT;
    "logsumexp": Composite, true, FLOAT;
    "std": Composite, true, FLOAT;
    "norm": Composite, true, FLOAT;
    "all": Composite, false, ALL;
    "any": Composite, false, ALL;
    "cumsum": Composite, true, ALL;
    "cumprod": Composite, true, INT_AND_FLOAT;
    "softmax": Primitive, true, FLOAT;
    "log_softmax": Primitive, true, FLOAT;
    // normalization
    "layer_norm": Primitive, true, FLOAT;
    "rms_norm": Primitive, true, FLOAT;
    "batch_norm": Primitive, true, FLOAT;
    "group_norm": Composite, true, FLOAT;
    // views and copies
    "reshape": View, true, ALL;
    "permute": View, true, ALL;
    "transpose": View, true, ALL;
    "narrow": View, true, ALL;
    "expand": View, true, ALL;
    "squeeze": View, true, ALL;
    "unsqueeze": View, true, ALL;
    "contiguous": Primitive, true, ALL;
    "to_dtype": Primitive, true, ALL;
    "cat": Primitive, true, ALL;
    "stack": Composite, true, ALL;
    "split": Composite, true, ALL;
    "chunk": Composite, true, ALL;
    "index_select": Primitive, true, ALL;
    "gather": Primitive, true, ALL;
    "scatter_add": Primitive, true, INT_AND_FLOAT;
    "masked_select": Composite, true, ALL;
    // rearranging (index_select, narrow and cat underneath)
    "flip": Composite, true, ALL;
    "roll": Composite, true, ALL;
    "repeat_interleave": Composite, true, ALL;
    "pad": Composite, true, ALL;
    // sorting and counting (ordered on the host, values gathered on the device)
    "sort": Composite, true, ALL;
    "argsort": Composite, false, ALL;
    "topk": Composite, true, INT_AND_FLOAT;
    "unique": Composite, false, ALL;
    "bincount": Primitive, false, INTS;
    // linear algebra, convolution, pooling
    "matmul": Primitive, true, FLOAT;
    "grouped_matmul": Primitive, true, FLOAT;
    "einsum": Composite, true, FLOAT;
    "conv2d": Primitive, true, FLOAT;
    "conv_transpose2d": Primitive, true, FLOAT;
    "max_pool2d": Primitive, true, FLOAT;
    "avg_pool2d": Primitive, true, FLOAT;
    "upsample_nearest2d": Primitive, true, FLOAT;
    "scaled_dot_product_attention": Primitive, true, FLOAT;
    "rotary_embedding": Primitive, true, FLOAT;
    "swiglu": Primitive, true, FLOAT;
    // losses
    "cross_entropy": Primitive, true, FLOAT;
    "linear_cross_entropy": Primitive, true, FLOAT;
    "bce_with_logits": Composite, true, FLOAT;
    "mse_loss": Composite, true, FLOAT;
    "huber_loss": Composite, true, FLOAT;
}

pub fn op(name: &str) -> Option<&'static OpInfo> {
    OPS.iter().find(|o| o.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_are_unique() {
        let mut names: Vec<&str> = OPS.iter().map(|o| o.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
}
