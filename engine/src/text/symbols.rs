//! How a pre-tokenized piece becomes the first symbols that BPE merges: one per byte for a
//! byte-level vocabulary (GPT-2's alphabet), or one per character for a SentencePiece-style
//! vocabulary (LLaMA-2, Gemma), where a character missing from the vocabulary falls back to its
//! UTF-8 bytes as `<0xNN>` tokens (`byte_fallback`), or else becomes the unknown token (one for
//! a whole run of them with `fuse_unk`).
//!
//! The order follows `tokenizers` exactly, including one quirk: an unknown token is written
//! only when the next known symbol or the end comes, so byte-fallback tokens of a character in
//! between land before it. (Only a vocabulary missing some `<0xNN>` tokens can show this.)

use super::byte_level;
use crate::{Error, Result};
use std::collections::HashMap;

/// What a symbol is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AlphabetKind {
    /// A byte, spelled in GPT-2's byte-level alphabet (a `ByteLevel` pre-tokenizer).
    #[default]
    ByteLevel,
    /// A character, spelled as itself.
    Chars { byte_fallback: bool },
}

#[derive(Clone, Debug)]
pub(crate) struct Alphabet {
    pub kind: AlphabetKind,
    /// Byte-level: the id of each byte's token.
    byte_ids: [Option<u32>; 256],
    /// Chars: the ids of the single-character tokens.
    char_ids: HashMap<char, u32>,
    /// Chars with byte fallback: the id of each `<0xNN>` token.
    fallback_ids: [Option<u32>; 256],
    pub unk_id: Option<u32>,
    pub fuse_unk: bool,
}

impl Alphabet {
    pub fn new(
        vocab: &HashMap<String, u32>,
        kind: AlphabetKind,
        unk_id: Option<u32>,
        fuse_unk: bool,
    ) -> Self {
        let mut byte_ids = [None; 256];
        let mut fallback_ids = [None; 256];
        let mut char_ids = HashMap::new();
        match kind {
            AlphabetKind::ByteLevel => {
                for (b, slot) in byte_ids.iter_mut().enumerate() {
                    let c = byte_level::byte_to_char(b as u8);
                    *slot = vocab.get(c.encode_utf8(&mut [0; 4]) as &str).copied();
                }
            }
            AlphabetKind::Chars { byte_fallback } => {
                for (token, &id) in vocab {
                    let mut chars = token.chars();
                    if let (Some(c), None) = (chars.next(), chars.next()) {
                        char_ids.insert(c, id);
                    }
                }
                if byte_fallback {
                    for (b, slot) in fallback_ids.iter_mut().enumerate() {
                        *slot = vocab.get(&byte_fallback_token(b as u8)).copied();
                    }
                }
            }
        }
        Alphabet {
            kind,
            byte_ids,
            char_ids,
            fallback_ids,
            unk_id,
            fuse_unk,
        }
    }

    /// Appends the symbols of `piece` to `out`.
    pub fn symbols(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut unk = UnknownRun::default();
        match self.kind {
            AlphabetKind::ByteLevel => {
                for &b in piece.as_bytes() {
                    match self.byte_ids[b as usize] {
                        Some(id) => unk.known(id, out),
                        None => unk.unknown(self, out, || {
                            format!(
                                "byte 0x{b:02X} ({:?} in the byte-level alphabet) has no token in this vocabulary and it has no unk_token",
                                byte_level::byte_to_char(b)
                            )
                        })?,
                    }
                }
            }
            AlphabetKind::Chars { byte_fallback } => {
                for c in piece.chars() {
                    if let Some(&id) = self.char_ids.get(&c) {
                        unk.known(id, out);
                    } else if byte_fallback && self.push_fallback(c, out) {
                        // Written without settling a pending unknown token, as tokenizers does.
                    } else {
                        unk.unknown(self, out, || {
                            format!("character {c:?} has no token in this vocabulary, no <0xNN> byte fallback and no unk_token")
                        })?;
                    }
                }
            }
        }
        unk.finish(out);
        Ok(())
    }

    /// `symbols`, for a vocabulary whose symbols carry affixes: every symbol after the first
    /// spelled with the prefix, the last with the suffix, each looked up in `vocab`. Byte
    /// fallback spells the affixed symbol's bytes, as `tokenizers` does.
    pub fn symbols_affixed(
        &self,
        piece: &str,
        vocab: &HashMap<String, u32>,
        affixes: &super::bpe::Affixes,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let units: Vec<String> = match self.kind {
            AlphabetKind::ByteLevel => piece
                .bytes()
                .map(|b| byte_level::byte_to_char(b).to_string())
                .collect(),
            AlphabetKind::Chars { .. } => piece.chars().map(String::from).collect(),
        };
        let mut unk = UnknownRun::default();
        let last = units.len().saturating_sub(1);
        for (i, unit) in units.iter().enumerate() {
            let mut spelled = String::with_capacity(unit.len() + 8);
            if i > 0 {
                spelled.push_str(affixes.prefix.as_deref().unwrap_or(""));
            }
            spelled.push_str(unit);
            if i == last {
                spelled.push_str(affixes.suffix.as_deref().unwrap_or(""));
            }
            if let Some(&id) = vocab.get(&spelled) {
                unk.known(id, out);
                continue;
            }
            let byte_fallback = matches!(
                self.kind,
                AlphabetKind::Chars {
                    byte_fallback: true
                }
            );
            let fallback: Option<Vec<u32>> = byte_fallback
                .then(|| {
                    spelled
                        .bytes()
                        .map(|b| self.fallback_ids[b as usize])
                        .collect()
                })
                .flatten();
            match fallback {
                Some(ids) => out.extend(ids),
                None => unk.unknown(self, out, || {
                    format!("symbol {spelled:?} has no token in this vocabulary and it has no unk_token")
                })?,
            }
        }
        unk.finish(out);
        Ok(())
    }

    /// Pushes the `<0xNN>` tokens of `c`'s bytes if the vocabulary has all of them.
    fn push_fallback(&self, c: char, out: &mut Vec<u32>) -> bool {
        let mut buf = [0; 4];
        let bytes = c.encode_utf8(&mut buf).as_bytes();
        if bytes
            .iter()
            .any(|&b| self.fallback_ids[b as usize].is_none())
        {
            return false;
        }
        out.extend(bytes.iter().filter_map(|&b| self.fallback_ids[b as usize]));
        true
    }
}

/// The token `tokenizers` looks up for byte `b` under byte fallback: `<0x0A>`.
pub(crate) fn byte_fallback_token(b: u8) -> String {
    format!("<0x{b:02X}>")
}

/// An unknown token waiting to be written.
#[derive(Default)]
struct UnknownRun {
    pending: Option<u32>,
}

impl UnknownRun {
    fn known(&mut self, id: u32, out: &mut Vec<u32>) {
        self.finish(out);
        out.push(id);
    }

    fn unknown(
        &mut self,
        alphabet: &Alphabet,
        out: &mut Vec<u32>,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        let unk = alphabet
            .unk_id
            .ok_or_else(|| Error::invalid("encode", what()))?;
        if !alphabet.fuse_unk {
            self.finish(out);
        }
        self.pending = Some(unk);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u32>) {
        if let Some(unk) = self.pending.take() {
            out.push(unk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[&str]) -> HashMap<String, u32> {
        tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect()
    }

    #[test]
    fn a_missing_character_falls_back_to_its_utf8_byte_tokens() {
        // "▁" is U+2581: bytes E2 96 81.
        let v = vocab(&["<unk>", "a", "<0xE2>", "<0x96>", "<0x81>"]);
        let kind = AlphabetKind::Chars {
            byte_fallback: true,
        };
        let mut out = Vec::new();
        Alphabet::new(&v, kind, Some(0), true)
            .symbols("a▁a", &mut out)
            .unwrap();
        assert_eq!(out, [1, 2, 3, 4, 1]);
    }

    #[test]
    fn unknown_characters_fuse_into_one_unk_only_with_fuse_unk() {
        let v = vocab(&["<unk>", "a"]);
        let kind = AlphabetKind::Chars {
            byte_fallback: true,
        };
        let run = |fuse| {
            let mut out = Vec::new();
            Alphabet::new(&v, kind, Some(0), fuse)
                .symbols("a中文a", &mut out)
                .unwrap();
            out
        };
        assert_eq!(run(true), [1, 0, 1]);
        assert_eq!(run(false), [1, 0, 0, 1]);
        let err = Alphabet::new(&v, kind, None, true)
            .symbols("中", &mut Vec::new())
            .unwrap_err();
        assert!(err.to_string().contains("'中'"), "{err}");
    }
}
