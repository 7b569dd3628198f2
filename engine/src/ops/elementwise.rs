//! Elementwise ops: unary math, broadcasting binary arithmetic, comparisons and `where`.

use super::dispatch::{cuda_kernel, dispatch};
use super::{backward_fn, grad_if};
use crate::autograd::SavedTensor;
use crate::backend::cpu::elementwise as cpu;
use crate::backend::cuda::elementwise as cuda;
use crate::backend::spec::{BinaryOp, CmpOp, UnaryOp};
use crate::layout::broadcast_shapes;
use crate::tensor::memory::check_alloc;
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// A CUDA tensor laid out densely in another dim order than row-major (channels-last images)
/// seen as the flat run of its elements: elementwise kernels walk that run and the result keeps
/// the layout, where packing it into row-major order first would cost a copy each way.
fn flat_on_cuda(t: &Tensor) -> Option<Layout> {
    let l = t.layout();
    (matches!(t.device(), Device::Cuda(_)) && l.is_dense() && !l.is_contiguous())
        .then(|| Layout::new(vec![l.numel()], vec![1], l.offset()))
}

impl Tensor {
    /// Applies a unary op to what `unary_input` gave, without recording it.
    fn unary_raw(&self, op: UnaryOp) -> Result<Tensor> {
        if let Some(flat) = flat_on_cuda(self) {
            let storage = cuda_kernel(op.name(), [self], |[(s, _)]| {
                Ok(cuda::unary(s, &flat, op)?.into())
            })?;
            return Tensor::from_storage_in(storage, self.layout().dense_like());
        }
        let storage = dispatch(
            op.name(),
            [self],
            |[(s, l)]| Ok(cpu::unary(s, l, op).into()),
            |[(s, l)]| Ok(cuda::unary(s, l, op)?.into()),
        )?;
        Tensor::from_storage(storage, self.shape())
    }

    /// What the op reads: integers become F32 unless the op keeps them integer.
    fn unary_input(&self, op: UnaryOp) -> Result<Tensor> {
        if self.dtype().is_float() || op.keeps_int() {
            Ok(self.clone())
        } else {
            self.to_dtype(DType::F32)
        }
    }

    /// Applies any unary op kind, recorded for autograd: the backward is g * f'(x, y) in one
    /// pass, with f' from the op's line in the table (`backend::spec::unary`).
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let x = self.unary_input(op)?;
        let out = x.unary_raw(op)?;
        Ok(out.recorded_with_output(&[self], |out| {
            let (x, y) = (
                SavedTensor::new(op.name(), &x),
                SavedTensor::new(op.name(), out),
            );
            backward_fn(op.name(), move |g, _| {
                Ok(vec![Some(unary_backward(x.get()?, y.get()?, g, op)?)])
            })
        }))
    }

    pub fn neg(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }
    pub fn abs(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Abs)
    }
    pub fn exp(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Exp)
    }
    pub fn log(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Log)
    }
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sqrt)
    }
    pub fn rsqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Rsqrt)
    }
    pub fn sin(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sin)
    }
    pub fn cos(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Cos)
    }
    /// The arctangent, in (-pi/2, pi/2).
    pub fn atan(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Atan)
    }
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Tanh)
    }
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sigmoid)
    }
    pub fn relu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Relu)
    }
    /// Exact GELU (erf form).
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Gelu)
    }
    /// GELU with the tanh approximation.
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluTanh)
    }
    /// x * sigmoid(1.702 x) (CLIP's quick GELU).
    pub fn quick_gelu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::QuickGelu)
    }
    pub fn silu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Silu)
    }
    pub fn sign(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sign)
    }
    /// log(1 + exp(x)) (x itself above 20, as torch.nn.functional.softplus).
    pub fn softplus(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Softplus)
    }
    /// x * tanh(softplus(x)).
    pub fn mish(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Mish)
    }
    /// The error function.
    pub fn erf(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Erf)
    }
    pub fn floor(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Floor)
    }
    pub fn ceil(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Ceil)
    }
    /// Rounds to the nearest integer, halves to even (as torch.round).
    pub fn round(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Round)
    }
    pub fn square(&self) -> Result<Tensor> {
        self.mul(self)
    }
    pub fn pow_scalar(&self, exponent: f64) -> Result<Tensor> {
        self.unary(UnaryOp::Pow(exponent))
    }
    /// x, and `slope` · x below 0 (torch's leaky_relu; nn.LeakyReLU's default slope is 0.01).
    pub fn leaky_relu(&self, slope: f64) -> Result<Tensor> {
        self.unary(UnaryOp::LeakyRelu(slope))
    }

    /// x, and alpha · (e^x - 1) at or below 0 (torch's elu; its default alpha is 1).
    pub fn elu(&self, alpha: f64) -> Result<Tensor> {
        self.unary(UnaryOp::Elu(alpha))
    }

    /// SELU: 1.0507 · elu(x, 1.6733) (torch's selu).
    pub fn selu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Selu)
    }

    /// max(0, x) + min(0, alpha · (e^(x/alpha) - 1)) (torch's celu); alpha must not be 0.
    pub fn celu(&self, alpha: f64) -> Result<Tensor> {
        if alpha == 0.0 {
            return Err(Error::invalid("celu", "alpha must not be 0"));
        }
        self.unary(UnaryOp::Celu(alpha))
    }

    /// x limited to [min, max] with the gradient only strictly inside (torch's hardtanh).
    pub fn hardtanh(&self, min: f64, max: f64) -> Result<Tensor> {
        if min > max {
            return Err(Error::invalid(
                "hardtanh",
                format!("min {min} is greater than max {max}"),
            ));
        }
        self.unary(UnaryOp::Hardtanh(min, max))
    }

    /// min(max(x, 0), 6) (torch's relu6: hardtanh(0, 6)).
    pub fn relu6(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Hardtanh(0.0, 6.0))
    }

    /// relu6(x + 3) / 6 (torch's hardsigmoid).
    pub fn hardsigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Hardsigmoid)
    }

    /// x · relu6(x + 3) / 6 (torch's hardswish, MobileNetV3's activation).
    pub fn hardswish(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Hardswish)
    }

    /// x / (1 + |x|).
    pub fn softsign(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Softsign)
    }

    /// log(sigmoid(x)), finite for every x (torch's logsigmoid).
    pub fn log_sigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::LogSigmoid)
    }

    pub fn clamp(&self, min: f64, max: f64) -> Result<Tensor> {
        if min > max {
            return Err(Error::invalid(
                "clamp",
                format!("min {min} is greater than max {max}"),
            ));
        }
        self.unary(UnaryOp::Clamp(min, max))
    }
    /// x * mul + add, in the tensor's dtype.
    pub fn affine(&self, mul: f64, add: f64) -> Result<Tensor> {
        self.unary(UnaryOp::Affine(mul, add))
    }

    // ----- binary -----

    /// Broadcasts two tensors after promoting them to one dtype; returns the operands and shape.
    fn promoted_pair(
        &self,
        other: &Tensor,
        op: &'static str,
        dtype: Option<DType>,
    ) -> Result<(Tensor, Tensor, Vec<usize>)> {
        let (a, b) = Tensor::colocated(op, self, other)?;
        let shape = broadcast_shapes(op, a.shape(), b.shape())?;
        let dtype = dtype.unwrap_or_else(|| a.dtype().promote(b.dtype()));
        Ok((a.to_dtype(dtype)?, b.to_dtype(dtype)?, shape))
    }

    fn binary_raw(a: &Tensor, b: &Tensor, shape: &[usize], op: BinaryOp) -> Result<Tensor> {
        check_alloc(op.name(), shape, a.dtype(), a.device())?;
        let (la, lb) = (
            a.layout().broadcast_to(op.name(), shape)?,
            b.layout().broadcast_to(op.name(), shape)?,
        );
        if let (Some(fa), Some(fb)) = (flat_on_cuda(a), flat_on_cuda(b)) {
            if la.strides() == lb.strides() && la.shape() == lb.shape() {
                let storage = cuda_kernel(op.name(), [a, b], |[(sa, _), (sb, _)]| {
                    Ok(cuda::binary(sa, &fa, sb, &fb, op)?.into())
                })?;
                return Tensor::from_storage_in(storage, la.dense_like());
            }
        }
        let storage = dispatch(
            op.name(),
            [a, b],
            |[(sa, _), (sb, _)]| Ok(cpu::binary(sa, &la, sb, &lb, op).into()),
            |[(sa, _), (sb, _)]| Ok(cuda::binary(sa, &la, sb, &lb, op)?.into()),
        )?;
        Tensor::from_storage(storage, shape)
    }

    /// self + other for an F32 and a BF16/F16 CUDA tensor of one shape, both contiguous, as
    /// promoting the low one and adding gives it, without the promoted copy; `None` for other
    /// operands. Each input's gradient is the output's, which backward casts to its dtype.
    fn add_mixed_on_cuda(&self, other: &Tensor) -> Result<Option<Tensor>> {
        let on_cuda = |t: &Tensor| matches!(t.device(), Device::Cuda(_));
        if !(on_cuda(self) && self.device() == other.device() && self.shape() == other.shape()) {
            return Ok(None);
        }
        if self.dtype() == other.dtype() || self.dtype().promote(other.dtype()) != DType::F32 {
            return Ok(None);
        }
        let storage = cuda_kernel("add", [self, other], |[(sa, la), (sb, lb)]| {
            cuda::add_mixed(sa, la, sb, lb)
        })?;
        let Some(storage) = storage else {
            return Ok(None);
        };
        let out = Tensor::from_storage(storage.into(), self.shape())?;
        Ok(Some(out.recorded(&[self, other], || {
            backward_fn("add", move |g, needs| {
                Ok(vec![
                    grad_if(needs[0], || Ok(g.clone()))?,
                    grad_if(needs[1], || Ok(g.clone()))?,
                ])
            })
        })))
    }

    pub(crate) fn binary(&self, other: &Tensor, op: BinaryOp) -> Result<Tensor> {
        if op == BinaryOp::Add {
            if let Some(sum) = self.add_mixed_on_cuda(other)? {
                return Ok(sum);
            }
        }
        // True division of integers gives floats, as in PyTorch.
        let force = (op == BinaryOp::Div && !self.dtype().promote(other.dtype()).is_float())
            .then_some(DType::F32);
        let (a, b, shape) = self.promoted_pair(other, op.name(), force)?;
        let out = Self::binary_raw(&a, &b, &shape, op)?;
        Ok(out.recorded(&[&a, &b], || {
            // Only what the wanted gradients read is kept: x * scale under a frozen scale
            // keeps the scale, not x (a LoRA branch's [rows, out] product, per layer).
            let (a_trains, b_trains) = (a.requires_grad(), b.requires_grad());
            let (keep_a, keep_b) = match op {
                BinaryOp::Add | BinaryOp::Sub => (false, false),
                BinaryOp::Mul => (b_trains, a_trains),
                BinaryOp::Div => (b_trains, true),
                _ => (true, true),
            };
            let save = |keep: bool, t: &Tensor| keep.then(|| SavedTensor::new(op.name(), t));
            let saved = (save(keep_a, &a), save(keep_b, &b));
            let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
            backward_fn(op.name(), move |g, needs| {
                let (ga, gb) = match op {
                    BinaryOp::Add => (
                        grad_if(needs[0], || Ok(g.clone()))?,
                        grad_if(needs[1], || Ok(g.clone()))?,
                    ),
                    BinaryOp::Sub => (
                        grad_if(needs[0], || Ok(g.clone()))?,
                        grad_if(needs[1], || g.neg())?,
                    ),
                    _ => {
                        // `needs[i]` implies input i required grad when recorded, so what
                        // its gradient reads was kept.
                        let kept = |t: &Option<SavedTensor>| -> Result<Tensor> {
                            match t {
                                Some(t) => Ok(t.get()?.clone()),
                                None => Err(Error::invalid(
                                    op.name(),
                                    "an operand its gradient reads was not kept",
                                )),
                            }
                        };
                        let (a, b) = (&saved.0, &saved.1);
                        match op {
                            BinaryOp::Mul => (
                                grad_if(needs[0], || g.mul(&kept(b)?))?,
                                grad_if(needs[1], || g.mul(&kept(a)?))?,
                            ),
                            BinaryOp::Div => (
                                grad_if(needs[0], || g.div(&kept(b)?))?,
                                grad_if(needs[1], || {
                                    let (a, b) = (kept(a)?, kept(b)?);
                                    g.mul(&a)?.div(&b.mul(&b)?)?.neg()
                                })?,
                            ),
                            _ => {
                                // Ties split the gradient evenly, as in PyTorch.
                                let (a, b) = (&kept(a)?, &kept(b)?);
                                let wins = if op == BinaryOp::Maximum {
                                    a.gt(b)?
                                } else {
                                    a.lt(b)?
                                };
                                let share = wins
                                    .to_dtype(g.dtype())?
                                    .add(&a.eq(b)?.to_dtype(g.dtype())?.affine(0.5, 0.0)?)?;
                                (
                                    grad_if(needs[0], || g.mul(&share))?,
                                    grad_if(needs[1], || g.mul(&share.affine(-1.0, 1.0)?))?,
                                )
                            }
                        }
                    }
                };
                Ok(vec![
                    ga.map(|t| t.sum_to_shape(&sa)).transpose()?,
                    gb.map(|t| t.sum_to_shape(&sb)).transpose()?,
                ])
            })
        }))
    }

    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Add)
    }
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Sub)
    }
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Mul)
    }
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Div)
    }
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Maximum)
    }
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Minimum)
    }

    /// A scalar operand as a 0-d tensor: a float scalar keeps a float tensor's dtype and turns
    /// an integer tensor into F32, as Python scalars do in PyTorch.
    pub fn scalar_like(&self, value: f64) -> Result<Tensor> {
        let dtype = if self.dtype().is_float() || value.fract() != 0.0 || !value.is_finite() {
            self.dtype().float_result()
        } else {
            self.dtype()
        };
        // Made on self's device, so the op that uses it needs no transfer.
        Tensor::full(value, &[], dtype, self.device())
    }

    pub fn add_scalar(&self, v: f64) -> Result<Tensor> {
        self.add(&self.scalar_like(v)?)
    }
    pub fn sub_scalar(&self, v: f64) -> Result<Tensor> {
        self.sub(&self.scalar_like(v)?)
    }
    pub fn mul_scalar(&self, v: f64) -> Result<Tensor> {
        self.mul(&self.scalar_like(v)?)
    }
    pub fn div_scalar(&self, v: f64) -> Result<Tensor> {
        self.div(&self.scalar_like(v)?)
    }

    // ----- comparisons (not differentiable; they return Bool) -----

    pub(crate) fn compare(&self, other: &Tensor, op: CmpOp) -> Result<Tensor> {
        let (a, b, shape) = self.promoted_pair(other, op.name(), None)?;
        let (la, lb) = (
            a.layout().broadcast_to(op.name(), &shape)?,
            b.layout().broadcast_to(op.name(), &shape)?,
        );
        let storage = dispatch(
            op.name(),
            [&a, &b],
            |[(sa, _), (sb, _)]| Ok(cpu::compare(sa, &la, sb, &lb, op).into()),
            |[(sa, _), (sb, _)]| Ok(cuda::compare(sa, &la, sb, &lb, op)?.into()),
        )?;
        Tensor::from_storage(storage, &shape)
    }

    pub fn eq(&self, o: &Tensor) -> Result<Tensor> {
        self.compare(o, CmpOp::Eq)
    }
    pub fn ne(&self, o: &Tensor) -> Result<Tensor> {
        self.compare(o, CmpOp::Ne)
    }
    pub fn lt(&self, o: &Tensor) -> Result<Tensor> {
        self.compare(o, CmpOp::Lt)
    }
    pub fn le(&self, o: &Tensor) -> Result<Tensor> {
        self.compare(o, CmpOp::Le)
    }
    pub fn gt(&self, o: &Tensor) -> Result<Tensor> {
        self.compare(o, CmpOp::Gt)
    }
    pub fn ge(&self, o: &Tensor) -> Result<Tensor> {
        self.compare(o, CmpOp::Ge)
    }
    pub fn gt_scalar(&self, v: f64) -> Result<Tensor> {
        self.gt(&self.scalar_like(v)?)
    }
    pub fn ge_scalar(&self, v: f64) -> Result<Tensor> {
        self.ge(&self.scalar_like(v)?)
    }
    pub fn lt_scalar(&self, v: f64) -> Result<Tensor> {
        self.lt(&self.scalar_like(v)?)
    }
    pub fn le_scalar(&self, v: f64) -> Result<Tensor> {
        self.le(&self.scalar_like(v)?)
    }
    pub fn eq_scalar(&self, v: f64) -> Result<Tensor> {
        self.eq(&self.scalar_like(v)?)
    }

    pub fn logical_and(&self, o: &Tensor) -> Result<Tensor> {
        let (a, b) = (self.to_dtype(DType::Bool)?, o.to_dtype(DType::Bool)?);
        a.where_cond_of(&b, &Tensor::scalar(0.0, DType::Bool)?)
    }

    pub fn logical_not(&self) -> Result<Tensor> {
        self.to_dtype(DType::Bool)?
            .eq(&Tensor::scalar(0.0, DType::Bool)?)
    }

    /// `self` as the condition: where self is true take `a`, else `b` (torch.where(self, a, b)).
    pub fn where_cond_of(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        Tensor::where_cond(self, a, b)
    }

    /// torch.where: `a` where `cond` is true, else `b`, all broadcast together.
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let (a, b, ab_shape) = a.promoted_pair(b, "where", None)?;
        let (cond, a) = Tensor::colocated("where", cond, &a)?;
        let (b, _) = Tensor::colocated("where", &b, &a)?;
        let shape = broadcast_shapes("where", cond.shape(), &ab_shape)?;
        let c = cond.to_dtype(DType::Bool)?;
        check_alloc("where", &shape, a.dtype(), a.device())?;
        let (lc, la, lb) = (
            c.layout().broadcast_to("where", &shape)?,
            a.layout().broadcast_to("where", &shape)?,
            b.layout().broadcast_to("where", &shape)?,
        );
        let storage = dispatch(
            "where",
            [&c, &a, &b],
            |[(sc, _), (sa, _), (sb, _)]| Ok(cpu::where_cond(sc, &lc, sa, &la, sb, &lb).into()),
            |[(sc, _), (sa, _), (sb, _)]| Ok(cuda::where_cond(sc, &lc, sa, &la, sb, &lb)?.into()),
        )?;
        let out = Tensor::from_storage(storage, &shape)?;
        let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
        Ok(out.recorded(&[&a, &b], || {
            let cond = SavedTensor::new("where", &c);
            backward_fn("where", move |g, needs| {
                let c = cond.get()?;
                let zero = Tensor::scalar(0.0, g.dtype())?;
                Ok(vec![
                    grad_if(needs[0], || {
                        Tensor::where_cond(c, g, &zero)?.sum_to_shape(&sa)
                    })?,
                    grad_if(needs[1], || {
                        Tensor::where_cond(c, &zero, g)?.sum_to_shape(&sb)
                    })?,
                ])
            })
        }))
    }

    /// `value` where `mask` is true, `self` elsewhere.
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        Tensor::where_cond(mask, &Tensor::scalar(value, self.dtype())?, self)
    }
}

/// g * f'(x, y) for the unary `op`, with x the op's input and y its output (saved by the
/// forward); in x's dtype, which is the output's.
fn unary_backward(x: &Tensor, y: &Tensor, g: &Tensor, op: UnaryOp) -> Result<Tensor> {
    let dtype = x.dtype();
    if !dtype.is_float() {
        return Err(Error::invalid(
            op.name(),
            format!("no gradient through an integer ({dtype}) input"),
        ));
    }
    let (x, y, g) = (
        x.contiguous()?,
        y.contiguous()?,
        g.to_dtype(dtype)?.contiguous()?,
    );
    let storage = dispatch(
        op.name(),
        [&x, &y, &g],
        |[x, y, g]| cpu::unary_backward(x, y, g, op).map(Into::into),
        |[x, y, g]| Ok(cuda::unary_backward(x, y, g, op)?.into()),
    )?;
    Tensor::from_storage(storage, g.shape())
}
