//! Resize (and the older Upsample): each resized axis is a sum of gathers of the input along
//! it, weighted per output index (one tap for nearest, two for linear, four for cubic), with
//! the source coordinates ONNX's `coordinate_transformation_mode` defines. So resizing runs on
//! every device through index_select, and gradients flow through it.

use super::{one, OpFn};
use crate::graph::node::Node;
use crate::ops::interpolate::{cubic_taps, linear_taps, Taps};
use crate::{Result, Tensor};

pub const OPS: &[(&str, OpFn)] = &[("Resize", resize), ("Upsample", upsample)];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

struct Settings {
    mode: Mode,
    coordinates: String,
    nearest: String,
    cubic_a: f64,
    exclude_outside: bool,
}

fn resize(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let rank = x.rank();
    // Opset 10: (X, scales); 11 on: (X, roi, scales, sizes).
    let (scales, sizes) = if n.opset < 11 {
        (n.host_floats(1)?, None)
    } else {
        (n.host_floats(2)?, n.opt_host_ints(3)?)
    };
    let scales = scales.filter(|s| !s.is_empty());
    let sizes = sizes.filter(|s| !s.is_empty());
    n.require(
        n.opt_input(4).is_none() && !n.has("axes"),
        "the `axes` attribute",
    )?;
    n.require(n.int("antialias", 0)? == 0, "antialias = 1")?;
    n.require(
        n.string("keep_aspect_ratio_policy", "stretch")? == "stretch",
        "keep_aspect_ratio_policy other than stretch",
    )?;
    let settings = Settings {
        mode: match n.string("mode", "nearest")?.as_str() {
            "nearest" => Mode::Nearest,
            "linear" | "bilinear" => Mode::Linear,
            "cubic" | "bicubic" => Mode::Cubic,
            other => return Err(n.error(format!("mode `{other}` is not a resize mode"))),
        },
        coordinates: if n.opset < 11 {
            "asymmetric".into()
        } else {
            n.string("coordinate_transformation_mode", "half_pixel")?
        },
        nearest: if n.opset < 11 {
            "floor".into()
        } else {
            n.string("nearest_mode", "round_prefer_floor")?
        },
        cubic_a: f64::from(n.float("cubic_coeff_a", -0.75)?),
        exclude_outside: n.int("exclude_outside", 0)? != 0,
    };
    // `scale` per axis, and the resized length the coordinate formulas read: the output size
    // when sizes are given, the unrounded in * scale when scales are (as ONNX's reference).
    let (out, scale): (Vec<usize>, Vec<f64>) = match (sizes, scales) {
        (Some(sizes), _) => {
            n.require(
                sizes.len() == rank,
                format!("sizes {sizes:?} for rank {rank}"),
            )?;
            let out: Vec<usize> = sizes.iter().map(|&s| s.max(0) as usize).collect();
            let scale = out
                .iter()
                .zip(x.shape())
                .map(|(&o, &i)| o as f64 / i.max(1) as f64)
                .collect();
            (out, scale)
        }
        (None, Some(scales)) => {
            n.require(
                scales.len() == rank,
                format!("scales {scales:?} for rank {rank}"),
            )?;
            let out = scales
                .iter()
                .zip(x.shape())
                .map(|(&s, &i)| (i as f64 * s).floor() as usize)
                .collect();
            (out, scales)
        }
        (None, None) => return Err(n.error("needs scales or sizes")),
    };
    one(apply(n, x, &out, &scale, &settings)?)
}

fn upsample(n: &Node) -> Result<Vec<Tensor>> {
    let x = n.input(0)?;
    let scales = match n.floats("scales")? {
        Some(s) => s.into_iter().map(f64::from).collect(),
        None => n.host_floats(1)?.ok_or_else(|| n.error("needs scales"))?,
    };
    n.require(scales.len() == x.rank(), format!("scales {scales:?}"))?;
    let out: Vec<usize> = scales
        .iter()
        .zip(x.shape())
        .map(|(&s, &i)| (i as f64 * s).floor() as usize)
        .collect();
    let settings = Settings {
        mode: match n.string("mode", "nearest")?.as_str() {
            "nearest" => Mode::Nearest,
            "linear" | "bilinear" => Mode::Linear,
            other => return Err(n.error(format!("mode `{other}` is not an upsample mode"))),
        },
        coordinates: "asymmetric".into(),
        nearest: "floor".into(),
        cubic_a: -0.75,
        exclude_outside: false,
    };
    one(apply(n, x, &out, &scales, &settings)?)
}

fn apply(n: &Node, x: &Tensor, out: &[usize], scale: &[f64], s: &Settings) -> Result<Tensor> {
    // Integer nearest upscaling of the last two dims is one kernel.
    let last_two_only = out.len() == 4 && out[0] == x.shape()[0] && out[1] == x.shape()[1];
    if s.mode == Mode::Nearest && last_two_only && x.dtype().is_float() {
        let (fh, fw) = (out[2] / x.shape()[2].max(1), out[3] / x.shape()[3].max(1));
        let exact = fh * x.shape()[2] == out[2] && fw * x.shape()[3] == out[3] && fh > 0 && fw > 0;
        let floors = matches!(
            s.nearest.as_str(),
            "floor" | "round_prefer_floor" | "round_prefer_ceil"
        ) && matches!(
            s.coordinates.as_str(),
            "asymmetric" | "half_pixel" | "pytorch_half_pixel"
        );
        // With integer factors, asymmetric+floor and half_pixel+round both pick source i / f.
        let picks_floor = s.coordinates == "asymmetric" && s.nearest == "floor"
            || s.coordinates != "asymmetric" && s.nearest.starts_with("round");
        if exact && floors && picks_floor && (fh, fw) != (1, 1) {
            return x.upsample_nearest2d(fh, fw);
        }
    }
    let mut y = x.clone();
    for axis in 0..out.len() {
        let size = x.shape()[axis];
        if out[axis] == size && scale[axis] == 1.0 {
            continue;
        }
        let taps = taps(n, size, out[axis], scale[axis], s)?;
        y = y.resample_axis(axis, &taps)?;
    }
    Ok(y)
}

fn taps(n: &Node, size: usize, out: usize, scale: f64, s: &Settings) -> Result<Taps> {
    // With sizes given scale = out / size, so this is the output size; with scales, ONNX's
    // formulas read the unrounded size.
    let resized = size as f64 * scale;
    let source = |o: usize| -> Result<f64> {
        let o = o as f64;
        Ok(match s.coordinates.as_str() {
            "half_pixel" => (o + 0.5) / scale - 0.5,
            "pytorch_half_pixel" => {
                if resized > 1.0 {
                    (o + 0.5) / scale - 0.5
                } else {
                    0.0
                }
            }
            "align_corners" => {
                if resized > 1.0 {
                    o * (size as f64 - 1.0) / (resized - 1.0)
                } else {
                    0.0
                }
            }
            "asymmetric" => o / scale,
            "half_pixel_symmetric" => {
                let adj = out as f64 / (scale * size as f64);
                let center = size as f64 / 2.0;
                let offset = center * (1.0 - adj);
                offset + (o + 0.5) / scale - 0.5
            }
            other => {
                return Err(n.error(format!(
                    "coordinate_transformation_mode `{other}` is not supported"
                )))
            }
        })
    };
    let last = size as i64 - 1;
    let clamp = |i: i64| i.clamp(0, last);
    let coords: Vec<f64> = (0..out).map(source).collect::<Result<_>>()?;
    Ok(match s.mode {
        Mode::Nearest => {
            let pick = |c: f64| -> Result<i64> {
                Ok(match s.nearest.as_str() {
                    "round_prefer_floor" => {
                        if c.fract() == 0.5 {
                            c.floor()
                        } else {
                            c.round()
                        }
                    }
                    "round_prefer_ceil" => (c + 0.5).floor(),
                    "floor" => c.floor(),
                    "ceil" => c.ceil(),
                    other => {
                        return Err(n.error(format!("nearest_mode `{other}` is not supported")))
                    }
                } as i64)
            };
            let idx = coords
                .iter()
                .map(|&c| pick(c).map(clamp))
                .collect::<Result<_>>()?;
            vec![(idx, vec![1.0; out])]
        }
        Mode::Linear => linear_taps(&coords, size),
        Mode::Cubic => cubic_taps(&coords, size, s.cubic_a, s.exclude_outside),
    })
}
