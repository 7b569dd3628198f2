//! flip, roll, repeat_interleave, pad and masked_select.

use crate::convert::{dims, usize_of};
use crate::error::{guard, runtime_error};
use crate::help::Api;
use rhai::{Array, Map, INT};
use rusting_brain::ops::rearrange::PadMode;
use rusting_brain::Tensor;

crate::options! {
    struct PadOptions {
        mode: String = "constant".into(),
        value: f64 = 0.0,
    }
}

fn pad(t: &mut Tensor, pads: Array, opts: Map) -> crate::error::RhaiResult<Tensor> {
    let PadOptions { mode: name, value } = PadOptions::parse("pad", opts)?;
    let pads = pads
        .iter()
        .map(|p| {
            p.as_int()
                .map_err(|got| runtime_error(format!("pad: sizes are ints, got a {got}")))
                .and_then(|p| usize_of(p, "pad"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mode = PadMode::parse(&name, value).ok_or_else(|| {
        runtime_error(format!(
            "pad: unknown mode \"{name}\"; use constant, reflect, replicate or circular"
        ))
    })?;
    guard(|| t.pad(&pads, mode))
}

pub fn register(api: &mut Api) {
    api.func(
        "flip",
        "t.flip(dims) -> Tensor",
        "The elements in reverse order along each dim of dims (torch.flip).",
        "let x = arange(6).reshape([2, 3]); x.flip([1])",
        |t: &mut Tensor, d: Array| {
            let d = dims(&d, "flip")?;
            guard(|| t.flip(&d))
        },
    );
    api.func(
        "roll",
        "t.roll(shift, dim) -> Tensor",
        "The elements shifted by shift along dim, wrapping around (torch.roll).",
        "let x = arange(5); x.roll(2, 0)",
        |t: &mut Tensor, shift: INT, d: INT| guard(|| t.roll(shift, d as isize)),
    );
    api.func(
        "repeat_interleave",
        "t.repeat_interleave(repeats, dim) -> Tensor",
        "Each element repeated in place along dim: [a, b] with 2 gives [a, a, b, b] (torch.repeat_interleave).",
        "let x = tensor([1, 2]); x.repeat_interleave(2, 0)",
        |t: &mut Tensor, r: INT, d: INT| {
            let r = usize_of(r, "repeat_interleave")?;
            guard(|| t.repeat_interleave(r, d as isize))
        },
    );
    api.func(
        "pad",
        "t.pad(pads, #{ mode, value }) -> Tensor",
        "Pads the last dims as torch.nn.functional.pad: pads = [left, right] for the last dim, then [top, bottom], ...; mode constant (with value, default 0), reflect, replicate or circular.",
        "let img = randn([1, 3, 4, 4]); img.pad([1, 1, 1, 1], #{ mode: \"reflect\" }).shape",
        pad,
    );
    api.func(
        "pad",
        "t.pad(pads) -> Tensor",
        "Pads the last dims with zeros.",
        "let x = ones([2, 2]); x.pad([1, 0])",
        |t: &mut Tensor, pads: Array| pad(t, pads, Map::new()),
    );
    api.func(
        "masked_select",
        "t.masked_select(mask) -> Tensor",
        "The elements where the bool mask (broadcast with t) is true, in one dim (torch.masked_select; also written t[mask]).",
        "let x = tensor([1.0, -2.0, 3.0]); x.masked_select(x > 0.0)",
        |t: &mut Tensor, mask: Tensor| guard(|| t.masked_select(&mask)),
    );
}
