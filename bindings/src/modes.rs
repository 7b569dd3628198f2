//! Training and evaluation modes for every model type a script holds (`Model`,
//! `LanguageModel`, `Yolo`): `model.train()`, `model.train(on)`, `model.eval()` (read as
//! `model.eval_mode()`, see `syntax`) and the `model.training` property.

use crate::help::{self, Api};
use crate::lm::Lm;
use crate::nn::Model;
use crate::yolo::Yolo;
use rhai::{Engine, Module as RhaiModule};
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

pub fn register(engine: &mut Engine) {
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
