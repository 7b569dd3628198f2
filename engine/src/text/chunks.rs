//! Reading a text file in pieces without changing how it tokenizes. A file is cut only after a
//! line that ends in one newline preceded by a non-space character, and only when the next
//! line starts with a non-space character. Neither split pattern has a match that crosses
//! such a boundary, and the one lookahead (`\s+(?!\S)`) sees the same outcome on a lone
//! newline whether text or the end follows; so the chunks' pieces are exactly the whole
//! file's pieces. (An added token whose content contains a newline could still be cut.)

use crate::{Error, Result};
use std::io::BufRead;
use std::path::Path;

/// Chunks are cut once they hold at least this many bytes (and a safe boundary comes).
pub const CHUNK_BYTES: usize = 1 << 20;

/// Calls `each` with consecutive chunks of the file at `path` that together are its text.
pub fn for_each_chunk(
    path: &Path,
    min_bytes: usize,
    mut each: impl FnMut(&str) -> Result<()>,
) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut chunk = String::new();
    let mut line = String::new();
    let mut line_no = 0usize;
    loop {
        line.clear();
        line_no += 1;
        let n = reader.read_line(&mut line).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                Error::format(
                    "text",
                    format!("{}: line {line_no} is not valid UTF-8", path.display()),
                )
            } else {
                Error::io(path, e)
            }
        })?;
        if n == 0 {
            break;
        }
        if chunk.len() >= min_bytes && safe_boundary(&chunk, &line) {
            each(&chunk)?;
            chunk.clear();
        }
        chunk.push_str(&line);
    }
    if !chunk.is_empty() {
        each(&chunk)?;
    }
    Ok(())
}

fn safe_boundary(before: &str, after: &str) -> bool {
    let mut tail = before.chars().rev();
    let ends_cleanly = tail.next() == Some('\n') && tail.next().is_some_and(|c| !c.is_whitespace());
    let starts_cleanly = after.chars().next().is_some_and(|c| !c.is_whitespace());
    ends_cleanly && starts_cleanly
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::pretokenize::SplitPattern;

    #[test]
    fn chunked_pieces_equal_whole_file_pieces() {
        let text =
            "fn a() {\n    x\n}\n\nHello  world.\nNext line\r\nthird\n  indented\nend.\n\n\nlast";
        let path = std::env::temp_dir().join(format!("rb_chunks_{}.txt", std::process::id()));
        std::fs::write(&path, text).unwrap();
        for pattern in [SplitPattern::Gpt2, SplitPattern::Llama3] {
            let pre = pattern.pre_tokenizer().unwrap();
            let whole = pre.pieces(text).unwrap();
            let mut chunked = Vec::new();
            let mut count = 0;
            // A 1-byte minimum cuts at every safe boundary.
            for_each_chunk(&path, 1, |c| {
                count += 1;
                chunked.extend(pre.pieces(c).unwrap());
                Ok(())
            })
            .unwrap();
            assert!(count > 3, "expected several chunks, got {count}");
            assert_eq!(chunked, whole, "{pattern:?}");
        }
        std::fs::remove_file(&path).ok();
    }
}
