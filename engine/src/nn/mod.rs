//! Layers and the `Module` trait: named parameters whose names match published checkpoints.
//! Every layer that draws random numbers takes an explicit `&mut Generator`, so one seed gives
//! one model.

mod activation;
mod attention;
mod batch_norm;
mod conv2d;
mod conv_transpose2d;
mod dropout;
mod embedding;
mod gated_mlp;
pub mod init;
mod linear;
pub mod lora;
pub mod lora_targets;
mod mlp;
mod module;
mod module_list;
mod name_report;
mod norm;
mod onnx_export;
mod pool;
mod prelu;
pub mod recurrent;
mod sequential;
mod softmax;
mod sparse_moe;
mod summary;
mod transformer;

pub use activation::{Activation, ActivationLayer};
pub use attention::{AttentionMasks, MultiheadAttention};
pub use batch_norm::BatchNorm2d;
pub use conv2d::Conv2d;
pub use conv_transpose2d::ConvTranspose2d;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use gated_mlp::GatedMlp;
pub use linear::Linear;
pub use lora::{LoraAdapter, LoraSpec};
pub use mlp::Mlp;
pub use module::{
    duplicate_names, indexed, parameters_key, prefixed, rename_prefixes, LoadReport, Module,
};
pub(crate) use module::{load_named, training_field};
pub use module_list::ModuleList;
pub use name_report::NameReport;
pub use norm::{GroupNorm, LayerNorm, RmsNorm};
pub use onnx_export::export_module;
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, Flatten, MaxPool2d, Window};
pub use prelu::PRelu;
pub use recurrent::{Cell, Recurrent, RecurrentConfig, RecurrentOutput};
pub use sequential::Sequential;
pub use softmax::Softmax;
pub use sparse_moe::{load_balancing_loss, router_z_loss, Routing, SharedExpert, SparseMoe};
pub use summary::{describe, with_commas, Summary};
pub use transformer::{EncoderLayerConfig, TransformerEncoderLayer};
