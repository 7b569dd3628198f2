//! The language model on the GPU follows the CPU: same logits in F32, close losses under BF16
//! mixed precision, the same greedy tokens from the cached decode loop, and training that
//! lowers the loss.

use rusting_brain::amp::autocast;
use rusting_brain::models::transformer_lm::generate::{
    generate, Flow, GenerateOptions, SamplingOptions,
};
use rusting_brain::models::transformer_lm::Precision;
use rusting_brain::models::transformer_lm::{train_step, LmConfig, TransformerLm};
use rusting_brain::nn::Module;
use rusting_brain::ops::linear_loss::linear_cross_entropy;
use rusting_brain::ops::loss::CrossEntropyOptions;
use rusting_brain::optim::{AdamW, AdamWConfig};
use rusting_brain::{backend::cuda, no_grad, DType, Device, Generator, Tensor};

fn config() -> LmConfig {
    let mut c = LmConfig::new(300, 64, 2, 8);
    c.n_kv_heads = 2;
    c.ffn_hidden = 96;
    c.max_seq_len = 64;
    c.init_std = 0.1;
    c
}

fn pair(cpu: &TransformerLm, d: Device) -> TransformerLm {
    TransformerLm::from_tensors(cpu.config.clone(), &cpu.state_dict(), DType::F32, d).unwrap()
}

fn tokens(n: usize, seed: u64) -> Tensor {
    Tensor::randint(0, 300, &[2, n], Some(&mut Generator::new(seed))).unwrap()
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .to_device(Device::Cpu)
        .unwrap()
        .to_vec_f32()
        .unwrap()
}

#[test]
fn cuda_lm_forward_loss_and_decode_follow_the_cpu() {
    let Some(d) = cuda::device_for_test("cuda_lm_forward_loss_and_decode_follow_the_cpu") else {
        return;
    };
    let cpu = TransformerLm::new(config(), &mut Generator::new(0)).unwrap();
    let mut gpu = pair(&cpu, d);
    gpu.set_precision(Precision::Full);
    let x = tokens(40, 1);
    let (a, b) = (
        no_grad(|| cpu.forward(&x)).unwrap(),
        no_grad(|| gpu.forward(&x)).unwrap(),
    );
    let worst = host(&a)
        .iter()
        .zip(host(&b))
        .map(|(p, q)| (p - q).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "F32 logits differ by {worst}");

    gpu.set_precision(Precision::Auto);
    let y = tokens(40, 2);
    let (lc, lg) = (
        cpu.loss(&x, &y).unwrap().item().unwrap(),
        gpu.loss(&x, &y).unwrap().item().unwrap(),
    );
    assert!(
        (lc - lg).abs() < 2e-2 * lc,
        "mixed-precision loss {lg} vs CPU {lc}"
    );

    gpu.set_precision(Precision::Full);
    let opts = GenerateOptions {
        max_new_tokens: 16,
        sampling: SamplingOptions::greedy(),
        ..Default::default()
    };
    let prompts = vec![vec![5, 6, 7], vec![9, 1, 250, 4, 4]];
    let none = &mut |_: usize, _: u32| Ok(Flow::Continue);
    let on_cpu = generate(&cpu, &prompts, &opts, none).unwrap();
    let on_gpu = generate(&gpu, &prompts, &opts, &mut |_, _| Ok(Flow::Continue)).unwrap();
    assert_eq!(on_cpu, on_gpu);
}

#[test]
fn cuda_lm_training_in_mixed_precision_lowers_the_loss() {
    let Some(d) = cuda::device_for_test("cuda_lm_training_in_mixed_precision_lowers_the_loss")
    else {
        return;
    };
    let model = TransformerLm::new_on(config(), &mut Generator::new(3), DType::F32, d).unwrap();
    let mut opt = AdamW::named(
        model.named_parameters(),
        AdamWConfig {
            lr: 3e-3,
            ..Default::default()
        },
    )
    .unwrap();
    // A repeating pattern the model can learn: next = (token * 7 + 3) mod 300.
    let seq: Vec<i64> = (0..33)
        .scan(1i64, |t, _| {
            let v = *t;
            *t = (*t * 7 + 3) % 300;
            Some(v)
        })
        .collect();
    let x = Tensor::from_vec(seq[..32].to_vec(), &[1, 32])
        .unwrap()
        .to_device(d)
        .unwrap();
    let y = Tensor::from_vec(seq[1..].to_vec(), &[1, 32])
        .unwrap()
        .to_device(d)
        .unwrap();
    let batch = [(x, y)];
    let first = train_step(&model, &mut opt, &batch)
        .unwrap()
        .0
        .item()
        .unwrap();
    let mut last = first;
    for _ in 0..40 {
        last = train_step(&model, &mut opt, &batch)
            .unwrap()
            .0
            .item()
            .unwrap();
    }
    assert!(last < 0.3 * first, "loss {first} -> {last}");
}

/// Parameter gradients of the loss on CUDA in F32 follow the CPU's: the training graph (one
/// q/k/v product and one gate/up product split into views, the packed SwiGLU gradient joined
/// without a copy) gives each parameter its own gradient.
#[test]
fn cuda_lm_parameter_gradients_follow_the_cpu() {
    let Some(d) = cuda::device_for_test("cuda_lm_parameter_gradients_follow_the_cpu") else {
        return;
    };
    let cpu = TransformerLm::new(config(), &mut Generator::new(4)).unwrap();
    let mut gpu = pair(&cpu, d);
    gpu.set_precision(Precision::Full);
    let (x, y) = (tokens(24, 5), tokens(24, 6));
    cpu.loss(&x, &y).unwrap().backward().unwrap();
    gpu.loss(&x, &y).unwrap().backward().unwrap();
    let gpu_params = gpu.named_parameters();
    for ((name, p), (_, q)) in cpu.named_parameters().iter().zip(&gpu_params) {
        let (a, b) = (host(&p.grad().unwrap()), host(&q.grad().unwrap()));
        let scale = a.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .map(|(u, v)| (u - v).abs())
            .fold(0f32, f32::max);
        assert!(
            worst < 2e-3 * scale,
            "{name}: gradients differ by {worst} (scale {scale})"
        );
    }
}

/// Under mixed precision the final norm writes the head's BF16 states itself, as each layer's
/// norm writes its products' input, instead of F32 states that the head's product casts (and
/// whose gradient it casts back). The loss and the gradients are those of the F32 states cast
/// by the head: one rounding either way.
#[test]
fn cuda_lm_final_norm_in_bf16_gives_the_loss_of_the_cast_states() {
    let Some(d) =
        cuda::device_for_test("cuda_lm_final_norm_in_bf16_gives_the_loss_of_the_cast_states")
    else {
        return;
    };
    let model = TransformerLm::new_on(config(), &mut Generator::new(7), DType::F32, d).unwrap();
    // 64 targets: the mean's scale, 1/64, rounds to nothing in BF16, so the states' gradient
    // takes no rounding that the cast path's does not.
    let (x, y) = (
        tokens(32, 8).to_device(d).unwrap(),
        tokens(32, 9).to_device(d).unwrap(),
    );
    let grads = |loss: Tensor| {
        loss.backward().unwrap();
        let out: Vec<Vec<f32>> = model
            .named_parameters()
            .iter()
            .map(|(_, p)| host(&p.grad().unwrap()))
            .collect();
        for (_, p) in model.named_parameters() {
            p.set_grad(None);
        }
        (host(&loss)[0], out)
    };
    let (fused, fused_grads) = grads(model.loss(&x, &y).unwrap());
    let cast_by_head = autocast(Some(DType::BF16), || {
        linear_cross_entropy(
            &model.hidden(&x, None)?,
            &model.embed_tokens.weight,
            &y,
            CrossEntropyOptions::default(),
        )
    })
    .unwrap();
    assert_eq!(
        model.hidden(&x, None).unwrap().dtype(),
        DType::F32,
        "hidden keeps the stream's dtype"
    );
    let (cast, cast_grads) = grads(cast_by_head);
    assert!(
        (fused - cast).abs() <= 1e-6 * cast.abs(),
        "loss {fused} with the norm writing BF16, {cast} with the head casting F32"
    );
    for ((name, _), (a, b)) in model
        .named_parameters()
        .iter()
        .zip(fused_grads.iter().zip(&cast_grads))
    {
        let scale = b.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(b)
            .map(|(u, v)| (u - v).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= 1e-4 * scale,
            "{name}: gradients differ by {worst} (scale {scale})"
        );
    }
}
