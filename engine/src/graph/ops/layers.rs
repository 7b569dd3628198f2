//! The operators of layers: convolutions, normalizations, pooling, Gemm/MatMul and Softmax.
//! 1-D convolutions and pools run as 2-D ones over a height of one; padding the engine's ops
//! take only symmetrically is applied before them as an explicit pad.

use super::{one, OpFn};
use crate::graph::node::{colocate, Node};
use crate::ops::conv::Conv2dOptions;
use crate::ops::conv_transpose::ConvTranspose2dOptions;
use crate::ops::rearrange::PadMode;
use crate::{Result, Tensor};

pub const OPS: &[(&str, OpFn)] = &[
    ("Conv", conv),
    ("ConvTranspose", conv_transpose),
    ("BatchNormalization", batch_norm),
    ("InstanceNormalization", |n| {
        let x = n.input(0)?;
        let eps = f64::from(n.float("epsilon", 1e-5)?);
        let c = *x
            .shape()
            .get(1)
            .ok_or_else(|| n.error("needs [N, C, ...]"))?;
        one(x.group_norm(c, Some(n.input(1)?), Some(n.input(2)?), eps)?)
    }),
    ("LayerNormalization", layer_norm),
    ("GroupNormalization", group_norm),
    ("MaxPool", |n| pool(n, Pool::Max)),
    ("AveragePool", |n| pool(n, Pool::Average)),
    ("GlobalAveragePool", |n| global_pool(n, Pool::Average)),
    ("GlobalMaxPool", |n| global_pool(n, Pool::Max)),
    ("MatMul", |n| {
        let t = colocate(&[n.input(0)?.clone(), n.input(1)?.clone()])?;
        one(t[0].matmul(&t[1])?)
    }),
    ("Gemm", gemm),
    ("Einsum", |n| {
        let equation = n.string("equation", "")?;
        one(Tensor::einsum(&equation, &colocate(&n.all_inputs()?)?)?)
    }),
    ("Softmax", |n| softmax(n, false)),
    ("LogSoftmax", |n| softmax(n, true)),
];

/// The spatial geometry every convolution and pool attribute set describes.
struct Window {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// Per spatial dim: (begin, end).
    pads: Vec<(usize, usize)>,
}

fn positive(n: &Node, name: &str, v: Vec<i64>) -> Result<Vec<usize>> {
    v.into_iter()
        .map(|x| {
            usize::try_from(x)
                .ok()
                .filter(|&x| x > 0 || name == "pads")
                .ok_or_else(|| n.error(format!("attribute `{name}` holds {x}")))
        })
        .collect()
}

/// Reads kernel, strides, dilations and pads (with auto_pad) for a window over `spatial`.
fn window(n: &Node, kernel: Vec<usize>, spatial: &[usize]) -> Result<Window> {
    let dims = kernel.len();
    if dims != spatial.len() || !(1..=2).contains(&dims) || kernel.contains(&0) {
        return Err(n.error(format!(
            "a kernel {kernel:?} over spatial dims {spatial:?} is not supported: 1-D and 2-D windows of positive size only"
        )));
    }
    let list = |name: &str, default: usize| -> Result<Vec<usize>> {
        match n.ints(name)? {
            Some(v) if v.len() == dims => positive(n, name, v),
            Some(v) => Err(n.error(format!(
                "attribute `{name}` has {} values for {dims} spatial dims",
                v.len()
            ))),
            None => Ok(vec![default; dims]),
        }
    };
    let strides = list("strides", 1)?;
    let dilations = list("dilations", 1)?;
    let pads = match n.string("auto_pad", "NOTSET")?.as_str() {
        "NOTSET" => match n.ints("pads")? {
            Some(p) if p.len() == 2 * dims => {
                let p = positive(n, "pads", p)?;
                (0..dims).map(|i| (p[i], p[i + dims])).collect()
            }
            Some(p) => {
                return Err(n.error(format!(
                    "attribute `pads` has {} values for {dims} spatial dims",
                    p.len()
                )))
            }
            None => vec![(0, 0); dims],
        },
        "VALID" => vec![(0, 0); dims],
        mode @ ("SAME_UPPER" | "SAME_LOWER") => (0..dims)
            .map(|i| {
                let out = spatial[i].div_ceil(strides[i]).max(1);
                let span = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out - 1) * strides[i] + span).saturating_sub(spatial[i]);
                let small = total / 2;
                if mode == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                }
            })
            .collect(),
        other => return Err(n.error(format!("auto_pad = `{other}` is not a padding mode"))),
    };
    Ok(Window {
        kernel,
        strides,
        dilations,
        pads,
    })
}

/// [N, C, L] as [N, C, 1, L], so 1-D layers run as 2-D ones; 4-D passes; other ranks refuse.
fn as_2d(n: &Node, x: &Tensor) -> Result<Tensor> {
    match x.rank() {
        3 => x.unsqueeze(2),
        4 => Ok(x.clone()),
        r => Err(n.error(format!(
            "a rank-{r} input (shape {:?}) is not supported: 1-D and 2-D windows only",
            x.shape()
        ))),
    }
}

/// Window attributes of a 1-D layer, lifted to 2-D with a height of one.
fn lift(w: Window) -> Window {
    if w.kernel.len() == 2 {
        return w;
    }
    let one_more = |v: Vec<usize>, first| [vec![first], v].concat();
    Window {
        kernel: one_more(w.kernel, 1),
        strides: one_more(w.strides, 1),
        dilations: one_more(w.dilations, 1),
        pads: [vec![(0, 0)], w.pads].concat(),
    }
}

/// Pads `x` [N, C, H, W] by per-dim (begin, end) pairs with `value`, when any is non-zero.
fn pad_spatial(x: &Tensor, pads: &[(usize, usize)], value: f64) -> Result<Tensor> {
    if pads.iter().all(|&(b, e)| b == 0 && e == 0) {
        return Ok(x.clone());
    }
    let (h, w) = (pads[0], pads[1]);
    x.pad(&[w.0, w.1, h.0, h.1], PadMode::Constant(value))
}

fn symmetric(pads: &[(usize, usize)]) -> bool {
    pads.iter().all(|&(b, e)| b == e)
}

fn conv(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let weight = n.input(1)?;
    let rank = x.rank();
    let spatial = x.shape().get(2..).unwrap_or_default().to_vec();
    let kernel: Vec<usize> = weight.shape().get(2..).unwrap_or_default().to_vec();
    if let Some(k) = n.ints("kernel_shape")? {
        n.require(
            k.iter().map(|&v| v as usize).eq(kernel.iter().copied()),
            format!("kernel_shape {k:?} differing from the weight's {kernel:?}"),
        )?;
    }
    let w = lift(window(n, kernel, &spatial)?);
    let groups = n.int("group", 1)?;
    let (x2, w2) = (as_2d(n, x)?, as_2d(n, weight)?);
    let (x2, padding) = if symmetric(&w.pads) {
        (x2, (w.pads[0].0, w.pads[1].0))
    } else {
        (pad_spatial(&x2, &w.pads, 0.0)?, (0, 0))
    };
    let opts = Conv2dOptions {
        stride: (w.strides[0], w.strides[1]),
        padding,
        dilation: (w.dilations[0], w.dilations[1]),
        groups: usize::try_from(groups).map_err(|_| n.error(format!("group = {groups}")))?,
    };
    let y = x2.conv2d(&w2, n.opt_input(2), opts)?;
    one(if rank == 3 { y.squeeze(2)? } else { y })
}

fn conv_transpose(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let weight = n.input(1)?;
    n.require(!n.has("output_shape"), "attribute `output_shape`")?;
    let rank = x.rank();
    let spatial = x.shape().get(2..).unwrap_or_default().to_vec();
    let kernel: Vec<usize> = weight.shape().get(2..).unwrap_or_default().to_vec();
    n.require(
        matches!(n.string("auto_pad", "NOTSET")?.as_str(), "NOTSET" | "VALID"),
        "auto_pad SAME_* on ConvTranspose",
    )?;
    let w = lift(window(n, kernel.clone(), &spatial)?);
    let out_pad = match n.ints("output_padding")? {
        Some(v) if v.len() == kernel.len() => positive(n, "pads", v)?,
        Some(v) => return Err(n.error(format!("output_padding {v:?}"))),
        None => vec![0; kernel.len()],
    };
    let out_pad = if out_pad.len() == 1 {
        (0, out_pad[0])
    } else {
        (out_pad[0], out_pad[1])
    };
    let groups = usize::try_from(n.int("group", 1)?).map_err(|_| n.error("group < 0"))?;
    let (x2, w2) = (as_2d(n, x)?, as_2d(n, weight)?);
    let opts = |padding, output_padding| ConvTranspose2dOptions {
        stride: (w.strides[0], w.strides[1]),
        padding,
        output_padding,
        dilation: (w.dilations[0], w.dilations[1]),
        groups,
    };
    let y = if symmetric(&w.pads) {
        x2.conv_transpose2d(
            &w2,
            n.opt_input(2),
            opts((w.pads[0].0, w.pads[1].0), out_pad),
        )?
    } else {
        // Asymmetric pads crop the full output; the bias goes on after the crop.
        let full = x2.conv_transpose2d(&w2, None, opts((0, 0), (0, 0)))?;
        let mut y = full;
        for (d, ((b, e), extra)) in w.pads.iter().zip([out_pad.0, out_pad.1]).enumerate() {
            let size = y.shape()[2 + d];
            let want = (size + extra)
                .checked_sub(b + e)
                .ok_or_else(|| n.error(format!("pads {:?} crop more than the output", w.pads)))?;
            let kept = want.min(size - b);
            y = y.narrow(2 + d as isize, *b, kept)?;
            if kept < want {
                let mut p = [0; 4];
                p[if d == 0 { 3 } else { 1 }] = want - kept;
                y = y.pad(&p, PadMode::Constant(0.0))?;
            }
        }
        match n.opt_input(2) {
            Some(b) => y.add(&b.reshape(&[1, -1, 1, 1])?)?,
            None => y,
        }
    };
    one(if rank == 3 { y.squeeze(2)? } else { y })
}

/// BatchNormalization in inference (running statistics); training mode is refused.
fn batch_norm(n: &Node) -> Result<Vec<Tensor>> {
    n.require(n.int("training_mode", 0)? == 0, "training_mode = 1")?;
    n.require(
        n.def.outputs.iter().skip(1).all(String::is_empty),
        "the running-statistics outputs (training mode)",
    )?;
    let x = n.input(0)?;
    let eps = f64::from(n.float("epsilon", 1e-5)?);
    let (scale, bias, mean, var) = (n.input(1)?, n.input(2)?, n.input(3)?, n.input(4)?);
    if x.rank() == 4 {
        return one(x.batch_norm(Some((mean, var)), Some(scale), Some(bias), false, 0.0, eps)?);
    }
    // Other ranks: y = x a + b with a = scale / sqrt(var + eps), b = bias - mean a.
    let mut per_channel = vec![1isize; x.rank().max(2)];
    per_channel[1] = -1;
    let a = scale.div(&var.add_scalar(eps)?.sqrt()?)?;
    let b = bias.sub(&mean.mul(&a)?)?;
    one(x
        .mul(&a.reshape(&per_channel)?)?
        .add(&b.reshape(&per_channel)?)?)
}

/// LayerNormalization over the dims from `axis` on, with scale and bias broadcast over them.
fn layer_norm(n: &Node) -> Result<Vec<Tensor>> {
    n.require(
        n.def.outputs.iter().skip(1).all(String::is_empty),
        "the Mean and InvStdDev outputs",
    )?;
    let x = n.input(0)?;
    let axis = n.axis(n.int("axis", -1)?, x.rank())?;
    let eps = f64::from(n.float("epsilon", 1e-5)?);
    let (scale, bias) = (n.input(1)?, n.opt_input(2));
    let last = x.rank() - 1;
    let width = x.shape()[last];
    let fits = |t: &Tensor| t.rank() == 1 && t.numel() == width;
    if axis == last && fits(scale) && bias.is_none_or(fits) {
        return one(x.layer_norm(Some(scale), bias, eps)?);
    }
    let rows: isize = x.shape()[..axis].iter().product::<usize>() as isize;
    let y = x
        .reshape(&[rows, -1])?
        .layer_norm(None, None, eps)?
        .reshape_to(x.shape())?
        .mul(scale)?;
    one(match bias {
        Some(b) => y.add(b)?,
        None => y,
    })
}

/// GroupNormalization: opset 18 gives scale and bias per group, opset 21 per channel.
fn group_norm(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let groups = usize::try_from(n.int("num_groups", 0)?)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| n.error("attribute `num_groups` must be positive"))?;
    let eps = f64::from(n.float("epsilon", 1e-5)?);
    let c = *x
        .shape()
        .get(1)
        .ok_or_else(|| n.error("needs [N, C, ...]"))?;
    let per_channel = |t: &Tensor| -> Result<Tensor> {
        if t.numel() == groups && groups != c {
            t.repeat_interleave(c / groups, 0)
        } else {
            Ok(t.clone())
        }
    };
    let (scale, bias) = (per_channel(n.input(1)?)?, per_channel(n.input(2)?)?);
    one(x.group_norm(groups, Some(&scale), Some(&bias), eps)?)
}

#[derive(Clone, Copy, PartialEq)]
enum Pool {
    Max,
    Average,
}

fn pool(n: &Node, kind: Pool) -> Result<Vec<Tensor>> {
    n.require(
        n.def.outputs.iter().skip(1).all(String::is_empty),
        "MaxPool's Indices output",
    )?;
    n.require(n.int("storage_order", 0)? == 0, "storage_order = 1")?;
    let x = n.input(0)?;
    let kernel = n
        .ints("kernel_shape")?
        .ok_or_else(|| n.error("attribute `kernel_shape` is required"))?;
    let kernel = positive(n, "kernel_shape", kernel)?;
    let spatial = x.shape().get(2..).unwrap_or_default().to_vec();
    n.require(
        kernel.len() == spatial.len(),
        format!("a {}-D kernel over {}-D input", kernel.len(), spatial.len()),
    )?;
    let w = lift(window(n, kernel, &spatial)?);
    n.require(
        w.dilations.iter().all(|&d| d == 1),
        "dilations other than 1",
    )?;
    let x2 = as_2d(n, x)?;
    let size = [x2.shape()[2], x2.shape()[3]];
    let ceil = n.int("ceil_mode", 0)? != 0;
    // Output sizes as ONNX (and torch) define them; with ceil_mode a window must start inside
    // the input or its begin padding.
    let mut out = [0usize; 2];
    let mut extra = [0usize; 2];
    for d in 0..2 {
        let (k, s, (b, e)) = (w.kernel[d], w.strides[d], w.pads[d]);
        let span = (size[d] + b + e).checked_sub(k).ok_or_else(|| {
            n.error(format!(
                "kernel {:?} is larger than the padded input",
                w.kernel
            ))
        })?;
        let mut o = if ceil { span.div_ceil(s) } else { span / s } + 1;
        if ceil && (o - 1) * s >= size[d] + b {
            o -= 1;
        }
        out[d] = o;
        extra[d] = ((o - 1) * s + k).saturating_sub(size[d] + b + e);
    }
    let pads = [
        (w.pads[0].0, w.pads[0].1 + extra[0]),
        (w.pads[1].0, w.pads[1].1 + extra[1]),
    ];
    let (kernel, stride) = ((w.kernel[0], w.kernel[1]), (w.strides[0], w.strides[1]));
    let fits_engine = symmetric(&pads) && 2 * pads[0].0 <= kernel.0 && 2 * pads[1].0 <= kernel.1;
    let y = match kind {
        Pool::Max if fits_engine => x2.max_pool2d(kernel, stride, (pads[0].0, pads[1].0))?,
        Pool::Max => {
            pad_spatial(&x2, &pads, f64::NEG_INFINITY)?.max_pool2d(kernel, stride, (0, 0))?
        }
        Pool::Average => {
            let include_pad = n.int("count_include_pad", 0)? != 0;
            let sum_avg = pad_spatial(&x2, &pads, 0.0)?.avg_pool2d(kernel, stride, (0, 0))?;
            // Each window's divisor: the elements it covers inside the input, or inside the
            // input and its declared padding (count_include_pad), never the ceil_mode overhang.
            let covered = |d: usize| -> Vec<f64> {
                let (b, e) = w.pads[d];
                let (lo, hi) = if include_pad {
                    (0, size[d] + b + e)
                } else {
                    (b, size[d] + b)
                };
                (0..out[d])
                    .map(|o| {
                        let start = o * w.strides[d];
                        let end = start + w.kernel[d];
                        end.min(hi).saturating_sub(start.max(lo)) as f64
                    })
                    .collect()
            };
            let (rows, cols) = (covered(0), covered(1));
            let area = (kernel.0 * kernel.1) as f64;
            if rows.iter().all(|&r| r == kernel.0 as f64)
                && cols.iter().all(|&c| c == kernel.1 as f64)
            {
                sum_avg
            } else {
                let scale: Vec<f64> = rows
                    .iter()
                    .flat_map(|r| cols.iter().map(move |c| area / (r * c).max(1.0)))
                    .collect();
                let scale = Tensor::from_f64s(&scale, &[1, 1, out[0], out[1]], sum_avg.dtype())?
                    .to_device(sum_avg.device())?;
                sum_avg.mul(&scale)?
            }
        }
    };
    one(if x.rank() == 3 { y.squeeze(2)? } else { y })
}

fn global_pool(n: &Node, kind: Pool) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let dims: Vec<isize> = (2..x.rank() as isize).collect();
    one(match kind {
        Pool::Average => x.mean_dims(&dims, true)?,
        Pool::Max => x.max_dims(&dims, true)?,
    })
}

/// alpha op(A) op(B) + beta C.
fn gemm(n: &Node) -> Result<Vec<Tensor>> {
    let mut inputs = vec![n.input(0)?.clone(), n.input(1)?.clone()];
    inputs.extend(n.opt_input(2).cloned());
    let t = colocate(&inputs)?;
    let a = if n.int("transA", 0)? != 0 {
        t[0].t()?
    } else {
        t[0].clone()
    };
    let b = if n.int("transB", 0)? != 0 {
        t[1].t()?
    } else {
        t[1].clone()
    };
    let (alpha, beta) = (
        f64::from(n.float("alpha", 1.0)?),
        f64::from(n.float("beta", 1.0)?),
    );
    let mut y = a.matmul(&b)?;
    if alpha != 1.0 {
        y = y.mul_scalar(alpha)?;
    }
    if let Some(c) = t.get(2) {
        y = y.add(&if beta != 1.0 {
            c.mul_scalar(beta)?
        } else {
            c.clone()
        })?;
    }
    one(y)
}

/// Softmax along `axis`; before opset 13 over everything from `axis` on, as one flat row.
fn softmax(n: &Node, log: bool) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let f = |t: &Tensor, d: isize| if log { t.log_softmax(d) } else { t.softmax(d) };
    if n.opset >= 13 {
        let axis = n.axis(n.int("axis", -1)?, x.rank())?;
        return one(f(x, axis as isize)?);
    }
    let axis = n.axis(n.int("axis", 1)?, x.rank())?;
    let rows = x.shape()[..axis].iter().product::<usize>() as isize;
    one(f(&x.reshape(&[rows, -1])?, -1)?.reshape_to(x.shape())?)
}
