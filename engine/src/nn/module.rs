//! The `Module` trait: a layer owns named parameters and buffers, so `state_dict` names match
//! published checkpoints (`layers.0.weight`, `bn.running_mean`), and loading writes into the
//! existing tensors so optimizers that hold those handles keep working.

use super::name_report::NameReport;
use super::summary::Summary;
use crate::{no_grad, Error, Result, Tensor};
use std::collections::{BTreeMap, BTreeSet};

/// A layer or a model. Parameters and buffers are `Tensor` handles: cloning one shares the
/// storage, so the optimizer, the module and a state dict all see the same values.
///
/// A module says what it holds itself (`own_parameters`, `own_buffers`, its mode flag and its
/// one-line `title`) and which modules it contains (`children`); the dotted names, the
/// parameter lists, `train`/`eval` and `print(model)` follow from that tree once, for every
/// module, as PyTorch derives them from `_parameters` and `_modules`.
pub trait Module: Send + Sync {
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Sub-modules with their names, in registration order (`0`, `conv1`, `layers.0`).
    fn children(&self) -> Vec<(String, &dyn Module)> {
        Vec::new()
    }

    /// The same sub-modules, mutably and in the same order (what `train` reaches).
    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        Vec::new()
    }

    /// Trainable tensors this module holds itself, not through a child, by local name.
    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// State this module holds itself that is saved but not trained (BatchNorm's running
    /// statistics).
    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// This module's own mode flag (`training` in PyTorch); `train` sets it on the whole tree.
    fn is_training(&self) -> bool;

    fn set_training(&mut self, on: bool);

    /// The line `print(model)` shows for this module: its type and configuration, as
    /// `Linear(in=4, out=64, bias=true)`; by default the type's name, as PyTorch prints a
    /// module's class.
    fn title(&self) -> String {
        let path = std::any::type_name::<Self>();
        let name = path.split('<').next().unwrap_or(path);
        name.rsplit("::").next().unwrap_or(name).to_string()
    }

    /// A container's configuration, printed as the first line inside its parentheses (PyTorch's
    /// `extra_repr` of a module with children); empty for none.
    fn detail(&self) -> String {
        String::new()
    }

    /// Trainable tensors with dotted names: this module's own, then each child's prefixed by
    /// the child's name.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = self.own_parameters();
        for (name, child) in self.children() {
            out.extend(prefixed(&name, child.named_parameters()));
        }
        out
    }

    /// Buffers with dotted names, as `named_parameters`.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        let mut out = self.own_buffers();
        for (name, child) in self.children() {
            out.extend(prefixed(&name, child.named_buffers()));
        }
        out
    }

    /// Switches train mode (dropout active, batch statistics) on or off, for the whole tree.
    fn train(&mut self, on: bool) {
        self.set_training(on);
        for child in self.children_mut() {
            child.train(on);
        }
    }

    /// What `print(model)` shows: the title, the parameters this module holds itself and its
    /// children's trees (`nn::describe` adds the total).
    fn summary(&self) -> Summary {
        Summary {
            line: self.title(),
            params: self.own_parameters().iter().map(|(_, t)| t.numel()).sum(),
            detail: self.detail(),
            children: self
                .children()
                .into_iter()
                .map(|(name, child)| (name, child.summary()))
                .collect(),
        }
    }

    /// Lowers this layer into the ONNX graph `g`, reading value `x`; returns the value it
    /// computes. `prefix` is the layer's dotted name (`layers.0.`), which names its weights as
    /// `state_dict` does. The lowering is the eval-mode forward. A layer without one says so.
    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        let _ = (g, x);
        Err(Error::invalid(
            "export_onnx",
            format!("{prefix}{} has no ONNX mapping", self.title()),
        ))
    }

    /// This module as `Any`, for a caller that needs a layer's own methods beyond `forward`
    /// (multi-head attention's `attend` with masks); `None` for layers that offer none.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// `as_any` for a layer's own methods that change it (a classifier replaced).
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }

    /// Calls `f` with the dotted name of every `Linear` at or under this module (what
    /// `nn::lora_targets` adapts by name). The default walks `children` beside `children_mut`;
    /// `Linear` answers itself, and a shared handle passes the walk to the layer it holds.
    fn for_each_linear_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut super::Linear) -> Result<()>,
    ) -> Result<()> {
        let names: Vec<String> = self.children().into_iter().map(|(n, _)| n).collect();
        let title = self.title();
        let children = self.children_mut();
        if names.len() != children.len() {
            return Err(crate::Error::invalid(
                "module",
                format!(
                    "{prefix}: {title} lists {} named children but {} mutable ones",
                    names.len(),
                    children.len()
                ),
            ));
        }
        for (name, child) in names.iter().zip(children) {
            let full = match prefix {
                "" => name.clone(),
                p => format!("{p}.{name}"),
            };
            child.for_each_linear_mut(&full, f)?;
        }
        Ok(())
    }

    /// The shape of one input sample (no batch dimension) when the layer fixes it, as a Linear
    /// does; what an export uses when no shape is given.
    fn input_shape(&self) -> Option<Vec<usize>> {
        None
    }

    /// Shorthand for `train(false)`.
    fn eval(&mut self) {
        self.train(false)
    }

    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// The parameters that require grad: what an optimizer takes. Parameters frozen by a LoRA
    /// adapter (or by hand) are left out.
    fn trainable_parameters(&self) -> Vec<Tensor> {
        self.parameters()
            .into_iter()
            .filter(|t| t.requires_grad())
            .collect()
    }

    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(|t| t.numel()).sum()
    }

    /// Moves every parameter and buffer to `device` in place (create optimizers after this).
    fn to_device(&self, device: crate::Device) -> Result<()> {
        for (_, t) in self
            .named_parameters()
            .into_iter()
            .chain(self.named_buffers())
        {
            t.relocate_(device)?;
        }
        Ok(())
    }

    /// Clears every parameter's gradient.
    fn zero_grad(&self) {
        for p in self.parameters() {
            p.set_grad(None);
        }
    }

    /// What a captured step's kernels take from this module (`capture::Key`): its mode, which
    /// parameters train, and where its parameters and buffers live. A module whose forward
    /// reads more from the host adds that too.
    fn capture_key(&self, key: &mut crate::capture::Key) {
        parameters_key(self, key);
    }

    /// Parameters and buffers by name. Like PyTorch, the values are detached handles that share
    /// storage with the module: take a copy if the module will keep training before you save.
    fn state_dict(&self) -> BTreeMap<String, Tensor> {
        self.named_parameters()
            .into_iter()
            .chain(self.named_buffers())
            .map(|(n, t)| (n, t.detach()))
            .collect()
    }

    /// Copies `state` into the existing tensors in place (casting dtypes, moving each value to
    /// its tensor's device, as PyTorch's does: host weights load into a GPU model). Nothing is written
    /// unless the whole load can succeed: a mis-shaped entry is always an error, and with
    /// `strict` so are missing and unexpected names. The error lists every problem at once.
    fn load_state_dict(
        &self,
        state: &BTreeMap<String, Tensor>,
        strict: bool,
    ) -> Result<LoadReport> {
        load_named(self.state_dict(), state, strict)
    }
}

/// The part of a captured step's key every module has (`Module::capture_key`): its mode,
/// which parameters train, and where its parameters and buffers live.
pub fn parameters_key<M: Module + ?Sized>(module: &M, key: &mut crate::capture::Key) {
    let params = module.named_parameters();
    key.add("training", module.is_training())
        .add(
            "trains",
            params
                .iter()
                .map(|(_, t)| t.requires_grad())
                .collect::<Vec<_>>(),
        )
        .add_words(params.iter().map(|(_, t)| t.data_address()))
        .add_words(module.named_buffers().iter().map(|(_, t)| t.data_address()));
}

/// What a non-strict load skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Names the module has and the state dict lacks.
    pub missing: Vec<String>,
    /// Names the state dict has and the module lacks.
    pub unexpected: Vec<String>,
}

/// The mode methods of a module that keeps its flag in a `training` field (every module keeps
/// its mode, as in PyTorch, whether or not its own forward depends on it).
macro_rules! training_field {
    () => {
        fn is_training(&self) -> bool {
            self.training
        }
        fn set_training(&mut self, on: bool) {
            self.training = on;
        }
    };
}
pub(crate) use training_field;

/// Copies `state` into the tensors `own` names, all or nothing, as `load_state_dict` does.
pub(crate) fn load_named(
    own: BTreeMap<String, Tensor>,
    state: &BTreeMap<String, Tensor>,
    strict: bool,
) -> Result<LoadReport> {
    let shapes = |m: &BTreeMap<String, Tensor>| {
        m.iter()
            .map(|(n, t)| (n.clone(), t.shape().to_vec()))
            .collect::<Vec<_>>()
    };
    let (own_shapes, state_shapes) = (shapes(&own), shapes(state));
    let mut problems = NameReport::compare(
        own_shapes.iter().map(|(n, s)| (n.as_str(), s.as_slice())),
        state_shapes.iter().map(|(n, s)| (n.as_str(), s.as_slice())),
    );
    let report = LoadReport {
        missing: problems.missing_names().to_vec(),
        unexpected: problems.unexpected_names().to_vec(),
    };
    if !strict {
        problems.tolerate_missing_and_unexpected();
    }
    problems.into_result("")?;
    no_grad(|| -> Result<()> {
        for (name, t) in &own {
            if let Some(src) = state.get(name) {
                t.copy_(&src.to_device(t.device())?)?;
            }
        }
        Ok(())
    })?;
    Ok(report)
}

/// `state` with each name that starts with a `from` prefix starting with its `to` instead (the
/// first matching pair wins): `("module.", "")` strips what DistributedDataParallel adds,
/// `("backbone.", "encoder.")` maps one model's names onto another's. Two names that become
/// one are an error naming both.
pub fn rename_prefixes(
    state: BTreeMap<String, Tensor>,
    renames: &[(String, String)],
) -> Result<BTreeMap<String, Tensor>> {
    let mut out: BTreeMap<String, (String, Tensor)> = BTreeMap::new();
    for (name, t) in state {
        let renamed = renames
            .iter()
            .find_map(|(from, to)| {
                name.strip_prefix(from.as_str())
                    .map(|rest| format!("{to}{rest}"))
            })
            .unwrap_or_else(|| name.clone());
        if let Some((first, _)) = out.get(&renamed) {
            return Err(Error::StateDict(format!(
                "renaming gives {first} and {name} the same name {renamed}"
            )));
        }
        out.insert(renamed, (name, t));
    }
    Ok(out.into_iter().map(|(n, (_, t))| (n, t)).collect())
}

/// How a layer that reads the last dims names its input in an error: `input [..., 64]`.
pub(crate) fn trailing_dims(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("input [..., {}]", dims.join(", "))
}

/// The `weight` and `bias` entries of a layer that may lack either, in PyTorch's order.
pub fn weight_and_bias(weight: Option<&Tensor>, bias: Option<&Tensor>) -> Vec<(String, Tensor)> {
    [("weight", weight), ("bias", bias)]
        .into_iter()
        .filter_map(|(n, t)| t.map(|t| (n.to_string(), t.clone())))
        .collect()
}

/// Children of a list (a ModuleList or nn.Sequential) named by index: `0`, `1`, ... under an
/// empty `name`, else `name.0`, `name.1`, ...
pub fn indexed<'a>(
    name: &str,
    list: impl IntoIterator<Item = &'a dyn Module>,
) -> Vec<(String, &'a dyn Module)> {
    list.into_iter()
        .enumerate()
        .map(|(i, m)| match name {
            "" => (i.to_string(), m),
            _ => (format!("{name}.{i}"), m),
        })
        .collect()
}

/// Prefixes a child's names with `prefix.`, as PyTorch names nested modules.
pub fn prefixed(prefix: &str, named: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    named
        .into_iter()
        .map(|(n, t)| (format!("{prefix}.{n}"), t))
        .collect()
}

/// Names appearing twice would make a state dict silently drop one tensor.
pub fn duplicate_names(named: &[(String, Tensor)]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    named
        .iter()
        .filter(|(n, _)| !seen.insert(n.as_str()))
        .map(|(n, _)| n.clone())
        .collect()
}

/// A fresh F32 parameter (requires grad) filled by `init`.
pub(crate) fn new_parameter(
    shape: &[usize],
    init: impl FnOnce(&Tensor) -> Result<()>,
) -> Result<Tensor> {
    let t = Tensor::zeros(shape, crate::DType::F32, crate::Device::Cpu)?;
    init(&t)?;
    t.set_requires_grad(true)?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{Activation, Mlp};
    use crate::{DType, Device, Generator};

    fn mlp(seed: u64) -> Mlp {
        Mlp::new(&[3, 4, 2], Activation::Relu, &mut Generator::new(seed)).unwrap()
    }

    #[test]
    fn named_parameters_use_dotted_pytorch_names() {
        let names: Vec<String> = mlp(0)
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "layers.0.weight",
                "layers.0.bias",
                "layers.2.weight",
                "layers.2.bias"
            ]
        );
    }

    #[test]
    fn renaming_replaces_prefixes_and_refuses_collisions() {
        let t = || Tensor::zeros(&[1], DType::F32, Device::Cpu).unwrap();
        let state: BTreeMap<String, Tensor> = [
            ("module.fc.weight".to_string(), t()),
            ("head.bias".to_string(), t()),
        ]
        .into();
        let renames = [("module.".to_string(), String::new())];
        let names: Vec<String> = rename_prefixes(state, &renames)
            .unwrap()
            .into_keys()
            .collect();
        assert_eq!(names, ["fc.weight", "head.bias"]);
        let clash: BTreeMap<String, Tensor> =
            [("a.w".to_string(), t()), ("b.w".to_string(), t())].into();
        let renames = [
            ("a.".to_string(), "c.".to_string()),
            ("b.".to_string(), "c.".to_string()),
        ];
        let err = rename_prefixes(clash, &renames).unwrap_err().to_string();
        assert!(err.contains("the same name c.w"), "{err}");
    }

    #[test]
    fn load_state_dict_copies_values_into_the_existing_parameters() {
        let (a, b) = (mlp(1), mlp(2));
        let before = b.parameters();
        let snapshot: BTreeMap<String, Tensor> = a
            .state_dict()
            .into_iter()
            .map(|(n, t)| (n, t.contiguous_copy().unwrap()))
            .collect();
        let report = b.load_state_dict(&snapshot, true).unwrap();
        assert_eq!(report, LoadReport::default());
        for ((p, q), old) in a.parameters().iter().zip(b.parameters()).zip(before) {
            assert_eq!(p.to_vec_f32().unwrap(), q.to_vec_f32().unwrap());
            assert_eq!(q.id(), old.id(), "the handle the optimizer holds must stay");
            assert!(q.requires_grad());
        }
    }

    #[test]
    fn load_state_dict_reports_missing_unexpected_and_misshaped_names_together() {
        let m = mlp(3);
        let mut state = m.state_dict();
        state.remove("layers.0.bias");
        state.remove("layers.2.weight");
        state.insert(
            "layers.9.weight".into(),
            Tensor::zeros(&[1], DType::F32, Device::Cpu).unwrap(),
        );
        state.insert(
            "layers.0.weight".into(),
            Tensor::zeros(&[5, 3], DType::F32, Device::Cpu).unwrap(),
        );
        let before = m.parameters()[1].to_vec_f32().unwrap();
        let msg = match m.load_state_dict(&state, true) {
            Err(Error::StateDict(msg)) => msg,
            other => panic!("expected a StateDict error, got {other:?}"),
        };
        for needle in [
            "missing 2: layers.0.bias, layers.2.weight",
            "unexpected 1: layers.9.weight",
            "mis-shaped 1: layers.0.weight is [5, 3] in the file, [4, 3] in the model",
        ] {
            assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
        }
        // Nothing was written by the failed load, not even the valid entries.
        assert_eq!(m.parameters()[1].to_vec_f32().unwrap(), before);

        // Non-strict still refuses a mis-shaped entry, but tolerates missing and unexpected ones.
        assert!(m.load_state_dict(&state, false).is_err());
        state.remove("layers.0.weight");
        let report = m.load_state_dict(&state, false).unwrap();
        assert_eq!(
            report.missing,
            ["layers.0.bias", "layers.0.weight", "layers.2.weight"]
        );
        assert_eq!(report.unexpected, ["layers.9.weight"]);
    }
}
