//! Models as Rhai values: a shared handle (`Model`), because Rhai copies values on assignment
//! and the optimizer must update the same parameters the model uses.

use crate::convert::{self, shape};
use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use crate::options::Options;
use rhai::{Array, Dynamic, Map, INT};
use rusting_brain::nn::{Activation, Linear, Mlp, Module};
use rusting_brain::{Generator, Tensor};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone)]
pub struct Model(Arc<Mutex<Box<dyn Module>>>);

impl Model {
    pub fn new(m: Box<dyn Module>) -> Self {
        Model(Arc::new(Mutex::new(m)))
    }

    pub fn lock(&self) -> MutexGuard<'_, Box<dyn Module>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn seed_of(o: &Options) -> RhaiResult<Generator> {
    Ok(Generator::new(o.int("seed", 0)? as u64))
}

fn activation(o: &Options) -> RhaiResult<Activation> {
    let name = o.string("activation")?.unwrap_or_else(|| "relu".into());
    Activation::parse(&name).ok_or_else(|| {
        runtime_error(format!(
            "unknown activation \"{name}\"; use relu, gelu, silu or tanh"
        ))
    })
}

fn mlp(sizes: Array, opts: Map) -> RhaiResult<Model> {
    let o = Options::new("nn::mlp", opts, &["activation", "seed"])?;
    let sizes = shape(&sizes, "nn::mlp")?;
    let (act, mut gen) = (activation(&o)?, seed_of(&o)?);
    guard(|| Mlp::new(&sizes, act, &mut gen)).map(|m| Model::new(Box::new(m)))
}

fn linear(inp: INT, out: INT, opts: Map) -> RhaiResult<Model> {
    let o = Options::new("nn::linear", opts, &["bias", "seed"])?;
    let (i, n) = (
        convert::usize_of(inp, "nn::linear")?,
        convert::usize_of(out, "nn::linear")?,
    );
    let (bias, mut gen) = (o.bool("bias", true)?, seed_of(&o)?);
    guard(|| Linear::new(i, n, bias, &mut gen)).map(|m| Model::new(Box::new(m)))
}

fn tensors_to_map(named: impl IntoIterator<Item = (String, Tensor)>) -> Map {
    named
        .into_iter()
        .map(|(k, v)| (k.into(), Dynamic::from(v)))
        .collect()
}

pub fn map_to_tensors(m: &Map, what: &str) -> RhaiResult<BTreeMap<String, Tensor>> {
    m.iter()
        .map(|(k, v)| {
            v.clone()
                .try_cast::<Tensor>()
                .map(|t| (k.to_string(), t))
                .ok_or_else(|| {
                    runtime_error(format!(
                        "{what}: entry {k} is a {}, not a Tensor",
                        v.type_name()
                    ))
                })
        })
        .collect()
}

pub fn register(api: &mut Api) {
    api.func("mlp", "nn::mlp(sizes, #{ activation, seed }) -> Model", "A multi-layer perceptron: Linear layers of the given sizes with an activation between them.", "let model = nn::mlp([2, 64, 64, 2], #{ activation: \"relu\", seed: 1 });", mlp);
    api.func(
        "mlp",
        "nn::mlp(sizes) -> Model",
        "An MLP with ReLU and seed 0.",
        "let model = nn::mlp([4, 16, 3]);",
        |s: Array| mlp(s, Map::new()),
    );
    api.func(
        "linear",
        "nn::linear(in, out, #{ bias, seed }) -> Model",
        "A Linear layer y = x W^T + b with PyTorch's default init.",
        "let layer = nn::linear(8, 4, #{ seed: 3 });",
        linear,
    );
    api.func(
        "linear",
        "nn::linear(in, out) -> Model",
        "A Linear layer with a bias, seed 0.",
        "let layer = nn::linear(8, 4);",
        |i: INT, o: INT| linear(i, o, Map::new()),
    );
    api.method(
        "forward",
        "model.forward(x) -> Tensor",
        "Runs the model on a batch.",
        "let logits = model.forward(x);",
        |m: &mut Model, x: Tensor| guard(|| m.lock().forward(&x)),
    );
    api.method(
        "parameters",
        "model.parameters() -> array",
        "The trainable tensors (shared with the model: an optimizer updates them in place).",
        "optim::adamw(model.parameters(), #{ lr: 1e-3 })",
        |m: &mut Model| -> Array {
            m.lock()
                .parameters()
                .into_iter()
                .map(Dynamic::from)
                .collect()
        },
    );
    api.method(
        "named_parameters",
        "model.named_parameters() -> map",
        "Parameters by their PyTorch-style names (layers.0.weight).",
        "model.named_parameters().keys()",
        |m: &mut Model| tensors_to_map(m.lock().named_parameters()),
    );
    api.method(
        "state_dict",
        "model.state_dict() -> map",
        "Parameters and buffers by name.",
        "io::save(model.state_dict(), \"model.safetensors\")",
        |m: &mut Model| tensors_to_map(m.lock().state_dict()),
    );
    api.method("load_state_dict", "model.load_state_dict(map)", "Copies values into the model; missing, unexpected or mis-shaped names are an error listing them all.", "model.load_state_dict(io::load(\"model.safetensors\"))", |m: &mut Model, state: Map| {
        let state = map_to_tensors(&state, "load_state_dict")?;
        guard(|| m.lock().load_state_dict(&state, true).map(|_| ()))
    });
    api.method(
        "num_parameters",
        "model.num_parameters() -> int",
        "The number of trainable scalars.",
        "print(model.num_parameters())",
        |m: &mut Model| m.lock().num_parameters() as INT,
    );
    api.method(
        "train",
        "model.train()",
        "Training mode (dropout on, batch norm updates its statistics).",
        "model.train();",
        |m: &mut Model| m.lock().train(true),
    );
    api.method(
        "eval",
        "model.eval()",
        "Evaluation mode.",
        "model.eval();",
        |m: &mut Model| m.lock().train(false),
    );
    api.method(
        "zero_grad",
        "model.zero_grad()",
        "Clears every parameter's gradient.",
        "model.zero_grad();",
        |m: &mut Model| m.lock().zero_grad(),
    );
}
