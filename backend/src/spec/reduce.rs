//! Reductions over dims: what each kind computes and the dtype it gives.

use crate::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    ArgMax,
    ArgMin,
}

impl ReduceOp {
    /// Max and argmax look for the largest element, min and argmin for the smallest.
    pub fn seeks_max(self) -> bool {
        matches!(self, ReduceOp::Max | ReduceOp::ArgMax)
    }

    /// Argmax and argmin give the position (I64) rather than the value.
    pub fn gives_index(self) -> bool {
        matches!(self, ReduceOp::ArgMax | ReduceOp::ArgMin)
    }

    /// The dtype the reduction produces: integer sums widen to I64, arg-reductions give I64,
    /// the rest keep the input dtype.
    pub fn output_dtype(self, input: DType) -> DType {
        match self {
            ReduceOp::Sum if !input.is_float() => DType::I64,
            ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
            _ => input,
        }
    }
}
