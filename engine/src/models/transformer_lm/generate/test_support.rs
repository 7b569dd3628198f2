//! What the generation tests share: a small random model and greedy decoding done the slow
//! way, a full forward per token, to compare the cached paths against.

use super::{argmax, Flow, GenerateOptions, SamplingOptions};
use crate::models::transformer_lm::{LmConfig, TransformerLm};
use crate::nn::Module;
use crate::{no_grad, Generator, Result, Tensor};

/// 29 tokens, 2 layers, grouped keys: large enough weights (std 0.3) that the picks differ
/// from position to position.
pub fn model(seed: u64) -> TransformerLm {
    let mut c = LmConfig::new(29, 16, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 32;
    c.max_seq_len = 40;
    c.init_std = 0.3;
    TransformerLm::new(c, &mut Generator::new(seed)).unwrap()
}

pub fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling: SamplingOptions::greedy(),
        ..Default::default()
    }
}

pub fn no_callback() -> impl FnMut(usize, u32) -> Result<Flow> {
    |_, _| Ok(Flow::Continue)
}

/// The logits [vocab] after `seq`, from a full forward without a cache.
pub fn next_logits(m: &TransformerLm, seq: &[u32]) -> Vec<f32> {
    let ids: Vec<i64> = seq.iter().map(|&t| t as i64).collect();
    let len = ids.len();
    let logits = no_grad(|| m.forward(&Tensor::from_vec(ids, &[1, len])?)).unwrap();
    logits.narrow(1, len - 1, 1).unwrap().to_vec_f32().unwrap()
}

/// Greedy decoding without a cache: a full forward per token.
pub fn reference_greedy(m: &TransformerLm, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        seq.push(argmax(&next_logits(m, &seq)));
    }
    seq[prompt.len()..].to_vec()
}
