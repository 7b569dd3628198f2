//! Reading the `normalizer`, `pre_tokenizer` and `decoder` sections: each stage checked, a
//! `Sequence` flattened into its stages, an unsupported type an error that names its field and
//! the types that are supported.

use super::read::{type_name, type_of, Reader};
use crate::text::decode::{DecodeStep, Decoder};
use crate::text::normalize::{BertOptions, CharsMap, NormalizeStep, Normalizer, UnicodeForm};
use crate::text::pattern::{Pattern, PatternSource};
use crate::text::pretokenize::{
    Metaspace, PreTokenizer, PrependScheme, SplitBehavior, SplitRule, Step,
};
use crate::Result;
use serde_json::Value;

impl Reader<'_> {
    pub(super) fn normalizer(&self) -> Result<Normalizer> {
        let mut steps = Vec::new();
        if let Some(v) = self.root.get("normalizer").filter(|v| !v.is_null()) {
            self.normalize_step(v, "normalizer", &mut steps)?;
        }
        Ok(Normalizer::new(steps))
    }

    fn normalize_step(&self, v: &Value, field: &str, out: &mut Vec<NormalizeStep>) -> Result<()> {
        let kind = type_of(v).unwrap_or_default();
        if let Some(form) = UnicodeForm::parse(kind) {
            out.push(NormalizeStep::Unicode(form));
            return Ok(());
        }
        match kind {
            "Lowercase" => out.push(NormalizeStep::Lowercase),
            "Prepend" => out.push(NormalizeStep::Prepend(
                self.string_field(v, field, "prepend")?.to_string(),
            )),
            "Replace" => out.push(NormalizeStep::Replace {
                pattern: self.pattern(v, field)?,
                content: self.string_field(v, field, "content")?.to_string(),
            }),
            "BertNormalizer" => {
                let d = BertOptions::default();
                let strip_accents = match v.get("strip_accents") {
                    None | Some(Value::Null) => None,
                    Some(Value::Bool(b)) => Some(*b),
                    Some(_) => return Err(self.err(&format!("{field}.strip_accents"), "expected true, false or null")),
                };
                out.push(NormalizeStep::Bert(BertOptions {
                    clean_text: self.bool_field(v, field, "clean_text", d.clean_text)?,
                    handle_chinese_chars: self.bool_field(v, field, "handle_chinese_chars", d.handle_chinese_chars)?,
                    strip_accents,
                    lowercase: self.bool_field(v, field, "lowercase", d.lowercase)?,
                }))
            }
            "Strip" => out.push(NormalizeStep::Strip {
                left: self.bool_field(v, field, "strip_left", true)?,
                right: self.bool_field(v, field, "strip_right", true)?,
            }),
            "StripAccents" => out.push(NormalizeStep::StripAccents),
            "Nmt" => out.push(NormalizeStep::Nmt),
            "Precompiled" => {
                let f = format!("{field}.precompiled_charsmap");
                let blob = match self.optional_string(v, field, "precompiled_charsmap")? {
                    None => Vec::new(),
                    Some(text) => crate::io::base64::decode(text).map_err(|e| self.err(&f, e))?,
                };
                let map = CharsMap::new(blob).map_err(|e| self.err(&f, e.to_string()))?;
                out.push(NormalizeStep::Precompiled(Box::new(map)));
            }
            "Sequence" => {
                for (i, n) in self.sequence(v, field, "normalizers")?.iter().enumerate() {
                    self.normalize_step(n, &format!("{field}.normalizers[{i}]"), out)?;
                }
            }
            _ => return Err(self.err(field, format!(
                "type {} is not supported; expected NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, BertNormalizer, Strip, StripAccents, Nmt, Precompiled or a Sequence of them",
                type_name(v)
            ))),
        }
        Ok(())
    }

    pub(super) fn pre_tokenizer(&self) -> Result<PreTokenizer> {
        let mut steps = Vec::new();
        if let Some(v) = self.root.get("pre_tokenizer").filter(|v| !v.is_null()) {
            self.pre_step(v, "pre_tokenizer", &mut steps)?;
        }
        PreTokenizer::new(steps).map_err(|e| self.err("pre_tokenizer", e.to_string()))
    }

    fn pre_step(&self, v: &Value, field: &str, out: &mut Vec<Step>) -> Result<()> {
        match type_of(v).unwrap_or_default() {
            "ByteLevel" => out.push(Step::ByteLevel {
                add_prefix_space: self.bool_field(v, field, "add_prefix_space", true)?,
                use_regex: self.bool_field(v, field, "use_regex", true)?,
            }),
            "Split" => {
                let behavior = self.behavior(v, field, None)?;
                let invert = self.bool_field(v, field, "invert", false)?;
                let pattern = self.pattern(v, field)?;
                out.push(Step::Split(SplitRule {
                    pattern,
                    behavior,
                    invert,
                }));
            }
            "Digits" => out.push(Step::Digits {
                individual: self.bool_field(v, field, "individual_digits", false)?,
            }),
            "Metaspace" => out.push(Step::Metaspace(self.metaspace(v, field)?)),
            "Whitespace" => out.push(Step::Whitespace),
            "WhitespaceSplit" => out.push(Step::WhitespaceSplit),
            "BertPreTokenizer" => out.push(Step::Bert),
            "Punctuation" => {
                let behavior = self.behavior(v, field, Some(SplitBehavior::Isolated))?;
                out.push(Step::Punctuation(behavior))
            }
            "Sequence" => {
                for (i, p) in self.sequence(v, field, "pretokenizers")?.iter().enumerate() {
                    self.pre_step(p, &format!("{field}.pretokenizers[{i}]"), out)?;
                }
            }
            _ => return Err(self.err(field, format!(
                "type {} is not supported; expected ByteLevel, Split, Digits, Metaspace, Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation or a Sequence of them",
                type_name(v)
            ))),
        }
        Ok(())
    }

    pub(super) fn decoder(&self) -> Result<Decoder> {
        let Some(v) = self.root.get("decoder").filter(|v| !v.is_null()) else {
            return Ok(Decoder { steps: None });
        };
        let mut steps = Vec::new();
        self.decode_step(v, "decoder", &mut steps)?;
        Ok(Decoder { steps: Some(steps) })
    }

    fn decode_step(&self, v: &Value, field: &str, out: &mut Vec<DecodeStep>) -> Result<()> {
        match type_of(v).unwrap_or_default() {
            // Its options shape offsets only; decoding is the same under all of them.
            "ByteLevel" => out.push(DecodeStep::ByteLevel),
            "Replace" => out.push(DecodeStep::Replace {
                pattern: self.pattern(v, field)?,
                content: self.string_field(v, field, "content")?.to_string(),
            }),
            "ByteFallback" => out.push(DecodeStep::ByteFallback),
            "Fuse" => out.push(DecodeStep::Fuse),
            "Strip" => out.push(DecodeStep::Strip {
                content: self.char_field(v, field, "content")?,
                start: self.count_field(v, field, "start")?,
                stop: self.count_field(v, field, "stop")?,
            }),
            "Metaspace" => {
                let m = self.metaspace(v, field)?;
                out.push(DecodeStep::Metaspace {
                    replacement: m.replacement,
                    prepend_scheme: m.prepend_scheme,
                    split: m.split,
                });
            }
            "WordPiece" => out.push(DecodeStep::WordPiece {
                prefix: self.string_or(v, field, "prefix", "##")?,
                cleanup: self.bool_field(v, field, "cleanup", true)?,
            }),
            "BPEDecoder" => out.push(DecodeStep::BpeSuffix {
                suffix: self.string_or(v, field, "suffix", "</w>")?,
            }),
            "CTC" => out.push(DecodeStep::Ctc {
                pad_token: self.string_or(v, field, "pad_token", "<pad>")?,
                word_delimiter_token: self.string_or(v, field, "word_delimiter_token", "|")?,
                cleanup: self.bool_field(v, field, "cleanup", true)?,
            }),
            "Sequence" => {
                for (i, d) in self.sequence(v, field, "decoders")?.iter().enumerate() {
                    self.decode_step(d, &format!("{field}.decoders[{i}]"), out)?;
                }
            }
            _ => return Err(self.err(field, format!(
                "type {} is not supported; expected ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece, BPEDecoder, CTC or a Sequence of them",
                type_name(v)
            ))),
        }
        Ok(())
    }

    /// A Metaspace pre-tokenizer or decoder. `prepend_scheme` defaults to "always" and `split`
    /// to true; the older `add_prefix_space: false` means "never", as in `tokenizers`.
    fn metaspace(&self, v: &Value, field: &str) -> Result<Metaspace> {
        let scheme_field = format!("{field}.prepend_scheme");
        let mut prepend_scheme = match v.get("prepend_scheme") {
            None | Some(Value::Null) => PrependScheme::Always,
            Some(Value::String(s)) => {
                PrependScheme::parse(s).map_err(|e| self.err(&scheme_field, e.to_string()))?
            }
            Some(_) => return Err(self.err(&scheme_field, "expected a string")),
        };
        if !self.bool_field(v, field, "add_prefix_space", true)? {
            if prepend_scheme != PrependScheme::Never {
                return Err(self.err(
                    &format!("{field}.add_prefix_space"),
                    "false contradicts prepend_scheme (only \"never\" agrees with it)",
                ));
            }
            prepend_scheme = PrependScheme::Never;
        }
        Ok(Metaspace {
            replacement: self.char_field(v, field, "replacement")?,
            prepend_scheme,
            split: self.bool_field(v, field, "split", true)?,
        })
    }

    /// `{"pattern": {"String": ...}}` or `{"pattern": {"Regex": ...}}`.
    fn pattern(&self, v: &Value, field: &str) -> Result<Pattern> {
        let f = format!("{field}.pattern");
        let p = v.get("pattern");
        let source = match (
            p.and_then(|p| p.get("Regex")).and_then(Value::as_str),
            p.and_then(|p| p.get("String")).and_then(Value::as_str),
        ) {
            (Some(r), _) => PatternSource::Regex(r.to_string()),
            (None, Some(s)) => PatternSource::Literal(s.to_string()),
            _ => {
                return Err(self.err(&f, "expected {\"Regex\": ...} or {\"String\": ...}"));
            }
        };
        Pattern::new(source).map_err(|e| self.err(&f, e.to_string()))
    }

    fn string_field<'v>(&self, v: &'v Value, field: &str, key: &str) -> Result<&'v str> {
        v.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| self.err(&format!("{field}.{key}"), "expected a string"))
    }

    /// A string option that may be left out or null.
    pub(super) fn optional_string<'v>(
        &self,
        v: &'v Value,
        field: &str,
        key: &str,
    ) -> Result<Option<&'v str>> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.err(&format!("{field}.{key}"), "expected a string or null")),
        }
    }

    /// A string option that may be left out (its default is `tokenizers`').
    pub(super) fn string_or(
        &self,
        v: &Value,
        field: &str,
        key: &str,
        default: &str,
    ) -> Result<String> {
        Ok(self
            .optional_string(v, field, key)?
            .unwrap_or(default)
            .to_string())
    }

    /// A split behaviour (`Split` requires one: `default` None; `Punctuation` defaults it).
    fn behavior(
        &self,
        v: &Value,
        field: &str,
        default: Option<SplitBehavior>,
    ) -> Result<SplitBehavior> {
        let f = format!("{field}.behavior");
        match (self.optional_string(v, field, "behavior")?, default) {
            (Some(b), _) => SplitBehavior::parse(b).map_err(|e| self.err(&f, e.to_string())),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(self.err(&f, "is missing")),
        }
    }

    fn char_field(&self, v: &Value, field: &str, key: &str) -> Result<char> {
        let s = self.string_field(v, field, key)?;
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Ok(c),
            _ => Err(self.err(
                &format!("{field}.{key}"),
                format!("{s:?} is not a single character"),
            )),
        }
    }

    fn count_field(&self, v: &Value, field: &str, key: &str) -> Result<usize> {
        v.get(key)
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .ok_or_else(|| self.err(&format!("{field}.{key}"), "expected a count (0 or more)"))
    }
}
