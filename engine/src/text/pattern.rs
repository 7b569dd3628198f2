//! The patterns `tokenizer.json` stages match (`{"String": ...}` or `{"Regex": ...}`), shared by
//! the `Split` pre-tokenizer and the `Replace` normalizer and decoder. Regexes run on
//! `fancy-regex`, a backtracking engine with the same leftmost-first semantics as the Oniguruma
//! engine that `tokenizers` uses (the published split patterns need its lookahead); literal
//! strings are matched directly, which is much faster on the hot path (`Replace(" ", "▁")`).

use crate::{Error, Result};
use fancy_regex::Regex;
use std::borrow::Cow;

/// Where a pattern came from, as the file spells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatternSource {
    Regex(String),
    Literal(String),
}

impl PatternSource {
    fn text(&self) -> &str {
        match self {
            PatternSource::Regex(p) | PatternSource::Literal(p) => p,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Pattern {
    pub source: PatternSource,
    /// Compiled for `Regex` sources only.
    regex: Option<Regex>,
}

impl Pattern {
    pub fn new(source: PatternSource) -> Result<Self> {
        let regex = match &source {
            PatternSource::Regex(p) => Some(Regex::new(p).map_err(|e| {
                Error::invalid("tokenizer", format!("cannot compile pattern {p:?}: {e}"))
            })?),
            PatternSource::Literal(_) => None,
        };
        Ok(Pattern { source, regex })
    }

    pub fn regex(pattern: &str) -> Result<Self> {
        Self::new(PatternSource::Regex(pattern.to_string()))
    }

    /// Calls `each(start, end)` for every match in `text`, leftmost first and not overlapping.
    /// An empty literal matches nothing (as in `tokenizers`); a regex may match empty strings.
    pub fn for_each_match(
        &self,
        text: &str,
        each: &mut dyn FnMut(usize, usize) -> Result<()>,
    ) -> Result<()> {
        match (&self.regex, &self.source) {
            (Some(re), _) => {
                for m in re.find_iter(text) {
                    let m = m.map_err(|e| self.failure(e))?;
                    each(m.start(), m.end())?;
                }
            }
            (None, PatternSource::Literal(s)) if !s.is_empty() => {
                for (start, m) in text.match_indices(s.as_str()) {
                    each(start, start + m.len())?;
                }
            }
            (None, _) => {}
        }
        Ok(())
    }

    /// `text` with every match replaced by `content` (taken literally: no `$1` expansion).
    pub fn replace_all<'a>(&self, text: &'a str, content: &str) -> Result<Cow<'a, str>> {
        if let (None, PatternSource::Literal(s)) = (&self.regex, &self.source) {
            return Ok(if !s.is_empty() && text.contains(s.as_str()) {
                Cow::Owned(text.replace(s.as_str(), content))
            } else {
                Cow::Borrowed(text)
            });
        }
        let (mut out, mut last, mut matched) = (String::new(), 0, false);
        self.for_each_match(text, &mut |start, end| {
            out.push_str(&text[last..start]);
            out.push_str(content);
            last = end;
            matched = true;
            Ok(())
        })?;
        if !matched {
            return Ok(Cow::Borrowed(text));
        }
        out.push_str(&text[last..]);
        Ok(Cow::Owned(out))
    }

    fn failure(&self, e: fancy_regex::Error) -> Error {
        Error::invalid(
            "encode",
            format!("pattern {:?} failed on this text: {e}", self.source.text()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_replace_is_plain_and_takes_content_literally() {
        let p = Pattern::new(PatternSource::Literal(" ".into())).unwrap();
        assert_eq!(p.replace_all("a b  c", "▁").unwrap(), "a▁b▁▁c");
        let r = Pattern::regex(r"(\d)").unwrap();
        assert_eq!(r.replace_all("a1b22", "$1").unwrap(), "a$1b$1$1");
        let empty = Pattern::new(PatternSource::Literal(String::new())).unwrap();
        assert_eq!(empty.replace_all("abc", "x").unwrap(), "abc");
    }
}
