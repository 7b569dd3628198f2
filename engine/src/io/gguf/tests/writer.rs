//! The writer and quantizers, read back by our reader: metadata of every value type, exact
//! plain types, quantized types within the format's error, alignment, and refusals.

use crate::io::gguf::ggml_type::{self as ty, GgmlType};
use crate::io::gguf::quantize::quantize;
use crate::io::gguf::{quants, Array, GgufFile, GgufWriter, Value};
use half::{bf16, f16};

/// Normal-ish values from a fixed seed (sum of uniforms), with a few outliers, as weights have.
fn weights(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..n)
        .map(|i| {
            let g: f32 = (0..4).map(|_| uniform()).sum::<f32>() - 2.0;
            if i % 97 == 0 {
                g * 0.2
            } else {
                g * 0.02
            }
        })
        .collect()
}

fn round_trip(values: &[f32], shape: &[usize], t: GgmlType) -> Vec<f32> {
    let mut w = GgufWriter::new();
    w.add_tensor("w", shape, values, t).unwrap();
    let mut f = GgufFile::from_bytes(w.to_bytes(), "mem.gguf").unwrap();
    assert_eq!(f.tensor_info("w").unwrap().ggml_type, t);
    let (back, back_shape) = f.f32_values("w").unwrap();
    assert_eq!(back_shape, shape);
    back
}

#[test]
fn metadata_of_every_value_type_reads_back_equal() {
    let values = vec![
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-100)),
        ("u16", Value::U16(60000)),
        ("i16", Value::I16(-30000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("f32", Value::F32(1.5e-5)),
        ("bool", Value::Bool(true)),
        ("string", Value::String("héllo ▁ 🦙".into())),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f64", Value::F64(-2.25e300)),
        (
            "strings",
            Value::Array(Array::String(vec!["a".into(), "".into(), "Ġb c".into()])),
        ),
        ("i32s", Value::Array(Array::I32(vec![1, -2, 3]))),
        ("f32s", Value::Array(Array::F32(vec![0.5, -0.25]))),
        ("bools", Value::Array(Array::Bool(vec![true, false]))),
        ("u8s", Value::Array(Array::U8(vec![1, 2, 255]))),
        (
            "nested",
            Value::Array(Array::Array(vec![
                Array::U64(vec![7]),
                Array::F64(vec![]),
                Array::I16(vec![-1, 1]),
            ])),
        ),
    ];
    let mut w = GgufWriter::new();
    for (k, v) in &values {
        w.add(k, v.clone()).unwrap();
    }
    let f = GgufFile::from_bytes(w.to_bytes(), "mem.gguf").unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.metadata.get("general.alignment"), Some(&Value::U32(32)));
    for (k, v) in &values {
        assert_eq!(f.metadata.get(k), Some(v), "{k}");
    }
}

#[test]
fn f32_f16_and_bf16_tensors_read_back_exactly_as_rounded() {
    let x = weights(3 * 40, 1);
    assert_eq!(round_trip(&x, &[3, 40], ty::F32), x);
    let halves: Vec<f32> = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_eq!(round_trip(&x, &[3, 40], ty::F16), halves);
    let brains: Vec<f32> = x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
    assert_eq!(round_trip(&x, &[3, 40], ty::BF16), brains);
}

/// Largest error over each block of 32, against the block's scale `amax / levels`.
fn worst_error_in_steps(x: &[f32], back: &[f32], levels: f32) -> f32 {
    x.chunks(32)
        .zip(back.chunks(32))
        .map(|(x, b)| {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = amax / levels;
            x.iter()
                .zip(b)
                .map(|(v, w)| (v - w).abs() / step)
                .fold(0f32, f32::max)
        })
        .fold(0f32, f32::max)
}

#[test]
fn q8_0_is_within_half_a_step_of_each_value() {
    let x = weights(4 * 64, 2);
    let back = round_trip(&x, &[4, 64], ty::Q8_0);
    // Half a step, plus the f16 rounding of the scale over up to 127 steps.
    assert!(worst_error_in_steps(&x, &back, 127.0) < 0.5 + 127.0 / 2048.0);
}

#[test]
fn q4_0_and_q5_0_are_within_a_step_of_each_value() {
    let x = weights(4 * 64, 3);
    // The extreme value maps to -8 (-16) exactly; the other sign reaches only +7 (+15), so a
    // value there may be a whole step away. Everything else is within half a step.
    for (t, levels) in [(ty::Q4_0, 8.0), (ty::Q5_0, 16.0)] {
        let back = round_trip(&x, &[4, 64], t);
        let worst = worst_error_in_steps(&x, &back, levels);
        assert!(worst <= 1.0 + levels / 1024.0, "{t}: {worst}");
    }
}

fn relative_rms_error(x: &[f32], back: &[f32]) -> f32 {
    let err: f32 = x.iter().zip(back).map(|(a, b)| (a - b) * (a - b)).sum();
    let norm: f32 = x.iter().map(|a| a * a).sum();
    (err / norm).sqrt()
}

#[test]
fn q4_k_error_is_that_of_a_4_bit_format_and_below_q4_0s() {
    let x = weights(8 * 512, 4);
    let k = relative_rms_error(&x, &round_trip(&x, &[8, 512], ty::Q4_K));
    let q4_0 = relative_rms_error(&x, &round_trip(&x, &[8, 512], ty::Q4_0));
    // Each 32 values get their own scale and min from a least-squares search: the error is a
    // few percent, and lower than Q4_0's single absmax scale.
    assert!(k < 0.1 && k < 0.7 * q4_0, "Q4_K {k}, Q4_0 {q4_0}");
}

#[test]
fn q4_k_keeps_a_zero_block_exact_and_a_constant_one_to_the_f16_min() {
    let mut x = vec![0f32; 256];
    x.extend(std::iter::repeat_n(-0.5f32, 256));
    let back = round_trip(&x, &[2, 256], ty::Q4_K);
    assert!(back[..256].iter().all(|&v| v == 0.0));
    // A constant block is all min: dmin = 0.5 / 63 rounded to f16, times 63.
    let expected = -f16::from_f32(0.5 / 63.0).to_f32() * 63.0;
    assert!(back[256..].iter().all(|&v| v == expected), "{}", back[256]);
}

#[test]
fn quantized_bytes_dequantize_with_the_readers_block_layout() {
    // Every supported type: quantize then dequantize keeps the length and the sign pattern
    // of values far from zero.
    let x = weights(512, 5);
    for t in [
        ty::F16,
        ty::BF16,
        ty::Q8_0,
        ty::Q4_0,
        ty::Q4_1,
        ty::Q5_0,
        ty::Q4_K,
    ] {
        let back = quants::dequantize(t, &quantize(t, &x).unwrap()).unwrap();
        assert_eq!(back.len(), x.len());
        for (a, b) in x.iter().zip(&back) {
            if a.abs() > 0.1 {
                assert_eq!(a.signum(), b.signum(), "{t}: {a} -> {b}");
            }
        }
    }
}

#[test]
fn every_tensor_starts_at_an_aligned_offset() {
    let mut w = GgufWriter::new();
    w.add("general.name", Value::String("x".into())).unwrap();
    w.add_tensor("a", &[3], &[1.0, 2.0, 3.0], ty::F32).unwrap();
    w.add_tensor("b", &[2, 32], &weights(64, 6), ty::Q8_0)
        .unwrap();
    w.add_tensor("c", &[5], &[1.0; 5], ty::F16).unwrap();
    let bytes = w.to_bytes();
    let f = GgufFile::from_bytes(bytes.clone(), "mem.gguf").unwrap();
    assert_eq!(f.data_start % 32, 0);
    for t in &f.tensors {
        assert_eq!(t.offset % 32, 0, "{}", t.name);
    }
    assert_eq!(bytes.len() % 32, 0);
    assert_eq!(f.tensor_info("b").unwrap().dims, vec![32, 2]);
}

#[test]
fn a_row_that_is_not_whole_blocks_is_refused_by_name() {
    let mut w = GgufWriter::new();
    let msg = w
        .add_tensor("blk.0.ffn_down.weight", &[2, 48], &[0.0; 96], ty::Q4_K)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("blk.0.ffn_down.weight") && msg.contains("Q4_K"),
        "{msg}"
    );
}

#[test]
fn a_wrong_value_count_a_repeated_name_or_key_is_refused() {
    let mut w = GgufWriter::new();
    assert!(w.add_tensor("a", &[2, 2], &[0.0; 3], ty::F32).is_err());
    w.add_tensor("a", &[4], &[0.0; 4], ty::F32).unwrap();
    assert!(w.add_tensor("a", &[4], &[0.0; 4], ty::F32).is_err());
    w.add("k", Value::U8(1)).unwrap();
    assert!(w.add("k", Value::U8(1)).is_err());
    assert!(w.add("general.alignment", Value::U32(64)).is_err());
}

#[test]
fn an_unwritable_type_is_refused_with_the_supported_list() {
    let msg = quantize(ty::Q6_K, &[0.0; 256]).unwrap_err().to_string();
    assert!(msg.contains("Q6_K") && msg.contains("Q4_K"), "{msg}");
}
