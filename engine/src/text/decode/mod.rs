//! Decoders: how token strings become text, as `tokenizer.json`'s `decoder` describes it. Each
//! stage maps the list of token strings to a new list, and the result is their concatenation,
//! exactly as in `tokenizers`: byte-level files map GPT-2's alphabet back to bytes
//! (`ByteLevel`); SentencePiece-style files turn "▁" into spaces (`Replace` or `Metaspace`),
//! `<0xNN>` tokens into the characters their bytes spell (`ByteFallback`), join (`Fuse`) and
//! drop the leading space the encoder added (`Strip`); WordPiece files join "##" pieces
//! (`WordPiece`), CLIP-style files end words at "</w>" (`BpeSuffix`), and speech models
//! collapse CTC repeats (`Ctc`).
//!
//! `stream` turns ids into text one at a time for generation; `stop` cuts that text at stop
//! strings.

mod stop;
mod stream;

pub use stop::{StopPiece, StopStrings};
pub use stream::StreamDecoder;

use super::byte_level;
use super::pattern::Pattern;
use super::pretokenize::PrependScheme;
use std::borrow::Cow;

/// One decoder stage.
#[derive(Clone, Debug)]
pub enum DecodeStep {
    /// All tokens become one string: each token's characters mapped back to bytes (or the
    /// token's own UTF-8 if a character is outside the alphabet), then read as UTF-8 with
    /// invalid bytes as U+FFFD.
    ByteLevel,
    /// Every match of the pattern in each token is replaced with the content.
    Replace { pattern: Pattern, content: String },
    /// Runs of `<0xNN>` tokens become the text their bytes spell, or one U+FFFD per byte if
    /// that is not valid UTF-8.
    ByteFallback,
    /// All tokens become one string.
    Fuse,
    /// Up to `start` leading and `stop` trailing `content` characters are removed from each
    /// token.
    Strip {
        content: char,
        start: usize,
        stop: usize,
    },
    /// "▁" becomes a space, except in the first token (unless the scheme is `never`), where it
    /// is dropped: the encoder put it there.
    Metaspace {
        replacement: char,
        prepend_scheme: PrependScheme,
        /// Read and written back only; decoding does not depend on it.
        split: bool,
    },
    /// `WordPiece`: a token after the first joins the one before it if it starts with the
    /// prefix (which is dropped), else gets a space; `cleanup` tidies spaces before
    /// punctuation and contractions.
    WordPiece { prefix: String, cleanup: bool },
    /// `BPEDecoder`: the end-of-word suffix becomes a space (nothing in the last token).
    BpeSuffix { suffix: String },
    /// `CTC`: repeated tokens collapse to one, the pad token goes, and with `cleanup` the
    /// word delimiter becomes a space.
    Ctc {
        pad_token: String,
        word_delimiter_token: String,
        cleanup: bool,
    },
}

/// The decoder: `None` when the file has none (tokens are then joined with spaces, as in
/// `tokenizers`).
#[derive(Clone, Debug)]
pub struct Decoder {
    pub steps: Option<Vec<DecodeStep>>,
}

impl Decoder {
    pub fn byte_level() -> Self {
        Decoder {
            steps: Some(vec![DecodeStep::ByteLevel]),
        }
    }

    /// The text of `tokens` (token strings as the vocabulary spells them).
    pub fn decode(&self, tokens: Vec<Cow<'_, str>>) -> crate::Result<String> {
        let Some(steps) = &self.steps else {
            return Ok(tokens.join(" "));
        };
        let mut tokens = tokens;
        for step in steps {
            tokens = step.apply(tokens)?;
        }
        Ok(tokens.concat())
    }
}

impl DecodeStep {
    fn apply<'a>(&self, tokens: Vec<Cow<'a, str>>) -> crate::Result<Vec<Cow<'a, str>>> {
        Ok(match self {
            DecodeStep::ByteLevel => vec![Cow::Owned(byte_level_text(&tokens))],
            DecodeStep::Replace { pattern, content } => {
                let mut out = Vec::with_capacity(tokens.len());
                for t in tokens {
                    out.push(match pattern.replace_all(&t, content)? {
                        Cow::Owned(changed) => Cow::Owned(changed),
                        Cow::Borrowed(_) => t,
                    });
                }
                out
            }
            DecodeStep::ByteFallback => byte_fallback(tokens),
            DecodeStep::Fuse => vec![Cow::Owned(tokens.concat())],
            DecodeStep::Strip {
                content,
                start,
                stop,
            } => tokens
                .into_iter()
                .map(|t| strip(t, *content, *start, *stop))
                .collect(),
            DecodeStep::Metaspace {
                replacement,
                prepend_scheme,
                ..
            } => tokens
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    if !t.contains(*replacement) {
                        return t;
                    }
                    let drop = i == 0 && *prepend_scheme != PrependScheme::Never;
                    Cow::Owned(
                        t.chars()
                            .filter_map(|c| match c == *replacement {
                                true if drop => None,
                                true => Some(' '),
                                false => Some(c),
                            })
                            .collect(),
                    )
                })
                .collect(),
            DecodeStep::WordPiece { prefix, cleanup } => tokens
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    let joined = if i == 0 {
                        t
                    } else if let Some(rest) = t.strip_prefix(prefix.as_str()) {
                        Cow::Owned(rest.to_string())
                    } else {
                        Cow::Owned(format!(" {t}"))
                    };
                    if *cleanup {
                        Cow::Owned(cleanup_spaces(&joined))
                    } else {
                        joined
                    }
                })
                .collect(),
            DecodeStep::BpeSuffix { suffix } => {
                let last = tokens.len().saturating_sub(1);
                tokens
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let with = if i == last { "" } else { " " };
                        Cow::Owned(t.replace(suffix.as_str(), with))
                    })
                    .collect()
            }
            DecodeStep::Ctc {
                pad_token,
                word_delimiter_token,
                cleanup,
            } => {
                let mut out: Vec<Cow<'a, str>> = Vec::with_capacity(tokens.len());
                let mut previous: Option<Cow<'a, str>> = None;
                for t in tokens {
                    if previous.as_ref() == Some(&t) {
                        continue;
                    }
                    previous = Some(t.clone());
                    let mut text = t.replace(pad_token.as_str(), "");
                    if *cleanup {
                        text = cleanup_spaces(&text).replace(word_delimiter_token.as_str(), " ");
                    }
                    if !text.is_empty() {
                        out.push(Cow::Owned(text));
                    }
                }
                out
            }
        })
    }
}

/// The WordPiece decoder's cleanup: no space before `.`, `?`, `!`, `,` and contractions.
fn cleanup_spaces(text: &str) -> String {
    text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" do not", " don't")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
}

fn byte_level_text(tokens: &[Cow<'_, str>]) -> String {
    let mut bytes = Vec::new();
    for t in tokens {
        match byte_level::decode_chars(t) {
            Some(b) => bytes.extend(b),
            None => bytes.extend_from_slice(t.as_bytes()),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The byte of a `<0xNN>` token (any case of hex digits, as `tokenizers` accepts).
fn fallback_byte(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if token.len() != 6 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

fn byte_fallback(tokens: Vec<Cow<'_, str>>) -> Vec<Cow<'_, str>> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut bytes = Vec::new();
    let flush = |bytes: &mut Vec<u8>, out: &mut Vec<Cow<'_, str>>| {
        if bytes.is_empty() {
            return;
        }
        match String::from_utf8(std::mem::take(bytes)) {
            Ok(text) => out.push(Cow::Owned(text)),
            Err(e) => {
                let n = e.as_bytes().len();
                out.extend(std::iter::repeat_n(Cow::Borrowed("\u{FFFD}"), n));
            }
        }
    };
    for t in tokens {
        match fallback_byte(&t) {
            Some(b) => bytes.push(b),
            None => {
                flush(&mut bytes, &mut out);
                out.push(t);
            }
        }
    }
    flush(&mut bytes, &mut out);
    out
}

fn strip(token: Cow<'_, str>, content: char, start: usize, stop: usize) -> Cow<'_, str> {
    let chars: Vec<char> = token.chars().collect();
    let lead = chars
        .iter()
        .take(start)
        .take_while(|&&c| c == content)
        .count();
    let trail = chars[lead..]
        .iter()
        .rev()
        .take(stop)
        .take_while(|&&c| c == content)
        .count();
    if lead == 0 && trail == 0 {
        return token;
    }
    Cow::Owned(chars[lead..chars.len() - trail].iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(steps: Vec<DecodeStep>, tokens: &[&str]) -> String {
        let tokens = tokens.iter().map(|t| Cow::Borrowed(*t)).collect();
        Decoder { steps: Some(steps) }.decode(tokens).unwrap()
    }

    fn llama2() -> Vec<DecodeStep> {
        use crate::text::pattern::PatternSource;
        vec![
            DecodeStep::Replace {
                pattern: Pattern::new(PatternSource::Literal("▁".into())).unwrap(),
                content: " ".into(),
            },
            DecodeStep::ByteFallback,
            DecodeStep::Fuse,
            DecodeStep::Strip {
                content: ' ',
                start: 1,
                stop: 0,
            },
        ]
    }

    #[test]
    fn byte_fallback_tokens_spell_their_utf8_character() {
        let steps = vec![DecodeStep::ByteFallback, DecodeStep::Fuse];
        assert_eq!(
            run(steps.clone(), &["a", "<0xE2>", "<0x96>", "<0x81>", "b"]),
            "a▁b"
        );
        // Bytes that are not UTF-8 give one U+FFFD each.
        assert_eq!(
            run(steps.clone(), &["<0xE2>", "<0x96>", "x"]),
            "\u{FFFD}\u{FFFD}x"
        );
        assert_eq!(run(steps, &["<0x4>", "<0x41"]), "<0x4><0x41");
    }

    #[test]
    fn llama2_decoder_turns_markers_into_spaces_and_strips_the_first() {
        assert_eq!(
            run(llama2(), &["▁Hello", "▁world", "<0x21>"]),
            "Hello world!"
        );
        assert_eq!(run(llama2(), &["▁▁x"]), " x");
        // Strip comes after Fuse: only the text's first space goes.
        assert_eq!(run(llama2(), &["<s>", "▁Hi"]), "<s> Hi");
    }

    #[test]
    fn strip_removes_at_most_the_counts_asked() {
        let strip = |start, stop| DecodeStep::Strip {
            content: ' ',
            start,
            stop,
        };
        assert_eq!(run(vec![strip(1, 0)], &["  a  "]), " a  ");
        assert_eq!(run(vec![strip(5, 5)], &["  a  "]), "a");
        assert_eq!(run(vec![strip(9, 9)], &["   "]), "");
    }

    #[test]
    fn wordpiece_joins_prefixed_pieces_and_cleans_up_punctuation() {
        let wp = |cleanup| {
            vec![DecodeStep::WordPiece {
                prefix: "##".into(),
                cleanup,
            }]
        };
        let tokens = ["##un", "##believ", "##able", "!", "it", "'s"];
        assert_eq!(run(wp(true), &tokens), "##unbelievable! it's");
        assert_eq!(run(wp(false), &tokens), "##unbelievable ! it 's");
    }

    #[test]
    fn bpe_suffix_ends_words_except_at_the_end() {
        let d = vec![DecodeStep::BpeSuffix {
            suffix: "</w>".into(),
        }];
        assert_eq!(run(d, &["hel", "lo</w>", "you</w>"]), "hello you");
    }

    #[test]
    fn ctc_collapses_repeats_and_drops_padding() {
        let ctc = |cleanup| {
            vec![DecodeStep::Ctc {
                pad_token: "<pad>".into(),
                word_delimiter_token: "|".into(),
                cleanup,
            }]
        };
        let tokens = ["h", "h", "<pad>", "i", "|", "|", "y", "<pad>", "o", "o"];
        assert_eq!(run(ctc(true), &tokens), "hi yo");
        assert_eq!(run(ctc(false), &tokens), "hi|yo");
    }

    #[test]
    fn metaspace_decoder_drops_markers_of_the_first_token_only() {
        let metaspace = |prepend_scheme| DecodeStep::Metaspace {
            replacement: '▁',
            prepend_scheme,
            split: true,
        };
        assert_eq!(
            run(vec![metaspace(PrependScheme::Always)], &["▁Hi▁x", "▁you"]),
            "Hix you"
        );
        assert_eq!(
            run(vec![metaspace(PrependScheme::Never)], &["▁Hi", "▁you"]),
            " Hi you"
        );
    }
}
