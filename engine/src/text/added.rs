//! Added tokens (`<|endoftext|>` and friends): strings that are cut out of the text before
//! pre-tokenization and map straight to their ids. Matching is leftmost-longest, as in Hugging
//! Face: at the first position where any added token matches, the longest one wins.

use crate::{Error, Result};

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
        }
    }
}

/// A run of text between added tokens, or one added token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment<'a> {
    Text(&'a str),
    Added(u32),
}

#[derive(Clone, Debug, Default)]
pub struct AddedVocab {
    pub tokens: Vec<AddedToken>,
    /// For each first byte, indices into `tokens`, longest content first.
    by_first_byte: Vec<Vec<usize>>,
}

impl AddedVocab {
    pub fn new(tokens: Vec<AddedToken>) -> Result<Self> {
        let mut by_first_byte = vec![Vec::new(); 256];
        for (i, t) in tokens.iter().enumerate() {
            let Some(&first) = t.content.as_bytes().first() else {
                return Err(Error::invalid(
                    "tokenizer",
                    format!("added_tokens: token id {} has empty content", t.id),
                ));
            };
            by_first_byte[first as usize].push(i);
        }
        for list in &mut by_first_byte {
            list.sort_by_key(|&i| std::cmp::Reverse(tokens[i].content.len()));
        }
        Ok(AddedVocab {
            tokens,
            by_first_byte,
        })
    }

    pub fn by_id(&self, id: u32) -> Option<&AddedToken> {
        self.tokens.iter().find(|t| t.id == id)
    }

    pub fn by_content(&self, content: &str) -> Option<&AddedToken> {
        self.tokens.iter().find(|t| t.content == content)
    }

    /// Cuts `text` into text runs and added tokens, in order. Text runs are never empty.
    pub fn split<'a>(&self, text: &'a str) -> Vec<Segment<'a>> {
        if self.tokens.is_empty() {
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
            let Some(token) = self.longest_at(bytes, pos) else {
                pos += 1;
                continue;
            };
            let t = &self.tokens[token];
            let mut start = pos;
            let mut end = pos + t.content.len();
            if t.lstrip {
                let kept = text[emitted..start].trim_end();
                start = emitted + kept.len();
            }
            if t.rstrip {
                end = text.len() - text[end..].trim_start().len();
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

    /// The longest added token whose content starts at byte `pos`. Contents are valid UTF-8,
    /// so a match can only start on a character boundary.
    fn longest_at(&self, bytes: &[u8], pos: usize) -> Option<usize> {
        self.by_first_byte[bytes[pos] as usize]
            .iter()
            .copied()
            .find(|&i| bytes[pos..].starts_with(self.tokens[i].content.as_bytes()))
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
}
