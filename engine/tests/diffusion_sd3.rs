//! The MMDiT families against diffusers 0.42 and transformers 5 on the tiny folders that
//! `tests/fixtures/diffusion/make_sd3_pipeline.py` and `make_flux_pipeline.py` wrote: the T5
//! encoder (ids, and states within 1e-5, a prompt cut at the sequence length included), the
//! transformers of SD3, SD3.5 (q/k norms, dual attention) and FLUX (rotary positions, single
//! blocks, guidance embedding) within 1e-4, and the SD3 and FLUX pipelines' images within
//! 1/255 from the same starting latents.

use rusting_brain::io::safetensors;
use rusting_brain::models::diffusion::mmdit::{
    flux, sincos_position_table, FluxInputs, FluxTransformer, Sd3Transformer,
};
use rusting_brain::models::diffusion::{StableDiffusion, TextToImage};
use rusting_brain::models::t5::{self, T5EncoderModel};
use rusting_brain::nn::Module;
use rusting_brain::{DType, Device, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[path = "support/relative_error.rs"]
mod relative_error;
use relative_error::worst_difference;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/diffusion")
        .join(name)
}

fn expected(name: &str) -> BTreeMap<String, Tensor> {
    safetensors::load(fixture(name).join("expected.safetensors")).unwrap()
}

fn worst(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    worst_difference(&got.to_vec_f64().unwrap(), &want.to_vec_f64().unwrap())
}

const T5_PROMPTS: [&str; 3] = [
    "a red cat",
    "a photograph of an astronaut riding a horse",
    "the quick brown fox jumps over the lazy dog the quick brown fox jumps over the lazy dog the quick brown fox jumps over the lazy dog the quick brown fox jumps over the lazy dog",
];

#[test]
fn t5_encodes_as_transformers_encodes() {
    let dir = fixture("sd3_tiny");
    let want = expected("sd3_tiny");
    let tokenizer = t5::tokenizer::from_folder(&dir.join("tokenizer_3"), 24).unwrap();
    let ids = tokenizer.encode_batch(&T5_PROMPTS).unwrap();
    assert_eq!(
        ids.to_vec_f64().unwrap(),
        want["t5_ids"].to_vec_f64().unwrap(),
        "T5 ids (padded with <pad>, the long prompt cut keeping </s>)"
    );
    let model = T5EncoderModel::from_folder(&dir.join("text_encoder_3")).unwrap();
    let states = rusting_brain::no_grad(|| model.forward(&ids)).unwrap();
    let err = worst(&states, &want["t5_states"]);
    assert!(err < 1e-5, "T5 states differ by {err:.2e}");
}

#[test]
fn t5_buckets_follow_the_logarithmic_rule() {
    // T5's defaults (32 buckets, 128 apart at most): distances 0..7 exact, then log-spaced,
    // keys after the query in the upper half.
    let b = t5::relative_position_buckets(1, 200, 32, 128);
    assert_eq!(&b[..8], &[0, 17, 18, 19, 20, 21, 22, 23]);
    assert_eq!(b[8], 24, "distance 8 starts the logarithmic buckets");
    assert_eq!(b[127], 31);
    assert_eq!(b[199], 31, "beyond max_distance, the last bucket");
    let back = t5::relative_position_buckets(200, 1, 32, 128);
    assert_eq!(&back[..3], &[0, 1, 2]);
    assert_eq!(back[12], 9, "distance 12 before the query");
}

fn transformer_matches(folder: &Path, want: &BTreeMap<String, Tensor>) -> f64 {
    let model = Sd3Transformer::from_folder(folder).unwrap();
    let got = rusting_brain::no_grad(|| {
        model.predict(&want["x"], &want["t"], &want["context"], &want["pooled_in"])
    })
    .unwrap();
    let scale = want["transformed"]
        .to_vec_f64()
        .unwrap()
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    worst(&got, &want["transformed"]) / scale
}

#[test]
fn the_sd3_transformer_predicts_what_diffusers_predicts() {
    let err = transformer_matches(
        &fixture("sd3_tiny").join("transformer"),
        &expected("sd3_tiny"),
    );
    assert!(
        err < 1e-4,
        "SD3 transformer differs by {err:.2e} (relative)"
    );
}

#[test]
fn the_sd35_transformer_predicts_what_diffusers_predicts() {
    // q/k RMS norms in every attention, and block 0's second attention (SD35AdaLayerNormZeroX).
    let err = transformer_matches(&fixture("transformer_sd35"), &expected("transformer_sd35"));
    assert!(
        err < 1e-4,
        "SD3.5 transformer differs by {err:.2e} (relative)"
    );
}

#[test]
fn the_position_table_is_the_one_diffusers_saves() {
    let weights = safetensors::load(
        fixture("sd3_tiny").join("transformer/diffusion_pytorch_model.safetensors"),
    )
    .unwrap();
    // sample_size 8, patch 2: base size 4; a 12 x 12 grid of 16-wide rows.
    let table = sincos_position_table(16, 12, 4.0, 1.0).unwrap();
    let err = worst(
        &table.unsqueeze(0).unwrap(),
        &weights["pos_embed.pos_embed"],
    );
    assert!(err < 1e-6, "the sin-cos table differs by {err:.2e}");
}

#[test]
fn an_image_larger_than_the_position_table_is_refused() {
    let model = Sd3Transformer::from_folder(&fixture("sd3_tiny").join("transformer")).unwrap();
    // pos_embed_max_size 12 patches of 2: latents of at most 24 x 24.
    let x = Tensor::zeros(&[1, 6, 26, 8], DType::F32, Device::Cpu).unwrap();
    let context = Tensor::zeros(&[1, 3, 16], DType::F32, Device::Cpu).unwrap();
    let pooled = Tensor::zeros(&[1, 12], DType::F32, Device::Cpu).unwrap();
    let t = Tensor::from_f64s(&[500.0], &[1], DType::F32).unwrap();
    let err = model
        .predict(&x, &t, &context, &pooled)
        .unwrap_err()
        .to_string();
    assert!(err.contains("pos_embed_max_size 12"), "{err}");
    let odd = Tensor::zeros(&[1, 6, 7, 8], DType::F32, Device::Cpu).unwrap();
    let err = model
        .predict(&odd, &t, &context, &pooled)
        .unwrap_err()
        .to_string();
    assert!(err.contains("2x2 patches"), "{err}");
}

fn ask(guidance: f64, negative: Vec<String>, latents: &Tensor) -> TextToImage {
    TextToImage {
        prompts: vec!["a red cat".into(), "a dog".into()],
        negative,
        steps: 5,
        guidance,
        size: Some((32, 32)),
        latents: Some(latents.clone()),
        max_sequence_length: Some(24),
        ..TextToImage::default()
    }
}

#[test]
fn sd3_draws_what_diffusers_draws() {
    let pipe = StableDiffusion::from_folder(&fixture("sd3_tiny")).unwrap();
    let want = expected("sd3_tiny");
    assert_eq!(pipe.default_guidance(), 7.0);
    assert_eq!(pipe.default_steps(), 28);
    let cond =
        rusting_brain::no_grad(|| pipe.encode_prompts(&["a red cat", "a dog"], Some(24))).unwrap();
    // CLIP-L's and CLIP-G's 16 tokens (6 + 8 wide, padded to 16), then T5's 24.
    let err = worst(&cond.states, &want["states"]);
    assert!(err < 1e-5, "prompt states differ by {err:.2e}");
    let err = worst(cond.pooled.as_ref().unwrap(), &want["pooled"]);
    assert!(err < 1e-5, "pooled embeddings differ by {err:.2e}");
    for (name, guidance, negative) in [
        ("guided", 7.0, vec![]),
        ("negative", 7.0, vec!["".to_string(), "blurry".to_string()]),
        ("plain", 1.0, vec![]),
    ] {
        let images = pipe
            .generate(&ask(guidance, negative, &want["latents"]), &mut |_, _| {
                Ok(())
            })
            .unwrap();
        let err = worst(&images, &want[name]);
        assert!(err < 1.0 / 255.0, "{name}: images differ by {err:.2e}");
    }
}

#[test]
fn sd3_without_t5_reads_zeros_in_its_place() {
    // diffusers' text_encoder_3=None: the T5 part of the states is zeros.
    let dir = tempfile::tempdir().unwrap();
    copy_folder(&fixture("sd3_tiny"), dir.path());
    let index = dir.path().join("model_index.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
    json["text_encoder_3"] = serde_json::json!([null, null]);
    std::fs::write(&index, json.to_string()).unwrap();
    let pipe = StableDiffusion::from_folder(dir.path()).unwrap();
    assert_eq!(pipe.prompts.encoders.len(), 2);
    let cond = rusting_brain::no_grad(|| pipe.encode_prompts(&["a red cat"], Some(24))).unwrap();
    assert_eq!(cond.states.shape(), &[1, 16 + 24, 16]);
    let t5_part = cond.states.narrow(1, 16, 24).unwrap();
    assert_eq!(t5_part.abs().unwrap().sum().unwrap().item().unwrap(), 0.0);
}

fn copy_folder(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn the_flux_transformer_predicts_what_diffusers_predicts() {
    // Guidance embedding, two double- and two single-stream blocks, rotary axes 2 + 2 + 4.
    let want = expected("flux_tiny");
    let model = FluxTransformer::from_folder(&fixture("flux_tiny").join("transformer")).unwrap();
    let ids = flux::image_ids(8, 8);
    let inputs = FluxInputs {
        context: &want["context"],
        pooled: &want["pooled_in"],
        timesteps: &want["t"],
        guidance: Some(&want["guidance"]),
        image_ids: &ids,
    };
    let got = rusting_brain::no_grad(|| model.predict(&want["x"], &inputs)).unwrap();
    let scale = want["transformed"]
        .to_vec_f64()
        .unwrap()
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let err = worst(&got, &want["transformed"]) / scale;
    assert!(
        err < 1e-4,
        "FLUX transformer differs by {err:.2e} (relative)"
    );
}

#[test]
fn flux_draws_what_diffusers_draws() {
    let pipe = StableDiffusion::from_folder(&fixture("flux_tiny")).unwrap();
    let want = expected("flux_tiny");
    assert_eq!(pipe.default_guidance(), 3.5);
    let cond =
        rusting_brain::no_grad(|| pipe.encode_prompts(&["a red cat", "a dog"], Some(24))).unwrap();
    let err = worst(&cond.states, &want["states"]);
    assert!(err < 1e-5, "T5 states differ by {err:.2e}");
    let err = worst(cond.pooled.as_ref().unwrap(), &want["pooled"]);
    assert!(err < 1e-5, "CLIP's pooled rows differ by {err:.2e}");
    let ask = TextToImage {
        steps: 4,
        guidance: 3.5,
        ..ask(3.5, vec![], &want["latents"])
    };
    let images = pipe.generate(&ask, &mut |_, _| Ok(())).unwrap();
    let err = worst(&images, &want["images"]);
    assert!(err < 1.0 / 255.0, "images differ by {err:.2e}");
}

/// Image to image on SD3 and FLUX (`make_mmdit_img2img.py`: diffusers' img2img pipelines from
/// the same folders, their two noise draws recorded): 5 steps at strength 0.7 run 4, as those
/// pipelines round (int(5 - 3.5) = 1 skipped), and give diffusers' images within 1/255.
#[test]
fn sd3_and_flux_image_to_image_draw_what_diffusers_draws() {
    for (folder, guidance) in [("sd3_tiny", 7.0), ("flux_tiny", 3.5)] {
        let pipe = StableDiffusion::from_folder(&fixture(folder)).unwrap();
        let want = expected(folder);
        let ask = TextToImage {
            prompts: vec!["a red cat".into(), "a dog".into()],
            steps: 5,
            guidance,
            init_image: Some(want["init_image"].clone()),
            strength: 0.7,
            init_noise: Some((want["init_draw"].clone(), want["init_noise"].clone())),
            max_sequence_length: Some(24),
            ..TextToImage::default()
        };
        assert_eq!(pipe.steps_run(&ask), 4, "{folder}");
        let mut ran = 0;
        let image = pipe
            .generate(&ask, &mut |_, _| {
                ran += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(ran, 4, "{folder}");
        let err = worst(&image, &want["img2img"]);
        assert!(
            err < 1.0 / 255.0,
            "{folder} image-to-image differs by {err:.2e}"
        );
    }
}

/// FLUX inpainting (`make_mmdit_img2img.py`: diffusers' FluxInpaintPipeline, its draws
/// recorded): at strength 1 the mask's inside starts from pure noise, at 0.6 from the image
/// noised part of the way; after every step the outside is the image's latents at the next
/// step's noise; diffusers' images within 1/255.
#[test]
fn flux_inpainting_draws_what_diffusers_draws() {
    let pipe = StableDiffusion::from_folder(&fixture("flux_tiny")).unwrap();
    let want = expected("flux_tiny");
    assert_inpaints_as_diffusers(&pipe, &want, "inpaint_", 3.5, "FLUX");
}

/// SD3 inpainting (`make_sd3_inpaint.py`: sd3_tiny's encoders with a 16-channel VAE and
/// transformer, as diffusers' StableDiffusion3InpaintPipeline requires; its draws recorded):
/// diffusers' images within 1/255 at strengths 1 and 0.6. The VAE's shift is 0 there:
/// diffusers' SD3 inpainting decodes without adding the shift back, which we do not copy.
#[test]
fn sd3_inpainting_draws_what_diffusers_draws() {
    let dir = tempfile::tempdir().unwrap();
    copy_folder(&fixture("sd3_tiny"), dir.path());
    for part in ["vae", "transformer"] {
        std::fs::remove_dir_all(dir.path().join(part)).unwrap();
        std::fs::create_dir_all(dir.path().join(part)).unwrap();
        copy_folder(
            &fixture("sd3_inpaint_tiny").join(part),
            &dir.path().join(part),
        );
    }
    let pipe = StableDiffusion::from_folder(dir.path()).unwrap();
    let want = safetensors::load(fixture("sd3_inpaint_tiny").join("expected.safetensors")).unwrap();
    assert_inpaints_as_diffusers(&pipe, &want, "", 7.0, "SD3");
}

/// Inpainting at strengths 1 and 0.6 from the fixture's image, mask and recorded draws
/// (`<prefix>s10_draw`, `..._noise`, `..._images`, and `s6`): diffusers' images within 1/255.
fn assert_inpaints_as_diffusers(
    pipe: &StableDiffusion,
    want: &BTreeMap<String, Tensor>,
    prefix: &str,
    guidance: f64,
    what: &str,
) {
    for (tag, strength) in [("s10", 1.0), ("s6", 0.6)] {
        let tag = format!("{prefix}{tag}");
        let ask = TextToImage {
            prompts: vec!["a red cat".into(), "a dog".into()],
            steps: 5,
            guidance,
            init_image: Some(want["init_image"].clone()),
            mask: Some(want["mask"].clone()),
            strength,
            init_noise: Some((
                want[&format!("{tag}_draw")].clone(),
                want[&format!("{tag}_noise")].clone(),
            )),
            max_sequence_length: Some(24),
            ..TextToImage::default()
        };
        let image = pipe.generate(&ask, &mut |_, _| Ok(())).unwrap();
        let err = worst(&image, &want[&format!("{tag}_images")]);
        assert!(
            err < 1.0 / 255.0,
            "{what} inpainting at strength {strength} differs by {err:.2e}"
        );
    }
}

/// FLUX's true classifier-free guidance (diffusers' true_cfg_scale 2 with negative prompts,
/// beside the distilled guidance 3.5): diffusers' images within 1/255; without a negative
/// prompt, or on another model, it is refused by name.
#[test]
fn flux_true_cfg_mixes_a_negative_pass_as_diffusers_does() {
    let pipe = StableDiffusion::from_folder(&fixture("flux_tiny")).unwrap();
    let want = expected("flux_tiny");
    let sd3_ask = ask(7.0, vec![], &expected("sd3_tiny")["latents"]);
    let ask = TextToImage {
        steps: 4,
        true_cfg: 2.0,
        ..ask(
            3.5,
            vec!["blurry".to_string(), "dark".to_string()],
            &want["latents"],
        )
    };
    let images = pipe.generate(&ask, &mut |_, _| Ok(())).unwrap();
    let err = worst(&images, &want["true_cfg"]);
    assert!(err < 1.0 / 255.0, "true CFG images differ by {err:.2e}");
    let plain = worst(&images, &want["images"]);
    assert!(plain > 1e-3, "true CFG changed nothing ({plain:.2e})");
    let err = pipe
        .generate(
            &TextToImage {
                negative: vec![],
                ..ask.clone()
            },
            &mut |_, _| Ok(()),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("give one"), "{err}");
    let sd3 = StableDiffusion::from_folder(&fixture("sd3_tiny")).unwrap();
    let err = sd3
        .generate(
            &TextToImage {
                true_cfg: 2.0,
                ..sd3_ask
            },
            &mut |_, _| Ok(()),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("FLUX's second guidance"), "{err}");
}

/// SD3 and FLUX LoRA files in diffusers' layout (`make_mmdit_lora.py`: PEFT adapters on both
/// streams' attention projections and feed-forwards, FLUX's single blocks too, alpha in the
/// file's metadata), merged at strength 0.7: the transformer's output diffusers computes after
/// `load_lora_weights` + `fuse_lora(0.7)`, within 1e-4 relative.
#[test]
fn sd3_and_flux_loras_merge_as_diffusers_fuses_them() {
    use rusting_brain::models::diffusion::denoiser::Denoiser;
    let fused = safetensors::load(fixture("mmdit_lora").join("expected.safetensors")).unwrap();
    for (name, folder, modules) in [("sd3", "sd3_tiny", 26), ("flux", "flux_tiny", 29)] {
        let pipe = StableDiffusion::from_folder(&fixture(folder)).unwrap();
        let want = expected(folder);
        let (denoiser, text) = pipe
            .add_lora(
                &fixture("mmdit_lora").join(format!("{name}.safetensors")),
                0.7,
            )
            .unwrap();
        assert_eq!((denoiser, text), (modules, 0), "{name}");
        let got = rusting_brain::no_grad(|| match &pipe.denoiser {
            Denoiser::Sd3(m) => {
                m.predict(&want["x"], &want["t"], &want["context"], &want["pooled_in"])
            }
            Denoiser::Flux(m) => {
                let ids = flux::image_ids(8, 8);
                m.predict(
                    &want["x"],
                    &FluxInputs {
                        context: &want["context"],
                        pooled: &want["pooled_in"],
                        timesteps: &want["t"],
                        guidance: Some(&want["guidance"]),
                        image_ids: &ids,
                    },
                )
            }
            Denoiser::UNet(_) => unreachable!("an MMDiT folder"),
        })
        .unwrap();
        let target = &fused[&format!("{name}_fused")];
        let scale = target
            .to_vec_f64()
            .unwrap()
            .iter()
            .fold(0.0f64, |m, v| m.max(v.abs()));
        let err = worst(&got, target) / scale;
        assert!(
            err < 1e-4,
            "{name}: fused LoRA differs by {err:.2e} (relative)"
        );
    }
}

#[test]
fn flux_latents_pack_into_2x2_patches_and_back() {
    let x = Tensor::from_f64s(
        &(0..2 * 3 * 4 * 6).map(f64::from).collect::<Vec<_>>(),
        &[2, 3, 4, 6],
        DType::F32,
    )
    .unwrap();
    let packed = flux::pack_latents(&x).unwrap();
    assert_eq!(packed.shape(), &[2, 6, 12]);
    // Token 0 holds channel 0's top-left 2x2 patch first: (0,0), (0,1), (1,0), (1,1).
    let first: Vec<f64> = packed.narrow(1, 0, 1).unwrap().to_vec_f64().unwrap();
    assert_eq!(&first[..4], &[0.0, 1.0, 6.0, 7.0]);
    let back = flux::unpack_latents(&packed, 4, 6).unwrap();
    assert_eq!(back.to_vec_f64().unwrap(), x.to_vec_f64().unwrap());
}

#[test]
fn a_t5_length_past_512_is_refused() {
    // diffusers refuses max_sequence_length above 512; a huge one would size the position
    // bias quadratically.
    let pipe = StableDiffusion::from_folder(&fixture("sd3_tiny")).unwrap();
    let err = rusting_brain::no_grad(|| pipe.encode_prompts(&["a cat"], Some(513)))
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_sequence_length 513 is outside 1..=512"),
        "{err}"
    );
}
