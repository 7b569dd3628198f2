//! `BertNormalizer`, the normalizer of BERT-family files: control characters dropped and every
//! whitespace character made a space (`clean_text`), CJK ideographs set apart by spaces
//! (`handle_chinese_chars`), accents stripped (decomposed, then the non-spacing marks
//! dropped), and lowercasing, in that order, as `tokenizers` does.

use regex::{Captures, Regex};
use std::borrow::Cow;
use std::sync::LazyLock;
use unicode_normalization::UnicodeNormalization;

/// The options as the file gives them. `strip_accents: None` follows `lowercase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertOptions {
    pub clean_text: bool,
    pub handle_chinese_chars: bool,
    pub strip_accents: Option<bool>,
    pub lowercase: bool,
}

impl Default for BertOptions {
    fn default() -> Self {
        BertOptions {
            clean_text: true,
            handle_chinese_chars: true,
            strip_accents: None,
            lowercase: true,
        }
    }
}

/// `\t`, `\n` and `\r` are whitespace here although Unicode calls them controls; any other
/// control, format, private-use or unassigned character (`\p{C}`) and U+FFFD go; any other
/// whitespace becomes a space.
static CLEAN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<space>[\t\n\r])|(?P<drop>[\p{C}\x{FFFD}])|\s").expect("a valid pattern")
});
static NON_SPACING_MARK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\p{Mn}+").expect("a valid pattern"));

impl BertOptions {
    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut current = Cow::Borrowed(text);
        if self.clean_text {
            current = rewrite(current, |t| {
                CLEAN.replace_all(
                    t,
                    |c: &Captures| {
                        if c.name("drop").is_some() {
                            ""
                        } else {
                            " "
                        }
                    },
                )
            });
        }
        if self.handle_chinese_chars && current.chars().any(is_chinese_char) {
            let mut spaced = String::with_capacity(current.len() + 16);
            for c in current.chars() {
                if is_chinese_char(c) {
                    spaced.extend([' ', c, ' ']);
                } else {
                    spaced.push(c);
                }
            }
            current = Cow::Owned(spaced);
        }
        if self.strip_accents.unwrap_or(self.lowercase) && !current.is_ascii() {
            let decomposed: String = current.nfd().collect();
            current = Cow::Owned(NON_SPACING_MARK.replace_all(&decomposed, "").into_owned());
        }
        if self.lowercase {
            current = rewrite(current, super::lowercase);
        }
        current
    }
}

/// `current` through `step`, borrowed as long as nothing changed.
fn rewrite<'a>(
    current: Cow<'a, str>,
    step: impl for<'t> Fn(&'t str) -> Cow<'t, str>,
) -> Cow<'a, str> {
    match current {
        Cow::Borrowed(t) => step(t),
        Cow::Owned(t) => match step(&t) {
            Cow::Borrowed(_) => Cow::Owned(t),
            Cow::Owned(changed) => Cow::Owned(changed),
        },
    }
}

/// The CJK Unified Ideographs blocks and their extensions and compatibility forms (not Hangul,
/// kana or other CJK scripts), as BERT's tokenizer defines "Chinese characters".
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bert_cleans_spaces_sets_ideographs_apart_and_strips_accents_when_lowercasing() {
        let o = BertOptions::default();
        // \t becomes a space, \u{7} (a control) and U+200B (a format character) go.
        assert_eq!(o.apply("Héllo\tW\u{7}orld\u{200b}!"), "hello world!");
        assert_eq!(o.apply("中文abc"), " 中  文 abc");
        let keep_case = BertOptions {
            lowercase: false,
            ..o
        };
        // Accents follow `lowercase` unless set: kept here.
        assert_eq!(keep_case.apply("Crème"), "Crème");
        let strip = BertOptions {
            strip_accents: Some(true),
            ..keep_case
        };
        assert_eq!(strip.apply("Crème Ørsted"), "Creme Ørsted");
    }
}
