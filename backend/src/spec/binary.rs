//! The binary arithmetic and comparison ops, each defined once: variant, name, CPU body and
//! CUDA C expression. The op code the CUDA kernel switches on is the line's position, and the
//! kernel's `case` for it is generated from the line (see `cuda_cases`), as for unary ops.

use super::real::Real;

macro_rules! binary_ops {
    (
        $(#[$meta:meta])* $vis:vis enum $Enum:ident { $(
            $variant:ident = $name:literal { value: |$a:ident, $b:ident| $f:expr, cuda: $cf:literal $(,)? }
        )* }
    ) => {
        $(#[$meta])*
        $vis enum $Enum { $($variant),* }

        impl $Enum {
            /// Every op's name and CUDA C expression (of `a` and `b`), indexed by op code.
            pub const CUDA: &'static [(&'static str, &'static str)] = &[$(($name, $cf)),*];

            pub fn name(self) -> &'static str {
                match self { $( Self::$variant => $name ),* }
            }

            /// The code the CUDA kernel switches on: the position in the table.
            pub fn code(self) -> usize {
                self as usize
            }
        }

        binary_ops!(@eval $Enum $( $variant |$a, $b| $f )*);
    };
    (@eval BinaryOp $( $variant:ident |$a:ident, $b:ident| $f:expr )*) => {
        impl BinaryOp {
            #[inline(always)]
            pub fn eval<R: Real>(self, a: R, b: R) -> R {
                match self { $( Self::$variant => { let ($a, $b) = (a, b); $f } ),* }
            }
        }
    };
    (@eval CmpOp $( $variant:ident |$a:ident, $b:ident| $f:expr )*) => {
        impl CmpOp {
            /// Compares in the operands' own type (exact for integers).
            #[inline(always)]
            pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
                match self { $( Self::$variant => { let ($a, $b) = (a, b); $f } ),* }
            }
        }
    };
}

binary_ops! {
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum BinaryOp {
        Add = "add" { value: |a, b| a + b, cuda: "a + b" }
        Sub = "sub" { value: |a, b| a - b, cuda: "a - b" }
        Mul = "mul" { value: |a, b| a * b, cuda: "a * b" }
        Div = "div" { value: |a, b| a / b, cuda: "a / b" }
        Maximum = "maximum" { value: |a, b| a.max(b), cuda: "fmax(a, b)" }
        Minimum = "minimum" { value: |a, b| a.min(b), cuda: "fmin(a, b)" }
    }
}

binary_ops! {
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum CmpOp {
        Eq = "eq" { value: |a, b| a == b, cuda: "a == b" }
        Ne = "ne" { value: |a, b| a != b, cuda: "a != b" }
        Lt = "lt" { value: |a, b| a < b, cuda: "a < b" }
        Le = "le" { value: |a, b| a <= b, cuda: "a <= b" }
        Gt = "gt" { value: |a, b| a > b, cuda: "a > b" }
        Ge = "ge" { value: |a, b| a >= b, cuda: "a >= b" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_positions_in_the_cuda_tables() {
        for op in [BinaryOp::Add, BinaryOp::Div, BinaryOp::Minimum] {
            assert_eq!(BinaryOp::CUDA[op.code()].0, op.name());
        }
        for op in [CmpOp::Eq, CmpOp::Le, CmpOp::Ge] {
            assert_eq!(CmpOp::CUDA[op.code()].0, op.name());
        }
        assert_eq!(BinaryOp::CUDA.len(), 6);
        assert_eq!(CmpOp::CUDA.len(), 6);
    }
}
