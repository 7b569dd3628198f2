//! Added tokens (`<|endoftext|>` and friends): strings that are cut out of the text before
//! pre-tokenization and map straight to their ids. Matching is leftmost-longest, as in Hugging
//! Face: at the first position where any added token matches, the longest one wins.

use super::normalize::Normalizer;
use crate::{Error, Result};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedToken {
    pub id: u32,
    pub content: String,
    /// Special tokens are skipped by `decode` with `skip_special`.
    pub special: bool,
    /// The match also swallows whitespace on its left.
    pub lstrip: bool,
    /// The match also swallows whitespace on its right.
    pub rstrip: bool,
    /// Kept for writing back; Hugging Face's default for special tokens is `false`.
    pub normalized: bool,
    /// Matched only as a whole word: not where a word character (`\w`) touches either side.
    pub single_word: bool,
}

impl AddedToken {
    pub fn special(id: u32, content: &str) -> Self {
        AddedToken {
            id,
            content: content.to_string(),
            special: true,
            lstrip: false,
            rstrip: false,
            normalized: false,
            single_word: false,
        }
    }
}

/// A run of text between added tokens, or one added token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment<'a> {
    Text(&'a str),
    Added(u32),
}

/// The added tokens, and two matchers as in Hugging Face: tokens with `normalized: false` are
/// found in the text as given, before normalization; those with `normalized: true` are found
/// afterwards, in each normalized run, by their normalized content.
#[derive(Clone, Debug, Default)]
pub struct AddedVocab {
    pub tokens: Vec<AddedToken>,
    /// The normalized content of each `normalized` token that the normalizer changes.
    normalized_content: HashMap<usize, String>,
    by_id: HashMap<u32, usize>,
    by_content: HashMap<String, usize>,
    raw: Matcher,
    normalized: Matcher,
    /// `lstrip`/`rstrip` swallow only ASCII whitespace (C's `isspace`, as llama.cpp strips),
    /// not every Unicode space as Hugging Face does.
    ascii_strip: bool,
}

impl AddedVocab {
    /// Added tokens for a tokenizer without a normalizer.
    pub fn new(tokens: Vec<AddedToken>) -> Result<Self> {
        Self::with_normalizer(tokens, &Normalizer::default())
    }

    /// Added tokens whose `normalized` ones are matched by their content after `normalizer`.
    pub fn with_normalizer(tokens: Vec<AddedToken>, normalizer: &Normalizer) -> Result<Self> {
        let (mut raw, mut normalized) = (Matcher::default(), Matcher::default());
        let (mut by_id, mut by_content) = (HashMap::new(), HashMap::new());
        let mut normalized_content = HashMap::new();
        for (i, t) in tokens.iter().enumerate() {
            if t.content.is_empty() {
                return Err(Error::invalid(
                    "tokenizer",
                    format!("added_tokens: token id {} has empty content", t.id),
                ));
            }
            if t.normalized {
                let content = normalizer.normalize(&t.content)?;
                normalized.add(content.as_bytes(), i);
                if content != t.content {
                    normalized_content.insert(i, content.into_owned());
                }
            } else {
                raw.add(t.content.as_bytes(), i);
            }
            by_id.entry(t.id).or_insert(i);
            by_content.entry(t.content.clone()).or_insert(i);
        }
        Ok(AddedVocab {
            tokens,
            normalized_content,
            by_id,
            by_content,
            raw,
            normalized,
            ascii_strip: false,
        })
    }

    /// These tokens and `more` (transformers' `add_tokens`), matched as these are.
    pub fn extended(&self, more: Vec<AddedToken>, normalizer: &Normalizer) -> Result<Self> {
        let mut tokens = self.tokens.clone();
        tokens.extend(more);
        let mut out = Self::with_normalizer(tokens, normalizer)?;
        out.ascii_strip = self.ascii_strip;
        Ok(out)
    }

    /// The same tokens, with `lstrip`/`rstrip` swallowing only ASCII whitespace, as llama.cpp
    /// does.
    pub fn with_ascii_strip(mut self) -> Self {
        self.ascii_strip = true;
        self
    }

    fn is_strippable(&self, c: char) -> bool {
        if self.ascii_strip {
            // C's isspace: space, \t, \n, \v, \f, \r.
            matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
        } else {
            c.is_whitespace()
        }
    }

    pub fn by_id(&self, id: u32) -> Option<&AddedToken> {
        self.by_id.get(&id).map(|&i| &self.tokens[i])
    }

    /// The string that decoding starts from for added token `id`: its content, or for a
    /// `normalized` token its normalized content (LLaMA-2's Prepend makes "</s>" "▁</s>"), as
    /// Hugging Face does. Such a string is not a special token's content, so decoding with
    /// `skip_special` keeps it there too.
    pub fn decoding_string(&self, id: u32) -> Option<&str> {
        let &i = self.by_id.get(&id)?;
        Some(match self.normalized_content.get(&i) {
            Some(normalized) => normalized,
            None => &self.tokens[i].content,
        })
    }

    pub fn by_content(&self, content: &str) -> Option<&AddedToken> {
        self.by_content.get(content).map(|&i| &self.tokens[i])
    }

    /// Whether some added tokens are matched after normalization.
    pub fn has_normalized(&self) -> bool {
        !self.normalized.is_empty()
    }

    /// Cuts `text` (as given) into text runs and the added tokens matched before
    /// normalization, in order. Text runs are never empty.
    pub fn split<'a>(&self, text: &'a str) -> Vec<Segment<'a>> {
        self.split_with(&self.raw, text)
    }

    /// Cuts a normalized text run at the added tokens matched after normalization.
    pub fn split_normalized<'a>(&self, text: &'a str) -> Vec<Segment<'a>> {
        self.split_with(&self.normalized, text)
    }

    /// Leftmost-longest matching: at the first position where any token matches, the longest
    /// one wins.
    fn split_with<'a>(&self, matcher: &Matcher, text: &'a str) -> Vec<Segment<'a>> {
        if matcher.is_empty() {
            return if text.is_empty() {
                vec![]
            } else {
                vec![Segment::Text(text)]
            };
        }
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        // `emitted`: end of what is already in `out`; `pos`: where the search goes on.
        let (mut emitted, mut pos) = (0usize, 0usize);
        while pos < bytes.len() {
            let Some((token, len)) = matcher.longest_at(bytes, pos) else {
                pos += 1;
                continue;
            };
            let t = &self.tokens[token];
            let mut start = pos;
            let mut end = pos + len;
            // A match inside a word is passed over, and the search goes on after it.
            if t.single_word && (ends_with_word(&text[..start]) || starts_with_word(&text[end..])) {
                pos = end;
                continue;
            }
            if t.lstrip {
                let kept = text[emitted..start].trim_end_matches(|c| self.is_strippable(c));
                start = emitted + kept.len();
            }
            if t.rstrip {
                end = text.len()
                    - text[end..]
                        .trim_start_matches(|c| self.is_strippable(c))
                        .len();
            }
            if start > emitted {
                out.push(Segment::Text(&text[emitted..start]));
            }
            out.push(Segment::Added(t.id));
            emitted = end;
            pos = end;
        }
        if emitted < bytes.len() {
            out.push(Segment::Text(&text[emitted..]));
        }
        out
    }
}

fn is_word_char(c: char) -> bool {
    use regex::Regex;
    use std::sync::LazyLock;
    static WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\w$").expect("a valid pattern"));
    c.is_ascii_alphanumeric()
        || c == '_'
        || (!c.is_ascii() && WORD.is_match(c.encode_utf8(&mut [0; 4])))
}

fn ends_with_word(text: &str) -> bool {
    text.chars().next_back().is_some_and(is_word_char)
}

fn starts_with_word(text: &str) -> bool {
    text.chars().next().is_some_and(is_word_char)
}

/// Token contents by their bytes, with the lengths that occur for each first byte, longest
/// first: a position is tried once per distinct length, however many tokens share a first
/// byte (Gemma-3 has 6,000 that start with "<").
#[derive(Clone, Debug, Default)]
struct Matcher {
    by_bytes: HashMap<Vec<u8>, usize>,
    lengths_by_first_byte: Vec<Vec<usize>>,
}

impl Matcher {
    fn add(&mut self, content: &[u8], token: usize) {
        let Some(&first) = content.first() else {
            return;
        };
        if self.lengths_by_first_byte.is_empty() {
            self.lengths_by_first_byte = vec![Vec::new(); 256];
        }
        // A content listed twice keeps its first token.
        self.by_bytes.entry(content.to_vec()).or_insert(token);
        let lengths = &mut self.lengths_by_first_byte[first as usize];
        if let Err(at) = lengths.binary_search_by(|l| content.len().cmp(l)) {
            lengths.insert(at, content.len());
        }
    }

    fn is_empty(&self) -> bool {
        self.by_bytes.is_empty()
    }

    /// The longest token whose content starts at byte `pos`, and its length. Contents are
    /// valid UTF-8, so a match can only start on a character boundary.
    fn longest_at(&self, bytes: &[u8], pos: usize) -> Option<(usize, usize)> {
        let lengths = self.lengths_by_first_byte.get(bytes[pos] as usize)?;
        lengths.iter().find_map(|&len| {
            let candidate = bytes.get(pos..pos + len)?;
            self.by_bytes.get(candidate).map(|&t| (t, len))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(contents: &[&str]) -> AddedVocab {
        let tokens = contents
            .iter()
            .enumerate()
            .map(|(i, c)| AddedToken::special(100 + i as u32, c))
            .collect();
        AddedVocab::new(tokens).unwrap()
    }

    #[test]
    fn added_tokens_are_cut_out_of_the_text() {
        let v = vocab(&["<|endoftext|>"]);
        assert_eq!(
            v.split("a<|endoftext|>b<|endoftext|>"),
            [
                Segment::Text("a"),
                Segment::Added(100),
                Segment::Text("b"),
                Segment::Added(100)
            ]
        );
    }

    #[test]
    fn the_longest_token_at_the_leftmost_position_wins() {
        let v = vocab(&["<|a", "<|a|>", "a|>"]);
        assert_eq!(v.split("x<|a|>"), [Segment::Text("x"), Segment::Added(101)]);
        // "a|>" starts later than "<|a", so the leftmost match wins even though it's shorter.
        assert_eq!(v.split("<|a|"), [Segment::Added(100), Segment::Text("|")]);
    }

    #[test]
    fn lstrip_and_rstrip_swallow_neighbouring_whitespace() {
        let mut t = AddedToken::special(5, "<mask>");
        t.lstrip = true;
        t.rstrip = true;
        let v = AddedVocab::new(vec![t]).unwrap();
        assert_eq!(
            v.split("a  <mask> b"),
            [Segment::Text("a"), Segment::Added(5), Segment::Text("b")]
        );
    }

    #[test]
    fn a_single_word_token_matches_only_between_non_word_characters() {
        let mut t = AddedToken::special(7, "the");
        t.single_word = true;
        let v = AddedVocab::new(vec![t]).unwrap();
        assert_eq!(
            v.split("the theme, bathe the_x (the)"),
            [
                Segment::Added(7),
                Segment::Text(" theme, bathe the_x ("),
                Segment::Added(7),
                Segment::Text(")")
            ]
        );
    }

    #[test]
    fn ascii_strip_leaves_other_unicode_spaces() {
        let mut t = AddedToken::special(5, "<mask>");
        t.rstrip = true;
        let unicode = AddedVocab::new(vec![t.clone()]).unwrap();
        assert_eq!(
            unicode.split("<mask>\u{3000} b"),
            [Segment::Added(5), Segment::Text("b")]
        );
        let ascii = AddedVocab::new(vec![t]).unwrap().with_ascii_strip();
        assert_eq!(
            ascii.split("<mask>\t\u{3000} b"),
            [Segment::Added(5), Segment::Text("\u{3000} b")]
        );
    }
}
