//! SentencePiece's precompiled character map (`Precompiled` in `tokenizer.json`, the
//! `precompiled_charsmap` of a `.model` file): the normalization rules a SentencePiece model
//! was trained with (e.g. `nmt_nfkc`), compiled into a double-array trie (darts-clone's layout)
//! over UTF-8 keys whose values point into a blob of NUL-terminated replacement strings.
//!
//! The blob: a little-endian u32 byte length of the trie, the trie's 32-bit units, then the
//! replacement strings. As `tokenizers` applies it: each extended grapheme cluster shorter
//! than 6 bytes is looked up whole, and if the trie holds a prefix of it, the shortest such
//! prefix's replacement stands for the whole cluster; otherwise each character is looked up
//! on its own and kept when the trie has none.

use crate::{Error, Result};
use std::borrow::Cow;
use unicode_segmentation::UnicodeSegmentation;

#[derive(Clone)]
pub struct CharsMap {
    /// The blob as read, written back unchanged.
    pub blob: Vec<u8>,
    units: Vec<u32>,
    /// The replacement strings, NUL-separated.
    replacements: Vec<u8>,
}

impl CharsMap {
    pub fn new(blob: Vec<u8>) -> Result<Self> {
        let bad = |msg: String| Error::invalid("tokenizer", format!("precompiled_charsmap: {msg}"));
        if blob.is_empty() {
            return Ok(CharsMap {
                blob,
                units: Vec::new(),
                replacements: Vec::new(),
            });
        }
        let head: [u8; 4] = blob
            .get(..4)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| {
                bad(format!(
                    "{} bytes, too short for its length field",
                    blob.len()
                ))
            })?;
        let trie_bytes = u32::from_le_bytes(head) as usize;
        let trie = blob.get(4..4 + trie_bytes).ok_or_else(|| {
            bad(format!(
                "the trie claims {trie_bytes} bytes but {} follow",
                blob.len() - 4
            ))
        })?;
        if !trie_bytes.is_multiple_of(4) || trie_bytes == 0 {
            return Err(bad(format!(
                "the trie's length {trie_bytes} is not a positive multiple of 4"
            )));
        }
        let units = trie
            .chunks_exact(4)
            .map(|u| u32::from_le_bytes([u[0], u[1], u[2], u[3]]))
            .collect();
        let replacements = blob[4 + trie_bytes..].to_vec();
        if std::str::from_utf8(&replacements).is_err() {
            return Err(bad("the replacement strings are not UTF-8".into()));
        }
        Ok(CharsMap {
            blob,
            units,
            replacements,
        })
    }

    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.units.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut changed = false;
        for cluster in text.graphemes(true) {
            if cluster.len() < 6 {
                if let Some(r) = self.replacement(cluster) {
                    out.push_str(r);
                    changed = true;
                    continue;
                }
            }
            for (i, c) in cluster.char_indices() {
                let one = &cluster[i..i + c.len_utf8()];
                match self.replacement(one) {
                    Some(r) => {
                        out.push_str(r);
                        changed = true;
                    }
                    None => out.push(c),
                }
            }
        }
        if changed {
            Cow::Owned(out)
        } else {
            Cow::Borrowed(text)
        }
    }

    /// The replacement of the shortest prefix of `key` that the trie holds. A unit or offset
    /// outside the blob ends the search (a damaged map leaves text unchanged, never panics).
    fn replacement(&self, key: &str) -> Option<&str> {
        let unit = |pos: usize| self.units.get(pos).copied();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let mut pos = offset(unit(0)?);
        for &byte in key.as_bytes() {
            if byte == 0 {
                return None;
            }
            pos ^= byte as usize;
            let u = unit(pos)?;
            // The label: the byte this unit is reached by (bit 31 set on leaves' units).
            if u & ((1 << 31) | 0xFF) != byte as u32 {
                return None;
            }
            pos ^= offset(u);
            if (u >> 8) & 1 == 1 {
                let value = (unit(pos)? & ((1 << 31) - 1)) as usize;
                let rest = self.replacements.get(value..)?;
                let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                return std::str::from_utf8(&rest[..end]).ok();
            }
        }
        None
    }
}

/// The map's size, not its bytes (a model's map is a few hundred KB).
impl std::fmt::Debug for CharsMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CharsMap({} bytes)", self.blob.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map built by hand in darts-clone's layout: "ﬁ" (EF AC 81) -> "fi" and
    /// "Ａ" (EF BC A1) -> "A". Each unit: label in bits 0-7, has-leaf in bit 8, offset in
    /// bits 10-31 (bit 9 clear: not shifted); a leaf unit's value in bits 0-30.
    fn map() -> CharsMap {
        let mut units = vec![0u32; 1024];
        let unit = |label: u32, leaf: bool, offset: u32| label | (leaf as u32) << 8 | offset << 10;
        // Root at 0 with offset 256: children at 256 ^ byte.
        units[0] = unit(0, false, 256);
        let ef = 256 ^ 0xEF;
        units[ef] = unit(0xEF, false, 1);
        let ac = ef ^ 1 ^ 0xAC;
        let bc = ef ^ 1 ^ 0xBC;
        units[ac] = unit(0xAC, false, 2);
        units[bc] = unit(0xBC, false, 3);
        let x81 = ac ^ 2 ^ 0x81;
        let xa1 = bc ^ 3 ^ 0xA1;
        units[x81] = unit(0x81, true, 4);
        units[xa1] = unit(0xA1, true, 5);
        // Leaf units (value = offset into the strings), label bit 31 set.
        units[x81 ^ 4] = 1 << 31;
        units[xa1 ^ 5] = (1 << 31) | 3;
        let mut blob = ((units.len() * 4) as u32).to_le_bytes().to_vec();
        for u in &units {
            blob.extend(u.to_le_bytes());
        }
        blob.extend(b"fi\0A\0");
        CharsMap::new(blob).unwrap()
    }

    #[test]
    fn mapped_characters_are_replaced_and_others_kept() {
        let m = map();
        assert_eq!(m.apply("ﬁne Ａb"), "fine Ab");
        assert!(matches!(m.apply("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_mapped_prefix_stands_for_its_whole_grapheme_cluster() {
        // "ﬁ" + a combining acute is one cluster under 6 bytes: tokenizers replaces all of it.
        assert_eq!(map().apply("ﬁ\u{301}x"), "fix");
    }

    #[test]
    fn a_damaged_map_is_an_error_or_changes_nothing() {
        assert!(CharsMap::new(vec![9, 0, 0, 0, 1]).is_err());
        let mut blob = 8u32.to_le_bytes().to_vec();
        blob.extend([0xFF; 8]);
        let m = CharsMap::new(blob).unwrap();
        assert_eq!(m.apply("ﬁ"), "ﬁ");
    }
}
