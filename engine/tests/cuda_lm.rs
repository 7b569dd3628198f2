//! The language model on the GPU follows the CPU: same logits in F32, close losses under BF16
//! mixed precision, the same greedy tokens from the cached decode loop, and training that
//! lowers the loss.

use rusting_brain::amp::autocast;
use rusting_brain::models::transformer_lm::generate::{
    generate, Flow, GenerateOptions, SamplingOptions,
};
use rusting_brain::models::transformer_lm::Precision;
use rusting_brain::models::transformer_lm::{
    train_step, LmConfig, LoraConfig, TrainGraph, TransformerLm,
};
use rusting_brain::nn::Module;
use rusting_brain::ops::linear_loss::linear_cross_entropy;
use rusting_brain::ops::loss::CrossEntropyOptions;
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer, Schedule, StepOutcome};
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
    let mut opt = adamw(&model);
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
/// whose gradient it casts back). The loss is that of the F32 states cast by the head. So are
/// the gradients when the mean's scale is a power of two; otherwise the states' gradient, now
/// BF16, takes one more rounding (2^-9 at most, relative) than the F32 one did.
#[test]
fn cuda_lm_final_norm_in_bf16_gives_the_loss_of_the_cast_states() {
    let Some(d) =
        cuda::device_for_test("cuda_lm_final_norm_in_bf16_gives_the_loss_of_the_cast_states")
    else {
        return;
    };
    let model = TransformerLm::new_on(config(), &mut Generator::new(7), DType::F32, d).unwrap();
    let x = tokens(32, 8).to_device(d).unwrap();
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
    let compare = |y: &Tensor, tolerance: f32| {
        let (fused, fused_grads) = grads(model.loss(&x, y).unwrap());
        let cast_by_head = autocast(Some(DType::BF16), || {
            linear_cross_entropy(
                &model.hidden(&x, None)?,
                &model.embed_tokens.weight,
                y,
                CrossEntropyOptions::default(),
            )
        })
        .unwrap();
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
                worst <= tolerance * scale,
                "{name}: gradients differ by {worst} (scale {scale})"
            );
        }
    };
    assert_eq!(
        model.hidden(&x, None).unwrap().dtype(),
        DType::F32,
        "hidden keeps the stream's dtype"
    );
    // 64 targets: the mean's scale, 1/64, is exact in BF16.
    let y = tokens(32, 9);
    compare(&y.to_device(d).unwrap(), 1e-4);
    // 56 counted, 8 ignored: 1/56 is not.
    let mut ignored = y.to_vec::<i64>().unwrap();
    for t in ignored.iter_mut().step_by(9) {
        *t = -100;
    }
    let ignored = Tensor::from_vec(ignored, &[2, 32])
        .unwrap()
        .to_device(d)
        .unwrap();
    compare(&ignored, 1e-2);
}

/// AdamW at a rate of 3e-3 over every parameter of `model`.
fn adamw(model: &TransformerLm) -> AdamW {
    AdamW::named(
        model.named_parameters(),
        AdamWConfig {
            lr: 3e-3,
            ..Default::default()
        },
    )
    .unwrap()
}

/// A model and its AdamW under a warm-up-and-cosine schedule with clipping, on `d`.
fn trainer(d: Device, seed: u64) -> (TransformerLm, AdamW) {
    let model = TransformerLm::new_on(config(), &mut Generator::new(seed), DType::F32, d).unwrap();
    let mut opt = adamw(&model);
    opt.set_schedule(Some(Schedule::WarmupCosine {
        peak_lr: 3e-3,
        min_lr: 3e-4,
        warmup_steps: 2,
        total_steps: 20,
    }))
    .unwrap();
    opt.set_max_grad_norm(Some(0.5)).unwrap();
    (model, opt)
}

/// Step `s`'s two micro-batches: other tokens at every step, so a replay that read stale
/// inputs would show.
fn step_batches(s: u64, d: Device) -> Vec<(Tensor, Tensor)> {
    (0..2)
        .map(|k| {
            let at = |t: Tensor| t.to_device(d).unwrap();
            (
                at(tokens(32, 100 + 4 * s + k)),
                at(tokens(32, 200 + 4 * s + k)),
            )
        })
        .collect()
}

/// The largest difference between the two models' parameters, over the largest value.
fn parameters_apart(a: &TransformerLm, b: &TransformerLm) -> f32 {
    let (mut worst, mut scale) = (0f32, 1e-6f32);
    for ((_, p), (_, q)) in a.named_parameters().iter().zip(&b.named_parameters()) {
        for (u, v) in host(p).iter().zip(host(q)) {
            worst = worst.max((u - v).abs());
            scale = scale.max(u.abs());
        }
    }
    worst / scale
}

/// Steps replayed from a CUDA graph train as the steps run op by op: the same losses, rates,
/// step counts and parameters, with new batches at every step and a scheduled rate that the
/// device works out. A changed rate (now fixed, a kernel argument) is captured again.
#[test]
fn cuda_lm_steps_replayed_from_a_graph_follow_the_steps_op_by_op() {
    let Some(d) =
        cuda::device_for_test("cuda_lm_steps_replayed_from_a_graph_follow_the_steps_op_by_op")
    else {
        return;
    };
    let ((plain, mut plain_opt), (replayed, mut replayed_opt)) = (trainer(d, 11), trainer(d, 11));
    let mut graph = TrainGraph::new();
    let compare =
        |s: u64, plain_opt: &mut AdamW, replayed_opt: &mut AdamW, graph: &mut TrainGraph| {
            let batches = step_batches(s, d);
            let (want, want_outcome) = train_step(&plain, plain_opt, &batches).unwrap();
            let (got, got_outcome) = graph.step(&replayed, replayed_opt, &batches).unwrap();
            let (want, got) = (want.item().unwrap(), got.item().unwrap());
            assert!(
                (want - got).abs() <= 1e-3 * want.abs(),
                "step {s}: loss {got} replayed, {want} op by op"
            );
            match (want_outcome, got_outcome) {
                (
                    StepOutcome::Queued {
                        step: a,
                        lr: la,
                        grad_norm: na,
                    },
                    StepOutcome::Queued {
                        step: b,
                        lr: lb,
                        grad_norm: nb,
                    },
                ) => {
                    assert_eq!((a, la), (b, lb), "step {s}: (step, rate)");
                    let (na, nb) = (na.item().unwrap(), nb.item().unwrap());
                    assert!((na - nb).abs() <= 1e-3 * na, "step {s}: norm {nb} vs {na}");
                }
                other => panic!("step {s}: fused steps queue, got {other:?}"),
            }
        };
    for s in 0..6 {
        compare(s, &mut plain_opt, &mut replayed_opt, &mut graph);
        assert_eq!(graph.is_captured(), s >= 1, "captured after step {s}");
    }
    assert_eq!(replayed_opt.step_count(), 6);
    assert_eq!(replayed_opt.lr(), plain_opt.lr());
    let apart = parameters_apart(&plain, &replayed);
    assert!(apart < 1e-3, "parameters {apart} apart after six steps");

    for opt in [&mut plain_opt, &mut replayed_opt] {
        opt.set_schedule(None).unwrap();
        opt.set_lr(1e-3).unwrap();
    }
    for s in 6..9 {
        compare(s, &mut plain_opt, &mut replayed_opt, &mut graph);
        assert_eq!(graph.is_captured(), s >= 7, "captured again after step {s}");
    }
    let apart = parameters_apart(&plain, &replayed);
    assert!(apart < 1e-3, "parameters {apart} apart after nine steps");
}

/// A step that draws random numbers on the way (LoRA's dropout: the seed is a kernel
/// argument, so replays would repeat the masks) is not captured; the steps run op by op.
#[test]
fn cuda_lm_a_step_with_dropout_is_not_captured() {
    let Some(d) = cuda::device_for_test("cuda_lm_a_step_with_dropout_is_not_captured") else {
        return;
    };
    let mut model =
        TransformerLm::new_on(config(), &mut Generator::new(12), DType::F32, d).unwrap();
    model
        .add_lora(LoraConfig {
            rank: 4,
            dropout: 0.1,
            ..Default::default()
        })
        .unwrap();
    let mut opt = AdamW::new(model.trainable_parameters(), AdamWConfig::default()).unwrap();
    let mut graph = TrainGraph::new();
    for s in 0..4 {
        let (loss, _) = graph.step(&model, &mut opt, &step_batches(s, d)).unwrap();
        assert!(loss.item().unwrap().is_finite(), "step {s}");
        assert!(!graph.is_captured(), "step {s} was captured");
    }
    assert_eq!(opt.step_count(), 4);
}
