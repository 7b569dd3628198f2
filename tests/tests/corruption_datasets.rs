//! The dataset readers (CSV, NPY, IDX) on corrupted input: each of 1,000 seeded corruptions
//! per format must give `Ok` or a format error naming that format, never a panic, and the read
//! must never hold more memory than a small multiple of the file's size, whatever sizes a
//! corrupt header claims.

use rb_integration_tests::alloc_meter::{peak_during, Meter};
use rusting_brain::data::{csv, idx, npy, CsvOptions};
use rusting_brain::{Error, Generator, Result, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};

#[global_allocator]
static A: Meter = Meter;

const CORRUPTIONS: usize = 1000;

/// The most a read may hold at once: the decoded values plus bookkeeping, never a size taken
/// from the file.
fn allocation_bound(len: usize) -> usize {
    16 * len + 64 * 1024
}

/// A corruption of a valid file, with the byte ranges where sizes live so some corruptions can
/// aim at them.
struct Target<'a> {
    format: &'static str,
    valid: &'a [u8],
    /// Offsets of 4-byte (or 2-byte, for `short_fields`) little/big-endian size fields.
    size_fields: &'a [(usize, usize)],
    /// Text snippets worth splicing in (huge numbers, quotes, delimiters).
    splices: &'a [&'a [u8]],
}

fn pick(g: &mut Generator, n: usize) -> usize {
    if n == 0 {
        0
    } else {
        g.integers(0, n as i64, 1)[0] as usize
    }
}

/// One seeded corruption; returns the bytes and a description for failure messages.
fn corrupt(t: &Target, g: &mut Generator) -> (Vec<u8>, String) {
    let mut b = t.valid.to_vec();
    let len = b.len();
    match pick(g, 6) {
        0 => {
            let flips = 1 + pick(g, 8);
            for _ in 0..flips {
                let bit = pick(g, len * 8);
                b[bit / 8] ^= 1 << (bit % 8);
            }
            (b, format!("{flips} bit flips"))
        }
        1 => {
            let at = pick(g, len);
            b.truncate(at);
            (b, format!("truncated to {at} bytes"))
        }
        2 => {
            let n = 1 + pick(g, 16);
            for _ in 0..n {
                let at = pick(g, len);
                b[at] = pick(g, 256) as u8;
            }
            (b, format!("{n} random bytes overwritten"))
        }
        3 if !t.size_fields.is_empty() => {
            let (at, width) = t.size_fields[pick(g, t.size_fields.len())];
            let value: u8 = [0xFF, 0x7F, 0x00, 0x80][pick(g, 4)];
            for x in &mut b[at..at + width] {
                *x = value;
            }
            (b, format!("size field at {at} set to {value:#04x} bytes"))
        }
        4 if !t.splices.is_empty() => {
            let s = t.splices[pick(g, t.splices.len())];
            let at = pick(g, len + 1);
            let replace = pick(g, (len - at).min(s.len()) + 1);
            b.splice(at..at + replace, s.iter().copied());
            (
                b,
                format!("{:?} spliced in at {at}", String::from_utf8_lossy(s)),
            )
        }
        _ => {
            let at = pick(g, len);
            let n = 1 + pick(g, (len - at).min(8));
            b.drain(at..at + n);
            (b, format!("{n} bytes deleted at {at}"))
        }
    }
}

/// Runs the corruptions against `read`, failing on a panic, an error of the wrong kind, or an
/// allocation above the bound.
fn check_reader<T>(t: &Target, seed: u64, read: impl Fn(&[u8]) -> Result<T>) {
    if let Err(e) = read(t.valid) {
        panic!("{}: the uncorrupted file must read, got {e}", t.format);
    }
    let mut g = Generator::new(seed);
    let (mut oks, mut errs) = (0, 0);
    for i in 0..CORRUPTIONS {
        let (bytes, what) = corrupt(t, &mut g);
        let (outcome, peak) = peak_during(|| catch_unwind(AssertUnwindSafe(|| read(&bytes))));
        let Ok(result) = outcome else {
            panic!("{}: corruption {i} ({what}) panicked the reader", t.format);
        };
        match result {
            Ok(_) => oks += 1,
            Err(Error::Format { format, .. }) if format == t.format => errs += 1,
            Err(e) => panic!(
                "{}: corruption {i} ({what}) gave an error that is not a {} format error: {e}",
                t.format, t.format
            ),
        }
        let bound = allocation_bound(bytes.len());
        assert!(
            peak <= bound,
            "{}: corruption {i} ({what}) allocated {peak} bytes for a {}-byte file (bound {bound})",
            t.format,
            bytes.len()
        );
    }
    // Both outcomes occur, so the corruptions reach past the first check.
    assert!(oks > 0 && errs > 0, "{}: {oks} ok, {errs} errors", t.format);
}

/// A CSV with a quoted header, CRLF lines, blank trailing lines and, for classification, a
/// quoted label column holding doubled quotes.
fn valid_csv(with_species: bool) -> Vec<u8> {
    let mut g = Generator::new(11);
    let mut text = String::from("sepal length,\"petal, width\",score");
    if with_species {
        text.push_str(",species");
    }
    text.push_str("\r\n");
    let species = ["setosa", "versicolor", "\"vir\"\"ginica\""];
    for row in 0..60 {
        let v = g.normal(3);
        text.push_str(&format!("{:.3},{:.4},{:.2}", v[0], v[1] * 10.0, v[2]));
        if with_species {
            text.push(',');
            text.push_str(species[row % 3]);
        }
        text.push_str("\r\n");
    }
    text.push_str("\r\n\r\n");
    text.into_bytes()
}

const CSV_SPLICES: &[&[u8]] = &[
    b"\"",
    b",",
    b"\n",
    b"\r",
    b"\"\"",
    b",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,",
    b"\xEF\xBB\xBF",
    b"\xFF\xFE",
    b"1e400",
    b"NaN",
    b"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
];

#[test]
fn corrupted_csv_files_never_panic_or_overallocate() {
    let classes = valid_csv(true);
    let target = Target {
        format: "csv",
        valid: &classes,
        size_fields: &[],
        splices: CSV_SPLICES,
    };
    let opts = CsvOptions::classification("species");
    check_reader(&target, 1, |b| csv::parse_csv(b, &opts));

    let numbers = valid_csv(false);
    let target = Target {
        valid: &numbers,
        ..target
    };
    let regression = CsvOptions::regression("score");
    check_reader(&target, 2, |b| csv::parse_csv(b, &regression));
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The NPY header's size-bearing places: the header length and the digits of the shape.
fn npy_target_fields(file: &[u8]) -> Vec<(usize, usize)> {
    let mut fields = vec![(8, 2)];
    if let Some(open) = find(file, b"'shape': (") {
        fields.push((open + 10, 2));
    }
    fields
}

#[test]
fn corrupted_npy_files_never_panic_or_overallocate() {
    let mut g = Generator::new(3);
    let values: Vec<f32> = g.normal(120).into_iter().map(|x| x as f32).collect();
    let matrix = npy::npy_bytes(&Tensor::from_vec(values, &[20, 6]).unwrap()).unwrap();
    let labels: Vec<i64> = (0..50).map(|i| i % 4).collect();
    let vector = npy::npy_bytes(&Tensor::from_vec(labels, &[50]).unwrap()).unwrap();
    let cube: Vec<f64> = g.uniform(60);
    let mut fortran = npy::npy_bytes(&Tensor::from_vec(cube, &[3, 4, 5]).unwrap()).unwrap();
    let at = find(&fortran, b"False").unwrap();
    fortran[at..at + 5].copy_from_slice(b"True ");
    let flags = npy::npy_bytes(&Tensor::from_vec(vec![true, false, true], &[3]).unwrap()).unwrap();

    let splices: &[&[u8]] = &[
        // Sizes that overflow, and sizes that fit in memory arithmetic but not in the file.
        b"18446744073709551615",
        b"4294967295",
        b"99999999999, 3",
        b"65535, 65535",
        b"4294967295, 4294967295",
        b"0, 4294967295, 4294967295",
        b"'<f8'",
        b"'>i4'",
        b"'|b1'",
        b"True",
        b"(",
        b")",
        b"'",
        b"\x02\x00\xff\xff\xff\xff",
    ];
    for (seed, file) in [matrix, vector, fortran, flags].iter().enumerate() {
        let fields = npy_target_fields(file);
        let target = Target {
            format: "npy",
            valid: file,
            size_fields: &fields,
            splices,
        };
        check_reader(&target, 100 + seed as u64, npy::parse_npy);
    }
}

#[test]
fn corrupted_idx_files_never_panic_or_overallocate() {
    let pixels: Vec<u8> = (0..10 * 8 * 8).map(|i| (i * 37 % 256) as u8).collect();
    let images = idx::idx_bytes(&Tensor::from_vec(pixels, &[10, 8, 8]).unwrap()).unwrap();
    let mut g = Generator::new(5);
    let values: Vec<f32> = g.normal(40).into_iter().map(|x| x as f32).collect();
    let floats = idx::idx_bytes(&Tensor::from_vec(values, &[8, 5]).unwrap()).unwrap();
    // i16 labels, written by hand since the writer covers u8/f32/f64 only.
    let mut labels = vec![0, 0, 0x0B, 1, 0, 0, 0, 30];
    for i in 0..30i16 {
        labels.extend_from_slice(&(i - 10).to_be_bytes());
    }

    let splices: &[&[u8]] = &[
        b"\xff\xff\xff\xff",
        b"\x00\x00\x08\xff",
        b"\x00\x00\x0e\x04",
        b"\x00\x00\x00\x00",
    ];
    for (seed, file) in [images, floats, labels].iter().enumerate() {
        let ndims = file[3] as usize;
        let fields: Vec<(usize, usize)> =
            (0..ndims).map(|i| (4 + 4 * i, 4)).chain([(2, 2)]).collect();
        let target = Target {
            format: "idx",
            valid: file,
            size_fields: &fields,
            splices,
        };
        check_reader(&target, 200 + seed as u64, idx::parse_idx);
    }
}
