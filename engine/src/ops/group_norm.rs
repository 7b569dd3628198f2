//! group_norm (torch.nn.functional.group_norm): a composite of layer_norm over each group's
//! values, whose gradient comes from those ops; without a gradient to record, on CUDA, one
//! kernel (backend/cuda/group_norm.rs) that also applies the affine and an optional SiLU.

use crate::autograd::no_grad;
use crate::backend::Storage;
use crate::{DType, Device, Error, Result, Tensor};

impl Tensor {
    /// Group normalization of x [N, C, ...] (torch.nn.functional.group_norm): the channels
    /// split into `groups` runs, each normalized over its channels and every position with the
    /// biased variance, then scaled and shifted per channel by `weight` and `bias` [C]. A
    /// composite: layer_norm over each group's values flattened into one row. Without a
    /// gradient to record, on CUDA, it is one kernel, as `group_norm_silu` describes.
    pub fn group_norm(
        &self,
        groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        self.group_norm_act(groups, weight, bias, eps, false)
    }

    /// silu(group_norm(x)): what a diffusion model's resnet blocks apply before each conv.
    /// Without a gradient to record, on CUDA, one kernel normalizes, scales, shifts and gates
    /// in x's dtype and layout (NCHW or channels-last): in mixed precision the output keeps
    /// x's half type, as PyTorch's CUDA group_norm does with float weights.
    pub fn group_norm_silu(
        &self,
        groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        self.group_norm_act(groups, weight, bias, eps, true)
    }

    fn group_norm_act(
        &self,
        groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        silu: bool,
    ) -> Result<Tensor> {
        let shape = self.shape();
        if shape.len() < 2 || groups == 0 || !shape[1].is_multiple_of(groups) {
            return Err(Error::invalid(
                "group_norm",
                format!("needs x [N, C, ...] with C divisible by {groups} groups, got {shape:?}"),
            ));
        }
        let channels = shape[1];
        for (what, t) in [("weight", weight), ("bias", bias)] {
            if let Some(t) = t {
                if t.shape() != [channels] {
                    return Err(Error::invalid(
                        "group_norm",
                        format!("{what} must be [{channels}], got {:?}", t.shape()),
                    ));
                }
            }
        }
        if let Some(y) = fused_group_norm(self, groups, weight, bias, eps, silu)? {
            return Ok(y);
        }
        let rows = self.reshape(&[shape[0] as isize, groups as isize, -1])?;
        let normed = rows.layer_norm(None, None, eps)?.reshape_to(shape)?;
        // [C] as [1, C, 1, ...]: one value per channel at every position.
        let per_channel = |t: &Tensor| -> Result<Tensor> {
            let mut s = vec![1; shape.len()];
            s[1] = channels;
            t.reshape_to(&s)
        };
        let scaled = match weight {
            Some(w) => normed.mul(&per_channel(w)?)?,
            None => normed,
        };
        let shifted = match bias {
            Some(b) => scaled.add(&per_channel(b)?)?,
            None => scaled,
        };
        match silu {
            true => shifted.silu(),
            false => Ok(shifted),
        }
    }
}

/// Group normalization in one CUDA kernel, when nothing needs a gradient and the kernel takes
/// x's layout and dtype; `None` otherwise (the composite runs).
fn fused_group_norm(
    x: &Tensor,
    groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
    silu: bool,
) -> Result<Option<Tensor>> {
    use crate::backend::cuda::group_norm::{self as gn, GroupNormCall};
    use crate::tensor::dispatch::cuda_kernel;
    let recorded = crate::autograd::is_grad_enabled()
        && [Some(x), weight, bias]
            .into_iter()
            .flatten()
            .any(Tensor::requires_grad);
    if recorded || !matches!(x.device(), Device::Cuda(_)) || !gn::supports(x.layout(), x.dtype()) {
        return Ok(None);
    }
    let channels = x.shape()[1];
    // The kernel reads F32 parameters; an absent one is the identity's.
    let param = |p: Option<&Tensor>, identity: f64| -> Result<Tensor> {
        match p {
            Some(p) => no_grad(|| p.to_device(x.device())?.to_dtype(DType::F32)?.contiguous()),
            None => Tensor::full(identity, &[channels], DType::F32, x.device()),
        }
    };
    let (w, b) = (param(weight, 1.0)?, param(bias, 0.0)?);
    let y = cuda_kernel(
        "group_norm",
        [x, &w, &b],
        |[(xs, lx), (ws, lw), (bs, lb)]| {
            gn::forward(&GroupNormCall {
                x: xs,
                layout: lx,
                groups,
                weight: Some((ws, lw.offset())),
                bias: Some((bs, lb.offset())),
                eps,
                silu,
            })
        },
    )?;
    let layout = match x.layout().is_contiguous() {
        true => crate::Layout::contiguous(x.shape()),
        false => crate::Layout::channels_last(x.shape()),
    };
    Tensor::from_storage_in(Storage::Cuda(y), layout).map(Some)
}
