//! Our NF4 against bitsandbytes: `tests/fixtures/nf4/nf4.safetensors`, written by
//! `make_nf4_fixture.py` with bitsandbytes' `quantize_4bit(quant_type="nf4", blocksize=64,
//! compress_statistics=True)` on the CPU, holds for a few matrices the values, every part
//! bitsandbytes stores and its dequantization. Our quantizer must give the same bytes (each
//! part bit-equal, but for the offset: see below) and our dequantization the same values bit
//! for bit, in F32 and BF16.
//!
//! The offset is the absmaxes' mean. bitsandbytes takes torch's F32 `mean()`, whose summation
//! order depends on the device and the CPU's vector width (on this fixture it equals the exact
//! mean rounded to F32 for two matrices and a sequential F32 sum for the third); we take the
//! mean in F64, rounded once. The two may differ by an ulp, never more.

use rb_integration_tests::lm_fixtures::fixture_dir;
use rusting_brain::backend::spec::nf4::Nf4Layout;
use rusting_brain::ops::nf4;
use rusting_brain::ops::quant_matmul::{BlockFormat, QuantizedMatrix};
use rusting_brain::{DType, Tensor};
use std::collections::BTreeMap;

const MATRICES: [&str; 3] = ["normal", "edges", "wide"];

fn fixture() -> BTreeMap<String, Tensor> {
    rusting_brain::io::safetensors::load(fixture_dir("nf4").join("nf4.safetensors")).unwrap()
}

fn part(f: &BTreeMap<String, Tensor>, name: &str, what: &str) -> Tensor {
    f.get(&format!("{name}.{what}"))
        .unwrap_or_else(|| panic!("the fixture has no {name}.{what}"))
        .clone()
}

fn le_bytes(t: &Tensor) -> Vec<u8> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// The bytes bitsandbytes' parts make in our layout, and the matrix's shape.
fn bitsandbytes_bytes(f: &BTreeMap<String, Tensor>, name: &str) -> (Vec<u8>, [usize; 2]) {
    let shape = [
        part(f, name, "input").dims()[0],
        part(f, name, "input").dims()[1],
    ];
    let layout = Nf4Layout::new(shape[0], shape[1]).unwrap();
    let mut bytes = vec![0u8; layout.total_bytes()];
    bytes[layout.codes()].copy_from_slice(&part(f, name, "indices").to_vec::<u8>().unwrap());
    bytes[layout.scales()].copy_from_slice(&le_bytes(&part(f, name, "scales")));
    bytes[layout.offset()].copy_from_slice(&le_bytes(&part(f, name, "offset")));
    bytes[layout.absmax_codes()]
        .copy_from_slice(&part(f, name, "absmax_codes").to_vec::<u8>().unwrap());
    (bytes, shape)
}

#[test]
fn our_nf4_quantization_gives_bitsandbytes_bytes() {
    let f = fixture();
    for name in MATRICES {
        let (want, shape) = bitsandbytes_bytes(&f, name);
        let values = part(&f, name, "input").to_vec::<f32>().unwrap();
        let got = nf4::quantize(&values, shape).unwrap();
        let layout = Nf4Layout::new(shape[0], shape[1]).unwrap();
        let offset = |b: &[u8]| u32::from_le_bytes(b[layout.offset()].try_into().unwrap());
        let ulps = offset(&got).abs_diff(offset(&want));
        assert!(ulps <= 1, "{name}: the offsets are {ulps} ulps apart");
        for (what, range) in [
            ("NF4 indices", layout.codes()),
            ("second-level scales", layout.scales()),
            ("absmax codes", layout.absmax_codes()),
        ] {
            let differ = got[range.clone()]
                .iter()
                .zip(&want[range.clone()])
                .filter(|(a, b)| a != b)
                .count();
            assert_eq!(differ, 0, "{name}: {differ} bytes of the {what} differ");
        }
    }
}

#[test]
fn our_nf4_dequantization_equals_bitsandbytes_bit_for_bit() {
    let f = fixture();
    for name in MATRICES {
        let (bytes, shape) = bitsandbytes_bytes(&f, name);
        let want = part(&f, name, "dequantized").to_vec::<f32>().unwrap();
        let got = nf4::dequantize(&bytes, shape).unwrap();
        let differ = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(differ, 0, "{name}: {differ} F32 values differ");
        // Through the matrix type, to BF16 (round to nearest even, as bitsandbytes rounds).
        let q = QuantizedMatrix::new(bytes, BlockFormat::Nf4, shape).unwrap();
        let got = q.dequantize(DType::BF16).unwrap();
        let want = part(&f, name, "dequantized_bf16");
        assert_eq!(got.dtype(), DType::BF16);
        let bits = |t: &Tensor| -> Vec<u32> {
            t.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        assert_eq!(bits(&got), bits(&want), "{name}: BF16 values differ");
    }
}
