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

/// A look-behind must have a bounded length: fancy-regex tries an unbounded one (`(?<=a+)b`)
/// at every start position back to the text's beginning, which makes matching quadratic (a
/// 100,000-character text took 15.7 s). No published split pattern has one.
fn refuse_unbounded_lookbehind(p: &str) -> Result<()> {
    use fancy_regex::{Expr, LookAround};
    fn unbounded_lookbehind(e: &Expr) -> bool {
        match e {
            Expr::LookAround(inner, LookAround::LookBehind | LookAround::LookBehindNeg) => {
                max_len(inner).is_none() || unbounded_lookbehind(inner)
            }
            _ => e.children_iter().any(unbounded_lookbehind),
        }
    }
    let Ok(tree) = Expr::parse_tree(p) else {
        // Not a valid pattern: compiling it reports why.
        return Ok(());
    };
    if unbounded_lookbehind(&tree.expr) {
        return Err(Error::invalid(
            "tokenizer",
            format!(
                "pattern {p:?} has a look-behind of unbounded length, which makes matching \
                 quadratic in the text's length; a tokenizer split needs a bounded one"
            ),
        ));
    }
    Ok(())
}

/// The most characters `e` can match, or `None` when that is unbounded.
fn max_len(e: &fancy_regex::Expr) -> Option<usize> {
    use fancy_regex::Expr;
    match e {
        Expr::Empty | Expr::Assertion(_) | Expr::LookAround(..) | Expr::KeepOut => Some(0),
        Expr::Any { .. } => Some(1),
        Expr::GeneralNewline { .. } => Some(2),
        Expr::Literal { val, .. } => Some(val.chars().count()),
        Expr::LiteralBytes { bytes } => Some(bytes.len()),
        Expr::Concat(items) => items
            .iter()
            .try_fold(0usize, |n, x| n.checked_add(max_len(x)?)),
        Expr::Alt(items) => items
            .iter()
            .try_fold(0usize, |n, x| Some(n.max(max_len(x)?))),
        Expr::Group(x) => max_len(x),
        Expr::AtomicGroup(x) => max_len(x),
        Expr::Repeat { child, hi, .. } if *hi != usize::MAX => max_len(child)?.checked_mul(*hi),
        // A piece handed to the regex crate whole: bounded unless it repeats without a bound.
        Expr::Delegate { inner, .. } => {
            let open = inner.contains('*') || inner.contains('+') || inner.contains(",}");
            (!open).then(|| inner.chars().count())
        }
        Expr::Conditional {
            true_branch,
            false_branch,
            ..
        } => Some(max_len(true_branch)?.max(max_len(false_branch)?)),
        _ => None,
    }
}

impl Pattern {
    pub fn new(source: PatternSource) -> Result<Self> {
        let regex = match &source {
            PatternSource::Regex(p) => {
                refuse_unbounded_lookbehind(p)?;
                Some(Regex::new(p).map_err(|e| {
                    Error::invalid("tokenizer", format!("cannot compile pattern {p:?}: {e}"))
                })?)
            }
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
    fn an_unbounded_look_behind_is_refused_and_a_bounded_one_kept() {
        for p in [
            r"(?<=a+)b",
            r"(?<!x*)y",
            r"(?<=(ab)+)c",
            r"(?<=a{2,})b",
            r"(?<=(?<=a+)b)c",
        ] {
            let e = Pattern::regex(p).unwrap_err().to_string();
            assert!(e.contains("unbounded length"), "{p}: {e}");
        }
        for p in [
            r"(?<=a)b",
            r"(?<=ab|c)d",
            r"(?<![0-9]{1,3})x",
            r"\s+(?!\S)",
            r"'s|\p{L}+",
        ] {
            assert!(Pattern::regex(p).is_ok(), "{p}");
        }
    }

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
