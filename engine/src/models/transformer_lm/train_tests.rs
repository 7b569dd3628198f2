use super::*;
use crate::nn::Module;
use crate::optim::{AdamW, AdamWConfig, Optimizer, Schedule};
use crate::{DType, Device, Generator, Tensor};

fn config() -> LmConfig {
    let mut c = LmConfig::new(50, 16, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 32;
    c.max_seq_len = 16;
    c
}

/// Two micro-batches of random windows for `step`, a pure function of (seed, step) like the
/// token files' windows.
fn batches(step: u64) -> Vec<(Tensor, Tensor)> {
    let corpus: Vec<i64> = (0..400).map(|i| (i * 7 + i / 13) % 50).collect();
    let mut gen = Generator::from_state(9, step * 1000);
    (0..2)
        .map(|_| {
            let starts = gen.integers(0, (corpus.len() - 9) as i64, 3);
            let (mut x, mut y) = (Vec::new(), Vec::new());
            for s in starts {
                x.extend_from_slice(&corpus[s as usize..s as usize + 8]);
                y.extend_from_slice(&corpus[s as usize + 1..s as usize + 9]);
            }
            (
                Tensor::from_vec(x, &[3, 8]).unwrap(),
                Tensor::from_vec(y, &[3, 8]).unwrap(),
            )
        })
        .collect()
}

fn optimizer(m: &TransformerLm) -> AdamW {
    let mut opt = AdamW::new(
        m.parameters(),
        AdamWConfig {
            lr: 3e-3,
            ..Default::default()
        },
    )
    .unwrap();
    opt.set_schedule(Some(Schedule::WarmupCosine {
        peak_lr: 3e-3,
        min_lr: 3e-4,
        warmup_steps: 3,
        total_steps: 12,
    }))
    .unwrap();
    opt.set_max_grad_norm(Some(0.5)).unwrap();
    opt
}

fn run(m: &TransformerLm, opt: &mut AdamW, steps: std::ops::Range<u64>) -> Vec<f32> {
    steps
        .map(|s| {
            let (loss, _) = train_step(m, opt, &batches(s)).unwrap();
            loss.item().unwrap() as f32
        })
        .collect()
}

#[test]
fn a_resumed_run_repeats_the_uninterrupted_losses_bit_for_bit() {
    let straight = TransformerLm::new(config(), &mut Generator::new(1)).unwrap();
    let mut opt = optimizer(&straight);
    let all = run(&straight, &mut opt, 0..12);

    let first = TransformerLm::new(config(), &mut Generator::new(1)).unwrap();
    let mut opt = optimizer(&first);
    let mut resumed = run(&first, &mut opt, 0..6);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    let state = TrainState {
        step: 6,
        data_seed: 9,
        extra: serde_json::json!({"note": "half"}),
    };
    checkpoint::save(&path, &first, Some(&opt), &state).unwrap();
    drop((first, opt));

    let ckpt = checkpoint::load(&path).unwrap();
    assert_eq!(ckpt.train, state);
    let second = ckpt.model(DType::F32, Device::Cpu).unwrap();
    let mut opt = AdamW::new(second.parameters(), AdamWConfig::default()).unwrap();
    ckpt.restore_optimizer(&mut opt).unwrap();
    resumed.extend(run(&second, &mut opt, ckpt.train.step..12));
    assert_eq!(
        all.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        resumed.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        "{all:?}\n{resumed:?}"
    );
    assert!(all[11] < all[0], "training must lower the loss: {all:?}");
}

#[test]
fn accumulated_micro_batches_give_the_gradient_of_the_whole_batch() {
    let m = TransformerLm::new(config(), &mut Generator::new(2)).unwrap();
    let parts = batches(0);
    let whole_x = Tensor::cat(&[parts[0].0.clone(), parts[1].0.clone()], 0).unwrap();
    let whole_y = Tensor::cat(&[parts[0].1.clone(), parts[1].1.clone()], 0).unwrap();
    let p = m.parameters();
    m.loss(&whole_x, &whole_y).unwrap().backward().unwrap();
    let whole: Vec<f32> = p[3].grad().unwrap().to_vec_f32().unwrap();
    m.zero_grad();
    for (x, y) in &parts {
        m.loss(x, y)
            .unwrap()
            .mul_scalar(0.5)
            .unwrap()
            .backward()
            .unwrap();
    }
    let accumulated = p[3].grad().unwrap().to_vec_f32().unwrap();
    for (a, b) in whole.iter().zip(&accumulated) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
}

#[test]
fn evaluation_reports_mean_loss_and_its_perplexity() {
    let m = TransformerLm::new(config(), &mut Generator::new(3)).unwrap();
    let parts = batches(1);
    let by_hand: f64 = parts
        .iter()
        .map(|(x, y)| m.loss(x, y).unwrap().item().unwrap())
        .sum::<f64>()
        / 2.0;
    let e = evaluate(&m, parts.into_iter().map(Ok)).unwrap();
    assert!((e.loss - by_hand).abs() < 1e-6);
    assert!((e.perplexity - by_hand.exp()).abs() < 1e-4);
    assert_eq!(e.tokens, 48);
    // An untrained model is close to uniform over the vocabulary.
    assert!((e.loss - 50f64.ln()).abs() < 0.5, "{}", e.loss);
}

#[test]
fn a_file_without_the_header_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bare.safetensors");
    let m = TransformerLm::new(config(), &mut Generator::new(4)).unwrap();
    crate::io::safetensors::save(&path, &m.state_dict(), None).unwrap();
    let msg = checkpoint::load(&path).err().unwrap().to_string();
    assert!(msg.contains("not a RustingBrain checkpoint"), "{msg}");
}

/// Off CUDA a `TrainGraph` is `train_step`: the same losses, bit for bit, and nothing captured.
#[test]
fn a_train_graph_on_the_cpu_steps_as_train_step_does() {
    let plain = TransformerLm::new(config(), &mut Generator::new(5)).unwrap();
    let mut opt = optimizer(&plain);
    let want = run(&plain, &mut opt, 0..4);

    let through = TransformerLm::new(config(), &mut Generator::new(5)).unwrap();
    let mut opt = optimizer(&through);
    let mut graph = TrainGraph::new();
    let got: Vec<f32> = (0..4)
        .map(|s| {
            let (loss, _) = graph.step(&through, &mut opt, &batches(s)).unwrap();
            loss.item().unwrap() as f32
        })
        .collect();
    assert_eq!(
        want.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        got.iter().map(|l| l.to_bits()).collect::<Vec<_>>()
    );
    assert!(!graph.is_captured());
    assert_eq!(opt.step_count(), 4);
}
