//! Stable Diffusion's text-to-image pipeline against diffusers 0.42's
//! `StableDiffusionPipeline` on the tiny pipeline folder `tests/fixtures/diffusion/sd_tiny`
//! (`make_pipeline.py`): the same prompt ids and text states (1e-5), and from the same
//! starting latents the same images, with classifier-free guidance and a negative prompt and
//! without, within 1/255.

use rusting_brain::io::safetensors;
use rusting_brain::models::diffusion::pipeline::to_u8_images;
use rusting_brain::models::diffusion::{StableDiffusion, TextToImage};
use rusting_brain::{DType, Tensor};
use std::path::PathBuf;

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/diffusion/sd_tiny")
}

fn worst(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    g.iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

fn ask(guidance: f64, negative: Vec<String>, latents: &Tensor) -> TextToImage {
    TextToImage {
        prompts: vec!["a red cat".into(), "a dog".into()],
        negative,
        steps: 6,
        guidance,
        size: Some((16, 16)),
        latents: Some(latents.clone()),
        ..TextToImage::default()
    }
}

#[test]
fn the_pipeline_draws_what_diffusers_draws() {
    let pipe = StableDiffusion::from_folder(&folder()).unwrap();
    let want = safetensors::load(folder().join("expected.safetensors")).unwrap();
    let ids = pipe.prompts.encoders[0]
        .tokenizer
        .encode_batch(&["a red cat", "a dog"])
        .unwrap();
    assert_eq!(
        ids.to_vec_f64().unwrap(),
        want["ids"].to_vec_f64().unwrap(),
        "prompt ids"
    );
    let states = rusting_brain::no_grad(|| pipe.encode_prompts(&["a red cat", "a dog"], None))
        .unwrap()
        .states;
    let err = worst(&states, &want["text_states"]);
    assert!(err < 1e-5, "text states differ by {err:.2e}");
    let mut steps = 0;
    let guided = pipe
        .generate(
            &ask(7.5, vec!["".into(), "blurry".into()], &want["latents"]),
            &mut |i, n| {
                assert_eq!(n, 6);
                steps = i;
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(steps, 6);
    let err = worst(&guided, &want["guided"]);
    assert!(err < 1.0 / 255.0, "guided image differs by {err:.2e}");
    let plain = pipe
        .generate(&ask(1.0, vec![], &want["latents"]), &mut |_, _| Ok(()))
        .unwrap();
    let err = worst(&plain, &want["plain"]);
    assert!(err < 1.0 / 255.0, "unguided image differs by {err:.2e}");
    let images = to_u8_images(&plain).unwrap();
    assert_eq!(images.len(), 2);
    assert_eq!(images[0].shape(), &[16, 16, 3]);
    assert_eq!(images[0].dtype(), DType::U8);
}

#[test]
fn image_to_image_draws_what_diffusers_draws() {
    let pipe = StableDiffusion::from_folder(&folder()).unwrap();
    let want = safetensors::load(folder().join("expected.safetensors")).unwrap();
    let ask = TextToImage {
        prompts: vec!["a red cat".into(), "a dog".into()],
        steps: 6,
        guidance: 7.5,
        init_image: Some(want["init_image"].clone()),
        strength: 0.6,
        init_noise: Some((want["init_draw"].clone(), want["init_noise"].clone())),
        ..TextToImage::default()
    };
    let mut ran = 0;
    let image = pipe
        .generate(&ask, &mut |i, n| {
            // strength 0.6 of 6 steps: the last 3 run.
            assert_eq!(n, 3);
            ran = i;
            Ok(())
        })
        .unwrap();
    assert_eq!(ran, 3);
    let err = worst(&image, &want["img2img"]);
    assert!(err < 1.0 / 255.0, "image-to-image differs by {err:.2e}");
    let bad = |ask: TextToImage| {
        pipe.generate(&ask, &mut |_, _| Ok(()))
            .unwrap_err()
            .to_string()
    };
    let e = bad(TextToImage {
        strength: 0.1,
        init_noise: None,
        ..ask.clone()
    });
    assert!(e.contains("leaves no step to run"), "{e}");
    let e = bad(TextToImage {
        strength: 1.5,
        ..ask.clone()
    });
    assert!(e.contains("outside [0, 1]"), "{e}");
    let small = want["init_image"].narrow(2, 0, 8).unwrap();
    let e = bad(TextToImage {
        init_image: Some(small),
        size: Some((16, 16)),
        ..ask
    });
    assert!(
        e.contains("the init image must be [2 or 1, 3, 16, 16]"),
        "{e}"
    );
}

#[test]
fn seeds_repeat_and_bad_requests_are_named() {
    let pipe = StableDiffusion::from_folder(&folder()).unwrap();
    let base = TextToImage {
        prompts: vec!["a cat".into()],
        steps: 3,
        size: Some((16, 16)),
        seed: 5,
        ..TextToImage::default()
    };
    let a = pipe.generate(&base, &mut |_, _| Ok(())).unwrap();
    let b = pipe.generate(&base, &mut |_, _| Ok(())).unwrap();
    assert_eq!(a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    let other = TextToImage {
        seed: 6,
        ..base.clone()
    };
    let c = pipe.generate(&other, &mut |_, _| Ok(())).unwrap();
    assert!(worst(&a, &c) > 1e-3, "another seed draws another image");
    // Another scheduler over the same noise schedule runs too.
    let ddim = TextToImage {
        scheduler: Some("DDIMScheduler".into()),
        ..base.clone()
    };
    pipe.generate(&ddim, &mut |_, _| Ok(())).unwrap();

    let bad = |ask: TextToImage| {
        pipe.generate(&ask, &mut |_, _| Ok(()))
            .unwrap_err()
            .to_string()
    };
    let e = bad(TextToImage {
        size: Some((20, 16)),
        ..base.clone()
    });
    assert!(e.contains("multiples of 8"), "{e}");
    let e = bad(TextToImage {
        negative: vec!["a".into(), "b".into()],
        ..base.clone()
    });
    assert!(e.contains("2 negative prompts for 1 prompts"), "{e}");
    let e = bad(TextToImage {
        steps: 0,
        ..base.clone()
    });
    assert!(e.contains("0 inference steps"), "{e}");
    let e = bad(TextToImage {
        scheduler: Some("PNDMScheduler".into()),
        ..base.clone()
    });
    assert!(e.contains("PNDMScheduler"), "{e}");
    let e = bad(TextToImage {
        prompts: vec![],
        ..base
    });
    assert!(e.contains("no prompts"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let e = StableDiffusion::from_folder(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("model_index.json"), "{e}");
    std::fs::copy(
        folder().join("model_index.json"),
        dir.path().join("model_index.json"),
    )
    .unwrap();
    let e = StableDiffusion::from_folder(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no text_encoder/ folder"), "{e}");
}

/// `tiled_vae` decodes through the VAE's tiles: the same image where the latents fit one tile,
/// a different one (the seams blended) where they do not.
#[test]
fn a_tiled_vae_decode_is_used_when_asked() {
    let pipe = StableDiffusion::from_folder(&folder()).unwrap();
    let run = |side: usize, tiled_vae: bool| {
        let ask = TextToImage {
            prompts: vec!["a red cat".into()],
            steps: 2,
            size: Some((side, side)),
            tiled_vae,
            ..TextToImage::default()
        };
        pipe.generate(&ask, &mut |_, _| Ok(())).unwrap()
    };
    let same = |a: &Tensor, b: &Tensor| a.to_vec_f32().unwrap() == b.to_vec_f32().unwrap();
    // The fixture's VAE has sample_size 16: 8x8 latents are one tile.
    assert!(same(&run(16, true), &run(16, false)));
    assert!(!same(&run(32, true), &run(32, false)));
}

fn sdxl_folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/diffusion/sdxl_tiny")
}

/// SDXL (`make_sdxl_pipeline.py`): the second tokenizer pads with "!", the states are both
/// encoders' second to last layers side by side and the pooled embedding the second's
/// projection (1e-5); the images with guidance and no negative prompt (zeros, by
/// `force_zeros_for_empty_prompt`), with negative prompts, and without guidance are diffusers'
/// within 1/255.
#[test]
fn sdxl_draws_what_diffusers_draws() {
    let pipe = StableDiffusion::from_folder(&sdxl_folder()).unwrap();
    let want = safetensors::load(sdxl_folder().join("expected.safetensors")).unwrap();
    assert_eq!(pipe.prompts.encoders.len(), 2);
    assert!(pipe.force_zeros_for_empty_prompt);
    let prompts = ["a red cat", "a dog"];
    let ids = pipe.prompts.encoders[1]
        .tokenizer
        .encode_batch(&prompts)
        .unwrap();
    assert_eq!(
        ids.to_vec_f64().unwrap(),
        want["ids_2"].to_vec_f64().unwrap(),
        "the second tokenizer's ids (padded with `!`)"
    );
    let cond = rusting_brain::no_grad(|| pipe.encode_prompts(&prompts, None)).unwrap();
    let err = worst(&cond.states, &want["states"]);
    assert!(err < 1e-5, "prompt states differ by {err:.2e}");
    let err = worst(cond.pooled.as_ref().unwrap(), &want["pooled"]);
    assert!(err < 1e-5, "pooled embeddings differ by {err:.2e}");
    let draw = |guidance: f64, negative: Vec<String>| {
        pipe.generate(&ask(guidance, negative, &want["latents"]), &mut |_, _| {
            Ok(())
        })
        .unwrap()
    };
    let zeros = draw(5.0, vec![]);
    let err = worst(&zeros, &want["zeros"]);
    assert!(
        err < 1.0 / 255.0,
        "guided image (zero negative) differs by {err:.2e}"
    );
    let negative = draw(5.0, vec!["".into(), "blurry".into()]);
    let err = worst(&negative, &want["negative"]);
    assert!(
        err < 1.0 / 255.0,
        "guided image (negative prompts) differs by {err:.2e}"
    );
    assert!(
        worst(&zeros, &negative) > 1e-3,
        "zeros and encoded negatives draw different images"
    );
    let plain = draw(1.0, vec![]);
    let err = worst(&plain, &want["plain"]);
    assert!(err < 1.0 / 255.0, "unguided image differs by {err:.2e}");
}

/// An SDXL folder whose text encoders do not fit its UNet is refused at load, naming both
/// widths.
#[test]
fn sdxl_encoders_that_do_not_fit_the_unet_are_named() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&sdxl_folder(), dir.path());
    let config = dir.path().join("text_encoder_2/config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("\"projection_dim\": 5", "\"projection_dim\": 7"),
    )
    .unwrap();
    let weights = dir.path().join("text_encoder_2/model.safetensors");
    let mut tensors = safetensors::load(&weights).unwrap();
    tensors.insert(
        "text_projection.weight".into(),
        Tensor::zeros(&[7, 8], DType::F32, rusting_brain::Device::Cpu).unwrap(),
    );
    safetensors::save(&weights, &tensors, None).unwrap();
    let e = StableDiffusion::from_folder(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("pooled text embedding of 5, the text encoders give 7"),
        "{e}"
    );
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn inversion(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/diffusion/textual_inversion")
        .join(name)
}

/// Textual-inversion files as diffusers' `load_textual_inversion` loads them
/// (`make_textual_inversion.py`): a one-vector token and a three-vector one (spelled out as
/// `<style> <style>_1 <style>_2`) on SD, and an SDXL file's clip_l and clip_g vectors on the
/// two encoders: the same ids, states and pooled embedding (1e-5).
#[test]
fn textual_inversions_load_as_diffusers_loads_them() {
    let want = safetensors::load(inversion("expected.safetensors")).unwrap();
    let mut pipe = StableDiffusion::from_folder(&folder()).unwrap();
    let added = pipe
        .add_textual_inversion(&inversion("cat_toy.safetensors"), None)
        .unwrap();
    assert_eq!(added, ("<cat-toy>".to_string(), 1));
    let added = pipe
        .add_textual_inversion(&inversion("style.safetensors"), None)
        .unwrap();
    assert_eq!(added, ("<style>".to_string(), 3));
    let prompts = ["a <cat-toy> dog", "<style> red cat"];
    let e = &pipe.prompts.encoders[0];
    let ids: Vec<f64> = prompts
        .iter()
        .flat_map(|p| {
            let ids = e
                .tokenizer
                .encode_batch(&[&*p.replace("<style>", "<style> <style>_1 <style>_2")])
                .unwrap();
            ids.to_vec_f64().unwrap()
        })
        .collect();
    assert_eq!(ids, want["sd_ids"].to_vec_f64().unwrap(), "prompt ids");
    let states = rusting_brain::no_grad(|| pipe.encode_prompts(&prompts, None))
        .unwrap()
        .states;
    let err = worst(&states, &want["sd_states"]);
    assert!(err < 1e-5, "SD states differ by {err:.2e}");
    let e = pipe
        .add_textual_inversion(&inversion("style.safetensors"), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`<style>` is already a token"), "{e}");

    let mut xl = StableDiffusion::from_folder(&sdxl_folder()).unwrap();
    let added = xl
        .add_textual_inversion(&inversion("xl.safetensors"), Some("<xl>"))
        .unwrap();
    assert_eq!(added, ("<xl>".to_string(), 2));
    let cond = rusting_brain::no_grad(|| xl.encode_prompts(&["a <xl> cat"], None)).unwrap();
    let err = worst(&cond.states, &want["xl_states"]);
    assert!(err < 1e-5, "SDXL states differ by {err:.2e}");
    let err = worst(cond.pooled.as_ref().unwrap(), &want["xl_pooled"]);
    assert!(err < 1e-5, "SDXL pooled embeddings differ by {err:.2e}");
}

/// An embedding for another base (the wrong width), or an SDXL file on an SD pipeline, is
/// refused by name and changes nothing.
#[test]
fn a_textual_inversion_for_another_base_is_refused() {
    let mut pipe = StableDiffusion::from_folder(&folder()).unwrap();
    let e = pipe
        .add_textual_inversion(&inversion("xl.safetensors"), Some("<xl>"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("second text encoder"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let wide = dir.path().join("wide.safetensors");
    let mut t = std::collections::BTreeMap::new();
    t.insert(
        "<wide>".to_string(),
        Tensor::zeros(&[2, 9], DType::F32, rusting_brain::Device::Cpu).unwrap(),
    );
    safetensors::save(&wide, &t, None).unwrap();
    let e = pipe
        .add_textual_inversion(&wide, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("9 wide") && e.contains("another base model"),
        "{e}"
    );
    assert!(pipe.prompts.encoders[0]
        .tokenizer
        .tokenizer
        .token_to_id("<wide>")
        .is_none());
}

/// SDXL image to image (`make_sdxl_img2img.py`: diffusers' StableDiffusionXLImg2ImgPipeline
/// from the same folder, its two noise draws recorded): the same image within 1/255.
#[test]
fn sdxl_image_to_image_draws_what_diffusers_draws() {
    let pipe = StableDiffusion::from_folder(&sdxl_folder()).unwrap();
    let want = safetensors::load(sdxl_folder().join("expected.safetensors")).unwrap();
    let ask = TextToImage {
        prompts: vec!["a red cat".into(), "a dog".into()],
        steps: 6,
        guidance: 5.0,
        init_image: Some(want["init_image"].clone()),
        strength: 0.6,
        init_noise: Some((want["init_draw"].clone(), want["init_noise"].clone())),
        ..TextToImage::default()
    };
    let image = pipe.generate(&ask, &mut |_, _| Ok(())).unwrap();
    let err = worst(&image, &want["img2img"]);
    assert!(
        err < 1.0 / 255.0,
        "SDXL image-to-image differs by {err:.2e}"
    );
}

/// Inpainting with sd_tiny's 4-channel UNet (`make_inpaint.py`): at strength 1 the mask's
/// inside starts from pure noise, at 0.6 from the image noised part of the way; after every
/// step the outside is the image's latents at the next step's noise. A soft mask is binarized
/// at 0.5.
#[test]
fn inpainting_draws_what_diffusers_draws() {
    let pipe = StableDiffusion::from_folder(&folder()).unwrap();
    let want = safetensors::load(folder().join("inpaint.safetensors")).unwrap();
    for (tag, strength) in [("s10", 1.0), ("s6", 0.6)] {
        let ask = TextToImage {
            prompts: vec!["a red cat".into(), "a dog".into()],
            steps: 6,
            guidance: 7.5,
            init_image: Some(want["init_image"].clone()),
            mask: Some(want["mask"].clone()),
            strength,
            init_noise: Some((
                want[&format!("{tag}_draw")].clone(),
                want[&format!("{tag}_noise")].clone(),
            )),
            ..TextToImage::default()
        };
        let image = pipe.generate(&ask, &mut |_, _| Ok(())).unwrap();
        let err = worst(&image, &want[&format!("{tag}_images")]);
        assert!(
            err < 1.0 / 255.0,
            "inpainting at strength {strength} differs by {err:.2e}"
        );
    }
}

#[test]
fn a_mask_of_another_size_or_without_an_image_is_refused() {
    let pipe = StableDiffusion::from_folder(&folder()).unwrap();
    let image = Tensor::zeros(&[1, 3, 16, 16], DType::F32, rusting_brain::Device::Cpu).unwrap();
    let small = Tensor::zeros(&[1, 1, 8, 8], DType::F32, rusting_brain::Device::Cpu).unwrap();
    let ask = TextToImage {
        prompts: vec!["a cat".into()],
        steps: 2,
        init_image: Some(image),
        mask: Some(small.clone()),
        ..TextToImage::default()
    };
    let err = pipe
        .generate(&ask, &mut |_, _| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("the mask must be [1, 1, 16, 16]"), "{err}");
    let ask = TextToImage {
        init_image: None,
        size: Some((16, 16)),
        ..ask
    };
    let err = pipe
        .generate(&ask, &mut |_, _| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("a mask needs an init image"), "{err}");
}

/// A 9-channel inpainting UNet (`make_inpaint_unet9.py`: runwayml's inpainting layout) reads
/// the mask and the masked image's latents beside the latents, and nothing is blended: the
/// images equal diffusers' `StableDiffusionInpaintPipeline` at strengths 1 and 0.6.
#[test]
fn a_nine_channel_inpainting_unet_draws_what_diffusers_draws() {
    let dir = folder().join("../sd_inpaint_tiny");
    let pipe = StableDiffusion::from_folder(&dir).unwrap();
    let inputs = safetensors::load(folder().join("inpaint.safetensors")).unwrap();
    let want = safetensors::load(dir.join("expected.safetensors")).unwrap();
    for (tag, strength) in [("s10", 1.0), ("s6", 0.6)] {
        let noise = want[&format!("{tag}_noise")].clone();
        // At strength 1 diffusers encodes no image for the start: any draw stands in.
        let draw = want
            .get(&format!("{tag}_draw"))
            .cloned()
            .unwrap_or_else(|| noise.clone());
        let ask = TextToImage {
            prompts: vec!["a red cat".into(), "a dog".into()],
            steps: 6,
            guidance: 7.5,
            init_image: Some(inputs["init_image"].clone()),
            mask: Some(inputs["mask"].clone()),
            strength,
            init_noise: Some((draw, noise)),
            init_masked_draw: Some(want[&format!("{tag}_masked_draw")].clone()),
            ..TextToImage::default()
        };
        let image = pipe.generate(&ask, &mut |_, _| Ok(())).unwrap();
        let err = worst(&image, &want[&format!("{tag}_images")]);
        assert!(
            err < 1.0 / 255.0,
            "strength {strength}: differs by {err:.2e}"
        );
    }
    let plain = TextToImage {
        prompts: vec!["a red cat".into()],
        steps: 2,
        size: Some((16, 16)),
        ..TextToImage::default()
    };
    let err = pipe
        .generate(&plain, &mut |_, _| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("inpainting UNet"), "{err}");
}
