//! Copies in another dtype or on another device: to, float, long.

use crate::convert;
use crate::error::{guard, runtime_error};
use crate::help::Api;
use rusting_brain::Tensor;

pub fn register(api: &mut Api) {
    api.func(
        "to",
        "t.to(dtype_or_device) -> Tensor",
        "A copy in another dtype (\"bf16\") or on another device (\"cuda\").",
        "let x = randn([2]); x.to(\"f64\")",
        |t: &mut Tensor, target: &str| match rusting_brain::DType::parse(target) {
            Some(d) => guard(|| t.to_dtype(d)),
            None => {
                let dev = convert::device(target).map_err(|_| {
                    runtime_error(format!("to: \"{target}\" is neither a dtype nor a device"))
                })?;
                guard(|| t.to_device(dev))
            }
        },
    );
    api.func(
        "float",
        "t.float() -> Tensor",
        "A copy as f32.",
        "let labels = tensor([0, 1, 1]); labels.float()",
        |t: &mut Tensor| guard(|| t.to_dtype(rusting_brain::DType::F32)),
    );
    api.func(
        "long",
        "t.long() -> Tensor",
        "A copy as i64.",
        "let x = randn([3]) * 3.0; x.long()",
        |t: &mut Tensor| guard(|| t.to_dtype(rusting_brain::DType::I64)),
    );
}
