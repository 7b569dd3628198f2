//! Reading a tensor from a script: its values (item, tolist), sizes (numel, size) and whether
//! it shares storage with another.

use crate::convert;
use crate::error::{guard, runtime_error};
use crate::help::Api;
use rhai::INT;
use rusting_brain::Tensor;

pub fn register(api: &mut Api) {
    api.func(
        "item",
        "t.item() -> float | int | bool",
        "The value of a one-element tensor: a float for float dtypes, an int for integer dtypes, a bool for bool.",
        "let loss = randn([4]).mean(); loss.item()",
        |t: &mut Tensor| guard(|| convert::item(t)),
    );
    api.func(
        "tolist",
        "t.tolist() -> array",
        "The values as nested arrays.",
        "let x = randn([2, 2]); x.tolist()",
        |t: &mut Tensor| guard(|| convert::to_nested(t)),
    );
    api.func(
        "numel",
        "t.numel() -> int",
        "The number of elements.",
        "let x = randn([2, 3]); x.numel()",
        |t: &mut Tensor| t.numel() as INT,
    );
    api.func(
        "size",
        "t.size(dim) -> int",
        "The size of one dim (negative counts from the end).",
        "let x = randn([2, 3]); x.size(-1)",
        |t: &mut Tensor, d: INT| {
            let r = t.rank() as INT;
            let i = if d < 0 { d + r } else { d };
            if i < 0 || i >= r {
                return Err(runtime_error(format!(
                    "size: dim {d} is out of range for rank {r}"
                )));
            }
            Ok(t.shape()[i as usize] as INT)
        },
    );
    api.func(
        "shares_with",
        "a.shares_with(b) -> bool",
        "Whether two tensors are views of the same storage.",
        "let x = randn([2, 3]); x.shares_with(x.t())",
        |a: &mut Tensor, b: Tensor| a.shares_storage(&b),
    );
}
