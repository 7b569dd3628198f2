//! The Rhai host's bindings: registers the engine's types and functions into a `rhai::Engine`.
//! Only argument conversion, error mapping and help text live here; the numerics are the
//! engine's.

pub mod convert;
pub mod data;
pub mod device;
pub mod diffusion;
pub mod display;
pub mod dist;
pub mod ema;
pub mod error;
pub mod help;
pub mod io;
pub mod lm;
pub mod metrics;
pub mod modes;
pub mod nn;
pub mod onnx;
mod onnx_graph;
pub mod optim;
pub mod options;
pub mod plot;
pub mod progress;
pub mod script_call;
pub mod suggest;
pub mod syntax;
pub mod tensor;
pub mod text;
pub mod vision;
pub mod vision_models;
pub mod yolo;

use rhai::{Engine, Module};

/// Limits that keep a runaway script from exhausting the host. Loops may run as long as the
/// user wants (Ctrl-C stops them); recursion and expression depth are bounded. Public so that an
/// engine that only parses (the host's look at a script's arguments) accepts the same scripts.
pub fn set_limits(engine: &mut Engine) {
    engine.set_max_call_levels(256);
    engine.set_max_expr_depths(256, 256);
    engine.set_max_operations(0);
    engine.set_max_string_size(64 << 20);
    engine.set_max_array_size(16 << 20);
    engine.set_max_map_size(1 << 20);
}

/// What every engine that reads our scripts shares, including one that only parses: the limits
/// and `model.eval()` (see `syntax`).
pub fn set_language(engine: &mut Engine) {
    set_limits(engine);
    syntax::method_eval(engine);
}

/// A script engine with everything registered. Ctrl-C (the engine's cancel flag) stops a running
/// script between operations; long engine loops check the same flag.
pub fn new_engine() -> Engine {
    let mut engine = Engine::new();
    set_language(&mut engine);
    engine.on_progress(|_| {
        if rusting_brain::cancel::is_requested() {
            Some("cancelled".into())
        } else {
            None
        }
    });
    tensor::register(&mut engine);
    nn::register(&mut engine);
    optim::register(&mut engine);
    data::register(&mut engine);
    device::register(&mut engine);
    diffusion::register(&mut engine);
    dist::register(&mut engine);
    io::register(&mut engine);
    lm::register(&mut engine);
    metrics::register(&mut engine);
    plot::register(&mut engine);
    progress::register(&mut engine);
    text::register(&mut engine);
    vision::register(&mut engine);
    yolo::register(&mut engine);
    onnx_graph::register(&mut engine);
    display::register(&mut engine);
    modes::register(&mut engine);
    register_help(&mut engine);
    engine
}

fn register_help(engine: &mut Engine) {
    let mut module = Module::new();
    let mut api = help::Api::new(&mut module, None);
    api.func(
        "help",
        "help() -> string",
        "Lists the namespaces and the functions.",
        "print(help())",
        help::overview,
    );
    api.func(
        "help",
        "help(name) -> string",
        "Shows one function's signature, doc and example (each overload).",
        "print(help(\"matmul\"))",
        |name: &str| help::render(name),
    );
    engine.register_global_module(module.into());
}
