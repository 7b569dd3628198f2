//! `lm::load_gguf(path)`: a llama.cpp GGUF file as a map of the model, its tokenizer and the
//! special ids a script needs to prompt it (the end-of-turn id to stop at, the chat template).
//! `model.export_gguf(path, #{ dtype, tokenizer, name })`: the other way.

use super::model::Lm;
use crate::error::{guard, RhaiResult};
use crate::text::gguf::tokenizer_fields;
use rhai::{Array, Dynamic, Map, INT};
use rusting_brain::models::transformer_lm::{
    export_gguf as export, load_gguf as load, GgufDType, GgufExportOptions,
};
use rusting_brain::text::Tokenizer;
use rusting_brain::DType;

/// The model in F32 on the script's device, and what the file says beside it.
pub fn load_gguf(path: &str) -> RhaiResult<Map> {
    let device = crate::tensor::default_device();
    let loaded = guard(|| load(path, DType::F32, device))?;
    let mut out = Map::new();
    out.insert("model".into(), Dynamic::from(Lm::new(loaded.model)));
    let info = &loaded.info;
    out.insert(
        "name".into(),
        info.name.clone().map_or(Dynamic::UNIT, Dynamic::from),
    );
    let types: Map = info
        .tensor_types
        .iter()
        .map(|(k, &n)| (k.into(), Dynamic::from_int(n as INT)))
        .collect();
    out.insert("tensor_types".into(), types.into());
    match loaded.tokenizer {
        Some(tok) => tokenizer_fields(&mut out, tok),
        None => {
            out.insert("tokenizer".into(), Dynamic::UNIT);
        }
    }
    Ok(out)
}

crate::options! {
    struct ExportGgufOptions {
        dtype: String,
        tokenizer: Tokenizer,
        name: String,
    }
}

/// Writes the model (and a tokenizer) as a llama.cpp GGUF file; returns the path, the tensor
/// count of each stored type and the weights that fell back to another type.
pub fn export_gguf(m: &mut Lm, path: &str, opts: Map) -> RhaiResult<Map> {
    let o = ExportGgufOptions::parse("export_gguf", opts)?;
    let dtype = match &o.dtype {
        Some(name) => guard(|| GgufDType::parse(name))?,
        None => GgufDType::F16,
    };
    let tokenizer = o.tokenizer;
    let options = GgufExportOptions {
        dtype,
        name: o.name,
    };
    let model = m.lock();
    let report = guard(|| export(&model, tokenizer.as_ref(), path, &options))?;
    let mut out = Map::new();
    out.insert("path".into(), Dynamic::from(path.to_string()));
    let types: Map = report
        .tensor_types
        .iter()
        .map(|(k, &n)| (k.into(), Dynamic::from_int(n as INT)))
        .collect();
    out.insert("tensor_types".into(), types.into());
    let fallbacks: Array = report
        .fallbacks
        .into_iter()
        .map(|(name, t)| Dynamic::from(format!("{name}: {t}")))
        .collect();
    out.insert("fallbacks".into(), fallbacks.into());
    for w in &report.warnings {
        eprintln!("WARNING {w}");
    }
    let warnings: Array = report.warnings.into_iter().map(Dynamic::from).collect();
    out.insert("warnings".into(), warnings.into());
    Ok(out)
}
