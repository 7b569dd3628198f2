//! The three passes of a convolution the CUDA conv tests compare across devices.

use rusting_brain::{amp, Conv2dOptions, DType, Device, Tensor};

/// (output, input grad, weight grad) of sum(conv2d(x, w) * r) on `device` under `autocast`.
pub fn conv_passes(
    x: &Tensor,
    w: &Tensor,
    r: &Tensor,
    opts: Conv2dOptions,
    device: Device,
    autocast: Option<DType>,
) -> [Tensor; 3] {
    // Fresh leaves on each call, so gradients do not accumulate across devices.
    let leaf = |t: &Tensor| {
        t.detach()
            .to_device(device)
            .unwrap()
            .requires_grad_()
            .unwrap()
    };
    let (x, w) = (leaf(x), leaf(w));
    let r = r.to_device(device).unwrap();
    let y = amp::autocast(autocast, || x.conv2d(&w, None, opts)).unwrap();
    let loss = y
        .to_dtype(r.dtype())
        .unwrap()
        .mul(&r)
        .unwrap()
        .sum()
        .unwrap();
    loss.backward().unwrap();
    [y, x.grad().unwrap(), w.grad().unwrap()]
}
