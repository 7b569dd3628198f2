//! Training a byte-level BPE, following Hugging Face's `BpeTrainer` so that the same text and
//! settings give the same vocabulary and merges:
//! - ids: the special tokens first (in the order given), then the 256 byte characters in code
//!   point order, then each merged token as it is made;
//! - each step merges the pair with the highest count over all words (a word counts as often
//!   as it occurs), ties going to the smallest (left id, right id);
//! - counts are kept incrementally: a merge only touches the words that contain the pair, and
//!   a max-heap holds candidate pairs whose counts are re-checked when popped (a stale entry
//!   goes back with its current count).
//!
//! Text is cut with the chosen split pattern; special-token strings in the text are taken out
//! first and never learned from.

use super::added::{AddedToken, AddedVocab, Segment};
use super::bpe::{pair_key, BpeModel, BpeOptions, PairMap};
use super::byte_level;
use super::decode::Decoder;
use super::hf_json::byte_level_post_processor;
use super::model::Model;
use super::normalize::Normalizer;
use super::pretokenize::{PreTokenizer, SplitPattern, Start};
use super::tokenizer::{Parts, Template, Tokenizer};
use crate::{Error, Result};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct TrainOptions {
    /// The size of the result, special tokens and the 256 bytes included.
    pub vocab_size: usize,
    pub special_tokens: Vec<String>,
    pub pattern: SplitPattern,
    /// Pairs seen fewer times than this are never merged.
    pub min_frequency: u64,
    /// The field that holds the text in JSONL files.
    pub jsonl_field: String,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            vocab_size: 4096,
            special_tokens: vec!["<|endoftext|>".into()],
            pattern: SplitPattern::Gpt2,
            min_frequency: 0,
            jsonl_field: "text".into(),
        }
    }
}

/// Learns a tokenizer from texts (each one document).
pub fn train_bpe(
    texts: impl IntoIterator<Item = String>,
    options: &TrainOptions,
) -> Result<Tokenizer> {
    let mut counter = WordCounter::new(options)?;
    for text in texts {
        counter.add(&text)?;
    }
    learn(counter.words, options)
}

/// Learns a tokenizer from files, read one at a time (text files in chunks, see `chunks`;
/// JSONL files document by document, from `options.jsonl_field`), so the corpus is never held
/// in memory; only the distinct words and their counts are.
pub fn train_bpe_files(paths: &[PathBuf], options: &TrainOptions) -> Result<Tokenizer> {
    let mut counter = WordCounter::new(options)?;
    for path in paths {
        if super::jsonl::is_jsonl(path) {
            super::jsonl::for_each_document(path, &options.jsonl_field, |doc| counter.add(&doc))?;
        } else {
            super::chunks::for_each_chunk(path, super::chunks::CHUNK_BYTES, |chunk| {
                counter.add(chunk)
            })?;
        }
    }
    learn(counter.words, options)
}

/// Distinct pre-tokenized words (raw bytes) and how often each occurs.
struct WordCounter {
    pre: PreTokenizer,
    specials: AddedVocab,
    words: HashMap<Vec<u8>, u64>,
}

impl WordCounter {
    fn new(options: &TrainOptions) -> Result<Self> {
        let specials = options
            .special_tokens
            .iter()
            .enumerate()
            .map(|(i, s)| AddedToken::special(i as u32, s))
            .collect();
        Ok(WordCounter {
            pre: options.pattern.pre_tokenizer()?,
            specials: AddedVocab::new(specials)?,
            words: HashMap::new(),
        })
    }

    fn add(&mut self, text: &str) -> Result<()> {
        let words = &mut self.words;
        for segment in self.specials.split(text) {
            if let Segment::Text(t) = segment {
                self.pre.for_each_piece(t, Start::Input, &mut |piece| {
                    match words.get_mut(piece.as_bytes()) {
                        Some(c) => *c += 1,
                        None => {
                            words.insert(piece.as_bytes().to_vec(), 1);
                        }
                    }
                    Ok(())
                })?;
            }
        }
        Ok(())
    }
}

/// A candidate merge in the heap: the pair's count when pushed, and the words it was seen in.
struct Candidate {
    count: u64,
    left: u32,
    right: u32,
    words: Vec<u32>,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Higher count first; among equal counts the smaller pair first.
    fn cmp(&self, other: &Self) -> Ordering {
        self.count
            .cmp(&other.count)
            .then_with(|| (other.left, other.right).cmp(&(self.left, self.right)))
    }
}

fn learn(word_counts: HashMap<Vec<u8>, u64>, options: &TrainOptions) -> Result<Tokenizer> {
    let mut specials: Vec<&String> = Vec::new();
    for s in &options.special_tokens {
        if s.is_empty() {
            return Err(Error::invalid("train_bpe", "a special token is empty"));
        }
        if !specials.contains(&s) {
            specials.push(s);
        }
    }
    let base = specials.len() + 256;
    if options.vocab_size < base {
        return Err(Error::invalid(
            "train_bpe",
            format!(
                "vocab_size {} is below the {} ids that the 256 bytes and {} special tokens take",
                options.vocab_size,
                base,
                specials.len()
            ),
        ));
    }
    // Token names (byte-level alphabet; specials as written) by id and ids by name, filled
    // as the reference does: specials, then each alphabet character not already a token.
    let mut names: Vec<String> = specials.iter().map(|s| s.to_string()).collect();
    let mut id_of: HashMap<String, u32> = names
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as u32))
        .collect();
    let mut byte_id = [0u32; 256];
    // The id of a token, added at the end when it is new.
    let intern = |names: &mut Vec<String>, id_of: &mut HashMap<String, u32>, name: String| {
        *id_of.entry(name).or_insert_with_key(|name| {
            names.push(name.clone());
            names.len() as u32 - 1
        })
    };
    for c in byte_level::alphabet_in_code_point_order() {
        let id = intern(&mut names, &mut id_of, c.to_string());
        // Every alphabet character stands for a byte.
        byte_id[byte_level::char_to_byte(c).unwrap_or(0) as usize] = id;
    }

    // Words sorted for a deterministic layout (the result does not depend on it).
    let mut sorted: Vec<(Vec<u8>, u64)> = word_counts.into_iter().collect();
    sorted.sort_unstable();
    let counts: Vec<u64> = sorted.iter().map(|(_, c)| *c).collect();
    let mut words: Vec<Vec<u32>> = sorted
        .iter()
        .map(|(w, _)| w.iter().map(|&b| byte_id[b as usize]).collect())
        .collect();
    drop(sorted);

    let mut pair_counts: PairMap<i64> = PairMap::default();
    let mut seen_in: PairMap<Vec<u32>> = PairMap::default();
    for (i, w) in words.iter().enumerate() {
        for p in w.windows(2) {
            let key = pair_key(p[0], p[1]);
            *pair_counts.entry(key).or_insert(0) += counts[i] as i64;
            push_word(seen_in.entry(key).or_default(), i as u32);
        }
    }
    let mut heap = BinaryHeap::with_capacity(pair_counts.len());
    push_candidates(&mut heap, &mut seen_in, &pair_counts);

    let mut merges: Vec<(u32, u32)> = Vec::new();
    let mut changes: Vec<(u64, i64)> = Vec::new();
    while names.len() < options.vocab_size {
        let Some(mut top) = heap.pop() else { break };
        let key = pair_key(top.left, top.right);
        let current = pair_counts.get(&key).copied().unwrap_or(0).max(0) as u64;
        if top.count != current {
            top.count = current;
            heap.push(top);
            continue;
        }
        if top.count == 0 || top.count < options.min_frequency {
            break;
        }
        crate::cancel::check()?;
        let new_name = format!("{}{}", names[top.left as usize], names[top.right as usize]);
        let new_id = intern(&mut names, &mut id_of, new_name);
        merges.push((top.left, top.right));
        // The merged pair's own count is left as it is; only its neighbours' counts change.
        // (This is the reference trainer's bookkeeping, kept so that the results agree.)
        for &w in &top.words {
            changes.clear();
            merge_in_word(
                &mut words[w as usize],
                top.left,
                top.right,
                new_id,
                &mut changes,
            );
            let count = counts[w as usize] as i64;
            for &(pair, delta) in &changes {
                *pair_counts.entry(pair).or_insert(0) += delta * count;
                if delta > 0 {
                    push_word(seen_in.entry(pair).or_default(), w);
                }
            }
        }
        push_candidates(&mut heap, &mut seen_in, &pair_counts);
    }
    build_tokenizer(&specials, names, id_of, &merges, options)
}

/// Adds `w` to a word list unless it was the last one added (words are visited in order).
fn push_word(list: &mut Vec<u32>, w: u32) {
    if list.last() != Some(&w) {
        list.push(w);
    }
}

fn push_candidates(
    heap: &mut BinaryHeap<Candidate>,
    seen_in: &mut PairMap<Vec<u32>>,
    pair_counts: &PairMap<i64>,
) {
    for (key, mut list) in seen_in.drain() {
        let count = pair_counts.get(&key).copied().unwrap_or(0);
        if count > 0 {
            list.sort_unstable();
            list.dedup();
            heap.push(Candidate {
                count: count as u64,
                left: (key >> 32) as u32,
                right: key as u32,
                words: list,
            });
        }
    }
}

/// Replaces each occurrence of (left, right) in `word`, left to right without overlap, by
/// `new_id`, recording the pairs that disappear (-1) and appear (+1) beside each occurrence.
fn merge_in_word(
    word: &mut Vec<u32>,
    left: u32,
    right: u32,
    new_id: u32,
    changes: &mut Vec<(u64, i64)>,
) {
    let n = word.len();
    let (mut read, mut write) = (0, 0);
    while read < n {
        if read + 1 < n && word[read] == left && word[read + 1] == right {
            if write > 0 {
                let before = word[write - 1];
                changes.push((pair_key(before, left), -1));
                changes.push((pair_key(before, new_id), 1));
            }
            if read + 2 < n {
                let after = word[read + 2];
                changes.push((pair_key(right, after), -1));
                changes.push((pair_key(new_id, after), 1));
            }
            word[write] = new_id;
            read += 2;
        } else {
            word[write] = word[read];
            read += 1;
        }
        write += 1;
    }
    word.truncate(write);
}

fn build_tokenizer(
    specials: &[&String],
    names: Vec<String>,
    vocab: HashMap<String, u32>,
    merges: &[(u32, u32)],
    options: &TrainOptions,
) -> Result<Tokenizer> {
    let merge_names = merges
        .iter()
        .map(|&(a, b)| (names[a as usize].clone(), names[b as usize].clone()))
        .collect();
    let model = BpeModel::new(vocab, merge_names, &BpeOptions::default())?;
    let added = AddedVocab::new(
        specials
            .iter()
            .enumerate()
            .map(|(i, s)| AddedToken::special(i as u32, s))
            .collect(),
    )?;
    Ok(Tokenizer::from_parts(Parts {
        added,
        normalizer: Normalizer::default(),
        pre: options.pattern.pre_tokenizer()?,
        model: Model::Bpe(model),
        template: Template::default(),
        post_processor_json: byte_level_post_processor(),
        decoder: Decoder::byte_level(),
        limits: Default::default(),
    }))
}
