//! diffusers' `JointTransformerBlock` (SD3) and `FluxTransformerBlock`: both streams
//! adaLN-modulated, one joint attention, then each stream's gated feed-forward. SD3's last
//! block (`context_pre_only`) only reads the text: its text side has a continuous norm and no
//! attention output or feed-forward. SD3.5's blocks with dual attention add a second,
//! image-only attention from the same norm. FLUX's put the text first and rotate positions.

use super::joint_attention::{AttentionParts, JointAttention, Rotary};
use super::modulation::{modulate, norm, AdaNorm, AdaNormKind};
use crate::models::diffusion::feed_forward::{FeedForward, FeedForwardActivation};
use crate::nn::Module;
use crate::{Generator, Result, Tensor};

pub struct JointBlock {
    norm1: AdaNorm,
    norm1_context: AdaNorm,
    attn: JointAttention,
    attn2: Option<JointAttention>,
    ff: FeedForward,
    ff_context: Option<FeedForward>,
    training: bool,
}

/// What differs between the blocks of the families and of one model.
#[derive(Clone, Copy, Debug)]
pub struct BlockParts {
    pub qk_norm: bool,
    /// SD3's last block: the text is only read.
    pub context_pre_only: bool,
    /// SD3.5's second, image-only attention.
    pub dual_attention: bool,
    /// FLUX: the text tokens before the image tokens.
    pub text_first: bool,
}

impl JointBlock {
    pub fn new(
        dim: usize,
        heads: usize,
        parts: BlockParts,
        gen: &mut Generator,
    ) -> Result<JointBlock> {
        let BlockParts {
            qk_norm,
            context_pre_only,
            dual_attention,
            text_first,
        } = parts;
        let ff = |gen: &mut Generator| {
            FeedForward::new(dim, 4 * dim, FeedForwardActivation::GeluTanh, gen)
        };
        Ok(JointBlock {
            norm1: AdaNorm::new(
                dim,
                match dual_attention {
                    true => AdaNormKind::ZeroX,
                    false => AdaNormKind::Zero,
                },
                gen,
            )?,
            norm1_context: AdaNorm::new(
                dim,
                match context_pre_only {
                    true => AdaNormKind::Continuous,
                    false => AdaNormKind::Zero,
                },
                gen,
            )?,
            attn: JointAttention::new(
                dim,
                heads,
                AttentionParts {
                    qk_norm,
                    text: Some(!context_pre_only),
                    image_out: true,
                    text_first,
                },
                gen,
            )?,
            attn2: dual_attention
                .then(|| {
                    let parts = AttentionParts {
                        qk_norm,
                        text: None,
                        image_out: true,
                        text_first,
                    };
                    JointAttention::new(dim, heads, parts, gen)
                })
                .transpose()?,
            ff: ff(gen)?,
            ff_context: (!context_pre_only).then(|| ff(gen)).transpose()?,
            training: true,
        })
    }

    /// Image tokens [B, N, dim] and text tokens [B, S, dim] under conditioning temb [B, dim]
    /// (and FLUX's rotary positions): the new image tokens, and the new text tokens unless
    /// this is SD3's last block.
    pub fn run(
        &self,
        x: &Tensor,
        context: &Tensor,
        temb: &Tensor,
        rotary: Option<&Rotary>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let m = self.norm1.vectors(temb)?;
        let normed = norm(x)?;
        let attn_in = modulate(&normed, &m[0], &m[1])?;
        let c = self.norm1_context.vectors(temb)?;
        let normed_context = norm(context)?;
        let context_in = match self.norm1_context.kind {
            // AdaLayerNormContinuous: scale first.
            AdaNormKind::Continuous => modulate(&normed_context, &c[1], &c[0])?,
            _ => modulate(&normed_context, &c[0], &c[1])?,
        };
        let (attn_out, context_attn_out) = self.attn.attend(&attn_in, Some(&context_in), rotary)?;
        let mut h = x.add(&attn_out.mul(&m[2])?)?;
        if let Some(attn2) = &self.attn2 {
            let attn2_in = modulate(&normed, &m[6], &m[7])?;
            h = h.add(&attn2.forward(&attn2_in)?.mul(&m[8])?)?;
        }
        let ff_in = modulate(&norm(&h)?, &m[3], &m[4])?;
        let h = h.add(&self.ff.forward(&ff_in)?.mul(&m[5])?)?;
        let context = match (&self.ff_context, context_attn_out) {
            (Some(ff_context), Some(out)) => {
                let hc = context.add(&out.mul(&c[2])?)?;
                let ff_in = modulate(&norm(&hc)?, &c[3], &c[4])?;
                Some(hc.add(&ff_context.forward(&ff_in)?.mul(&c[5])?)?)
            }
            _ => None,
        };
        Ok((h, context))
    }
}

impl Module for JointBlock {
    /// The image stream with itself as the text: for a block called alone.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let temb = x.mean_dims(&[1], false)?;
        Ok(self.run(x, x, &temb, None)?.0)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("norm1".into(), &self.norm1),
            ("norm1_context".into(), &self.norm1_context),
            ("attn".into(), &self.attn),
        ];
        if let Some(a) = &self.attn2 {
            c.push(("attn2".into(), a));
        }
        c.push(("ff".into(), &self.ff));
        if let Some(f) = &self.ff_context {
            c.push(("ff_context".into(), f));
        }
        c
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> =
            vec![&mut self.norm1, &mut self.norm1_context, &mut self.attn];
        if let Some(a) = &mut self.attn2 {
            c.push(a);
        }
        c.push(&mut self.ff);
        if let Some(f) = &mut self.ff_context {
            c.push(f);
        }
        c
    }

    crate::nn::training_field!();

    fn title(&self) -> String {
        "JointTransformerBlock".into()
    }
}
