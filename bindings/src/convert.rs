//! Argument conversion between Rhai values and engine values. No numerics here.

use crate::error::{runtime_error, RhaiResult};
use rhai::{Array, Dynamic, FLOAT, INT};
use rusting_brain::{DType, Device, Tensor};

/// A number from an INT or FLOAT value.
pub fn number(v: &Dynamic, what: &str) -> RhaiResult<f64> {
    if let Some(f) = v.clone().try_cast::<FLOAT>() {
        return Ok(f);
    }
    if let Some(i) = v.clone().try_cast::<INT>() {
        return Ok(i as f64);
    }
    if let Some(b) = v.clone().try_cast::<bool>() {
        return Ok(b as u8 as f64);
    }
    Err(runtime_error(format!(
        "{what}: expected a number, got {}",
        v.type_name()
    )))
}

/// The strings of an array, naming the first element of another type.
pub fn string_list(list: &Array, what: &str) -> RhaiResult<Vec<String>> {
    list.iter()
        .map(|d| {
            d.clone().into_string().map_err(|t| {
                runtime_error(format!(
                    "{what}: expected an array of strings, got a {t} in it"
                ))
            })
        })
        .collect()
}

pub fn usize_of(v: INT, what: &str) -> RhaiResult<usize> {
    usize::try_from(v)
        .map_err(|_| runtime_error(format!("{what}: expected a non-negative integer, got {v}")))
}

/// A shape from an array of non-negative integers.
pub fn shape(arr: &Array, what: &str) -> RhaiResult<Vec<usize>> {
    arr.iter()
        .map(|d| {
            d.as_int()
                .map_err(|t| {
                    runtime_error(format!("{what}: shape entries must be integers, got {t}"))
                })
                .and_then(|i| usize_of(i, what))
        })
        .collect()
}

/// Dims (possibly negative) from an array of integers.
pub fn dims(arr: &Array, what: &str) -> RhaiResult<Vec<isize>> {
    arr.iter()
        .map(|d| {
            d.as_int()
                .map(|i| i as isize)
                .map_err(|t| runtime_error(format!("{what}: dims must be integers, got {t}")))
        })
        .collect()
}

/// The tensors of a script array; an error names `what` and the `item` (element, parameter)
/// that is not a tensor.
pub fn tensors(arr: &Array, what: &str, item: &str) -> RhaiResult<Vec<Tensor>> {
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            v.clone().try_cast::<Tensor>().ok_or_else(|| {
                runtime_error(format!(
                    "{what}: {item} {i} is a {}, not a Tensor",
                    v.type_name()
                ))
            })
        })
        .collect()
}

pub fn dtype(name: &str) -> RhaiResult<DType> {
    DType::parse(name).ok_or_else(|| {
        let valid: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        runtime_error(format!(
            "unknown dtype \"{name}\"; valid dtypes: {}",
            valid.join(", ")
        ))
    })
}

pub fn device(name: &str) -> RhaiResult<Device> {
    Device::parse(name).ok_or_else(|| {
        runtime_error(format!(
            "unknown device \"{name}\"; use \"cpu\", \"cuda\" or \"cuda:N\""
        ))
    })
}

/// Flattens a nested array of numbers or bools into values and a shape, and the dtype a literal
/// of those values gets (ints: i64, any float: f32, all bools: bool).
pub fn nested(arr: &Array) -> RhaiResult<(Vec<f64>, Vec<usize>, DType)> {
    fn walk(
        v: &Dynamic,
        depth: usize,
        shape: &mut Vec<usize>,
        out: &mut Vec<f64>,
        kinds: &mut (bool, bool, bool),
    ) -> RhaiResult<()> {
        if let Some(a) = v.read_lock::<Array>() {
            if shape.len() == depth {
                shape.push(a.len());
            } else if shape.get(depth) != Some(&a.len()) || shape.len() <= depth {
                return Err(runtime_error(format!(
                    "tensor: ragged nested array (a row of length {} where {:?} was expected)",
                    a.len(),
                    shape.get(depth)
                )));
            }
            for x in a.iter() {
                walk(x, depth + 1, shape, out, kinds)?;
            }
            return Ok(());
        }
        if depth != shape.len() {
            return Err(runtime_error(
                "tensor: ragged nested array (a number where a row was expected)",
            ));
        }
        if v.is_bool() {
            kinds.2 = true;
        } else if v.is_int() {
            kinds.0 = true;
        } else if v.is_float() {
            kinds.1 = true;
        }
        out.push(number(v, "tensor")?);
        Ok(())
    }
    let mut shape = vec![];
    let mut out = vec![];
    let mut kinds = (false, false, false);
    walk(
        &Dynamic::from_array(arr.clone()),
        0,
        &mut shape,
        &mut out,
        &mut kinds,
    )?;
    let dtype = match kinds {
        (_, true, _) => DType::F32,
        (true, false, _) => DType::I64,
        (false, false, true) => DType::Bool,
        _ => DType::F32,
    };
    Ok((out, shape, dtype))
}

/// A tensor as nested arrays of INT, FLOAT or bool (tolist).
/// The value of a one-element tensor as the script type of its dtype, so an integer count can
/// size a layer (`nn::mlp([n, ...])`) and a bool can be tested: integer dtypes are read as i64
/// (exact, where a float would round above 2^53).
pub fn item(t: &Tensor) -> rusting_brain::Result<Dynamic> {
    if t.numel() != 1 {
        return Err(rusting_brain::Error::invalid(
            "item",
            format!("needs a one-element tensor, got shape {:?}", t.shape()),
        ));
    }
    Ok(match t.dtype() {
        DType::Bool => Dynamic::from_bool(t.item()? != 0.0),
        d if d.is_float() => Dynamic::from_float(t.item()?),
        _ => Dynamic::from_int(t.to_vec::<i64>()?[0]),
    })
}

pub fn to_nested(t: &Tensor) -> rusting_brain::Result<Dynamic> {
    let values = t.to_vec_f64()?;
    let leaf = |v: f64| -> Dynamic {
        match t.dtype() {
            DType::Bool => Dynamic::from_bool(v != 0.0),
            d if d.is_float() => Dynamic::from_float(v),
            _ => Dynamic::from_int(v as INT),
        }
    };
    fn build(values: &[f64], shape: &[usize], leaf: &dyn Fn(f64) -> Dynamic) -> Dynamic {
        match shape.split_first() {
            None => leaf(values[0]),
            Some((&n, rest)) => {
                let step: usize = rest.iter().product();
                Dynamic::from_array(
                    (0..n)
                        .map(|i| build(&values[i * step..(i + 1) * step], rest, leaf))
                        .collect(),
                )
            }
        }
    }
    Ok(build(&values, t.shape(), &leaf))
}
