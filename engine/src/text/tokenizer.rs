//! `Tokenizer`: a byte-level BPE with added tokens, as a Hugging Face `tokenizer.json`
//! describes it. Encoding cuts out added tokens, pre-tokenizes the rest, and merges each piece;
//! decoding maps ids back to bytes. A cheap-to-clone handle, so scripts can copy it freely.

use super::added::{AddedToken, AddedVocab, Segment};
use super::bpe::BpeModel;
use super::byte_level;
use super::pretokenize::PreTokenizer;
use crate::{Error, Result};
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

pub(crate) struct Inner {
    pub model: BpeModel,
    pub pre: PreTokenizer,
    pub added: AddedVocab,
    pub template: Template,
    /// The `post_processor` object as read (or as written for a trained tokenizer), written
    /// back unchanged by `save`.
    pub post_processor_json: serde_json::Value,
    cache: Mutex<HashMap<Vec<u8>, Vec<u32>>>,
}

impl Tokenizer {
    pub(crate) fn from_parts(
        model: BpeModel,
        pre: PreTokenizer,
        added: AddedVocab,
        template: Template,
        post_processor_json: serde_json::Value,
    ) -> Self {
        Tokenizer(Arc::new(Inner {
            model,
            pre,
            added,
            template,
            post_processor_json,
            cache: Mutex::new(HashMap::new()),
        }))
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.0
    }

    /// The ids of `text`: added tokens as their ids, everything else through the
    /// pre-tokenizer and the merges. No template tokens (Hugging Face's
    /// `add_special_tokens=False`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        for segment in self.0.added.split(text) {
            match segment {
                Segment::Added(id) => out.push(id),
                Segment::Text(t) => self.encode_ordinary_into(t, &mut out)?,
            }
        }
        Ok(out)
    }

    /// `encode` with the post-processor's template around it (a BOS token for LLaMA-3), as
    /// Hugging Face's default `encode` does.
    pub fn encode_with_template(&self, text: &str) -> Result<Vec<u32>> {
        let t = &self.0.template;
        let mut out = t.prefix.clone();
        out.extend(self.encode(text)?);
        out.extend_from_slice(&t.suffix);
        Ok(out)
    }

    /// Encodes `text` as ordinary text: added-token strings in it are not recognized.
    pub fn encode_ordinary(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.encode_ordinary_into(text, &mut out)?;
        Ok(out)
    }

    fn encode_ordinary_into(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        self.0
            .pre
            .for_each_piece(text, &mut |piece| self.encode_piece(piece.as_bytes(), out))
    }

    fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) -> Result<()> {
        if piece.len() > CACHE_MAX_PIECE {
            return self.0.model.encode_piece(piece, out);
        }
        // `try_lock`: a thread that finds the cache busy just computes, never waits.
        if let Ok(cache) = self.0.cache.try_lock() {
            if let Some(ids) = cache.get(piece) {
                out.extend_from_slice(ids);
                return Ok(());
            }
        }
        let start = out.len();
        self.0.model.encode_piece(piece, out)?;
        if let Ok(mut cache) = self.0.cache.try_lock() {
            if cache.len() >= CACHE_MAX_ENTRIES {
                cache.clear();
            }
            cache.insert(piece.to_vec(), out[start..].to_vec());
        }
        Ok(())
    }

    /// The text of `ids`. Byte sequences that are not valid UTF-8 (a character cut between
    /// ids) become U+FFFD. With `skip_special`, special added tokens are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids, skip_special)?).into_owned())
    }

    /// The raw bytes of `ids`, for callers that assemble UTF-8 themselves.
    pub fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for &id in ids {
            if skip_special && self.0.added.by_id(id).is_some_and(|t| t.special) {
                continue;
            }
            out.extend(self.token_bytes(id)?);
        }
        Ok(out)
    }

    /// The bytes one id stands for: an added token's content, or a vocabulary token's bytes.
    pub fn token_bytes(&self, id: u32) -> Result<Vec<u8>> {
        if let Some(t) = self.0.added.by_id(id) {
            return Ok(t.content.as_bytes().to_vec());
        }
        let token = self
            .0
            .model
            .id_to_token
            .get(id as usize)
            .and_then(|t| t.as_ref())
            .ok_or_else(|| {
                Error::invalid(
                    "decode",
                    format!(
                        "id {id} is not in the vocabulary (vocab size {})",
                        self.vocab_size()
                    ),
                )
            })?;
        // A token outside the byte-level alphabet (rare, hand-added vocab entries) decodes to
        // its own UTF-8, character by character.
        let mut bytes = Vec::with_capacity(token.len());
        for c in token.chars() {
            match byte_level::char_to_byte(c) {
                Some(b) => bytes.push(b),
                None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        Ok(bytes)
    }

    /// The number of ids a model's embedding must hold: highest id + 1 over the vocabulary
    /// and the added tokens.
    pub fn vocab_size(&self) -> usize {
        let added = self.0.added.tokens.iter().map(|t| t.id as usize + 1).max();
        self.0.model.id_count().max(added.unwrap_or(0))
    }

    /// The token string of `id` as the vocabulary spells it (byte-level alphabet), or an added
    /// token's content.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        if let Some(t) = self.0.added.by_id(id) {
            return Some(t.content.clone());
        }
        self.0.model.id_to_token.get(id as usize).cloned().flatten()
    }

    /// The id of an added token's content or a vocabulary token string.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        if let Some(t) = self.0.added.by_content(token) {
            return Some(t.id);
        }
        self.0.model.token_to_id.get(token).copied()
    }

    pub fn added_tokens(&self) -> &[AddedToken] {
        &self.0.added.tokens
    }

    /// The id of the special added token `name`, or an error that lists the special tokens.
    pub fn special_id(&self, name: &str) -> Result<u32> {
        match self.0.added.by_content(name) {
            Some(t) => Ok(t.id),
            None => {
                let names: Vec<&str> = self
                    .0
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
            .find_map(|n| self.0.added.by_content(n).map(|t| t.id))
    }

    pub fn template(&self) -> &Template {
        &self.0.template
    }

    pub fn pre_tokenizer(&self) -> &PreTokenizer {
        &self.0.pre
    }

    /// The merges in rank order, as token strings.
    pub fn merges(&self) -> Vec<(String, String)> {
        let name = |id: u32| {
            self.0.model.id_to_token[id as usize]
                .clone()
                .unwrap_or_default()
        };
        self.0
            .model
            .merges
            .iter()
            .map(|&(a, b)| (name(a), name(b)))
            .collect()
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokenizer(vocab {}, {} merges, {} added tokens)",
            self.vocab_size(),
            self.0.model.merges.len(),
            self.0.added.tokens.len()
        )
    }
}
