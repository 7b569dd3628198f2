//! A QLoRA training step holds the NF4 bytes of its base, not a dense copy of every layer: each
//! product dequantizes its weight, uses it and lets it go, in forward and again in backward.
//! Measured on the CPU with a counting allocator, on a model whose weights dwarf its
//! activations.

use rb_integration_tests::alloc_meter::{peak_during, Meter};
use rusting_brain::models::transformer_lm::{
    train_step, LmConfig, LoraConfig, TransformerLm, LORA_TARGETS,
};
use rusting_brain::nn::Module;
use rusting_brain::ops::quant_matmul::BlockFormat;
use rusting_brain::optim::{AdamW, AdamWConfig};
use rusting_brain::{Generator, Tensor};

#[global_allocator]
static A: Meter = Meter;

#[test]
fn a_qlora_step_never_holds_the_base_dense() {
    // 4 layers of width 512 (FFN 1536): 54.5 MB of F32 projections, the largest 3.1 MB.
    // With 8 tokens the activations and the graph take about 0.8 MB a layer; a product
    // dequantizes its weight (and its matmul makes a transposed copy): two of the largest
    // matrices at once. Every layer held dense would add the whole 54.5 MB.
    let mut c = LmConfig::new(64, 512, 4, 4);
    c.ffn_hidden = 1536;
    c.max_seq_len = 8;
    c.tied_embeddings = false;
    let mut m = TransformerLm::new(c, &mut Generator::new(0)).unwrap();
    let dense_bytes: usize = m
        .projections()
        .iter()
        .map(|(_, _, l)| 4 * l.in_features() * l.out_features())
        .sum();
    m.quantize(BlockFormat::Nf4).unwrap();
    m.add_lora(LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: LORA_TARGETS.map(String::from).to_vec(),
        use_rslora: false,
        seed: 0,
    })
    .unwrap();
    let mut opt = AdamW::new(m.trainable_parameters(), AdamWConfig::default()).unwrap();
    let ids = Tensor::from_vec((0..8).map(|i| i * 7 % 64).collect::<Vec<i64>>(), &[1, 8]).unwrap();
    let batch = [(ids.clone(), ids)];
    // The first step makes the optimizer's state; the second is the steady state.
    train_step(&m, &mut opt, &batch).unwrap();
    let (_, peak) = peak_during(|| train_step(&m, &mut opt, &batch).unwrap());
    assert!(
        peak < dense_bytes / 3,
        "a step peaked at {peak} bytes; every projection dense is {dense_bytes}"
    );
}
