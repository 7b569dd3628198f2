//! Writing `tokenizer.json` as Hugging Face does: its field order, the vocabulary in id
//! order, merges as `[left, right]` pairs one per line.

use crate::text::bpe::BpeModel;
use crate::text::decode::{DecodeStep, Decoder};
use crate::text::model::Model;
use crate::text::normalize::{NormalizeStep, Normalizer};
use crate::text::pattern::{Pattern, PatternSource};
use crate::text::pretokenize::{Metaspace, PreTokenizer, Step};
use crate::text::symbols::AlphabetKind;
use crate::text::tokenizer::Tokenizer;
use crate::text::unigram::UnigramModel;
use crate::text::wordpiece::WordPieceModel;
use crate::{Error, Result};
use serde_json::{json, Value};
use std::path::Path;

impl Tokenizer {
    /// Writes a `tokenizer.json` that Hugging Face `tokenizers` loads, atomically (a temporary
    /// file renamed over the target).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        crate::text::write_atomically(path, self.to_json_string()?.as_bytes())
    }

    /// The `tokenizer.json` text: Hugging Face's field order, the vocabulary in id order and
    /// the merges as `[left, right]` pairs, one per line. A SentencePiece vocabulary with
    /// scores has no such file (Hugging Face's BPE needs merges): an error.
    pub fn to_json_string(&self) -> Result<String> {
        let inner = self.parts();
        let model = match &inner.model {
            Model::Bpe(m) => bpe_json(m),
            Model::WordPiece(m) => wordpiece_json(m),
            Model::Unigram(m) => unigram_json(m),
            Model::Spm(_) => return Err(Error::invalid(
                "tokenizer save",
                "this is a SentencePiece vocabulary with scores (llama.cpp's \"llama\" tokenizer \
                     model), which merges by score; a tokenizer.json BPE needs a merge list, so it \
                     cannot be written as one",
            )),
        };
        let added: Vec<Value> = inner
            .added
            .tokens
            .iter()
            .map(|t| {
                json!({"id": t.id, "content": t.content, "single_word": t.single_word, "lstrip": t.lstrip,
                       "rstrip": t.rstrip, "normalized": t.normalized, "special": t.special})
            })
            .collect();
        let mut s = String::new();
        s.push_str(&format!(
            "{{\n  \"version\": \"1.0\",\n  \"truncation\": {},\n  \"padding\": {},\n",
            inner.limits.truncation_json, inner.limits.padding_json
        ));
        s.push_str(&format!("  \"added_tokens\": {},\n", lines(&added, "    ")));
        s.push_str(&format!(
            "  \"normalizer\": {},\n",
            normalizer_json(&inner.normalizer)
        ));
        s.push_str(&format!(
            "  \"pre_tokenizer\": {},\n",
            pre_tokenizer_json(&inner.pre)
        ));
        s.push_str(&format!(
            "  \"post_processor\": {},\n",
            inner.post_processor_json
        ));
        s.push_str(&format!(
            "  \"decoder\": {},\n",
            decoder_json(&inner.decoder)
        ));
        s.push_str(&format!("  \"model\": {{\n{model}\n  }}\n}}\n"));
        Ok(s)
    }
}

/// The `model` object's fields of a BPE, one per line: settings, the vocabulary in id order,
/// the merges as `[left, right]` pairs.
fn bpe_json(model: &BpeModel) -> String {
    let unk = model
        .unk_id()
        .and_then(|id| model.id_to_token[id as usize].clone());
    let byte_fallback = matches!(
        model.alphabet.kind,
        AlphabetKind::Chars {
            byte_fallback: true
        }
    );
    let mut s = format!(
        "    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": {},\n    \"continuing_subword_prefix\": {},\n    \"end_of_word_suffix\": {},\n    \"fuse_unk\": {},\n    \"byte_fallback\": {byte_fallback},\n    \"ignore_merges\": {},\n",
        json!(unk),
        json!(model.affixes.prefix),
        json!(model.affixes.suffix),
        model.alphabet.fuse_unk,
        model.ignore_merges
    );
    s.push_str(&vocab_json(&model.id_to_token));
    s.push_str(",\n");
    let name = |id: u32| model.id_to_token[id as usize].clone().unwrap_or_default();
    let merges: Vec<String> = model
        .merges
        .iter()
        .map(|&(a, b)| json!([name(a), name(b)]).to_string())
        .collect();
    s.push_str(&format!(
        "    \"merges\": [\n      {}\n    ]",
        merges.join(",\n      ")
    ));
    s
}

fn wordpiece_json(model: &WordPieceModel) -> String {
    format!(
        "    \"type\": \"WordPiece\",\n    \"unk_token\": {},\n    \"continuing_subword_prefix\": {},\n    \"max_input_chars_per_word\": {},\n{}",
        json!(model.unk_token),
        json!(model.prefix),
        model.max_input_chars_per_word,
        vocab_json(&model.id_to_token)
    )
}

fn unigram_json(model: &UnigramModel) -> String {
    let pieces: Vec<String> = model
        .pieces
        .iter()
        .map(|(p, score)| json!([p, score]).to_string())
        .collect();
    format!(
        "    \"type\": \"Unigram\",\n    \"unk_id\": {},\n    \"vocab\": [\n      {}\n    ],\n    \"byte_fallback\": {}",
        json!(model.unk_id),
        pieces.join(",\n      "),
        model.byte_fallback
    )
}

/// `"vocab": {token: id, ...}` in id order, without a trailing newline.
fn vocab_json(id_to_token: &[Option<String>]) -> String {
    let vocab: Vec<String> = id_to_token
        .iter()
        .enumerate()
        .filter_map(|(id, t)| t.as_ref().map(|t| format!("{}: {id}", json!(t))))
        .collect();
    format!(
        "    \"vocab\": {{\n      {}\n    }}",
        vocab.join(",\n      ")
    )
}

fn lines(items: &[Value], indent: &str) -> String {
    if items.is_empty() {
        return "[]".into();
    }
    let body: Vec<String> = items.iter().map(|v| format!("{indent}{v}")).collect();
    format!("[\n{}\n  ]", body.join(",\n"))
}

/// A single stage as itself, several as a `Sequence` under `key`, none as null.
fn one_or_sequence(mut stages: Vec<Value>, key: &str) -> Value {
    match stages.len() {
        0 => Value::Null,
        1 => stages.remove(0),
        _ => json!({"type": "Sequence", key: stages}),
    }
}

fn pattern_json(p: &Pattern) -> Value {
    match &p.source {
        PatternSource::Regex(r) => json!({ "Regex": r }),
        PatternSource::Literal(s) => json!({ "String": s }),
    }
}

fn metaspace_json(m: &Metaspace) -> Value {
    json!({"type": "Metaspace", "replacement": m.replacement.to_string(),
           "prepend_scheme": m.prepend_scheme.hf_name(), "split": m.split})
}

fn normalizer_json(n: &Normalizer) -> Value {
    let stage = |step: &NormalizeStep| match step {
        NormalizeStep::Unicode(form) => json!({"type": form.hf_name()}),
        NormalizeStep::Lowercase => json!({"type": "Lowercase"}),
        NormalizeStep::Prepend(p) => json!({"type": "Prepend", "prepend": p}),
        NormalizeStep::Replace { pattern, content } => {
            json!({"type": "Replace", "pattern": pattern_json(pattern), "content": content})
        }
        NormalizeStep::Bert(o) => json!({"type": "BertNormalizer", "clean_text": o.clean_text,
            "handle_chinese_chars": o.handle_chinese_chars, "strip_accents": o.strip_accents,
            "lowercase": o.lowercase}),
        NormalizeStep::Strip { left, right } => {
            json!({"type": "Strip", "strip_left": left, "strip_right": right})
        }
        NormalizeStep::StripAccents => json!({"type": "StripAccents"}),
        NormalizeStep::Nmt => json!({"type": "Nmt"}),
        NormalizeStep::Precompiled(map) => json!({"type": "Precompiled",
            "precompiled_charsmap": crate::io::base64::encode(&map.blob)}),
    };
    one_or_sequence(n.steps.iter().map(stage).collect(), "normalizers")
}

/// The `pre_tokenizer` object for these stages, as Hugging Face writes it.
pub(crate) fn pre_tokenizer_json(pre: &PreTokenizer) -> Value {
    let stage = |step: &Step| match step {
        Step::ByteLevel {
            add_prefix_space,
            use_regex,
        } => json!({"type": "ByteLevel", "add_prefix_space": add_prefix_space,
                    "trim_offsets": true, "use_regex": use_regex}),
        Step::Split(rule) => {
            json!({"type": "Split", "pattern": pattern_json(&rule.pattern),
                   "behavior": rule.behavior.hf_name(), "invert": rule.invert})
        }
        Step::Digits { individual } => json!({"type": "Digits", "individual_digits": individual}),
        Step::Metaspace(m) => metaspace_json(m),
        Step::Whitespace => json!({"type": "Whitespace"}),
        Step::WhitespaceSplit => json!({"type": "WhitespaceSplit"}),
        Step::Bert => json!({"type": "BertPreTokenizer"}),
        Step::Punctuation(b) => json!({"type": "Punctuation", "behavior": b.hf_name()}),
    };
    one_or_sequence(pre.steps.iter().map(stage).collect(), "pretokenizers")
}

fn decoder_json(d: &Decoder) -> Value {
    let Some(steps) = &d.steps else {
        return Value::Null;
    };
    let stage = |step: &DecodeStep| match step {
        DecodeStep::ByteLevel => {
            json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true})
        }
        DecodeStep::Replace { pattern, content } => {
            json!({"type": "Replace", "pattern": pattern_json(pattern), "content": content})
        }
        DecodeStep::ByteFallback => json!({"type": "ByteFallback"}),
        DecodeStep::Fuse => json!({"type": "Fuse"}),
        DecodeStep::Strip {
            content,
            start,
            stop,
        } => json!({"type": "Strip", "content": content.to_string(), "start": start, "stop": stop}),
        DecodeStep::Metaspace {
            replacement,
            prepend_scheme,
            split,
        } => metaspace_json(&Metaspace {
            replacement: *replacement,
            prepend_scheme: *prepend_scheme,
            split: *split,
        }),
        DecodeStep::WordPiece { prefix, cleanup } => {
            json!({"type": "WordPiece", "prefix": prefix, "cleanup": cleanup})
        }
        DecodeStep::BpeSuffix { suffix } => json!({"type": "BPEDecoder", "suffix": suffix}),
        DecodeStep::Ctc {
            pad_token,
            word_delimiter_token,
            cleanup,
        } => json!({"type": "CTC", "pad_token": pad_token,
            "word_delimiter_token": word_delimiter_token, "cleanup": cleanup}),
    };
    match steps.as_slice() {
        // An empty Sequence joins without spaces, unlike no decoder: keep it a Sequence.
        [] => json!({"type": "Sequence", "decoders": []}),
        _ => one_or_sequence(steps.iter().map(stage).collect(), "decoders"),
    }
}

/// The post-processor a trained tokenizer gets: byte-level, adding no tokens.
pub(crate) fn byte_level_post_processor() -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true})
}
