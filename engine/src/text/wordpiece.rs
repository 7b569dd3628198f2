//! The WordPiece model (BERT and its family): each pre-tokenized word is cut greedily into the
//! longest vocabulary entries from the left, pieces after the first spelled with the
//! continuing-subword prefix ("##"). A word with a part no entry covers, or longer than
//! `max_input_chars_per_word` characters, becomes one unknown token, as in `tokenizers`.

use crate::{Error, Result};
use std::collections::HashMap;

#[derive(Clone, Debug)]
pub struct WordPieceModel {
    pub(crate) id_to_token: Vec<Option<String>>,
    pub(crate) token_to_id: HashMap<String, u32>,
    pub(crate) unk_token: String,
    unk_id: u32,
    pub(crate) prefix: String,
    pub(crate) max_input_chars_per_word: usize,
}

impl WordPieceModel {
    pub fn new(
        vocab: HashMap<String, u32>,
        unk_token: &str,
        prefix: &str,
        max_input_chars_per_word: usize,
    ) -> Result<Self> {
        let unk_id = *vocab.get(unk_token).ok_or_else(|| {
            Error::invalid(
                "tokenizer",
                format!("model.unk_token {unk_token:?} is not in model.vocab"),
            )
        })?;
        Ok(WordPieceModel {
            id_to_token: super::model::id_table(&vocab)?,
            token_to_id: vocab,
            unk_token: unk_token.to_string(),
            unk_id,
            prefix: prefix.to_string(),
            max_input_chars_per_word,
        })
    }

    pub fn id_count(&self) -> usize {
        self.id_to_token.len()
    }

    /// Appends the ids of one word to `out`.
    pub fn encode_piece(&self, word: &str, out: &mut Vec<u32>) -> Result<()> {
        if word.chars().count() > self.max_input_chars_per_word {
            out.push(self.unk_id);
            return Ok(());
        }
        let mark = out.len();
        let mut start = 0;
        let mut spelled = String::with_capacity(self.prefix.len() + word.len());
        while start < word.len() {
            // The longest entry from `start`: ends tried from the word's end, one character
            // back at a time.
            let mut end = word.len();
            let found = loop {
                if end <= start {
                    break None;
                }
                spelled.clear();
                if start > 0 {
                    spelled.push_str(&self.prefix);
                }
                spelled.push_str(&word[start..end]);
                if let Some(&id) = self.token_to_id.get(spelled.as_str()) {
                    break Some(id);
                }
                end -= word[start..end]
                    .chars()
                    .next_back()
                    .map_or(1, char::len_utf8);
            };
            match found {
                Some(id) => out.push(id),
                None => {
                    out.truncate(mark);
                    out.push(self.unk_id);
                    return Ok(());
                }
            }
            start = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(max_chars: usize) -> WordPieceModel {
        let vocab = ["[UNK]", "un", "##aff", "##able", "aff", "##a", "a"]
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        WordPieceModel::new(vocab, "[UNK]", "##", max_chars).unwrap()
    }

    fn encode(m: &WordPieceModel, word: &str) -> Vec<u32> {
        let mut out = vec![99];
        m.encode_piece(word, &mut out).unwrap();
        out
    }

    #[test]
    fn words_are_cut_into_the_longest_pieces_from_the_left() {
        let m = model(100);
        assert_eq!(encode(&m, "unaffable"), [99, 1, 2, 3]);
        assert_eq!(encode(&m, "affa"), [99, 4, 5]);
    }

    #[test]
    fn a_word_with_an_uncovered_part_is_one_unknown_token() {
        let m = model(100);
        // "un" + "##aff" match, then nothing covers "x...": the whole word is [UNK].
        assert_eq!(encode(&m, "unaffx"), [99, 0]);
        assert_eq!(encode(&model(5), "unaffable"), [99, 0]);
    }
}
