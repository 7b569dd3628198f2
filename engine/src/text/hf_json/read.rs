//! Reading `tokenizer.json`: each section checked, every unsupported setting an error that
//! names its field. The normalizer, pre-tokenizer and decoder stages are read in `stages`.

use super::{field_error, FORMAT};
use crate::text::added::{AddedToken, AddedVocab};
use crate::text::bpe::{BpeModel, BpeOptions};
use crate::text::model::Model;
use crate::text::normalize::Normalizer;
use crate::text::symbols::AlphabetKind;
use crate::text::tokenizer::{Parts, Template, Tokenizer};
use crate::{Error, Result};
use serde_json::{Map, Value};
use std::collections::HashMap;

pub(super) struct Reader<'a> {
    pub name: &'a str,
    pub root: &'a Map<String, Value>,
}

impl Reader<'_> {
    pub(super) fn err(&self, field: &str, msg: impl std::fmt::Display) -> Error {
        field_error(self.name, field, msg)
    }

    pub fn tokenizer(&self) -> Result<Tokenizer> {
        for field in ["truncation", "padding"] {
            if self.root.get(field).is_some_and(|v| !v.is_null()) {
                return Err(self.err(field, "is set; truncation and padding are not supported here (they would change the ids), so set it to null"));
            }
        }
        let normalizer = self.normalizer()?;
        let added = self.added_tokens(&normalizer)?;
        let pre = self.pre_tokenizer()?;
        let decoder = self.decoder()?;
        let model = self.model(pre.is_byte_level())?;
        // An id is only a claim: a huge one would make every per-id table huge. Ids must be
        // about as dense as the entries that are actually in the file.
        let limit = 2 * (model.token_to_id.len() + added.tokens.len()) + 4096;
        let model = Model::Bpe(model);
        let highest_added = added
            .tokens
            .iter()
            .map(|t| t.id as usize)
            .max()
            .unwrap_or(0);
        if highest_added >= limit {
            return Err(self.err(
                "added_tokens",
                format!(
                    "id {highest_added} is far beyond the {} tokens in the file",
                    limit / 2
                ),
            ));
        }
        let (template, post_processor_json) = self.post_processor(&added)?;
        Ok(Tokenizer::from_parts(Parts {
            added,
            normalizer,
            pre,
            model,
            template,
            post_processor_json,
            decoder,
        }))
    }

    fn added_tokens(&self, normalizer: &Normalizer) -> Result<AddedVocab> {
        let list = match self.root.get("added_tokens") {
            None | Some(Value::Null) => return AddedVocab::new(vec![]),
            Some(Value::Array(a)) => a,
            Some(_) => return Err(self.err("added_tokens", "expected an array")),
        };
        let mut tokens = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let field = format!("added_tokens[{i}]");
            let id = t
                .get("id")
                .and_then(Value::as_u64)
                .filter(|&id| id <= u32::MAX as u64)
                .ok_or_else(|| self.err(&field, "needs an integer \"id\""))?;
            let content = t
                .get("content")
                .and_then(Value::as_str)
                .ok_or_else(|| self.err(&field, "needs a string \"content\""))?;
            let flag = |key: &str, default: bool| -> Result<bool> {
                match t.get(key) {
                    None | Some(Value::Null) => Ok(default),
                    Some(Value::Bool(b)) => Ok(*b),
                    Some(_) => Err(self.err(&format!("{field}.{key}"), "expected true or false")),
                }
            };
            if flag("single_word", false)? {
                return Err(self.err(
                    &format!("{field}.single_word"),
                    format!("is true for {content:?}; single-word added tokens are not supported"),
                ));
            }
            if content.is_empty() {
                return Err(self.err(&field, "has empty content"));
            }
            tokens.push(AddedToken {
                id: id as u32,
                content: content.to_string(),
                special: flag("special", false)?,
                lstrip: flag("lstrip", false)?,
                rstrip: flag("rstrip", false)?,
                normalized: flag("normalized", false)?,
            });
        }
        AddedVocab::with_normalizer(tokens, normalizer)
            .map_err(|e| self.err("added_tokens", e.to_string()))
    }

    /// The stages of a `Sequence` object at `field`, listed under `key`.
    pub(super) fn sequence<'v>(
        &self,
        v: &'v Value,
        field: &str,
        key: &str,
    ) -> Result<&'v Vec<Value>> {
        v.get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| self.err(field, format!("a Sequence needs a \"{key}\" array")))
    }

    /// The template's ids and the object to write back. Supported: null, ByteLevel (adds
    /// nothing), TemplateProcessing, and a Sequence of those.
    fn post_processor(&self, added: &AddedVocab) -> Result<(Template, Value)> {
        let v = match self.root.get("post_processor") {
            None | Some(Value::Null) => return Ok((Template::default(), Value::Null)),
            Some(v) => v,
        };
        let mut template = Template::default();
        self.post_stage(v, "post_processor", added, &mut template)?;
        Ok((template, v.clone()))
    }

    fn post_stage(
        &self,
        v: &Value,
        field: &str,
        added: &AddedVocab,
        out: &mut Template,
    ) -> Result<()> {
        match type_of(v) {
            Some("ByteLevel") => Ok(()),
            Some("Sequence") => {
                for (i, p) in self.sequence(v, field, "processors")?.iter().enumerate() {
                    self.post_stage(p, &format!("{field}.processors[{i}]"), added, out)?;
                }
                Ok(())
            }
            Some("TemplateProcessing") => self.template(v, field, added, out),
            _ => Err(self.err(
                field,
                format!("type {} is not supported; expected ByteLevel, TemplateProcessing or a Sequence of them", type_name(v)),
            )),
        }
    }

    fn template(
        &self,
        v: &Value,
        field: &str,
        added: &AddedVocab,
        out: &mut Template,
    ) -> Result<()> {
        let single = v
            .get("single")
            .and_then(Value::as_array)
            .ok_or_else(|| self.err(&format!("{field}.single"), "expected an array"))?;
        let mut seen_sequence = false;
        for (i, part) in single.iter().enumerate() {
            let f = format!("{field}.single[{i}]");
            if part.get("Sequence").is_some() {
                seen_sequence = true;
                continue;
            }
            let name = part
                .get("SpecialToken")
                .and_then(|s| s.get("id"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    self.err(
                        &f,
                        "expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}",
                    )
                })?;
            let ids: Vec<u32> = match v.get("special_tokens").and_then(|s| s.get(name)) {
                Some(entry) => entry
                    .get("ids")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|x| x.as_u64().map(|x| x as u32)).collect())
                    .ok_or_else(|| self.err(&format!("{field}.special_tokens.{name}"), "needs an \"ids\" array"))?,
                None => vec![added
                    .by_content(name)
                    .ok_or_else(|| self.err(&f, format!("special token {name:?} is neither in special_tokens nor in added_tokens")))?
                    .id],
            };
            if seen_sequence {
                out.suffix.extend(ids);
            } else {
                out.prefix.extend(ids);
            }
        }
        Ok(())
    }

    /// The BPE model; `byte_level`: the pre-tokenizer ends in `ByteLevel`, so symbols are
    /// bytes, else characters.
    fn model(&self, byte_level: bool) -> Result<BpeModel> {
        let model = self.root.get("model");
        let m = model
            .and_then(Value::as_object)
            .ok_or_else(|| self.err("model", "is missing or not an object"))?;
        match m.get("type").and_then(Value::as_str) {
            Some("BPE") => {}
            other => {
                return Err(self.err(
                    "model.type",
                    format!(
                        "{} is not supported; only \"BPE\" is",
                        other.map_or("missing".to_string(), |t| format!("{t:?}"))
                    ),
                ))
            }
        }
        if let Some(d) = m.get("dropout").and_then(Value::as_f64) {
            if d != 0.0 {
                return Err(self.err(
                    "model.dropout",
                    format!("{d} is not supported; BPE dropout makes encoding random"),
                ));
            }
        }
        for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
            if let Some(s) = m.get(key).and_then(Value::as_str) {
                if !s.is_empty() {
                    return Err(self.err(
                        &format!("model.{key}"),
                        format!("{s:?} is not supported (only empty or null is)"),
                    ));
                }
            }
        }
        let flag = |key: &str| match model {
            Some(v) => self.bool_field(v, "model", key, false),
            None => Ok(false),
        };
        let byte_fallback = flag("byte_fallback")?;
        if byte_fallback && byte_level {
            return Err(self.err("model.byte_fallback", "true is not supported with a ByteLevel pre-tokenizer (byte fallback belongs to SentencePiece-style vocabularies, where a byte-level one already has every byte)"));
        }
        let options = BpeOptions {
            alphabet: if byte_level {
                AlphabetKind::ByteLevel
            } else {
                AlphabetKind::Chars { byte_fallback }
            },
            ignore_merges: flag("ignore_merges")?,
            unk_token: m.get("unk_token").and_then(Value::as_str),
            fuse_unk: flag("fuse_unk")?,
        };
        let vocab_obj = m
            .get("vocab")
            .and_then(Value::as_object)
            .ok_or_else(|| self.err("model.vocab", "is missing or not an object"))?;
        let mut vocab = HashMap::with_capacity(vocab_obj.len());
        let limit = 2 * vocab_obj.len() as u64 + 4096;
        for (token, id) in vocab_obj {
            let id = id
                .as_u64()
                .filter(|&i| i < limit)
                .ok_or_else(|| self.err("model.vocab", format!("token {token:?} has id {id}; ids must be integers below {limit} for {} entries", vocab_obj.len())))?;
            vocab.insert(token.clone(), id as u32);
        }
        let list = m
            .get("merges")
            .and_then(Value::as_array)
            .ok_or_else(|| self.err("model.merges", "is missing or not an array"))?;
        let mut merges = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let pair = match item {
                Value::String(s) => {
                    let parts: Vec<&str> = s.split(' ').collect();
                    match parts.as_slice() {
                        [a, b] => Some((a.to_string(), b.to_string())),
                        _ => None,
                    }
                }
                Value::Array(a) => match a.as_slice() {
                    [Value::String(x), Value::String(y)] => Some((x.clone(), y.clone())),
                    _ => None,
                },
                _ => None,
            };
            merges.push(pair.ok_or_else(|| {
                self.err(
                    &format!("model.merges[{i}]"),
                    format!("{item} is not \"left right\" or [\"left\", \"right\"]"),
                )
            })?);
        }
        BpeModel::new(vocab, merges, &options).map_err(|e| match e {
            Error::InvalidArgument { msg, .. } => {
                Error::format(FORMAT, format!("{}: {msg}", self.name))
            }
            other => other,
        })
    }

    pub(super) fn bool_field(
        &self,
        v: &Value,
        field: &str,
        key: &str,
        default: bool,
    ) -> Result<bool> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.err(&format!("{field}.{key}"), "expected true or false")),
        }
    }
}

pub(super) fn type_of(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

pub(super) fn type_name(v: &Value) -> String {
    type_of(v).map_or_else(|| "(missing)".to_string(), |t| format!("{t:?}"))
}
