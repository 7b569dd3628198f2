//! Modules written in the script: `nn::module(#{ conv1: ..., forward: |x| ... })`.
//!
//! The map's fields are the module, as a PyTorch module's attributes are: a `Model` field is a
//! child named by its key, an array of models is a list of children (`blocks.0`, `blocks.1`), a
//! tensor that requires grad is a parameter, any other tensor a buffer, and anything else is
//! configuration the forward can read. `forward` is a closure called with the map as `this`
//! (plus `this.training`, the module's mode). Because the module is an engine `Module`, the
//! names, `parameters()`, `train()`/`eval()`, `print(model)` and the state dict follow from the
//! fields as they do for built-in layers, and it nests in `nn::sequential` and in other modules.

use super::Model;
use crate::error::{runtime_error, RhaiResult};
use crate::script_call;
use rhai::{Dynamic, FnPtr, Map};
use rusting_brain::nn::{Module, ModuleList};
use rusting_brain::{Error, Result, Tensor};

pub struct ScriptModule {
    title: String,
    /// The fields as the script wrote them: what the forward sees as `this`.
    fields: Map,
    forward: FnPtr,
    /// A model field, or a `ModuleList` of an array's models.
    children: Vec<(String, Box<dyn Module>)>,
    parameters: Vec<(String, Tensor)>,
    buffers: Vec<(String, Tensor)>,
    training: bool,
}

impl ScriptModule {
    /// Reads a module from its fields; `title` is what `print(model)` calls it.
    pub fn new(title: &str, fields: Map) -> RhaiResult<ScriptModule> {
        let what = format!("nn::module {title}");
        let forward = match fields.get("forward") {
            Some(f) => f.clone().try_cast::<FnPtr>().ok_or_else(|| {
                runtime_error(format!(
                    "{what}: forward must be a closure (|x| ...), got a {}",
                    f.type_name()
                ))
            })?,
            None => {
                return Err(runtime_error(format!(
                    "{what}: needs a forward closure, as #{{ forward: |x| ... }}"
                )))
            }
        };
        if fields.contains_key("training") {
            return Err(runtime_error(format!(
                "{what}: `training` is the module's mode (this.training in forward); name the field otherwise"
            )));
        }
        let mut module = ScriptModule {
            title: title.to_string(),
            forward,
            children: Vec::new(),
            parameters: Vec::new(),
            buffers: Vec::new(),
            training: true,
            fields: Map::new(),
        };
        for (name, value) in &fields {
            module.add_field(name, value, &what)?;
        }
        module.fields = fields;
        Ok(module)
    }

    fn add_field(&mut self, name: &str, value: &Dynamic, what: &str) -> RhaiResult<()> {
        if let Some(model) = value.clone().try_cast::<Model>() {
            self.children.push((name.to_string(), Box::new(model)));
        } else if let Some(t) = value.clone().try_cast::<Tensor>() {
            match t.requires_grad() {
                true => self.parameters.push((name.to_string(), t)),
                false => self.buffers.push((name.to_string(), t)),
            }
        } else if let Some(items) = value.read_lock::<rhai::Array>() {
            let models: Vec<Option<Model>> = items
                .iter()
                .map(|v| v.clone().try_cast::<Model>())
                .collect();
            if models.iter().any(Option::is_some) {
                let mut list: Vec<Box<dyn Module>> = Vec::new();
                for (i, m) in models.into_iter().enumerate() {
                    let m = m.ok_or_else(|| {
                        runtime_error(format!(
                            "{what}: {name} mixes models with a {} at index {i}; a list of children holds only models",
                            items[i].type_name()
                        ))
                    })?;
                    list.push(Box::new(m));
                }
                self.children
                    .push((name.to_string(), Box::new(ModuleList::new(list))));
            }
        }
        Ok(())
    }

    /// The map the forward sees as `this`: the fields and the mode.
    fn this(&self) -> Dynamic {
        let mut fields = self.fields.clone();
        fields.insert("training".into(), Dynamic::from(self.training));
        Dynamic::from_map(fields)
    }
}

impl Module for ScriptModule {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut this = self.this();
        let out = script_call::in_caller(|ctx| {
            self.forward
                .call_as_method_within_context::<Dynamic>(ctx, &mut this, (x.clone(),))
        })
        .ok_or_else(|| {
            Error::invalid(
                "forward",
                format!(
                    "{} is written in the script and runs only from a script call (model.forward(x))",
                    self.title
                ),
            )
        })?
        .map_err(|e| script_call::raise("forward", e))?;
        let type_name = out.type_name();
        out.try_cast::<Tensor>().ok_or_else(|| {
            Error::invalid(
                "forward",
                format!(
                    "{}.forward returned a {type_name}, not a Tensor",
                    self.title
                ),
            )
        })
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.children
            .iter()
            .map(|(n, m)| (n.clone(), m.as_ref()))
            .collect()
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        self.children
            .iter_mut()
            .map(|(_, m)| m.as_mut() as &mut dyn Module)
            .collect()
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        self.parameters.clone()
    }

    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        self.buffers.clone()
    }

    fn is_training(&self) -> bool {
        self.training
    }

    fn set_training(&mut self, on: bool) {
        self.training = on;
    }

    fn title(&self) -> String {
        self.title.clone()
    }
}
