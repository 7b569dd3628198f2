//! What the YOLO blocks share beside `nn::Module`: a block lists its named children once and the
//! parameter names follow (`cv1.conv.weight`, `m.0.cv2.bn.running_mean`, as ultralytics writes
//! them); these name lists of children and lower a child into ONNX under its dotted name.

use crate::io::onnx::export::GraphBuilder;
use crate::nn::Module;
use crate::Result;

/// Lowers the named `child` of a block (its dotted name joins `prefix`).
pub fn lower_child(
    g: &mut GraphBuilder,
    prefix: &str,
    name: &str,
    child: &dyn Module,
    x: &str,
) -> Result<String> {
    child.to_onnx(g, &format!("{prefix}{name}."), x)
}

/// `name.0`, `name.1`, ... for a list of children (a ModuleList or nn.Sequential).
pub fn indexed<'a, T: Module>(name: &str, list: &'a [T]) -> Vec<(String, &'a dyn Module)> {
    crate::nn::indexed(name, list.iter().map(|m| m as &dyn Module))
}

pub fn indexed_mut<T: Module>(list: &mut [T]) -> Vec<&mut dyn Module> {
    list.iter_mut().map(|m| m as &mut dyn Module).collect()
}
