use super::*;
use crate::cpu::ggml::{quantize, quants};
use crate::cpu::simd::detected;
use crate::cuda::quant_matmul::split;
use crate::spec::ggml::{self as ty, GgmlType};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
            (h % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn ggml(format: BlockFormat) -> GgmlType {
    match format {
        BlockFormat::Q8_0 => ty::Q8_0,
        _ => ty::Q4_1,
    }
}

/// The product against the dense product of the dequantized weight and the activations as
/// the product reads them (rounded to 8 bits, or as given): only f32 rounding apart, and for
/// int8 rows the f16 rounding of each block's sum that Q4_1's offset multiplies.
fn check(format: BlockFormat, activations: Activations) {
    // 19 blocks a row: the SIMD loops' groups of 4 and 8 blocks and their remainders.
    let (n, k, m) = (37, 608, 3);
    let file = quantize::quantize(ggml(format), &values(n * k, 1)).unwrap();
    let dense = quants::dequantize(ggml(format), &file).unwrap();
    let stored = split(format, &file, [n, k]).unwrap();
    let x = values(m * k, 7);
    let got = quant_gemv(format, &stored, [n, k], &x, m, activations).unwrap();
    for i in 0..m {
        let xi = &x[i * k..][..k];
        let read: Vec<f32> = match activations {
            Activations::Int8 => {
                let q = quantize_row(xi);
                (0..k).map(|j| q.q[j] as f32 * q.d[j / BLOCK]).collect()
            }
            Activations::F32 => xi.to_vec(),
        };
        let tolerance = match activations {
            Activations::Int8 => 2e-3,
            Activations::F32 => 1e-5,
        };
        for r in 0..n {
            let want: f32 = (0..k).map(|j| dense[r * k + j] * read[j]).sum();
            let g = got[i * n + r];
            assert!(
                (g - want).abs() <= tolerance * (1.0 + want.abs()),
                "{} {activations:?} row {i} col {r}: {g} vs {want}",
                format.name()
            );
        }
    }
}

#[test]
fn q8_0_blocks_multiply_as_their_dequantized_weights() {
    check(BlockFormat::Q8_0, Activations::Int8);
    check(BlockFormat::Q8_0, Activations::F32);
}

#[test]
fn q4_1_blocks_multiply_as_their_dequantized_weights() {
    check(BlockFormat::Q4_1, Activations::Int8);
    check(BlockFormat::Q4_1, Activations::F32);
}

/// Every kernel this CPU runs against the scalar code, on rows of 1 to 40 blocks (every
/// remainder of the groups of 4 and 8, and several groups).
#[test]
fn each_instruction_sets_kernels_agree_with_the_scalar_code() {
    let isas: Vec<Isa> = [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|&i| i <= detected())
        .collect();
    if isas.is_empty() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_1] {
        for blocks in 1..=40 {
            let (n, k) = (3, blocks * BLOCK);
            let file = quantize::quantize(ggml(format), &values(n * k, blocks as u32)).unwrap();
            let stored = split(format, &file, [n, k]).unwrap();
            let weights = WeightRows::new(format, &stored, [n, k]);
            let x = values(k, 11 + blocks as u32);
            for rows in [
                Rows::Int8(vec![quantize_row(&x)]),
                Rows::F32(vec![f32_row(&x)]),
            ] {
                for r in 0..n {
                    let w = weights.row(r);
                    let want = dot(Isa::Scalar, format, &w, &rows, 0);
                    for &isa in &isas {
                        let got = dot(isa, format, &w, &rows, 0);
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{isa:?} {} {blocks} blocks: {got} vs {want}",
                            format.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn no_activation_rows_give_no_outputs() {
    let file = quantize::quantize(ty::Q8_0, &values(2 * 32, 1)).unwrap();
    let stored = split(BlockFormat::Q8_0, &file, [2, 32]).unwrap();
    let y = quant_gemv(
        BlockFormat::Q8_0,
        &stored,
        [2, 32],
        &[],
        0,
        Activations::Int8,
    )
    .unwrap();
    assert!(y.is_empty());
}

#[test]
fn a_weight_of_the_wrong_size_is_refused() {
    let err = quant_gemv(
        BlockFormat::Q4_1,
        &[0u8; 10],
        [2, 32],
        &[0.0; 32],
        1,
        Activations::Int8,
    )
    .unwrap_err();
    assert!(err.to_string().contains("2×32 Q4_1"), "{err}");
}
