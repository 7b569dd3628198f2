//! T5's encoder (transformers' `T5EncoderModel`), the long-prompt text encoder of Stable
//! Diffusion 3 and FLUX: pre-norm blocks with RMS norms and no biases, attention whose only
//! position signal is a learned bias per head over bucketed relative distances (computed once,
//! by the first block, and shared), unscaled scores, and a ReLU or gated-GELU feed-forward
//! (T5 v1.1, which the diffusion pipelines use). `tokenizer` reads the SentencePiece Unigram
//! tokenizer beside it.

mod config;
mod model;
pub mod tokenizer;

pub use config::T5Config;
pub use model::{relative_position_buckets, T5EncoderModel};
