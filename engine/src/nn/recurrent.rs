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

/// torch.nn.LSTM / GRU / RNN: `layers` stacked scans, each direction with PyTorch's parameter
/// names (`weight_ih_l0`, `bias_hh_l1_reverse`) and init (uniform in ±1/√hidden), so their
/// state dicts load. Input [T, B, I] ([B, T, I] with `batch_first`); `forward` gives the last
/// layer's output [T, B, D·H]; [`Recurrent::run`] also the final states and takes lengths.
pub struct Recurrent {
    pub config: RecurrentConfig,
    params: Vec<(String, Tensor)>,
    training: bool,
}

/// What torch.nn.LSTM's constructor takes (no dropout between layers).
#[derive(Clone, Copy, Debug)]
pub struct RecurrentConfig {
    pub cell: Cell,
    pub input_size: usize,
    pub hidden_size: usize,
    pub layers: usize,
    pub bias: bool,
    pub bidirectional: bool,
    pub batch_first: bool,
}

/// The result of a run: the last layer's output, and the final states h [L·D, B, H] and, for
/// an LSTM, c.
pub struct RecurrentOutput {
    pub output: Tensor,
    pub h: Tensor,
    pub c: Option<Tensor>,
}

impl Recurrent {
    pub fn new(config: RecurrentConfig, gen: &mut crate::Generator) -> Result<Recurrent> {
        let RecurrentConfig {
            cell,
            input_size,
            hidden_size,
            layers,
            bias,
            bidirectional,
            ..
        } = config;
        if input_size == 0 || hidden_size == 0 || layers == 0 {
            return Err(crate::Error::invalid(
                "recurrent layer",
                format!("input_size ({input_size}), hidden_size ({hidden_size}) and num_layers ({layers}) must be positive"),
            ));
        }
        let dirs = if bidirectional { 2 } else { 1 };
        let rows = cell.gates() * hidden_size;
        let bound = 1.0 / (hidden_size as f64).sqrt();
        let mut params = Vec::new();
        for layer in 0..layers {
            let width = if layer == 0 {
                input_size
            } else {
                dirs * hidden_size
            };
            for d in 0..dirs {
                let suffix = format!("l{layer}{}", if d == 1 { "_reverse" } else { "" });
                let mut shapes = vec![
                    (format!("weight_ih_{suffix}"), vec![rows, width]),
                    (format!("weight_hh_{suffix}"), vec![rows, hidden_size]),
                ];
                if bias {
                    shapes.push((format!("bias_ih_{suffix}"), vec![rows]));
                    shapes.push((format!("bias_hh_{suffix}"), vec![rows]));
                }
                for (name, shape) in shapes {
                    let t = Tensor::zeros(&shape, DType::F32, crate::Device::Cpu)?;
                    super::init::uniform_(&t, -bound, bound, gen)?;
                    params.push((name, t.requires_grad_()?));
                }
            }
        }
        Ok(Recurrent {
            config,
            params,
            training: true,
        })
    }

    fn param(&self, name: &str) -> Option<&Tensor> {
        self.params.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// Runs every layer from `h0` (and `c0`) [L·D, B, H] (zeros when absent); `lengths`: each
    /// sequence's real length, the steps after it padding.
    pub fn run(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
        lengths: Option<&[usize]>,
    ) -> Result<RecurrentOutput> {
        let c = &self.config;
        let name = match c.cell {
            Cell::Lstm => "lstm",
            Cell::Gru { .. } => "gru",
            Cell::Rnn { .. } => "rnn",
        };
        if x.rank() != 3 || x.shape()[2] != c.input_size {
            return Err(crate::Error::invalid(
                name,
                format!(
                    "needs input [{}, {}, {}], got {:?}",
                    if c.batch_first { "B" } else { "T" },
                    if c.batch_first { "T" } else { "B" },
                    c.input_size,
                    x.shape()
                ),
            ));
        }
        let mut layer_in = if c.batch_first {
            x.transpose(0, 1)?
        } else {
            x.clone()
        };
        let batch = layer_in.shape()[1];
        if let Some(l) = lengths {
            if l.len() != batch || l.iter().any(|&n| n > layer_in.shape()[0]) {
                return Err(crate::Error::invalid(
                    name,
                    format!("lengths {l:?} must give one length per sequence ({batch}), each at most the steps ({})", layer_in.shape()[0]),
                ));
            }
        }
        let dirs = if c.bidirectional { 2 } else { 1 };
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        let missing = || crate::Error::invalid(name, "a parameter is missing");
        for layer in 0..c.layers {
            let mut outs = Vec::new();
            for d in 0..dirs {
                let suffix = format!("l{layer}{}", if d == 1 { "_reverse" } else { "" });
                let w = Direction {
                    w_ih: self
                        .param(&format!("weight_ih_{suffix}"))
                        .ok_or_else(missing)?,
                    w_hh: self
                        .param(&format!("weight_hh_{suffix}"))
                        .ok_or_else(missing)?,
                    b_ih: self.param(&format!("bias_ih_{suffix}")),
                    b_hh: self.param(&format!("bias_hh_{suffix}")),
                };
                let index = layer * dirs + d;
                let pick = |t: Option<&Tensor>| -> Result<Option<Tensor>> {
                    t.map(|t| t.narrow(0, index, 1)?.squeeze(0)).transpose()
                };
                let h = match pick(h0)? {
                    Some(h) => h,
                    None => {
                        Tensor::zeros(&[batch, c.hidden_size], layer_in.dtype(), layer_in.device())?
                    }
                };
                let c0 = pick(c0)?;
                let s = scan(c.cell, &layer_in, &w, &h, c0.as_ref(), lengths, d == 1)?;
                outs.push(s.output);
                hs.push(s.h.unsqueeze(0)?);
                cs.extend(s.c.map(|state| state.unsqueeze(0)).transpose()?);
            }
            layer_in = Tensor::cat(&outs, 2)?;
        }
        let output = if c.batch_first {
            layer_in.transpose(0, 1)?
        } else {
            layer_in
        };
        Ok(RecurrentOutput {
            output,
            h: Tensor::cat(&hs, 0)?,
            c: if cs.is_empty() {
                None
            } else {
                Some(Tensor::cat(&cs, 0)?)
            },
        })
    }
}

impl super::Module for Recurrent {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.run(x, None, None, None)?.output)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        self.params.clone()
    }

    fn is_training(&self) -> bool {
        self.training
    }

    fn set_training(&mut self, on: bool) {
        self.training = on;
    }

    fn title(&self) -> String {
        let c = &self.config;
        let (kind, extra) = match c.cell {
            Cell::Lstm => ("LSTM", String::new()),
            Cell::Gru { .. } => ("GRU", String::new()),
            Cell::Rnn { relu } => (
                "RNN",
                format!(", nonlinearity={}", if relu { "relu" } else { "tanh" }),
            ),
        };
        format!(
            "{kind}({}, {}, num_layers={}, bias={}, batch_first={}, bidirectional={}{extra})",
            c.input_size, c.hidden_size, c.layers, c.bias, c.batch_first, c.bidirectional
        )
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
