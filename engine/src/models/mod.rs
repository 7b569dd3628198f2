//! Model families. Each folder holds one family: its layers that no other model shares, its
//! forward, and the workflows that belong to it (generation, train step, checkpoints). A
//! family may use every generic module (`nn`, `optim`, `data`, `ops`); no generic module
//! imports a family.
//!
//! - `transformer_lm`: the LLaMA family (decoder-only transformer language models).
//! - `yolo`: YOLOv8 and YOLO11 object detectors.
//! - `resnet`: torchvision's ResNet image classifiers.
//! - `vit`: Vision Transformers (transformers' ViT and DeiT).
//! - `dinov2`: DINOv2 self-supervised image encoders.
//! - `clip`: CLIP's image and text towers and their joint embedding.
//! - `diffusion`: diffusion samplers (diffusers' schedulers); the denoisers come next.
//! - `siglip`: SigLIP (CLIP's text tower made bidirectional, attention-pooled images, sigmoid scores).
//! - `t5`: T5's encoder (the long-prompt text encoder of SD3 and FLUX).
//!
//! `patch_embedding` is what the patch-based image encoders put in front of their blocks;
//! `encoder_block` is the pre-norm transformer block the vision and text-encoder families
//! share, with each family's parameter names; `prompt_tokenizer` the text side of CLIP and
//! SigLIP.

pub mod clip;
pub mod diffusion;
pub mod dinov2;
pub mod encoder_block;
pub mod hf_config;
pub mod image_text;
pub mod patch_embedding;
pub mod pretrained;
pub mod prompt_tokenizer;
pub mod resnet;
pub mod siglip;
pub mod t5;
pub mod transformer_lm;
pub mod vit;
pub mod yolo;
