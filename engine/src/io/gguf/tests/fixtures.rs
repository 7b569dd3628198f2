//! Dequantization and the llama mapping against files written by the `gguf` Python package
//! (`tests/fixtures/gguf/make_quant_fixture.py`, `make_tiny_llama.py`).

use super::fixture;
use crate::io::gguf::llama::{hf_tensors, hyperparameters, unpermute_rows, HfWeight};
use crate::io::gguf::{quants, GgufFile, Value};
use crate::DType;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_type_dequantizes_to_the_gguf_packages_values_bit_for_bit() {
    let mut f = GgufFile::open(fixture("quants.gguf")).unwrap();
    let mut checked = Vec::new();
    for t in quants::SUPPORTED {
        let (ours, shape) = f.f32_values(t.name).unwrap();
        let (expected, expected_shape) = f.f32_values(&format!("{}.expected", t.name)).unwrap();
        assert_eq!(shape, expected_shape, "{t}");
        assert_eq!(f.tensor_info(t.name).unwrap().ggml_type, *t);
        assert!(ours.iter().all(|x| x.is_finite()), "{t}");
        let first_difference = bits(&ours)
            .iter()
            .zip(bits(&expected))
            .position(|(a, b)| *a != b);
        assert_eq!(first_difference, None, "{t}: the first differing value");
        checked.push(t.name);
    }
    assert_eq!(checked.len(), 11);
}

/// Our quantizer writes the bytes the `gguf` package's quantizer wrote, for every type both
/// write, from the same values.
#[test]
fn every_type_both_write_quantizes_to_the_gguf_packages_bytes() {
    use crate::io::gguf::ggml_type as ty;
    use crate::io::gguf::quantize::quantize;
    let mut f = GgufFile::open(fixture("quants.gguf")).unwrap();
    let (values, _) = f.f32_values("F32").unwrap();
    for t in [ty::F16, ty::BF16, ty::Q8_0, ty::Q4_0, ty::Q4_1, ty::Q5_0] {
        let ours = quantize(t, &values).unwrap();
        let theirs = f.raw(t.name).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{t}");
        let first_difference = ours.iter().zip(&theirs).position(|(a, b)| a != b);
        assert_eq!(first_difference, None, "{t}: the first differing byte");
    }
}

#[test]
fn the_python_writers_metadata_and_alignment_read_back() {
    let mut f = GgufFile::open(fixture("quants.gguf")).unwrap();
    let m = &f.metadata;
    assert_eq!(f.alignment, 64);
    assert_eq!(m.get("test.u8"), Some(&Value::U8(200)));
    assert_eq!(m.get("test.i8"), Some(&Value::I8(-100)));
    assert_eq!(m.get("test.u16"), Some(&Value::U16(60000)));
    assert_eq!(m.get("test.i16"), Some(&Value::I16(-30000)));
    assert_eq!(m.get("test.u32"), Some(&Value::U32(4_000_000_000)));
    assert_eq!(m.get("test.i32"), Some(&Value::I32(-2_000_000_000)));
    assert_eq!(m.get("test.f32"), Some(&Value::F32(1.5)));
    assert_eq!(m.get("test.bool"), Some(&Value::Bool(true)));
    assert_eq!(m.opt_str("test.string").unwrap(), Some("héllo"));
    assert_eq!(m.get("test.u64"), Some(&Value::U64((1 << 63) + 5)));
    assert_eq!(m.get("test.i64"), Some(&Value::I64(-(1 << 62))));
    assert_eq!(m.get("test.f64"), Some(&Value::F64(-2.25)));
    assert_eq!(
        m.opt_strings("test.strings").unwrap().unwrap(),
        ["a", "", "Ġthe"]
    );
    assert_eq!(m.opt_i64s("test.ints").unwrap().unwrap(), [1, -2, 3]);
    let t = f.tensor("F32_3d").unwrap();
    assert_eq!(t.shape(), [2, 3, 4]);
    let expected: Vec<f32> = (0..24).map(|i| i as f32).collect();
    assert_eq!(t.to_vec::<f32>().unwrap(), expected);
}

/// llama.cpp's converter within one head of 4 rows: [a0, a1 | b0, b1] -> [a0, b0, a1, b1].
#[test]
fn unpermute_restores_the_rows_llama_cpp_interleaved() {
    // Two heads of width 4, one column: rows named by their Hugging Face index.
    let gguf = [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0];
    let mut v = gguf.to_vec();
    unpermute_rows(&mut v, &[8, 1], 2).unwrap();
    assert_eq!(v, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    let mut two_cols: Vec<f32> = gguf.iter().flat_map(|&r| [r, -r]).collect();
    unpermute_rows(&mut two_cols, &[8, 2], 2).unwrap();
    assert_eq!(two_cols[2..4], [1.0, -1.0]);
    assert!(unpermute_rows(&mut v, &[8, 1], 3).is_err());
    // An empty weight (a dim of 0 in a corrupt file) is left alone.
    assert!(unpermute_rows::<f32>(&mut [], &[8, 0], 2).is_ok());
    assert!(unpermute_rows::<f32>(&mut [], &[0, 8], 2).is_ok());
}

#[test]
fn tiny_llama_tensors_equal_the_hugging_face_weights_they_came_from() {
    let mut f = GgufFile::open(fixture("tiny_llama.gguf")).unwrap();
    let h = hyperparameters(&f).unwrap();
    assert_eq!(
        (
            h.vocab_size,
            h.d_model,
            h.n_layers,
            h.n_heads,
            h.n_kv_heads,
            h.ffn_hidden
        ),
        (268, 32, 2, 4, 2, 64)
    );
    assert_eq!((h.context_length, h.tied), (64, false));
    let ours = hf_tensors(&mut f, &h, DType::F32, |_, _| false).unwrap();
    let mut expected = GgufFile::open(fixture("tiny_llama_expected.gguf")).unwrap();
    assert_eq!(ours.len(), expected.tensors.len());
    for (name, t) in &ours {
        let HfWeight::Dense(t) = t else {
            panic!("{name} kept its blocks")
        };
        let e = expected.tensor(name).unwrap();
        assert_eq!(t.shape(), e.shape(), "{name}");
        let (a, b) = (t.to_vec::<f32>().unwrap(), e.to_vec::<f32>().unwrap());
        let first_difference = bits(&a).iter().zip(bits(&b)).position(|(x, y)| *x != y);
        assert_eq!(first_difference, None, "{name}");
    }
}
