use super::*;
use crate::text::{train_bpe, SplitPattern, Tokenizer, TrainOptions};

/// A path in the temp folder that is removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Temp {
        Temp(std::env::temp_dir().join(format!("rb_tokens_{}_{name}", std::process::id())))
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

fn counting_file(name: &str, n: u32, vocab: usize) -> (Temp, TokenFile) {
    let t = Temp::new(name);
    let ids: Vec<u32> = (0..n).map(|i| i % vocab as u32).collect();
    let f = TokenFile::write_ids(&t.0, &ids, vocab).unwrap();
    (t, f)
}

fn rows(t: &Tensor) -> Vec<i64> {
    t.to_vec::<i64>().unwrap()
}

#[test]
fn written_ids_read_back_with_their_vocab_size() {
    let (_t, f) = counting_file("roundtrip", 1000, 1000);
    assert_eq!(f.len(), 1000);
    assert_eq!(f.vocab_size(), 1000);
    assert_eq!(f.read(990, 10).unwrap(), (990..1000).collect::<Vec<u32>>());
    let reopened = TokenFile::open(f.path()).unwrap();
    assert_eq!(reopened.read(0, 1000).unwrap(), f.read(0, 1000).unwrap());
}

#[test]
fn the_same_step_gives_the_same_windows_and_other_steps_differ() {
    let (_t, f) = counting_file("steps", 5000, 5000);
    let (x1, _) = f.batch(3, 4, 16, 42).unwrap();
    let (x2, _) = f.batch(3, 4, 16, 42).unwrap();
    let (x3, _) = f.batch(4, 4, 16, 42).unwrap();
    let (x4, _) = f.batch(3, 4, 16, 43).unwrap();
    assert_eq!(rows(&x1), rows(&x2));
    assert_ne!(rows(&x1), rows(&x3));
    assert_ne!(rows(&x1), rows(&x4));
    assert_eq!(x1.dims(), &[4, 16]);
    assert_eq!(x1.dtype(), crate::DType::I64);
}

#[test]
fn targets_are_inputs_shifted_by_one() {
    let (_t, f) = counting_file("shift", 3000, 3000);
    let (x, y) = f.batch(0, 8, 32, 1).unwrap();
    let (x, y) = (rows(&x), rows(&y));
    for r in 0..8 {
        for c in 0..32 {
            // Ids count up, so each target is its input + 1.
            assert_eq!(y[r * 32 + c], x[r * 32 + c] + 1);
        }
    }
}

#[test]
fn windows_cover_the_whole_span_including_its_last_id() {
    let (_t, f) = counting_file("cover", 40, 40);
    let mut starts = std::collections::HashSet::new();
    for step in 0..400 {
        starts.extend(f.window_starts(step, 4, 8, 0).unwrap());
    }
    // 40 ids hold windows of 9 at starts 0..=31.
    assert_eq!(starts.len(), 32);
    assert_eq!(starts.iter().max(), Some(&31));
}

#[test]
fn the_shards_of_a_step_are_the_micro_batches_of_the_whole_batch() {
    let (_t, f) = counting_file("shards", 4000, 4000);
    let whole = f.window_starts(5, 3 * 4, 16, 9).unwrap();
    let mut joined = Vec::new();
    for index in 0..3 {
        let shard = Shard::new(index, 3).unwrap();
        joined.extend(f.shard_window_starts(5, 4, 16, 9, shard).unwrap());
    }
    assert_eq!(joined, whole);
    // Shard 0 starts as a single process's batch of the same size does.
    assert_eq!(
        f.shard_window_starts(5, 4, 16, 9, Shard::new(0, 3).unwrap())
            .unwrap(),
        f.window_starts(5, 4, 16, 9).unwrap()
    );
    let (x, _) = f
        .shard_batch(5, 4, 16, 9, Shard::new(2, 3).unwrap())
        .unwrap();
    assert_eq!(rows(&x)[0], whole[8] as i64);
}

#[test]
fn a_shard_outside_its_count_is_an_error() {
    let e = Shard::new(2, 2).unwrap_err().to_string();
    assert!(e.contains("shard 2 of 2"), "{e}");
    assert!(Shard::new(0, 0).is_err());
}

#[test]
fn eval_windows_are_consecutive_and_do_not_overlap() {
    let (_t, f) = counting_file("eval", 100, 100);
    let batches: Vec<(Tensor, Tensor)> = f
        .eval_batches(3, 10, None)
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    // (100 - 1) / 10 = 9 windows in batches of 3.
    assert_eq!(batches.len(), 3);
    let x: Vec<i64> = batches.iter().flat_map(|(x, _)| rows(x)).collect();
    assert_eq!(x, (0..90).collect::<Vec<i64>>());
    let y: Vec<i64> = batches.iter().flat_map(|(_, y)| rows(y)).collect();
    assert_eq!(y, (1..91).collect::<Vec<i64>>());
    assert_eq!(f.eval_batches(3, 10, Some(2)).unwrap().count(), 2);
    // A partial last batch keeps its windows.
    let sizes: Vec<usize> = f
        .eval_batches(4, 10, None)
        .unwrap()
        .map(|b| b.unwrap().0.dims()[0])
        .collect();
    assert_eq!(sizes, [4, 4, 1]);
}

#[test]
fn split_puts_the_last_part_in_validation() {
    let (_t, f) = counting_file("split", 1000, 1000);
    let (train, val) = f.split(0.9).unwrap();
    assert_eq!((train.len(), val.len()), (900, 100));
    assert_eq!(val.read(0, 1).unwrap(), [900]);
    // Windows stay inside their span.
    for step in 0..50 {
        assert!(val
            .window_starts(step, 4, 10, 0)
            .unwrap()
            .iter()
            .all(|&s| s + 11 <= 100));
    }
    assert!(f.split(1.0).is_err());
}

#[test]
fn a_span_too_short_for_one_window_is_an_error() {
    let (_t, f) = counting_file("short", 10, 10);
    let err = f.batch(0, 1, 10, 0).unwrap_err().to_string();
    assert!(
        err.contains("10 ids") && err.contains("window of 11"),
        "{err}"
    );
    assert!(f.eval_batches(1, 10, None).is_err());
    assert!(f.batch(0, 1, 9, 0).is_ok());
}

#[test]
fn truncated_file_bad_magic_and_out_of_vocab_ids_are_errors() {
    let (t, _f) = counting_file("corrupt", 100, 100);
    let bytes = std::fs::read(&t.0).unwrap();
    let bad = Temp::new("corrupt_copy");
    std::fs::write(&bad.0, &bytes[..bytes.len() - 6]).unwrap();
    let err = TokenFile::open(&bad.0).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");
    let mut magic = bytes.clone();
    magic[0] = b'X';
    std::fs::write(&bad.0, &magic).unwrap();
    let err = TokenFile::open(&bad.0).unwrap_err().to_string();
    assert!(err.contains("magic"), "{err}");
    // Vocab size 100 in the header, but id 5000 at position 7.
    let mut big = bytes;
    let at = HEADER_BYTES as usize + 7 * 4;
    big[at..at + 4].copy_from_slice(&5000u32.to_le_bytes());
    std::fs::write(&bad.0, &big).unwrap();
    let f = TokenFile::open(&bad.0).unwrap();
    let err = f.read(0, 100).unwrap_err().to_string();
    assert!(err.contains("id 5000 at position 7"), "{err}");
    assert!(TokenFile::write_ids(&bad.0, &[3, 100], 100).is_err());
}

fn tokenizer() -> Tokenizer {
    let text = "hello world, hello tokens. ".repeat(20);
    let o = TrainOptions {
        vocab_size: 300,
        pattern: SplitPattern::Gpt2,
        ..TrainOptions::default()
    };
    train_bpe([text], &o).unwrap()
}

#[test]
fn text_files_become_documents_separated_by_eos() {
    let tok = tokenizer();
    let eos = tok.eos_id().unwrap();
    let (a, b, out) = (
        Temp::new("a.txt"),
        Temp::new("b.txt"),
        Temp::new("ab.tokens"),
    );
    std::fs::write(&a.0, "hello world").unwrap();
    std::fs::write(&b.0, "hello tokens\n").unwrap();
    let opts = TokenFileOptions {
        eos: Some(eos),
        ..Default::default()
    };
    let f = TokenFile::write_from_texts(&tok, &[a.0.clone(), b.0.clone()], &out.0, &opts).unwrap();
    let mut want = tok.encode("hello world").unwrap();
    want.push(eos);
    want.extend(tok.encode("hello tokens\n").unwrap());
    want.push(eos);
    assert_eq!(f.read(0, f.len() as usize).unwrap(), want);
    assert_eq!(f.vocab_size(), tok.vocab_size());
}

#[test]
fn jsonl_lines_are_documents_and_bad_lines_name_file_and_line() {
    let tok = tokenizer();
    let (src, out) = (Temp::new("docs.jsonl"), Temp::new("docs.tokens"));
    std::fs::write(
        &src.0,
        "{\"text\": \"hello\", \"id\": 1}\n\n{\"text\": \"world\"}\n",
    )
    .unwrap();
    let opts = TokenFileOptions {
        eos: Some(0),
        ..Default::default()
    };
    let f = TokenFile::write_from_files(&tok, std::slice::from_ref(&src.0), &out.0, &opts).unwrap();
    let mut want = tok.encode("hello").unwrap();
    want.push(0);
    want.extend(tok.encode("world").unwrap());
    want.push(0);
    assert_eq!(f.read(0, f.len() as usize).unwrap(), want);
    std::fs::write(&src.0, "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n").unwrap();
    let err = TokenFile::write_from_jsonl(&tok, std::slice::from_ref(&src.0), &out.0, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("docs.jsonl:2") && err.contains("\"text\""),
        "{err}"
    );
}

#[test]
fn unigram_baselines_match_hand_computed_values() {
    // Ids 0,0,1,1 (train) and 0,1 (eval) with vocab 4.
    let t = Temp::new("unigram");
    let f = TokenFile::write_ids(&t.0, &[0, 0, 1, 1, 0, 1], 4).unwrap();
    let (train, eval) = (f.sub(0, 4), f.sub(4, 2));
    assert!((train.unigram_entropy().unwrap() - std::f64::consts::LN_2).abs() < 1e-12);
    // p(0) = p(1) = (2 + 1) / (4 + 4).
    let want = -(3.0f64 / 8.0).ln();
    assert!((unigram_cross_entropy(&train, &eval).unwrap() - want).abs() < 1e-12);
}

#[test]
fn a_header_vocab_beyond_the_limit_is_refused_and_counts_follow_the_ids_read() {
    let t = Temp::new("vocab_claim");
    TokenFile::write_ids(&t.0, &[0, 2, 1, 2], 3).unwrap();
    let mut bytes = std::fs::read(&t.0).unwrap();
    for claim in [u32::MAX, 1 << 28] {
        bytes[12..16].copy_from_slice(&claim.to_le_bytes());
        std::fs::write(&t.0, &bytes).unwrap();
        let err = TokenFile::open(&t.0).unwrap_err().to_string();
        assert!(
            err.contains(&format!("vocab size {claim}")) && err.contains("limit"),
            "{err}"
        );
    }
    // At the limit it opens, and the counts are as long as the largest id present, not as
    // the header's vocab.
    bytes[12..16].copy_from_slice(&(MAX_VOCAB as u32).to_le_bytes());
    std::fs::write(&t.0, &bytes).unwrap();
    let f = TokenFile::open(&t.0).unwrap();
    assert_eq!(f.unigram_counts().unwrap(), vec![1, 1, 2]);
    let h = -(0.25f64 * 0.25f64.ln() * 2.0 + 0.5 * 0.5f64.ln());
    assert!((f.unigram_entropy().unwrap() - h).abs() < 1e-12);
    assert!(TokenFile::write_ids(&t.0, &[0], MAX_VOCAB + 1).is_err());
}
