//! diffusers' UNets against diffusers 0.42: three tiny random-weight UNets saved by
//! `tests/fixtures/diffusion/make_unet.py` (SD 1.x's UNet2DConditionModel; SD 2's form with
//! linear projections, per-block heads and two transformer blocks per attention; DDPM's
//! UNet2DModel with self-attention) load by name and predict as diffusers does for per-sample
//! fractional timesteps and for one shared timestep, within 1e-4 relative (F32, CPU).

use rusting_brain::io::safetensors;
use rusting_brain::models::diffusion::{AddedConditions, UNet};
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Device, Tensor};
use std::path::PathBuf;

#[path = "support/relative_error.rs"]
mod relative_error;
use relative_error::relative_error as relative;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/diffusion")
        .join(name)
}

#[test]
fn unets_predict_as_diffusers() {
    for name in [
        "sd_tiny/unet",
        "unet_sd2_shape",
        "unet_ddpm_tiny",
        "unet_sdxl_shape",
    ] {
        let dir = fixture(name);
        let unet = UNet::from_folder(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = safetensors::load(dir.join("expected.safetensors")).unwrap();
        let ctx = want.get("context");
        // SDXL's pooled text and size numbers, where the fixture has them.
        let added = want.get("time_ids").map(|ids| AddedConditions {
            text_embeds: want["text_embeds"].clone(),
            time_ids: ids.clone(),
        });
        let unet_predict = |t: &Tensor| unet.predict_with(&want["sample"], t, ctx, added.as_ref());
        no_grad(|| {
            let out = unet_predict(&want["timesteps"]).unwrap();
            let err = relative(&out, &want["output"]);
            assert!(err < 1e-4, "{name}: output differs by {err:.2e}");
            let t = Tensor::from_f64s(&[999.0], &[], DType::F32).unwrap();
            let out = unet_predict(&t).unwrap();
            let err = relative(&out, &want["output_t999"]);
            assert!(
                err < 1e-4,
                "{name}: output at one timestep differs by {err:.2e}"
            );
        });
    }
}

#[test]
fn an_sdxl_unet_without_its_added_conditioning_is_refused_by_name() {
    let dir = fixture("unet_sdxl_shape");
    let unet = UNet::from_folder(&dir).unwrap();
    let want = safetensors::load(dir.join("expected.safetensors")).unwrap();
    let err = no_grad(|| unet.predict(&want["sample"], &want["timesteps"], want.get("context")))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("text_embeds") && err.contains("time_ids"),
        "{err}"
    );
    let wrong = AddedConditions {
        text_embeds: want["text_embeds"].narrow(1, 0, 4).unwrap(),
        time_ids: want["time_ids"].clone(),
    };
    let err = no_grad(|| {
        unet.predict_with(
            &want["sample"],
            &want["timesteps"],
            want.get("context"),
            Some(&wrong),
        )
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("text_embeds [2, 5]"), "{err}");
}

#[test]
fn a_unet_trains_its_own_parameters() {
    let dir = fixture("sd_tiny/unet");
    let unet = UNet::from_folder(&dir).unwrap();
    let want = safetensors::load(dir.join("expected.safetensors")).unwrap();
    let out = unet
        .predict(&want["sample"], &want["timesteps"], want.get("context"))
        .unwrap();
    out.mul(&out).unwrap().mean().unwrap().backward().unwrap();
    let params = unet.named_parameters();
    let without: Vec<&String> = params
        .iter()
        .filter(|(_, p)| p.grad().is_none())
        .map(|(n, _)| n)
        .collect();
    assert!(without.is_empty(), "no gradient for {without:?}");
}

#[test]
fn bad_inputs_and_configs_are_refused_by_name() {
    let unet = UNet::from_folder(&fixture("sd_tiny/unet")).unwrap();
    let t = Tensor::zeros(&[1], DType::F32, Device::Cpu).unwrap();
    let odd = Tensor::zeros(&[1, 4, 7, 8], DType::F32, Device::Cpu).unwrap();
    let ctx = Tensor::zeros(&[1, 5, 6], DType::F32, Device::Cpu).unwrap();
    let err = unet.predict(&odd, &t, Some(&ctx)).unwrap_err().to_string();
    assert!(err.contains("multiples of 2"), "{err}");
    let x = Tensor::zeros(&[1, 4, 8, 8], DType::F32, Device::Cpu).unwrap();
    let err = unet.predict(&x, &t, None).unwrap_err().to_string();
    assert!(err.contains("text states"), "{err}");
    let wide = Tensor::zeros(&[1, 5, 7], DType::F32, Device::Cpu).unwrap();
    let err = unet.predict(&x, &t, Some(&wide)).unwrap_err().to_string();
    assert!(err.contains("[1, S, 6]"), "{err}");
    let three = Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap();
    let err = unet
        .predict(&x, &three, Some(&ctx))
        .unwrap_err()
        .to_string();
    assert!(err.contains("3 timesteps for a batch of 1"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let base: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("sd_tiny/unet/config.json")).unwrap(),
    )
    .unwrap();
    for (key, value, want) in [
        (
            "addition_embed_type",
            serde_json::json!("text_image"),
            "addition_embed_type `text_image` is not supported",
        ),
        (
            "up_block_types",
            serde_json::json!(["UpBlock2D", "SimpleCrossAttnUpBlock2D"]),
            "SimpleCrossAttnUpBlock2D",
        ),
        (
            "mid_block_type",
            serde_json::json!("UNetMidBlock2DSimpleCrossAttn"),
            "mid_block_type",
        ),
        (
            "attention_head_dim",
            serde_json::json!([2, 2, 2]),
            "one size or 2",
        ),
        // Sizes far past the weights are refused before anything is allocated.
        (
            "layers_per_block",
            serde_json::json!(5000),
            "not the model they were saved from",
        ),
        (
            "block_out_channels",
            serde_json::json!([4096, 8192]),
            "not the model they were saved from",
        ),
    ] {
        let mut cfg = base.clone();
        cfg[key] = value;
        std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
        std::fs::copy(
            fixture("sd_tiny/unet/diffusion_pytorch_model.safetensors"),
            dir.path().join("diffusion_pytorch_model.safetensors"),
        )
        .unwrap();
        let err = UNet::from_folder(dir.path()).err().unwrap().to_string();
        assert!(err.contains(want), "{key}: {err}");
    }
}

#[test]
fn save_pretrained_round_trips_every_form() {
    for name in [
        "sd_tiny/unet",
        "unet_sd2_shape",
        "unet_ddpm_tiny",
        "unet_sdxl_shape",
    ] {
        let dir = fixture(name);
        let unet = UNet::from_folder(&dir).unwrap();
        let out = tempfile::tempdir().unwrap();
        unet.save_pretrained(out.path()).unwrap();
        let back = UNet::from_folder(out.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back.config, unet.config, "{name}");
        assert_eq!(back.sample_size, Some(8), "{name}");
        let want = safetensors::load(dir.join("expected.safetensors")).unwrap();
        let ctx = want.get("context");
        let added = want.get("time_ids").map(|ids| AddedConditions {
            text_embeds: want["text_embeds"].clone(),
            time_ids: ids.clone(),
        });
        let out =
            no_grad(|| back.predict_with(&want["sample"], &want["timesteps"], ctx, added.as_ref()))
                .unwrap();
        assert!(relative(&out, &want["output"]) < 1e-4, "{name}");
    }
}
