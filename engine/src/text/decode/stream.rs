//! Streaming decode: turns ids into text as they arrive, so a generation loop can print each
//! token at once. It keeps a short window of recent ids and the text they decode to; a new id
//! yields whatever the window's text grew by, and nothing while that text ends in U+FFFD (a
//! character cut between tokens, waiting for its other bytes). Decoding the window as a whole,
//! rather than each id alone, keeps the decoder's context rules right: the leading space that
//! `Strip` or `Metaspace` drop only at the start, and byte-fallback runs. This is the scheme
//! of `tokenizers`' `DecodeStream`, so the pieces join to what `decode` gives.

use crate::text::Tokenizer;
use crate::{Error, Result};

pub struct StreamDecoder {
    tokenizer: Tokenizer,
    skip_special: bool,
    /// The ids since the text before the last piece handed out, then those not yet handed out.
    window: Vec<u32>,
    /// The text of `window[..covered]`, a prefix of the text of the whole window.
    prefix: String,
    covered: usize,
}

impl StreamDecoder {
    pub fn new(tokenizer: Tokenizer, skip_special: bool) -> Self {
        StreamDecoder {
            tokenizer,
            skip_special,
            window: Vec::new(),
            prefix: String::new(),
            covered: 0,
        }
    }

    /// The new text that `id` completes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.window.push(id);
        let text = self.tokenizer.decode(&self.window, self.skip_special)?;
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        let new = self.new_text(&text)?;
        // The ids before the last handed-out piece no longer affect what follows.
        self.window.drain(..self.covered);
        self.prefix = self.tokenizer.decode(&self.window, self.skip_special)?;
        self.covered = self.window.len();
        Ok(new)
    }

    /// Whatever is still held back, with an incomplete character as U+FFFD; the stream
    /// starts afresh after it.
    pub fn finish(&mut self) -> String {
        let text = self
            .tokenizer
            .decode(&self.window, self.skip_special)
            .unwrap_or_default();
        let rest = self.new_text(&text).unwrap_or_default();
        self.window.clear();
        self.prefix.clear();
        self.covered = 0;
        rest
    }

    fn new_text(&self, text: &str) -> Result<String> {
        match text.strip_prefix(self.prefix.as_str()) {
            Some(new) => Ok(new.to_string()),
            None => Err(Error::invalid(
                "decode",
                format!(
                    "streaming decode: the text so far {:?} changed to {text:?} when a token was added; this decoder rewrites earlier text",
                    self.prefix
                ),
            )),
        }
    }
}
