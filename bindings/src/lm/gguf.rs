//! `lm::load_gguf(path)`: a llama.cpp GGUF file as a map of the model, its tokenizer and the
//! special ids a script needs to prompt it (the end-of-turn id to stop at, the chat template).

use super::model::Lm;
use crate::error::{guard, RhaiResult};
use rhai::{Dynamic, Map, INT};
use rusting_brain::models::transformer_lm::load_gguf as load;
use rusting_brain::DType;

fn id(v: Option<u32>) -> Dynamic {
    v.map_or(Dynamic::UNIT, |i| Dynamic::from_int(i as INT))
}

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
    let Some(tok) = loaded.tokenizer else {
        out.insert("tokenizer".into(), Dynamic::UNIT);
        return Ok(out);
    };
    out.insert("tokenizer".into(), Dynamic::from(tok.tokenizer));
    out.insert("bos_id".into(), id(tok.bos_id));
    out.insert("eos_id".into(), id(tok.eos_id));
    out.insert("add_bos".into(), tok.add_bos.into());
    out.insert(
        "chat_template".into(),
        tok.chat_template.map_or(Dynamic::UNIT, Dynamic::from),
    );
    Ok(out)
}
