//! Writing token files from text without holding the corpus in memory: documents are read in
//! bounded groups, encoded in parallel (each document is independent), and appended in order.
//! A text file is one document (read in chunks that tokenize exactly like the whole file); a
//! JSONL file holds one document per line, in a string field. An end-of-text id, if given,
//! follows every document. The output appears atomically when everything is written.

use super::{TokenFile, HEADER_BYTES, MAGIC, VERSION};
use crate::io::temp_file::TempFile;
use crate::text::Tokenizer;
use crate::{Error, Result};
use rayon::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How much text is read before a group is encoded; bounds memory while writing.
const GROUP_BYTES: usize = 8 << 20;

#[derive(Clone, Debug)]
pub struct TokenFileOptions {
    /// Appended after every document (usually the tokenizer's `<|endoftext|>`).
    pub eos: Option<u32>,
    /// The JSONL field that holds a document's text.
    pub jsonl_field: String,
    /// A text file is encoded in chunks of at least this many bytes (in parallel), where its
    /// tokenizer allows a cut (`text::chunks`).
    pub chunk_bytes: usize,
}

impl Default for TokenFileOptions {
    fn default() -> Self {
        TokenFileOptions {
            eos: None,
            jsonl_field: "text".into(),
            chunk_bytes: crate::text::chunks::CHUNK_BYTES,
        }
    }
}

/// Appends ids to a new token file; `finish` writes the header and moves it into place.
/// Dropped unfinished, it removes its temporary file (`TempFile`; fields drop in order, so the
/// file is closed first).
pub struct TokenWriter {
    out: BufWriter<File>,
    tmp: TempFile,
    path: PathBuf,
    count: u64,
    vocab_size: u32,
}

impl TokenWriter {
    pub fn create(path: impl AsRef<Path>, vocab_size: usize) -> Result<TokenWriter> {
        let path = path.as_ref().to_path_buf();
        let vocab_size = u32::try_from(vocab_size)
            .ok()
            .filter(|&v| v > 0 && v as usize <= super::MAX_VOCAB)
            .ok_or_else(|| {
                Error::invalid(
                    "token file",
                    format!(
                        "vocab size {vocab_size} must be between 1 and {}",
                        super::MAX_VOCAB
                    ),
                )
            })?;
        crate::io::temp_file::create_parent(&path)?;
        let tmp = TempFile::beside(&path);
        let file = File::create(tmp.path()).map_err(|e| Error::io(tmp.path(), e))?;
        let mut writer = TokenWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            tmp,
            path,
            count: 0,
            vocab_size,
        };
        // A placeholder; `finish` writes the real header once the count is known.
        writer.write_bytes(&[0u8; HEADER_BYTES as usize])?;
        Ok(writer)
    }

    pub fn push(&mut self, ids: &[u32]) -> Result<()> {
        if let Some(&bad) = ids.iter().find(|&&id| id >= self.vocab_size) {
            crate::bail!(
                "token file",
                "id {bad} is not below the vocab size {}",
                self.vocab_size
            );
        }
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for id in ids {
            bytes.extend_from_slice(&id.to_le_bytes());
        }
        self.write_bytes(&bytes)?;
        self.count += ids.len() as u64;
        Ok(())
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn finish(mut self) -> Result<TokenFile> {
        let mut header = Vec::with_capacity(HEADER_BYTES as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&self.vocab_size.to_le_bytes());
        header.extend_from_slice(&self.count.to_le_bytes());
        header.extend_from_slice(&[0u8; 8]);
        let io = |e| Error::io(self.tmp.path(), e);
        self.out.seek(SeekFrom::Start(0)).map_err(io)?;
        self.out.write_all(&header).map_err(io)?;
        self.out.flush().map_err(io)?;
        self.out.get_ref().sync_all().map_err(io)?;
        // The file is closed before the temp is renamed into place.
        let TokenWriter { out, tmp, path, .. } = self;
        drop(out);
        tmp.persist(&path)?;
        TokenFile::open(&path)
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(self.tmp.path(), e))
    }
}

impl TokenFile {
    /// Writes `ids` as a token file.
    pub fn write_ids(path: impl AsRef<Path>, ids: &[u32], vocab_size: usize) -> Result<TokenFile> {
        let mut w = TokenWriter::create(path, vocab_size)?;
        w.push(ids)?;
        w.finish()
    }

    /// Encodes text files (each one document) into a token file.
    pub fn write_from_texts(
        tok: &Tokenizer,
        paths: &[PathBuf],
        out: impl AsRef<Path>,
        options: &TokenFileOptions,
    ) -> Result<TokenFile> {
        Job::run(tok, paths, out.as_ref(), options, Job::text_file)
    }

    /// Encodes JSONL files (one document per line, in `options.jsonl_field`).
    pub fn write_from_jsonl(
        tok: &Tokenizer,
        paths: &[PathBuf],
        out: impl AsRef<Path>,
        options: &TokenFileOptions,
    ) -> Result<TokenFile> {
        Job::run(tok, paths, out.as_ref(), options, Job::jsonl_file)
    }

    /// Encodes files of either kind: `.jsonl` and `.ndjson` as JSONL, anything else as text.
    pub fn write_from_files(
        tok: &Tokenizer,
        paths: &[PathBuf],
        out: impl AsRef<Path>,
        options: &TokenFileOptions,
    ) -> Result<TokenFile> {
        Job::run(tok, paths, out.as_ref(), options, |job, p| {
            if crate::text::jsonl::is_jsonl(p) {
                job.jsonl_file(p)
            } else {
                job.text_file(p)
            }
        })
    }
}

/// A write in progress: text read but not yet encoded, grouped for parallel encoding.
/// Text to encode: a document, or a chunk of one.
struct Piece {
    text: String,
    /// The piece continues the one before it (a later chunk of a text file).
    continued: bool,
    /// A document ends after it.
    ends_document: bool,
}

struct Job<'a> {
    tok: &'a Tokenizer,
    options: &'a TokenFileOptions,
    writer: TokenWriter,
    /// The bytes a text file is read in at a time: the options' chunk size where the tokenizer
    /// provably restarts at a line (`chunks::restarts_at_lines`, decided once per job: it reads
    /// the whole vocabulary), else the whole file.
    chunk_bytes: usize,
    /// Pieces of text in order.
    pending: Vec<Piece>,
    pending_bytes: usize,
}

impl<'a> Job<'a> {
    /// Reads every path with `read` into one token file at `out`.
    fn run(
        tok: &'a Tokenizer,
        paths: &[PathBuf],
        out: &Path,
        options: &'a TokenFileOptions,
        mut read: impl FnMut(&mut Self, &Path) -> Result<()>,
    ) -> Result<TokenFile> {
        let mut job = Job::new(tok, out, options)?;
        for p in paths {
            read(&mut job, p)?;
        }
        job.finish()
    }

    fn new(tok: &'a Tokenizer, out: &Path, options: &'a TokenFileOptions) -> Result<Self> {
        if let Some(eos) = options.eos {
            if eos as usize >= tok.vocab_size() {
                crate::bail!(
                    "token file",
                    "eos id {eos} is not below the tokenizer's vocab size {}",
                    tok.vocab_size()
                );
            }
        }
        let chunk_bytes = match crate::text::chunks::restarts_at_lines(tok) {
            true => options.chunk_bytes,
            false => usize::MAX,
        };
        Ok(Job {
            tok,
            options,
            writer: TokenWriter::create(out, tok.vocab_size())?,
            chunk_bytes,
            pending: Vec::new(),
            pending_bytes: 0,
        })
    }

    fn add(&mut self, text: String, continued: bool, ends_document: bool) -> Result<()> {
        self.pending_bytes += text.len();
        self.pending.push(Piece {
            text,
            continued,
            ends_document,
        });
        if self.pending_bytes >= GROUP_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        crate::cancel::check()?;
        let encoded: Vec<Result<Vec<u32>>> = self
            .pending
            .par_iter()
            .map(|p| match p.continued {
                true => self.tok.encode_continued(&p.text),
                false => self.tok.encode(&p.text),
            })
            .collect();
        for (ids, piece) in encoded.into_iter().zip(&self.pending) {
            self.writer.push(&ids?)?;
            if let (true, Some(eos)) = (piece.ends_document, self.options.eos) {
                self.writer.push(&[eos])?;
            }
        }
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }

    fn text_file(&mut self, path: &Path) -> Result<()> {
        let chunk_bytes = self.chunk_bytes;
        let mut chunks: Vec<String> = Vec::new();
        let mut handed_on = 0usize;
        crate::text::chunks::for_each_chunk(path, chunk_bytes, |c| {
            chunks.push(c.to_string());
            // Chunks of a big file are handed on as they come, to keep memory bounded; the
            // last stays behind, to end the document.
            if chunks.iter().map(String::len).sum::<usize>() >= GROUP_BYTES {
                let last = chunks.pop();
                for c in chunks.drain(..) {
                    self.add(c, handed_on > 0, false)?;
                    handed_on += 1;
                }
                chunks.extend(last);
            }
            Ok(())
        })?;
        let last = chunks.len();
        for (i, c) in chunks.into_iter().enumerate() {
            self.add(c, handed_on + i > 0, i + 1 == last)?;
        }
        // An empty file is still a document and gets its end-of-text id.
        if handed_on + last == 0 {
            self.add(String::new(), false, true)?;
        }
        Ok(())
    }

    fn jsonl_file(&mut self, path: &Path) -> Result<()> {
        let field = self.options.jsonl_field.clone();
        crate::text::jsonl::for_each_document(path, &field, |doc| self.add(doc, false, true))
    }

    fn finish(mut self) -> Result<TokenFile> {
        self.flush()?;
        self.writer.finish()
    }
}
