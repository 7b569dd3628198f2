//! The `io::` namespace: safetensors files of named tensors.

use crate::error::guard;
use crate::help::Api;
use crate::nn::map_to_tensors;
use rhai::{Dynamic, Engine, Map, Module};

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("io"));
        api.func(
            "save",
            "io::save(tensors, path)",
            "Writes a map of named tensors as a safetensors file (atomically).",
            "io::save(model.state_dict(), \"model.safetensors\");",
            |m: Map, path: &str| {
                let t = map_to_tensors(&m, "io::save")?;
                guard(|| rusting_brain::io::safetensors::save(path, &t, None))
            },
        );
        api.func(
            "load",
            "io::load(path) -> map",
            "Reads a safetensors file into a map of named tensors.",
            "let w = io::load(\"model.safetensors\");",
            |path: &str| {
                guard(|| rusting_brain::io::safetensors::load(path)).map(|t| {
                    t.into_iter()
                        .map(|(k, v)| (k.into(), Dynamic::from(v)))
                        .collect::<Map>()
                })
            },
        );
    }
    engine.register_static_module("io", module.into());
}
