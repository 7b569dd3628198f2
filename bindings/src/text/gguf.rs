//! `text::load_gguf(path)`: the tokenizer of a llama.cpp GGUF file, and the fields of a GGUF
//! tokenizer that `lm::load_gguf` gives beside the model.

use crate::error::{guard, RhaiResult};
use rhai::{Dynamic, Map, INT};
use rusting_brain::text::gguf::GgufTokenizer;

fn id(v: Option<u32>) -> Dynamic {
    v.map_or(Dynamic::UNIT, |i| Dynamic::from_int(i as INT))
}

/// A GGUF tokenizer's fields of a script map: the tokenizer, its special ids, whether a prompt
/// starts with BOS, and the chat template's text.
pub fn tokenizer_fields(out: &mut Map, tok: GgufTokenizer) {
    out.insert("tokenizer".into(), Dynamic::from(tok.tokenizer));
    out.insert("bos_id".into(), id(tok.bos_id));
    out.insert("eos_id".into(), id(tok.eos_id));
    out.insert("add_bos".into(), tok.add_bos.into());
    out.insert(
        "chat_template".into(),
        tok.chat_template.map_or(Dynamic::UNIT, Dynamic::from),
    );
}

/// `text::load_gguf(path)`: only the tokenizer of a GGUF file (a model's, or a vocabulary-only
/// file), with the same fields as `lm::load_gguf` gives.
pub fn load_gguf(path: &str) -> RhaiResult<Map> {
    let tok = guard(|| rusting_brain::text::gguf::load_tokenizer(path))?;
    let mut out = Map::new();
    tokenizer_fields(&mut out, tok);
    Ok(out)
}
