//! The model stage of a tokenizer, the one that turns a pre-tokenized piece into ids: a BPE
//! with ranked merges (`bpe`, what `tokenizer.json` and our trainer describe), a
//! SentencePiece vocabulary with scores merged as llama.cpp does (`spm`, its `llama` tokenizer
//! model), a WordPiece vocabulary (`wordpiece`, BERT) or a Unigram language model (`unigram`,
//! T5 and ALBERT).
//! Everything around it (added tokens, normalizer, pre-tokenizer, decoder, streaming) is the
//! same for both.

use super::bpe::BpeModel;
use super::spm::SpmModel;
use super::unigram::UnigramModel;
use super::wordpiece::WordPieceModel;
use crate::{Error, Result};
use std::collections::HashMap;

// One per tokenizer, behind its `Arc`: the variants' sizes (their 256-entry byte tables) cost
// nothing worth a box on every lookup.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub(crate) enum Model {
    Bpe(BpeModel),
    Spm(SpmModel),
    WordPiece(WordPieceModel),
    Unigram(UnigramModel),
}

impl Model {
    /// Appends the ids of one pre-tokenized piece to `out`.
    pub fn encode_piece(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        match self {
            Model::Bpe(m) => m.encode_piece(piece, out),
            Model::Spm(m) => m.encode_piece(piece, out),
            Model::WordPiece(m) => m.encode_piece(piece, out),
            Model::Unigram(m) => m.encode_piece(piece, out),
        }
    }

    /// The vocabulary's spelling of `id`, if the vocabulary has it.
    pub fn token(&self, id: u32) -> Option<&str> {
        match self {
            Model::Bpe(m) => m.id_to_token.get(id as usize)?.as_deref(),
            Model::Spm(m) => m.id_to_token.get(id as usize).map(String::as_str),
            Model::WordPiece(m) => m.id_to_token.get(id as usize)?.as_deref(),
            Model::Unigram(m) => m.pieces.get(id as usize).map(|(p, _)| p.as_str()),
        }
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        match self {
            Model::Bpe(m) => m.token_to_id.get(token).copied(),
            Model::Spm(m) => m.token_to_id.get(token).copied(),
            Model::WordPiece(m) => m.token_to_id.get(token).copied(),
            Model::Unigram(m) => m.token_to_id.get(token).copied(),
        }
    }

    /// The number of ids the vocabulary spans (highest id + 1).
    pub fn id_count(&self) -> usize {
        match self {
            Model::Bpe(m) => m.id_count(),
            Model::Spm(m) => m.id_count(),
            Model::WordPiece(m) => m.id_count(),
            Model::Unigram(m) => m.id_count(),
        }
    }

    pub fn bpe(&self) -> Option<&BpeModel> {
        match self {
            Model::Bpe(m) => Some(m),
            _ => None,
        }
    }

    /// What the model is, for messages: "BPE", "WordPiece", ...
    pub fn kind(&self) -> &'static str {
        match self {
            Model::Bpe(_) => "BPE",
            Model::Spm(_) => "SentencePiece (scores, llama.cpp merging)",
            Model::WordPiece(_) => "WordPiece",
            Model::Unigram(_) => "Unigram",
        }
    }
}

/// Token strings by id from a vocabulary (token -> id), `None` for ids it skips; two tokens
/// given one id are an error naming both.
pub(crate) fn id_table(vocab: &HashMap<String, u32>) -> Result<Vec<Option<String>>> {
    let size = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
    let mut id_to_token: Vec<Option<String>> = vec![None; size];
    for (token, &id) in vocab {
        if let Some(other) = &id_to_token[id as usize] {
            return Err(Error::invalid(
                "tokenizer",
                format!("model.vocab gives id {id} to both {other:?} and {token:?}"),
            ));
        }
        id_to_token[id as usize] = Some(token.clone());
    }
    Ok(id_to_token)
}
