//! Pre-tokenization: cutting text into the pieces that BPE merges inside of, as Hugging Face's
//! `Split` and `ByteLevel` pre-tokenizers do. Both published split patterns use a lookahead
//! (`\s+(?!\S)`), which the `regex` crate lacks, so they run on `fancy-regex`, a backtracking
//! engine with the same leftmost-first semantics as the Oniguruma engine that `tokenizers` uses.

use crate::{Error, Result};
use fancy_regex::Regex;
use std::borrow::Cow;

/// GPT-2's split pattern, also what a `ByteLevel` pre-tokenizer with `use_regex: true` applies.
pub const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// LLaMA-3's split pattern (case-insensitive contractions, digits in groups of at most three,
/// newlines kept with the punctuation before them).
pub const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Which pattern a trained tokenizer splits with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitPattern {
    /// `ByteLevel { use_regex: true }`, as GPT-2 writes it.
    Gpt2,
    /// `Sequence[Split(LLaMA-3 regex, Isolated), ByteLevel { use_regex: false }]`.
    Llama3,
}

impl SplitPattern {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "gpt2" => Ok(SplitPattern::Gpt2),
            "llama3" => Ok(SplitPattern::Llama3),
            other => Err(Error::invalid(
                "tokenizer",
                format!("unknown split pattern \"{other}\"; expected \"gpt2\" or \"llama3\""),
            )),
        }
    }

    /// The pre-tokenizer that Hugging Face writes for this pattern.
    pub fn pre_tokenizer(self) -> Result<PreTokenizer> {
        Ok(match self {
            SplitPattern::Gpt2 => PreTokenizer::new(vec![Step::ByteLevel {
                add_prefix_space: false,
                use_regex: true,
            }])?,
            SplitPattern::Llama3 => PreTokenizer::new(vec![
                Step::Split(SplitRule::regex(LLAMA3_PATTERN, SplitBehavior::Isolated)?),
                Step::ByteLevel {
                    add_prefix_space: false,
                    use_regex: false,
                },
            ])?,
        })
    }
}

/// What happens to the text a split pattern matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitBehavior {
    /// Matches and the gaps between them each become a piece.
    Isolated,
    /// Matches are dropped; the gaps become pieces.
    Removed,
}

impl SplitBehavior {
    pub fn hf_name(self) -> &'static str {
        match self {
            SplitBehavior::Isolated => "Isolated",
            SplitBehavior::Removed => "Removed",
        }
    }
}

/// Where a split pattern came from: `{"Regex": ...}` or a literal `{"String": ...}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatternSource {
    Regex(String),
    Literal(String),
}

#[derive(Clone, Debug)]
pub struct SplitRule {
    pub source: PatternSource,
    pub behavior: SplitBehavior,
    regex: Regex,
}

impl SplitRule {
    pub fn regex(pattern: &str, behavior: SplitBehavior) -> Result<Self> {
        Self::new(PatternSource::Regex(pattern.to_string()), behavior)
    }

    pub fn new(source: PatternSource, behavior: SplitBehavior) -> Result<Self> {
        let compiled = match &source {
            PatternSource::Regex(p) => compile(p)?,
            PatternSource::Literal(s) => compile(&fancy_regex::escape(s))?,
        };
        Ok(SplitRule {
            source,
            behavior,
            regex: compiled,
        })
    }

    /// Calls `each` with every piece of `text` in order; pieces are never empty.
    fn for_each(&self, text: &str, each: &mut dyn FnMut(&str) -> Result<()>) -> Result<()> {
        let isolated = self.behavior == SplitBehavior::Isolated;
        for_each_split(&self.regex, &self.source, isolated, text, each)
    }
}

/// One pre-tokenizer stage, in the order `tokenizer.json` lists them.
#[derive(Clone, Debug)]
pub enum Step {
    Split(SplitRule),
    /// Prepends a space to a piece that lacks one (if asked), splits it with the GPT-2 pattern
    /// (if asked); the byte-level mapping itself happens in the BPE model.
    ByteLevel {
        add_prefix_space: bool,
        use_regex: bool,
    },
}

#[derive(Clone, Debug)]
pub struct PreTokenizer {
    pub steps: Vec<Step>,
    gpt2: Regex,
}

impl PreTokenizer {
    /// A byte-level pre-tokenizer: any `Split` stages, then exactly one `ByteLevel` stage last
    /// (the stage after which pieces are bytes, so nothing may split them further).
    pub fn new(steps: Vec<Step>) -> Result<Self> {
        let byte_level_at = steps
            .iter()
            .position(|s| matches!(s, Step::ByteLevel { .. }));
        match byte_level_at {
            Some(i) if i + 1 == steps.len() => {}
            Some(_) => {
                return Err(Error::invalid(
                    "tokenizer",
                    "pre_tokenizer: a ByteLevel stage must come last in the Sequence",
                ))
            }
            None => {
                return Err(Error::invalid(
                    "tokenizer",
                    "pre_tokenizer: a byte-level BPE needs a ByteLevel stage",
                ))
            }
        }
        Ok(PreTokenizer {
            steps,
            gpt2: compile(GPT2_PATTERN)?,
        })
    }

    /// Cuts `text` into pieces, calling `each` with every piece in order. Stages nest (each
    /// piece of one stage is cut by the next), so nothing is copied except a piece that gets
    /// a prefix space.
    pub fn for_each_piece(
        &self,
        text: &str,
        each: &mut dyn FnMut(&str) -> Result<()>,
    ) -> Result<()> {
        self.run(0, text, each)
    }

    /// The pieces of `text` as owned strings (for tests and inspection).
    pub fn pieces(&self, text: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        self.for_each_piece(text, &mut |p| {
            out.push(p.to_string());
            Ok(())
        })?;
        Ok(out)
    }

    fn run(&self, step: usize, text: &str, each: &mut dyn FnMut(&str) -> Result<()>) -> Result<()> {
        let Some(stage) = self.steps.get(step) else {
            return each(text);
        };
        match stage {
            Step::Split(rule) => rule.for_each(text, &mut |p| self.run(step + 1, p, each)),
            Step::ByteLevel {
                add_prefix_space,
                use_regex,
            } => {
                let prefixed: Cow<str> = if *add_prefix_space && !text.starts_with(' ') {
                    Cow::Owned(format!(" {text}"))
                } else {
                    Cow::Borrowed(text)
                };
                if *use_regex {
                    let source = PatternSource::Regex(GPT2_PATTERN.into());
                    for_each_split(&self.gpt2, &source, true, &prefixed, &mut |p| {
                        self.run(step + 1, p, each)
                    })
                } else {
                    self.run(step + 1, &prefixed, each)
                }
            }
        }
    }
}

/// Calls `each` with the gaps between matches and, if `isolated`, the matches themselves.
fn for_each_split(
    re: &Regex,
    source: &PatternSource,
    isolated: bool,
    text: &str,
    each: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<()> {
    let mut last = 0;
    for m in re.find_iter(text) {
        let m = m.map_err(|e| regex_failure(source, e))?;
        if m.start() > last {
            each(&text[last..m.start()])?;
        }
        if isolated && m.end() > m.start() {
            each(m.as_str())?;
        }
        last = m.end();
    }
    if last < text.len() {
        each(&text[last..])?;
    }
    Ok(())
}

fn compile(pattern: &str) -> Result<Regex> {
    Regex::new(pattern).map_err(|e| {
        Error::invalid(
            "tokenizer",
            format!("pre_tokenizer: cannot compile split pattern {pattern:?}: {e}"),
        )
    })
}

fn regex_failure(source: &PatternSource, e: fancy_regex::Error) -> Error {
    let p = match source {
        PatternSource::Regex(p) | PatternSource::Literal(p) => p,
    };
    Error::invalid(
        "encode",
        format!("split pattern {p:?} failed on this text: {e}"),
    )
}
