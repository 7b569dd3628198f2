//! Activations as layers (`nn::activation`, `nn::prelu`, `nn::softmax(dim)`,
//! `nn::log_softmax(dim)`): torch's names and parameters.

use super::Model;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Map, INT};
use rusting_brain::nn::{Activation, PRelu, Softmax};

crate::options! {
    /// The parameters of the activations that take some, under torch's names.
    struct ActivationParams {
        negative_slope: f64,
        alpha: f64,
        min_val: f64,
        max_val: f64,
    }
}

crate::options! {
    /// nn::prelu's options.
    struct PReluOptions {
        init: f64 = 0.25,
    }
}

fn prelu(num_parameters: INT, opts: Map) -> RhaiResult<Model> {
    let init = PReluOptions::parse("nn::prelu", opts)?.init;
    let n = usize::try_from(num_parameters).map_err(|_| {
        runtime_error(format!(
            "nn::prelu: num_parameters must be at least 1, got {num_parameters}"
        ))
    })?;
    guard(|| PRelu::new(n, init)).map(|m| Model::new(Box::new(m)))
}

/// The activation `name` with the parameters `opts` gives; a parameter it does not take is
/// refused by name.
fn activation_with(name: &str, opts: Map) -> RhaiResult<Activation> {
    let o = ActivationParams::parse("nn::activation", opts)?;
    let act = match activation_named(name)? {
        Activation::LeakyRelu(s) => Activation::LeakyRelu(o.negative_slope.unwrap_or(s)),
        Activation::Elu(a) => Activation::Elu(o.alpha.unwrap_or(a)),
        Activation::Celu(a) => Activation::Celu(o.alpha.unwrap_or(a)),
        Activation::Hardtanh(lo, hi) => {
            Activation::Hardtanh(o.min_val.unwrap_or(lo), o.max_val.unwrap_or(hi))
        }
        other => other,
    };
    let takes: &[&str] = match act {
        Activation::LeakyRelu(_) => &["negative_slope"],
        Activation::Elu(_) | Activation::Celu(_) => &["alpha"],
        Activation::Hardtanh(..) => &["min_val", "max_val"],
        _ => &[],
    };
    let given = [
        ("negative_slope", o.negative_slope.is_some()),
        ("alpha", o.alpha.is_some()),
        ("min_val", o.min_val.is_some()),
        ("max_val", o.max_val.is_some()),
    ];
    if let Some((key, _)) = given.iter().find(|(k, g)| *g && !takes.contains(k)) {
        return Err(runtime_error(format!(
            "nn::activation: {} takes no {key}{}",
            act.name(),
            match takes {
                [] => " (it has no parameters)".to_string(),
                t => format!(" (its parameters: {})", t.join(", ")),
            }
        )));
    }
    match act {
        Activation::Celu(0.0) => Err(runtime_error("nn::activation: celu's alpha must not be 0")),
        Activation::Hardtanh(lo, hi) if lo > hi => Err(runtime_error(format!(
            "nn::activation: hardtanh's min_val {lo} is greater than its max_val {hi}"
        ))),
        act => Ok(act),
    }
}

/// The activation `name` says, or an error listing the names there are.
pub(super) fn activation_named(name: &str) -> RhaiResult<Activation> {
    Activation::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Activation::ALL.iter().map(|a| a.name()).collect();
        runtime_error(format!(
            "unknown activation \"{name}\"; use one of {}",
            names.join(", ")
        ))
    })
}

pub fn register(api: &mut Api) {
    api.func(
        "activation",
        "nn::activation(name) -> Model",
        "An activation as a layer (PyTorch's nn.ReLU, nn.GELU, ...): relu, gelu, gelu_tanh, silu, tanh, sigmoid, softplus, mish, quick_gelu, leaky_relu, elu, selu, celu, hardtanh, relu6, hardsigmoid, hardswish, softsign or log_sigmoid, with torch's default parameters.",
        "let act = nn::activation(\"mish\"); print(act);",
        |name: &str| activation_named(name).map(|a| Model::new(a.module())),
    );
    api.func(
        "activation",
        "nn::activation(name, #{ negative_slope, alpha, min_val, max_val }) -> Model",
        "An activation with its parameters, under torch's names: leaky_relu's negative_slope (0.01), elu's and celu's alpha (1), hardtanh's min_val and max_val (-1, 1).",
        "let act = nn::activation(\"leaky_relu\", #{ negative_slope: 0.2 }); print(act);",
        |name: &str, opts: Map| activation_with(name, opts).map(|a| Model::new(a.module())),
    );
    api.func(
        "prelu",
        "nn::prelu() -> Model",
        "PReLU with one learned slope for the negative side, starting at 0.25 (nn.PReLU()).",
        "let act = nn::prelu(); print(act.forward(tensor([-2.0, 3.0])));",
        || prelu(1, Map::new()),
    );
    api.func(
        "prelu",
        "nn::prelu(num_parameters) -> Model",
        "PReLU with a slope per channel (dim 1 of the input), as nn.PReLU(num_parameters); its parameter is `weight`.",
        "let m = nn::sequential([nn::conv2d_layer(3, 8, 3, #{}), nn::prelu(8)]); print(m.forward(randn([1, 3, 6, 6])).shape);",
        |n: INT| prelu(n, Map::new()),
    );
    api.func(
        "prelu",
        "nn::prelu(num_parameters, #{ init }) -> Model",
        "The same with the slopes starting at init (torch's default 0.25).",
        "let act = nn::prelu(4, #{ init: 0.1 }); print(act.state_dict());",
        prelu,
    );
    api.func(
        "softmax",
        "nn::softmax(dim) -> Model",
        "Softmax over dim as a layer (nn.Softmax(dim)), for the end of a classifier in nn::sequential.",
        "let m = nn::sequential([nn::linear(4, 3), nn::softmax(1)]); print(m.forward(randn([2, 4])).sum(1));",
        |dim: INT| Model::new(Box::new(Softmax::new(dim as isize))),
    );
    api.func(
        "log_softmax",
        "nn::log_softmax(dim) -> Model",
        "Log-softmax over dim as a layer (nn.LogSoftmax(dim)): the log of softmax, computed stably.",
        "let m = nn::sequential([nn::linear(4, 3), nn::log_softmax(-1)]); print(m.forward(randn([2, 4])).exp().sum(1));",
        |dim: INT| Model::new(Box::new(Softmax::log(dim as isize))),
    );
}
