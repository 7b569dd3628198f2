//! Tests of the `.npy` reader and writer.

use super::*;
use crate::data::Dataset;

/// A v1 file with a hand-written header dict and raw data bytes.
fn file(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

fn f32_bytes(v: &[f32], big: bool) -> Vec<u8> {
    v.iter()
        .flat_map(|x| {
            if big {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            }
        })
        .collect()
}

#[test]
fn every_writable_dtype_round_trips() {
    let tensors = [
        Tensor::from_vec(vec![1.5f32, -2.0, 3.25, 0.0, 7.0, 8.0], &[2, 3]).unwrap(),
        Tensor::from_vec(vec![1.5f64, -2.0], &[2]).unwrap(),
        Tensor::from_vec(vec![f16::from_f32(0.5), f16::from_f32(-4.0)], &[2, 1]).unwrap(),
        Tensor::from_vec(vec![i64::MIN, 0, i64::MAX], &[3]).unwrap(),
        Tensor::from_vec(vec![0u32, u32::MAX], &[1, 2]).unwrap(),
        Tensor::from_vec(vec![0u8, 255, 7], &[3, 1, 1]).unwrap(),
        Tensor::from_vec(vec![true, false], &[2]).unwrap(),
        Tensor::from_vec(vec![4.0f32], &[]).unwrap(),
        Tensor::from_vec(Vec::<f32>::new(), &[0, 3]).unwrap(),
    ];
    for t in tensors {
        let bytes = npy_bytes(&t).unwrap();
        assert_eq!(
            (bytes.len() - t.numel() * t.dtype().size_in_bytes()) % 64,
            0
        );
        let back = parse_npy(&bytes).unwrap();
        assert_eq!((back.shape(), back.dtype()), (t.shape(), t.dtype()));
        assert_eq!(back.to_vec_f64().unwrap(), t.to_vec_f64().unwrap());
    }
}

#[test]
fn writing_bf16_is_refused_with_a_hint() {
    let t = Tensor::zeros(&[2], DType::BF16, Device::Cpu).unwrap();
    assert!(npy_bytes(&t).unwrap_err().to_string().contains("bfloat16"));
}

#[test]
fn narrow_integers_widen_to_i64() {
    let d = [255u8, 255, 255, 255, 7, 0, 0, 0];
    let t = parse_npy(&file(
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
        &d,
    ))
    .unwrap();
    assert_eq!(t.dtype(), DType::I64);
    assert_eq!(t.to_vec::<i64>().unwrap(), [-1, 7]);
    let t = parse_npy(&file(
        "{'descr': '|i1', 'fortran_order': False, 'shape': (1,)}",
        &[0xFE],
    ))
    .unwrap();
    assert_eq!(t.to_vec::<i64>().unwrap(), [-2]);
}

#[test]
fn big_endian_data_is_byte_swapped() {
    let d = f32_bytes(&[1.0, -2.5], true);
    let t = parse_npy(&file(
        "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
        &d,
    ))
    .unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, -2.5]);
}

#[test]
fn fortran_order_is_transposed_into_row_major() {
    // The 2x3 matrix [[1, 2, 3], [4, 5, 6]] stored column by column.
    let d = f32_bytes(&[1., 4., 2., 5., 3., 6.], false);
    let t = parse_npy(&file(
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
        &d,
    ))
    .unwrap();
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.to_vec::<f32>().unwrap(), [1., 2., 3., 4., 5., 6.]);
}

#[test]
fn header_keys_may_come_in_any_order_with_double_quotes() {
    let d = f32_bytes(&[3.0], false);
    let t = parse_npy(&file(
        "{\"shape\": (), \"fortran_order\": False, \"descr\": \"<f4\"}   \n",
        &d,
    ))
    .unwrap();
    assert_eq!(t.shape(), &[] as &[usize]);
    assert_eq!(t.item().unwrap(), 3.0);
}

#[test]
fn versions_two_and_three_use_a_four_byte_header_length() {
    for version in [2u8, 3] {
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[version, 0]);
        b.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        b.extend_from_slice(dict.as_bytes());
        b.extend_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(parse_npy(&b).unwrap().to_vec::<f32>().unwrap(), [2.0]);
    }
}

#[test]
fn a_shape_larger_than_the_data_is_refused_before_allocating() {
    let d = f32_bytes(&[1.0], false);
    let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967295, 4294967), }";
    let err = parse_npy(&file(huge, &d)).unwrap_err().to_string();
    assert!(
        err.contains("npy") && err.contains("4 bytes follow"),
        "{err}"
    );
    let overflow = "{'descr': '<f8', 'fortran_order': False, 'shape': (18446744073709551615, 3), }";
    assert!(parse_npy(&file(overflow, &d))
        .unwrap_err()
        .to_string()
        .contains("too large"));
    let short = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    assert!(parse_npy(&file(short, &d)).is_err());
}

#[test]
fn malformed_headers_are_format_errors() {
    let d = f32_bytes(&[1.0], false);
    for dict in [
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<c8', 'fortran_order': False, 'shape': (1,)}",
        "{'descr': '|f4', 'fortran_order': False, 'shape': (1,)}",
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
        "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing",
        "{'descr': '<f4",
    ] {
        match parse_npy(&file(dict, &d)) {
            Err(Error::Format { format: "npy", .. }) => {}
            other => panic!("{dict}: expected an npy format error, got {other:?}"),
        }
    }
    assert!(parse_npy(b"\x93NUMPY\x09\x00").is_err());
    assert!(parse_npy(b"PK\x03\x04").is_err());
    // A header length past the end of the file.
    assert!(parse_npy(b"\x93NUMPY\x01\x00\xff\xff{").is_err());
}

#[test]
fn bool_bytes_other_than_zero_or_one_are_refused() {
    let dict = "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }";
    assert!(parse_npy(&file(dict, &[1, 2])).is_err());
}

#[test]
fn from_npy_pairs_feature_and_target_files() {
    let dir = std::env::temp_dir();
    let (fx, fy) = (
        dir.join(format!("rb_npy_x_{}.npy", std::process::id())),
        dir.join(format!("rb_npy_y_{}.npy", std::process::id())),
    );
    write_npy(
        &fx,
        &Tensor::from_vec(vec![1.0f64, 2., 3., 4.], &[2, 1, 2]).unwrap(),
    )
    .unwrap();
    write_npy(&fy, &Tensor::from_vec(vec![1i64, 0], &[2]).unwrap()).unwrap();
    let d = Dataset::from_npy(&fx, &fy).unwrap();
    std::fs::remove_file(&fx).unwrap();
    std::fs::remove_file(&fy).unwrap();
    assert_eq!(d.features().shape(), &[2, 2]);
    assert_eq!(d.features().dtype(), DType::F32);
    assert_eq!(d.targets().to_vec::<i64>().unwrap(), [1, 0]);
}

#[test]
fn a_format_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("features.npy");
    std::fs::write(&path, b"\x93NUMPY\x01\x00").unwrap();
    let msg = read_npy(&path).unwrap_err().to_string();
    assert!(
        msg.starts_with(&format!("npy: {}: ", path.display())),
        "{msg}"
    );
}
