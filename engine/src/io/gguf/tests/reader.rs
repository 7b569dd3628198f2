//! The reader on hand-built files: every value type, alignment, and each error it reports.

use super::builder::{string, Builder};
use crate::io::gguf::{Array, GgufFile, Value};

fn open(b: &Builder) -> crate::Result<GgufFile<std::io::Cursor<Vec<u8>>>> {
    GgufFile::from_bytes(b.bytes(), "test.gguf")
}

fn error(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(bytes, "test.gguf") {
        Ok(_) => panic!("the file was accepted"),
        Err(e) => e.to_string(),
    }
}

fn array(code: u32, n: u64, elements: &[u8]) -> Vec<u8> {
    let mut b = code.to_le_bytes().to_vec();
    b.extend_from_slice(&n.to_le_bytes());
    b.extend_from_slice(elements);
    b
}

#[test]
fn every_metadata_value_type_is_read() {
    let strings = [string("a"), string(""), string("Ġthe")].concat();
    let inner = [array(4, 1, &7u32.to_le_bytes()), array(8, 1, &string("x"))].concat();
    let b = Builder::new()
        .kv("u8", 0, &[200])
        .kv("i8", 1, &[0x9c])
        .kv("u16", 2, &60000u16.to_le_bytes())
        .kv("i16", 3, &(-30000i16).to_le_bytes())
        .kv("u32", 4, &4_000_000_000u32.to_le_bytes())
        .kv("i32", 5, &(-2_000_000_000i32).to_le_bytes())
        .kv("f32", 6, &1.5f32.to_le_bytes())
        .kv("bool", 7, &[1])
        .kv("string", 8, &string("héllo"))
        .kv("strings", 9, &array(8, 3, &strings))
        .kv("nested", 9, &array(9, 2, &inner))
        .kv("u64", 10, &(u64::MAX - 1).to_le_bytes())
        .kv("i64", 11, &i64::MIN.to_le_bytes())
        .kv("f64", 12, &(-2.25f64).to_le_bytes())
        .kv("bools", 9, &array(7, 2, &[0, 1]));
    let f = open(&b).unwrap();
    let m = &f.metadata;
    assert_eq!(m.get("u8"), Some(&Value::U8(200)));
    assert_eq!(m.get("i8"), Some(&Value::I8(-100)));
    assert_eq!(m.get("u16"), Some(&Value::U16(60000)));
    assert_eq!(m.get("i16"), Some(&Value::I16(-30000)));
    assert_eq!(m.get("u32"), Some(&Value::U32(4_000_000_000)));
    assert_eq!(m.get("i32"), Some(&Value::I32(-2_000_000_000)));
    assert_eq!(m.get("f32"), Some(&Value::F32(1.5)));
    assert_eq!(m.get("bool"), Some(&Value::Bool(true)));
    assert_eq!(m.opt_str("string").unwrap(), Some("héllo"));
    assert_eq!(
        m.opt_strings("strings").unwrap().unwrap(),
        &["a".to_string(), "".to_string(), "Ġthe".to_string()]
    );
    assert_eq!(
        m.get("nested"),
        Some(&Value::Array(Array::Array(vec![
            Array::U32(vec![7]),
            Array::String(vec!["x".into()])
        ])))
    );
    assert_eq!(m.get("u64"), Some(&Value::U64(u64::MAX - 1)));
    assert_eq!(m.get("i64"), Some(&Value::I64(i64::MIN)));
    assert_eq!(m.get("f64"), Some(&Value::F64(-2.25)));
    assert_eq!(
        m.get("bools"),
        Some(&Value::Array(Array::Bool(vec![false, true])))
    );
    assert_eq!(m.len(), 15);
}

#[test]
fn versions_two_and_three_read_alike() {
    for version in [2, 3] {
        let mut b = Builder::new()
            .u32_kv("k", 1)
            .f32_tensor("t", &[2], &[1.0, 2.0]);
        b.version = version;
        let mut f = open(&b).unwrap();
        assert_eq!(f.version, version);
        assert_eq!(f.tensor("t").unwrap().to_vec::<f32>().unwrap(), [1.0, 2.0]);
    }
}

#[test]
fn data_starts_at_the_default_alignment_of_32() {
    let b = Builder::new()
        .str_kv("general.name", "x")
        .f32_tensor("a", &[3], &[1.0, 2.0, 3.0])
        .f32_tensor("b", &[1], &[4.0]);
    let bytes = b.bytes();
    let mut f = open(&b).unwrap();
    assert_eq!(f.alignment, 32);
    assert_eq!(f.data_start % 32, 0);
    assert_eq!(f.data_start as usize + b.data.len(), bytes.len());
    assert_eq!(f.tensor_info("b").unwrap().offset, 32);
    assert_eq!(f.tensor("b").unwrap().to_vec::<f32>().unwrap(), [4.0]);
}

#[test]
fn general_alignment_moves_the_data_and_the_offsets() {
    let mut b = Builder::new().u32_kv("general.alignment", 64);
    b.alignment = 64;
    let b = b
        .f32_tensor("a", &[1], &[1.0])
        .f32_tensor("b", &[2], &[5.0, 6.0]);
    let mut f = open(&b).unwrap();
    assert_eq!(f.alignment, 64);
    assert_eq!(f.data_start % 64, 0);
    assert_eq!(f.tensor_info("b").unwrap().offset, 64);
    assert_eq!(f.tensor("b").unwrap().to_vec::<f32>().unwrap(), [5.0, 6.0]);
}

#[test]
fn shapes_are_ggml_dims_reversed() {
    let values: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let b = Builder::new().f32_tensor("w", &[3, 2], &values);
    let mut f = open(&b).unwrap();
    let t = f.tensor("w").unwrap();
    assert_eq!(t.shape(), [2, 3]);
    assert_eq!(t.to_vec::<f32>().unwrap(), values);
}

#[test]
fn an_alignment_that_is_not_a_power_of_two_is_refused_by_key() {
    let msg = error(Builder::new().u32_kv("general.alignment", 48).bytes());
    assert!(
        msg.contains("general.alignment") && msg.contains("48"),
        "{msg}"
    );
}

#[test]
fn a_misaligned_tensor_offset_is_refused_by_name() {
    let mut b = Builder::new().f32_tensor("w", &[1], &[1.0]);
    let at = b.infos[0].len() - 8;
    b.infos[0][at..].copy_from_slice(&4u64.to_le_bytes());
    let msg = error(b.bytes());
    assert!(
        msg.contains("\"w\"") && msg.contains("not a multiple of the alignment 32"),
        "{msg}"
    );
}

#[test]
fn bad_magic_version_one_and_big_endian_files_are_named() {
    let good = Builder::new().bytes();
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(error(bad).contains("not a GGUF file"));
    let mut v1 = good.clone();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(error(v1).contains("version 1"));
    let mut big = good.clone();
    big[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(error(big).contains("big-endian"));
    let mut v9 = good;
    v9[4..8].copy_from_slice(&9u32.to_le_bytes());
    assert!(error(v9).contains("unknown GGUF version 9"));
}

#[test]
fn every_truncation_is_an_error_naming_the_file() {
    let b = Builder::new()
        .str_kv("general.architecture", "llama")
        .kv(
            "tokens",
            9,
            &array(8, 2, &[string("a"), string("b")].concat()),
        )
        .f32_tensor("w", &[4], &[1.0, 2.0, 3.0, 4.0]);
    let bytes = b.bytes();
    for len in 0..bytes.len() {
        let msg = error(bytes[..len].to_vec());
        assert!(msg.contains("test.gguf"), "length {len}: {msg}");
    }
    assert!(GgufFile::from_bytes(bytes, "test.gguf").is_ok());
}

#[test]
fn counts_beyond_the_file_are_refused_before_allocating() {
    let huge = 1u64 << 60;
    let mut header = b"GGUF".to_vec();
    header.extend_from_slice(&3u32.to_le_bytes());
    header.extend_from_slice(&huge.to_le_bytes());
    header.extend_from_slice(&0u64.to_le_bytes());
    assert!(error(header.clone()).contains("tensor count"));
    header[8..16].copy_from_slice(&0u64.to_le_bytes());
    header[16..24].copy_from_slice(&huge.to_le_bytes());
    assert!(error(header).contains("metadata count"));
    let long_string = [huge.to_le_bytes().to_vec(), b"abc".to_vec()].concat();
    let msg = error(Builder::new().kv("s", 8, &long_string).bytes());
    assert!(msg.contains("\"s\"") && msg.contains("truncated"), "{msg}");
    let msg = error(Builder::new().kv("a", 9, &array(6, huge, &[])).bytes());
    assert!(
        msg.contains("\"a\"") && msg.contains("entries need"),
        "{msg}"
    );
}

#[test]
fn unknown_value_and_tensor_types_are_named() {
    let msg = error(Builder::new().kv("weird", 13, &[0; 8]).bytes());
    assert!(
        msg.contains("\"weird\"") && msg.contains("unknown value type 13"),
        "{msg}"
    );
    let msg = error(Builder::new().kv("arr", 9, &array(77, 0, &[])).bytes());
    assert!(
        msg.contains("\"arr\"") && msg.contains("unknown array element type 77"),
        "{msg}"
    );
    let msg = error(Builder::new().tensor("w", &[32], 4, &[0; 18]).bytes());
    assert!(
        msg.contains("\"w\"") && msg.contains("unknown tensor type 4"),
        "{msg}"
    );
}

#[test]
fn a_known_type_without_dequantization_is_refused_when_read() {
    let b = Builder::new().tensor("w", &[256], 10, &[0; 84]);
    let mut f = open(&b).unwrap();
    let msg = f.tensor("w").unwrap_err().to_string();
    assert!(
        msg.contains("\"w\"") && msg.contains("Q2_K is not supported"),
        "{msg}"
    );
}

#[test]
fn tensor_data_past_the_end_is_refused_by_name() {
    let b = Builder::new().f32_tensor("w", &[4], &[1.0, 2.0, 3.0, 4.0]);
    let mut bytes = b.bytes();
    bytes.truncate(bytes.len() - 1);
    let msg = error(bytes);
    assert!(
        msg.contains("\"w\"") && msg.contains("past the end"),
        "{msg}"
    );
    let msg = error(
        Builder::new()
            .tensor("big", &[1 << 40, 1 << 30], 0, &[])
            .bytes(),
    );
    assert!(msg.contains("\"big\""), "{msg}");
}

#[test]
fn rows_must_be_whole_blocks() {
    let msg = error(Builder::new().tensor("q", &[40], 8, &[0; 34]).bytes());
    assert!(
        msg.contains("\"q\"") && msg.contains("not a multiple of the Q8_0 block size 32"),
        "{msg}"
    );
}

#[test]
fn duplicates_bad_bools_bad_ranks_and_deep_nesting_are_refused() {
    let msg = error(Builder::new().u32_kv("k", 1).u32_kv("k", 2).bytes());
    assert!(
        msg.contains("\"k\"") && msg.contains("listed twice"),
        "{msg}"
    );
    let msg = error(
        Builder::new()
            .f32_tensor("t", &[1], &[0.0])
            .f32_tensor("t", &[1], &[0.0])
            .bytes(),
    );
    assert!(
        msg.contains("\"t\"") && msg.contains("listed twice"),
        "{msg}"
    );
    let msg = error(Builder::new().kv("b", 7, &[2]).bytes());
    assert!(msg.contains("\"b\"") && msg.contains("0 or 1"), "{msg}");
    let msg = error(
        Builder::new()
            .tensor("r", &[1, 1, 1, 1, 1], 0, &[0; 4])
            .bytes(),
    );
    assert!(msg.contains("\"r\"") && msg.contains("rank 5"), "{msg}");
    let mut nested = array(4, 0, &[]);
    for _ in 0..20 {
        nested = array(9, 1, &nested);
    }
    let msg = error(Builder::new().kv("deep", 9, &nested).bytes());
    assert!(
        msg.contains("\"deep\"") && msg.contains("nested deeper"),
        "{msg}"
    );
}

#[test]
fn wrong_metadata_types_are_named_by_key() {
    let f = open(&Builder::new().str_kv("n", "x").u32_kv("s", 3)).unwrap();
    let msg = f.metadata.u64("n").unwrap_err().to_string();
    assert!(
        msg.contains("\"n\"") && msg.contains("found string"),
        "{msg}"
    );
    let msg = f.metadata.str("s").unwrap_err().to_string();
    assert!(msg.contains("\"s\"") && msg.contains("found u32"), "{msg}");
    let msg = f.metadata.str("absent").unwrap_err().to_string();
    assert!(msg.contains("\"absent\" is missing"), "{msg}");
}
