//! What every model type a script holds (`Model`, `LanguageModel`, `Yolo`) shares: training and
//! evaluation modes (`model.train()`, `model.train(on)`, `model.eval()`, read as
//! `model.eval_mode()`, see `syntax`, and the `model.training` property), and calling a model
//! held in a map field as a method, `this.conv1(x)` for `this.conv1.forward(x)`.

use crate::help::{self, Api};
use crate::lm::Lm;
use crate::nn::Model;
use crate::yolo::Yolo;
use rhai::{Dynamic, Engine, Map, Module as RhaiModule};
use rusting_brain::nn::Module;

/// A script's handle on a model: runs `f` on the module behind its lock.
trait ModelHandle: Clone + Send + Sync + 'static {
    fn with<R>(&self, f: impl FnOnce(&mut dyn Module) -> R) -> R;
}

impl ModelHandle for Model {
    fn with<R>(&self, f: impl FnOnce(&mut dyn Module) -> R) -> R {
        f(&mut **self.lock())
    }
}

impl ModelHandle for Lm {
    fn with<R>(&self, f: impl FnOnce(&mut dyn Module) -> R) -> R {
        f(&mut *self.lock())
    }
}

impl ModelHandle for Yolo {
    fn with<R>(&self, f: impl FnOnce(&mut dyn Module) -> R) -> R {
        f(&mut *self.lock())
    }
}

/// The same help text for every type, so each method has one help entry.
fn register_for<T: ModelHandle>(api: &mut Api, engine: &mut Engine) {
    api.method(
        "train",
        "model.train()",
        "Training mode (dropout on, batch norm updates its statistics).",
        "let model = nn::dropout(0.1); model.train();",
        |m: &mut T| m.with(|m| m.train(true)),
    );
    api.method(
        "train",
        "model.train(on)",
        "Training mode on or off.",
        "let model = nn::dropout(0.1); model.train(false);",
        |m: &mut T, on: bool| m.with(|m| m.train(on)),
    );
    api.method(
        "eval_mode",
        "model.eval_mode()",
        "Evaluation mode (dropout off, batch norm uses its running statistics); `model.eval()` calls it, as in PyTorch.",
        "let model = nn::dropout(0.1); model.eval(); model.eval_mode();",
        |m: &mut T| m.with(|m| m.train(false)),
    );
    engine.register_get("training", |m: &mut T| m.with(|m| m.is_training()));
}

/// Whether `v` is a model a script can call.
fn is_model(v: &Dynamic) -> bool {
    v.is::<Model>() || v.is::<Lm>() || v.is::<Yolo>()
}

/// `this.conv1(x)` runs `this.conv1.forward(x)`: a model in a map field called as a method, as
/// a script-written module's forward calls its children (`nn::module`). Rhai calls a map field
/// this way only when it holds a function pointer, so this hooks the lookup that failed; a name
/// that is neither a function nor a model field keeps Rhai's "function not found" error.
///
/// A model in a variable cannot be called as `model(x)`: Rhai resolves `name(...)` as a function
/// and hands a failed lookup neither the variable nor its scope. `model.forward(x)` is the call.
fn call_model_fields(engine: &mut Engine) {
    // `on_missing_function` is marked deprecated only as a warning that the API is volatile.
    #[allow(deprecated)]
    engine.on_missing_function(|name, args, is_method_call, mut ctx| {
        if !is_method_call {
            return Ok(None);
        }
        let Some((object, rest)) = args.split_first_mut() else {
            return Ok(None);
        };
        let field = object.read_lock::<Map>().and_then(|m| m.get(name).cloned());
        let Some(mut model) = field.filter(is_model) else {
            return Ok(None);
        };
        let mut call: Vec<&mut Dynamic> = std::iter::once(&mut model)
            .chain(rest.iter_mut().map(|a| &mut **a))
            .collect();
        ctx.call_fn_raw("forward", true, true, &mut call).map(Some)
    });
}

pub fn register(engine: &mut Engine) {
    call_model_fields(engine);
    let mut module = RhaiModule::new();
    {
        let mut api = Api::new(&mut module, None);
        register_for::<Model>(&mut api, engine);
        register_for::<Lm>(&mut api, engine);
        register_for::<Yolo>(&mut api, engine);
    }
    help::getter(
        "training",
        "model.training -> bool",
        "Whether the model is in training mode.",
        "let model = nn::dropout(0.1); model.eval(); print(model.training)",
    );
    engine.register_global_module(module.into());
}
