//! `TokenFile`: token ids on disk for language-model training, read window by window so a
//! corpus larger than memory works the same as a small one.
//!
//! Format (version 1, little-endian): a 32-byte header, then the ids as `u32`.
//!
//! | bytes  | field                                  |
//! |--------|----------------------------------------|
//! | 0..8   | magic `RBTOKENS`                       |
//! | 8..12  | version, `1`                           |
//! | 12..16 | vocab size (every id is below it)      |
//! | 16..24 | number of ids, `u64`                   |
//! | 24..32 | reserved, zero                         |
//! | 32..   | the ids, 4 bytes each                  |
//!
//! The file is never loaded whole: each window is a positioned read (`pread`), and every id
//! read is checked against the vocab size. The header's vocab size is a claim: it is bounded
//! (`MAX_VOCAB`) when the file is opened, and nothing is sized by it; per-id tables such as
//! the unigram counts grow with the ids actually read. Training windows are drawn from (seed, step) alone,
//! so a resumed run sees exactly the windows the uninterrupted run would have.

#[cfg(test)]
mod tests;
mod write;

pub use write::{TokenFileOptions, TokenWriter};

use crate::{Error, Generator, Result, Tensor};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const FORMAT: &str = "token file";
/// The largest vocab size a header may declare: far above any tokenizer's (about 1M for the
/// widest), far below what a corrupt header can say (2^32 - 1).
pub const MAX_VOCAB: usize = 1 << 24;
pub(crate) const MAGIC: &[u8; 8] = b"RBTOKENS";
pub(crate) const VERSION: u32 = 1;
pub(crate) const HEADER_BYTES: u64 = 32;
/// Which part of each step's training windows a rank reads, in a data-parallel run: shard
/// `index` of `count` takes windows `[index * batch, (index + 1) * batch)` of the
/// `count * batch` drawn for the step. The shards are disjoint, and together they are the
/// batch one process would draw with `count * batch`, shard `i` being its micro-batch `i`,
/// so a run on N GPUs sees the data of a run on one with N micro-batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The whole batch: one process.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    pub fn new(index: usize, count: usize) -> Result<Shard> {
        if count == 0 || index >= count {
            return Err(Error::invalid(
                "batch",
                format!("shard {index} of {count}: a shard is from 0 to its count - 1"),
            ));
        }
        Ok(Shard { index, count })
    }
}

/// Mixed into the seed so that data windows and weight initialization with the same seed
/// draw different numbers.
const WINDOW_STREAM: u64 = 0x746f_6b65_6e73_0001;

struct Shared {
    file: File,
    path: PathBuf,
    vocab_size: u32,
}

/// A contiguous range of a token file's ids. Cheap to clone; all spans of a file share one
/// open handle.
#[derive(Clone)]
pub struct TokenSpan {
    shared: Arc<Shared>,
    start: u64,
    len: u64,
}

/// An opened token file: the span of all its ids.
#[derive(Clone)]
pub struct TokenFile(TokenSpan);

impl std::ops::Deref for TokenFile {
    type Target = TokenSpan;
    fn deref(&self) -> &TokenSpan {
        &self.0
    }
}

impl TokenFile {
    /// Opens a token file, checking its header against its size.
    pub fn open(path: impl AsRef<Path>) -> Result<TokenFile> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let bad = |msg: String| Error::format(FORMAT, format!("{}: {msg}", path.display()));
        if size < HEADER_BYTES {
            return Err(bad(format!(
                "{size} bytes is shorter than the {HEADER_BYTES}-byte header; not a token file or truncated"
            )));
        }
        let mut header = [0u8; HEADER_BYTES as usize];
        read_exact_at(&file, &mut header, 0).map_err(|e| Error::io(path, e))?;
        if &header[0..8] != MAGIC {
            return Err(bad(format!(
                "bad magic {:?}; expected {:?} (is this a token file?)",
                String::from_utf8_lossy(&header[0..8]),
                std::str::from_utf8(MAGIC).unwrap_or_default()
            )));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().unwrap_or_default());
        if version != VERSION {
            return Err(bad(format!(
                "version {version} is not supported (this build reads {VERSION})"
            )));
        }
        let vocab_size = u32::from_le_bytes(header[12..16].try_into().unwrap_or_default());
        let count = u64::from_le_bytes(header[16..24].try_into().unwrap_or_default());
        if vocab_size == 0 {
            return Err(bad("vocab size 0 in the header".into()));
        }
        if vocab_size as usize > MAX_VOCAB {
            return Err(bad(format!(
                "vocab size {vocab_size} in the header is above the limit {MAX_VOCAB}; the header is corrupt"
            )));
        }
        let expected = count
            .checked_mul(4)
            .and_then(|b| b.checked_add(HEADER_BYTES));
        if expected != Some(size) {
            let how = if expected.is_some_and(|e| e > size) {
                "the file is truncated"
            } else {
                "the header's count is wrong or bytes trail the ids"
            };
            return Err(bad(format!(
                "the header declares {count} ids ({} bytes with the header) but the file has {size} bytes; {how}",
                expected.map_or("too many".to_string(), |e| e.to_string())
            )));
        }
        Ok(TokenFile(TokenSpan {
            shared: Arc::new(Shared {
                file,
                path: path.to_path_buf(),
                vocab_size,
            }),
            start: 0,
            len: count,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.0.shared.path
    }

    /// The whole file as a span.
    pub fn span(&self) -> TokenSpan {
        self.0.clone()
    }
}

impl TokenSpan {
    /// The number of ids in the span.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn vocab_size(&self) -> usize {
        self.shared.vocab_size as usize
    }

    /// Where the span starts in its file, in ids.
    pub fn offset(&self) -> u64 {
        self.start
    }

    /// Splits into (train, validation): the first `train_fraction` of the ids, rounded down,
    /// and the rest. Contiguous, so no window straddles the two.
    pub fn split(&self, train_fraction: f64) -> Result<(TokenSpan, TokenSpan)> {
        if !(train_fraction > 0.0 && train_fraction < 1.0) {
            crate::bail!(
                "split",
                "train fraction must be between 0 and 1 (exclusive), got {train_fraction}"
            );
        }
        let head = (self.len as f64 * train_fraction).floor() as u64;
        if head == 0 || head == self.len {
            crate::bail!(
                "split",
                "a {train_fraction} split of {} ids leaves one side empty",
                self.len
            );
        }
        Ok((self.sub(0, head), self.sub(head, self.len - head)))
    }

    /// The ids `[from, from + len)` of this span as a span.
    pub fn sub(&self, from: u64, len: u64) -> TokenSpan {
        let from = from.min(self.len);
        TokenSpan {
            shared: self.shared.clone(),
            start: self.start + from,
            len: len.min(self.len - from),
        }
    }

    /// Reads `n` ids starting `at` ids into the span, checking each against the vocab size.
    pub fn read(&self, at: u64, n: usize) -> Result<Vec<u32>> {
        if at.checked_add(n as u64).is_none_or(|end| end > self.len) {
            crate::bail!(
                "token file",
                "reading {n} ids at {at} runs past the span's {} ids",
                self.len
            );
        }
        let mut bytes = vec![0u8; n * 4];
        let pos = HEADER_BYTES + (self.start + at) * 4;
        read_exact_at(&self.shared.file, &mut bytes, pos)
            .map_err(|e| Error::io(&self.shared.path, e))?;
        let ids: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if let Some(i) = ids.iter().position(|&id| id >= self.shared.vocab_size) {
            return Err(Error::format(
                FORMAT,
                format!(
                    "{}: id {} at position {} is not below the vocab size {}; the file is corrupt",
                    self.shared.path.display(),
                    ids[i],
                    self.start + at + i as u64,
                    self.shared.vocab_size
                ),
            ));
        }
        Ok(ids)
    }

    /// A training batch: `batch` windows of `seq_len + 1` ids at random starts, as I64 tensors
    /// `x` (the first `seq_len`) and `y` (the last `seq_len`, so y is x shifted by one), both
    /// `[batch, seq_len]` on the CPU. The starts depend only on (seed, step): the same step
    /// always gives the same windows.
    pub fn batch(
        &self,
        step: u64,
        batch: usize,
        seq_len: usize,
        seed: u64,
    ) -> Result<(Tensor, Tensor)> {
        self.shard_batch(step, batch, seq_len, seed, Shard::WHOLE)
    }

    /// A rank's part of a training batch: its `batch` windows of the `batch * shard.count`
    /// drawn for (seed, step) (see [`Shard`]).
    pub fn shard_batch(
        &self,
        step: u64,
        batch: usize,
        seq_len: usize,
        seed: u64,
        shard: Shard,
    ) -> Result<(Tensor, Tensor)> {
        let starts = self.shard_window_starts(step, batch, seq_len, seed, shard)?;
        let mut x = Vec::with_capacity(batch * seq_len);
        let mut y = Vec::with_capacity(batch * seq_len);
        for start in starts {
            let ids = self.read(start, seq_len + 1)?;
            x.extend(ids[..seq_len].iter().map(|&i| i as i64));
            y.extend(ids[1..].iter().map(|&i| i as i64));
        }
        Ok((
            Tensor::from_vec(x, &[batch, seq_len])?,
            Tensor::from_vec(y, &[batch, seq_len])?,
        ))
    }

    /// The start offsets `batch` would read for `step`, uniform over every start that leaves
    /// room for `seq_len + 1` ids. Each step owns a block of 2^32 generator words (a draw
    /// takes two words, more after a rare rejection), so steps never share numbers.
    pub fn window_starts(
        &self,
        step: u64,
        batch: usize,
        seq_len: usize,
        seed: u64,
    ) -> Result<Vec<u64>> {
        self.shard_window_starts(step, batch, seq_len, seed, Shard::WHOLE)
    }

    /// The start offsets of `shard`'s part of step `step`: draws are taken in order, so shard
    /// 0 of any count starts as the whole batch does.
    pub fn shard_window_starts(
        &self,
        step: u64,
        batch: usize,
        seq_len: usize,
        seed: u64,
        shard: Shard,
    ) -> Result<Vec<u64>> {
        if batch == 0 || seq_len == 0 {
            crate::bail!(
                "batch",
                "batch size and sequence length must be positive, got {batch} and {seq_len}"
            );
        }
        let total = batch.saturating_mul(shard.count);
        if total > 1 << 24 {
            crate::bail!(
                "batch",
                "batch size {batch} on each of {} ranks is too large",
                shard.count
            );
        }
        let starts = self.window_count_for(seq_len, "batch")?;
        let mut gen = Generator::from_state(seed ^ WINDOW_STREAM, step.wrapping_mul(1 << 32));
        Ok(gen
            .integers(0, starts as i64, total)
            .into_iter()
            .skip(shard.index * batch)
            .take(batch)
            .map(|s| s as u64)
            .collect())
    }

    /// How many distinct windows of `seq_len + 1` ids fit; an error if none does.
    fn window_count_for(&self, seq_len: usize, op: &'static str) -> Result<u64> {
        let need = seq_len as u64 + 1;
        if self.len < need || self.len - seq_len as u64 > i64::MAX as u64 {
            return Err(Error::invalid(
                op,
                format!(
                    "this span has {} ids, too few for one window of {need} (seq_len {seq_len} + 1 for the shifted target); use a shorter seq_len or more text",
                    self.len
                ),
            ));
        }
        Ok(self.len - seq_len as u64)
    }

    /// Evaluation batches: consecutive, non-overlapping windows from the start of the span
    /// (window j holds ids `[j*seq_len, (j+1)*seq_len]`, so its target's last id is the next
    /// window's first input), `batch` windows per batch, the last batch possibly smaller, at
    /// most `max_batches` batches when given.
    pub fn eval_batches(
        &self,
        batch: usize,
        seq_len: usize,
        max_batches: Option<usize>,
    ) -> Result<EvalBatches> {
        if batch == 0 || seq_len == 0 {
            crate::bail!(
                "eval_batches",
                "batch size and sequence length must be positive, got {batch} and {seq_len}"
            );
        }
        self.window_count_for(seq_len, "eval_batches")?;
        let windows = (self.len - 1) / seq_len as u64;
        let mut batches = windows.div_ceil(batch as u64);
        if let Some(m) = max_batches {
            batches = batches.min(m as u64);
        }
        Ok(EvalBatches {
            span: self.clone(),
            batch,
            seq_len,
            windows,
            next: 0,
            batches,
        })
    }

    /// How often each id occurs in the span, read in blocks: entry `i` counts id `i`, up to
    /// the largest id present (ids above it, up to the vocab size, occur zero times). Sized by
    /// the ids read, never by the header.
    pub fn unigram_counts(&self) -> Result<Vec<u64>> {
        let mut counts: Vec<u64> = Vec::new();
        let block = 1 << 20;
        let mut at = 0;
        while at < self.len {
            crate::cancel::check()?;
            let n = (self.len - at).min(block) as usize;
            for id in self.read(at, n)? {
                let id = id as usize;
                if id >= counts.len() {
                    counts.try_reserve(id + 1 - counts.len()).map_err(|_| {
                        Error::invalid(
                            "unigram_counts",
                            format!("no memory for the counts of {} ids", id + 1),
                        )
                    })?;
                    counts.resize(id + 1, 0);
                }
                counts[id] += 1;
            }
            at += n as u64;
        }
        Ok(counts)
    }

    /// The entropy, in nats per token, of the span's own unigram distribution.
    pub fn unigram_entropy(&self) -> Result<f64> {
        let counts = self.unigram_counts()?;
        let total = self.len as f64;
        if total == 0.0 {
            crate::bail!("unigram_entropy", "the span is empty");
        }
        Ok(counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                let p = c as f64 / total;
                -p * p.ln()
            })
            .sum())
    }
}

/// The unigram baseline a language model should beat: the cross-entropy, in nats per token,
/// of `eval` under the token frequencies of `train` with add-one smoothing over the vocabulary,
/// `-mean over eval ids t of ln((count_train(t) + 1) / (len(train) + vocab))`. It is the loss of
/// a model that ignores context and only learned how often each token occurs.
pub fn unigram_cross_entropy(train: &TokenSpan, eval: &TokenSpan) -> Result<f64> {
    if eval.is_empty() {
        crate::bail!("unigram_cross_entropy", "the evaluation span is empty");
    }
    let counts = train.unigram_counts()?;
    let denom = (train.len() + train.vocab_size() as u64) as f64;
    let mut total = 0.0;
    let mut at = 0;
    while at < eval.len() {
        crate::cancel::check()?;
        let n = (eval.len() - at).min(1 << 20) as usize;
        for id in eval.read(at, n)? {
            // An id the training side never saw (or its vocabulary lacks) counts as unseen.
            let seen = counts.get(id as usize).copied().unwrap_or(0);
            total -= ((seen + 1) as f64 / denom).ln();
        }
        at += n as u64;
    }
    Ok(total / eval.len() as f64)
}

/// The iterator `eval_batches` returns: `(x, y)` I64 tensors `[rows, seq_len]` on the CPU.
pub struct EvalBatches {
    span: TokenSpan,
    batch: usize,
    seq_len: usize,
    windows: u64,
    next: u64,
    batches: u64,
}

impl EvalBatches {
    /// The number of batches this iterator yields in all.
    pub fn batch_count(&self) -> u64 {
        self.batches
    }

    fn load(&self, index: u64) -> Result<(Tensor, Tensor)> {
        let first = index * self.batch as u64;
        let rows = (self.windows - first).min(self.batch as u64) as usize;
        let s = self.seq_len;
        let ids = self.span.read(first * s as u64, rows * s + 1)?;
        let mut x = Vec::with_capacity(rows * s);
        let mut y = Vec::with_capacity(rows * s);
        for r in 0..rows {
            x.extend(ids[r * s..(r + 1) * s].iter().map(|&i| i as i64));
            y.extend(ids[r * s + 1..(r + 1) * s + 1].iter().map(|&i| i as i64));
        }
        Ok((
            Tensor::from_vec(x, &[rows, s])?,
            Tensor::from_vec(y, &[rows, s])?,
        ))
    }
}

impl Iterator for EvalBatches {
    type Item = Result<(Tensor, Tensor)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.batches {
            return None;
        }
        self.next += 1;
        Some(self.load(self.next - 1))
    }
}

impl std::fmt::Debug for TokenSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TokenSpan({} ids at {} of {}, vocab {})",
            self.len,
            self.start,
            self.shared.path.display(),
            self.shared.vocab_size
        )
    }
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TokenFile({}: {} ids, vocab {})",
            self.0.shared.path.display(),
            self.0.len,
            self.0.shared.vocab_size
        )
    }
}

/// Reads exactly `buf.len()` bytes at `offset` without moving a shared cursor, so spans of
/// one file can read from several threads.
#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_read(file, buf, offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n..];
        offset += n as u64;
    }
    Ok(())
}
