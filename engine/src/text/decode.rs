//! Streaming decode: turns ids into text as they arrive, holding back the bytes of a
//! character that is cut between tokens until the rest comes, so a generation loop can print
//! each token at once without broken characters.

use super::Tokenizer;
use crate::Result;

pub struct StreamDecoder {
    tokenizer: Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new(tokenizer: Tokenizer, skip_special: bool) -> Self {
        StreamDecoder {
            tokenizer,
            skip_special,
            pending: Vec::new(),
        }
    }

    /// The complete characters that `id` finishes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        if self.skip_special
            && self
                .tokenizer
                .added_tokens()
                .iter()
                .any(|t| t.id == id && t.special)
        {
            return Ok(String::new());
        }
        self.pending.extend(self.tokenizer.token_bytes(id)?);
        Ok(self.take_complete(false))
    }

    /// Whatever is still held back, with an incomplete character as U+FFFD.
    pub fn finish(&mut self) -> String {
        self.take_complete(true)
    }

    fn take_complete(&mut self, at_end: bool) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // Valid by construction: `valid_up_to` says so.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // Bytes that can never start a character: replace them and go on.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &after[bad..];
                        }
                        // A character cut short: wait for more, unless this is the end.
                        None if at_end => {
                            out.push('\u{FFFD}');
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }
}
