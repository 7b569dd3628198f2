//! The BPE model: a vocabulary, ranked merges, and the merge loop that turns one pre-tokenized
//! piece into ids.
//!
//! The loop is Hugging Face's: start from one symbol per byte, keep every adjacent pair that
//! has a merge in a min-heap keyed by (rank, position), pop the best, skip it if it went stale
//! (a neighbour was merged away since it was pushed), merge, and push the two pairs the new
//! symbol forms with its neighbours. Symbols live in an array linked both ways, so a merge is
//! O(1) plus two heap pushes, and a piece of n bytes costs O(n log n), never O(n^2).

use super::byte_level;
use super::symbols::{Alphabet, AlphabetKind};
use crate::{Error, Result};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// A pair of ids packed into one key: left id in the high half.
pub(crate) fn pair_key(left: u32, right: u32) -> u64 {
    ((left as u64) << 32) | right as u64
}

/// A multiplicative hash for packed pair keys. SipHash's resistance to crafted keys buys
/// nothing here (keys come from the vocabulary, not from input) and costs most of the loop.
#[derive(Default)]
pub(crate) struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 ^= self.0 >> 32;
    }
}

pub(crate) type PairMap<V> = HashMap<u64, V, BuildHasherDefault<PairHasher>>;

/// A merge's place in the list and the id of the token it makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MergeRule {
    pub rank: u32,
    pub new_id: u32,
}

#[derive(Clone, Debug)]
pub struct BpeModel {
    /// Token strings in the byte-level alphabet, by id; `None` for ids the vocabulary skips.
    pub(crate) id_to_token: Vec<Option<String>>,
    pub(crate) token_to_id: HashMap<String, u32>,
    /// The merges in rank order, as (left, right) ids.
    pub(crate) merges: Vec<(u32, u32)>,
    pub(crate) merge_map: PairMap<MergeRule>,
    /// The id each rank's merge makes.
    rank_new_id: Vec<u32>,
    /// How a piece becomes its first symbols (bytes or characters), and the unknown token.
    pub(crate) alphabet: Alphabet,
    /// Hugging Face's `ignore_merges`: a piece that is itself a token is not merged.
    pub(crate) ignore_merges: bool,
    /// Token ids by the text they stand for, filled only when `ignore_merges` needs it.
    whole_pieces: HashMap<Vec<u8>, u32>,
    /// How symbols inside a word are spelled: CLIP ends a word's last symbol with "</w>";
    /// WordPiece-style BPEs start every later symbol with "##".
    pub(crate) affixes: Affixes,
}

/// `continuing_subword_prefix` and `end_of_word_suffix` (an empty one is none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Affixes {
    pub prefix: Option<String>,
    pub suffix: Option<String>,
}

impl Affixes {
    pub fn new(prefix: Option<&str>, suffix: Option<&str>) -> Self {
        let some = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
        Affixes {
            prefix: some(prefix),
            suffix: some(suffix),
        }
    }

    fn is_empty(&self) -> bool {
        self.prefix.is_none() && self.suffix.is_none()
    }
}

/// The settings of a BPE model beside its vocabulary and merges.
#[derive(Clone, Debug, Default)]
pub struct BpeOptions<'a> {
    pub alphabet: AlphabetKind,
    pub ignore_merges: bool,
    pub unk_token: Option<&'a str>,
    /// A run of unknown characters becomes one unknown token.
    pub fuse_unk: bool,
    pub affixes: Affixes,
}

impl BpeModel {
    /// A model from its vocabulary (token string -> id) and merges in rank order. A merge whose
    /// parts or result are not in the vocabulary is an error naming it; a pair listed twice
    /// takes its later rank, as Hugging Face's loader does.
    pub fn new(
        vocab: HashMap<String, u32>,
        merges: Vec<(String, String)>,
        options: &BpeOptions,
    ) -> Result<Self> {
        let id_to_token = super::model::id_table(&vocab)?;
        let unk_id = match options.unk_token {
            None => None,
            Some(t) => Some(*vocab.get(t).ok_or_else(|| {
                bad_model(format!("model.unk_token {t:?} is not in model.vocab"))
            })?),
        };
        let alphabet = Alphabet::new(&vocab, options.alphabet, unk_id, options.fuse_unk);
        let mut model = BpeModel {
            id_to_token,
            token_to_id: vocab,
            merges: Vec::with_capacity(merges.len()),
            merge_map: PairMap::default(),
            rank_new_id: Vec::with_capacity(merges.len()),
            alphabet,
            ignore_merges: options.ignore_merges,
            whole_pieces: HashMap::new(),
            affixes: options.affixes.clone(),
        };
        // A merge's right part drops the prefix's length in bytes ("a" + "##b" makes "ab"),
        // whether or not it starts with the prefix, as `tokenizers` does.
        let prefix_len = model.affixes.prefix.as_ref().map_or(0, String::len);
        let mut ranked = Vec::with_capacity(merges.len());
        for (line, (a, b)) in merges.iter().enumerate() {
            let id_of = |t: &str| {
                model.token_to_id.get(t).copied().ok_or_else(|| {
                    bad_model(format!(
                        "model.merges[{line}] \"{a} {b}\": token {t:?} is not in model.vocab"
                    ))
                })
            };
            let (left, right) = (id_of(a)?, id_of(b)?);
            let b_rest = b.get(prefix_len..).ok_or_else(|| {
                bad_model(format!(
                    "model.merges[{line}] \"{a} {b}\": {b:?} is shorter than the continuing_subword_prefix"
                ))
            })?;
            let new_id = id_of(&format!("{a}{b_rest}"))?;
            ranked.push((left, right, new_id));
        }
        // A repeated pair keeps its last place; the list keeps only that occurrence, and ranks
        // are places in the kept list (the same order as the file's).
        let mut last_place: PairMap<usize> = PairMap::default();
        for (place, &(left, right, _)) in ranked.iter().enumerate() {
            last_place.insert(pair_key(left, right), place);
        }
        for (place, &(left, right, new_id)) in ranked.iter().enumerate() {
            if last_place[&pair_key(left, right)] == place {
                let rank = model.merges.len() as u32;
                model.merges.push((left, right));
                model.rank_new_id.push(new_id);
                model
                    .merge_map
                    .insert(pair_key(left, right), MergeRule { rank, new_id });
            }
        }
        if options.ignore_merges {
            for (token, &id) in &model.token_to_id {
                let text = match options.alphabet {
                    AlphabetKind::ByteLevel => byte_level::decode_chars(token),
                    AlphabetKind::Chars { .. } => Some(token.as_bytes().to_vec()),
                };
                if let Some(bytes) = text {
                    model.whole_pieces.insert(bytes, id);
                }
            }
        }
        Ok(model)
    }

    /// The number of ids the vocabulary spans (highest id + 1).
    pub fn id_count(&self) -> usize {
        self.id_to_token.len()
    }

    pub fn unk_id(&self) -> Option<u32> {
        self.alphabet.unk_id
    }

    /// Appends the ids of one pre-tokenized piece to `out`.
    pub fn encode_piece(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        if piece.is_empty() {
            return Ok(());
        }
        if self.ignore_merges {
            if let Some(&id) = self.whole_pieces.get(piece.as_bytes()) {
                out.push(id);
                return Ok(());
            }
        }
        let mut symbols = Vec::with_capacity(piece.len());
        if self.affixes.is_empty() {
            self.alphabet.symbols(piece, &mut symbols)?;
        } else {
            self.alphabet
                .symbols_affixed(piece, &self.token_to_id, &self.affixes, &mut symbols)?;
        }
        if !symbols.is_empty() {
            self.merge_symbols(symbols, out);
        }
        Ok(())
    }

    /// Applies the merges to `ids` by rank, leftmost first among equal ranks, and appends the
    /// result to `out`. Both paths below give exactly this order; they differ in speed.
    fn merge_symbols(&self, ids: Vec<u32>, out: &mut Vec<u32>) {
        if ids.len() == 1 {
            out.push(ids[0]);
            return;
        }
        let mut symbols = link(&ids);
        if ids.len() < LONG_PIECE {
            self.merge_by_heap(&ids, &mut symbols);
        } else {
            self.merge_by_rank_buckets(&ids, &mut symbols);
        }
        out.extend(symbols.iter().filter(|s| s.id != DEAD).map(|s| s.id));
    }

    /// One heap of (rank, position) entries: few allocations, for the short pieces that are
    /// almost all of normal text.
    fn merge_by_heap(&self, ids: &[u32], symbols: &mut [Symbol]) {
        // Entries are rank << 32 | position, smallest first; the initial pairs are heapified
        // in O(n) rather than pushed one by one.
        let initial: Vec<Reverse<u64>> = ids
            .windows(2)
            .enumerate()
            .filter_map(|(i, w)| {
                let m = self.merge_map.get(&pair_key(w[0], w[1]))?;
                Some(Reverse(entry_key(m.rank, i as u32)))
            })
            .collect();
        let mut heap = BinaryHeap::from(initial);
        while let Some(Reverse(key)) = heap.pop() {
            let (rank, p) = ((key >> 32) as u32, key as u32 as usize);
            self.merge_at(symbols, p, rank, &mut |rank, pos| {
                heap.push(Reverse(entry_key(rank, pos)))
            });
        }
    }

    /// Positions grouped by rank, ranks in a small heap: each rank's positions are merged
    /// left to right, so the symbols are walked in order (cache-friendly) and the heap holds
    /// distinct ranks, not positions. For long pieces, where one heap over every position
    /// would outgrow the caches.
    fn merge_by_rank_buckets(&self, ids: &[u32], symbols: &mut [Symbol]) {
        let mut buckets = RankBuckets::default();
        for (i, w) in ids.windows(2).enumerate() {
            if let Some(m) = self.merge_map.get(&pair_key(w[0], w[1])) {
                buckets.push(m.rank, i as u32);
            }
        }
        while let Some((rank, mut positions)) = buckets.pop_lowest() {
            positions.sort_unstable();
            positions.dedup();
            let mut next = 0;
            while next < positions.len() {
                let p = positions[next] as usize;
                next += 1;
                // A pair formed with a rank not above this one (possible only in unusual merge
                // lists) must take its place in the heap order: put the rest of this rank back
                // and pop again.
                let mut reorder = false;
                self.merge_at(symbols, p, rank, &mut |r, pos| {
                    reorder |= r <= rank;
                    buckets.push(r, pos)
                });
                if reorder {
                    buckets.put_back(rank, positions.split_off(next));
                    break;
                }
            }
            buckets.recycle(positions);
        }
    }

    /// Merges the pair at position `p` if it is still the pair of merge `rank` (an entry goes
    /// stale when a neighbour merges first), and reports the new pairs with its neighbours.
    /// Staleness is judged by the token made, not the rank, as the reference does.
    fn merge_at(
        &self,
        symbols: &mut [Symbol],
        p: usize,
        rank: u32,
        push: &mut dyn FnMut(u32, u32),
    ) {
        let s = symbols[p];
        if s.id == DEAD || s.next == NONE {
            return;
        }
        let q = s.next as usize;
        let right = symbols[q];
        let new_id = self.rank_new_id[rank as usize];
        match self.merge_map.get(&pair_key(s.id, right.id)) {
            Some(m) if m.new_id == new_id => {}
            _ => return,
        }
        symbols[p].id = new_id;
        symbols[p].next = right.next;
        symbols[q].id = DEAD;
        if right.next != NONE {
            symbols[right.next as usize].prev = p as u32;
        }
        if s.prev != NONE {
            let l = s.prev as usize;
            if let Some(m) = self.merge_map.get(&pair_key(symbols[l].id, new_id)) {
                push(m.rank, l as u32);
            }
        }
        if right.next != NONE {
            let r = right.next as usize;
            if let Some(m) = self.merge_map.get(&pair_key(new_id, symbols[r].id)) {
                push(m.rank, p as u32);
            }
        }
    }
}

/// Pieces of at least this many bytes merge by rank buckets, shorter ones by one heap.
const LONG_PIECE: usize = 256;

const NONE: u32 = u32::MAX;
/// The id of a symbol merged into its left neighbour (no token has it: ids are below it).
const DEAD: u32 = u32::MAX;

/// One symbol of a piece being merged, linked to its live neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: u32,
    next: u32,
}

fn entry_key(rank: u32, pos: u32) -> u64 {
    ((rank as u64) << 32) | pos as u64
}

fn link(ids: &[u32]) -> Vec<Symbol> {
    let n = ids.len();
    ids.iter()
        .enumerate()
        .map(|(i, &id)| Symbol {
            id,
            prev: if i == 0 { NONE } else { i as u32 - 1 },
            next: if i + 1 == n { NONE } else { i as u32 + 1 },
        })
        .collect()
}

/// Positions waiting to merge, grouped by rank, with the ranks in a min-heap.
#[derive(Default)]
struct RankBuckets {
    slots: PairMap<Vec<u32>>,
    ranks: BinaryHeap<Reverse<u32>>,
    spare: Vec<Vec<u32>>,
}

impl RankBuckets {
    fn push(&mut self, rank: u32, pos: u32) {
        let spare = &mut self.spare;
        let ranks = &mut self.ranks;
        self.slots
            .entry(rank as u64)
            .or_insert_with(|| {
                ranks.push(Reverse(rank));
                spare.pop().unwrap_or_default()
            })
            .push(pos);
    }

    fn pop_lowest(&mut self) -> Option<(u32, Vec<u32>)> {
        let Reverse(rank) = self.ranks.pop()?;
        let positions = self.slots.remove(&(rank as u64)).unwrap_or_default();
        Some((rank, positions))
    }

    /// Returns positions of `rank` not yet tried (sorted, so they merge in order later).
    fn put_back(&mut self, rank: u32, positions: Vec<u32>) {
        for p in positions {
            self.push(rank, p);
        }
    }

    fn recycle(&mut self, mut positions: Vec<u32>) {
        positions.clear();
        self.spare.push(positions);
    }
}

fn bad_model(msg: String) -> Error {
    Error::invalid("tokenizer", msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of the bytes of "abcd" plus the tokens the merges make.
    fn tiny(merges: &[(&str, &str)]) -> BpeModel {
        let mut vocab: HashMap<String, u32> = HashMap::new();
        for c in ["a", "b", "c", "d"] {
            vocab.insert(c.into(), vocab.len() as u32);
        }
        for (a, b) in merges {
            let t = format!("{a}{b}");
            let n = vocab.len() as u32;
            vocab.entry(t).or_insert(n);
        }
        let merges = merges
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        BpeModel::new(vocab, merges, &BpeOptions::default()).unwrap()
    }

    fn tokens(m: &BpeModel, text: &str) -> Vec<String> {
        let mut ids = Vec::new();
        m.encode_piece(text, &mut ids).unwrap();
        ids.iter()
            .map(|&i| m.id_to_token[i as usize].clone().unwrap())
            .collect()
    }

    #[test]
    fn lower_rank_merges_first() {
        // "bc" outranks "ab", so "abc" becomes a + bc, not ab + c.
        let m = tiny(&[("b", "c"), ("a", "b")]);
        assert_eq!(tokens(&m, "abc"), ["a", "bc"]);
        let m = tiny(&[("a", "b"), ("b", "c")]);
        assert_eq!(tokens(&m, "abc"), ["ab", "c"]);
    }

    #[test]
    fn merges_build_on_earlier_merges() {
        let m = tiny(&[("a", "b"), ("c", "d"), ("ab", "cd")]);
        assert_eq!(tokens(&m, "abcd"), ["abcd"]);
        assert_eq!(tokens(&m, "abcdab"), ["abcd", "ab"]);
    }

    #[test]
    fn equal_ranks_merge_leftmost_first() {
        // "aaa": the left pair merges, the right "a" is left over.
        let m = tiny(&[("a", "a")]);
        assert_eq!(tokens(&m, "aaa"), ["aa", "a"]);
        assert_eq!(tokens(&m, "aaaa"), ["aa", "aa"]);
    }

    /// Both merge paths, forced on the same symbols.
    fn both_paths(m: &BpeModel, bytes: &[u8]) -> (Vec<u32>, Vec<u32>) {
        let mut ids = Vec::new();
        m.alphabet
            .symbols(std::str::from_utf8(bytes).unwrap(), &mut ids)
            .unwrap();
        let run = |by_heap: bool| {
            let mut symbols = link(&ids);
            if by_heap {
                m.merge_by_heap(&ids, &mut symbols);
            } else {
                m.merge_by_rank_buckets(&ids, &mut symbols);
            }
            symbols
                .iter()
                .filter(|s| s.id != DEAD)
                .map(|s| s.id)
                .collect::<Vec<u32>>()
        };
        (run(true), run(false))
    }

    /// Pseudo-random bytes drawn from `alphabet`.
    fn random_piece(state: &mut u64, alphabet: &[u8], len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                alphabet[(*state >> 33) as usize % alphabet.len()]
            })
            .collect()
    }

    #[test]
    fn heap_and_rank_bucket_paths_merge_identically() {
        // A two-letter alphabet makes overlapping pairs ("aaa", "abab") common, where the
        // order of equal-rank merges decides the result.
        let mut state = 7u64;
        for alphabet in [&b"ab"[..], &b"theroasbz"[..]] {
            let corpus: Vec<String> = (0..30)
                .map(|_| String::from_utf8(random_piece(&mut state, alphabet, 200)).unwrap())
                .collect();
            let o = crate::text::TrainOptions {
                vocab_size: 500,
                ..Default::default()
            };
            let tok = crate::text::train_bpe(corpus, &o).unwrap();
            let m = tok.parts().model.bpe().unwrap();
            for len in [2, 3, 17, 300, 3000] {
                for _ in 0..10 {
                    let piece = random_piece(&mut state, alphabet, len);
                    let (heap, buckets) = both_paths(m, &piece);
                    assert_eq!(heap, buckets, "{}", String::from_utf8_lossy(&piece));
                }
            }
        }
    }

    #[test]
    fn a_merge_naming_an_unknown_token_is_an_error() {
        let vocab: HashMap<String, u32> = [("a".to_string(), 0), ("b".to_string(), 1)].into();
        let err = BpeModel::new(
            vocab,
            vec![("a".into(), "b".into())],
            &BpeOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("model.merges[0]") && err.contains("\"ab\""),
            "{err}"
        );
    }

    #[test]
    fn a_byte_without_a_token_is_an_error() {
        let m = tiny(&[]);
        let err = m
            .encode_piece("az", &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("0x7A"), "{err}");
    }

    #[test]
    fn ignore_merges_takes_a_whole_piece_that_is_a_token() {
        // "abc" is a token, but the merges alone would stop at a + bc.
        let mut vocab: HashMap<String, u32> = HashMap::new();
        for (i, t) in ["a", "b", "c", "bc", "abc"].iter().enumerate() {
            vocab.insert(t.to_string(), i as u32);
        }
        let merges = vec![("b".to_string(), "c".to_string())];
        let plain = BpeModel::new(vocab.clone(), merges.clone(), &BpeOptions::default()).unwrap();
        assert_eq!(tokens(&plain, "abc"), ["a", "bc"]);
        let options = BpeOptions {
            ignore_merges: true,
            ..BpeOptions::default()
        };
        let whole = BpeModel::new(vocab, merges, &options).unwrap();
        assert_eq!(tokens(&whole, "abc"), ["abc"]);
    }
}
