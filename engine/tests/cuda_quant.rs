//! Products with GGUF block weights on the device (ops/quant_matmul.rs) against the CPU, which
//! dequantizes bit-equal to ggml's reference and multiplies: the GEMV for 1 to 8 activation
//! rows (odd counts run as several launches) and the dequantize-then-GEMM path beyond, in F32
//! and BF16, for Q8_0, Q4_1 and Q4_K, at widths that leave a warp's last step partial.

#[path = "support/relative_error.rs"]
mod relative_error;

use half::f16;
use relative_error::relative_error;
use rusting_brain::backend::cuda::device_for_test;
use rusting_brain::backend::cuda::quant_matmul::BlockFormat;
use rusting_brain::ops::quant_matmul::QuantizedMatrix;
use rusting_brain::{DType, Device, Generator, Tensor};

/// Random blocks of `format` for an [n, k] matrix: random codes, and scales (and mins) that
/// are small normal halves, so every value is finite.
fn random_blocks(format: BlockFormat, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let len = format.matrix_bytes(n, k).unwrap();
    let u = Tensor::rand(&[len], DType::F32, Some(&mut Generator::new(seed))).unwrap();
    let mut bytes: Vec<u8> = u
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| (v * 256.0) as u8)
        .collect();
    let half = |v: f32| f16::from_f32(v).to_le_bytes();
    for (b, block) in bytes.chunks_exact_mut(format.block_bytes()).enumerate() {
        let s = 0.01 + (b % 7) as f32 * 0.003;
        let (d, m) = (half(s), half(-s * 3.0));
        match format {
            BlockFormat::Q8_0 => block[0..2].copy_from_slice(&d),
            BlockFormat::Q4_1 | BlockFormat::Q4_K => {
                block[0..2].copy_from_slice(&d);
                block[2..4].copy_from_slice(&m);
            }
            // NF4 matrices are not a run of fixed blocks; engine/tests/cuda_nf4.rs covers them.
            BlockFormat::Nf4 => unreachable!("random_blocks makes ggml blocks"),
        }
    }
    bytes
}

#[test]
fn quantized_products_on_cuda_equal_the_cpu_dequantized_product() {
    let Some(cuda) =
        device_for_test("quantized_products_on_cuda_equal_the_cpu_dequantized_product")
    else {
        return;
    };
    // 37 rows: partial groups of output rows (8 a block for Q8_0, 4 a warp for Q4_1 and Q4_K),
    // k of 3 Q4_K super-blocks (24 sub-blocks: lanes 24..31 idle). 3 rows: fewer than a warp's
    // 4, so a group repeats its last row; k = 5632 (ffn_down's width): 176 sub-blocks, five
    // full steps of a warp and one of 16 lanes.
    for (n, k) in [(37, 768), (3, 5632)] {
        for (fi, format) in [BlockFormat::Q8_0, BlockFormat::Q4_1, BlockFormat::Q4_K]
            .into_iter()
            .enumerate()
        {
            let blocks = random_blocks(format, n, k, (fi + k) as u64);
            let w = QuantizedMatrix::new(blocks, format, [n, k]).unwrap();
            let wd = w.to_device(cuda).unwrap();
            // The dequantized matrix itself.
            let dense = w.dequantize(DType::F32).unwrap();
            let err = relative_error(&wd.dequantize(DType::F32).unwrap(), &dense);
            assert!(err < 1e-6, "{format:?} {n}×{k} dequantize: {err:.2e}");
            for m in [1, 2, 3, 5, 8, 13] {
                let x = Tensor::randn(&[m, k], DType::F32, Some(&mut Generator::new(m as u64)))
                    .unwrap();
                let want = x
                    .to_dtype(DType::F64)
                    .unwrap()
                    .matmul(&dense.to_dtype(DType::F64).unwrap().t().unwrap())
                    .unwrap();
                for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
                    let xd = x.to(cuda, dtype).unwrap();
                    let got = wd.matmul_t(&xd).unwrap();
                    assert_eq!((got.dims(), got.dtype()), (&[m, n][..], dtype));
                    let err = relative_error(&got, &want);
                    assert!(err < tol, "{format:?} {n}×{k} m {m} {dtype:?}: {err:.2e}");
                }
            }
            // A leading batch dimension, and the CPU path itself.
            let x = Tensor::randn(&[2, 3, k], DType::F32, Some(&mut Generator::new(9))).unwrap();
            let got = wd.matmul_t(&x.to_device(cuda).unwrap()).unwrap();
            let cpu = w.matmul_t(&x).unwrap();
            assert_eq!(got.dims(), [2, 3, n]);
            assert!(
                relative_error(&got, &cpu) < 1e-5,
                "{format:?} {n}×{k} [2, 3, k]"
            );
        }
    }
}

#[test]
fn a_quantized_matrix_whose_bytes_or_inputs_do_not_fit_is_an_error_naming_them() {
    let e = QuantizedMatrix::new(vec![0; 100], BlockFormat::Q8_0, [2, 64])
        .err()
        .unwrap();
    assert!(e.to_string().contains("136 bytes"), "{e}");
    let e = QuantizedMatrix::new(vec![0; 144], BlockFormat::Q4_K, [1, 128])
        .err()
        .unwrap();
    assert!(e.to_string().contains("256 values"), "{e}");
    let w = QuantizedMatrix::new(vec![0; 68], BlockFormat::Q8_0, [2, 32]).unwrap();
    let x = Tensor::zeros(&[3, 16], DType::F32, Device::Cpu).unwrap();
    let e = w.matmul_t(&x).unwrap_err();
    assert!(e.to_string().contains("[..., 32]"), "{e}");
}
