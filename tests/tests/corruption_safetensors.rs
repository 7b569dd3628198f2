//! A corrupt safetensors file gives an error, never a panic, and never an allocation of
//! whatever size the file claims: 1,000 seeded corruptions of a valid file, each loaded under
//! `catch_unwind` and a counting allocator.

use rb_integration_tests::alloc_meter::{peak_during, Meter};
use rusting_brain::io::safetensors::{load_bytes, save_bytes};
use rusting_brain::{DType, Tensor};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

#[global_allocator]
static A: Meter = Meter;

const CASES: u64 = 1_000;

/// SplitMix64: a seeded generator that needs no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn valid_file() -> Vec<u8> {
    let t =
        |values: &[f64], shape: &[usize], dtype| Tensor::from_f64s(values, shape, dtype).unwrap();
    let ramp: Vec<f64> = (0..20).map(|i| i as f64 * 0.5 - 3.0).collect();
    let tensors = vec![
        ("model.weight", t(&ramp, &[4, 5], DType::F32)),
        ("model.bias", t(&ramp[..4], &[4], DType::BF16)),
        ("model.norm", t(&ramp[..6], &[2, 3], DType::F16)),
        ("stats.mean", t(&ramp[..3], &[3], DType::F64)),
        ("tokens", t(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::I64)),
        ("ids", t(&[7.0, 9.0], &[2], DType::U32)),
        (
            "bytes",
            t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &[7], DType::U8),
        ),
        ("mask", t(&[1.0, 0.0, 1.0, 1.0, 0.0], &[5], DType::Bool)),
        ("empty", t(&[], &[0, 3], DType::F32)),
    ];
    let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    save_bytes(&tensors, Some(meta)).unwrap()
}

fn header_len(file: &[u8]) -> usize {
    u64::from_le_bytes(file[..8].try_into().unwrap()) as usize
}

/// Replaces the header with `header`, keeping the data, and fixes the length prefix.
fn with_header(file: &[u8], header: &str) -> Vec<u8> {
    let data = &file[8 + header_len(file)..];
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Rewrites one number inside a `data_offsets` pair, keeping the file framed consistently.
fn wrong_offset(file: &[u8], rng: &mut Rng) -> Vec<u8> {
    let header = std::str::from_utf8(&file[8..8 + header_len(file)]).unwrap();
    let spots: Vec<usize> = header
        .match_indices("\"data_offsets\":[")
        .map(|(i, m)| i + m.len())
        .collect();
    let at = spots[rng.below(spots.len())];
    let end = at + header[at..].find(']').unwrap();
    let (a, b) = header[at..end].split_once(',').unwrap();
    let pick = |rng: &mut Rng, old: &str| -> String {
        let old: u64 = old.parse().unwrap();
        match rng.below(5) {
            0 => (old + 1 + rng.below(16) as u64).to_string(),
            1 => old.saturating_sub(1 + rng.below(16) as u64).to_string(),
            2 => u64::MAX.to_string(),
            3 => (1u64 << (32 + rng.below(31))).to_string(),
            _ => rng.next().to_string(),
        }
    };
    let (a, b) = if rng.below(2) == 0 {
        (pick(rng, a), b.to_string())
    } else {
        (a.to_string(), pick(rng, b))
    };
    with_header(file, &format!("{}{a},{b}{}", &header[..at], &header[end..]))
}

/// One seeded corruption and a description of it for the failure message.
fn corrupt(file: &[u8], rng: &mut Rng) -> (Vec<u8>, String) {
    let mut out = file.to_vec();
    let hlen = header_len(file);
    match rng.below(6) {
        0 => {
            let flips = 1 + rng.below(4);
            for _ in 0..flips {
                let bit = rng.below(out.len() * 8);
                out[bit / 8] ^= 1 << (bit % 8);
            }
            (out, format!("{flips} bit flips"))
        }
        1 => {
            let len = rng.below(out.len());
            out.truncate(len);
            (out, format!("truncated to {len} bytes"))
        }
        2 => {
            let claimed = match rng.below(6) {
                0 => u64::MAX,
                1 => 1 << 40,
                2 => 1 << 63,
                3 => (hlen + 1 + rng.below(64)) as u64,
                4 => hlen.saturating_sub(1 + rng.below(64)) as u64,
                _ => rng.next(),
            };
            out[..8].copy_from_slice(&claimed.to_le_bytes());
            (out, format!("header length {claimed}"))
        }
        3 => {
            let n = 1 + rng.below(8);
            for _ in 0..n {
                let at = 8 + rng.below(hlen);
                out[at] = rng.next() as u8;
            }
            (out, format!("{n} random bytes in the header"))
        }
        4 => (wrong_offset(file, rng), "a wrong data offset".to_string()),
        _ => {
            // Structural JSON damage: a digit, a quote or a bracket swapped for another.
            let header = &mut out[8..8 + hlen];
            let spots: Vec<usize> = (0..header.len())
                .filter(|&i| b"0123456789\"[]{}:,".contains(&header[i]))
                .collect();
            let at = spots[rng.below(spots.len())];
            header[at] = b"0123456789\"[]{}:,-"[rng.below(18)];
            (out, format!("JSON byte {at} replaced"))
        }
    }
}

/// Loads `bytes` under catch_unwind; panics (failing the test) if the load panicked or its
/// peak allocation exceeded the bound. Returns whether the load succeeded.
fn load_checked(bytes: &[u8], what: &str) -> bool {
    let bound = 16 * bytes.len() + 64 * 1024;
    let (result, peak) =
        peak_during(|| catch_unwind(AssertUnwindSafe(|| load_bytes(bytes).is_ok())));
    let ok = result.unwrap_or_else(|_| panic!("load_bytes panicked on {what}"));
    assert!(
        peak <= bound,
        "{what}: peak allocation {peak} B exceeds {bound} B for {} input bytes",
        bytes.len()
    );
    ok
}

#[test]
fn the_uncorrupted_file_loads() {
    let file = valid_file();
    assert!(load_checked(&file, "the valid file"));
    assert_eq!(load_bytes(&file).unwrap().len(), 9);
}

#[test]
fn a_thousand_seeded_corruptions_give_errors_not_panics_and_allocate_within_the_file_size() {
    let file = valid_file();
    let mut rng = Rng(0x5AFE_7E45);
    let mut errors = 0;
    for case in 0..CASES {
        let (bytes, what) = corrupt(&file, &mut rng);
        if !load_checked(&bytes, &format!("case {case} ({what})")) {
            errors += 1;
        }
    }
    // Most corruptions must be caught; a flip inside tensor data legitimately loads.
    assert!(
        errors > CASES / 2,
        "only {errors} of {CASES} corruptions were rejected"
    );
}

#[test]
fn huge_header_lengths_are_rejected_without_allocating_them() {
    let file = valid_file();
    for claimed in [u64::MAX, 1 << 40, 1 << 32, (file.len() - 7) as u64] {
        let mut bytes = file.clone();
        bytes[..8].copy_from_slice(&claimed.to_le_bytes());
        assert!(!load_checked(&bytes, &format!("header length {claimed}")));
    }
}
