//! Models as Rhai values: a shared handle (`Model`), because Rhai copies values on assignment
//! and the optimizer must update the same parameters the model uses.

use crate::convert::{self, shape};
use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Array, Dynamic, Map, INT};
use rusting_brain::io::onnx::export::ExportOptions;
use rusting_brain::nn::export_module;
use rusting_brain::nn::{
    BatchNorm2d, Conv2d, ConvTranspose2d, Dropout, Embedding, LayerNorm, Linear, Mlp, Module,
    RmsNorm, Sequential,
};
use rusting_brain::{Conv2dOptions, ConvTranspose2dOptions};
use rusting_brain::{Generator, Tensor};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone)]
pub struct Model(Arc<Mutex<Box<dyn Module>>>);

impl Model {
    /// A model on the script's device (`--device`). A model that cannot move stays on the CPU
    /// with a warning, so the script's next op names the mismatch.
    pub fn new(m: Box<dyn Module>) -> Self {
        let device = crate::tensor::default_device();
        if let Err(e) = m.to_device(device) {
            rusting_brain::messages::warn(&format!("model stays on the cpu: {e}"));
        }
        Model(Arc::new(Mutex::new(m)))
    }

    pub fn lock(&self) -> MutexGuard<'_, Box<dyn Module>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `with_layer` for a method that changes the layer.
    pub fn with_layer_mut<T: 'static, R>(
        &self,
        what: &str,
        f: impl FnOnce(&mut T) -> RhaiResult<R>,
    ) -> RhaiResult<R> {
        let mut guard = self.lock();
        let title = guard.title();
        match guard.as_any_mut().and_then(|a| a.downcast_mut::<T>()) {
            Some(layer) => f(layer),
            None => Err(runtime_error(format!(
                "{what} is a method of {}; this model is a {title}",
                std::any::type_name::<T>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("another layer")
            ))),
        }
    }

    /// Runs `f` on the layer behind the handle when it is a `T` (a method only that layer
    /// has: attention's masks, an ONNX graph's named inputs), else says what it needed.
    pub fn with_layer<T: 'static, R>(
        &self,
        what: &str,
        f: impl FnOnce(&T) -> RhaiResult<R>,
    ) -> RhaiResult<R> {
        let guard = self.lock();
        let layer = guard.as_any().and_then(|a| a.downcast_ref::<T>());
        match layer {
            Some(layer) => f(layer),
            None => Err(runtime_error(format!(
                "{what} is a method of {}; this model is a {}",
                std::any::type_name::<T>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("?"),
                guard.title()
            ))),
        }
    }
}

/// The generator a `seed` option (0 when absent) starts.
fn seed_of(seed: INT) -> Generator {
    Generator::new(seed as u64)
}

crate::options! {
    struct MlpOptions {
        activation: String = "relu".into(),
        seed: INT = 0,
    }
}

fn mlp(sizes: Array, opts: Map) -> RhaiResult<Model> {
    let o = MlpOptions::parse("nn::mlp", opts)?;
    let sizes = shape(&sizes, "nn::mlp")?;
    let act = super::activation_layers::activation_named(&o.activation)?;
    let mut gen = seed_of(o.seed);
    guard(|| Mlp::new(&sizes, act, &mut gen)).map(|m| Model::new(Box::new(m)))
}

crate::options! {
    struct LinearOptions {
        bias: bool = true,
        seed: INT = 0,
    }
}

fn linear(inp: INT, out: INT, opts: Map) -> RhaiResult<Model> {
    let o = LinearOptions::parse("nn::linear", opts)?;
    let (i, n) = (
        convert::usize_of(inp, "nn::linear")?,
        convert::usize_of(out, "nn::linear")?,
    );
    let (bias, mut gen) = (o.bias, seed_of(o.seed));
    guard(|| Linear::new(i, n, bias, &mut gen)).map(|m| Model::new(Box::new(m)))
}

/// A model handle inside another model (a `Sequential` of script-built layers) shares the
/// layer, so the script's handle and the container see the same parameters. The handle is
/// transparent: every method reaches the layer behind the lock, the derived ones included
/// (a lock cannot lend out the layer's children, so those are not walked through it).
impl Module for Model {
    fn forward(&self, x: &Tensor) -> rusting_brain::Result<Tensor> {
        self.lock().forward(x)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.lock().named_parameters()
    }
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        self.lock().named_buffers()
    }
    fn train(&mut self, on: bool) {
        self.lock().train(on)
    }
    fn is_training(&self) -> bool {
        self.lock().is_training()
    }
    fn set_training(&mut self, on: bool) {
        self.lock().set_training(on)
    }
    fn title(&self) -> String {
        self.lock().title()
    }
    fn summary(&self) -> rusting_brain::nn::Summary {
        self.lock().summary()
    }
    fn to_onnx(
        &self,
        g: &mut rusting_brain::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> rusting_brain::Result<String> {
        self.lock().to_onnx(g, prefix, x)
    }
    fn input_shape(&self) -> Option<Vec<usize>> {
        self.lock().input_shape()
    }
    fn capture_key(&self, key: &mut rusting_brain::capture::Key) {
        self.lock().capture_key(key)
    }
    fn for_each_linear_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut rusting_brain::nn::Linear) -> rusting_brain::Result<()>,
    ) -> rusting_brain::Result<()> {
        self.lock().for_each_linear_mut(prefix, f)
    }
}

pub(super) fn boxed<M: Module + 'static>(r: rusting_brain::Result<M>) -> RhaiResult<Model> {
    guard(|| r).map(|m| Model::new(Box::new(m)))
}

fn sequential(layers: Array) -> RhaiResult<Model> {
    let mut seq = Sequential::new();
    for (i, l) in layers.into_iter().enumerate() {
        let m = l.clone().try_cast::<Model>().ok_or_else(|| {
            runtime_error(format!(
                "nn::sequential: element {i} is a {}, not a Model",
                l.type_name()
            ))
        })?;
        seq.push(Box::new(m));
    }
    Ok(Model::new(Box::new(seq)))
}

crate::options! {
    struct ConvLayerOptions {
        stride: (usize, usize) = (1, 1),
        padding: (usize, usize) = (0, 0),
        dilation: (usize, usize) = (1, 1),
        groups: usize = 1,
        bias: bool = true,
        seed: INT = 0,
    }
}

fn conv_layer(cin: INT, cout: INT, k: Dynamic, opts: Map) -> RhaiResult<Model> {
    let o = ConvLayerOptions::parse("nn::conv2d_layer", opts)?;
    let kernel = crate::options::pair(&k, "nn::conv2d_layer kernel")?;
    let c = Conv2dOptions {
        stride: o.stride,
        padding: o.padding,
        dilation: o.dilation,
        groups: o.groups,
    };
    let (cin, cout) = (
        convert::usize_of(cin, "nn::conv2d_layer")?,
        convert::usize_of(cout, "nn::conv2d_layer")?,
    );
    let (bias, mut gen) = (o.bias, seed_of(o.seed));
    boxed(Conv2d::new(cin, cout, kernel, c, bias, &mut gen))
}

crate::options! {
    struct ConvTransposeLayerOptions {
        stride: (usize, usize) = (1, 1),
        padding: (usize, usize) = (0, 0),
        output_padding: (usize, usize) = (0, 0),
        dilation: (usize, usize) = (1, 1),
        groups: usize = 1,
        bias: bool = true,
        seed: INT = 0,
    }
}

fn conv_transpose_layer(cin: INT, cout: INT, k: Dynamic, opts: Map) -> RhaiResult<Model> {
    const WHAT: &str = "nn::conv_transpose2d_layer";
    let o = ConvTransposeLayerOptions::parse(WHAT, opts)?;
    let kernel = crate::options::pair(&k, &format!("{WHAT} kernel"))?;
    let c = ConvTranspose2dOptions {
        stride: o.stride,
        padding: o.padding,
        output_padding: o.output_padding,
        dilation: o.dilation,
        groups: o.groups,
    };
    let (cin, cout) = (
        convert::usize_of(cin, WHAT)?,
        convert::usize_of(cout, WHAT)?,
    );
    let (bias, mut gen) = (o.bias, seed_of(o.seed));
    boxed(ConvTranspose2d::new(cin, cout, kernel, c, bias, &mut gen))
}

crate::options! {
    struct SeedOptions {
        seed: INT = 0,
    }
}

fn embedding(n: INT, d: INT, opts: Map) -> RhaiResult<Model> {
    let o = SeedOptions::parse("nn::embedding", opts)?;
    let (n, d, mut gen) = (
        convert::usize_of(n, "nn::embedding")?,
        convert::usize_of(d, "nn::embedding")?,
        seed_of(o.seed),
    );
    boxed(Embedding::new(n, d, &mut gen))
}

crate::options! {
    struct LayerNormOptions {
        eps: f64 = 1e-5,
    }
}

fn layer_norm(d: INT, opts: Map) -> RhaiResult<Model> {
    let eps = LayerNormOptions::parse("nn::layer_norm", opts)?.eps;
    let d = convert::usize_of(d, "nn::layer_norm")?;
    boxed(LayerNorm::new(&[d], eps, true))
}

crate::options! {
    struct RmsNormOptions {
        eps: f64 = 1e-6,
    }
}

fn rms_norm(d: INT, opts: Map) -> RhaiResult<Model> {
    let eps = RmsNormOptions::parse("nn::rms_norm", opts)?.eps;
    let d = convert::usize_of(d, "nn::rms_norm")?;
    boxed(RmsNorm::new(d, eps))
}

fn dropout(p: rhai::FLOAT, opts: Map) -> RhaiResult<Model> {
    let o = SeedOptions::parse("nn::dropout", opts)?;
    let mut gen = seed_of(o.seed);
    boxed(Dropout::new(p, &mut gen))
}

fn script_module(title: &str, fields: Map) -> RhaiResult<Model> {
    super::ScriptModule::new(title, fields).map(|m| Model::new(Box::new(m)))
}

fn register_script_modules(api: &mut Api) {
    api.func(
        "module",
        "nn::module(name, #{ fields..., forward: |x| ... }) -> Model",
        "A module written in the script, as a PyTorch nn.Module subclass: model fields are its children (an array of models a numbered list), tensors that require grad its parameters, other tensors its buffers; forward runs with the fields as `this` (and this.training). Names, parameters(), train()/eval(), print and state dicts follow from the fields; inside forward, this.conv1(x) runs a child. See docs/guide/modules.md.",
        "let block = nn::module(\"Residual\", #{ fc: nn::linear(4, 4), forward: |x| x + this.fc(x).relu() }); print(block.forward(randn([2, 4])).shape);",
        script_module,
    );
    api.func(
        "module",
        "nn::module(#{ fields..., forward: |x| ... }) -> Model",
        "The same, printed as Module.",
        "let m = nn::module(#{ scale: 2.0, forward: |x| x * this.scale }); print(m.forward(ones([2])));",
        |fields: Map| script_module("Module", fields),
    );
}

fn register_layers(api: &mut Api) {
    super::pooling_layers::register(api);
    super::activation_layers::register(api);
    register_script_modules(api);
    api.func(
        "sequential",
        "nn::sequential([layers]) -> Model",
        "Layers applied in order; parameters are named 0.weight, 1.bias, ...",
        "let m = nn::sequential([nn::linear(2, 8), nn::activation(\"relu\"), nn::linear(8, 2)]);",
        sequential,
    );
    api.func(
        "embedding",
        "nn::embedding(num, dim, #{ seed }) -> Model",
        "A lookup table of num vectors of size dim (N(0, 1) init).",
        "let emb = nn::embedding(1000, 64, #{ seed: 1 });",
        embedding,
    );
    api.func(
        "embedding",
        "nn::embedding(num, dim) -> Model",
        "The same with seed 0.",
        "nn::embedding(100, 16)",
        |n: INT, d: INT| embedding(n, d, Map::new()),
    );
    api.func(
        "layer_norm",
        "nn::layer_norm(dim, #{ eps }) -> Model",
        "LayerNorm over the last dim with weight and bias.",
        "let ln = nn::layer_norm(64);",
        layer_norm,
    );
    api.func(
        "layer_norm",
        "nn::layer_norm(dim) -> Model",
        "The same with default options.",
        "nn::layer_norm(64)",
        |a: INT| layer_norm(a, Map::new()),
    );
    api.func(
        "rms_norm",
        "nn::rms_norm(dim, #{ eps }) -> Model",
        "RMSNorm over the last dim with a weight.",
        "let norm = nn::rms_norm(64, #{ eps: 1e-6 });",
        rms_norm,
    );
    api.func(
        "rms_norm",
        "nn::rms_norm(dim) -> Model",
        "The same with default options.",
        "nn::rms_norm(64)",
        |a: INT| rms_norm(a, Map::new()),
    );
    api.func(
        "dropout",
        "nn::dropout(p, #{ seed }) -> Model",
        "Zeroes elements with probability p in training mode (seeded); identity in eval.",
        "nn::dropout(0.1)",
        dropout,
    );
    api.func(
        "dropout",
        "nn::dropout(p) -> Model",
        "The same with default options.",
        "nn::dropout(0.1)",
        |a: rhai::FLOAT| dropout(a, Map::new()),
    );
    api.func(
        "batch_norm2d",
        "nn::batch_norm2d(channels) -> Model",
        "BatchNorm over [N, C, H, W] with running statistics.",
        "let bn = nn::batch_norm2d(16);",
        |c: INT| {
            let c = convert::usize_of(c, "nn::batch_norm2d")?;
            boxed(BatchNorm2d::new(c))
        },
    );
    api.func("conv2d_layer", "nn::conv2d_layer(in, out, kernel, #{ stride, padding, dilation, groups, bias, seed }) -> Model", "A Conv2d layer with PyTorch's default init.", "let conv = nn::conv2d_layer(3, 16, 3, #{ padding: 1 });", conv_layer);
    api.func("conv_transpose2d_layer", "nn::conv_transpose2d_layer(in, out, kernel, #{ stride, padding, output_padding, dilation, groups, bias, seed }) -> Model", "A ConvTranspose2d layer (weight [in, out/groups, kh, kw]) with PyTorch's default init: the upsampling half of decoders and U-Nets.", "let up = nn::conv_transpose2d_layer(16, 8, 2, #{ stride: 2 }); print(up.forward(randn([1, 16, 5, 5])).shape);", conv_transpose_layer);
}

crate::options! {
    struct LoadStateDictOptions {
        strict: bool = true,
        /// A map of prefix to prefix, checked below.
        rename: Dynamic,
    }
}

fn load_state_dict_with(m: &mut Model, state: Map, opts: Map) -> RhaiResult<Map> {
    const WHAT: &str = "load_state_dict";
    let o = LoadStateDictOptions::parse(WHAT, opts)?;
    let renames = match &o.rename {
        None => Vec::new(),
        Some(v) => v
            .read_lock::<Map>()
            .ok_or_else(|| {
                runtime_error(format!("{WHAT}: rename must be a map of prefix to prefix"))
            })?
            .iter()
            .map(|(from, to)| {
                to.clone()
                    .into_immutable_string()
                    .map(|to| (from.to_string(), to.to_string()))
                    .map_err(|t| {
                        runtime_error(format!("{WHAT}: rename {from} maps to a {t}, not a string"))
                    })
            })
            .collect::<RhaiResult<Vec<_>>>()?,
    };
    let state = map_to_tensors(&state, WHAT)?;
    let state = guard(|| rusting_brain::nn::rename_prefixes(state, &renames))?;
    let strict = o.strict;
    let report = guard(|| m.lock().load_state_dict(&state, strict))?;
    let names =
        |v: Vec<String>| -> Dynamic { v.into_iter().map(Dynamic::from).collect::<Array>().into() };
    let mut out = Map::new();
    out.insert("missing".into(), names(report.missing));
    out.insert("unexpected".into(), names(report.unexpected));
    Ok(out)
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

crate::options! {
    struct ExportOnnxOptions {
        opset: INT = ExportOptions::default().opset,
        dynamic_batch: bool = ExportOptions::default().dynamic_batch,
        /// The shape of one sample.
        input: Array,
    }
}

pub fn register(api: &mut Api) {
    register_layers(api);
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
        "to",
        "model.to(device) -> Model",
        "Moves the model's parameters and buffers to a device (\"cpu\", \"cuda\", \"cuda:1\") in place; create the optimizer after moving.",
        "let model = nn::linear(4, 2); model.to(\"cpu\");",
        |m: &mut Model, device: &str| -> RhaiResult<Model> {
            let d = convert::device(device)?;
            guard(|| m.lock().to_device(d))?;
            Ok(m.clone())
        },
    );
    api.method(
        "forward",
        "model.forward(x) -> Tensor",
        "Runs the model on a batch.",
        "let model = nn::linear(4, 2); let x = randn([3, 4]); let logits = model.forward(x);",
        |m: &mut Model, x: Tensor| guard(|| m.lock().forward(&x)),
    );
    api.method(
        "parameters",
        "model.parameters() -> array",
        "The trainable tensors (shared with the model: an optimizer updates them in place).",
        "let model = nn::linear(4, 2); optim::adamw(model.parameters(), #{ lr: 1e-3 })",
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
        "let model = nn::mlp([4, 8, 2]); model.named_parameters().keys()",
        |m: &mut Model| tensors_to_map(m.lock().named_parameters()),
    );
    api.method(
        "state_dict",
        "model.state_dict() -> map",
        "Parameters and buffers by name.",
        "let model = nn::linear(4, 2); io::save(model.state_dict(), \"model.safetensors\")",
        |m: &mut Model| tensors_to_map(m.lock().state_dict()),
    );
    api.method("load_state_dict", "model.load_state_dict(map)", "Copies values into the model; missing, unexpected or mis-shaped names are an error listing them all.", "let model = nn::linear(4, 2); io::save(model.state_dict(), \"model.safetensors\"); model.load_state_dict(io::load(\"model.safetensors\"))", |m: &mut Model, state: Map| {
        let state = map_to_tensors(&state, "load_state_dict")?;
        guard(|| m.lock().load_state_dict(&state, true).map(|_| ()))
    });
    api.method("load_state_dict", "model.load_state_dict(map, #{ strict, rename }) -> map", "With strict false, missing and unexpected names are skipped and returned as #{ missing, unexpected } (a mis-shaped one is still an error); rename maps name prefixes first, e.g. #{ \"module.\": \"\" } for a DistributedDataParallel checkpoint.", "let model = nn::linear(4, 2); let state = #{ \"module.weight\": zeros([2, 4]) }; print(model.load_state_dict(state, #{ strict: false, rename: #{ \"module.\": \"\" } }));", load_state_dict_with);
    api.method(
        "export_onnx",
        "model.export_onnx(path, #{ opset, dynamic_batch, input }) -> path",
        "Writes the model (its eval-mode forward) as ONNX for onnxruntime and other runtimes: opset 17 by default (13 to 21), the batch dimension named `batch` unless dynamic_batch is false, `input` the shape of one sample (taken from the first Linear when absent). A layer without an ONNX mapping is an error naming it.",
        "let model = nn::mlp([4, 8, 2]); model.export_onnx(\"out/mlp.onnx\", #{})",
        |m: &mut Model, path: &str, opts: Map| -> RhaiResult<String> {
            let o = ExportOnnxOptions::parse("export_onnx", opts)?;
            let export = ExportOptions {
                opset: o.opset,
                dynamic_batch: o.dynamic_batch,
            };
            let model = m.lock();
            let sample = match &o.input {
                Some(v) => shape(v, "export_onnx")?,
                None => model.input_shape().ok_or_else(|| {
                    runtime_error("export_onnx: this model does not fix its input shape; give #{ input: [sizes of one sample] }")
                })?,
            };
            let input: Vec<usize> = std::iter::once(1).chain(sample).collect();
            crate::onnx::prepare(path)?;
            guard(|| export_module(model.as_ref(), &input, path, &export))?;
            Ok(path.to_string())
        },
    );
    api.method(
        "num_parameters",
        "model.num_parameters() -> int",
        "The number of trainable scalars.",
        "let model = nn::linear(4, 2); print(model.num_parameters())",
        |m: &mut Model| m.lock().num_parameters() as INT,
    );
    api.method(
        "zero_grad",
        "model.zero_grad()",
        "Clears every parameter's gradient.",
        "let model = nn::linear(4, 2); model.zero_grad();",
        |m: &mut Model| m.lock().zero_grad(),
    );
}
