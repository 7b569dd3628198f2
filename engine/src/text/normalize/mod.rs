//! Normalizers: how text is rewritten before pre-tokenization, as `tokenizer.json`'s
//! `normalizer` describes it. Qwen2/3 compose characters (`NFC`); LLaMA-2 style files prepend
//! "▁" and turn spaces into "▁" (`Sequence[Prepend, Replace]`); BERT-family files clean,
//! lowercase and strip accents (`bert`); SentencePiece conversions (T5, ALBERT, XLM-R) carry
//! the model's own compiled rules (`charsmap`). Each text run between added tokens is
//! normalized on its own, so `Prepend` applies once per run, as in `tokenizers`.

mod bert;
mod char_maps;
mod charsmap;

pub use bert::BertOptions;
pub use charsmap::CharsMap;

use super::pattern::Pattern;
use crate::Result;
use std::borrow::Cow;
use unicode_normalization::{is_nfc_quick, is_nfd_quick, IsNormalized, UnicodeNormalization};

/// Unicode normalization forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnicodeForm {
    Nfc,
    Nfd,
    Nfkc,
    Nfkd,
}

impl UnicodeForm {
    pub fn hf_name(self) -> &'static str {
        match self {
            UnicodeForm::Nfc => "NFC",
            UnicodeForm::Nfd => "NFD",
            UnicodeForm::Nfkc => "NFKC",
            UnicodeForm::Nfkd => "NFKD",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Self::Nfc, Self::Nfd, Self::Nfkc, Self::Nfkd]
            .into_iter()
            .find(|f| f.hf_name() == name)
    }

    fn apply<'a>(self, text: &'a str) -> Cow<'a, str> {
        // Most text is already composed: the quick check answers without allocating.
        let already = match self {
            UnicodeForm::Nfc => is_nfc_quick(text.chars()) == IsNormalized::Yes,
            UnicodeForm::Nfd => is_nfd_quick(text.chars()) == IsNormalized::Yes,
            UnicodeForm::Nfkc | UnicodeForm::Nfkd => text.is_ascii(),
        };
        if already {
            return Cow::Borrowed(text);
        }
        Cow::Owned(match self {
            UnicodeForm::Nfc => text.nfc().collect(),
            UnicodeForm::Nfd => text.nfd().collect(),
            UnicodeForm::Nfkc => text.nfkc().collect(),
            UnicodeForm::Nfkd => text.nfkd().collect(),
        })
    }
}

/// One normalizer stage.
#[derive(Clone, Debug)]
pub enum NormalizeStep {
    Unicode(UnicodeForm),
    /// Each character's lowercase mapping on its own (no final-sigma rule), as `tokenizers` does.
    Lowercase,
    /// Puts the string in front of a non-empty text.
    Prepend(String),
    /// Replaces every match of the pattern with the content.
    Replace {
        pattern: Pattern,
        content: String,
    },
    /// `BertNormalizer`.
    Bert(BertOptions),
    /// `Strip`: whitespace trimmed on the sides asked.
    Strip {
        left: bool,
        right: bool,
    },
    /// `StripAccents`: combining marks dropped.
    StripAccents,
    /// `Nmt`: SentencePiece's NMT character rules.
    Nmt,
    /// `Precompiled`: a SentencePiece model's compiled character map (boxed: it holds the
    /// whole trie).
    Precompiled(Box<CharsMap>),
}

/// The stages in order; none means the text is left as it is.
#[derive(Clone, Debug, Default)]
pub struct Normalizer {
    pub steps: Vec<NormalizeStep>,
}

impl Normalizer {
    pub fn new(steps: Vec<NormalizeStep>) -> Self {
        Normalizer { steps }
    }

    /// The normalized text; borrowed when no stage changed it.
    pub fn normalize<'a>(&self, text: &'a str) -> Result<Cow<'a, str>> {
        self.normalize_from(text, false)
    }

    /// `normalize`, for a text that continues an earlier one (`continued`): the middle of a
    /// run has no start to prepend to.
    pub fn normalize_from<'a>(&self, text: &'a str, continued: bool) -> Result<Cow<'a, str>> {
        let mut current = Cow::Borrowed(text);
        for step in &self.steps {
            if continued && matches!(step, NormalizeStep::Prepend(_)) {
                continue;
            }
            if let Cow::Owned(changed) = step.apply(&current)? {
                current = Cow::Owned(changed);
            }
        }
        Ok(current)
    }
}

impl NormalizeStep {
    fn apply<'a>(&self, text: &'a str) -> Result<Cow<'a, str>> {
        Ok(match self {
            NormalizeStep::Unicode(form) => form.apply(text),
            NormalizeStep::Lowercase => lowercase(text),
            NormalizeStep::Prepend(prefix) if !text.is_empty() => {
                Cow::Owned(format!("{prefix}{text}"))
            }
            NormalizeStep::Prepend(_) => Cow::Borrowed(text),
            NormalizeStep::Replace { pattern, content } => pattern.replace_all(text, content)?,
            NormalizeStep::Bert(options) => options.apply(text),
            NormalizeStep::Strip { left, right } => char_maps::strip(text, *left, *right),
            NormalizeStep::StripAccents => char_maps::strip_accents(text),
            NormalizeStep::Nmt => char_maps::nmt(text),
            NormalizeStep::Precompiled(map) => map.apply(text),
        })
    }
}

/// Each character's lowercase mapping on its own; borrowed when nothing changes.
fn lowercase(text: &str) -> Cow<'_, str> {
    let unchanged = |c: char| {
        let mut lower = c.to_lowercase();
        lower.next() == Some(c) && lower.next().is_none()
    };
    if text.chars().all(unchanged) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.chars().flat_map(char::to_lowercase).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::pattern::PatternSource;

    fn run(steps: Vec<NormalizeStep>, text: &str) -> String {
        Normalizer::new(steps).normalize(text).unwrap().into_owned()
    }

    #[test]
    fn nfc_composes_combining_marks_and_jamo() {
        let nfc = || vec![NormalizeStep::Unicode(UnicodeForm::Nfc)];
        assert_eq!(run(nfc(), "cafe\u{301}"), "caf\u{e9}");
        assert_eq!(run(nfc(), "e\u{323}\u{302}"), "\u{1ec7}");
        assert_eq!(run(nfc(), "\u{1100}\u{1161}\u{11a8}"), "\u{ac01}");
        assert_eq!(run(nfc(), "ﬁ"), "ﬁ");
        assert_eq!(
            run(vec![NormalizeStep::Unicode(UnicodeForm::Nfkc)], "ﬁ①"),
            "fi1"
        );
        assert_eq!(
            run(vec![NormalizeStep::Unicode(UnicodeForm::Nfd)], "\u{e9}"),
            "e\u{301}"
        );
    }

    #[test]
    fn llama2_prepend_then_replace_marks_every_space() {
        let steps = || {
            vec![
                NormalizeStep::Prepend("▁".into()),
                NormalizeStep::Replace {
                    pattern: Pattern::new(PatternSource::Literal(" ".into())).unwrap(),
                    content: "▁".into(),
                },
            ]
        };
        assert_eq!(run(steps(), "Hello  world"), "▁Hello▁▁world");
        assert_eq!(run(steps(), ""), "");
    }

    #[test]
    fn lowercase_maps_each_character_alone() {
        // Rust's str::to_lowercase would make the final sigma "ς"; tokenizers does not.
        assert_eq!(run(vec![NormalizeStep::Lowercase], "ΣΑΣ İ"), "σασ i\u{307}");
    }
}
