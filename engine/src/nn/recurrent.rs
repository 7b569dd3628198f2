//! Recurrent layers (LSTM, GRU, Elman RNN) as one scan over time: the input's projection for
//! every step is one product up front, then each step adds the hidden state's product and
//! applies the cell. Gates are in PyTorch's order (LSTM i, f, g, o; GRU r, z, n); ONNX's
//! orders are permuted onto them by the graph runtime.
//!
//! Variable lengths without packing: with `lengths`, steps past a sequence's end leave its
//! state unchanged and output zeros, so the final state is the one at its last real step, as
//! PyTorch's packed sequences and ONNX's `sequence_lens` give. A reverse direction starts at
//! each sequence's own last step.

use crate::{DType, Result, Tensor};

/// The cell a scan applies at each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// Gates i, f, g, o; c' = f c + i g, h' = o tanh(c').
    Lstm,
    /// Gates r, z, n; h' = (1 - z) n + z h. `reset_after`: n = tanh(x_n + r (h W_hn + b_hn)),
    /// PyTorch's form (ONNX's linear_before_reset = 1); else n = tanh(x_n + (r h) W_hn + b_hn).
    Gru { reset_after: bool },
    /// h' = tanh(x W_ih + h W_hh + b), or relu.
    Rnn { relu: bool },
}

impl Cell {
    /// How many gates the weights stack: rows of `w_ih` are gates × hidden.
    pub fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru { .. } => 3,
            Cell::Rnn { .. } => 1,
        }
    }
}

/// One direction's weights: `w_ih` [gates·H, I], `w_hh` [gates·H, H], biases [gates·H].
pub struct Direction<'a> {
    pub w_ih: &'a Tensor,
    pub w_hh: &'a Tensor,
    pub b_ih: Option<&'a Tensor>,
    pub b_hh: Option<&'a Tensor>,
}

/// What one direction of a scan gives: every step's hidden state [T, B, H] (zeros past a
/// sequence's end), the final hidden state [B, H], and for an LSTM the final cell state.
pub struct Scan {
    pub output: Tensor,
    pub h: Tensor,
    pub c: Option<Tensor>,
}

/// Runs `cell` over `x` [T, B, I] from `h0` (and `c0`) [B, H], forward or in reverse.
pub fn scan(
    cell: Cell,
    x: &Tensor,
    w: &Direction,
    h0: &Tensor,
    c0: Option<&Tensor>,
    lengths: Option<&[usize]>,
    reverse: bool,
) -> Result<Scan> {
    let steps = x.shape()[0];
    let hidden = h0.shape()[1];
    let mut xp = x.matmul(&w.w_ih.t()?)?;
    if let Some(b) = w.b_ih {
        xp = xp.add(b)?;
    }
    // The masks of the steps inside each sequence: [T, B, 1], true where t < length.
    let inside = match lengths {
        Some(l) => {
            let rows: Vec<f64> = (0..steps)
                .flat_map(|t| l.iter().map(move |&n| if t < n { 1.0 } else { 0.0 }))
                .collect();
            let m = Tensor::from_f64s(&rows, &[steps, l.len(), 1], DType::Bool)?;
            Some(m.to_device(x.device())?)
        }
        None => None,
    };
    let (mut h, mut c) = (h0.clone(), c0.cloned());
    if cell == Cell::Lstm && c.is_none() {
        c = Some(Tensor::zeros_like(h0)?);
    }
    let mut outputs: Vec<Option<Tensor>> = vec![None; steps];
    let order: Vec<usize> = if reverse {
        (0..steps).rev().collect()
    } else {
        (0..steps).collect()
    };
    for t in order {
        let xt = xp.narrow(0, t, 1)?.squeeze(0)?;
        let mut hp = h.matmul(&w.w_hh.t()?)?;
        if let Some(b) = w.b_hh {
            hp = hp.add(b)?;
        }
        let gate = |p: &Tensor, g: usize| p.narrow(1, g * hidden, hidden);
        let (h_new, c_new) = match cell {
            Cell::Lstm => {
                let pre = xt.add(&hp)?;
                let i = gate(&pre, 0)?.sigmoid()?;
                let f = gate(&pre, 1)?.sigmoid()?;
                let g = gate(&pre, 2)?.tanh()?;
                let o = gate(&pre, 3)?.sigmoid()?;
                let c_prev = match &c {
                    Some(c) => c.clone(),
                    None => Tensor::zeros_like(&h)?,
                };
                let c_new = f.mul(&c_prev)?.add(&i.mul(&g)?)?;
                (o.mul(&c_new.tanh()?)?, Some(c_new))
            }
            Cell::Gru { reset_after } => {
                let r = gate(&xt, 0)?.add(&gate(&hp, 0)?)?.sigmoid()?;
                let z = gate(&xt, 1)?.add(&gate(&hp, 1)?)?.sigmoid()?;
                let n_hidden = if reset_after {
                    r.mul(&gate(&hp, 2)?)?
                } else {
                    let w_hn = w.w_hh.narrow(0, 2 * hidden, hidden)?;
                    let mut v = r.mul(&h)?.matmul(&w_hn.t()?)?;
                    if let Some(b) = w.b_hh {
                        v = v.add(&b.narrow(0, 2 * hidden, hidden)?)?;
                    }
                    v
                };
                let n = gate(&xt, 2)?.add(&n_hidden)?.tanh()?;
                // (1 - z) n + z h = n + z (h - n)
                (n.add(&z.mul(&h.sub(&n)?)?)?, None)
            }
            Cell::Rnn { relu } => {
                let pre = xt.add(&hp)?;
                (if relu { pre.relu()? } else { pre.tanh()? }, None)
            }
        };
        let (out, h_next, c_next) = match &inside {
            Some(m) => {
                let m = m.narrow(0, t, 1)?.squeeze(0)?;
                let zero = Tensor::zeros_like(&h_new)?;
                let keep = |new: &Tensor, old: &Tensor| Tensor::where_cond(&m, new, old);
                let c_next = match (&c_new, &c) {
                    (Some(n), Some(o)) => Some(keep(n, o)?),
                    _ => None,
                };
                (keep(&h_new, &zero)?, keep(&h_new, &h)?, c_next)
            }
            None => (h_new.clone(), h_new, c_new),
        };
        outputs[t] = Some(out);
        h = h_next;
        if c_next.is_some() {
            c = c_next;
        }
    }
    let outputs: Vec<Tensor> = outputs.into_iter().flatten().collect();
    let output = if outputs.is_empty() {
        Tensor::zeros(&[0, h0.shape()[0], hidden], h0.dtype(), h0.device())?
    } else {
        Tensor::stack(&outputs, 0)?
    };
    Ok(Scan { output, h, c })
}
