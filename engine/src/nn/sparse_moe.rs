//! A sparse mixture-of-experts feed-forward (Mixtral's `block_sparse_moe`, the `mlp` of
//! Qwen2-MoE, Qwen3-MoE and OLMoE): a router scores the experts for each token, the token goes
//! through its top k gated MLPs, and their outputs are summed weighted by the router's
//! probabilities (renormalised over the k where the model says so). Qwen2-MoE adds a shared
//! dense expert that every token goes through, scaled by a sigmoid gate.
//!
//! The experts' weights are stacked as transformers 5 holds them ([experts, 2 * hidden, d]
//! gate rows then up rows, and [experts, d, hidden]). The tokens' assignments are sorted by
//! expert, and each product runs over all experts at once (`grouped_matmul`) on the rows each
//! expert received: no expert runs on a token it was not given, and no host loop runs the
//! experts one by one.

use super::module::{training_field, Module};
use super::{Activation, GatedMlp, Linear};
use crate::autograd::no_grad;
use crate::ops::expert_routing::{dispatch_by_expert, top_experts};
use crate::{DType, Error, Result, Tensor};

pub struct SparseMoe {
    /// The router [experts, d] (`gate`).
    pub gate: Linear,
    /// Every expert's gate and up projections, [experts, 2 * hidden, d], gate rows first.
    pub gate_up_proj: Tensor,
    /// Every expert's down projection, [experts, d, hidden].
    pub down_proj: Tensor,
    pub top_k: usize,
    /// The k chosen probabilities are divided by their sum (Mixtral always; the others as
    /// `norm_topk_prob` says).
    pub renormalize: bool,
    pub activation: Activation,
    pub shared: Option<SharedExpert>,
    training: bool,
}

/// Qwen2-MoE's dense expert, added as sigmoid(gate(x)) * mlp(x).
pub struct SharedExpert {
    pub mlp: GatedMlp,
    /// [1, d] (`shared_expert_gate`).
    pub gate: Linear,
}

/// Where a layer's router sent the tokens, for the load-balancing loss.
pub struct Routing {
    /// The router's logits, F32 [tokens, experts].
    pub logits: Tensor,
    /// softmax of the router's logits, F32 [tokens, experts].
    pub probs: Tensor,
    /// The chosen experts, I64 [tokens, k].
    pub chosen: Tensor,
}

impl SparseMoe {
    pub fn new(
        gate: Linear,
        gate_up_proj: Tensor,
        down_proj: Tensor,
        top_k: usize,
        renormalize: bool,
    ) -> Result<Self> {
        let (gs, ds) = (gate_up_proj.shape(), down_proj.shape());
        let fits = gs.len() == 3
            && ds.len() == 3
            && gs[0] == ds[0]
            && gs[1] == 2 * ds[2]
            && gs[2] == ds[1]
            && (gate.in_features(), gate.out_features()) == (gs[2], gs[0]);
        if !fits || top_k == 0 || top_k > gs[0] {
            return Err(Error::invalid(
                "SparseMoe",
                format!(
                    "needs a router d -> E, gate_up_proj [E, 2h, d], down_proj [E, d, h] and \
                     0 < top_k <= E; got router {:?}, {gs:?}, {ds:?}, top_k {top_k}",
                    (gate.in_features(), gate.out_features())
                ),
            ));
        }
        Ok(SparseMoe {
            gate,
            gate_up_proj,
            down_proj,
            top_k,
            renormalize,
            activation: Activation::Silu,
            shared: None,
            training: true,
        })
    }

    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    pub fn with_shared(mut self, shared: Option<SharedExpert>) -> Self {
        self.shared = shared;
        self
    }

    pub fn experts(&self) -> usize {
        self.gate_up_proj.shape()[0]
    }

    /// Each expert's hidden width.
    pub fn hidden(&self) -> usize {
        self.down_proj.shape()[2]
    }

    /// The layer's output for x [.., d] and where its router sent each token.
    pub fn forward_routed(&self, x: &Tensor) -> Result<(Tensor, Routing)> {
        let d = self.gate_up_proj.shape()[2];
        if x.shape().last() != Some(&d) {
            return Err(Error::invalid(
                "SparseMoe",
                format!("takes inputs [.., {d}], got {:?}", x.shape()),
            ));
        }
        let n = x.numel() / d;
        let flat = x.reshape_to(&[n, d])?;
        let logits = self.gate.forward(&flat)?.to_dtype(DType::F32)?;
        let probs = logits.softmax(-1)?;
        let chosen = top_experts(&probs, self.top_k)?;
        let mut weights = probs.gather(-1, &chosen)?;
        if self.renormalize {
            weights = weights.div(&weights.sum_dims(&[-1], true)?)?;
        }
        let dispatch = dispatch_by_expert(&chosen, self.experts())?;
        let rows = flat.index_select(0, &dispatch.token)?;
        let hidden = self.hidden();
        let both = rows.grouped_matmul(&self.gate_up_proj, &dispatch.offsets)?;
        let (g, u) = (both.narrow(1, 0, hidden)?, both.narrow(1, hidden, hidden)?);
        let gated = match self.activation {
            Activation::Silu => g.swiglu(&u)?,
            act => act.apply(&g)?.mul(&u)?,
        };
        let out = gated.grouped_matmul(&self.down_proj, &dispatch.offsets)?;
        let w = weights
            .flatten()?
            .index_select(0, &dispatch.order)?
            .to_dtype(out.dtype())?;
        let out = out.mul(&w.unsqueeze(1)?)?;
        // Back to token order, each token's k outputs summed.
        let mut y = out
            .index_select(0, &dispatch.slot)?
            .reshape_to(&[n, self.top_k, d])?
            .sum_dims(&[1], false)?;
        if let Some(shared) = &self.shared {
            let scale = shared.gate.forward(&flat)?.sigmoid()?;
            let s = shared.mlp.forward(&flat)?.mul(&scale)?;
            y = y.to_dtype(s.dtype().promote(y.dtype()))?.add(&s)?;
        }
        let y = y.to_dtype(x.dtype())?.reshape_to(x.shape())?;
        Ok((
            y,
            Routing {
                logits,
                probs,
                chosen,
            },
        ))
    }
}

/// The load-balancing loss of Switch Transformers as transformers computes it over every
/// layer's routing: experts * sum over e of (the share of assignments that went to e) times
/// (e's mean router probability), both over all layers' tokens. 1 when the router is
/// uniform; larger when it favours some experts.
pub fn load_balancing_loss(routings: &[Routing]) -> Result<Tensor> {
    let first = routings
        .first()
        .ok_or_else(|| Error::invalid("load_balancing_loss", "no MoE layer ran"))?;
    let (n, experts) = (first.probs.shape()[0], first.probs.shape()[1]);
    let device = first.probs.device();
    let mut assigned = Tensor::zeros(&[experts], DType::F32, device)?;
    let mut prob = Tensor::zeros(&[experts], DType::F32, device)?;
    for r in routings {
        let chosen = r.chosen.flatten()?;
        let ones = Tensor::ones(&[chosen.numel()], DType::F32, device)?;
        assigned = assigned.add(&no_grad(|| {
            Tensor::zeros(&[experts], DType::F32, device)?.scatter_add(0, &chosen, &ones)
        })?)?;
        prob = prob.add(&r.probs.sum_dims(&[0], false)?)?;
    }
    let rows = (n * routings.len()) as f64;
    assigned
        .mul_scalar(1.0 / rows)?
        .mul(&prob.mul_scalar(1.0 / rows)?)?
        .sum()?
        .mul_scalar(experts as f64)
}

/// The router z-loss of ST-MoE (Zoph et al. 2022) over every layer's routing: the mean over all
/// layers' tokens of logsumexp(router logits)^2, as transformers' Switch Transformers computes
/// it. It keeps the router's logits small, which keeps its softmax stable in low precision.
pub fn router_z_loss(routings: &[Routing]) -> Result<Tensor> {
    if routings.is_empty() {
        return Err(Error::invalid("router_z_loss", "no MoE layer ran"));
    }
    let squares: Vec<Tensor> = routings
        .iter()
        .map(|r| r.logits.logsumexp(&[-1], false)?.square())
        .collect::<Result<_>>()?;
    Tensor::cat(&squares, 0)?.mean()
}

impl Module for SparseMoe {
    /// Every expert on every token, weighted by the router's top-k probabilities (zero for
    /// the experts not chosen): the same sum as the sparse forward, in ONNX's dense operators.
    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        x: &str,
    ) -> Result<String> {
        use crate::io::onnx::export::Attr;
        let keep = ("keepdims", Attr::Int(1));
        let logits = self.gate.to_onnx(g, &format!("{prefix}gate."), x)?;
        let probs = g.node("Softmax", &[&logits], &[("axis", Attr::Int(-1))]);
        let k = g.ints("top_k", &[self.top_k as i64])?;
        let top = g.node_outputs("TopK", &[&probs, &k], &[("axis", Attr::Int(-1))], 2);
        let mut chosen = top[0].clone();
        if self.renormalize {
            let axes = g.ints("axes", &[-1])?;
            let total = g.node("ReduceSum", &[&chosen, &axes], &[keep]);
            chosen = g.node("Div", &[&chosen, &total], &[]);
        }
        let zero = g.scalar("zero", 0.0)?;
        let zeros = g.node("Mul", &[&probs, &zero], &[]);
        let weights = g.node(
            "ScatterElements",
            &[&zeros, &top[1], &chosen],
            &[("axis", Attr::Int(-1))],
        );
        // x [B, T, d] as [B, T, 1, 1, d] against the experts [E, d, out]: [B, T, E, 1, out].
        let axes = g.ints("axes", &[2, 3])?;
        let xe = g.node("Unsqueeze", &[x, &axes], &[]);
        let transposed = |g: &mut crate::io::onnx::export::GraphBuilder, name: &str, t: &Tensor| {
            let w = g.initializer(&format!("{prefix}experts.{name}"), t)?;
            Ok::<_, crate::Error>(g.node(
                "Transpose",
                &[&w],
                &[("perm", Attr::Ints(vec![0, 2, 1]))],
            ))
        };
        let gate_up = transposed(g, "gate_up_proj", &self.gate_up_proj)?;
        let down = transposed(g, "down_proj", &self.down_proj)?;
        let both = g.node("MatMul", &[&xe, &gate_up], &[]);
        let h = self.gate_up_proj.dims()[1] / 2;
        let gate = g.slice(&both, -1, 0, h)?;
        let up = g.slice(&both, -1, h, 2 * h)?;
        let act = self.activation.to_onnx(g, &gate)?;
        let gated = g.node("Mul", &[&act, &up], &[]);
        let out = g.node("MatMul", &[&gated, &down], &[]);
        let axis3 = g.ints("axis3", &[3])?;
        let out = g.node("Squeeze", &[&out, &axis3], &[]);
        let last = g.ints("last", &[-1])?;
        let w = g.node("Unsqueeze", &[&weights, &last], &[]);
        let weighted = g.node("Mul", &[&out, &w], &[]);
        let axis2 = g.ints("axis2", &[2])?;
        let mut y = g.node(
            "ReduceSum",
            &[&weighted, &axis2],
            &[("keepdims", Attr::Int(0))],
        );
        if let Some(shared) = &self.shared {
            let mlp = shared
                .mlp
                .to_onnx(g, &format!("{prefix}shared_expert."), x)?;
            let gate = shared
                .gate
                .to_onnx(g, &format!("{prefix}shared_expert_gate."), x)?;
            let gate = g.node("Sigmoid", &[&gate], &[]);
            let gated = g.node("Mul", &[&mlp, &gate], &[]);
            y = g.node("Add", &[&y, &gated], &[]);
        }
        Ok(y)
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward_routed(x)?.0)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut out: Vec<(String, &dyn Module)> = vec![("gate".into(), &self.gate)];
        if let Some(s) = &self.shared {
            out.push(("shared_expert".into(), &s.mlp));
            out.push(("shared_expert_gate".into(), &s.gate));
        }
        out
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut out: Vec<&mut dyn Module> = vec![&mut self.gate];
        if let Some(s) = &mut self.shared {
            out.push(&mut s.mlp);
            out.push(&mut s.gate);
        }
        out
    }

    /// The stacked experts, under transformers 5's names.
    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("experts.gate_up_proj".into(), self.gate_up_proj.clone()),
            ("experts.down_proj".into(), self.down_proj.clone()),
        ]
    }

    fn detail(&self) -> String {
        format!(
            "experts={}, top_k={}, hidden={}",
            self.experts(),
            self.top_k,
            self.hidden()
        )
    }

    training_field!();
}
