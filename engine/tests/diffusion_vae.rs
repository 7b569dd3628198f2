//! diffusers' AutoencoderKL against diffusers 0.42: two tiny random-weight VAEs saved by
//! `tests/fixtures/diffusion/make_vae.py` (SD's shape with quant convs and the middle's
//! attention; SD3's without either, three blocks, two resnets each, a shift factor) load by
//! name and give diffusers' latent mean and log-variance, decodings and reconstructions within
//! 1e-4 relative (F32, CPU).

use rusting_brain::io::safetensors;
use rusting_brain::models::diffusion::AutoencoderKl;
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, Generator, Tensor};
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
fn published_layout_vaes_encode_and_decode_as_diffusers() {
    for name in ["sd_tiny/vae", "vae_sd3_shape"] {
        let dir = fixture(name);
        let vae = AutoencoderKl::from_folder(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = safetensors::load(dir.join("expected.safetensors")).unwrap();
        no_grad(|| {
            let dist = vae.encode(&want["image"]).unwrap();
            for (what, got) in [("mean", &dist.mean), ("logvar", &dist.logvar)] {
                let err = relative(got, &want[what]);
                assert!(err < 1e-4, "{name}: {what} differs by {err:.2e}");
            }
            let decoded = vae.decode(&want["latents"]).unwrap();
            let err = relative(&decoded, &want["decoded"]);
            assert!(err < 1e-4, "{name}: decode differs by {err:.2e}");
            let recon = vae.forward(&want["image"]).unwrap();
            let err = relative(&recon, &want["reconstruction"]);
            assert!(err < 1e-4, "{name}: reconstruction differs by {err:.2e}");
        });
    }
}

/// Latents larger than the VAE's tile (13x19 against 8x8, odd sides, so the edge tiles are
/// partial) decode as diffusers' tiled decode does, seams blended; and differently from the
/// whole decode, so the tiles are really in play.
#[test]
fn a_tiled_decode_equals_diffusers_enable_tiling() {
    let dir = fixture("sd_tiny/vae");
    let vae = AutoencoderKl::from_folder(&dir).unwrap();
    let want = safetensors::load(dir.join("tiled.safetensors")).unwrap();
    assert!(vae.needs_tiles(&want["latents"]));
    no_grad(|| {
        let tiled = vae.decode_tiled(&want["latents"]).unwrap();
        assert_eq!(tiled.shape(), want["decoded"].shape());
        let err = relative(&tiled, &want["decoded"]);
        assert!(err < 1e-4, "tiled decode differs by {err:.2e}");
        let whole = vae.decode(&want["latents"]).unwrap();
        assert!(
            relative(&whole, &want["decoded"]) > 1e-3,
            "the tiles made no difference"
        );
    });
}

#[test]
fn latents_scale_and_sample_as_the_config_says() {
    let vae = AutoencoderKl::from_folder(&fixture("vae_sd3_shape")).unwrap();
    let z = Tensor::from_f64s(&[1.1, -0.4], &[2], rusting_brain::DType::F32).unwrap();
    // (z - 0.1) * 1.5 and back.
    let scaled = vae.scale_latents(&z).unwrap().to_vec_f64().unwrap();
    assert!(
        (scaled[0] - 1.5).abs() < 1e-6 && (scaled[1] + 0.75).abs() < 1e-6,
        "{scaled:?}"
    );
    let back = vae
        .unscale_latents(&vae.scale_latents(&z).unwrap())
        .unwrap();
    assert!(relative(&back, &z) < 1e-6);
    let want = safetensors::load(fixture("vae_sd3_shape").join("expected.safetensors")).unwrap();
    let dist = no_grad(|| vae.encode(&want["image"])).unwrap();
    let a = dist.sample(&mut Generator::new(3)).unwrap();
    let b = dist.sample(&mut Generator::new(3)).unwrap();
    assert_eq!(a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    assert!(relative(&a, &dist.mean) > 1e-3, "a sample is not the mean");
}

#[test]
fn wrong_inputs_and_folders_are_refused_by_name() {
    let vae = AutoencoderKl::from_folder(&fixture("sd_tiny/vae")).unwrap();
    let odd = Tensor::zeros(
        &[1, 3, 15, 16],
        rusting_brain::DType::F32,
        rusting_brain::Device::Cpu,
    )
    .unwrap();
    let err = vae.encode(&odd).err().unwrap().to_string();
    assert!(err.contains("multiples of 2"), "{err}");
    let bad = Tensor::zeros(
        &[1, 3, 4, 4],
        rusting_brain::DType::F32,
        rusting_brain::Device::Cpu,
    )
    .unwrap();
    let err = vae.decode(&bad).unwrap_err().to_string();
    assert!(err.contains("latents [N, 4, h, w]"), "{err}");
    let err = AutoencoderKl::from_folder(&fixture("no_such_vae"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("config.json"), "{err}");
    // The other VAE's weights under this config: every tensor named with its shape.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("sd_tiny/vae/config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    std::fs::copy(
        fixture("vae_sd3_shape/diffusion_pytorch_model.safetensors"),
        dir.path().join("diffusion_pytorch_model.safetensors"),
    )
    .unwrap();
    let err = AutoencoderKl::from_folder(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("missing") && err.contains("quant_conv"),
        "{err}"
    );
    let cfg =
        r#"{"_class_name": "AutoencoderKL", "block_out_channels": [4, 6], "norm_num_groups": 4}"#;
    std::fs::write(dir.path().join("config.json"), cfg).unwrap();
    let err = AutoencoderKl::from_folder(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("4 channels do not split") || err.contains("6 channels do not split"),
        "{err}"
    );
}
