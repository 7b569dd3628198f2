//! LSTM, GRU and RNN nodes, run by the scan in `nn::recurrent` after their stacked gates are
//! reordered to PyTorch's (ONNX stacks LSTM gates i, o, f, c and GRU gates z, r, h).

use super::OpFn;
use crate::graph::node::{host_ints, Node};
use crate::nn::recurrent::{scan, Cell, Direction};
use crate::{Result, Tensor};

pub const OPS: &[(&str, OpFn)] = &[
    ("LSTM", |n| recurrent(n, Cell::Lstm)),
    ("GRU", |n| {
        let reset_after = n.int("linear_before_reset", 0)? != 0;
        recurrent(n, Cell::Gru { reset_after })
    }),
    ("RNN", |n| recurrent(n, Cell::Rnn { relu: false })),
];

/// ONNX's gate blocks in PyTorch's order: LSTM (i, o, f, c) -> (i, f, g, o) reads blocks
/// 0, 2, 3, 1; GRU (z, r, h) -> (r, z, n) reads 1, 0, 2.
fn torch_order(cell: Cell) -> &'static [usize] {
    match cell {
        Cell::Lstm => &[0, 2, 3, 1],
        Cell::Gru { .. } => &[1, 0, 2],
        Cell::Rnn { .. } => &[0],
    }
}

/// The gate blocks of `w` (stacked along dim 0, each `hidden` rows) reordered.
fn reorder(w: &Tensor, cell: Cell, hidden: usize) -> Result<Tensor> {
    let blocks = torch_order(cell)
        .iter()
        .map(|&b| w.narrow(0, b * hidden, hidden))
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&blocks, 0)
}

fn recurrent(n: &Node, cell: Cell) -> Result<Vec<Tensor>> {
    n.require(
        cell != Cell::Lstm || n.opt_input(7).is_none(),
        "peephole weights (input P)",
    )?;
    n.require(!n.has("clip"), "attribute `clip`")?;
    n.require(n.int("input_forget", 0)? == 0, "input_forget = 1")?;
    if let Some(acts) = n.def.attribute("activations") {
        let defaults: &[&str] = match cell {
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
            Cell::Gru { .. } => &["Sigmoid", "Tanh"],
            Cell::Rnn { .. } => &["Tanh"],
        };
        let given = match acts {
            crate::io::onnx::OnnxAttribute::Strings(s) => s
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        let per_direction = defaults.len();
        let all_default = !given.is_empty()
            && given
                .iter()
                .enumerate()
                .all(|(i, a)| a.eq_ignore_ascii_case(defaults[i % per_direction]));
        n.require(all_default, format!("activations {given:?}"))?;
    }
    let layout = n.int("layout", 0)?;
    let x = n.input(0)?;
    let (w, r) = (n.input(1)?, n.input(2)?);
    let gates = cell.gates();
    let fits = x.rank() == 3
        && w.rank() == 3
        && r.rank() == 3
        && w.shape()[1] == gates * r.shape()[2]
        && r.shape()[1] == w.shape()[1]
        && w.shape()[2] == x.shape()[2]
        && r.shape()[0] == w.shape()[0];
    if !fits {
        return Err(n.error(format!(
            "needs X [T, B, I], W [D, {gates}H, I] and R [D, {gates}H, H], got {:?}, {:?} and {:?}",
            x.shape(),
            w.shape(),
            r.shape()
        )));
    }
    // [T, B, I] in the scan; layout 1 gives [B, T, I].
    let x = if layout == 1 {
        x.transpose(0, 1)?
    } else {
        x.clone()
    };
    let directions = w.shape()[0];
    let hidden = r.shape()[2];
    n.require(
        matches!(n.int("hidden_size", 0)?, 0) || n.int("hidden_size", 0)? as usize == hidden,
        format!("hidden_size differing from R's {hidden}"),
    )?;
    let direction = n.string("direction", "forward")?;
    let reverse_only = match direction.as_str() {
        "forward" => false,
        "reverse" => true,
        "bidirectional" => false,
        other => return Err(n.error(format!("direction `{other}`"))),
    };
    n.require(
        directions == if direction == "bidirectional" { 2 } else { 1 },
        format!("{directions} weight directions for direction `{direction}`"),
    )?;
    let batch = x.shape()[1];
    let lengths: Option<Vec<usize>> = match n.opt_input(4) {
        Some(l) => Some(
            host_ints(l)?
                .into_iter()
                .map(|v| v.max(0) as usize)
                .collect(),
        ),
        None => None,
    };
    let state = |i: usize| -> Result<Option<Tensor>> {
        match n.opt_input(i) {
            Some(t) if layout == 1 => Ok(Some(t.transpose(0, 1)?)),
            Some(t) => Ok(Some(t.clone())),
            None => Ok(None),
        }
    };
    let (h0, c0) = (state(5)?, if cell == Cell::Lstm { state(6)? } else { None });
    let (mut outputs, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..directions {
        let pick = |t: &Tensor| -> Result<Tensor> { t.narrow(0, d, 1)?.squeeze(0) };
        let w_ih = reorder(&pick(w)?, cell, hidden)?;
        let w_hh = reorder(&pick(r)?, cell, hidden)?;
        let (b_ih, b_hh) = match n.opt_input(3) {
            Some(b) => {
                let b = pick(b)?;
                (
                    Some(reorder(&b.narrow(0, 0, gates * hidden)?, cell, hidden)?),
                    Some(reorder(
                        &b.narrow(0, gates * hidden, gates * hidden)?,
                        cell,
                        hidden,
                    )?),
                )
            }
            None => (None, None),
        };
        let h = match &h0 {
            Some(h) => pick(h)?,
            None => Tensor::zeros(&[batch, hidden], x.dtype(), x.device())?,
        };
        let c = c0.as_ref().map(pick).transpose()?;
        let weights = Direction {
            w_ih: &w_ih,
            w_hh: &w_hh,
            b_ih: b_ih.as_ref(),
            b_hh: b_hh.as_ref(),
        };
        let reverse = reverse_only || d == 1;
        let s = scan(
            cell,
            &x,
            &weights,
            &h,
            c.as_ref(),
            lengths.as_deref(),
            reverse,
        )?;
        outputs.push(s.output.unsqueeze(1)?);
        hs.push(s.h.unsqueeze(0)?);
        cs.extend(s.c.map(|c| c.unsqueeze(0)).transpose()?);
    }
    // Y [T, D, B, H]; Y_h, Y_c [D, B, H] (layout 1: [B, T, D, H] and [B, D, H]).
    let y = Tensor::cat(&outputs, 1)?;
    let y_h = Tensor::cat(&hs, 0)?;
    let mut out = if layout == 1 {
        vec![y.permute(&[2, 0, 1, 3])?, y_h.transpose(0, 1)?]
    } else {
        vec![y, y_h]
    };
    if cell == Cell::Lstm {
        let y_c = Tensor::cat(&cs, 0)?;
        out.push(if layout == 1 {
            y_c.transpose(0, 1)?
        } else {
            y_c
        });
    }
    Ok(out)
}
