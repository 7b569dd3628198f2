//! What every `export_onnx` method shares: the options map (`opset`, `dynamic_batch`, plus the
//! model's own keys) and the output path, whose folder is made when missing.

use crate::error::{runtime_error, RhaiResult};
use crate::options::Options;
use rhai::Map;
use rusting_brain::io::onnx::export::ExportOptions;

/// The options of an export, accepting `opset`, `dynamic_batch` and `extra` keys.
pub fn options(opts: Map, extra: &[&str]) -> RhaiResult<(Options<'static>, ExportOptions)> {
    let keys: Vec<&str> = ["opset", "dynamic_batch"]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    let o = Options::new("export_onnx", opts, &keys)?;
    let export = ExportOptions {
        opset: o.int("opset", 17)?,
        dynamic_batch: o.bool("dynamic_batch", true)?,
    };
    Ok((o, export))
}

/// Makes the folder `path` will be written in.
pub fn prepare(path: &str) -> RhaiResult<()> {
    match std::path::Path::new(path).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
            .map_err(|e| runtime_error(format!("export_onnx: {}: {e}", dir.display()))),
        _ => Ok(()),
    }
}
