//! grouped_matmul: rows of x in consecutive groups, each group times its own weight, as a
//! mixture of experts runs its experts over the tokens routed to each (sorted by expert).
//!
//! The groups are offsets on the device (I64 [E + 1]), so on CUDA nothing is read back: one
//! kernel finds each tile's group itself (kernels/grouped_matmul.cu), the input's gradient is
//! the same kernel against the weights transposed (a view), and the weights' gradient one
//! kernel reducing each group's rows. The CPU reads the offsets and runs the groups' products
//! as ordinary recorded ops.

use super::backward_fn;
use crate::autograd::{no_grad, SavedTensor};
use crate::backend::cuda::grouped_matmul as cuda;
use crate::backend::Storage;
use crate::tensor::dispatch::cuda_kernel;
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "grouped_matmul";

impl Tensor {
    /// x [M, K] with rows `offsets[e] .. offsets[e + 1]` times `weights[e]`ᵀ (weights
    /// [E, N, K]): [M, N]. `offsets` is I64 [E + 1] on x's device, ascending from 0 to M.
    /// Under autocast the operands are cast for the products, as `matmul`'s are.
    pub fn grouped_matmul(&self, weights: &Tensor, offsets: &Tensor) -> Result<Tensor> {
        check(self, weights, offsets)?;
        let dtype = self.dtype().promote(weights.dtype());
        let dtype = crate::amp::matmul_operand_dtype(self.device(), dtype).unwrap_or(dtype);
        let (x, w) = (
            crate::amp::operand(self, dtype)?,
            crate::amp::operand(weights, dtype)?,
        );
        match self.device() {
            Device::Cpu => by_group(&x, &w, offsets),
            Device::Cuda(_) => fused(&x, &w, offsets),
        }
    }
}

fn check(x: &Tensor, w: &Tensor, offsets: &Tensor) -> Result<()> {
    x.check_float(OP)?;
    w.check_float(OP)?;
    x.check_same_device(OP, w)?;
    x.check_same_device(OP, offsets)?;
    let shapes_fit = x.rank() == 2
        && w.rank() == 3
        && x.shape()[1] == w.shape()[2]
        && offsets.shape() == [w.shape()[0] + 1];
    if !shapes_fit || offsets.dtype() != DType::I64 {
        return Err(Error::invalid(
            OP,
            format!(
                "takes x [M, K], weights [E, N, K] and I64 offsets [E + 1]; got x {:?}, weights \
                 {:?}, offsets {} {:?}",
                x.shape(),
                w.shape(),
                offsets.dtype(),
                offsets.shape()
            ),
        ));
    }
    Ok(())
}

/// The CPU's groups one product each, recorded as narrow, matmul and cat. The offsets are
/// checked here, where they are on the host.
fn by_group(x: &Tensor, w: &Tensor, offsets: &Tensor) -> Result<Tensor> {
    let off = offsets.to_vec::<i64>()?;
    let m = x.shape()[0];
    let ascending = off.windows(2).all(|p| p[0] <= p[1]);
    if off.first() != Some(&0) || off.last() != Some(&(m as i64)) || !ascending {
        return Err(Error::invalid(
            OP,
            format!("offsets must rise from 0 to the {m} rows, got {off:?}"),
        ));
    }
    let mut parts = Vec::with_capacity(off.len());
    for (e, span) in off.windows(2).enumerate() {
        let (start, rows) = (span[0] as usize, (span[1] - span[0]) as usize);
        if rows > 0 {
            let we = w.narrow(0, e, 1)?.squeeze(0)?;
            parts.push(x.narrow(0, start, rows)?.matmul(&we.t()?)?);
        }
    }
    match parts.is_empty() {
        true => Tensor::zeros(&[0, w.shape()[1]], x.dtype(), x.device()),
        false => Tensor::cat(&parts, 0),
    }
}

fn fused(x: &Tensor, w: &Tensor, offsets: &Tensor) -> Result<Tensor> {
    let offsets = no_grad(|| offsets.contiguous())?;
    let (m, n, experts) = (x.shape()[0], w.shape()[1], w.shape()[0]);
    let y = cuda_kernel(OP, [x, w, &offsets], |[a, b, (os, ol)]| {
        cuda::grouped_rows(a, b, os, ol.offset())
    })?;
    let (x_d, w_d) = (x.detach(), w.detach());
    Tensor::from_op(Storage::Cuda(y), &[m, n], &[x, w], move || {
        let (sx, sw) = (SavedTensor::new(OP, &x_d), SavedTensor::new(OP, &w_d));
        backward_fn(OP, move |dy, needs| {
            let (x, w) = (sx.get()?, sw.get()?);
            let dy = no_grad(|| dy.to_dtype(x.dtype()))?;
            let dx = match needs[0] {
                true => {
                    let wt = w.transpose(1, 2)?;
                    let s = cuda_kernel(OP, [&dy, &wt, &offsets], |[a, b, (os, ol)]| {
                        cuda::grouped_rows(a, b, os, ol.offset())
                    })?;
                    Some(Tensor::from_storage(Storage::Cuda(s), x.shape())?)
                }
                false => None,
            };
            let dw = match needs[1] {
                true => {
                    let s = cuda_kernel(OP, [&dy, x, &offsets], |[a, b, (os, ol)]| {
                        cuda::grouped_reduce(a, b, os, ol.offset(), experts)
                    })?;
                    Some(Tensor::from_storage(Storage::Cuda(s), w.shape())?)
                }
                false => None,
            };
            Ok(vec![dx, dw])
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) * scale)
            .collect()
    }

    /// Each group's rows times its own weight, the same as a product per group; the
    /// gradients those products give, with an empty group among them.
    #[test]
    fn each_group_takes_its_own_weight() {
        let x = Tensor::from_vec(seq(5 * 3, 0.1), &[5, 3]).unwrap();
        let w = Tensor::from_vec(seq(3 * 2 * 3, 0.2), &[3, 2, 3]).unwrap();
        x.set_requires_grad(true).unwrap();
        w.set_requires_grad(true).unwrap();
        let offsets = Tensor::from_vec(vec![0i64, 2, 2, 5], &[4]).unwrap();
        let y = x.grouped_matmul(&w, &offsets).unwrap();
        assert_eq!(y.shape(), [5, 2]);
        let (xv, wv, yv) = (
            x.to_vec_f32().unwrap(),
            w.to_vec_f32().unwrap(),
            y.to_vec_f32().unwrap(),
        );
        for row in 0..5 {
            let e = if row < 2 { 0 } else { 2 };
            for n in 0..2 {
                let want: f32 = (0..3)
                    .map(|k| xv[row * 3 + k] * wv[(e * 2 + n) * 3 + k])
                    .sum();
                assert!((yv[row * 2 + n] - want).abs() < 1e-6, "row {row} col {n}");
            }
        }
        y.sum().unwrap().backward().unwrap();
        let gw = w.grad().unwrap().to_vec_f32().unwrap();
        assert!(
            gw[6..12].iter().all(|&g| g == 0.0),
            "the empty group: {gw:?}"
        );
        // d/dw[0][n][k] of the sum = the sum of x[rows 0..2][k].
        let col: f32 = xv[0] + xv[3];
        assert!((gw[0] - col).abs() < 1e-6);
    }

    #[test]
    fn offsets_that_do_not_cover_the_rows_are_an_error() {
        let x = Tensor::zeros(&[4, 3], DType::F32, Device::Cpu).unwrap();
        let w = Tensor::zeros(&[2, 2, 3], DType::F32, Device::Cpu).unwrap();
        let bad = Tensor::from_vec(vec![0i64, 3, 2], &[3]).unwrap();
        let e = x.grouped_matmul(&w, &bad).unwrap_err().to_string();
        assert!(e.contains("offsets must rise from 0 to the 4 rows"), "{e}");
        let short = Tensor::from_vec(vec![0i64, 4], &[2]).unwrap();
        let e = x.grouped_matmul(&w, &short).unwrap_err().to_string();
        assert!(e.contains("I64 offsets [E + 1]"), "{e}");
    }
}
