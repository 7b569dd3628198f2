//! The `nn::` namespace: functional ops and losses, and (with the nn layers) modules.

mod functional;

use crate::help::Api;
use rhai::{Engine, Module};

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("nn"));
        functional::register(&mut api);
    }
    engine.register_static_module("nn", module.into());
}
