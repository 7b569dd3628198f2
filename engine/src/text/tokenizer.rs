//! `Tokenizer`: a BPE with added tokens, as a Hugging Face `tokenizer.json` describes it, or a
//! SentencePiece vocabulary with scores, as llama.cpp runs it (`sentencepiece`). Both go through
//! the same stages. Encoding follows Hugging Face's pipeline: cut out the added tokens matched on the raw text,
//! normalize each run between them, cut out the added tokens matched on normalized text,
//! pre-tokenize, and merge each piece. Decoding runs the token strings through the decoder.
//! A cheap-to-clone handle, so scripts can copy it freely.

use super::added::{AddedToken, AddedVocab, Segment};
use super::decode::Decoder;
use super::limits::Limits;
use super::model::Model;
use super::normalize::Normalizer;
use super::pretokenize::{PreTokenizer, Start};
use crate::{Error, Result};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Pieces longer than this are not cached: long pieces rarely repeat, and each entry's key and
/// ids would cost memory in proportion.
const CACHE_MAX_PIECE: usize = 64;
/// The cache is cleared when it reaches this many pieces, bounding its memory.
const CACHE_MAX_ENTRIES: usize = 1 << 16;

/// Ids that the post-processor puts around a sequence (`TemplateProcessing`'s single template,
/// e.g. LLaMA-3's `<|begin_of_text|>`). Plain `encode` leaves them out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Template {
    pub prefix: Vec<u32>,
    pub suffix: Vec<u32>,
}

#[derive(Clone)]
pub struct Tokenizer(Arc<Inner>);

/// The stages of a tokenizer, in the order text goes through them.
#[derive(Clone)]
pub(crate) struct Parts {
    pub added: AddedVocab,
    pub normalizer: Normalizer,
    pub pre: PreTokenizer,
    pub model: Model,
    pub template: Template,
    /// The `post_processor` object as read (or as written for a trained tokenizer), written
    /// back unchanged by `save`.
    pub post_processor_json: serde_json::Value,
    pub decoder: Decoder,
    /// `truncation` and `padding`, applied by `encode_with_template` only.
    pub limits: Limits,
}

struct Inner {
    parts: Parts,
    cache: Mutex<HashMap<Vec<u8>, Vec<u32>>>,
}

impl Tokenizer {
    pub(crate) fn from_parts(parts: Parts) -> Self {
        Tokenizer(Arc::new(Inner {
            parts,
            cache: Mutex::new(HashMap::new()),
        }))
    }

    pub(crate) fn parts(&self) -> &Parts {
        &self.0.parts
    }

    /// This tokenizer with more added tokens, each cut out of the text and mapped to its id as
    /// the file's own added tokens are (transformers' `tokenizer.add_tokens`); a content or id
    /// the tokenizer already has is an error.
    pub fn with_added_tokens(&self, more: Vec<AddedToken>) -> Result<Tokenizer> {
        for t in &more {
            if self.token_to_id(&t.content).is_some() {
                return Err(Error::invalid(
                    "tokenizer",
                    format!("`{}` is already a token", t.content),
                ));
            }
            if self.id_to_token(t.id).is_some() {
                return Err(Error::invalid(
                    "tokenizer",
                    format!("id {} is already taken", t.id),
                ));
            }
        }
        let mut parts = self.parts().clone();
        parts.added = parts.added.extended(more, &parts.normalizer)?;
        Ok(Tokenizer::from_parts(parts))
    }

    /// The ids of `text`: added tokens as their ids, everything else through the
    /// pre-tokenizer and the merges. No template tokens (Hugging Face's
    /// `add_special_tokens=False`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_from(text, Start::Input)
    }

    /// The ids of `text` as the continuation of an earlier text of the same document (the next
    /// chunk of a file cut where `restarts_at_lines` allows): its first run is not marked as a
    /// start (no `Prepend`, no Metaspace marker, no prefix space), as it would not be in the
    /// whole text.
    pub fn encode_continued(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_from(text, Start::Continued)
    }

    /// `encode`, with the first run starting at `first`.
    fn encode_from(&self, text: &str, first: Start) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        for (i, segment) in self.parts().added.split(text).into_iter().enumerate() {
            match segment {
                Segment::Added(id) => out.push(id),
                // Only a first run starts where the text does (Metaspace's `first` scheme).
                Segment::Text(t) => {
                    let start = if i == 0 { first } else { Start::Piece };
                    self.encode_run(t, start, true, &mut out)?
                }
            }
        }
        Ok(out)
    }

    /// `encode` with the post-processor's template around it (a BOS token for LLaMA-3), cut
    /// and padded as the file's `truncation` and `padding` say: Hugging Face's default
    /// `encode`.
    pub fn encode_with_template(&self, text: &str) -> Result<Vec<u32>> {
        let t = &self.parts().template;
        let limits = &self.parts().limits;
        let ids = limits.truncate(self.encode(text)?, t.prefix.len() + t.suffix.len())?;
        let mut out = t.prefix.clone();
        out.extend(ids);
        out.extend_from_slice(&t.suffix);
        Ok(limits.pad(out))
    }

    /// Encodes `text` as ordinary text: added-token strings in it are not recognized.
    pub fn encode_ordinary(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.encode_run(text, Start::Input, false, &mut out)?;
        Ok(out)
    }

    /// Normalizes a run of text between added tokens, cuts out the added tokens matched on
    /// normalized text (if `with_added`), and encodes the rest.
    fn encode_run(
        &self,
        text: &str,
        start: Start,
        with_added: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let normalized = self
            .parts()
            .normalizer
            .normalize_from(text, start == Start::Continued)?;
        if !(with_added && self.parts().added.has_normalized()) {
            return self.encode_pieces(&normalized, start, out);
        }
        for (i, segment) in self
            .parts()
            .added
            .split_normalized(&normalized)
            .into_iter()
            .enumerate()
        {
            match segment {
                Segment::Added(id) => out.push(id),
                Segment::Text(t) => {
                    let at = if i == 0 { start } else { Start::Piece };
                    self.encode_pieces(t, at, out)?
                }
            }
        }
        Ok(())
    }

    fn encode_pieces(&self, text: &str, start: Start, out: &mut Vec<u32>) -> Result<()> {
        self.parts()
            .pre
            .for_each_piece(text, start, &mut |piece| self.encode_piece(piece, out))
    }

    fn encode_piece(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        if piece.len() > CACHE_MAX_PIECE {
            return self.parts().model.encode_piece(piece, out);
        }
        // `try_lock`: a thread that finds the cache busy just computes, never waits.
        if let Ok(cache) = self.0.cache.try_lock() {
            if let Some(ids) = cache.get(piece.as_bytes()) {
                out.extend_from_slice(ids);
                return Ok(());
            }
        }
        let start = out.len();
        self.parts().model.encode_piece(piece, out)?;
        if let Ok(mut cache) = self.0.cache.try_lock() {
            if cache.len() >= CACHE_MAX_ENTRIES {
                cache.clear();
            }
            cache.insert(piece.as_bytes().to_vec(), out[start..].to_vec());
        }
        Ok(())
    }

    /// The text of `ids`, through the decoder. With `skip_special`, special added tokens are
    /// left out. An id that is neither in the vocabulary nor an added token is an error.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut tokens = Vec::with_capacity(ids.len());
        for &id in ids {
            let token = self.token_str(id)?;
            // Judged by content, as Hugging Face does.
            if skip_special
                && self
                    .parts()
                    .added
                    .by_content(token)
                    .is_some_and(|t| t.special)
            {
                continue;
            }
            tokens.push(Cow::Borrowed(token));
        }
        self.parts().decoder.decode(tokens)
    }

    /// The string of one id that decoding starts from: an added token's content (normalized
    /// for a `normalized` one) or the vocabulary's spelling.
    fn token_str(&self, id: u32) -> Result<&str> {
        if let Some(t) = self.parts().added.decoding_string(id) {
            return Ok(t);
        }
        self.parts().model.token(id).ok_or_else(|| {
            Error::invalid(
                "decode",
                format!(
                    "id {id} is not in the vocabulary (vocab size {})",
                    self.vocab_size()
                ),
            )
        })
    }

    /// The number of ids a model's embedding must hold: highest id + 1 over the vocabulary
    /// and the added tokens.
    pub fn vocab_size(&self) -> usize {
        let added = self
            .parts()
            .added
            .tokens
            .iter()
            .map(|t| t.id as usize + 1)
            .max();
        self.parts().model.id_count().max(added.unwrap_or(0))
    }

    /// The token string of `id` as the vocabulary spells it (GPT-2's byte-level alphabet, or
    /// "▁" for a space in a SentencePiece-style vocabulary), or an added token's content.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        if let Some(t) = self.parts().added.by_id(id) {
            return Some(t.content.clone());
        }
        self.parts().model.token(id).map(str::to_string)
    }

    /// The id of an added token's content or a vocabulary token string.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        if let Some(t) = self.parts().added.by_content(token) {
            return Some(t.id);
        }
        self.parts().model.token_id(token)
    }

    pub fn added_tokens(&self) -> &[AddedToken] {
        &self.parts().added.tokens
    }

    /// The id of the special added token `name`, or an error that lists the special tokens.
    pub fn special_id(&self, name: &str) -> Result<u32> {
        match self.parts().added.by_content(name) {
            Some(t) => Ok(t.id),
            None => {
                let names: Vec<&str> = self
                    .parts()
                    .added
                    .tokens
                    .iter()
                    .map(|t| t.content.as_str())
                    .collect();
                Err(Error::invalid(
                    "tokenizer",
                    format!(
                        "no added token {name:?}; this tokenizer has {}",
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                ))
            }
        }
    }

    /// The end-of-text id under the names GPT-2, LLaMA-3 and SentencePiece models use
    /// (`<|endoftext|>`, `<|end_of_text|>`, `</s>`), if this tokenizer has one of them.
    pub fn eos_id(&self) -> Option<u32> {
        ["<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"]
            .iter()
            .find_map(|n| self.parts().added.by_content(n).map(|t| t.id))
    }

    pub fn template(&self) -> &Template {
        &self.parts().template
    }

    pub fn pre_tokenizer(&self) -> &PreTokenizer {
        &self.parts().pre
    }

    /// Whether the model is a BPE that spells tokens in GPT-2's byte-level alphabet (without
    /// byte fallback, an unknown token or word affixes), as llama.cpp's `gpt2` tokenizer model
    /// does.
    pub(crate) fn is_byte_level_bpe(&self) -> bool {
        self.parts().model.bpe().is_some_and(|model| {
            matches!(model.alphabet.kind, super::symbols::AlphabetKind::ByteLevel)
                && model.unk_id().is_none()
                && model.affixes == super::bpe::Affixes::default()
        })
    }

    /// Whether the model is a SentencePiece vocabulary with scores rather than a BPE.
    pub fn is_sentencepiece(&self) -> bool {
        matches!(self.parts().model, Model::Spm(_))
    }

    /// Hugging Face's `ignore_merges`: a piece that is a token is taken whole.
    pub(crate) fn ignores_merges(&self) -> bool {
        self.parts().model.bpe().is_some_and(|m| m.ignore_merges)
    }

    /// The merges in rank order, as token strings; none for a SentencePiece vocabulary, which
    /// merges by score.
    pub fn merges(&self) -> Vec<(String, String)> {
        let Some(model) = self.parts().model.bpe() else {
            return Vec::new();
        };
        let name = |id: u32| model.id_to_token[id as usize].clone().unwrap_or_default();
        model
            .merges
            .iter()
            .map(|&(a, b)| (name(a), name(b)))
            .collect()
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let model = match &self.parts().model {
            Model::Bpe(m) => format!("{} merges", m.merges.len()),
            Model::Spm(_) => "SentencePiece scores".to_string(),
            other => other.kind().to_string(),
        };
        write!(
            f,
            "Tokenizer(vocab {}, {model}, {} added tokens)",
            self.vocab_size(),
            self.parts().added.tokens.len()
        )
    }
}
