//! Unary, binary, comparison, cast and select kernels.

use super::map::{gather, map, zip3_map, zip_map};
use super::{CpuStorage, IntoCpuStorage};
use crate::ops::kinds::{BinaryOp, CmpOp, UnaryOp};
use crate::{cpu_dispatch, cpu_dispatch2, DType, Layout, WithDType};
use half::{bf16, f16};

/// True when the element type computes in f64 (F64, and integers so that i64 stays exact-ish).
fn computes_in_f64<T: WithDType>() -> bool {
    !matches!(T::DTYPE, DType::F32 | DType::BF16 | DType::F16)
}

/// The generic path: the op is a run-time value (used for integer dtypes).
fn unary_any<T: WithDType>(v: &[T], l: &Layout, op: UnaryOp) -> Vec<T> {
    if computes_in_f64::<T>() {
        map(v, l, move |x| T::from_f64(op.eval(x.to_f64())))
    } else {
        map(v, l, move |x| T::from_f32(op.eval(x.to_f32())))
    }
}

/// Expands one loop per op kind: each closure names its op as a constant, so `#[inline] eval`
/// folds its `match` away and the loop can vectorize.
macro_rules! float_loops {
    ($v:expr, $l:expr, $op:expr, $T:ty, [$($unit:ident),*]) => {{
        macro_rules! lp {
            ($o:expr) => {
                if computes_in_f64::<$T>() {
                    map($v, $l, move |x: $T| <$T>::from_f64($o.eval(x.to_f64())))
                } else {
                    map($v, $l, move |x: $T| <$T>::from_f32($o.eval(x.to_f32())))
                }
            };
        }
        match $op {
            $( UnaryOp::$unit => lp!(UnaryOp::$unit), )*
            UnaryOp::Pow(e) => lp!(UnaryOp::Pow(e)),
            UnaryOp::Clamp(a, b) => lp!(UnaryOp::Clamp(a, b)),
            UnaryOp::Affine(m, a) => lp!(UnaryOp::Affine(m, a)),
        }
    }};
}

fn unary_float<T: WithDType>(v: &[T], l: &Layout, op: UnaryOp) -> Vec<T> {
    float_loops!(
        v,
        l,
        op,
        T,
        [
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
            GeluGrad,
            GeluTanhGrad,
            SiluGrad
        ]
    )
}

pub fn unary(s: &CpuStorage, l: &Layout, op: UnaryOp) -> CpuStorage {
    match s {
        CpuStorage::F32(v) => CpuStorage::F32(unary_float(v, l, op)),
        CpuStorage::F64(v) => CpuStorage::F64(unary_float(v, l, op)),
        CpuStorage::BF16(v) => CpuStorage::BF16(unary_float(v, l, op)),
        CpuStorage::F16(v) => CpuStorage::F16(unary_float(v, l, op)),
        other => cpu_dispatch!(other, v => IntoCpuStorage::into_storage(unary_any(v, l, op))),
    }
}

fn binary_t<T: WithDType>(a: &[T], la: &Layout, b: &[T], lb: &Layout, op: BinaryOp) -> Vec<T> {
    macro_rules! lp {
        ($o:expr) => {
            if computes_in_f64::<T>() {
                zip_map(a, la, b, lb, move |x: T, y: T| {
                    T::from_f64($o.eval(x.to_f64(), y.to_f64()))
                })
            } else {
                zip_map(a, la, b, lb, move |x: T, y: T| {
                    T::from_f32($o.eval(x.to_f32(), y.to_f32()))
                })
            }
        };
    }
    match op {
        BinaryOp::Add => lp!(BinaryOp::Add),
        BinaryOp::Sub => lp!(BinaryOp::Sub),
        BinaryOp::Mul => lp!(BinaryOp::Mul),
        BinaryOp::Div => lp!(BinaryOp::Div),
        BinaryOp::Maximum => lp!(BinaryOp::Maximum),
        BinaryOp::Minimum => lp!(BinaryOp::Minimum),
    }
}

/// Both operands have the same dtype and layouts broadcast to the output shape.
pub fn binary(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
    op: BinaryOp,
) -> CpuStorage {
    cpu_dispatch2!(a, b, (x, y) => IntoCpuStorage::into_storage(binary_t(x, la, y, lb, op)))
}

pub fn compare(a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout, op: CmpOp) -> CpuStorage {
    // One loop per op, as in `binary_t`: a constant op folds `eval`'s `match`, so the loop
    // vectorizes.
    macro_rules! lp {
        ($o:expr) => {
            cpu_dispatch2!(a, b, (x, y) => zip_map(x, la, y, lb, |p, q| $o.eval(p, q)))
        };
    }
    CpuStorage::Bool(match op {
        CmpOp::Eq => lp!(CmpOp::Eq),
        CmpOp::Ne => lp!(CmpOp::Ne),
        CmpOp::Lt => lp!(CmpOp::Lt),
        CmpOp::Le => lp!(CmpOp::Le),
        CmpOp::Gt => lp!(CmpOp::Gt),
        CmpOp::Ge => lp!(CmpOp::Ge),
    })
}

fn cast_to<U: IntoCpuStorage>(s: &CpuStorage, l: &Layout) -> CpuStorage {
    // f32 -> f64 is exact, so going through f64 never rounds twice.
    cpu_dispatch!(s, v => U::into_storage(map(v, l, |x| U::from_f64(x.to_f64()))))
}

/// Copies the view into a new contiguous storage of `dtype`.
pub fn cast(s: &CpuStorage, l: &Layout, dtype: DType) -> CpuStorage {
    if s.dtype() == dtype {
        return cpu_dispatch!(s, v => IntoCpuStorage::into_storage(gather(v, l)));
    }
    match dtype {
        DType::Bool => cast_to::<bool>(s, l),
        DType::U8 => cast_to::<u8>(s, l),
        DType::U32 => cast_to::<u32>(s, l),
        DType::I64 => cast_to::<i64>(s, l),
        DType::BF16 => cast_to::<bf16>(s, l),
        DType::F16 => cast_to::<f16>(s, l),
        DType::F32 => cast_to::<f32>(s, l),
        DType::F64 => cast_to::<f64>(s, l),
    }
}

fn select_t<T: WithDType>(
    c: (&[bool], &Layout),
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
) -> Vec<T> {
    zip3_map(c, (a, la), (b, lb), |c, x, y| if c { x } else { y })
}

/// `cond ? a : b` elementwise; all three layouts are broadcast to the output shape.
pub fn where_cond(
    cond: &CpuStorage,
    lc: &Layout,
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
) -> CpuStorage {
    let CpuStorage::Bool(c) = cond else {
        unreachable!("where: the condition is cast to bool before dispatch")
    };
    cpu_dispatch2!(a, b, (x, y) => IntoCpuStorage::into_storage(select_t((c, lc), x, la, y, lb)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_comparison_gives_its_own_mask() {
        let a = CpuStorage::F32(vec![1.0, 2.0, 3.0, f32::NAN]);
        let b = CpuStorage::F32(vec![2.0, 2.0, 2.0, 2.0]);
        let l = Layout::contiguous(&[4]);
        let mask = |op| match compare(&a, &l, &b, &l, op) {
            CpuStorage::Bool(m) => m,
            _ => unreachable!(),
        };
        let (t, f) = (true, false);
        assert_eq!(mask(CmpOp::Eq), [f, t, f, f]);
        assert_eq!(mask(CmpOp::Ne), [t, f, t, t]);
        assert_eq!(mask(CmpOp::Lt), [t, f, f, f]);
        assert_eq!(mask(CmpOp::Le), [t, t, f, f]);
        assert_eq!(mask(CmpOp::Gt), [f, f, t, f]);
        assert_eq!(mask(CmpOp::Ge), [f, t, t, f]);
    }
}
