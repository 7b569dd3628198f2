//! A pipeline from a script: the handle, and what `pipe.generate` and
//! `pipe.add_textual_inversion` read from their arguments (the init image, the mask).

use crate::error::{guard, runtime_error, RhaiResult};
use crate::progress::Progress;
use rhai::{Array, Dynamic, Map, INT};
use rusting_brain::models::diffusion::pipeline::to_u8_images;
use rusting_brain::models::diffusion::{StableDiffusion, TextToImage};
use rusting_brain::Tensor;
use std::sync::Arc;

#[derive(Clone)]
pub struct PipelineHandle(pub(super) Arc<StableDiffusion>);

/// An init image for image-to-image: a path or a U8 [H, W, 3] image, resized (Pillow's
/// Lanczos, as diffusers' image processor) to `size` (height, width) or to its own size
/// rounded down to multiples of `multiple` (the pipeline's: 8 for SD, 16 for SD3), as
/// [1, 3, H, W] in [-1, 1]; or a float [N, 3, H, W] batch already in [-1, 1], taken as it is.
fn init_image(d: &Dynamic, size: Option<(usize, usize)>, multiple: usize) -> RhaiResult<Tensor> {
    use rusting_brain::vision::image::{rgb_to_tensor, tensor_to_rgb};
    use rusting_brain::vision::pil_resize::{resize_pil, PilFilter};
    let t = match d.clone().try_cast::<String>() {
        Some(path) => guard(|| rusting_brain::vision::read_image(&path))?,
        None => d.clone().try_cast::<Tensor>().ok_or_else(|| {
            runtime_error(format!(
                "pipe.generate option image: a path or an image tensor, got {}",
                d.type_name()
            ))
        })?,
    };
    if t.dtype() != rusting_brain::DType::U8 {
        return Ok(t);
    }
    if t.rank() != 3 || t.shape()[2] != 3 {
        return Err(runtime_error(format!(
            "pipe.generate option image: a U8 image is [H, W, 3], got {:?}",
            t.shape()
        )));
    }
    let m = multiple;
    let (h, w) = size.unwrap_or((t.shape()[0] / m * m, t.shape()[1] / m * m));
    guard(|| {
        let rgb = tensor_to_rgb(&t)?;
        let rgb = match (rgb.height() as usize, rgb.width() as usize) == (h, w) {
            true => rgb,
            false => resize_pil(&rgb, w, h, PilFilter::Lanczos),
        };
        rgb_to_tensor(rgb)?
            .to_dtype(rusting_brain::DType::F32)?
            .mul_scalar(1.0 / 127.5)?
            .add_scalar(-1.0)?
            .permute(&[2, 0, 1])?
            .unsqueeze(0)?
            .contiguous()
    })
}

/// An inpainting mask: a path or a U8 [H, W, 3] image (white where to redraw), made grayscale
/// and resized to the init image's size; or a float [N or 1, 1, H, W] mask in [0, 1], taken as
/// it is.
fn mask(d: &Dynamic, size: (usize, usize)) -> RhaiResult<Tensor> {
    let t = match d.clone().try_cast::<String>() {
        Some(path) => guard(|| rusting_brain::vision::read_image(&path))?,
        None => d.clone().try_cast::<Tensor>().ok_or_else(|| {
            runtime_error(format!(
                "pipe.generate option mask: a path or an image tensor, got {}",
                d.type_name()
            ))
        })?,
    };
    if t.dtype() != rusting_brain::DType::U8 {
        return Ok(t);
    }
    guard(|| rusting_brain::models::diffusion::pipeline::mask_from_image(&t, size))
}

/// `pipe.add_textual_inversion(path[, token])`: the pipeline changes in place, so no other
/// handle may hold it.
pub(super) fn add_textual_inversion(
    pipe: &mut PipelineHandle,
    path: &str,
    token: Option<&str>,
) -> RhaiResult<Map> {
    let Some(p) = Arc::get_mut(&mut pipe.0) else {
        return Err(runtime_error(
            "pipe.add_textual_inversion: another variable holds this pipeline too; add textual inversions before copying it (right after diffusion::load)",
        ));
    };
    let (token, n) = guard(|| p.add_textual_inversion(std::path::Path::new(path), token))?;
    let mut m = Map::new();
    m.insert("token".into(), Dynamic::from(token));
    m.insert("vectors".into(), Dynamic::from_int(n as INT));
    Ok(m)
}

crate::options! {
    /// Steps and guidance default to the pipeline's, strength to 0.8 (1 when inpainting).
    struct GenerateOptions {
        steps: usize,
        guidance: f64,
        /// FLUX's true classifier-free guidance scale (with a negative prompt).
        true_cfg: f64 = 1.0,
        seed: INT = 0,
        width: usize,
        height: usize,
        scheduler: String,
        /// Negative prompts: one string, or one per prompt.
        negative: Vec<String> = Vec::new(),
        eta: f64 = 0.0,
        progress: bool = true,
        /// An init image for image-to-image (see init_image).
        image: Dynamic,
        strength: f64,
        tiled: bool = false,
        /// On CUDA, replay the denoising step as one captured graph.
        cuda_graph: bool = true,
        max_sequence_length: usize,
        /// The inpainting mask (see mask).
        mask: Dynamic,
    }
}

/// `pipe.generate(prompts, opts)`: one image (a U8 [H, W, 3] tensor) for one prompt, a list
/// of them for a list.
pub(super) fn generate(
    pipe: &mut PipelineHandle,
    prompts: Dynamic,
    opts: Map,
) -> RhaiResult<Dynamic> {
    let o = GenerateOptions::parse("pipe.generate", opts)?;
    let (list, one) = match prompts.clone().try_cast::<Array>() {
        Some(a) => (
            crate::convert::string_list(&a, "pipe.generate prompts")?,
            false,
        ),
        None => match prompts.clone().try_cast::<String>() {
            Some(p) => (vec![p], true),
            None => {
                return Err(runtime_error(format!(
                    "pipe.generate: a prompt is a string or a list of strings, got {}",
                    prompts.type_name()
                )))
            }
        },
    };
    let negative = o.negative;
    // One side given: a square.
    let size = match (o.width, o.height) {
        (None, None) => None,
        (Some(w), None) => Some((w, w)),
        (None, Some(h)) => Some((h, h)),
        (Some(w), Some(h)) => Some((h, w)),
    };
    let init_image = o
        .image
        .as_ref()
        .map(|d| init_image(d, size, pipe.0.size_multiple()))
        .transpose()?;
    let mask = match (&o.mask, &init_image) {
        (None, _) => None,
        (Some(_), None) => return Err(runtime_error(
            "pipe.generate option mask: inpainting needs the image to inpaint (the image option)",
        )),
        (Some(d), Some(img)) => {
            if img.rank() != 4 {
                return Err(runtime_error(format!(
                    "pipe.generate option image: a float image is [N, 3, H, W] in [-1, 1], got {:?}",
                    img.shape()
                )));
            }
            Some(mask(d, (img.shape()[2], img.shape()[3]))?)
        }
    };
    // diffusers' defaults: 0.8 for image to image, 1 for inpainting.
    let strength = o.strength.unwrap_or(if mask.is_some() { 1.0 } else { 0.8 });
    let ask = TextToImage {
        prompts: list,
        negative,
        steps: o.steps.unwrap_or_else(|| pipe.0.default_steps()),
        guidance: o.guidance.unwrap_or_else(|| pipe.0.default_guidance()),
        true_cfg: o.true_cfg,
        size,
        seed: o.seed as u64,
        scheduler: o.scheduler,
        eta: o.eta,
        latents: None,
        init_image,
        mask,
        strength,
        init_noise: None,
        init_masked_draw: None,
        tiled_vae: o.tiled,
        cuda_graph: o.cuda_graph,
        max_sequence_length: o.max_sequence_length,
    };
    let bar = o
        .progress
        .then(|| Progress::new(pipe.0.steps_run(&ask) as u64, "denoising"));
    let images = pipe.0.generate(&ask, &mut |_, _| {
        if let Some(b) = &bar {
            b.inc(1);
        }
        rusting_brain::cancel::check()
    });
    if let Some(b) = &bar {
        b.finish();
    }
    let images = guard(|| to_u8_images(&images?))?;
    Ok(match one {
        true => Dynamic::from(images.into_iter().next().expect("one prompt, one image")),
        false => images
            .into_iter()
            .map(Dynamic::from)
            .collect::<Array>()
            .into(),
    })
}
