//! The Unigram model (SentencePiece's unigram language model, as in T5, ALBERT, XLM-R and
//! SigLIP files): every vocabulary entry has a log-probability score, and a piece is cut into
//! the entries whose scores sum highest (Viterbi over the piece's bytes). A character no entry
//! starts with is unknown, scored ten below the lowest score; adjacent unknowns fuse into one
//! unknown token, which byte fallback spells as `<0xNN>` tokens when the vocabulary has them.
//! Ties go to the first candidate found (shorter entries first, earlier starts first), as in
//! `tokenizers`.

use super::symbols::byte_fallback_token;
use crate::{Error, Result};
use std::collections::HashMap;

/// Below the lowest score: what an unknown character costs.
const UNKNOWN_PENALTY: f64 = 10.0;

#[derive(Clone, Debug)]
pub struct UnigramModel {
    /// Entries and scores in id order.
    pub(crate) pieces: Vec<(String, f64)>,
    pub(crate) token_to_id: HashMap<String, u32>,
    pub(crate) unk_id: Option<u32>,
    pub(crate) byte_fallback: bool,
    min_score: f64,
    trie: ByteTrie,
}

impl UnigramModel {
    pub fn new(
        pieces: Vec<(String, f64)>,
        unk_id: Option<u32>,
        byte_fallback: bool,
    ) -> Result<Self> {
        let bad = |msg: String| Error::invalid("tokenizer", msg);
        if let Some(unk) = unk_id {
            if unk as usize >= pieces.len() {
                return Err(bad(format!(
                    "model.unk_id {unk} is outside the {} entries of model.vocab",
                    pieces.len()
                )));
            }
        }
        let mut token_to_id = HashMap::with_capacity(pieces.len());
        let mut trie = ByteTrie::default();
        let mut min_score = f64::INFINITY;
        for (id, (piece, score)) in pieces.iter().enumerate() {
            if !score.is_finite() {
                return Err(bad(format!(
                    "model.vocab[{id}] {piece:?} has score {score}"
                )));
            }
            // A repeated entry answers with its last id, as in `tokenizers`.
            token_to_id.insert(piece.clone(), id as u32);
            trie.insert(piece.as_bytes(), id as u32);
            min_score = min_score.min(*score);
        }
        Ok(UnigramModel {
            pieces,
            token_to_id,
            unk_id,
            byte_fallback,
            min_score,
            trie,
        })
    }

    pub fn id_count(&self) -> usize {
        self.pieces.len()
    }

    /// Appends the ids of one pre-tokenized piece to `out`.
    pub fn encode_piece(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        for (start, end) in self.best_path(piece)? {
            // Looked up by its text, as `tokenizers` does, even where it was unknown.
            let text = &piece[start..end];
            match self.token_to_id.get(text) {
                Some(&id) => out.push(id),
                None => self.push_unknown(text, out)?,
            }
        }
        Ok(())
    }

    /// An unknown run: its `<0xNN>` tokens if byte fallback has all of them, else the
    /// unknown token.
    fn push_unknown(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if self.byte_fallback {
            let bytes: Option<Vec<u32>> = text
                .bytes()
                .map(|b| self.token_to_id.get(&byte_fallback_token(b)).copied())
                .collect();
            if let Some(bytes) = bytes {
                out.extend(bytes);
                return Ok(());
            }
        }
        let unk = self.unk_id.ok_or_else(|| {
            Error::invalid(
                "encode",
                format!("{text:?} has no entry in this Unigram vocabulary and it has no unk_id"),
            )
        })?;
        out.push(unk);
        Ok(())
    }

    /// The best segmentation of `piece` as (start, end) spans, with adjacent unknown spans
    /// fused.
    fn best_path(&self, piece: &str) -> Result<Vec<(usize, usize)>> {
        #[derive(Clone, Copy)]
        struct Best {
            score: f64,
            start: Option<usize>,
            unknown: bool,
        }
        let n = piece.len();
        let unknown_score = self.min_score - UNKNOWN_PENALTY;
        let mut best = vec![
            Best {
                score: 0.0,
                start: None,
                unknown: false
            };
            n + 1
        ];
        let mut start = 0;
        while start < n {
            let here = best[start].score;
            let char_len = piece[start..].chars().next().map_or(1, char::len_utf8);
            let mut has_char = false;
            // Whether the path through `start` to `end` with `score` replaces the best so far.
            let mut offer = |end: usize, score: f64, unknown: bool| {
                let b = &mut best[end];
                let taken = b.start.is_none() || here + score > b.score;
                if taken {
                    *b = Best {
                        score: here + score,
                        start: Some(start),
                        unknown,
                    };
                }
                taken
            };
            for (len, id) in self.trie.prefixes(&piece.as_bytes()[start..]) {
                offer(
                    start + len,
                    self.pieces[id as usize].1,
                    Some(id) == self.unk_id,
                );
                has_char |= len == char_len;
            }
            if !has_char && offer(start + char_len, unknown_score, true) && self.unk_id.is_none() {
                let c = piece[start..].chars().next().unwrap_or_default();
                return Err(Error::invalid(
                    "encode",
                    format!("character {c:?} has no entry in this Unigram vocabulary and it has no unk_id"),
                ));
            }
            start += char_len;
        }
        let mut spans = Vec::new();
        let mut end = n;
        while end > 0 {
            let b = best[end];
            let s = b.start.expect("every character boundary is reached");
            match spans.last_mut() {
                Some((fused_start, _, true)) if b.unknown => *fused_start = s,
                _ => spans.push((s, end, b.unknown)),
            }
            end = s;
        }
        Ok(spans.into_iter().rev().map(|(s, e, _)| (s, e)).collect())
    }
}

/// The vocabulary's byte strings, for the entries that start a text at a given place.
#[derive(Clone, Debug, Default)]
struct ByteTrie {
    nodes: Vec<TrieNode>,
}

#[derive(Clone, Debug, Default)]
struct TrieNode {
    /// Children by byte, sorted.
    children: Vec<(u8, u32)>,
    id: Option<u32>,
}

impl ByteTrie {
    fn insert(&mut self, key: &[u8], id: u32) {
        if self.nodes.is_empty() {
            self.nodes.push(TrieNode::default());
        }
        let mut node = 0usize;
        for &b in key {
            let children = &self.nodes[node].children;
            node = match children.binary_search_by_key(&b, |&(c, _)| c) {
                Ok(i) => children[i].1 as usize,
                Err(i) => {
                    let next = self.nodes.len() as u32;
                    self.nodes[node].children.insert(i, (b, next));
                    self.nodes.push(TrieNode::default());
                    next as usize
                }
            };
        }
        self.nodes[node].id = Some(id);
    }

    /// (length, id) of every entry that is a prefix of `text`, shortest first.
    fn prefixes<'a>(&'a self, text: &'a [u8]) -> impl Iterator<Item = (usize, u32)> + 'a {
        let mut node = if self.nodes.is_empty() {
            None
        } else {
            Some(0usize)
        };
        text.iter()
            .enumerate()
            .map_while(move |(i, &b)| {
                let children = &self.nodes[node?].children;
                let next = children
                    .binary_search_by_key(&b, |&(c, _)| c)
                    .ok()
                    .map(|k| children[k].1 as usize)?;
                node = Some(next);
                Some((i + 1, self.nodes[next].id))
            })
            .filter_map(|(len, id)| Some((len, id?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(byte_fallback: bool) -> UnigramModel {
        let pieces = [
            ("<unk>", 0.0),
            ("▁", -1.0),
            ("a", -2.0),
            ("b", -2.0),
            ("ab", -3.5),
            ("abc", -9.0),
            ("c", -3.0),
            ("<0xE4>", -5.0),
            ("<0xB8>", -5.0),
            ("<0xAD>", -5.0),
        ];
        let pieces = pieces.iter().map(|(p, s)| (p.to_string(), *s)).collect();
        UnigramModel::new(pieces, Some(0), byte_fallback).unwrap()
    }

    fn encode(m: &UnigramModel, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        m.encode_piece(text, &mut out).unwrap();
        out
    }

    #[test]
    fn the_highest_scoring_segmentation_wins() {
        let m = model(false);
        // "ab" (-3.5) beats "a" + "b" (-4.0); "abc" (-9.0) loses to "ab" + "c" (-6.5).
        assert_eq!(encode(&m, "ab"), [4]);
        assert_eq!(encode(&m, "abc"), [4, 6]);
    }

    #[test]
    fn unknown_characters_fuse_into_one_unknown_or_fall_back_to_bytes() {
        assert_eq!(encode(&model(false), "a中中b"), [2, 0, 3]);
        // 中 is E4 B8 AD: its byte tokens exist; 文 (E6 96 87) has none, so the fused run
        // "中文" is not all bytes and stays one unknown token.
        assert_eq!(encode(&model(true), "a中b"), [2, 7, 8, 9, 3]);
        assert_eq!(encode(&model(true), "中文"), [0]);
    }

    #[test]
    fn without_an_unknown_token_an_uncovered_character_is_an_error() {
        let pieces = vec![("a".to_string(), -1.0)];
        let m = UnigramModel::new(pieces, None, false).unwrap();
        let err = m
            .encode_piece("aé", &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("'é'"), "{err}");
    }
}
