//! Splitting a text at a pattern's matches: `Split` (a string or regex) and `Digits` (numeric
//! characters). The text is first a run of events, matches and the gaps between them in order;
//! the behaviour then decides which events become pieces and which merge with a neighbour,
//! exactly as `tokenizers`' `SplitDelimiterBehavior` does. Empty pieces are dropped.

use crate::text::pattern::{Pattern, PatternSource};
use crate::{Error, Result};

/// What happens to the matches of a split pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitBehavior {
    /// Matches and the gaps between them each become a piece.
    Isolated,
    /// Matches are dropped; the gaps become pieces.
    Removed,
    /// A match joins the gap before it.
    MergedWithPrevious,
    /// A match joins the gap after it.
    MergedWithNext,
    /// Adjacent matches become one piece.
    Contiguous,
}

const BEHAVIORS: [(SplitBehavior, &str); 5] = [
    (SplitBehavior::Isolated, "Isolated"),
    (SplitBehavior::Removed, "Removed"),
    (SplitBehavior::MergedWithPrevious, "MergedWithPrevious"),
    (SplitBehavior::MergedWithNext, "MergedWithNext"),
    (SplitBehavior::Contiguous, "Contiguous"),
];

impl SplitBehavior {
    pub fn hf_name(self) -> &'static str {
        BEHAVIORS
            .iter()
            .find(|(b, _)| *b == self)
            .map_or("Isolated", |(_, n)| n)
    }

    pub fn parse(name: &str) -> Result<Self> {
        BEHAVIORS
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(b, _)| *b)
            .ok_or_else(|| {
                let names: Vec<&str> = BEHAVIORS.iter().map(|(_, n)| *n).collect();
                Error::invalid(
                    "tokenizer",
                    format!("{name:?} is not one of {}", names.join(", ")),
                )
            })
    }
}

/// A `Split` pre-tokenizer stage.
#[derive(Clone, Debug)]
pub struct SplitRule {
    pub pattern: Pattern,
    pub behavior: SplitBehavior,
    /// The pattern's matches are the gaps and the gaps the matches.
    pub invert: bool,
}

impl SplitRule {
    pub fn regex(pattern: &str, behavior: SplitBehavior) -> Result<Self> {
        Self::new(PatternSource::Regex(pattern.to_string()), behavior, false)
    }

    pub fn new(source: PatternSource, behavior: SplitBehavior, invert: bool) -> Result<Self> {
        Ok(SplitRule {
            pattern: Pattern::new(source)?,
            behavior,
            invert,
        })
    }

    /// Calls `each(start, end)` with every piece of `text` in order.
    pub(super) fn for_each(&self, text: &str, each: &mut PieceFn) -> Result<()> {
        cut_around(text, self.behavior, self.invert, each, &mut |m| {
            self.pattern.for_each_match(text, m)
        })
    }
}

/// `Digits`: numeric characters (Unicode categories Nd, Nl, No) each alone, or runs of them
/// together.
pub(super) fn split_digits(text: &str, individual: bool, each: &mut PieceFn) -> Result<()> {
    let behavior = if individual {
        SplitBehavior::Isolated
    } else {
        SplitBehavior::Contiguous
    };
    cut_around(text, behavior, false, each, &mut |m| {
        for (i, c) in text.char_indices().filter(|(_, c)| c.is_numeric()) {
            m(i, i + c.len_utf8())?;
        }
        Ok(())
    })
}

/// Splits at every character that `is` picks, each one a match of its own, placed by
/// `behavior` (`WhitespaceSplit`: whitespace removed; `Punctuation`: as configured).
pub(super) fn split_chars(
    text: &str,
    behavior: SplitBehavior,
    is: impl Fn(char) -> bool,
    each: &mut PieceFn,
) -> Result<()> {
    cut_around(text, behavior, false, each, &mut |m| {
        for (i, c) in text.char_indices().filter(|&(_, c)| is(c)) {
            m(i, i + c.len_utf8())?;
        }
        Ok(())
    })
}

/// ASCII punctuation (which includes symbols such as `$`, `+` and `|`) or a Unicode
/// punctuation character (General Category P), as BERT's tokenizer defines punctuation.
pub(super) fn is_punctuation(c: char) -> bool {
    use regex::Regex;
    use std::sync::LazyLock;
    static PUNCTUATION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\p{P}$").expect("a valid pattern"));
    c.is_ascii_punctuation() || (!c.is_ascii() && PUNCTUATION.is_match(c.encode_utf8(&mut [0; 4])))
}

/// Splits before every `c`, each `c` starting the piece after it (Metaspace's split).
pub(super) fn split_before(text: &str, c: char, each: &mut PieceFn) -> Result<()> {
    cut_around(text, SplitBehavior::MergedWithNext, false, each, &mut |m| {
        for (i, _) in text.match_indices(c) {
            m(i, i + c.len_utf8())?;
        }
        Ok(())
    })
}

/// The one loop behind every split: `matches` reports the matches of `text` in order; they and
/// the gaps between them become events (a match is `!invert`), which `behavior` turns into the
/// pieces handed to `each`.
fn cut_around(
    text: &str,
    behavior: SplitBehavior,
    invert: bool,
    each: &mut PieceFn,
    matches: &mut dyn FnMut(&mut PieceFn) -> Result<()>,
) -> Result<()> {
    let mut cut = Cutter::new(behavior, each);
    let mut last = 0;
    matches(&mut |start, end| {
        if start > last {
            cut.event(last, start, invert)?;
        }
        cut.event(start, end, !invert)?;
        last = end;
        Ok(())
    })?;
    if last < text.len() {
        cut.event(last, text.len(), invert)?;
    }
    cut.finish()
}

pub(super) type PieceFn<'a> = dyn FnMut(usize, usize) -> Result<()> + 'a;

/// Turns events (matches and gaps, in order) into pieces. At most one piece is held back: the
/// one the next event may still join.
struct Cutter<'e, 'f> {
    behavior: SplitBehavior,
    each: &'e mut PieceFn<'f>,
    /// The piece not yet handed out, and whether it ends in a match.
    pending: Option<(usize, usize, bool)>,
    previous_was_match: bool,
}

impl<'e, 'f> Cutter<'e, 'f> {
    fn new(behavior: SplitBehavior, each: &'e mut PieceFn<'f>) -> Self {
        Cutter {
            behavior,
            each,
            pending: None,
            previous_was_match: false,
        }
    }

    fn event(&mut self, start: usize, end: usize, is_match: bool) -> Result<()> {
        use SplitBehavior::*;
        let previous = std::mem::replace(&mut self.previous_was_match, is_match);
        match self.behavior {
            Isolated => self.emit(start, end),
            Removed if is_match => Ok(()),
            Removed => self.emit(start, end),
            Contiguous => match &mut self.pending {
                Some((_, e, m)) if *m == is_match => {
                    *e = end;
                    Ok(())
                }
                _ => self.hold(start, end, is_match),
            },
            MergedWithPrevious => match &mut self.pending {
                Some((_, e, _)) if is_match && !previous => {
                    *e = end;
                    Ok(())
                }
                _ => self.hold(start, end, is_match),
            },
            MergedWithNext => match self.pending {
                // The held match takes this gap as its tail.
                Some((s, _, true)) if !is_match => {
                    self.pending = None;
                    self.emit(s, end)
                }
                _ if is_match => self.hold(start, end, true),
                _ => {
                    self.flush()?;
                    self.emit(start, end)
                }
            },
        }
    }

    fn hold(&mut self, start: usize, end: usize, is_match: bool) -> Result<()> {
        self.flush()?;
        self.pending = Some((start, end, is_match));
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        match self.pending.take() {
            Some((s, e, _)) => self.emit(s, e),
            None => Ok(()),
        }
    }

    fn emit(&mut self, start: usize, end: usize) -> Result<()> {
        if end > start {
            (self.each)(start, end)
        } else {
            Ok(())
        }
    }

    fn finish(mut self) -> Result<()> {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str, f: impl Fn(&str, &mut PieceFn) -> Result<()>) -> Vec<String> {
        let mut out = Vec::new();
        f(text, &mut |s, e| {
            out.push(text[s..e].to_string());
            Ok(())
        })
        .unwrap();
        out
    }

    fn split(pattern: &str, behavior: SplitBehavior, invert: bool, text: &str) -> Vec<String> {
        let rule =
            SplitRule::new(PatternSource::Literal(pattern.into()), behavior, invert).unwrap();
        pieces(text, |t, each| rule.for_each(t, each))
    }

    #[test]
    fn each_behavior_places_the_matches_as_tokenizers_does() {
        use SplitBehavior::*;
        let text = "-a--b-";
        assert_eq!(
            split("-", Isolated, false, text),
            ["-", "a", "-", "-", "b", "-"]
        );
        assert_eq!(split("-", Removed, false, text), ["a", "b"]);
        assert_eq!(
            split("-", MergedWithPrevious, false, text),
            ["-", "a-", "-", "b-"]
        );
        assert_eq!(
            split("-", MergedWithNext, false, text),
            ["-a", "-", "-b", "-"]
        );
        assert_eq!(
            split("-", Contiguous, false, text),
            ["-", "a", "--", "b", "-"]
        );
        // Inverted, the letters are the matches (and each "-" is a gap of its own).
        assert_eq!(
            split("-", MergedWithPrevious, true, "a--b"),
            ["a", "-", "-b"]
        );
    }

    #[test]
    fn digits_isolate_each_numeral_or_keep_runs_together() {
        let text = "ab123 4٥6x";
        assert_eq!(
            pieces(text, |t, e| split_digits(t, true, e)),
            ["ab", "1", "2", "3", " ", "4", "٥", "6", "x"]
        );
        assert_eq!(
            pieces(text, |t, e| split_digits(t, false, e)),
            ["ab", "123", " ", "4٥6", "x"]
        );
    }

    #[test]
    fn punctuation_is_ascii_punctuation_or_unicode_p() {
        let text = "a$b,c«d»e。f€g";
        assert_eq!(
            pieces(text, |t, e| split_chars(
                t,
                SplitBehavior::Isolated,
                is_punctuation,
                e
            )),
            ["a", "$", "b", ",", "c", "«", "d", "»", "e", "。", "f€g"]
        );
        assert_eq!(
            pieces(" a \u{3000}b ", |t, e| split_chars(
                t,
                SplitBehavior::Removed,
                char::is_whitespace,
                e
            )),
            ["a", "b"]
        );
    }

    #[test]
    fn split_before_starts_each_piece_with_the_marker() {
        assert_eq!(
            pieces("▁Hello▁▁world▁", |t, e| split_before(t, '▁', e)),
            ["▁Hello", "▁", "▁world", "▁"]
        );
        assert_eq!(pieces("ab▁c", |t, e| split_before(t, '▁', e)), ["ab", "▁c"]);
    }
}
