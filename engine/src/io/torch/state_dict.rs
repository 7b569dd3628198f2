//! Named tensors out of a loaded file: from a pickled `nn.Module`, or from a plain dict.

use super::storage::torch_error;
use super::value::Value;
use crate::{Result, Tensor};

/// The state dict of an inert `nn.Module` object, named as PyTorch's `state_dict()` names it
/// (`model.0.conv.weight`) and in its order: a module's parameters, then its persistent
/// buffers, then each child module's entries. `None` entries (an absent bias) are skipped.
pub fn module_state_dict(module: &Value) -> Result<Vec<(String, Tensor)>> {
    let mut out = Vec::new();
    collect(module, "", 0, &mut out)?;
    Ok(out)
}

/// Named tensors of either a module object or a dict of name to tensor (a saved
/// `state_dict()`, as in LPIPS' files).
pub fn state_dict(value: &Value) -> Result<Vec<(String, Tensor)>> {
    match value {
        Value::Object { .. } => module_state_dict(value),
        Value::Dict(items) => items
            .iter()
            .map(|(k, v)| {
                let name = match k {
                    Value::Str(s) => s.clone(),
                    Value::Int(i) => i.to_string(),
                    other => {
                        return Err(torch_error(format!("state dict key is a {}", other.kind())))
                    }
                };
                match v {
                    Value::Tensor(t) => Ok((name, t.clone())),
                    other => Err(torch_error(format!(
                        "state dict entry `{name}` is a {}, not a tensor",
                        other.kind()
                    ))),
                }
            })
            .collect(),
        other => Err(torch_error(format!(
            "a {} is neither a module nor a dict of tensors",
            other.kind()
        ))),
    }
}

/// Modules nest a few levels; this bounds a hostile file's recursion.
const MAX_MODULE_DEPTH: usize = 200;

fn collect(
    module: &Value,
    prefix: &str,
    depth: usize,
    out: &mut Vec<(String, Tensor)>,
) -> Result<()> {
    let at = if prefix.is_empty() {
        "the root module"
    } else {
        prefix.trim_end_matches('.')
    };
    let Value::Object { state, class, .. } = module else {
        return Err(torch_error(format!(
            "{at} is a {}, not a module object",
            module.kind()
        )));
    };
    if depth > MAX_MODULE_DEPTH {
        return Err(torch_error(format!(
            "modules nest deeper than {MAX_MODULE_DEPTH} at {at}"
        )));
    }
    let field = |name: &str| -> Result<&[(Value, Value)]> {
        match state.get(name) {
            Some(Value::Dict(items)) => Ok(items),
            Some(other) => Err(torch_error(format!(
                "{at} (`{class}`): `{name}` is a {}",
                other.kind()
            ))),
            None => Err(torch_error(format!(
                "{at} (`{class}`) has no `{name}`; it is not an nn.Module"
            ))),
        }
    };
    let non_persistent: Vec<&str> = match state.get("_non_persistent_buffers_set") {
        Some(Value::Set(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let params = field("_parameters")?;
    let buffers = field("_buffers")?;
    let persistent = buffers
        .iter()
        .filter(|(k, _)| !k.as_str().is_some_and(|n| non_persistent.contains(&n)));
    for (key, value) in params.iter().chain(persistent) {
        let name = format!("{prefix}{}", key_name(key, at)?);
        match value {
            Value::None => {}
            Value::Tensor(t) => out.push((name, t.clone())),
            other => {
                return Err(torch_error(format!(
                    "`{name}` is a {}, not a tensor",
                    other.kind()
                )))
            }
        }
    }
    for (key, child) in field("_modules")? {
        let name = key_name(key, at)?;
        if matches!(child, Value::None) {
            continue;
        }
        collect(child, &format!("{prefix}{name}."), depth + 1, out)?;
    }
    Ok(())
}

fn key_name(key: &Value, at: &str) -> Result<String> {
    match key {
        Value::Str(s) => Ok(s.clone()),
        other => Err(torch_error(format!(
            "{at}: a {} key among its members",
            other.kind()
        ))),
    }
}
