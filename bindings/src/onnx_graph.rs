//! The `onnx::` namespace: ONNX files run as graphs through the engine's ops. A loaded graph is
//! a `Model` like any layer (print, parameters, to, train, state_dict, optimizers); `run` feeds
//! several named inputs and gives every output by name.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use crate::nn::Model;
use rhai::{Array, Dynamic, Engine, Map, Module};
use rusting_brain::graph::{supported_operators, OnnxGraph};
use rusting_brain::Tensor;

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("onnx"));
        api.func(
            "load",
            "onnx::load(path) -> Model",
            "Reads an ONNX model (opset 7 to 21) to run as its own graph on the CPU or the GPU, with gradients after model.train(). Every operator is checked when the file is read: one the runtime lacks is an error naming it, its node and the opset (onnx::operators() lists the ones it has).",
            "let m = nn::mlp([4, 8, 2]); m.export_onnx(\"out/mlp.onnx\", #{}); let g = onnx::load(\"out/mlp.onnx\"); print(g); let y = g.forward(randn([3, 4]));",
            |path: &str| {
                guard(|| OnnxGraph::load(std::path::Path::new(path)))
                    .map(|g| Model::new(Box::new(g)))
            },
        );
        api.func(
            "operators",
            "onnx::operators() -> array",
            "The names of the ONNX operators onnx::load runs, sorted.",
            "print(onnx::operators().len());",
            || {
                supported_operators()
                    .into_iter()
                    .map(Dynamic::from)
                    .collect::<Array>()
            },
        );
        api.method(
            "input_names",
            "graph.input_names() -> array",
            "The names of an ONNX graph's inputs (what run's map takes), in the file's order.",
            "let m = nn::mlp([4, 2]); m.export_onnx(\"out/mlp.onnx\", #{}); print(onnx::load(\"out/mlp.onnx\").input_names());",
            |m: &mut Model| {
                m.with_layer("input_names", |g: &OnnxGraph| {
                    Ok(g.inputs.iter().map(|(n, _)| Dynamic::from(n.clone())).collect::<Array>())
                })
            },
        );
        api.method(
            "output_names",
            "graph.output_names() -> array",
            "The names of an ONNX graph's outputs (the keys of run's map), in the file's order.",
            "let m = nn::mlp([4, 2]); m.export_onnx(\"out/mlp.onnx\", #{}); print(onnx::load(\"out/mlp.onnx\").output_names());",
            |m: &mut Model| {
                m.with_layer("output_names", |g: &OnnxGraph| {
                    Ok(g.outputs.iter().cloned().map(Dynamic::from).collect::<Array>())
                })
            },
        );
        api.method(
            "run",
            "graph.run(#{ name: tensor, ... }) -> map",
            "Runs an ONNX graph (from onnx::load) on its named inputs; gives every output by name. forward(x) is the same for a graph of one input, giving its first output.",
            "let m = nn::mlp([4, 2]); m.export_onnx(\"out/mlp.onnx\", #{}); let g = onnx::load(\"out/mlp.onnx\"); let out = g.run(#{ input: randn([1, 4]) }); print(out.output);",
            |m: &mut Model, feeds: Map| -> RhaiResult<Map> {
                let feeds = feeds
                    .into_iter()
                    .map(|(name, v)| {
                        let t = v.try_cast::<Tensor>().ok_or_else(|| {
                            runtime_error(format!("run: input `{name}` must be a tensor"))
                        })?;
                        Ok((name.to_string(), t))
                    })
                    .collect::<RhaiResult<Vec<_>>>()?;
                m.with_layer("run", |g: &OnnxGraph| {
                    let out = guard(|| g.run(&feeds))?;
                    Ok(out
                        .into_iter()
                        .map(|(k, v)| (k.into(), Dynamic::from(v)))
                        .collect())
                })
            },
        );
    }
    engine.register_static_module("onnx", module.into());
}
