//! Seeded corruptions of a valid file. Each returns the corrupt bytes and a description that
//! names the corruption precisely enough to redo it by hand.

use super::rng::Rng;

/// Numbers a corrupt header or JSON field may hold: past i32, u32, f64's exact integers, u64,
/// negative, zero, not finite, and too long for any integer type.
pub const HOSTILE_NUMBERS: &[&str] = &[
    "2147483648",
    "4294967295",
    "4294967296",
    "1099511627776",
    "9007199254740992",
    "18446744073709551615",
    "-1",
    "0",
    "1e999",
    "99999999999999999999999999",
];

/// The same as raw little-endian words, for binary size fields.
const HOSTILE_WORDS: &[u64] = &[
    1 << 31,
    u32::MAX as u64,
    1 << 40,
    1 << 53,
    u64::MAX,
    i64::MAX as u64,
];

/// A well-framed edit of a valid file that puts a hostile value where the format keeps sizes
/// (a JSON field, a shape, a header); `None` when it does not apply to these bytes.
pub type Semantic = fn(&[u8], &mut Rng) -> Option<(Vec<u8>, String)>;

pub struct Corruption {
    pub bytes: Vec<u8>,
    pub what: String,
}

/// One seeded corruption of `valid`. `header_span` bytes at the start hold the format's binary
/// sizes and offsets, where size-field corruptions aim.
pub fn corrupt(
    valid: &[u8],
    header_span: usize,
    semantic: Option<Semantic>,
    rng: &mut Rng,
) -> Corruption {
    let kind = rng.below(9);
    if kind >= 7 {
        if let Some((bytes, what)) = semantic.and_then(|f| f(valid, rng)) {
            return Corruption { bytes, what };
        }
    }
    let mut b = valid.to_vec();
    let len = b.len().max(1);
    let what = match kind {
        1 => {
            let at = rng.below(b.len());
            b.truncate(at);
            format!("truncated to {at} bytes")
        }
        2 => {
            let n = 1 + rng.below(16);
            for _ in 0..n {
                let at = rng.below(b.len());
                if let Some(x) = b.get_mut(at) {
                    *x = rng.below(256) as u8;
                }
            }
            format!("{n} random bytes overwritten")
        }
        3 => size_field(&mut b, header_span, rng),
        4 => match hostile_number(&mut b, rng) {
            Some(what) => what,
            None => flips(&mut b, rng),
        },
        5 => {
            let at = rng.below(b.len());
            let n = (1 + rng.below(64)).min(b.len() - at.min(b.len()));
            b.drain(at..at + n);
            format!("{n} bytes deleted at {at}")
        }
        6 => {
            let from = rng.below(b.len());
            let n = (1 + rng.below(256)).min(b.len() - from.min(b.len()));
            let chunk = b[from..from + n].to_vec();
            let at = rng.below(len + 1).min(b.len());
            b.splice(at..at, chunk);
            format!("{n} bytes from {from} copied in at {at}")
        }
        _ => flips(&mut b, rng),
    };
    Corruption { bytes: b, what }
}

fn flips(b: &mut [u8], rng: &mut Rng) -> String {
    let n = 1 + rng.below(8);
    for _ in 0..n {
        let bit = rng.below(b.len() * 8);
        if let Some(x) = b.get_mut(bit / 8) {
            *x ^= 1 << (bit % 8);
        }
    }
    format!("{n} bit flips")
}

/// A 4- or 8-byte little-endian word inside the header set to a hostile value.
fn size_field(b: &mut [u8], header_span: usize, rng: &mut Rng) -> String {
    let width = if rng.below(2) == 0 { 4 } else { 8 };
    let span = header_span.min(b.len());
    if span < width {
        return flips(b, rng);
    }
    let at = rng.below(span - width + 1);
    let value = *rng.pick(HOSTILE_WORDS);
    let bytes = value.to_le_bytes();
    let big_endian = rng.below(2) == 1;
    for i in 0..width {
        b[at + i] = if big_endian {
            bytes[width - 1 - i]
        } else {
            bytes[i]
        };
    }
    let order = if big_endian { "big" } else { "little" };
    format!("{width}-byte {order}-endian word at {at} set to {value}")
}

/// One run of ASCII digits (a number in a JSON field, a header dict, a CSV cell) replaced by a
/// hostile number; `None` when the file holds no digits.
pub fn hostile_number(b: &mut Vec<u8>, rng: &mut Rng) -> Option<String> {
    let runs = digit_runs(b);
    if runs.is_empty() {
        return None;
    }
    let (start, end) = *rng.pick(&runs);
    let number = *rng.pick(HOSTILE_NUMBERS);
    let old = String::from_utf8_lossy(&b[start..end]).into_owned();
    b.splice(start..end, number.bytes());
    Some(format!("number {old} at {start} replaced by {number}"))
}

/// The (start, end) of every maximal run of ASCII digits.
fn digit_runs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            runs.push((start, i));
        } else {
            i += 1;
        }
    }
    runs
}
