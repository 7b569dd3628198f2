//! What every `export_onnx` method shares: the output path, whose folder is made when
//! missing. Each method's options struct has `opset` and `dynamic_batch` (defaulting to
//! `ExportOptions::default()`'s) before the model's own keys.

use crate::error::{runtime_error, RhaiResult};

/// Makes the folder `path` will be written in.
pub fn prepare(path: &str) -> RhaiResult<()> {
    match std::path::Path::new(path).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
            .map_err(|e| runtime_error(format!("export_onnx: {}: {e}", dir.display()))),
        _ => Ok(()),
    }
}
