//! NF4 matrices (bitsandbytes' QLoRA format) on the device against the host: the dequantized
//! values bit for bit, products forward and backward through the input (the GEMV up to eight
//! rows, dequantize + GEMM beyond), a QLoRA training step, and its memory: the step holds the
//! NF4 bytes, not a dense copy of every layer.

#[path = "support/relative_error.rs"]
mod relative_error;

use relative_error::relative_error;
use rusting_brain::backend::cuda::{self, device_for_test};
use rusting_brain::models::transformer_lm::{
    train_step, LmConfig, LoraConfig, TransformerLm, LORA_TARGETS,
};
use rusting_brain::nn::Module;
use rusting_brain::ops::quant_matmul::{BlockFormat, QuantizedMatrix};
use rusting_brain::optim::{AdamW, AdamWConfig};
use rusting_brain::{DType, Device, Generator, Tensor};

/// A weight-like [n, k] matrix quantized to NF4 on the host: normal values with row scales
/// from 0.01 to 1, so the absmaxes spread over the dynamic map.
fn nf4_matrix(n: usize, k: usize, seed: u64) -> QuantizedMatrix {
    let w = Tensor::randn(&[n, k], DType::F32, Some(&mut Generator::new(seed))).unwrap();
    let scales: Vec<f32> = (0..n).map(|r| 0.01 + r as f32 / n as f32).collect();
    let w = w.mul(&Tensor::from_vec(scales, &[n, 1]).unwrap()).unwrap();
    QuantizedMatrix::quantize(&w, BlockFormat::Nf4).unwrap()
}

fn host_f32(t: &Tensor) -> Vec<f32> {
    t.to(Device::Cpu, DType::F32).unwrap().to_vec().unwrap()
}

#[test]
fn nf4_dequantization_on_cuda_equals_the_host_bit_for_bit() {
    let Some(cuda) = device_for_test("nf4_dequantization_on_cuda_equals_the_host_bit_for_bit")
    else {
        return;
    };
    // 37 × 768: 444 blocks, so a partial second group of absmaxes; 1 × 64: a single block.
    for (n, k) in [(37, 768), (1, 64)] {
        let w = nf4_matrix(n, k, n as u64);
        let wd = w.to_device(cuda).unwrap();
        for dtype in [DType::F32, DType::BF16] {
            let host = w.dequantize(dtype).unwrap();
            let dev = wd.dequantize(dtype).unwrap();
            assert_eq!((dev.dims(), dev.dtype()), (&[n, k][..], dtype));
            let (h, d) = (host_f32(&host), host_f32(&dev));
            let differ = h.iter().zip(&d).filter(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(differ.count(), 0, "{n}×{k} {dtype:?}");
        }
    }
}

#[test]
fn nf4_products_on_cuda_match_the_cpu_forward_and_backward() {
    let Some(cuda) = device_for_test("nf4_products_on_cuda_match_the_cpu_forward_and_backward")
    else {
        return;
    };
    let (n, k) = (37, 768);
    let w = nf4_matrix(n, k, 3);
    let wd = w.to_device(cuda).unwrap();
    let dense = w.dequantize(DType::F64).unwrap();
    // 1 to 8 rows take the GEMV (3, 5 and 13 as several launches), 40 dequantize + GEMM.
    for m in [1, 2, 3, 5, 8, 13, 40] {
        let x = Tensor::randn(&[m, k], DType::F32, Some(&mut Generator::new(m as u64))).unwrap();
        let dy = Tensor::randn(&[m, n], DType::F32, Some(&mut Generator::new(99))).unwrap();
        let x64 = x.to_dtype(DType::F64).unwrap();
        let want_y = x64.matmul(&dense.t().unwrap()).unwrap();
        let want_dx = dy.to_dtype(DType::F64).unwrap().matmul(&dense).unwrap();
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
            let xd = x.to(cuda, dtype).unwrap().requires_grad_().unwrap();
            let y = wd.matmul_t(&xd).unwrap();
            assert_eq!((y.dims(), y.dtype()), (&[m, n][..], dtype));
            let err = relative_error(&y, &want_y);
            assert!(err < tol, "forward m {m} {dtype:?}: {err:.2e}");
            y.mul(&dy.to(cuda, dtype).unwrap())
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            let err = relative_error(&xd.grad().unwrap(), &want_dx);
            assert!(err < tol, "input gradient m {m} {dtype:?}: {err:.2e}");
        }
    }
    // A leading batch dimension, against the CPU path itself.
    let x = Tensor::randn(&[2, 3, k], DType::F32, Some(&mut Generator::new(9))).unwrap();
    let got = wd.matmul_t(&x.to_device(cuda).unwrap()).unwrap();
    assert_eq!(got.dims(), [2, 3, n]);
    assert!(relative_error(&got, &w.matmul_t(&x).unwrap()) < 1e-5);
}

/// Widths of whole NF4 blocks, an untied head, LoRA on every projection.
fn qlora_model(device: Device) -> TransformerLm {
    let mut c = LmConfig::new(128, 64, 2, 2);
    c.ffn_hidden = 128;
    c.max_seq_len = 32;
    c.tied_embeddings = false;
    let mut m = TransformerLm::new(c, &mut Generator::new(5)).unwrap();
    m.quantize(BlockFormat::Nf4).unwrap();
    m.add_lora(LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: LORA_TARGETS.map(String::from).to_vec(),
        use_rslora: false,
        seed: 5,
    })
    .unwrap();
    m.to_device(device).unwrap();
    m
}

#[test]
fn a_qlora_step_on_cuda_matches_the_cpu_within_bf16_rounding() {
    let Some(cuda) = device_for_test("a_qlora_step_on_cuda_matches_the_cpu_within_bf16_rounding")
    else {
        return;
    };
    let seq: Vec<i64> = (0..33).map(|i| (i * 37 + 11) % 128).collect();
    let x = Tensor::from_vec(seq[..32].to_vec(), &[2, 16]).unwrap();
    let y = Tensor::from_vec(seq[1..].to_vec(), &[2, 16]).unwrap();
    let mut grads = Vec::new();
    let mut losses = Vec::new();
    for device in [Device::Cpu, cuda] {
        let m = qlora_model(device);
        let loss = m.loss(&x, &y).unwrap();
        loss.backward().unwrap();
        losses.push(loss.to_vec_f32().unwrap()[0]);
        // B starts at zero, so A's gradient is zero too; B's carries the signal.
        let b: Vec<Tensor> = m
            .named_parameters()
            .into_iter()
            .filter(|(name, _)| name.ends_with("lora_B.weight"))
            .map(|(_, t)| t.grad().unwrap().to(Device::Cpu, DType::F32).unwrap())
            .collect();
        assert_eq!(b.len(), 14);
        grads.push(b);
    }
    assert!(
        (losses[0] - losses[1]).abs() < 1e-2 * losses[0].abs(),
        "loss cpu {} cuda {}",
        losses[0],
        losses[1]
    );
    for (i, (cpu, dev)) in grads[0].iter().zip(&grads[1]).enumerate() {
        let err = relative_error(dev, cpu);
        assert!(err < 5e-2, "lora_B gradient {i}: {err:.2e}");
    }
}

#[test]
fn a_qlora_training_step_on_cuda_never_holds_every_layer_dense() {
    let test = "a_qlora_training_step_on_cuda_never_holds_every_layer_dense";
    let Some(device) = device_for_test(test) else {
        return;
    };
    let dev = cuda::device(0).unwrap();
    // Weights far larger than the activations: 8 layers of width 1024, 8 tokens.
    let mut c = LmConfig::new(256, 1024, 8, 8);
    c.ffn_hidden = 2816;
    c.max_seq_len = 8;
    c.tied_embeddings = false;
    let mut m = TransformerLm::new_on(c, &mut Generator::new(0), DType::BF16, device).unwrap();
    let dense_bytes: usize = m
        .projections()
        .iter()
        .map(|(_, _, l)| 2 * l.in_features() * l.out_features())
        .sum();
    m.quantize(BlockFormat::Nf4).unwrap();
    m.add_lora(LoraConfig {
        rank: 8,
        alpha: 16.0,
        dropout: 0.0,
        targets: ["q_proj", "v_proj", "down_proj"].map(String::from).to_vec(),
        use_rslora: false,
        seed: 0,
    })
    .unwrap();
    let mut opt = AdamW::new(m.trainable_parameters(), AdamWConfig::default()).unwrap();
    let ids = Tensor::randint(0, 256, &[1, 8], Some(&mut Generator::new(1))).unwrap();
    let batch = [(ids.clone(), ids)];
    train_step(&m, &mut opt, &batch).unwrap();
    dev.synchronize().unwrap();
    let before = dev.peak_memory().unwrap();
    dev.reset_peak_memory().unwrap();
    let in_use = dev.peak_memory().unwrap();
    train_step(&m, &mut opt, &batch).unwrap();
    dev.synchronize().unwrap();
    let step = dev.peak_memory().unwrap().saturating_sub(in_use) as usize;
    // One layer dequantized at a time: the largest BF16 matrix is 5.8 MB, every layer's 201 MB.
    assert!(
        step < dense_bytes / 8,
        "a step took {step} bytes above the {in_use} in use (first peak {before}); every \
         projection dense in BF16 is {dense_bytes}"
    );
}
