//! Gradient norms and clipping. The global norm is summed in f64, tensor by tensor in parameter
//! order, so it is the same on every run. Clipping replaces each gradient with a scaled copy
//! (`set_grad`), never writing into it: a gradient may share storage with another tensor.

use crate::{no_grad, Result, Tensor};

/// The L2 norm over every gradient of `params` (parameters without one are skipped). NaN or
/// infinite when any gradient holds a non-finite value.
pub fn global_grad_norm(params: &[Tensor]) -> Result<f64> {
    let mut sum = 0f64;
    for p in params {
        if let Some(g) = p.grad() {
            // Host-side for now; a device reduction replaces this once grads live on the GPU.
            sum += g.to_vec_f64()?.iter().map(|x| x * x).sum::<f64>();
        }
    }
    Ok(sum.sqrt())
}

/// Scales the gradients so their global norm is at most `max_norm` and returns the norm from
/// before clipping, as torch.nn.utils.clip_grad_norm_. A non-finite norm leaves the gradients
/// as they are (scaling would only spread the NaN); the caller decides what to do with it.
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) -> Result<f64> {
    let norm = global_grad_norm(params)?;
    if norm.is_finite() && norm > max_norm {
        scale_grads(params, max_norm / (norm + 1e-6))?;
    }
    Ok(norm)
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
