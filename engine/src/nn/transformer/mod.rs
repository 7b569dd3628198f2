//! A LLaMA-family transformer language model: config, rotary embeddings, grouped-query
//! attention with a KV cache, SwiGLU feed-forward, and the model that ties them together.

mod attention;
mod block;
mod config;
mod feed_forward;
mod kv_cache;
mod mask;
mod model;
mod params;
mod rope;
#[cfg(test)]
mod tests;

pub use attention::{Attention, Step, Visibility};
pub use block::Block;
pub use config::{swiglu_hidden, LmConfig};
pub use feed_forward::SwiGlu;
pub use kv_cache::KvCache;
pub use model::{Precision, TransformerLm};
pub use rope::{Positions, Rotary};
