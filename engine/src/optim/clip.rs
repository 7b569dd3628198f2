//! Gradient norms and clipping. On the CPU the global norm is summed in f64, tensor by tensor in
//! parameter order, so it is the same on every run; on a CUDA device one deterministic
//! reduction sums it in F32 and the norm can stay there as a 0-d tensor. Clipping replaces
//! each gradient with a scaled copy (`set_grad`), never writing into it: a gradient may share
//! storage with another tensor.

use super::fused;
use crate::{no_grad, DType, Result, Tensor};

/// The L2 norm over every gradient of `params` (parameters without one are skipped). NaN or
/// infinite when any gradient holds a non-finite value. With every parameter on one CUDA
/// device this waits for the device's reduction; `global_grad_norm_tensor` does not.
pub fn global_grad_norm(params: &[Tensor]) -> Result<f64> {
    if let Some(ordinal) = fused::cuda_ordinal(params) {
        return fused::grad_norm_on_device(params, ordinal)?.item();
    }
    let mut sum = 0f64;
    for p in params {
        if let Some(g) = p.grad() {
            sum += g.to_vec_f64()?.iter().map(|x| x * x).sum::<f64>();
        }
    }
    Ok(sum.sqrt())
}

/// The global gradient norm as a 0-d tensor where the parameters are: F32 on a CUDA device
/// (nothing waits for it), F64 on the CPU.
pub fn global_grad_norm_tensor(params: &[Tensor]) -> Result<Tensor> {
    match fused::cuda_ordinal(params) {
        Some(ordinal) => fused::grad_norm_on_device(params, ordinal),
        None => Tensor::scalar(global_grad_norm(params)?, DType::F64),
    }
}

/// Scales the gradients so their global norm is at most `max_norm` and returns the norm from
/// before clipping, as torch.nn.utils.clip_grad_norm_. A non-finite norm leaves the gradients
/// as they are (scaling would only spread the NaN); the caller decides what to do with it.
/// On CUDA this waits to return the norm; `clip_grad_norm_tensor` does not.
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) -> Result<f64> {
    if let Some(ordinal) = fused::cuda_ordinal(params) {
        return fused::clip_on_device(params, ordinal, max_norm)?.item();
    }
    let norm = global_grad_norm(params)?;
    if norm.is_finite() && norm > max_norm {
        scale_grads(params, max_norm / (norm + 1e-6))?;
    }
    Ok(norm)
}

/// `clip_grad_norm` returning the norm as a 0-d tensor where the parameters are. On a CUDA
/// device the clip factor is worked out there from the norm, so nothing waits: the norm can be
/// read (`item`) when a progress bar wants it.
pub fn clip_grad_norm_tensor(params: &[Tensor], max_norm: f64) -> Result<Tensor> {
    match fused::cuda_ordinal(params) {
        Some(ordinal) => fused::clip_on_device(params, ordinal, max_norm),
        None => Tensor::scalar(clip_grad_norm(params, max_norm)?, DType::F64),
    }
}

/// Replaces each gradient with `grad * factor`.
pub fn scale_grads(params: &[Tensor], factor: f64) -> Result<()> {
    no_grad(|| {
        for p in params {
            if let Some(g) = p.grad() {
                p.set_grad(Some(g.mul_scalar(factor)?));
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_with_grad(values: Vec<f32>) -> Tensor {
        let p = Tensor::from_vec(vec![0f32; values.len()], &[values.len()])
            .unwrap()
            .requires_grad_()
            .unwrap();
        let n = values.len();
        p.set_grad(Some(Tensor::from_vec(values, &[n]).unwrap()));
        p
    }

    #[test]
    fn clip_grad_norm_returns_the_pre_clip_norm_and_scales_grads_to_max_norm() {
        let (a, b) = (
            param_with_grad(vec![3.0, 0.0]),
            param_with_grad(vec![0.0, 4.0]),
        );
        let shared = a.grad().unwrap();
        let norm = clip_grad_norm(&[a.clone(), b.clone()], 1.0).unwrap();
        assert!((norm - 5.0).abs() < 1e-12);
        let k = 1.0 / (5.0 + 1e-6);
        let ga = a.grad().unwrap().to_vec_f64().unwrap();
        let gb = b.grad().unwrap().to_vec_f64().unwrap();
        assert!((ga[0] - 3.0 * k).abs() < 1e-6 && (gb[1] - 4.0 * k).abs() < 1e-6);
        assert!((global_grad_norm(&[a, b]).unwrap() - 1.0).abs() < 1e-5);
        // The old gradient tensor, which someone else may hold, is untouched.
        assert_eq!(shared.to_vec_f32().unwrap(), [3.0, 0.0]);
    }

    #[test]
    fn clip_grad_norm_tensor_on_the_cpu_is_the_f64_norm_as_a_scalar() {
        let a = param_with_grad(vec![3.0, 4.0]);
        let n = clip_grad_norm_tensor(std::slice::from_ref(&a), 1.0).unwrap();
        assert_eq!(
            (n.rank(), n.dtype(), n.item().unwrap()),
            (0, DType::F64, 5.0)
        );
        let g = a.grad().unwrap().to_vec_f64().unwrap();
        assert!((g[0] - 3.0 / (5.0 + 1e-6)).abs() < 1e-6);
        let n = global_grad_norm_tensor(std::slice::from_ref(&a)).unwrap();
        assert!((n.item().unwrap() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn clip_grad_norm_leaves_small_and_non_finite_grads_alone() {
        let a = param_with_grad(vec![0.3, 0.4]);
        assert!((clip_grad_norm(std::slice::from_ref(&a), 1.0).unwrap() - 0.5).abs() < 1e-7);
        assert_eq!(a.grad().unwrap().to_vec_f32().unwrap(), [0.3, 0.4]);
        let b = param_with_grad(vec![f32::NAN, 1.0]);
        assert!(clip_grad_norm(std::slice::from_ref(&b), 1.0)
            .unwrap()
            .is_nan());
        assert_eq!(b.grad().unwrap().to_vec_f32().unwrap()[1], 1.0);
    }
}
