//! Stable Diffusion LoRA files against diffusers 0.42 + peft (`tests/fixtures/diffusion/
//! make_lora.py`): the same LoRA in diffusers' own layout (scale 1) and in kohya's (alpha /
//! rank = 2), merged at strength 0.7 into the tiny pipeline, gives the UNet diffusers computes
//! after `load_lora_weights` + `fuse_lora(0.7)` (1e-4), and the text states of the hand-made
//! merge (1e-5); a LoRA for another base is refused by name with nothing changed.

use rusting_brain::io::safetensors;
use rusting_brain::models::diffusion::StableDiffusion;
use rusting_brain::{no_grad, Tensor};
use std::path::PathBuf;

#[path = "support/relative_error.rs"]
mod relative_error;
use relative_error::relative_error;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/diffusion")
        .join(name)
}

fn unet_output(pipe: &StableDiffusion) -> Tensor {
    let inputs = safetensors::load(fixture("sd_tiny/unet/expected.safetensors")).unwrap();
    no_grad(|| {
        pipe.unet().unwrap().predict(
            &inputs["sample"],
            &inputs["timesteps"],
            Some(&inputs["context"]),
        )
    })
    .unwrap()
}

#[test]
fn both_layouts_merge_as_diffusers_fuses_them() {
    let want = safetensors::load(fixture("lora/expected.safetensors")).unwrap();
    for layout in ["peft", "kohya"] {
        let pipe = StableDiffusion::from_folder(&fixture("sd_tiny")).unwrap();
        let before = unet_output(&pipe);
        let (unet, text) = pipe
            .add_lora(&fixture(&format!("lora/{layout}.safetensors")), 0.7)
            .unwrap();
        // q, k, v and out of 8 attentions, 4 proj_in, 8 resnets' conv1; q and v of 2 layers.
        assert_eq!((unet, text), (44, 4), "{layout}");
        let got = unet_output(&pipe);
        assert!(
            relative_error(&got, &before) > 1e-2,
            "{layout}: the LoRA changed nothing"
        );
        let err = relative_error(&got, &want[&format!("{layout}_unet")]);
        assert!(
            err < 1e-4,
            "{layout}: UNet differs from diffusers' by {err:.2e}"
        );
        let states = no_grad(|| pipe.encode_prompts(&["a red cat", "a dog"], None))
            .unwrap()
            .states;
        let err = relative_error(&states, &want["text"]);
        assert!(err < 1e-5, "{layout}: text states differ by {err:.2e}");
    }
}

#[test]
fn a_lora_for_another_base_changes_nothing_and_says_so() {
    let pipe = StableDiffusion::from_folder(&fixture("sd_tiny")).unwrap();
    let before = unet_output(&pipe);
    let dir = tempfile::tempdir().unwrap();
    // The kohya file with one module renamed to one this UNet lacks.
    let mut tensors = safetensors::load(fixture("lora/kohya.safetensors")).unwrap();
    let moved: Vec<(String, Tensor)> = tensors
        .iter()
        .filter(|(k, _)| k.starts_with("lora_unet_mid_block_attentions_0_proj_in"))
        .map(|(k, v)| (k.replace("mid_block", "mid_block_9"), v.clone()))
        .collect();
    tensors.extend(moved);
    let path = dir.path().join("other.safetensors");
    safetensors::save(&path, &tensors, None).unwrap();
    let err = pipe.add_lora(&path, 1.0).unwrap_err().to_string();
    assert!(
        err.contains("has no module mid_block_9_attentions_0_proj_in"),
        "{err}"
    );
    assert_eq!(
        unet_output(&pipe).to_vec_f64().unwrap(),
        before.to_vec_f64().unwrap(),
        "a refused LoRA changed the weights"
    );
    std::fs::write(dir.path().join("junk.safetensors"), b"not a file").unwrap();
    assert!(pipe
        .add_lora(&dir.path().join("junk.safetensors"), 1.0)
        .is_err());
}

/// A diffusers file whose scale is in its `lora_adapter_metadata` (lora_alpha 6 over rank 2,
/// and alpha 1 for the proj_in modules by `alpha_pattern`) merges as diffusers merges it.
#[test]
fn the_metadata_alphas_scale_a_diffusers_file() {
    let want = safetensors::load(fixture("lora/expected.safetensors")).unwrap();
    let pipe = StableDiffusion::from_folder(&fixture("sd_tiny")).unwrap();
    let (unet, _) = pipe
        .add_lora(&fixture("lora/peft_metadata.safetensors"), 0.7)
        .unwrap();
    assert_eq!(unet, 20);
    let err = relative_error(&unet_output(&pipe), &want["metadata_unet"]);
    assert!(err < 1e-4, "UNet differs from diffusers' by {err:.2e}");
}

/// A LoRA our training script wrote (`make_trained_lora.sh`: `train_lora_sd.rhai` on the tiny
/// pipeline) loads in diffusers (`check_trained_lora.py`), and predicts there what it predicts
/// here: at strength 1 and 0.7.
#[test]
fn a_lora_trained_here_predicts_in_diffusers_what_it_predicts_here() {
    let want = safetensors::load(fixture("lora/trained_here_expected.safetensors")).unwrap();
    let base = unet_output(&StableDiffusion::from_folder(&fixture("sd_tiny")).unwrap());
    assert!(
        relative_error(&want["unfused"], &base) > 1e-3,
        "the trained LoRA changes the prediction"
    );
    for (strength, key) in [(1.0, "unfused"), (0.7, "fused_07")] {
        let pipe = StableDiffusion::from_folder(&fixture("sd_tiny")).unwrap();
        let (unet, text) = pipe
            .add_lora(&fixture("lora/trained_here.safetensors"), strength)
            .unwrap();
        // q, k, v and out of the 8 attentions.
        assert_eq!((unet, text), (32, 0));
        let err = relative_error(&unet_output(&pipe), &want[key]);
        assert!(err < 1e-4, "strength {strength}: differs by {err:.2e}");
    }
}

/// `save_lora` writes what the adapters compute: a UNet with trained (non-zero) adapters
/// predicts what the base with the saved file merged predicts, alpha / rank folded in.
#[test]
fn saved_adapters_merge_back_to_the_same_prediction() {
    use rusting_brain::models::diffusion::lora::save_lora;
    use rusting_brain::models::diffusion::UNet;
    use rusting_brain::nn::lora_targets::add_lora;
    use rusting_brain::nn::{LoraSpec, Module};
    let mut unet = UNet::from_folder(&fixture("sd_tiny/unet")).unwrap();
    let spec = LoraSpec {
        rank: 2,
        scale: 3.0,
        dropout: 0.0,
    };
    let targets = vec!["to_q".to_string(), "to_out.0".to_string()];
    add_lora(&mut unet, &targets, &[], spec, 1).unwrap();
    // B starts at zero: give it values, as training would.
    let mut gen = rusting_brain::Generator::new(5);
    for (name, p) in unet.named_parameters() {
        if name.ends_with("lora_B.weight") {
            let v = Tensor::randn(p.shape(), p.dtype(), Some(&mut gen)).unwrap();
            no_grad(|| p.copy_(&v.mul_scalar(0.1)?)).unwrap();
        }
    }
    let inputs = safetensors::load(fixture("sd_tiny/unet/expected.safetensors")).unwrap();
    let adapted = no_grad(|| {
        unet.predict(
            &inputs["sample"],
            &inputs["timesteps"],
            Some(&inputs["context"]),
        )
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lora.safetensors");
    assert_eq!(save_lora(&mut unet, "unet", &path).unwrap(), 16);
    let pipe = StableDiffusion::from_folder(&fixture("sd_tiny")).unwrap();
    assert_eq!(pipe.add_lora(&path, 1.0).unwrap(), (16, 0));
    let err = relative_error(&unet_output(&pipe), &adapted);
    assert!(
        err < 1e-5,
        "the merged file differs from the adapters by {err:.2e}"
    );
}
