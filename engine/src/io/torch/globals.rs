//! The allow-list: which pickle globals may be referenced, and what each one builds.
//!
//! It follows the spirit of `torch.load(weights_only=True)` and ultralytics' restricted loader:
//! tensors, containers, `nn.Module` and ultralytics classes (built as inert objects), and the few
//! helper globals that checkpoints use to encode plain data (numpy scalars, bytes, paths). Any
//! other global is refused by name before anything is built from it.

use super::storage::ElemType;

/// What an allowed global does when the pickle calls it (or uses it as data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GlobalKind {
    OrderedDict,
    RebuildTensorV2,
    RebuildTensor,
    RebuildParameter,
    Storage(ElemType),
    TorchSize,
    TorchDevice,
    Reconstructor,
    NewObj,
    Set,
    FrozenSet,
    Bytes,
    Getattr,
    /// A class built as an inert [`super::Value::Object`].
    Class,
    NumpyScalar,
    NumpyDtype,
    CodecsEncode,
    Path,
    /// Data, never called: `torch.float16`, `builtins.object`.
    Data,
}

/// Torch dtype objects that may appear as plain values.
const TORCH_DTYPES: &[&str] = &[
    "float16",
    "half",
    "bfloat16",
    "float32",
    "float",
    "float64",
    "double",
    "int64",
    "long",
    "int32",
    "int",
    "int16",
    "short",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
];

/// Python 2 module names that `pickle` maps to their Python 3 names (as `fix_imports` does).
fn py3_module(module: &str) -> &str {
    match module {
        "__builtin__" => "builtins",
        "copy_reg" => "copyreg",
        other => other,
    }
}

/// The allowed global `module.name` as its canonical name and kind, or `None` if refused.
pub(super) fn classify(module: &str, name: &str) -> Option<(String, GlobalKind)> {
    use GlobalKind::*;
    let module = py3_module(module);
    let kind = match (module, name) {
        ("collections", "OrderedDict") => OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2") => RebuildTensorV2,
        ("torch._utils", "_rebuild_tensor") => RebuildTensor,
        ("torch._utils", "_rebuild_parameter" | "_rebuild_parameter_with_state") => {
            RebuildParameter
        }
        ("torch", "Size") => TorchSize,
        ("torch", "device") => TorchDevice,
        ("torch", n) if n.ends_with("Storage") => Storage(ElemType::from_storage_name(n)?),
        ("torch", n) if TORCH_DTYPES.contains(&n) => Data,
        ("copyreg", "_reconstructor") => Reconstructor,
        ("copyreg", "__newobj__") => NewObj,
        ("builtins", "object") => Data,
        ("builtins", "set") => Set,
        ("builtins", "frozenset") => FrozenSet,
        ("builtins", "bytes") => Bytes,
        ("builtins", "getattr") => Getattr,
        ("numpy.core.multiarray" | "numpy._core.multiarray", "scalar") => NumpyScalar,
        ("numpy", "dtype") => NumpyDtype,
        ("_codecs", "encode") => CodecsEncode,
        ("argparse", "Namespace") | ("types", "SimpleNamespace") => Class,
        ("pathlib" | "pathlib._local", n) if n.ends_with("Path") => Path,
        (m, _) if m.starts_with("torch.nn.modules.") => Class,
        (m, _) if m == "ultralytics" || m.starts_with("ultralytics.") => Class,
        _ => return None,
    };
    Some((format!("{module}.{name}"), kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_and_checkpoint_classes_are_allowed() {
        let conv = classify("torch.nn.modules.conv", "Conv2d").unwrap();
        assert_eq!(
            conv,
            ("torch.nn.modules.conv.Conv2d".into(), GlobalKind::Class)
        );
        let model = classify("ultralytics.nn.tasks", "DetectionModel").unwrap();
        assert_eq!(model.1, GlobalKind::Class);
        let half = classify("torch", "HalfStorage").unwrap();
        assert_eq!(half.1, GlobalKind::Storage(ElemType::F16));
    }

    #[test]
    fn python2_names_map_to_python3() {
        let object = classify("__builtin__", "object").unwrap();
        assert_eq!(object.0, "builtins.object");
        assert_eq!(
            classify("copy_reg", "_reconstructor").unwrap().1,
            GlobalKind::Reconstructor
        );
    }

    #[test]
    fn code_running_globals_are_refused() {
        for (m, n) in [
            ("os", "system"),
            ("posix", "system"),
            ("builtins", "eval"),
            ("__builtin__", "exec"),
            ("subprocess", "Popen"),
            ("torch", "load"),
            ("torch", "NotAStorage"),
            ("torch.nn", "Module"),
            ("ultralyticsx", "Evil"),
        ] {
            assert!(classify(m, n).is_none(), "{m}.{n} must be refused");
        }
    }
}
