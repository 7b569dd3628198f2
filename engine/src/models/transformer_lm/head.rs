//! The model's head and its losses: logits (soft-capped where the family caps them), the
//! next-token cross-entropy with the head fused into the loss, and the experts'
//! load-balancing loss.

use super::model::TransformerLm;
use crate::nn::{load_balancing_loss, router_z_loss, Module, Routing};
use crate::ops::linear_loss::linear_cross_entropy;
use crate::ops::loss::CrossEntropyOptions;
use crate::{no_grad, DType, Error, Result, Tensor};
use std::cell::RefCell;

impl TransformerLm {
    /// Logits [..., vocab] of hidden states [..., d_model]. Under mixed precision the product
    /// runs in BF16 but the logits come out in F32: rounding them to BF16 would cost more
    /// accuracy than any other op of the model.
    pub fn project(&self, hidden: &Tensor) -> Result<Tensor> {
        let logits = self.head_product(hidden)?;
        match self.config.final_logit_softcapping {
            Some(cap) => soft_cap(&logits, cap),
            None => Ok(logits),
        }
    }

    /// The head's product of `project`, before any soft cap.
    fn head_product(&self, hidden: &Tensor) -> Result<Tensor> {
        let rows = hidden.numel() / self.config.d_model;
        if let Some(blocks) = self.tied_head_blocks(rows) {
            // As a quantized head below: F32 activations, F32 logits.
            let x = no_grad(|| hidden.to_dtype(DType::F32))?;
            return blocks.matmul_t(&x);
        }
        if let Some(head) = self
            .lm_head
            .as_ref()
            .filter(|h| h.quantized_weight().is_some())
        {
            // The quantized product reads F32 activations as cheaply as BF16 ones (the weight
            // dominates), and gives F32 logits.
            let x = no_grad(|| hidden.to_dtype(DType::F32))?;
            return head.forward(&x);
        }
        let weight = self.head_weight()?;
        crate::amp::autocast(self.autocast_dtype(), || {
            let out = self.dtype().promote(hidden.dtype());
            // Rows flattened: the weight's gradient is one GEMM, not a batch summed after.
            let d = self.config.d_model;
            let mut shape = hidden.shape().to_vec();
            if let Some(last) = shape.last_mut() {
                *last = self.config.vocab_size;
            }
            hidden
                .reshape_to(&[hidden.numel() / d, d])?
                .matmul_out(&weight.t()?, out)?
                .reshape_to(&shape)
        })
    }

    /// The output projection's weight [vocab, d_model]: the head's (dequantized when it is
    /// quantized, straight to the products' dtype: an F32 copy would be cast at once), or the
    /// embedding when tied.
    fn head_weight(&self) -> Result<Tensor> {
        match &self.lm_head {
            Some(head) => head.weight_values(self.autocast_dtype().unwrap_or(self.dtype())),
            None => Ok(self.embed_tokens.weight.clone()),
        }
    }

    /// Mean next-token cross-entropy of ids [B, T] against targets [B, T], in FP32. The head and
    /// the loss are one op (`linear_cross_entropy`): on CUDA the logits exist a chunk of rows at
    /// a time.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        if targets.shape() != ids.shape() {
            return Err(Error::ShapeMismatch {
                op: "TransformerLm loss",
                lhs: ids.shape().to_vec(),
                rhs: targets.shape().to_vec(),
            });
        }
        // transformers adds the load-balancing loss only under output_router_logits; the
        // z-loss rides the same switch.
        let weight =
            |coef: Option<f64>| coef.filter(|&w| self.config.output_router_logits && w != 0.0);
        let aux_weight = weight(self.config.router_aux_loss_coef);
        let z_weight = weight(self.config.router_z_loss_coef);
        let record = RefCell::new(Vec::new());
        let routing = (aux_weight.is_some() || z_weight.is_some()).then_some(&record);
        let hidden = self.hidden_in(ids, None, self.head_reads_products(), routing)?;
        let targets = targets.to_device(self.device())?;
        let mut loss = self.cross_entropy_of(&hidden, &targets)?;
        let routings = record.into_inner();
        if let Some(w) = aux_weight {
            loss = loss.add(&load_balancing_loss(&routings)?.mul_scalar(w)?)?;
        }
        if let Some(w) = z_weight {
            loss = loss.add(&router_z_loss(&routings)?.mul_scalar(w)?)?;
        }
        Ok(loss)
    }

    /// The load-balancing loss of the mixture-of-experts layers' routing of ids [B, T] (as
    /// transformers' `aux_loss`, before `router_aux_loss_coef`).
    pub fn router_aux_loss(&self, ids: &Tensor) -> Result<Tensor> {
        if !self.config.family.is_moe() {
            return Err(Error::invalid(
                "router_aux_loss",
                format!("a {} model has no experts", self.config.family.model_type()),
            ));
        }
        load_balancing_loss(&self.routing(ids)?)
    }

    /// The router z-loss of the mixture-of-experts layers' routing of ids [B, T] (the mean
    /// squared log-partition of every router's logits, before `router_z_loss_coef`).
    pub fn router_z_loss(&self, ids: &Tensor) -> Result<Tensor> {
        if !self.config.family.is_moe() {
            return Err(Error::invalid(
                "router_z_loss",
                format!("a {} model has no experts", self.config.family.model_type()),
            ));
        }
        router_z_loss(&self.routing(ids)?)
    }

    /// Where each sparse layer's router sent the tokens of ids [B, T]: one `Routing` per
    /// sparse layer (the softmax of its router and the chosen experts), in layer order; empty
    /// for a dense model.
    pub fn routing(&self, ids: &Tensor) -> Result<Vec<Routing>> {
        let record = RefCell::new(Vec::new());
        self.hidden_in(ids, None, false, Some(&record))?;
        Ok(record.into_inner())
    }

    /// Mean cross-entropy of the head's logits of `hidden` against `targets`.
    fn cross_entropy_of(&self, hidden: &Tensor, targets: &Tensor) -> Result<Tensor> {
        if self.config.final_logit_softcapping.is_some() {
            // The cap sits between the head and the loss: the logits exist whole.
            let logits = self.project(hidden)?;
            let v = self.config.vocab_size;
            let rows = logits.numel() / v;
            return crate::ops::loss::cross_entropy(
                &logits.reshape_to(&[rows, v])?,
                &targets.reshape_to(&[rows])?,
                CrossEntropyOptions::default(),
            );
        }
        crate::amp::autocast(self.autocast_dtype(), || {
            linear_cross_entropy(
                hidden,
                &self.head_weight()?,
                targets,
                CrossEntropyOptions::default(),
            )
        })
    }
}

/// cap * tanh(x / cap): Gemma 2's soft cap of scores and logits.
pub(super) fn soft_cap(x: &Tensor, cap: f64) -> Result<Tensor> {
    x.mul_scalar(1.0 / cap)?.tanh()?.mul_scalar(cap)
}
