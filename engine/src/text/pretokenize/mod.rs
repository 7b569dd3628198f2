//! Pre-tokenization: cutting text into the pieces that BPE merges inside of, as Hugging Face's
//! pre-tokenizers do: `Split`, `Digits`, `Punctuation` and the whitespace splits (in
//! `split`), `Metaspace` (in `metaspace`), `BertPreTokenizer` and `ByteLevel` (here), in the
//! order a `Sequence` lists them.

mod metaspace;
mod split;

pub use metaspace::{Metaspace, PrependScheme};
pub use split::{SplitBehavior, SplitRule};

use crate::text::pattern::PatternSource;
use crate::{Error, Result};
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

/// Where a text handed to the pre-tokenizer starts, for the stages that mark a start
/// (Metaspace's prepended marker, ByteLevel's prefix space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The input's first character.
    Input,
    /// A later run or piece (after an added token, or where a stage cut).
    Piece,
    /// Text that continues what an earlier call encoded (the next chunk of one document):
    /// nothing is marked at its start, as nothing would be in the whole text.
    Continued,
}

/// One pre-tokenizer stage, in the order `tokenizer.json` lists them.
#[derive(Clone, Debug)]
pub enum Step {
    Split(SplitRule),
    /// Numeric characters each alone (`individual_digits`) or in runs.
    Digits {
        individual: bool,
    },
    Metaspace(Metaspace),
    /// `Whitespace`: runs of word characters (`\w+`) and runs of other non-space characters,
    /// whitespace dropped.
    Whitespace,
    /// `WhitespaceSplit`: cut at whitespace, which is dropped.
    WhitespaceSplit,
    /// `Punctuation`: each punctuation character a match, placed by the behaviour.
    Punctuation(SplitBehavior),
    /// `BertPreTokenizer`: `WhitespaceSplit`, then each punctuation character alone.
    Bert,
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
    gpt2: SplitRule,
    words: SplitRule,
}

impl PreTokenizer {
    /// The stages in order. A `ByteLevel` stage, if any, must be the last: after it the pieces
    /// are bytes for the byte-level model, so nothing may cut them further.
    pub fn new(steps: Vec<Step>) -> Result<Self> {
        let byte_level_at = steps
            .iter()
            .position(|s| matches!(s, Step::ByteLevel { .. }));
        if byte_level_at.is_some_and(|i| i + 1 != steps.len()) {
            return Err(Error::invalid(
                "tokenizer",
                "pre_tokenizer: a ByteLevel stage must come last in the Sequence",
            ));
        }
        Ok(PreTokenizer {
            steps,
            gpt2: SplitRule::regex(GPT2_PATTERN, SplitBehavior::Isolated)?,
            words: SplitRule::new(
                PatternSource::Regex(r"\w+|[^\w\s]+".into()),
                SplitBehavior::Removed,
                true,
            )?,
        })
    }

    /// Whether the pieces go to a byte-level model (the last stage is `ByteLevel`).
    pub fn is_byte_level(&self) -> bool {
        matches!(self.steps.last(), Some(Step::ByteLevel { .. }))
    }

    /// Cuts `text` into pieces, calling `each` with every non-empty piece in order.
    /// `start`: where `text` begins (Metaspace's `first` scheme prepends only at the input's
    /// start). Stages nest (each piece of one stage is cut by the next), so nothing is copied
    /// except where a stage rewrites the text.
    pub fn for_each_piece(
        &self,
        text: &str,
        start: Start,
        each: &mut dyn FnMut(&str) -> Result<()>,
    ) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.run(0, text, start, each)
    }

    /// The pieces of `text`, taken as a whole input, as owned strings (for tests and
    /// inspection).
    pub fn pieces(&self, text: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        self.for_each_piece(text, Start::Input, &mut |p| {
            out.push(p.to_string());
            Ok(())
        })?;
        Ok(out)
    }

    fn run(
        &self,
        step: usize,
        text: &str,
        start: Start,
        each: &mut dyn FnMut(&str) -> Result<()>,
    ) -> Result<()> {
        let Some(stage) = self.steps.get(step) else {
            return each(text);
        };
        // A piece that begins its text starts where the text does; any other starts a piece.
        let mut next_on = |piece_of: &str, s: usize, e: usize| {
            let at = if s == 0 { start } else { Start::Piece };
            self.run(step + 1, &piece_of[s..e], at, each)
        };
        match stage {
            Step::Split(rule) => rule.for_each(text, &mut |s, e| next_on(text, s, e)),
            Step::Digits { individual } => {
                split::split_digits(text, *individual, &mut |s, e| next_on(text, s, e))
            }
            Step::Metaspace(m) => {
                let marked = m.mark(text, start);
                m.for_each(&marked, &mut |s, e| next_on(&marked, s, e))
            }
            Step::Whitespace => self.words.for_each(text, &mut |s, e| next_on(text, s, e)),
            Step::WhitespaceSplit => split::split_chars(
                text,
                SplitBehavior::Removed,
                char::is_whitespace,
                &mut |s, e| next_on(text, s, e),
            ),
            Step::Punctuation(behavior) => {
                split::split_chars(text, *behavior, split::is_punctuation, &mut |s, e| {
                    next_on(text, s, e)
                })
            }
            Step::Bert => split::split_chars(
                text,
                SplitBehavior::Removed,
                char::is_whitespace,
                &mut |s, e| {
                    let word = &text[s..e];
                    split::split_chars(
                        word,
                        SplitBehavior::Isolated,
                        split::is_punctuation,
                        &mut |ws, we| next_on(text, s + ws, s + we),
                    )
                },
            ),
            Step::ByteLevel {
                add_prefix_space,
                use_regex,
            } => {
                let prefixed: Cow<str> =
                    if *add_prefix_space && start != Start::Continued && !text.starts_with(' ') {
                        Cow::Owned(format!(" {text}"))
                    } else {
                        Cow::Borrowed(text)
                    };
                if *use_regex {
                    self.gpt2
                        .for_each(&prefixed, &mut |s, e| next_on(&prefixed, s, e))
                } else {
                    next_on(&prefixed, 0, prefixed.len())
                }
            }
        }
    }
}
