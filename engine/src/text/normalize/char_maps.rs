//! Normalizers that map or drop single characters: `Nmt` (SentencePiece's NMT rules: ASCII
//! controls dropped, other line and zero-width characters made spaces), `StripAccents`
//! (combining marks dropped) and `Strip` (whitespace trimmed at either end).

use std::borrow::Cow;

/// SentencePiece's `nmt_nfkc` character rules, without the NFKC part.
pub fn nmt(text: &str) -> Cow<'_, str> {
    let dropped =
        |c: char| matches!(c as u32, 0x01..=0x08 | 0x0B | 0x0E..=0x1F | 0x7F | 0x8F | 0x9F);
    let spaced = |c: char| {
        matches!(
            c as u32,
            0x09 | 0x0A | 0x0C | 0x0D | 0x1680 | 0x200B
                ..=0x200F | 0x2028 | 0x2029 | 0x2581 | 0xFEFF | 0xFFFD
        )
    };
    if !text.chars().any(|c| dropped(c) || spaced(c)) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .filter(|&c| !dropped(c))
            .map(|c| if spaced(c) { ' ' } else { c })
            .collect(),
    )
}

/// Drops every combining mark (General Category M), as `tokenizers`' `StripAccents` does;
/// precomposed letters keep their accents unless an NFD or NFKD stage split them first.
pub fn strip_accents(text: &str) -> Cow<'_, str> {
    use unicode_normalization::char::is_combining_mark;
    if !text.chars().any(is_combining_mark) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().filter(|&c| !is_combining_mark(c)).collect())
}

/// Trims Unicode whitespace on the left and/or right.
pub fn strip(text: &str, left: bool, right: bool) -> Cow<'_, str> {
    let mut t = text;
    if left {
        t = t.trim_start();
    }
    if right {
        t = t.trim_end();
    }
    if t.len() == text.len() {
        Cow::Borrowed(text)
    } else {
        // Owned: the normalizer takes a borrowed result for "unchanged".
        Cow::Owned(t.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nmt_drops_controls_and_spaces_line_breaks() {
        assert_eq!(nmt("a\u{1}b\nc\u{200b}d▁e"), "ab c d e");
        assert!(matches!(nmt("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn strip_accents_drops_marks_but_not_precomposed_letters() {
        assert_eq!(strip_accents("e\u{301}é"), "eé");
    }

    #[test]
    fn strip_trims_only_the_sides_asked() {
        assert_eq!(strip(" \ta \n", true, false), "a \n");
        assert_eq!(strip(" \ta \n", false, true), " \ta");
        assert_eq!(strip(" \u{3000}", true, true), "");
    }
}
