//! A pickled `torch.nn.Module`: the `__dict__` that `nn.Module.__init__` gives every module
//! (train flag, parameter, buffer and submodule dicts, the empty hook dicts) followed by the
//! class's own attributes, in the order torch and Python's pickler write them.

use super::pickle_writer::PyObject;
use crate::Tensor;

/// A module instance to pickle.
#[derive(Clone, Debug)]
pub struct ModuleObject {
    /// The class as `package.module.Name` (`torch.nn.modules.conv.Conv2d`).
    pub class: String,
    pub training: bool,
    /// `None` for a declared parameter that is absent (a convolution without bias).
    pub parameters: Vec<(String, Option<Tensor>)>,
    pub buffers: Vec<(String, Option<Tensor>)>,
    pub modules: Vec<(String, ModuleObject)>,
    /// The class's own attributes (`in_channels`, `eps`, ...).
    pub attributes: Vec<(String, PyObject)>,
}

/// The hook dicts of `nn.Module.__init__`, in its order, each an empty `OrderedDict` except
/// `_is_full_backward_hook` (None); `_modules` follows them.
const HOOK_DICTS: &[&str] = &[
    "_backward_pre_hooks",
    "_backward_hooks",
    "_is_full_backward_hook",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
];

impl ModuleObject {
    /// A module of `class` in eval mode with no members yet.
    pub fn new(class: &str) -> ModuleObject {
        ModuleObject {
            class: class.to_string(),
            training: false,
            parameters: Vec::new(),
            buffers: Vec::new(),
            modules: Vec::new(),
            attributes: Vec::new(),
        }
    }

    pub fn param(mut self, name: &str, t: Option<Tensor>) -> Self {
        self.parameters.push((name.to_string(), t));
        self
    }

    pub fn buffer(mut self, name: &str, t: Option<Tensor>) -> Self {
        self.buffers.push((name.to_string(), t));
        self
    }

    pub fn child(mut self, name: &str, m: ModuleObject) -> Self {
        self.modules.push((name.to_string(), m));
        self
    }

    pub fn attr(mut self, name: &str, v: PyObject) -> Self {
        self.attributes.push((name.to_string(), v));
        self
    }

    /// A container (`Sequential`, `ModuleList`) of `items`, named 0, 1, ...
    pub fn container(class: &str, items: Vec<ModuleObject>) -> ModuleObject {
        items
            .into_iter()
            .enumerate()
            .fold(ModuleObject::new(class), |m, (i, item)| {
                m.child(&i.to_string(), item)
            })
    }

    /// Every parameter's element count, this module's and its submodules'.
    pub fn num_parameters(&self) -> usize {
        let own: usize = self
            .parameters
            .iter()
            .filter_map(|(_, t)| t.as_ref().map(Tensor::numel))
            .sum();
        own + self
            .modules
            .iter()
            .map(|(_, m)| m.num_parameters())
            .sum::<usize>()
    }

    /// Sets the train flag of this module and every submodule.
    pub fn set_training(&mut self, on: bool) {
        self.training = on;
        for (_, m) in &mut self.modules {
            m.set_training(on);
        }
    }

    /// The pickled instance; parameters become `nn.Parameter`s with `requires_grad` set as
    /// given (ultralytics saves its final weights with it off).
    pub fn to_object(&self, requires_grad: bool) -> PyObject {
        let tensors = |items: &[(String, Option<Tensor>)], param: bool| {
            PyObject::str_dict(items.iter().map(|(n, t)| {
                let v = match t {
                    None => PyObject::None,
                    Some(t) if param => PyObject::Parameter {
                        data: t.clone(),
                        requires_grad,
                    },
                    Some(t) => PyObject::Tensor(t.clone()),
                };
                (n.clone(), v)
            }))
        };
        let mut state: Vec<(String, PyObject)> = vec![
            ("training".into(), PyObject::Bool(self.training)),
            ("_parameters".into(), tensors(&self.parameters, true)),
            ("_buffers".into(), tensors(&self.buffers, false)),
            (
                "_non_persistent_buffers_set".into(),
                PyObject::Set(Vec::new()),
            ),
        ];
        for hook in HOOK_DICTS {
            let v = match *hook {
                "_is_full_backward_hook" => PyObject::None,
                _ => PyObject::OrderedDict(Vec::new()),
            };
            state.push((hook.to_string(), v));
        }
        state.push((
            "_modules".into(),
            PyObject::str_dict(
                self.modules
                    .iter()
                    .map(|(n, m)| (n.clone(), m.to_object(requires_grad))),
            ),
        ));
        state.extend(self.attributes.iter().cloned());
        let (module, name) = self.class.rsplit_once('.').unwrap_or(("", &self.class));
        PyObject::Object {
            module: module.to_string(),
            name: name.to_string(),
            state: Box::new(PyObject::str_dict(state)),
        }
    }
}
