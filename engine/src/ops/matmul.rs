//! Matrix products with PyTorch's rules: 1-D operands gain and lose a dim, batch dims broadcast.

use super::dispatch::{cuda_kernel_into, dispatch};
use super::{backward_fn, grad_if};
use crate::autograd::SavedTensor;
use crate::backend::cpu::matmul as cpu;
use crate::backend::cuda::matmul as cuda;
use crate::layout::broadcast_shapes;
use crate::tensor::memory::check_alloc;
use crate::{no_grad, DType, Error, Result, Tensor};

/// x y written in `dtype` (a gradient in its operand's dtype): F32 straight from the FP32
/// accumulator of half-precision operands, otherwise the product in the operands' dtype, cast.
pub(crate) fn product_in(x: &Tensor, y: &Tensor, dtype: DType) -> Result<Tensor> {
    let low = x.dtype();
    if dtype == DType::F32 && matches!(low, DType::BF16 | DType::F16) {
        return x.matmul_out(y, dtype);
    }
    x.matmul(y)?.to_dtype(dtype)
}

/// acc += x y for 2-D x and y of one dtype (not recorded): on CUDA the product adds itself into
/// `acc` (contiguous, F32 or the operands' dtype) in its epilogue, where a separate add would
/// read and write the sum once more; elsewhere a product and an add.
pub(crate) fn matmul_accumulate(acc: &Tensor, x: &Tensor, y: &Tensor) -> Result<()> {
    acc.check_same_device("matmul", x)?;
    acc.check_same_device("matmul", y)?;
    acc.check_inplace("matmul")?;
    let matrices = x.rank() == 2 && y.rank() == 2 && x.shape()[1] == y.shape()[0];
    if !matrices || acc.shape() != [x.shape()[0], y.shape()[1]] {
        return Err(Error::invalid(
            "matmul",
            format!(
                "cannot add {:?} x {:?} into a sum of shape {:?}",
                x.shape(),
                y.shape(),
                acc.shape()
            ),
        ));
    }
    // The epilogue writes acc's whole storage as [m, n]; a sum that shares storage with an
    // operand (or is a view of a larger one) takes the product and the add apart.
    let in_epilogue = matches!(acc.device(), crate::Device::Cuda(_))
        && acc.is_contiguous()
        && acc.layout().offset() == 0
        && acc.storage_cell().read().len() == acc.numel()
        && !acc.shares_storage(x)
        && !acc.shares_storage(y)
        && x.dtype() == y.dtype();
    if !in_epilogue {
        return no_grad(|| acc.add_(&x.matmul_out(y, acc.dtype())?));
    }
    cuda_kernel_into(
        "matmul",
        [acc],
        [x, y],
        |[(sum, _)], [(xs, xl), (ys, yl)]| cuda::matmul_accumulate(xs, xl, ys, yl, sum),
    )
}

impl Tensor {
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        self.matmul_impl(other, None)
    }

    /// A product whose result is `out_dtype` (F32 from BF16 operands under mixed precision:
    /// logits keep the FP32 accumulator instead of being rounded to BF16).
    pub fn matmul_out(&self, other: &Tensor, out_dtype: DType) -> Result<Tensor> {
        self.matmul_impl(other, Some(out_dtype))
    }

    fn matmul_impl(&self, other: &Tensor, out_dtype: Option<DType>) -> Result<Tensor> {
        if self.rank() == 0 || other.rank() == 0 {
            return Err(Error::invalid(
                "matmul",
                "both operands need at least one dimension",
            ));
        }
        let k_other = if other.rank() == 1 {
            other.shape()[0]
        } else {
            other.shape()[other.rank() - 2]
        };
        if self.shape()[self.rank() - 1] != k_other {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                lhs: self.shape().to_vec(),
                rhs: other.shape().to_vec(),
            });
        }
        if self.rank() == 1 {
            // The row dim added here is the result's second to last, or its last when other is
            // 1-D too (its own dim is gone): 1-D · 1-D is a 0-d dot product, as in PyTorch.
            let row = if other.rank() == 1 { -1 } else { -2 };
            return self
                .unsqueeze(0)?
                .matmul_impl(other, out_dtype)?
                .squeeze(row);
        }
        if other.rank() == 1 {
            return self
                .matmul_impl(&other.unsqueeze(1)?, out_dtype)?
                .squeeze(-1);
        }
        self.check_same_device("matmul", other)?;
        let dtype = self.dtype().promote(other.dtype());
        let dtype = crate::amp::matmul_operand_dtype(self.device(), dtype).unwrap_or(dtype);
        if !dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: "matmul",
                dtype,
                detail: ": matmul needs float operands".into(),
            });
        }
        // The operands as the product reads them (autocast's low-precision copies, or promoted).
        // The casts are not recorded: the product is recorded against the operands themselves
        // and its backward writes each gradient in its operand's own dtype. An F32 weight under
        // autocast then gets its gradient straight from cuBLAS's FP32 accumulator, with no
        // BF16 rounding and no cast pass back to F32.
        // A parameter's cast is cached only where the caller records nothing (inference), as
        // before: while training it is made afresh, so no copy outlives the step.
        let cache = !crate::is_grad_enabled();
        let (a, b) = no_grad(|| -> Result<_> {
            Ok((
                crate::amp::operand_cached_if(self, dtype, cache)?,
                crate::amp::operand_cached_if(other, dtype, cache)?,
            ))
        })?;
        let (ra, rb) = (a.rank(), b.rank());
        let (m, k, k2, n) = (
            a.shape()[ra - 2],
            a.shape()[ra - 1],
            b.shape()[rb - 2],
            b.shape()[rb - 1],
        );
        if k != k2 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                lhs: a.shape().to_vec(),
                rhs: b.shape().to_vec(),
            });
        }
        let batch = broadcast_shapes("matmul", &a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
        let full =
            |x: usize, y: usize| -> Vec<usize> { batch.iter().copied().chain([x, y]).collect() };
        let (la, lb) = (
            a.layout().broadcast_to("matmul", &full(m, k))?,
            b.layout().broadcast_to("matmul", &full(k, n))?,
        );
        let out_dtype = out_dtype.unwrap_or(dtype);
        check_alloc("matmul", &full(m, n), out_dtype, a.device())?;
        let storage = dispatch(
            "matmul",
            [&a, &b],
            |[(sa, _), (sb, _)]| {
                let c = cpu::matmul(sa, &la, sb, &lb);
                Ok(if out_dtype == dtype {
                    c
                } else {
                    let l = crate::Layout::contiguous(&full(m, n));
                    crate::backend::cpu::elementwise::cast(&c, &l, out_dtype)
                }
                .into())
            },
            |[(sa, _), (sb, _)]| Ok(cuda::matmul_into_dtype(sa, &la, sb, &lb, out_dtype)?.into()),
        )?;
        let out = Tensor::from_storage(storage, &full(m, n))?;
        let (a_dtype, b_dtype) = (self.dtype(), other.dtype());
        Ok(out.recorded(&[self, other], || {
            let (sa, sb) = (
                SavedTensor::new("matmul", &a),
                SavedTensor::new("matmul", &b),
            );
            backward_fn("matmul", move |g, needs| {
                let (a, b) = (sa.get()?, sb.get()?);
                // A product written wider than its operands (BF16 -> F32 logits) takes its
                // gradient products in the operands' dtype too, as the forward ran.
                let g = &g.to_dtype(a.dtype())?;
                Ok(vec![
                    grad_if(needs[0], || {
                        product_in(g, &b.t()?, a_dtype)?.sum_to_shape(a.shape())
                    })?,
                    grad_if(needs[1], || {
                        // The Wᵀ of x Wᵀ (a transposed contiguous matrix) gets its gradient
                        // as (gᵀ a)ᵀ, in W's memory order, so W's gradient needs no
                        // transposing copy; as PyTorch's mm backward does.
                        let w_order =
                            a.rank() == 2 && b.rank() == 2 && b.layout().is_transposed_contiguous();
                        if w_order {
                            product_in(&g.t()?, a, b_dtype)?.t()
                        } else {
                            product_in(&a.t()?, g, b_dtype)?.sum_to_shape(b.shape())
                        }
                    })?,
                ])
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), shape).unwrap()
    }

    #[test]
    fn matmul_accumulate_adds_the_product_into_the_sum() {
        let acc = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let y = t(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
        matmul_accumulate(&acc, &x, &y).unwrap();
        assert_eq!(acc.to_vec::<f32>().unwrap(), vec![5.0, 7.0, 13.0, 15.0]);
    }

    #[test]
    fn matmul_accumulate_refuses_a_sum_of_another_shape() {
        // [6, 3] x [3, 4] has 24 elements, as [4, 6] does; it must still be [6, 4].
        let acc = Tensor::zeros(&[4, 6], DType::F32, crate::Device::Cpu).unwrap();
        let x = Tensor::zeros(&[6, 3], DType::F32, crate::Device::Cpu).unwrap();
        let y = Tensor::zeros(&[3, 4], DType::F32, crate::Device::Cpu).unwrap();
        let e = matmul_accumulate(&acc, &x, &y).unwrap_err().to_string();
        assert!(e.contains("[6, 3] x [3, 4]") && e.contains("[4, 6]"), "{e}");
    }
}
