//! The SentencePiece model as llama.cpp runs it (`llm_tokenizer_spm`, its `llama` tokenizer
//! model): a vocabulary with a score per token and no merge list. A piece starts as one symbol
//! per character; the neighbouring pair whose concatenation is a token with the highest score
//! merges first (the leftmost among equal scores), again and again until no neighbouring pair
//! makes a token. A symbol left over that is not a token becomes the `<0xNN>` tokens of its
//! UTF-8 bytes (byte fallback).
//!
//! Symbols are byte ranges of the piece, linked both ways. Candidate pairs wait in a max-heap;
//! a popped pair is skipped when either side changed since it was pushed (their lengths no
//! longer add up to the pair's), as in llama.cpp. A piece of n characters costs O(n log n).
//!
//! Every token takes part in merging, whatever its type (control tokens and byte tokens
//! included), because llama.cpp looks pairs up in its whole token map.

use super::bpe::PairHasher;
use crate::{Error, Result};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;

/// Token strings to ids, under a cheap hash: every candidate pair is looked up, and the keys
/// come from the vocabulary, so SipHash's protection buys nothing.
type TokenMap = HashMap<String, u32, BuildHasherDefault<PairHasher>>;

#[derive(Clone, Debug)]
pub struct SpmModel {
    /// Token strings by id ("▁" marks a space).
    pub(crate) id_to_token: Vec<String>,
    pub(crate) token_to_id: TokenMap,
    /// Each token's score; NaN refused and -0.0 stored as 0.0, so `total_cmp` orders them as
    /// C's `<` does.
    scores: Vec<f32>,
    /// The byte-fallback token of each byte: `<0xNN>`, else (as llama.cpp tries next) the
    /// one-character token of an ASCII byte.
    byte_ids: [Option<u32>; 256],
    /// No pair longer than the longest token can be a token.
    max_token_len: usize,
    /// What errors call the vocabulary ("tokenizer.ggml.tokens of model.gguf").
    vocab_name: String,
}

/// What is wrong with a vocabulary, by the list it is in.
#[derive(Clone, Debug, PartialEq)]
pub enum SpmVocabError {
    /// The scores are not one per token.
    ScoreCount {
        tokens: usize,
        scores: usize,
    },
    NanScore {
        id: usize,
    },
    /// A token string listed twice (llama.cpp's loader stops on this too).
    RepeatedToken {
        token: String,
        first: usize,
        again: usize,
    },
    /// More tokens than 32-bit ids can number.
    TooManyTokens(usize),
}

impl std::fmt::Display for SpmVocabError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpmVocabError::ScoreCount { tokens, scores } => {
                write!(
                    f,
                    "has {scores} scores for {tokens} tokens (one per token needed)"
                )
            }
            SpmVocabError::NanScore { id } => write!(f, "the score of token {id} is NaN"),
            SpmVocabError::RepeatedToken {
                token,
                first,
                again,
            } => write!(
                f,
                "token {token:?} is listed twice, at ids {first} and {again}"
            ),
            SpmVocabError::TooManyTokens(n) => {
                write!(f, "has {n} tokens, more than 32-bit ids can number")
            }
        }
    }
}

impl SpmModel {
    /// A model from its tokens (by id) and their scores, one each.
    pub fn new(tokens: Vec<String>, scores: Vec<f32>) -> std::result::Result<Self, SpmVocabError> {
        if tokens.len() != scores.len() {
            return Err(SpmVocabError::ScoreCount {
                tokens: tokens.len(),
                scores: scores.len(),
            });
        }
        if u32::try_from(tokens.len()).is_err() {
            return Err(SpmVocabError::TooManyTokens(tokens.len()));
        }
        let mut token_to_id = TokenMap::with_capacity_and_hasher(tokens.len(), Default::default());
        for (id, token) in tokens.iter().enumerate() {
            if let Some(first) = token_to_id.insert(token.clone(), id as u32) {
                return Err(SpmVocabError::RepeatedToken {
                    token: token.clone(),
                    first: first as usize,
                    again: id,
                });
            }
        }
        let mut clean = Vec::with_capacity(scores.len());
        for (id, &s) in scores.iter().enumerate() {
            if s.is_nan() {
                return Err(SpmVocabError::NanScore { id });
            }
            clean.push(if s == 0.0 { 0.0 } else { s });
        }
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = token_to_id
                .get(&super::symbols::byte_fallback_token(b as u8))
                .copied();
            if slot.is_none() && b < 0x80 {
                *slot = token_to_id.get(&(b as u8 as char).to_string()).copied();
            }
        }
        let max_token_len = tokens.iter().map(String::len).max().unwrap_or(0);
        Ok(SpmModel {
            id_to_token: tokens,
            token_to_id,
            scores: clean,
            byte_ids,
            max_token_len,
            vocab_name: "the vocabulary".into(),
        })
    }

    /// The same model, calling its vocabulary `name` in errors.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.vocab_name = name.into();
        self
    }

    pub fn id_count(&self) -> usize {
        self.id_to_token.len()
    }

    /// Appends the ids of `piece` (spaces already marked as "▁") to `out`.
    /// Whether no token holds a space mark ("▁") right after another character: then no merge
    /// joins a word to the marks before the next one, and the text may be cut before each run
    /// of marks and its pieces encoded apart (and cached), to the same ids.
    pub fn words_merge_apart(&self) -> bool {
        self.id_to_token.iter().all(|t| {
            let chars: Vec<char> = t.chars().collect();
            chars.windows(2).all(|w| !(w[0] != '▁' && w[1] == '▁'))
        })
    }

    pub fn encode_piece(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut symbols: Vec<Symbol> = piece
            .char_indices()
            .map(|(start, c)| Symbol {
                start,
                len: c.len_utf8(),
                prev: NONE,
                next: NONE,
            })
            .collect();
        let n = symbols.len();
        if n == 0 {
            return Ok(());
        }
        for (i, s) in symbols.iter_mut().enumerate() {
            s.prev = if i == 0 { NONE } else { i - 1 };
            s.next = if i + 1 == n { NONE } else { i + 1 };
        }
        let mut heap = BinaryHeap::new();
        for right in 1..n {
            self.push_pair(piece, &symbols, right - 1, right, &mut heap);
        }
        while let Some(pair) = heap.pop() {
            let (left, right) = (symbols[pair.left], symbols[pair.right]);
            if left.len == 0 || right.len == 0 || left.len + right.len != pair.len {
                continue;
            }
            symbols[pair.left].len = pair.len;
            symbols[pair.left].next = right.next;
            symbols[pair.right].len = 0;
            if right.next != NONE {
                symbols[right.next].prev = pair.left;
            }
            if left.prev != NONE {
                self.push_pair(piece, &symbols, left.prev, pair.left, &mut heap);
            }
            if right.next != NONE {
                self.push_pair(piece, &symbols, pair.left, right.next, &mut heap);
            }
        }
        // The first symbol is never merged away: merges keep the left one.
        let mut i = 0;
        loop {
            let s = symbols[i];
            let text = &piece[s.start..s.start + s.len];
            match self.token_to_id.get(text) {
                Some(&id) => out.push(id),
                None => self.push_bytes(text, out)?,
            }
            if s.next == NONE {
                return Ok(());
            }
            i = s.next;
        }
    }

    /// Queues the pair (left, right) if together they spell a token.
    fn push_pair(
        &self,
        piece: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        heap: &mut BinaryHeap<Pair>,
    ) {
        let len = symbols[left].len + symbols[right].len;
        if len > self.max_token_len {
            return;
        }
        let start = symbols[left].start;
        if let Some(&id) = self.token_to_id.get(&piece[start..start + len]) {
            heap.push(Pair {
                score: self.scores[id as usize],
                left,
                right,
                len,
            });
        }
    }

    /// The byte-fallback tokens of a symbol that is not a token.
    fn push_bytes(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        for &b in text.as_bytes() {
            match self.byte_ids[b as usize] {
                Some(id) => out.push(id),
                None => {
                    return Err(Error::invalid(
                        "encode",
                        format!(
                            "{text:?} is not a token of {}, and neither is <0x{b:02X}>, the byte-fallback token of its byte 0x{b:02X}",
                            self.vocab_name
                        ),
                    ))
                }
            }
        }
        Ok(())
    }
}

const NONE: usize = usize::MAX;

/// One symbol of a piece being merged: a byte range, empty once merged into its left
/// neighbour.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

/// A candidate merge: the token's score, the two symbols and their joint length when pushed.
struct Pair {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Pair {
    /// Higher score first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Pair {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pair {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of `tokens` with their scores.
    fn model(tokens: &[(&str, f32)]) -> SpmModel {
        let (t, s) = tokens.iter().map(|&(t, s)| (t.to_string(), s)).unzip();
        SpmModel::new(t, s).unwrap()
    }

    fn tokens(m: &SpmModel, piece: &str) -> Vec<String> {
        let mut ids = Vec::new();
        m.encode_piece(piece, &mut ids).unwrap();
        ids.iter()
            .map(|&i| m.id_to_token[i as usize].clone())
            .collect()
    }

    #[test]
    fn the_pair_making_the_highest_scoring_token_merges_first() {
        let m = model(&[
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("ab", -2.0),
            ("bc", -1.0),
        ]);
        assert_eq!(tokens(&m, "abc"), ["a", "bc"]);
        let m = model(&[
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("ab", -1.0),
            ("bc", -2.0),
        ]);
        assert_eq!(tokens(&m, "abc"), ["ab", "c"]);
    }

    #[test]
    fn equal_scores_merge_the_leftmost_pair_first() {
        let m = model(&[("a", 0.0), ("aa", -1.0)]);
        assert_eq!(tokens(&m, "aaa"), ["aa", "a"]);
        // Different tokens of one score: position decides, not the token.
        let m = model(&[
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("ab", -1.0),
            ("bc", -1.0),
        ]);
        assert_eq!(tokens(&m, "abc"), ["ab", "c"]);
        // -0.0 and 0.0 are one score, as C's comparison has it.
        let m = model(&[
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("ab", -0.0),
            ("bc", 0.0),
        ]);
        assert_eq!(tokens(&m, "abc"), ["ab", "c"]);
    }

    #[test]
    fn merged_symbols_merge_again_by_the_score_of_what_they_make() {
        // "abcd" is reached through "ab" and "cd" although "bc" outscores both: after b+c
        // merges, "a" + "bc" and "bc" + "d" make no token, so "abcd" is never formed.
        let m = model(&[
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("d", 0.0),
            ("ab", -3.0),
            ("cd", -3.0),
            ("bc", -1.0),
            ("abcd", -0.5),
        ]);
        assert_eq!(tokens(&m, "abcd"), ["a", "bc", "d"]);
        let m = model(&[
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("d", 0.0),
            ("ab", -1.0),
            ("cd", -1.0),
            ("bc", -3.0),
            ("abcd", -5.0),
        ]);
        assert_eq!(tokens(&m, "abcd"), ["abcd"]);
    }

    #[test]
    fn a_character_without_a_token_falls_back_to_its_byte_tokens() {
        // "é" is C3 A9. "x" has neither a token nor a <0x78>: an error naming the byte.
        let m = model(&[("a", 0.0), ("<0xC3>", 0.0), ("<0xA9>", 0.0)]);
        assert_eq!(tokens(&m, "aéa"), ["a", "<0xC3>", "<0xA9>", "a"]);
        let err = m
            .encode_piece("ax", &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("0x78") && err.contains("\"x\""), "{err}");
    }

    #[test]
    fn bad_vocabularies_are_refused_with_what_is_wrong() {
        let tokens = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            SpmModel::new(tokens(&["a", "b"]), vec![0.0]).unwrap_err(),
            SpmVocabError::ScoreCount {
                tokens: 2,
                scores: 1
            }
        );
        assert_eq!(
            SpmModel::new(tokens(&["a", "b", "a"]), vec![0.0; 3]).unwrap_err(),
            SpmVocabError::RepeatedToken {
                token: "a".into(),
                first: 0,
                again: 2
            }
        );
        assert_eq!(
            SpmModel::new(tokens(&["a", "b"]), vec![0.0, f32::NAN]).unwrap_err(),
            SpmVocabError::NanScore { id: 1 }
        );
    }
}
