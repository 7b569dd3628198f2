//! `Metaspace`, the SentencePiece convention: spaces become a visible marker ("▁", U+2581), one
//! is put in front of the text (always, only at the start of the input, or never), and the
//! text may be split before each marker. The decoder side lives in `decode`.

use super::split::{split_before, PieceFn};
use super::Start;
use crate::{Error, Result};

/// When the marker is put in front of a piece that does not start with one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrependScheme {
    Always,
    /// Only for the piece at the very start of the input (not after an added token).
    First,
    Never,
}

impl PrependScheme {
    pub fn hf_name(self) -> &'static str {
        match self {
            PrependScheme::Always => "always",
            PrependScheme::First => "first",
            PrependScheme::Never => "never",
        }
    }

    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "always" => Ok(PrependScheme::Always),
            "first" => Ok(PrependScheme::First),
            "never" => Ok(PrependScheme::Never),
            other => Err(Error::invalid(
                "tokenizer",
                format!("{other:?} is not one of always, first, never"),
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metaspace {
    pub replacement: char,
    pub prepend_scheme: PrependScheme,
    /// Split before every marker (each word its own piece), or keep the text whole.
    pub split: bool,
}

impl Metaspace {
    /// `text` with spaces as markers and the marker prepended where the scheme says;
    /// `start`: where the text begins.
    pub(super) fn mark(&self, text: &str, start: Start) -> String {
        let mut out = String::with_capacity(text.len() + 3);
        let prepend = match self.prepend_scheme {
            PrependScheme::Always => start != Start::Continued,
            PrependScheme::First => start == Start::Input,
            PrependScheme::Never => false,
        };
        // Judged after the spaces are replaced: a leading space already became a marker.
        if prepend && !text.starts_with([' ', self.replacement]) {
            out.push(self.replacement);
        }
        for c in text.chars() {
            out.push(if c == ' ' { self.replacement } else { c });
        }
        out
    }

    /// Calls `each(start, end)` with the pieces of marked text.
    pub(super) fn for_each(&self, marked: &str, each: &mut PieceFn) -> Result<()> {
        if self.split {
            split_before(marked, self.replacement, each)
        } else if marked.is_empty() {
            Ok(())
        } else {
            each(0, marked.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metaspace(prepend_scheme: PrependScheme, split: bool) -> Metaspace {
        Metaspace {
            replacement: '▁',
            prepend_scheme,
            split,
        }
    }

    #[test]
    fn prepend_schemes_put_the_marker_first_always_or_never() {
        let always = metaspace(PrependScheme::Always, true);
        assert_eq!(always.mark("Hi you", Start::Piece), "▁Hi▁you");
        assert_eq!(always.mark(" Hi", Start::Input), "▁Hi");
        assert_eq!(always.mark("Hi you", Start::Continued), "Hi▁you");
        let first = metaspace(PrependScheme::First, false);
        assert_eq!(first.mark("Hi you", Start::Input), "▁Hi▁you");
        assert_eq!(first.mark("Hi you", Start::Piece), "Hi▁you");
        let never = metaspace(PrependScheme::Never, true);
        assert_eq!(never.mark("Hi you", Start::Input), "Hi▁you");
    }
}
