//! The `nn::` namespace: functional ops and losses, and (with the nn layers) modules.

mod activation_layers;
mod attention_layers;
mod functional;
mod lora_methods;
mod modules;
mod pooling_layers;
mod recurrent_layers;
mod script_module;

pub use modules::{map_to_tensors, Model};
pub use script_module::ScriptModule;

use crate::help::Api;
use rhai::{Engine, Module};

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("nn"));
        functional::register(&mut api);
        modules::register(&mut api);
        attention_layers::register(&mut api);
        recurrent_layers::register(&mut api);
        lora_methods::register(&mut api);
    }
    engine.register_static_module("nn", module.into());
    engine.register_type_with_name::<Model>("Model");
}
