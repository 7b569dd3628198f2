//! Reading `tokenizer.json`: each section checked, every unsupported setting an error that
//! names its field. The normalizer, pre-tokenizer and decoder stages are read in `stages`.

use super::{field_error, FORMAT};
use crate::text::added::{AddedToken, AddedVocab};
use crate::text::bpe::{Affixes, BpeModel, BpeOptions};
use crate::text::limits::Limits;
use crate::text::model::Model;
use crate::text::normalize::Normalizer;
use crate::text::symbols::AlphabetKind;
use crate::text::tokenizer::{Parts, Template, Tokenizer};
use crate::text::unigram::UnigramModel;
use crate::text::wordpiece::WordPieceModel;
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

    /// A check's complaint about the tokenizer, as a format error naming this file.
    fn in_file(&self, e: Error) -> Error {
        match e {
            Error::InvalidArgument { msg, .. } => {
                Error::format(FORMAT, format!("{}: {msg}", self.name))
            }
            other => other,
        }
    }

    pub fn tokenizer(&self) -> Result<Tokenizer> {
        let limits = Limits::read(self.root.get("truncation"), self.root.get("padding"))
            .map_err(|e| self.in_file(e))?;
        let normalizer = self.normalizer()?;
        let pre = self.pre_tokenizer()?;
        let decoder = self.decoder()?;
        let model = self.model(pre.is_byte_level())?;
        let added = self.added_tokens(&normalizer, &model)?;
        // An id is only a claim: a huge one would make every per-id table huge. Ids must be
        // about as dense as the entries that are actually in the file.
        let limit = 2 * (model.id_count() + added.tokens.len()) + 4096;
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
            limits,
        }))
    }

    /// The added tokens. One whose content the model's vocabulary already has takes the
    /// vocabulary's id, whatever the file says, as `tokenizers` does when it loads the file.
    fn added_tokens(&self, normalizer: &Normalizer, model: &Model) -> Result<AddedVocab> {
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
            if content.is_empty() {
                return Err(self.err(&field, "has empty content"));
            }
            tokens.push(AddedToken {
                id: model.token_id(content).unwrap_or(id as u32),
                content: content.to_string(),
                special: flag("special", false)?,
                lstrip: flag("lstrip", false)?,
                rstrip: flag("rstrip", false)?,
                normalized: flag("normalized", false)?,
                single_word: flag("single_word", false)?,
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
    /// nothing), TemplateProcessing, BertProcessing and RobertaProcessing (a class token
    /// before, a separator after), and a Sequence of those.
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
            // Their other options (trim_offsets, add_prefix_space) shape offsets only.
            Some("BertProcessing" | "RobertaProcessing") => {
                let token = |key: &str| -> Result<u32> {
                    match v.get(key).and_then(Value::as_array).map(Vec::as_slice) {
                        Some([Value::String(_), id]) => id
                            .as_u64()
                            .filter(|&id| id <= u32::MAX as u64)
                            .map(|id| id as u32)
                            .ok_or_else(|| self.err(&format!("{field}.{key}"), "needs an integer id")),
                        _ => Err(self.err(&format!("{field}.{key}"), "expected [\"token\", id]")),
                    }
                };
                out.prefix.push(token("cls")?);
                out.suffix.insert(0, token("sep")?);
                Ok(())
            }
            _ => Err(self.err(
                field,
                format!("type {} is not supported; expected ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing or a Sequence of them", type_name(v)),
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

    /// The model; `byte_level`: the pre-tokenizer ends in `ByteLevel`, so a BPE's symbols
    /// are bytes, else characters.
    fn model(&self, byte_level: bool) -> Result<Model> {
        let v = self
            .root
            .get("model")
            .filter(|v| v.is_object())
            .ok_or_else(|| self.err("model", "is missing or not an object"))?;
        let kind = v.get("type").and_then(Value::as_str);
        if !matches!(kind, Some("BPE" | "WordPiece" | "Unigram")) {
            return Err(self.err(
                "model.type",
                format!(
                    "{} is not supported; expected \"BPE\", \"WordPiece\" or \"Unigram\"",
                    kind.map_or("missing".to_string(), |t| format!("{t:?}"))
                ),
            ));
        }
        if byte_level && kind != Some("BPE") {
            return Err(self.err(
                "pre_tokenizer",
                format!("a ByteLevel stage is supported with a BPE model only, not {kind:?}"),
            ));
        }
        match kind {
            Some("WordPiece") => self.wordpiece(v).map(Model::WordPiece),
            Some("Unigram") => self.unigram(v).map(Model::Unigram),
            _ => self.bpe(v, byte_level).map(Model::Bpe),
        }
        .map_err(|e| self.in_file(e))
    }

    fn wordpiece(&self, v: &Value) -> Result<WordPieceModel> {
        let max_chars = match v.get("max_input_chars_per_word") {
            None | Some(Value::Null) => 100,
            Some(n) => n
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| self.err("model.max_input_chars_per_word", "expected a count"))?,
        };
        WordPieceModel::new(
            self.vocab_map(v)?,
            &self.string_or(v, "model", "unk_token", "[UNK]")?,
            &self.string_or(v, "model", "continuing_subword_prefix", "##")?,
            max_chars,
        )
    }

    fn unigram(&self, v: &Value) -> Result<UnigramModel> {
        let list = v.get("vocab").and_then(Value::as_array).ok_or_else(|| {
            self.err(
                "model.vocab",
                "is missing or not an array of [piece, score]",
            )
        })?;
        let mut pieces = Vec::with_capacity(list.len());
        for (i, entry) in list.iter().enumerate() {
            match entry.as_array().map(Vec::as_slice) {
                Some([Value::String(p), score]) if score.is_number() => {
                    pieces.push((p.clone(), score.as_f64().unwrap_or(f64::NAN)))
                }
                _ => {
                    return Err(self.err(
                        &format!("model.vocab[{i}]"),
                        format!("{entry} is not [\"piece\", score]"),
                    ))
                }
            }
        }
        let unk_id = match v.get("unk_id") {
            None | Some(Value::Null) => None,
            Some(id) => Some(
                id.as_u64()
                    .filter(|&id| id <= u32::MAX as u64)
                    .ok_or_else(|| self.err("model.unk_id", "expected an id or null"))?
                    as u32,
            ),
        };
        let byte_fallback = self.bool_field(v, "model", "byte_fallback", false)?;
        UnigramModel::new(pieces, unk_id, byte_fallback)
    }

    /// `model.vocab` as token -> id, each id checked against the entry count.
    fn vocab_map(&self, v: &Value) -> Result<HashMap<String, u32>> {
        let vocab_obj = v
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
        Ok(vocab)
    }

    /// A BPE model.
    fn bpe(&self, v: &Value, byte_level: bool) -> Result<BpeModel> {
        if let Some(d) = v.get("dropout").and_then(Value::as_f64) {
            if d != 0.0 {
                return Err(self.err(
                    "model.dropout",
                    format!("{d} is not supported; BPE dropout makes encoding random"),
                ));
            }
        }
        let affixes = Affixes::new(
            self.optional_string(v, "model", "continuing_subword_prefix")?,
            self.optional_string(v, "model", "end_of_word_suffix")?,
        );
        let flag = |key: &str| self.bool_field(v, "model", key, false);
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
            unk_token: v.get("unk_token").and_then(Value::as_str),
            fuse_unk: flag("fuse_unk")?,
            affixes,
        };
        let vocab = self.vocab_map(v)?;
        let list = v
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
        BpeModel::new(vocab, merges, &options)
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
