//! Operators that pick or place elements by computed positions: GatherND, ScatterND,
//! ScatterElements, NonZero, Trilu and Hardmax. Positions become flat row indices of
//! index_select / index_copy_ / scatter_add, so these run on every device.

use super::{one, OpFn};
use crate::graph::node::{colocate, host_ints, host_tensor, wrap_negative, Node};
use crate::{DType, Result, Tensor};

pub const OPS: &[(&str, OpFn)] = &[
    ("GatherND", gather_nd),
    ("ScatterND", scatter_nd),
    ("ScatterElements", scatter_elements),
    ("NonZero", |n| {
        let x = n.input(0)?;
        let values = x.to_vec_f64()?;
        let strides: Vec<usize> = (0..x.rank())
            .map(|d| x.shape()[d + 1..].iter().product())
            .collect();
        let hits: Vec<usize> = (0..values.len()).filter(|&i| values[i] != 0.0).collect();
        let mut rows = Vec::with_capacity(x.rank() * hits.len());
        for (d, &stride) in strides.iter().enumerate() {
            rows.extend(hits.iter().map(|&i| ((i / stride) % x.shape()[d]) as i64));
        }
        one(Tensor::from_vec(rows, &[x.rank(), hits.len()])?)
    }),
    ("Trilu", |n| {
        let x = n.input(0)?;
        n.require(x.rank() >= 2, format!("a rank-{} input", x.rank()))?;
        let k = n
            .opt_host_ints(1)?
            .and_then(|v| v.first().copied())
            .unwrap_or(0);
        let upper = n.int("upper", 1)? != 0;
        let (rows, cols) = (x.shape()[x.rank() - 2], x.shape()[x.rank() - 1]);
        let keep: Vec<f64> = (0..rows as i64)
            .flat_map(|i| {
                (0..cols as i64).map(move |j| if upper { j - i >= k } else { j - i <= k })
            })
            .map(|b| if b { 1.0 } else { 0.0 })
            .collect();
        let mask = Tensor::from_f64s(&keep, &[rows, cols], DType::Bool)?.to_device(x.device())?;
        one(Tensor::where_cond(&mask, x, &Tensor::zeros_like(x)?)?)
    }),
    ("Hardmax", |n| {
        let x = n.input(0)?;
        let axis = n.axis(n.int("axis", if n.opset >= 13 { -1 } else { 1 })?, x.rank())?;
        let flat = if n.opset >= 13 {
            x.clone()
        } else {
            let rows = x.shape()[..axis].iter().product::<usize>() as isize;
            x.reshape(&[rows, -1])?
        };
        let a = if n.opset >= 13 { axis } else { 1 };
        let best = flat.argmax(Some(a as isize), true)?;
        let mut shape = vec![1usize; flat.rank()];
        shape[a] = flat.shape()[a];
        let classes = Tensor::arange(0.0, flat.shape()[a] as f64, 1.0, DType::I64)?
            .reshape_to(&shape)?
            .to_device(x.device())?;
        let hot = best
            .to_dtype(DType::I64)?
            .eq(&classes)?
            .to_dtype(x.dtype())?;
        one(hot.reshape_to(x.shape())?)
    }),
];

/// Flat row numbers into `data`'s first `k` dims for an index tensor [..., k], and the rows'
/// count; negative positions count from the end.
fn rows_of(n: &Node, data: &Tensor, index: &Tensor) -> Result<(Vec<i64>, usize)> {
    let k = *index
        .shape()
        .last()
        .ok_or_else(|| n.error("indices of rank 0"))?;
    n.require(
        k <= data.rank(),
        format!("index tuples of {k} into rank {}", data.rank()),
    )?;
    let positions = host_ints(index)?;
    let dims = &data.shape()[..k];
    let mut rows = Vec::with_capacity(positions.len() / k.max(1));
    for tuple in positions.chunks(k.max(1)) {
        let mut row = 0i64;
        for (&p, &d) in tuple.iter().zip(dims) {
            let p = if p < 0 { p + d as i64 } else { p };
            if p < 0 || p >= d as i64 {
                return Err(n.error(format!("index {tuple:?} is out of range for dims {dims:?}")));
            }
            row = row * d as i64 + p;
        }
        rows.push(row);
    }
    if k == 0 {
        rows = vec![0; positions.len().max(1)];
    }
    Ok((rows, k))
}

fn gather_nd(n: &Node) -> Result<Vec<Tensor>> {
    n.require(n.int("batch_dims", 0)? == 0, "batch_dims other than 0")?;
    let (data, index) = (n.input(0)?, n.input(1)?);
    let (rows, k) = rows_of(n, data, index)?;
    let lead: usize = data.shape()[..k].iter().product();
    let rest = &data.shape()[k..];
    let flat = data.reshape_to(&[&[lead], rest].concat())?;
    let picked = flat.index_select(0, &host_tensor(&rows)?.to_device(data.device())?)?;
    let shape: Vec<usize> = [&index.shape()[..index.rank() - 1], rest].concat();
    one(picked.reshape_to(&shape)?)
}

fn scatter_nd(n: &Node) -> Result<Vec<Tensor>> {
    n.require(n.string("reduction", "none")? == "none", "a reduction")?;
    let t = colocate(&[n.input(0)?.clone(), n.input(2)?.clone()])?;
    let (data, updates, index) = (&t[0], &t[1], n.input(1)?);
    let (rows, k) = rows_of(n, data, index)?;
    let lead: usize = data.shape()[..k].iter().product();
    let rest = &data.shape()[k..];
    let out = data
        .contiguous_copy()?
        .reshape_to(&[&[lead], rest].concat())?;
    let src = updates.reshape_to(&[&[rows.len()], rest].concat())?;
    out.index_copy_(
        0,
        &host_tensor(&rows)?.to_device(data.device())?,
        &src.to_dtype(out.dtype())?,
    )?;
    one(out.reshape_to(data.shape())?)
}

/// ScatterElements: `none` replaces (positions are unique, as ONNX requires), `add` adds.
fn scatter_elements(n: &Node) -> Result<Vec<Tensor>> {
    let t = colocate(&[
        n.input(0)?.clone(),
        n.input(1)?.clone(),
        n.input(2)?.clone(),
    ])?;
    let (data, index, updates) = (&t[0], &t[1], &t[2]);
    let axis = n.axis(n.int("axis", 0)?, data.rank())? as isize;
    let index = wrap_negative(index, data.shape()[axis as usize])?;
    let updates = updates.to_dtype(data.dtype())?;
    match n.string("reduction", "none")?.as_str() {
        "add" => one(data.scatter_add(axis, &index, &updates)?),
        "none" => {
            let zeros = Tensor::zeros_like(data)?;
            let hit = zeros
                .scatter_add(axis, &index, &Tensor::ones_like(&updates)?)?
                .gt_scalar(0.0)?;
            let placed = zeros.scatter_add(axis, &index, &updates)?;
            one(Tensor::where_cond(&hit, &placed, data)?)
        }
        other => Err(n.error(format!("reduction `{other}` is not supported"))),
    }
}
