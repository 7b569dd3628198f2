//! SentencePiece's own model file (`spiece.model`, `tokenizer.model`: a serialized
//! `sentencepiece_model.proto` `ModelProto`), read into the `tokenizer.json` document that
//! `tokenizers` would build from it, so the file encodes through the same pipeline as every
//! other tokenizer here: the compiled character map, SentencePiece's space handling ("▁" for
//! spaces, the dummy prefix on the first run of text only, as transformers does when not in
//! legacy mode), and the Unigram model with its scores. T5, ALBERT, XLM-R and SigLIP ship
//! their vocabularies this way. SentencePiece-BPE files are refused by name: GGUF and
//! `tokenizer.json` carry those.

use crate::{Error, Result};
use serde_json::{json, Value};
use std::path::Path;

/// The subset of `sentencepiece_model.proto` the reader needs (field numbers as there).
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ModelProto {
        #[prost(message, repeated, tag = "1")]
        pub pieces: Vec<SentencePiece>,
        #[prost(message, optional, tag = "2")]
        pub trainer_spec: Option<TrainerSpec>,
        #[prost(message, optional, tag = "3")]
        pub normalizer_spec: Option<NormalizerSpec>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SentencePiece {
        #[prost(string, optional, tag = "1")]
        pub piece: Option<String>,
        #[prost(float, optional, tag = "2")]
        pub score: Option<f32>,
        #[prost(int32, optional, tag = "3")]
        pub r#type: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrainerSpec {
        #[prost(int32, optional, tag = "3")]
        pub model_type: Option<i32>,
        #[prost(bool, optional, tag = "35")]
        pub byte_fallback: Option<bool>,
        #[prost(int32, optional, tag = "40")]
        pub unk_id: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NormalizerSpec {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(bytes = "vec", optional, tag = "2")]
        pub precompiled_charsmap: Option<Vec<u8>>,
        #[prost(bool, optional, tag = "3")]
        pub add_dummy_prefix: Option<bool>,
        #[prost(bool, optional, tag = "4")]
        pub remove_extra_whitespaces: Option<bool>,
        #[prost(bool, optional, tag = "5")]
        pub escape_whitespaces: Option<bool>,
    }
}

/// `SentencePiece.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceKind {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

#[derive(Clone, Debug)]
pub struct SpiecePiece {
    pub piece: String,
    pub score: f32,
    pub kind: PieceKind,
}

/// A SentencePiece Unigram model file, as read.
#[derive(Clone, Debug)]
pub struct SpieceModel {
    pub pieces: Vec<SpiecePiece>,
    pub unk_id: u32,
    pub byte_fallback: bool,
    /// The normalisation rules compiled into a character map (empty: none).
    pub charsmap: Vec<u8>,
    pub add_dummy_prefix: bool,
    pub remove_extra_whitespaces: bool,
    pub escape_whitespaces: bool,
}

impl SpieceModel {
    pub fn read(path: &Path) -> Result<SpieceModel> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        SpieceModel::parse(&bytes, &path.display().to_string())
    }

    /// `source` names the bytes in errors.
    pub fn parse(bytes: &[u8], source: &str) -> Result<SpieceModel> {
        use prost::Message;
        let bad = |msg: String| Error::format("SentencePiece model", format!("{source}: {msg}"));
        let model = proto::ModelProto::decode(bytes)
            .map_err(|e| bad(format!("not a SentencePiece ModelProto ({e})")))?;
        if model.pieces.is_empty() {
            return Err(bad("it has no pieces".into()));
        }
        let trainer = model.trainer_spec.unwrap_or_default();
        match trainer.model_type.unwrap_or(1) {
            1 => {}
            2 => {
                return Err(bad(
                    "a SentencePiece BPE model; only Unigram models are read from this file (use the model's tokenizer.json or GGUF)".into(),
                ))
            }
            t => return Err(bad(format!("model type {t} is not Unigram (1)"))),
        }
        let pieces = model
            .pieces
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let kind = match p.r#type.unwrap_or(1) {
                    1 => PieceKind::Normal,
                    2 => PieceKind::Unknown,
                    3 => PieceKind::Control,
                    4 => PieceKind::UserDefined,
                    5 => PieceKind::Unused,
                    6 => PieceKind::Byte,
                    t => return Err(bad(format!("piece {i} has type {t}, not one of 1..=6"))),
                };
                let score = p.score.unwrap_or(0.0);
                if !score.is_finite() {
                    return Err(bad(format!("piece {i} has score {score}")));
                }
                Ok(SpiecePiece {
                    piece: p.piece.unwrap_or_default(),
                    score,
                    kind,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let unk_id = trainer.unk_id.unwrap_or(0);
        if unk_id < 0 || unk_id as usize >= pieces.len() {
            return Err(bad(format!(
                "unk_id {unk_id} is outside its {} pieces",
                pieces.len()
            )));
        }
        let norm = model.normalizer_spec.unwrap_or_default();
        Ok(SpieceModel {
            pieces,
            unk_id: unk_id as u32,
            byte_fallback: trainer.byte_fallback.unwrap_or(false),
            charsmap: norm.precompiled_charsmap.unwrap_or_default(),
            add_dummy_prefix: norm.add_dummy_prefix.unwrap_or(true),
            remove_extra_whitespaces: norm.remove_extra_whitespaces.unwrap_or(true),
            escape_whitespaces: norm.escape_whitespaces.unwrap_or(true),
        })
    }

    /// The `tokenizer.json` document for this model. `first_normalizers` run before
    /// SentencePiece's own (a family's text clean-up); the control and unknown pieces become
    /// special added tokens, which swallow the spaces around them when `strip_special`.
    pub fn tokenizer_json(&self, first_normalizers: Vec<Value>, strip_special: bool) -> Value {
        let mut normalizers = first_normalizers;
        if !self.charsmap.is_empty() {
            normalizers.push(json!({"type": "Precompiled",
                "precompiled_charsmap": crate::io::base64::encode(&self.charsmap)}));
        }
        if self.remove_extra_whitespaces {
            // Only spaces: SentencePiece leaves other whitespace (newlines) alone.
            normalizers.push(replace(r"\A +| +\z", ""));
            normalizers.push(replace(" {2,}", " "));
        }
        if self.escape_whitespaces {
            normalizers
                .push(json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"}));
        }
        let mut pre = Vec::new();
        if self.add_dummy_prefix {
            pre.push(json!({"type": "Metaspace", "replacement": "▁",
                            "prepend_scheme": "first", "split": false}));
        }
        let user_defined: Vec<&str> = self
            .pieces
            .iter()
            .filter(|p| p.kind == PieceKind::UserDefined)
            .map(|p| p.piece.as_str())
            .collect();
        if !user_defined.is_empty() {
            // SentencePiece emits user-defined pieces whole: cut them out before the model.
            let mut longest_first = user_defined.clone();
            longest_first.sort_by_key(|p| std::cmp::Reverse(p.len()));
            let pattern: Vec<String> = longest_first.iter().map(|p| regex::escape(p)).collect();
            pre.push(
                json!({"type": "Split", "pattern": {"Regex": pattern.join("|")},
                            "behavior": "Isolated", "invert": false}),
            );
        }
        let mut decoders =
            vec![json!({"type": "Replace", "pattern": {"String": "▁"}, "content": " "})];
        if self.byte_fallback {
            decoders.push(json!({"type": "ByteFallback"}));
        }
        decoders.push(json!({"type": "Fuse"}));
        if self.add_dummy_prefix {
            decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
        }
        let added: Vec<Value> = self
            .pieces
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.kind, PieceKind::Control | PieceKind::Unknown))
            .map(|(id, p)| {
                json!({"id": id, "content": p.piece, "single_word": false,
                       "lstrip": strip_special, "rstrip": strip_special,
                       "normalized": false, "special": true})
            })
            .collect();
        let vocab: Vec<Value> = self
            .pieces
            .iter()
            .map(|p| json!([p.piece, p.score]))
            .collect();
        json!({
            "version": "1.0",
            "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": normalizers},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre},
            "post_processor": null,
            "decoder": {"type": "Sequence", "decoders": decoders},
            "model": {"type": "Unigram", "unk_id": self.unk_id, "vocab": vocab,
                      "byte_fallback": self.byte_fallback},
        })
    }
}

fn replace(regex: &str, content: &str) -> Value {
    json!({"type": "Replace", "pattern": {"Regex": regex}, "content": content})
}
