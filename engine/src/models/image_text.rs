//! The image–text families (CLIP, SigLIP) as one kind of model: prompts through the
//! checkpoint's tokenizer to text embeddings, and zero-shot classification, which differ
//! between the families only in how a pair's score becomes a probability (CLIP: softmax over
//! the labels; SigLIP: each pair's own sigmoid).

use super::clip::Clip;
use super::pretrained::ImageModel;
use super::prompt_tokenizer::PromptTokenizer;
use super::siglip::Siglip;
use crate::nn::Module;
use crate::{Error, Result, Tensor};

pub trait ImageTextModel: ImageModel {
    /// The checkpoint's tokenizer; `None` for a folder without tokenizer files.
    fn prompt_tokenizer(&self) -> Option<&PromptTokenizer>;

    /// Token ids [B, T] → text embeddings [B, D] in the images' space (not normalised).
    fn text_features(&self, ids: &Tensor) -> Result<Tensor>;

    /// Image embeddings [I, D] and text embeddings [T, D] → each pair's probability [I, T].
    fn pair_probabilities(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor>;

    /// The zero-shot prompt transformers' pipeline uses for the family.
    fn default_template(&self) -> &'static str;

    /// Texts → their embeddings [texts, D] (not normalised).
    fn embed_texts(&self, texts: &[&str]) -> Result<Tensor> {
        let tokenizer = self.prompt_tokenizer().ok_or_else(|| {
            Error::invalid(
                "embed_texts",
                format!(
                    "the {} has no tokenizer (its folder had no tokenizer files)",
                    self.title()
                ),
            )
        })?;
        let ids = tokenizer.encode_batch(texts)?;
        self.text_features(&ids.to_device(super::pretrained::device_of(self))?)
    }

    /// Zero-shot classification: for each image [B, C, H, W], the probability of each label,
    /// scored as the text `template` with `{}` replaced by the label ([B, labels]).
    fn zero_shot(&self, images: &Tensor, labels: &[&str], template: &str) -> Result<Tensor> {
        if labels.is_empty() {
            return Err(Error::invalid("zero_shot", "needs at least one label"));
        }
        if !template.contains("{}") {
            return Err(Error::invalid(
                "zero_shot",
                format!("the template `{template}` has no {{}} for the label"),
            ));
        }
        let prompts: Vec<String> = labels.iter().map(|l| template.replace("{}", l)).collect();
        let prompts: Vec<&str> = prompts.iter().map(String::as_str).collect();
        let texts = self.embed_texts(&prompts)?;
        self.pair_probabilities(&self.embed_images(images)?, &texts)
    }
}

/// `m` as an image–text model, when it is CLIP or SigLIP.
pub fn as_image_text_model(m: &dyn Module) -> Option<&dyn ImageTextModel> {
    let any = m.as_any()?;
    if let Some(c) = any.downcast_ref::<Clip>() {
        return Some(c);
    }
    any.downcast_ref::<Siglip>()
        .map(|s| s as &dyn ImageTextModel)
}

impl ImageTextModel for Clip {
    fn prompt_tokenizer(&self) -> Option<&PromptTokenizer> {
        self.tokenizer.as_ref()
    }

    fn text_features(&self, ids: &Tensor) -> Result<Tensor> {
        Clip::text_features(self, ids)
    }

    /// Softmax over the labels of the scaled cosine similarities.
    fn pair_probabilities(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor> {
        self.scores(images, texts)?.softmax(-1)
    }

    fn default_template(&self) -> &'static str {
        "a photo of a {}."
    }
}

impl ImageTextModel for Siglip {
    fn prompt_tokenizer(&self) -> Option<&PromptTokenizer> {
        self.tokenizer.as_ref()
    }

    fn text_features(&self, ids: &Tensor) -> Result<Tensor> {
        Siglip::text_features(self, ids)
    }

    /// Each pair's sigmoid: SigLIP scores pairs independently, so the labels need not sum to 1.
    fn pair_probabilities(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor> {
        self.scores(images, texts)?.sigmoid()
    }

    fn default_template(&self) -> &'static str {
        "This is a photo of {}."
    }
}
