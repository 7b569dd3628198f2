//! Generated text cut at stop strings, as it streams: a piece is handed out only once no stop
//! string can begin inside it, so a caller that prints the pieces never shows a stop string
//! or a part of one. The stop string itself is left out of the text, as OpenAI's `stop` does.

use super::StreamDecoder;
use crate::text::Tokenizer;
use crate::{Error, Result};

pub struct StopStrings {
    decoder: StreamDecoder,
    stops: Vec<String>,
    /// The text so far; `text[..shown]` has been handed out.
    text: String,
    shown: usize,
    stopped: bool,
}

/// What one token added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopPiece {
    /// Text now safe to show (possibly empty).
    pub text: String,
    /// A stop string is complete: the text ends before it, and generation should end.
    pub stop: bool,
}

impl StopStrings {
    pub fn new(tokenizer: Tokenizer, skip_special: bool, stops: Vec<String>) -> Result<Self> {
        if stops.iter().any(String::is_empty) {
            return Err(Error::invalid("stop strings", "a stop string is empty"));
        }
        Ok(StopStrings {
            decoder: StreamDecoder::new(tokenizer, skip_special),
            stops,
            text: String::new(),
            shown: 0,
            stopped: false,
        })
    }

    /// Feeds one generated id.
    pub fn push(&mut self, id: u32) -> Result<StopPiece> {
        if self.stopped {
            return Ok(StopPiece {
                text: String::new(),
                stop: true,
            });
        }
        let piece = self.decoder.push(id)?;
        Ok(self.add(&piece))
    }

    /// The text held back at the end of generation (no stop string came).
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        if !self.stopped {
            let rest = self.decoder.finish();
            let piece = self.add(&rest);
            out = piece.text;
            if piece.stop {
                return out;
            }
        }
        out.push_str(&self.text[self.shown..]);
        self.shown = self.text.len();
        out
    }

    /// All the text so far, cut before a stop string.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn add(&mut self, piece: &str) -> StopPiece {
        self.text.push_str(piece);
        // A stop string can only begin in the part not handed out (what could begin one was
        // held back).
        let unshown = &self.text[self.shown..];
        let first = self
            .stops
            .iter()
            .filter_map(|s| unshown.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let end = self.shown + at;
            let text = self.text[self.shown..end].to_string();
            self.text.truncate(end);
            self.shown = end;
            self.stopped = true;
            return StopPiece { text, stop: true };
        }
        // Hold back the longest tail that begins a stop string.
        let held = self
            .stops
            .iter()
            .map(|s| longest_tail_starting(unshown, s))
            .max()
            .unwrap_or(0);
        let end = self.text.len() - held;
        let text = self.text[self.shown..end].to_string();
        self.shown = end;
        StopPiece { text, stop: false }
    }
}

/// The length of the longest tail of `text` that is a proper prefix of `stop`.
fn longest_tail_starting(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n)
                && stop.is_char_boundary(n)
                && stop.as_bytes()[..n] == text.as_bytes()[text.len() - n..]
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{train_bpe, TrainOptions};

    fn tokenizer() -> Tokenizer {
        let text = "User: hello there. Assistant: hi! User: ça va? Assistant: très bien.\n\n";
        let opts = TrainOptions {
            vocab_size: 300,
            ..TrainOptions::default()
        };
        train_bpe([text.repeat(4)], &opts).unwrap()
    }

    /// Streams `text`'s ids through `StopStrings`: the pieces and whether a stop came.
    fn stream(text: &str, stops: &[&str]) -> (Vec<String>, bool, String) {
        let tok = tokenizer();
        let ids = tok.encode(text).unwrap();
        let stops = stops.iter().map(|s| s.to_string()).collect();
        let mut s = StopStrings::new(tok, true, stops).unwrap();
        let mut pieces = Vec::new();
        for id in ids {
            let p = s.push(id).unwrap();
            pieces.push(p.text);
            if p.stop {
                return (pieces, true, s.text().to_string());
            }
        }
        pieces.push(s.finish());
        (pieces, false, s.text().to_string())
    }

    #[test]
    fn the_text_ends_before_the_first_stop_string() {
        let (pieces, stopped, text) = stream(
            "hello there. User: hi! Assistant: no",
            &["Assistant:", "User:"],
        );
        assert!(stopped);
        assert_eq!(text, "hello there. ");
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn a_piece_that_may_begin_a_stop_string_is_held_back_until_it_does_not() {
        let (pieces, stopped, text) = stream("ça va? Us very bien", &["User:"]);
        assert!(!stopped);
        assert_eq!(text, "ça va? Us very bien");
        assert_eq!(pieces.concat(), text);
        // "Us" waited for what came after it.
        let shown: Vec<&String> = pieces.iter().filter(|p| !p.is_empty()).collect();
        assert!(shown.iter().all(|p| !p.ends_with("Us")), "{pieces:?}");
    }

    #[test]
    fn stop_strings_with_characters_of_several_bytes_match() {
        let (_, stopped, text) = stream("hi! très bien. hello", &["ès b"]);
        assert!(stopped);
        assert_eq!(text, "hi! tr");
    }

    #[test]
    fn an_empty_stop_string_is_refused() {
        let err = StopStrings::new(tokenizer(), true, vec![String::new()])
            .err()
            .unwrap();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
