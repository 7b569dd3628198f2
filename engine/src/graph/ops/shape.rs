//! Operators that move data without arithmetic (reshapes, views, joins, splits, gathers) and
//! the shape arithmetic of exported graphs (Shape, Range, ConstantOfShape), which runs on the
//! host: a shape read back from a device would wait for it.

use super::{one, OpFn};
use crate::graph::node::{colocate, host_ints, host_tensor, input_pair, wrap_negative, Node};
use crate::io::onnx::OnnxAttribute;
use crate::ops::rearrange::PadMode;
use crate::{DType, Device, Result, Tensor};

pub const OPS: &[(&str, OpFn)] = &[
    ("Reshape", reshape),
    ("Flatten", |n| {
        let x = n.input(0)?;
        let axis = n.int("axis", 1)?;
        let axis = if axis == x.rank() as i64 {
            x.rank()
        } else {
            n.axis(axis, x.rank())?
        };
        let rows = x.shape()[..axis].iter().product::<usize>();
        let cols = x.shape()[axis..].iter().product::<usize>();
        one(x.reshape_to(&[rows, cols])?)
    }),
    ("Transpose", |n| {
        let x = n.input(0)?;
        let perm: Vec<isize> = match n.ints("perm")? {
            Some(p) => p.into_iter().map(|v| v as isize).collect(),
            None => (0..x.rank() as isize).rev().collect(),
        };
        one(x.permute(&perm)?)
    }),
    ("Squeeze", squeeze),
    ("Unsqueeze", unsqueeze),
    ("Concat", |n| {
        let inputs = colocate(&n.all_inputs()?)?;
        let rank = inputs.first().map_or(0, Tensor::rank);
        let axis = n.axis(n.int("axis", 0)?, rank)?;
        one(Tensor::cat(&inputs, axis as isize)?)
    }),
    ("Split", split),
    ("Slice", slice),
    ("Gather", gather),
    ("GatherElements", |n| {
        let [x, index] = input_pair(n)?;
        let axis = n.axis(n.int("axis", 0)?, x.rank())?;
        let index = wrap_negative(&index, x.shape()[axis])?;
        one(x.gather(axis as isize, &index)?)
    }),
    ("Shape", |n| {
        let dims: Vec<i64> = n.input(0)?.shape().iter().map(|&d| d as i64).collect();
        let rank = dims.len() as i64;
        let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
        let start = clamp(n.int("start", 0)?);
        let end = clamp(n.int("end", rank)?);
        one(host_tensor(&dims[start..end.max(start)])?)
    }),
    ("Size", |n| {
        one(Tensor::from_slice(&[n.input(0)?.numel() as i64], &[])?)
    }),
    ("ConstantOfShape", |n| {
        let shape = dims(n, &n.host_ints(0)?)?;
        let (value, dtype) = match n.tensor_attr("value")? {
            Some(t) => (t.to_vec_f64()?.first().copied().unwrap_or(0.0), t.dtype()),
            None => (0.0, DType::F32),
        };
        one(Tensor::full(value, &shape, dtype, Device::Cpu)?)
    }),
    ("Constant", constant),
    ("Expand", |n| {
        let x = n.input(0)?;
        let shape = dims(n, &n.host_ints(1)?)?;
        let rank = shape.len().max(x.rank());
        let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
        let (xs, ts) = (pad(x.shape()), pad(&shape));
        let target: Vec<usize> = xs
            .iter()
            .zip(&ts)
            .map(|(&a, &b)| if a == 1 { b } else { a })
            .collect();
        one(x.reshape_to(&xs)?.expand(&target)?)
    }),
    ("Tile", |n| {
        let x = n.input(0)?;
        let repeats = n.host_ints(1)?;
        n.require(
            repeats.len() == x.rank(),
            format!("repeats {repeats:?} for rank {}", x.rank()),
        )?;
        let mut y = x.clone();
        let total = repeats.iter().try_fold(x.numel().max(1) as u64, |acc, &r| {
            u64::try_from(r).ok().and_then(|r| acc.checked_mul(r))
        });
        n.require(
            total.is_some_and(|t| t <= MAX_ELEMENTS),
            format!("repeats {repeats:?} of shape {:?}", x.shape()),
        )?;
        for (d, &r) in repeats.iter().enumerate() {
            if r != 1 {
                let r = usize::try_from(r).map_err(|_| n.error(format!("repeat {r}")))?;
                y = Tensor::cat(&vec![y; r], d as isize)?;
            }
        }
        one(y)
    }),
    ("Range", range),
    ("OneHot", one_hot),
    ("Pad", pad),
    ("DepthToSpace", |n| depth_space(n, true)),
    ("SpaceToDepth", |n| depth_space(n, false)),
    ("CumSum", cumsum),
    ("TopK", topk),
];

/// The most elements shape arithmetic may ask for (2^34: 64 GiB of f32); beyond it a graph is
/// corrupt or hostile, and is refused before anything is allocated.
const MAX_ELEMENTS: u64 = 1 << 34;

/// Sizes from host integers, refusing negatives.
fn dims(n: &Node, values: &[i64]) -> Result<Vec<usize>> {
    values
        .iter()
        .map(|&v| {
            usize::try_from(v).map_err(|_| n.error(format!("a negative size {v} in {values:?}")))
        })
        .collect()
}

fn reshape(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let allow_zero = n.int("allowzero", 0)? != 0;
    let shape: Vec<isize> = n
        .host_ints(1)?
        .iter()
        .enumerate()
        .map(|(i, &v)| match v {
            0 if !allow_zero => x.shape().get(i).map(|&d| d as isize).ok_or_else(|| {
                n.error(format!(
                    "a 0 at position {i} copies a dim the input (rank {}) lacks",
                    x.rank()
                ))
            }),
            v => Ok(v as isize),
        })
        .collect::<Result<_>>()?;
    one(x.reshape(&shape)?)
}

/// The axes of Squeeze and Unsqueeze: an attribute before opset 13, an input after.
fn axes_of(n: &Node, input: usize) -> Result<Option<Vec<i64>>> {
    if n.opset >= 13 {
        n.opt_host_ints(input)
    } else {
        n.ints("axes")
    }
}

fn squeeze(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let mut axes: Vec<usize> = match axes_of(n, 1)? {
        Some(a) => a
            .iter()
            .map(|&a| n.axis(a, x.rank()))
            .collect::<Result<_>>()?,
        None => (0..x.rank()).filter(|&d| x.shape()[d] == 1).collect(),
    };
    axes.sort_unstable();
    let mut y = x.clone();
    for &a in axes.iter().rev() {
        n.require(
            x.shape()[a] == 1,
            format!("squeezing axis {a} of size {}", x.shape()[a]),
        )?;
        y = y.squeeze(a as isize)?;
    }
    one(y)
}

fn unsqueeze(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let axes = axes_of(n, 1)?.ok_or_else(|| n.error("needs axes"))?;
    let rank = x.rank() + axes.len();
    let mut axes: Vec<usize> = axes
        .iter()
        .map(|&a| n.axis(a, rank))
        .collect::<Result<_>>()?;
    axes.sort_unstable();
    let mut y = x.clone();
    for a in axes {
        y = y.unsqueeze(a as isize)?;
    }
    one(y)
}

fn split(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let axis = n.axis(n.int("axis", 0)?, x.rank())?;
    let size = x.shape()[axis];
    let given = if n.opset >= 13 {
        n.opt_host_ints(1)?
    } else {
        n.ints("split")?
    };
    let parts = n.def.outputs.len();
    let sizes: Vec<usize> = match given {
        Some(s) => dims(n, &s)?,
        None => {
            let count = match n.int("num_outputs", 0)? {
                0 => parts,
                c if c > 0 && c as usize <= size.max(1) => c as usize,
                c => return Err(n.error(format!("num_outputs = {c} for a dim of {size}"))),
            };
            let chunk = size.div_ceil(count.max(1));
            (0..count)
                .map(|i| chunk.min(size.saturating_sub(i * chunk)))
                .collect()
        }
    };
    n.require(
        sizes.iter().sum::<usize>() == size,
        format!("split sizes {sizes:?} for a dim of {size}"),
    )?;
    x.split_with_sizes(&sizes, axis as isize)
}

fn slice(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let (starts, ends, axes, steps) = if n.opset >= 10 {
        (
            n.host_ints(1)?,
            n.host_ints(2)?,
            n.opt_host_ints(3)?,
            n.opt_host_ints(4)?,
        )
    } else {
        (
            n.ints("starts")?.unwrap_or_default(),
            n.ints("ends")?.unwrap_or_default(),
            n.ints("axes")?,
            None,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    n.require(
        ends.len() == starts.len() && axes.len() == starts.len() && steps.len() == starts.len(),
        "starts, ends, axes and steps of different lengths",
    )?;
    let mut y = x.clone();
    for i in 0..starts.len() {
        let axis = n.axis(axes[i], x.rank())?;
        let dim = x.shape()[axis] as i64;
        let step = steps[i];
        n.require(step != 0, "a step of 0")?;
        let resolve = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
        let (start, end) = (resolve(starts[i]), resolve(ends[i]));
        if step == 1 {
            let (s, e) = (start.clamp(0, dim), end.clamp(0, dim));
            y = y.narrow(axis as isize, s as usize, (e - s).max(0) as usize)?;
            continue;
        }
        let index: Vec<i64> = if step > 0 {
            let (s, e) = (start.clamp(0, dim), end.clamp(0, dim));
            (s..e).step_by(step as usize).collect()
        } else {
            let (s, e) = (start.clamp(0, dim - 1), end.clamp(-1, dim - 1));
            let mut v = Vec::new();
            let mut i = s;
            while i > e {
                v.push(i);
                i += step;
            }
            v
        };
        let index = host_tensor(&index)?.to_device(y.device())?;
        y = y.index_select(axis as isize, &index)?;
    }
    one(y)
}

/// Gather along `axis` with indices of any shape: data[..., idx, ...] with idx's dims in place
/// of the axis.
fn gather(n: &Node) -> Result<Vec<Tensor>> {
    let [x, index] = input_pair(n)?;
    let axis = n.axis(n.int("axis", 0)?, x.rank())?;
    let index = wrap_negative(&index, x.shape()[axis])?;
    let picked = x.index_select(axis as isize, &index.reshape(&[-1])?)?;
    let shape: Vec<usize> = [&x.shape()[..axis], index.shape(), &x.shape()[axis + 1..]].concat();
    one(picked.reshape_to(&shape)?)
}

fn constant(n: &Node) -> Result<Vec<Tensor>> {
    let attr = n
        .def
        .attributes
        .first()
        .ok_or_else(|| n.error("holds no value"))?;
    one(match (&attr.0[..], &attr.1) {
        ("value", OnnxAttribute::Tensor(t)) => t.clone(),
        ("value_float", OnnxAttribute::Float(v)) => Tensor::from_slice(&[*v], &[])?,
        ("value_floats", OnnxAttribute::Floats(v)) => Tensor::from_slice(v, &[v.len()])?,
        ("value_int", OnnxAttribute::Int(v)) => Tensor::from_slice(&[*v], &[])?,
        ("value_ints", OnnxAttribute::Ints(v)) => host_tensor(v)?,
        (name, _) => return Err(n.error(format!("a constant given as `{name}` is not supported"))),
    })
}

fn range(n: &Node) -> Result<Vec<Tensor>> {
    let scalar = |i| -> Result<f64> {
        n.input(i)?
            .to_vec_f64()?
            .first()
            .copied()
            .ok_or_else(|| n.error(format!("input {i} is empty")))
    };
    let (start, limit, delta) = (scalar(0)?, scalar(1)?, scalar(2)?);
    n.require(delta != 0.0, "a delta of 0")?;
    let count = ((limit - start) / delta).ceil().max(0.0);
    n.require(
        count.is_finite() && count <= MAX_ELEMENTS as f64,
        format!("a range of {count} elements"),
    )?;
    let count = count as usize;
    let dtype = n.input(0)?.dtype();
    if dtype.is_float() {
        let v: Vec<f64> = (0..count).map(|i| start + i as f64 * delta).collect();
        return one(Tensor::from_f64s(&v, &[count], dtype)?);
    }
    let (s, d) = (start as i64, delta as i64);
    one(host_tensor(
        &(0..count as i64).map(|i| s + i * d).collect::<Vec<_>>(),
    )?)
}

fn one_hot(n: &Node) -> Result<Vec<Tensor>> {
    let indices = n.input(0)?;
    let depth = n.input(1)?.to_vec_f64()?.first().copied().unwrap_or(0.0) as i64;
    let total = (n.input(0)?.numel() as u64).saturating_mul(depth.max(0) as u64);
    n.require(depth > 0 && total <= MAX_ELEMENTS, format!("depth {depth}"))?;
    let values = n.input(2)?;
    let rank = indices.rank() + 1;
    let axis = n.axis(n.int("axis", -1)?, rank)?;
    let device = if indices.device() == Device::Cpu {
        values.device()
    } else {
        indices.device()
    };
    let indices = wrap_negative(&indices.to_device(device)?, depth as usize)?;
    let mut classes_shape = vec![1usize; rank];
    classes_shape[axis] = depth as usize;
    let classes = Tensor::arange(0.0, depth as f64, 1.0, DType::I64)?
        .reshape_to(&classes_shape)?
        .to_device(device)?;
    let hot = indices.unsqueeze(axis as isize)?.eq(&classes)?;
    let v = values.to_device(device)?;
    let (off, on) = (
        v.narrow(0, 0, 1)?.reshape(&[])?,
        v.narrow(0, 1, 1)?.reshape(&[])?,
    );
    one(Tensor::where_cond(&hot, &on, &off)?)
}

fn pad(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let rank = x.rank();
    let (pads, value, axes) = if n.opset >= 11 {
        let value = n
            .host_floats(2)?
            .and_then(|v| v.first().copied())
            .unwrap_or(0.0);
        (n.host_ints(1)?, value, n.opt_host_ints(3)?)
    } else {
        let pads = n.ints("pads")?.ok_or_else(|| n.error("needs pads"))?;
        (pads, f64::from(n.float("value", 0.0)?), None)
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a.iter().map(|&a| n.axis(a, rank)).collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    n.require(
        pads.len() == 2 * axes.len(),
        format!("{} pads for {} axes", pads.len(), axes.len()),
    )?;
    n.require(pads.iter().all(|&p| p >= 0), "negative pads")?;
    let mut per_dim = vec![(0usize, 0usize); rank];
    for (i, &a) in axes.iter().enumerate() {
        per_dim[a] = (pads[i] as usize, pads[i + axes.len()] as usize);
    }
    let mode = match n.string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant(value),
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Replicate,
        "wrap" => PadMode::Circular,
        other => return Err(n.error(format!("mode `{other}` is not a padding mode"))),
    };
    let pairs: Vec<usize> = per_dim.iter().rev().flat_map(|&(b, e)| [b, e]).collect();
    if pairs.iter().all(|&p| p == 0) {
        return one(x.clone());
    }
    one(x.pad(&pairs, mode)?)
}

/// DepthToSpace (DCR or CRD order) and SpaceToDepth, as reshape, permute, reshape.
fn depth_space(n: &Node, to_space: bool) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let b = usize::try_from(n.int("blocksize", 0)?)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| n.error("attribute `blocksize` must be positive"))?;
    let &[bn, c, h, w] = x.shape() else {
        return Err(n.error(format!("needs [N, C, H, W], got {:?}", x.shape())));
    };
    if !to_space {
        n.require(
            h % b == 0 && w % b == 0,
            format!("H, W ({h}, {w}) not divisible by {b}"),
        )?;
        let y = x
            .reshape_to(&[bn, c, h / b, b, w / b, b])?
            .permute(&[0, 3, 5, 1, 2, 4])?
            .reshape_to(&[bn, c * b * b, h / b, w / b])?;
        return one(y);
    }
    n.require(c % (b * b) == 0, format!("C = {c} not divisible by {b}²"))?;
    let oc = c / (b * b);
    let y = if n.string("mode", "DCR")? == "CRD" {
        x.reshape_to(&[bn, oc, b, b, h, w])?
            .permute(&[0, 1, 4, 2, 5, 3])?
    } else {
        x.reshape_to(&[bn, b, b, oc, h, w])?
            .permute(&[0, 3, 4, 1, 5, 2])?
    };
    one(y.reshape_to(&[bn, oc, h * b, w * b])?)
}

fn cumsum(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let axis = n.axis(
        host_ints(n.input(1)?)?.first().copied().unwrap_or(0),
        x.rank(),
    )? as isize;
    let reverse = n.int("reverse", 0)? != 0;
    let exclusive = n.int("exclusive", 0)? != 0;
    let x2 = if reverse { x.flip(&[axis])? } else { x.clone() };
    let mut y = x2.cumsum(axis)?;
    if exclusive {
        y = y.sub(&x2)?;
    }
    one(if reverse { y.flip(&[axis])? } else { y })
}

fn topk(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let k = if n.opset >= 10 {
        n.host_ints(1)?.first().copied().unwrap_or(0)
    } else {
        n.int("k", 0)?
    };
    let k = usize::try_from(k).map_err(|_| n.error(format!("k = {k}")))?;
    let axis = n.axis(n.int("axis", -1)?, x.rank())?;
    n.require(n.int("sorted", 1)? == 1, "sorted = 0")?;
    let (values, indices) = x.topk(k, axis as isize, n.int("largest", 1)? != 0)?;
    Ok(vec![values, indices.to_dtype(DType::I64)?])
}
