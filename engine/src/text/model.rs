//! The model stage of a tokenizer, the one that turns a pre-tokenized piece into ids: a BPE
//! with ranked merges (`bpe`, what `tokenizer.json` and our trainer describe) or a
//! SentencePiece vocabulary with scores (`spm`, llama.cpp's `llama` tokenizer model).
//! Everything around it (added tokens, normalizer, pre-tokenizer, decoder, streaming) is the
//! same for both.

use super::bpe::BpeModel;
use super::spm::SpmModel;
use crate::Result;

// One per tokenizer, behind its `Arc`: the variants' sizes (their 256-entry byte tables) cost
// nothing worth a box on every lookup.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub(crate) enum Model {
    Bpe(BpeModel),
    Spm(SpmModel),
}

impl Model {
    /// Appends the ids of one pre-tokenized piece to `out`.
    pub fn encode_piece(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        match self {
            Model::Bpe(m) => m.encode_piece(piece, out),
            Model::Spm(m) => m.encode_piece(piece, out),
        }
    }

    /// The vocabulary's spelling of `id`, if the vocabulary has it.
    pub fn token(&self, id: u32) -> Option<&str> {
        match self {
            Model::Bpe(m) => m.id_to_token.get(id as usize)?.as_deref(),
            Model::Spm(m) => m.id_to_token.get(id as usize).map(String::as_str),
        }
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        match self {
            Model::Bpe(m) => m.token_to_id.get(token).copied(),
            Model::Spm(m) => m.token_to_id.get(token).copied(),
        }
    }

    /// The number of ids the vocabulary spans (highest id + 1).
    pub fn id_count(&self) -> usize {
        match self {
            Model::Bpe(m) => m.id_count(),
            Model::Spm(m) => m.id_count(),
        }
    }

    pub fn bpe(&self) -> Option<&BpeModel> {
        match self {
            Model::Bpe(m) => Some(m),
            Model::Spm(_) => None,
        }
    }
}
