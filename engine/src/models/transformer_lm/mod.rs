//! The LLaMA family: a decoder-only transformer language model (config, rotary embeddings,
//! grouped-query attention with a KV cache, the gated MLP of `nn`), its generation loop
//! (`generate`), its training step and evaluation (`train`, and `train_graph` to replay the step as a CUDA
//! graph), checkpoints that resume exactly
//! (`checkpoint`), Hugging Face's `save_pretrained` directories (`pretrained`), llama.cpp GGUF files (`gguf`), and LoRA fine-tuning (`lora`) with PEFT's
//! adapter files (`peft`).

mod attention;
mod block;
pub mod checkpoint;
mod config;
#[cfg(test)]
mod config_tests;
mod family;
pub mod generate;
mod gguf;
mod gguf_export;
#[cfg(test)]
mod gguf_export_tests;
mod head;
mod head_blocks;
mod hf_config;
mod kv_cache;
mod layout;
mod lora;
#[cfg(test)]
mod lora_tests;
mod mask;
mod model;
mod onnx;
mod params;
pub mod peft;
#[cfg(test)]
mod peft_tests;
pub mod pretrained;
#[cfg(test)]
mod pretrained_tests;
mod quantize;
#[cfg(test)]
mod quantize_tests;
mod rope;
pub mod rope_scaling;
#[cfg(test)]
mod tests;
mod train;
mod train_graph;
#[cfg(test)]
mod train_tests;

pub use attention::{Attention, Step, Visibility};
pub use block::{Block, FeedForward};
pub use checkpoint::{Checkpoint, TrainState};
pub use config::{swiglu_hidden, LmConfig};
pub use family::Family;
pub use gguf::{load_gguf, load_gguf_with, GgufInfo, GgufModel};
pub use gguf_export::{export_gguf, storage_type, GgufDType, GgufExport, GgufExportOptions};
pub use kv_cache::KvCache;
pub use layout::to_checkpoint_layout;
pub use lora::{is_adapter_name, LoraConfig, LORA_TARGETS};
pub use model::{Precision, TransformerLm};
pub use rope::{Positions, Rotary};
pub use train::{evaluate, train_step, Evaluation};
pub use train_graph::TrainGraph;
