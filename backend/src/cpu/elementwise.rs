//! Unary, binary, comparison, cast and select kernels.

use super::map::{gather, map, zip3_map, zip_map, CHUNK, PARALLEL_MIN};
use super::{CpuStorage, IntoCpuStorage};
use crate::spec::unary::{Fixed, UnaryVisitor};
use crate::spec::{BinaryOp, CmpOp, UnaryOp};
use crate::{cpu_dispatch, cpu_dispatch2, DType, Error, Layout, Result, WithDType};
use half::{bf16, f16};
use rayon::prelude::*;

/// True when the element type computes in f64 (F64, and integers so that i64 stays exact-ish).
fn computes_in_f64<T: WithDType>() -> bool {
    !matches!(T::DTYPE, DType::F32 | DType::BF16 | DType::F16)
}

/// One unary loop, compiled once per op kind (`UnaryOp::specialize` hands it the kind as a
/// constant), so `eval`'s `match` folds away and the loop can vectorize.
struct UnaryLoop<'a, T> {
    v: &'a [T],
    l: &'a Layout,
}

impl<T: WithDType> UnaryVisitor for UnaryLoop<'_, T> {
    type Output = Vec<T>;
    fn visit<const CODE: usize>(self, op: Fixed<CODE>) -> Vec<T> {
        if computes_in_f64::<T>() {
            map(self.v, self.l, move |x: T| {
                T::from_f64(op.op().eval(x.to_f64()))
            })
        } else {
            map(self.v, self.l, move |x: T| {
                T::from_f32(op.op().eval(x.to_f32()))
            })
        }
    }
}

/// The op as a run-time value, computed in f64.
fn unary_any<T: WithDType>(v: &[T], l: &Layout, op: UnaryOp) -> Vec<T> {
    map(v, l, move |x| T::from_f64(op.eval(x.to_f64())))
}

/// Float storages get a loop per op kind; integer ones (a few ops, rarely hot) share one loop
/// that matches on the op, which keeps the number of compiled loops down.
pub fn unary(s: &CpuStorage, l: &Layout, op: UnaryOp) -> CpuStorage {
    match s {
        CpuStorage::F32(v) => CpuStorage::F32(op.specialize(UnaryLoop { v, l })),
        CpuStorage::F64(v) => CpuStorage::F64(op.specialize(UnaryLoop { v, l })),
        CpuStorage::BF16(v) => CpuStorage::BF16(op.specialize(UnaryLoop { v, l })),
        CpuStorage::F16(v) => CpuStorage::F16(op.specialize(UnaryLoop { v, l })),
        other => cpu_dispatch!(other, v => IntoCpuStorage::into_storage(unary_any(v, l, op))),
    }
}

/// g * f'(x, y) for contiguous x, y = f(x) and g of one float dtype, each `n` elements from
/// its layout's offset: the backward of every unary op.
struct UnaryGradLoop<'a, T> {
    x: &'a [T],
    y: &'a [T],
    g: &'a [T],
}

impl<T: WithDType> UnaryVisitor for UnaryGradLoop<'_, T> {
    type Output = Vec<T>;
    fn visit<const CODE: usize>(self, op: Fixed<CODE>) -> Vec<T> {
        let (x, y, g) = (self.x, self.y, self.g);
        // The op's loop over one chunk; the chunking (and rayon) is shared by every op.
        let chunk = move |start: usize, out: &mut [T]| {
            for (i, o) in (start..).zip(out.iter_mut()) {
                *o = if computes_in_f64::<T>() {
                    T::from_f64(g[i].to_f64() * op.op().derivative(x[i].to_f64(), y[i].to_f64()))
                } else {
                    T::from_f32(g[i].to_f32() * op.op().derivative(x[i].to_f32(), y[i].to_f32()))
                };
            }
        };
        chunked(g.len(), &chunk)
    }
}

/// A new buffer of `n` elements filled by `fill(start, chunk)` over fixed chunks, in parallel
/// when large.
fn chunked<T: WithDType>(n: usize, fill: &(dyn Fn(usize, &mut [T]) + Sync)) -> Vec<T> {
    let mut out = vec![T::zero(); n];
    if n < PARALLEL_MIN {
        fill(0, &mut out);
    } else {
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, o)| fill(c * CHUNK, o));
    }
    out
}

pub fn unary_backward(
    (x, lx): (&CpuStorage, &Layout),
    (y, ly): (&CpuStorage, &Layout),
    (g, lg): (&CpuStorage, &Layout),
    op: UnaryOp,
) -> Result<CpuStorage> {
    let n = lg.numel();
    let span = |l: &Layout| l.offset()..l.offset() + n;
    macro_rules! grad {
        ($x:expr, $y:expr, $g:expr) => {
            Ok(IntoCpuStorage::into_storage(op.specialize(UnaryGradLoop {
                x: &$x[span(lx)],
                y: &$y[span(ly)],
                g: &$g[span(lg)],
            })))
        };
    }
    match (x, y, g) {
        (CpuStorage::F32(x), CpuStorage::F32(y), CpuStorage::F32(g)) => grad!(x, y, g),
        (CpuStorage::F64(x), CpuStorage::F64(y), CpuStorage::F64(g)) => grad!(x, y, g),
        (CpuStorage::BF16(x), CpuStorage::BF16(y), CpuStorage::BF16(g)) => grad!(x, y, g),
        (CpuStorage::F16(x), CpuStorage::F16(y), CpuStorage::F16(g)) => grad!(x, y, g),
        _ => Err(Error::invalid(
            op.name(),
            "the backward takes x, y and g as floats of one dtype",
        )),
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
