//! Reading a text file in pieces without changing how it tokenizes. A file is cut only after a
//! line that ends in one newline preceded by a non-space character, and only when the next
//! line starts with a non-space character. The pieces after the first are encoded as
//! continuations (`Tokenizer::encode_continued`: nothing marks their start, as nothing would
//! in the whole text), and a cut is made only for a tokenizer whose ids provably restart
//! there (`restarts_at_lines`): no token spans the newline, either because no token of the
//! vocabulary joins a newline to other text (so no merge or segmentation crosses it) or
//! because the pre-tokenizer's split cuts right after it (the GPT-2 and LLaMA-3 patterns: no
//! match crosses such a boundary, and the one lookahead, `\s+(?!\S)`, sees the same outcome on
//! a lone newline whether text or the end follows). Any other tokenizer reads the file whole.

use super::model::Model;
use super::normalize::NormalizeStep;
use super::pattern::PatternSource;
use super::pretokenize::{PrependScheme, Start, Step};
use super::Tokenizer;
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

/// Whether `tok` encodes a text cut at `for_each_chunk`'s boundaries, the first piece with
/// `encode` and the others with `encode_continued`, to exactly the ids of the whole text.
pub fn restarts_at_lines(tok: &Tokenizer) -> bool {
    let parts = tok.parts();
    // An added token or a replacement could match across the newline.
    // (one with `lstrip` takes the newline before it when it starts a line).
    let added_crosses = parts
        .added
        .tokens
        .iter()
        .any(|t| t.content.contains('\n') || t.lstrip);
    // Stripping sees where a text ends; a compiled character map replaces whole grapheme
    // clusters, and "\r\n" is one; NMT and BERT cleaning turn the newline into a space, which
    // the split patterns join to the next word.
    let replace_crosses = parts.normalizer.steps.iter().any(|s| match s {
        NormalizeStep::Replace { pattern, .. } => match &pattern.source {
            PatternSource::Regex(_) => true,
            PatternSource::Literal(l) => l.contains('\n'),
        },
        NormalizeStep::Strip { .. }
        | NormalizeStep::Precompiled(_)
        | NormalizeStep::Nmt
        | NormalizeStep::Bert(_) => true,
        _ => false,
    });
    // A stage that marks a piece's start, after one that may have cut at the newline in the
    // whole text: the continuation would lack the mark the whole text's piece gets.
    let mut cut_before = false;
    let mut marks_after_cut = false;
    for step in &parts.pre.steps {
        let marks = match step {
            Step::Metaspace(m) => m.prepend_scheme == PrependScheme::Always,
            Step::ByteLevel {
                add_prefix_space, ..
            } => *add_prefix_space,
            _ => false,
        };
        marks_after_cut |= marks && cut_before;
        cut_before |= !matches!(step, Step::Metaspace(m) if !m.split);
    }
    if added_crosses || replace_crosses || marks_after_cut {
        return false;
    }
    // A WordPiece word or a Unigram piece is cut as a whole (a WordPiece word with one
    // uncovered part is one unknown token; Unigram fuses adjacent unknowns), so for them only
    // a pre-tokenizer cut at the newline makes the pieces independent.
    let merges_locally = matches!(parts.model, Model::Bpe(_) | Model::Spm(_));
    (merges_locally && no_token_joins_a_newline(tok)) || splits_after_newlines(tok)
}

/// No token of the vocabulary holds a newline beside other text (byte-level spellings
/// write the newline `Ċ`).
fn no_token_joins_a_newline(tok: &Tokenizer) -> bool {
    let model = &tok.parts().model;
    let byte_level = tok.parts().pre.is_byte_level();
    let is_newline =
        |c: char| c == '\n' || (byte_level && c == super::byte_level::byte_to_char(b'\n'));
    (0..model.id_count() as u32).all(|id| {
        model
            .token(id)
            .is_none_or(|t| !(t.chars().any(is_newline) && t.chars().any(|c| !is_newline(c))))
    })
}

/// The pre-tokenizer cuts right after the newline of each probe (lines of different kinds of
/// characters, without spaces, so the pieces spell the text unchanged).
fn splits_after_newlines(tok: &Tokenizer) -> bool {
    [
        "end.\nNext",
        "a\nb",
        "x1\n2y",
        "\u{e9}\n\u{c9}",
        "}\nfn",
        ")\n(",
        "\u{4e2d}\n\u{6587}",
        // Punctuation before the newline and a slash after it: o200k-style splits
        // (` ?[^\s\p{L}\p{N}]+[\r\n/]*`) take `.\n/` as one piece.
        ".\n/x",
        ";\n//",
        "}\n/*",
    ]
    .iter()
    .all(|probe| {
        let cut = probe.find('\n').map(|i| i + 1);
        let mut at = 0;
        let mut found = false;
        let spelled = tok
            .parts()
            .pre
            .for_each_piece(probe, Start::Continued, &mut |piece| {
                at += piece.len();
                found |= Some(at) == cut;
                Ok(())
            });
        spelled.is_ok() && found && at == probe.len()
    })
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
