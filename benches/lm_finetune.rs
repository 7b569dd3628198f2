//! `lm_bench finetune`: full fine-tuning, LoRA and QLoRA at one shape and batch, each reporting
//! tokens/s, the bytes its base weights take and the peak device memory of its steps.
//!
//! `--base` picks the base and how it is held, `--lora-rank` whether adapters train on it:
//! - `f32`: F32 master weights with BF16 products (as `lm_bench train`), full fine-tuning;
//! - `bf16`: BF16 weights; full fine-tuning, or LoRA with `--lora-rank`;
//! - `nf4`, `q8_0`, `q4_k`: the BF16 model's projections and head quantized (NF4 is QLoRA's
//!   base; Q8_0 the int8 one), adapters in BF16 (rank 16 unless `--lora-rank` says otherwise).
//!
//! Without `--base`, all of them in turn: f32 and bf16 full, then bf16, nf4 and q8_0 with
//! adapters. Adapters go on all seven projections (QLoRA's choice), alpha = 2 · rank, no dropout.
//! Timed as `train`: 3 warm-up steps, then `--steps` (default 10).

use super::{arg, bench_config, flag, GIB};
use rusting_brain::backend::cuda;
use rusting_brain::models::transformer_lm::{
    is_adapter_name, train_step, LoraConfig, TransformerLm, LORA_TARGETS,
};
use rusting_brain::nn::Module;
use rusting_brain::ops::quant_matmul::BlockFormat;
use rusting_brain::optim::{AdamW, AdamWConfig};
use rusting_brain::{bail, DType, Device, Generator, Result, Tensor};
use serde_json::json;
use std::time::Instant;

/// One configuration: the weights' dtype, the format the projections are kept in, the rank.
pub struct Run {
    base: String,
    dtype: DType,
    format: Option<BlockFormat>,
    lora_rank: usize,
}

impl Run {
    fn new(base: &str, rank: Option<usize>) -> Result<Run> {
        let (dtype, format) = match base {
            "f32" => (DType::F32, None),
            "bf16" => (DType::BF16, None),
            "nf4" => (DType::BF16, Some(BlockFormat::Nf4)),
            "q8_0" => (DType::BF16, Some(BlockFormat::Q8_0)),
            "q4_k" => (DType::BF16, Some(BlockFormat::Q4_K)),
            other => bail!(
                "lm_bench finetune",
                "--base {other}: one of f32, bf16, nf4, q8_0, q4_k"
            ),
        };
        let lora_rank = rank.unwrap_or(if format.is_some() { 16 } else { 0 });
        if format.is_some() && lora_rank == 0 {
            bail!(
                "lm_bench finetune",
                "a quantized base is frozen: give --lora-rank > 0"
            );
        }
        Ok(Run {
            base: base.to_string(),
            dtype,
            format,
            lora_rank,
        })
    }

    fn describe(&self) -> String {
        match (self.format, self.lora_rank) {
            (None, 0) if self.dtype == DType::F32 => {
                "full fine-tuning, F32 weights, BF16 products".into()
            }
            (None, 0) => "full fine-tuning, BF16 weights".into(),
            (None, r) => format!("LoRA rank {r} on a BF16 base"),
            (Some(f), r) => format!("QLoRA rank {r} on a {} base", f.name()),
        }
    }
}

/// The runs the command line asks for: `--base` (and `--lora-rank`), or all of them.
pub fn runs() -> Result<Vec<Run>> {
    let rank = match flag("--lora-rank") {
        Some(r) => Some(r.parse().map_err(|_| {
            rusting_brain::Error::invalid("lm_bench finetune", format!("--lora-rank {r}"))
        })?),
        None => None,
    };
    match flag("--base") {
        Some(b) => Ok(vec![Run::new(&b, rank)?]),
        None => {
            let r = Some(rank.unwrap_or(16));
            [
                ("f32", Some(0)),
                ("bf16", Some(0)),
                ("bf16", r),
                ("nf4", r),
                ("q8_0", r),
            ]
            .into_iter()
            .map(|(b, r)| Run::new(b, r))
            .collect()
        }
    }
}

/// Bytes of the projections and the head as the model holds them (dense or blocks), and how
/// many weights they are.
fn projection_bytes(model: &TransformerLm) -> (usize, usize) {
    let mut layers: Vec<_> = model.projections().into_iter().map(|(_, _, l)| l).collect();
    layers.extend(model.lm_head.as_ref());
    layers.iter().fold((0, 0), |(bytes, n), l| {
        let held = match (l.dense_weight(), l.quantized_weight()) {
            (Some(w), _) => w.numel() * w.dtype().size_in_bytes(),
            (_, Some(q)) => q.size_in_bytes(),
            (None, None) => 0,
        };
        (bytes + held, n + l.in_features() * l.out_features())
    })
}

pub fn finetune(dev: &cuda::CudaDevice, d: Device, run: &Run) -> Result<serde_json::Value> {
    let (batch, seq, steps) = (arg("--batch", 16), arg("--seq", 1024), arg("--steps", 10));
    let c = bench_config();
    let mut model = TransformerLm::new_on(c.clone(), &mut Generator::new(0), run.dtype, d)?;
    if let Some(format) = run.format {
        model.quantize(format)?;
    }
    if run.lora_rank > 0 {
        model.add_lora(LoraConfig {
            rank: run.lora_rank,
            alpha: 2.0 * run.lora_rank as f64,
            dropout: 0.0,
            targets: LORA_TARGETS.map(String::from).to_vec(),
            use_rslora: false,
            seed: 0,
        })?;
    }
    let (base_bytes, base_weights) = projection_bytes(&model);
    // The embedding and the norms: every parameter but the adapters and dense projections.
    let other_bytes = model
        .named_parameters()
        .iter()
        .filter(|(name, _)| !is_adapter_name(name))
        .map(|(_, p)| p.numel() * p.dtype().size_in_bytes())
        .sum::<usize>()
        - if run.format.is_none() { base_bytes } else { 0 };
    let trainable: usize = model.trainable_parameters().iter().map(|p| p.numel()).sum();
    let mut opt = AdamW::new(
        model.trainable_parameters(),
        AdamWConfig {
            lr: 1e-4,
            ..Default::default()
        },
    )?;
    let mut gen = Generator::new(1);
    let x = Tensor::randint(0, c.vocab_size as i64, &[batch, seq], Some(&mut gen))?.to_device(d)?;
    let y = Tensor::randint(0, c.vocab_size as i64, &[batch, seq], Some(&mut gen))?.to_device(d)?;
    let batches = [(x, y)];
    dev.synchronize()?;
    dev.reset_peak_memory()?;
    let resident = dev.peak_memory()?;
    for _ in 0..3 {
        train_step(&model, &mut opt, &batches)?;
    }
    dev.synchronize()?;
    let t = Instant::now();
    let mut loss = None;
    for _ in 0..steps {
        loss = Some(train_step(&model, &mut opt, &batches)?.0);
    }
    dev.synchronize()?;
    let dt = t.elapsed().as_secs_f64() / steps as f64;
    let loss = loss.map(|l| l.item()).transpose()?.unwrap_or(f64::NAN);
    let gib = |b: f64| (b / GIB * 100.0).round() / 100.0;
    let what = run.describe();
    Ok(json!({
        "name": format!("rusting_brain llama {} {what}", flag("--shape").unwrap_or_else(|| format!("{}x{}", c.d_model, c.n_layers))),
        "base": run.base, "lora_rank": run.lora_rank,
        "batch": batch, "seq": seq,
        "trainable_params_m": (trainable as f64 / 1e5).round() / 10.0,
        "base_weights_gib": gib(base_bytes as f64),
        "base_weights_vs_bf16": (base_bytes as f64 / (2.0 * base_weights as f64) * 1000.0).round() / 1000.0,
        "other_weights_gib": gib(other_bytes as f64),
        "resident_before_steps_gib": gib(resident as f64),
        "peak_mem_gib": gib(dev.peak_memory()? as f64),
        "step_ms": (dt * 1e5).round() / 100.0,
        "tokens_per_s": ((batch * seq) as f64 / dt).round(),
        "loss": (loss * 1000.0).round() / 1000.0,
    }))
}
