//! Language-model benchmarks on the GPU, beside `torch_lm_bench.py` (run both in one call):
//! - train: tokens/s, MFU and peak memory of full training steps (BF16 mixed precision, fused
//!   cross-entropy, fused AdamW), shaped exactly as `benches/torch_lm_bench.py` builds them:
//!   `--shape 124m` (the default: d 768, 12 layers, 12 heads, SwiGLU 2048, no biases, tied
//!   embeddings, vocab 50304, batch 16 x 1024) or `--shape 1.1b` (d 2048, 22 layers, 32 heads
//!   over 4 kv heads, ffn 5632, vocab 32000, untied, batch 8 x 2048), or the single flags.
//!   Timed like the script: 5 warm-up steps, then 20. `--graph` replays each step from a CUDA
//!   graph (`TrainGraph`: captured at the second warm-up step).
//! - decode: greedy tokens/s of a 1.1B LLaMA shape (d 2048, 22 layers, 32 heads, 4 kv heads,
//!   ffn 5632, vocab 32000) in BF16, a 128-token prompt then 256 new tokens, batch 1 and 16.
//!
//! - quant: the weight products of one batch-1 decode token alone, BF16 on cuBLAS beside the
//!   GGUF-block GEMV (Q8_0, Q4_K, Q4_1), as time and as a fraction of the bandwidth.
//! - finetune: full fine-tuning, LoRA and QLoRA (NF4 or Q8_0 base) at the `train` shape:
//!   tokens/s, base-weight bytes and peak memory (`lm_finetune.rs`; `--base`, `--lora-rank`).
//!
//! cargo build --release -p rb_benches --bin lm_bench && target/release/lm_bench [train|decode|quant|finetune|all]
//! Prints one JSON object per line. Without a usable GPU it prints {"error": ...} and exits 2.

#[path = "common.rs"]
mod common;
#[path = "lm_finetune.rs"]
mod finetune;

use rusting_brain::backend::cuda;
use rusting_brain::backend::cuda::quant_matmul::BlockFormat;
use rusting_brain::models::transformer_lm::generate::{
    generate, Flow, GenerateOptions, SamplingOptions,
};
use rusting_brain::models::transformer_lm::{train_step, LmConfig, TrainGraph, TransformerLm};
use rusting_brain::nn::Module;
use rusting_brain::ops::quant_matmul::QuantizedMatrix;
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer};
use rusting_brain::{DType, Device, Error, Generator, Result, Tensor};
use serde_json::json;
use std::time::Instant;

const GIB: f64 = (1u64 << 30) as f64;

/// The value after flag `name` on the command line.
fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

/// `--shard-state`: ZeRO-1 (`Optimizer::shard_state`); with the launcher's variables set
/// (RB_RANK, RB_WORLD_SIZE, RB_DIST_DIR) `train_step` reduces through NCCL, a run of one too.
fn sharded_state() -> bool {
    std::env::args().any(|a| a == "--shard-state")
}

/// The training steps, through a CUDA graph under `--graph`.
struct Steps(Option<TrainGraph>);

impl Steps {
    fn new() -> Steps {
        Steps(
            std::env::args()
                .any(|a| a == "--graph")
                .then(TrainGraph::new),
        )
    }

    fn step(
        &mut self,
        model: &TransformerLm,
        opt: &mut AdamW,
        batches: &[(Tensor, Tensor)],
    ) -> Result<Tensor> {
        Ok(match &mut self.0 {
            Some(graph) => graph.step(model, opt, batches)?.0,
            None => train_step(model, opt, batches)?.0,
        })
    }

    fn captured(&self) -> bool {
        self.0.as_ref().is_some_and(TrainGraph::is_captured)
    }
}

/// A numeric flag; under `--shape`, the named shape's value unless the flag is given.
fn arg(name: &str, default: usize) -> usize {
    let shaped = match flag("--shape").as_deref() {
        Some("1.1b") => match name {
            "--batch" => Some(8),
            "--seq" => Some(2048),
            "--vocab" => Some(32000),
            "--d" => Some(2048),
            "--layers" => Some(22),
            "--heads" => Some(32),
            "--kv-heads" => Some(4),
            "--ffn" => Some(5632),
            _ => None,
        },
        _ => None,
    };
    flag(name)
        .and_then(|v| v.parse().ok())
        .or(shaped)
        .unwrap_or(default)
}

/// The head is untied under `--untied` or `--shape 1.1b` (TinyLlama's layout).
fn untied() -> bool {
    std::env::args().any(|a| a == "--untied") || flag("--shape").as_deref() == Some("1.1b")
}

/// The bench model, its optimizer and the one batch every step trains on.
type Setup = (TransformerLm, AdamW, [(Tensor, Tensor); 1]);

/// The bench model's shape: 124M LLaMA unless `--shape` or the flags say otherwise.
fn bench_config() -> LmConfig {
    let mut c = LmConfig::new(
        arg("--vocab", 50304),
        arg("--d", 768),
        arg("--layers", 12),
        12,
    );
    c.n_heads = arg("--heads", 12);
    c.n_kv_heads = arg("--kv-heads", c.n_heads);
    c.ffn_hidden = arg("--ffn", c.ffn_hidden);
    c.tied_embeddings = !untied();
    c.max_seq_len = arg("--seq", 1024);
    // `--experts E --top-k K`: Mixtral's shape, each MLP a mixture of E experts of --ffn.
    if let Some(e) = flag("--experts").and_then(|e| e.parse().ok()) {
        c.family = rusting_brain::models::transformer_lm::Family::Mixtral;
        c.n_experts = Some(e);
        c.experts_per_token = Some(arg("--top-k", 2));
    }
    c
}

/// The parameters a token passes through: all but the experts it was not routed to.
fn active_parameters(c: &LmConfig, params: usize) -> usize {
    match (c.n_experts, c.experts_per_token) {
        (Some(e), Some(k)) => params - (e - k) * 3 * c.d_model * c.ffn_hidden * c.n_layers,
        _ => params,
    }
}

/// The bench model, its AdamW and one batch.
fn setup(d: Device) -> Result<Setup> {
    let (batch, seq) = (arg("--batch", 16), arg("--seq", 1024));
    let c = bench_config();
    let model = TransformerLm::new_on(c.clone(), &mut Generator::new(0), DType::F32, d)?;
    let mut opt = AdamW::new(
        model.parameters(),
        AdamWConfig {
            lr: 3e-4,
            ..Default::default()
        },
    )?;
    if sharded_state() {
        opt.shard_state()?;
    }
    let mut gen = Generator::new(1);
    let x = Tensor::randint(0, c.vocab_size as i64, &[batch, seq], Some(&mut gen))?.to_device(d)?;
    let y = Tensor::randint(0, c.vocab_size as i64, &[batch, seq], Some(&mut gen))?.to_device(d)?;
    Ok((model, opt, [(x, y)]))
}

fn train(dev: &cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    let (batch, seq, steps) = (arg("--batch", 16), arg("--seq", 1024), arg("--steps", 20));
    let (model, mut opt, batches) = setup(d)?;
    let c = model.config.clone();
    let params = model.num_parameters();
    let mut steps_run = Steps::new();
    for _ in 0..5 {
        steps_run.step(&model, &mut opt, &batches)?;
    }
    dev.synchronize()?;
    let t = Instant::now();
    let mut loss = None;
    for _ in 0..steps {
        loss = Some(steps_run.step(&model, &mut opt, &batches)?);
    }
    dev.synchronize()?;
    let dt = t.elapsed().as_secs_f64() / steps as f64;
    let loss = loss.map(|l| l.item()).transpose()?.unwrap_or(f64::NAN);
    let mut phases = phases(dev, &model, &batches[0])?;
    // The host's time to queue one whole step from an idle device: when it nears step_ms, the
    // device waits on the host and launches, not kernels, bound the step.
    let mut enqueue = vec![];
    for _ in 0..5 {
        dev.synchronize()?;
        let t = Instant::now();
        steps_run.step(&model, &mut opt, &batches)?;
        enqueue.push(t.elapsed().as_secs_f64() * 1e3);
    }
    dev.synchronize()?;
    enqueue.sort_by(|a, b| a.total_cmp(b));
    phases["step_enqueue"] = json!((enqueue[2] * 100.0).round() / 100.0);
    let (n, l, dm, tk) = (
        active_parameters(&c, params) as f64,
        c.n_layers as f64,
        c.d_model as f64,
        (batch * seq) as f64,
    );
    let flops = 6.0 * n * tk + 12.0 * l * dm * seq as f64 * tk;
    Ok(json!({
        "name": format!("rusting_brain {} {} train, bf16 mixed", c.family.model_type(), flag("--shape").unwrap_or_else(|| format!("{}x{}", c.d_model, c.n_layers))),
        "params_m": (params as f64 / 1e5).round() / 10.0,
        "active_params_m": (n / 1e5).round() / 10.0,
        "batch": batch, "seq": seq,
        "reduces": rusting_brain::dist::current()?.reduces(), "shard_state": sharded_state(),
        "cuda_graph": steps_run.captured(),
        "step_ms": (dt * 1e5).round() / 100.0,
        "tokens_per_s": (tk / dt).round(),
        "mfu_pct_of_989tf": (flops / dt / 989e12 * 1000.0).round() / 10.0,
        "mfu_pct_of_790tf": (flops / dt / 790e12 * 1000.0).round() / 10.0,
        "loss": (loss * 1000.0).round() / 1000.0,
        "peak_mem_gib": (dev.peak_memory()? as f64 / GIB * 10.0).round() / 10.0,
        "phases_ms": phases,
    }))
}

/// One training step inside the profiler's capture range, after three warm-up steps: run under
/// `ncu --profile-from-start off` to time each kernel of exactly one step.
fn profile(dev: &cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    let (model, mut opt, batches) = setup(d)?;
    let mut steps = Steps::new();
    for _ in 0..3 {
        steps.step(&model, &mut opt, &batches)?;
    }
    dev.synchronize()?;
    dev.profiler_capture(true)?;
    steps.step(&model, &mut opt, &batches)?;
    dev.synchronize()?;
    dev.profiler_capture(false)?;
    Ok(json!({"name": "one profiled training step"}))
}

/// Where a step's time goes: host time to enqueue the forward, then forward and backward each
/// timed with the device synchronized (median of 5).
fn phases(
    dev: &cuda::CudaDevice,
    model: &TransformerLm,
    (x, y): &(Tensor, Tensor),
) -> Result<serde_json::Value> {
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let (mut enqueue, mut fwd, mut bwd) = (vec![], vec![], vec![]);
    for _ in 0..5 {
        dev.synchronize()?;
        let t = Instant::now();
        let loss = model.loss(x, y)?;
        enqueue.push(ms(t));
        dev.synchronize()?;
        fwd.push(ms(t));
        let t = Instant::now();
        loss.backward()?;
        dev.synchronize()?;
        bwd.push(ms(t));
        model.zero_grad();
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        (v[v.len() / 2] * 100.0).round() / 100.0
    };
    Ok(json!({"forward_enqueue": med(enqueue), "forward": med(fwd), "backward": med(bwd)}))
}

fn decode(dev: &cuda::CudaDevice, d: Device, batch: usize) -> Result<serde_json::Value> {
    let mut c = LmConfig::new(32000, 2048, 22, 32);
    c.n_kv_heads = 4;
    c.ffn_hidden = 5632;
    // As the anchor sets max_position_embeddings.
    c.max_seq_len = 4096;
    let mut model = TransformerLm::new_on(c, &mut Generator::new(0), DType::BF16, d)?;
    // `--quant q8_0|q4_k|q4_1`: every projection and the head in that format (the embedding
    // stays BF16), as `load_gguf` keeps a quantized file's weights.
    let weights = match flag("--quant") {
        Some(name) => {
            let format = [BlockFormat::Q8_0, BlockFormat::Q4_K, BlockFormat::Q4_1]
                .into_iter()
                .find(|f| f.name().eq_ignore_ascii_case(&name))
                .ok_or_else(|| Error::invalid("lm_bench", format!("unknown --quant {name}")))?;
            model.quantize(format)?;
            format.name()
        }
        None => "bf16",
    };
    // `--context N`: the cache holds N positions at the last of the 256 new tokens (the
    // prompt is N - 256 long); 384 by default (a 128-token prompt). `--no-graph` runs each
    // step op by op instead of replaying its CUDA graph.
    const NEW: usize = 256;
    let context = arg("--context", 128 + NEW).max(NEW + 1);
    let graph = !std::env::args().any(|a| a == "--no-graph");
    let mut gen = Generator::new(2);
    let prompt: Vec<u32> = gen
        .integers(0, 32000, context - NEW)
        .into_iter()
        .map(|t| t as u32)
        .collect();
    let prompts = vec![prompt; batch];
    // Whole call (prefill and capture included), and the steady state: from the 8th token on.
    let run = |n: usize| -> Result<(f64, f64)> {
        let opts = GenerateOptions {
            max_new_tokens: n,
            sampling: SamplingOptions::greedy(),
            cuda_graph: graph,
            ..Default::default()
        };
        dev.synchronize()?;
        let t = Instant::now();
        let mut marks = Vec::new();
        let out = generate(&model, &prompts, &opts, &mut |row, _| {
            if row == 0 {
                marks.push(Instant::now());
            }
            Ok(Flow::Continue)
        })?;
        dev.synchronize()?;
        assert!(out.iter().all(|o| o.len() == n));
        let steady = (marks[n - 1] - marks[7]).as_secs_f64() / (n - 8) as f64;
        Ok((t.elapsed().as_secs_f64(), steady))
    };
    run(16)?;
    let (dt, steady) = run(NEW)?;
    Ok(json!({
        "name": format!("rusting_brain greedy decode, 1.1B LLaMA shape, {weights} weights, batch {batch}, context {context}, {}", if graph { "CUDA graph" } else { "op by op" }),
        "tokens_per_s": ((batch * NEW) as f64 / dt).round(),
        "ms_per_step": (dt / NEW as f64 * 1e5).round() / 100.0,
        "steady_tokens_per_s": (batch as f64 / steady).round(),
        "steady_ms_per_step": (steady * 1e5).round() / 100.0,
    }))
}

/// The weights one decode token of the 1.1B LLaMA shape reads, [rows, cols], with the 22
/// layers' matrices of one input width stacked: q, k, v and o (input 2048), gate and up (2048),
/// down (input 5632), and the head. Four products read the whole model, so launch costs stay
/// far below the kernels' time and the figure is the kernels' own bandwidth.
fn decode_products() -> Vec<[usize; 2]> {
    vec![
        [22 * (2048 + 256 + 256 + 2048), 2048],
        [22 * 2 * 5632, 2048],
        [22 * 2048, 5632],
        [32000, 2048],
    ]
}

/// The weight products of one batch-1 decode token alone (each matrix far larger than L2), in
/// BF16 on cuBLAS and from GGUF blocks on our GEMV: time per token, and the bytes read over
/// that time against the H200's 4.3 TB/s copy bandwidth.
fn quant(dev: &cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    let products = decode_products();
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut random_bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    };
    let mut rows = Vec::new();
    let x = |k: usize| Tensor::randn(&[1, k], DType::BF16, Some(&mut Generator::new(k as u64)));
    let xs: Vec<Tensor> = [2048, 5632]
        .into_iter()
        .map(|k| x(k)?.to_device(d))
        .collect::<Result<_>>()?;
    let input = |k: usize| if k == 2048 { &xs[0] } else { &xs[1] };
    let mut report = |name: &str, bytes: usize, ms: f64| {
        let gbps = bytes as f64 / (ms * 1e-3) / 1e9;
        rows.push(json!({
            "weights": name, "gb_read": (bytes as f64 / 1e8).round() / 10.0,
            "us_per_token": (ms * 1e4).round() / 10.0,
            "gb_per_s": gbps.round(), "pct_of_4300": (gbps / 4300.0 * 1000.0).round() / 10.0,
        }));
    };
    {
        let dense: Vec<Tensor> = products
            .iter()
            .map(|&[n, k]| Tensor::zeros(&[n, k], DType::BF16, d))
            .collect::<Result<_>>()?;
        let bytes = dense.iter().map(|w| w.numel() * 2).sum();
        let ms = timed(dev, || {
            for w in &dense {
                input(w.shape()[1]).matmul(&w.t()?)?;
            }
            Ok(())
        })?;
        report("BF16 (cuBLAS)", bytes, ms);
    }
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_K, BlockFormat::Q4_1] {
        let mats: Vec<QuantizedMatrix> = products
            .iter()
            .map(|&[n, k]| {
                let bytes = random_bytes(format.matrix_bytes(n, k)?);
                QuantizedMatrix::new(bytes, format, [n, k])?.to_device(d)
            })
            .collect::<Result<_>>()?;
        let bytes = mats.iter().map(|m| m.size_in_bytes()).sum();
        let ms = timed(dev, || {
            for w in &mats {
                w.matmul_t(input(w.shape()[1]))?;
            }
            Ok(())
        })?;
        report(format.name(), bytes, ms);
    }
    Ok(
        json!({"name": "decode-token weight products alone, 1.1B LLaMA shape, batch 1", "rows": rows}),
    )
}

/// Median milliseconds of `f` with the device synchronized around each call.
fn timed(dev: &cuda::CudaDevice, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut v = Vec::new();
    for _ in 0..6 {
        dev.synchronize()?;
        let t = Instant::now();
        f()?;
        dev.synchronize()?;
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Ok((v[v.len() / 2] * 100.0).round() / 100.0)
}

/// Forward and forward+backward times of the parts of one training step at the bench shape:
/// where the step's time goes.
fn breakdown(dev: &cuda::CudaDevice, d: Device) -> Result<serde_json::Value> {
    use rusting_brain::models::transformer_lm::{Positions, Rotary};
    use rusting_brain::ops::pre_norm::{Angles, Stream};
    let (batch, seq) = (arg("--batch", 16), arg("--seq", 1024));
    let mut c = LmConfig::new(50304, 768, 1, 12);
    c.max_seq_len = seq;
    let model = TransformerLm::new_on(c.clone(), &mut Generator::new(0), DType::F32, d)?;
    let block = &model.layers[0];
    let rope = Rotary::new(c.head_dim(), seq, c.rope_theta);
    let x = Tensor::randn_on(
        &[batch, seq, 768],
        DType::F32,
        d,
        Some(&mut Generator::new(1)),
    )?
    .requires_grad_()?;
    let ids =
        Tensor::randint(0, 50304, &[batch, seq], Some(&mut Generator::new(2)))?.to_device(d)?;
    let bf16 = Some(DType::BF16);
    let (cos, sin) = rope.angles_for(seq, d, &Positions::From(0))?;
    let step = rusting_brain::models::transformer_lm::Step {
        angles: Angles {
            cos: &cos,
            sin: &sin,
        },
        visibility: rusting_brain::models::transformer_lm::Visibility::Causal,
        cache: None,
        routing: None,
    };
    let attn = || {
        rusting_brain::amp::autocast(bf16, || {
            block
                .self_attn
                .forward(Stream::new(x.clone()), &block.input_layernorm, None, &step)
                .and_then(Stream::into_tensor)
        })
    };
    let mlp = || {
        rusting_brain::amp::autocast(bf16, || {
            block
                .mlp
                .forward_residual(
                    Stream::new(x.clone()),
                    &block.post_attention_layernorm,
                    None,
                    &step,
                )
                .and_then(Stream::into_tensor)
        })
    };
    let head = || -> Result<Tensor> {
        let logits = model.project(&x)?;
        rusting_brain::cross_entropy(
            &logits.reshape_to(&[batch * seq, 50304])?,
            &ids.flatten()?,
            Default::default(),
        )
    };
    let embed = || model.embed_tokens.forward(&ids);
    let mut out = serde_json::Map::new();
    for (name, f) in [
        ("attention", &attn as &dyn Fn() -> Result<Tensor>),
        ("mlp", &mlp),
        ("head_and_loss", &head),
        ("embedding", &embed),
    ] {
        let fwd = timed(dev, || rusting_brain::no_grad(|| f().map(|_| ())))?;
        let both = timed(dev, || {
            let y = f()?;
            y.sum()?.backward()?;
            x.set_grad(None);
            model.zero_grad();
            Ok(())
        })?;
        out.insert(
            name.into(),
            json!({"forward_ms": fwd, "forward_backward_ms": both}),
        );
    }
    Ok(json!({"name": "one layer's parts at the bench shape", "parts": out}))
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let dev = common::cuda_or_exit("lm");
    let d = Device::Cuda(0);
    let report = |r: Result<serde_json::Value>| match r {
        Ok(v) => println!("{v}"),
        Err(e) => println!("{}", json!({"bench": "lm", "error": e.to_string()})),
    };
    if what == "train" || what == "all" {
        report(train(&dev, d));
    }
    if what == "profile" {
        report(profile(&dev, d));
    }
    if what == "quant" {
        report(quant(&dev, d));
    }
    if what == "breakdown" {
        report(breakdown(&dev, d));
    }
    if what == "finetune" {
        match finetune::runs() {
            Ok(runs) => runs
                .iter()
                .for_each(|run| report(finetune::finetune(&dev, d, run))),
            Err(e) => report(Err(e)),
        }
    }
    if what == "decode" || what == "all" {
        let batches = match flag("--batch") {
            Some(b) => vec![b.parse().unwrap_or(1)],
            None => vec![1, 16],
        };
        for batch in batches {
            report(decode(&dev, d, batch));
        }
    }
}
