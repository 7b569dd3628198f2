//! `nn::lstm`, `nn::gru`, `nn::rnn` (torch.nn.LSTM/GRU/RNN) and their `run` method, which takes
//! initial states and per-sequence lengths and gives the final states too.

use super::modules::Model;
use crate::convert::usize_of;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Dynamic, Map, INT};
use rusting_brain::nn::{Cell, Recurrent, RecurrentConfig};
use rusting_brain::{Generator, Tensor};

crate::options! {
    /// nn::lstm's and nn::gru's options.
    struct RecurrentOptions {
        num_layers: usize = 1,
        bias: bool = true,
        bidirectional: bool = false,
        batch_first: bool = false,
        seed: INT = 0,
    }
}

crate::options! {
    /// nn::rnn's: those of nn::lstm and its nonlinearity.
    struct RnnOptions {
        num_layers: usize = 1,
        bias: bool = true,
        bidirectional: bool = false,
        batch_first: bool = false,
        seed: INT = 0,
        nonlinearity: String = "tanh".into(),
    }
}

fn layer(what: &str, cell: Cell, input: INT, hidden: INT, opts: Map) -> RhaiResult<Model> {
    let (o, cell) = match cell {
        Cell::Rnn { .. } => {
            let o = RnnOptions::parse(what, opts)?;
            let relu = match o.nonlinearity.as_str() {
                "tanh" => false,
                "relu" => true,
                other => {
                    return Err(runtime_error(format!(
                        "{what}: nonlinearity must be \"tanh\" or \"relu\", got \"{other}\""
                    )))
                }
            };
            let common = RecurrentOptions {
                num_layers: o.num_layers,
                bias: o.bias,
                bidirectional: o.bidirectional,
                batch_first: o.batch_first,
                seed: o.seed,
            };
            (common, Cell::Rnn { relu })
        }
        c => (RecurrentOptions::parse(what, opts)?, c),
    };
    let config = RecurrentConfig {
        cell,
        input_size: usize_of(input, what)?,
        hidden_size: usize_of(hidden, what)?,
        layers: o.num_layers,
        bias: o.bias,
        bidirectional: o.bidirectional,
        batch_first: o.batch_first,
    };
    let mut gen = Generator::new(o.seed as u64);
    guard(|| Recurrent::new(config, &mut gen)).map(|m| Model::new(Box::new(m)))
}

crate::options! {
    struct RunOptions {
        h0: Tensor,
        c0: Tensor,
        lengths: Tensor,
    }
}

fn run(m: &mut Model, x: Tensor, opts: Map) -> RhaiResult<Map> {
    let RunOptions { h0, c0, lengths } = RunOptions::parse("run", opts)?;
    let lengths: Option<Vec<usize>> = match lengths {
        Some(t) => Some(
            guard(|| t.to_vec::<i64>())?
                .into_iter()
                .map(|n| {
                    usize::try_from(n)
                        .map_err(|_| runtime_error(format!("run: a negative length {n}")))
                })
                .collect::<RhaiResult<_>>()?,
        ),
        None => None,
    };
    m.with_layer("run", |r: &Recurrent| {
        let out = guard(|| r.run(&x, h0.as_ref(), c0.as_ref(), lengths.as_deref()))?;
        let mut map = Map::new();
        map.insert("output".into(), Dynamic::from(out.output));
        map.insert("h".into(), Dynamic::from(out.h));
        if let Some(c) = out.c {
            map.insert("c".into(), Dynamic::from(c));
        }
        Ok(map)
    })
}

pub fn register(api: &mut Api) {
    api.func(
        "lstm",
        "nn::lstm(input_size, hidden_size, #{ num_layers, bias, bidirectional, batch_first, seed }) -> Model",
        "torch.nn.LSTM (its parameter names and init): input [T, B, I] ([B, T, I] with batch_first); forward gives the output [T, B, D*H]; lstm.run(x, #{ h0, c0, lengths }) also the final h and c, and masks each sequence past its length.",
        "let lstm = nn::lstm(8, 16, #{ batch_first: true, bidirectional: true }); let out = lstm.run(randn([2, 5, 8]), #{ lengths: tensor([5, 3]) }); print(out.h.shape);",
        |i: INT, h: INT, o: Map| layer("nn::lstm", Cell::Lstm, i, h, o),
    );
    api.func(
        "gru",
        "nn::gru(input_size, hidden_size, #{ num_layers, bias, bidirectional, batch_first, seed }) -> Model",
        "torch.nn.GRU (gates r, z, n with the reset applied after the hidden product, as PyTorch): the same inputs, outputs and run as nn::lstm, without c.",
        "let gru = nn::gru(4, 6); print(gru.forward(randn([7, 2, 4])).shape);",
        |i: INT, h: INT, o: Map| layer("nn::gru", Cell::Gru { reset_after: true }, i, h, o),
    );
    api.func(
        "rnn",
        "nn::rnn(input_size, hidden_size, #{ num_layers, bias, bidirectional, batch_first, nonlinearity, seed }) -> Model",
        "torch.nn.RNN (Elman): h' = tanh(x W_ih + h W_hh + b), or relu with nonlinearity: \"relu\".",
        "let rnn = nn::rnn(4, 6, #{ nonlinearity: \"relu\" }); print(rnn);",
        |i: INT, h: INT, o: Map| layer("nn::rnn", Cell::Rnn { relu: false }, i, h, o),
    );
    for (name, cell) in [
        ("lstm", Cell::Lstm),
        ("gru", Cell::Gru { reset_after: true }),
        ("rnn", Cell::Rnn { relu: false }),
    ] {
        let what: &'static str = match name {
            "lstm" => "nn::lstm",
            "gru" => "nn::gru",
            _ => "nn::rnn",
        };
        api.func(
            name,
            match name {
                "lstm" => "nn::lstm(input_size, hidden_size) -> Model",
                "gru" => "nn::gru(input_size, hidden_size) -> Model",
                _ => "nn::rnn(input_size, hidden_size) -> Model",
            },
            "The same with PyTorch's defaults (one layer, bias, one direction, sequence first).",
            match name {
                "lstm" => "let lstm = nn::lstm(3, 4); print(lstm.forward(randn([5, 2, 3])).shape);",
                "gru" => "let gru = nn::gru(3, 4); print(gru.forward(randn([5, 2, 3])).shape);",
                _ => "let rnn = nn::rnn(3, 4); print(rnn.forward(randn([5, 2, 3])).shape);",
            },
            move |i: INT, h: INT| layer(what, cell, i, h, Map::new()),
        );
    }
    api.method(
        "run",
        "rnn.run(x, #{ h0, c0, lengths }) -> map",
        "Runs an nn::lstm, nn::gru or nn::rnn from initial states h0 (and c0) [layers*directions, B, H] (zeros when absent); lengths [B] marks each sequence's real length, later steps being padding (zeros out, states held). Gives #{ output, h, c }.",
        "let gru = nn::gru(3, 4, #{ batch_first: true }); let r = gru.run(randn([2, 6, 3]), #{ lengths: tensor([6, 2]) }); print(r.output.shape);",
        run,
    );
    api.method(
        "run",
        "rnn.run(x) -> map",
        "The same from zero states over full-length sequences.",
        "let lstm = nn::lstm(3, 4); let r = lstm.run(randn([5, 2, 3])); print(r.c.shape);",
        |m: &mut Model, x: Tensor| run(m, x, Map::new()),
    );
}
