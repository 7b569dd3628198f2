//! The diffusers UNet on CUDA against the CPU (skips without a GPU).

use rusting_brain::backend::cuda;
use rusting_brain::models::diffusion::UNet;
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Device, Generator, Tensor};

/// A UNet on the GPU takes timesteps made on the host (a sampling loop's numbers), and
/// predicts what the CPU predicts. The training script's sampler once failed here with
/// "tensors are on different devices".
#[test]
fn a_unet_on_the_gpu_takes_host_timesteps_and_matches_the_cpu() {
    let Some(dev) =
        cuda::device_for_test("a_unet_on_the_gpu_takes_host_timesteps_and_matches_the_cpu")
    else {
        return;
    };
    let config = serde_json::json!({
        "_class_name": "UNet2DModel", "sample_size": 8, "in_channels": 3, "out_channels": 3,
        "block_out_channels": [16, 32], "layers_per_block": 1,
        "down_block_types": ["DownBlock2D", "AttnDownBlock2D"],
        "up_block_types": ["AttnUpBlock2D", "UpBlock2D"],
        "norm_num_groups": 8, "attention_head_dim": 8
    });
    let config = rusting_brain::models::diffusion::UNetConfig::from_json(&config).unwrap();
    let unet = UNet::new(config, &mut Generator::new(0)).unwrap();
    let x = Tensor::randn_on(
        &[2, 3, 8, 8],
        DType::F32,
        Device::Cpu,
        Some(&mut Generator::new(1)),
    )
    .unwrap();
    let t = Tensor::from_f64s(&[500.0], &[1], DType::F32).unwrap();
    let on_cpu = no_grad(|| unet.predict(&x, &t, None)).unwrap();
    unet.to_device(dev).unwrap();
    let on_gpu = no_grad(|| unet.predict(&x.to_device(dev).unwrap(), &t, None)).unwrap();
    assert_eq!(on_gpu.device(), dev);
    let (a, b) = (on_cpu.to_vec_f64().unwrap(), on_gpu.to_vec_f64().unwrap());
    let worst = a
        .iter()
        .zip(&b)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-3, "largest difference {worst}");
}

/// The SD3 and FLUX pipelines on the GPU draw what diffusers draws on the CPU (the fixtures
/// of diffusion_sd3.rs), in F32 and under BF16 autocast (looser: the MMDiT's products and
/// attention in BF16).
#[test]
fn mmdit_pipelines_on_the_gpu_draw_what_diffusers_draws() {
    use rusting_brain::models::diffusion::{StableDiffusion, TextToImage};
    let Some(dev) = cuda::device_for_test("mmdit_pipelines_on_the_gpu_draw_what_diffusers_draws")
    else {
        return;
    };
    let fixtures =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/diffusion");
    for (name, image, steps, guidance) in [
        ("sd3_tiny", "guided", 5, 7.0),
        ("flux_tiny", "images", 4, 3.5),
    ] {
        let pipe = StableDiffusion::from_folder(&fixtures.join(name)).unwrap();
        let want =
            rusting_brain::io::safetensors::load(fixtures.join(name).join("expected.safetensors"))
                .unwrap();
        pipe.to_device(dev).unwrap();
        let ask = TextToImage {
            prompts: vec!["a red cat".into(), "a dog".into()],
            steps,
            guidance,
            size: Some((32, 32)),
            latents: Some(want["latents"].clone()),
            max_sequence_length: Some(24),
            ..TextToImage::default()
        };
        for (dtype, tolerance) in [(None, 2.0 / 255.0), (Some(DType::BF16), 0.1)] {
            let images =
                rusting_brain::amp::autocast(dtype, || pipe.generate(&ask, &mut |_, _| Ok(())))
                    .unwrap();
            let (a, b) = (
                images.to_vec_f64().unwrap(),
                want[image].to_vec_f64().unwrap(),
            );
            assert_eq!(a.len(), b.len());
            let worst = a
                .iter()
                .zip(&b)
                .map(|(p, q)| (p - q).abs())
                .fold(0.0, f64::max);
            assert!(
                worst < tolerance,
                "{name} under {dtype:?}: images differ by {worst:.3e}"
            );
        }
    }
}

/// The denoising step captured as a CUDA graph (after its first step, op by op) predicts what
/// the op-by-op step predicts at every later timestep and latents, for SD3's and FLUX's
/// transformers; and it is captured (a capture that failed would fall back to op by op
/// silently but for one warning, and this comparison would pass on its own). A UNet is not
/// captured (`gains_from_capture`) and predicts the same.
#[test]
fn a_captured_denoising_step_predicts_what_the_step_op_by_op_predicts() {
    use rusting_brain::models::diffusion::denoise_step::DenoiseStep;
    use rusting_brain::models::diffusion::StableDiffusion;
    let Some(dev) =
        cuda::device_for_test("a_captured_denoising_step_predicts_what_the_step_op_by_op_predicts")
    else {
        return;
    };
    let fixtures =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/diffusion");
    for name in ["sd_tiny", "sd3_tiny", "flux_tiny"] {
        let pipe = StableDiffusion::from_folder(&fixtures.join(name)).unwrap();
        pipe.to_device(dev).unwrap();
        let cond = no_grad(|| pipe.encode_prompts(&["a red cat", "a dog"], Some(24))).unwrap();
        let side = 4 * pipe.denoiser.latent_multiple();
        let shape = [2, pipe.denoiser.in_channels(), side, side];
        let mut captured = DenoiseStep::new(&pipe.denoiser, &cond, None, 3.5, dev, true).unwrap();
        let mut plain = DenoiseStep::new(&pipe.denoiser, &cond, None, 3.5, dev, false).unwrap();
        for (i, t) in [999.0, 750.0, 500.0, 250.0, 1.0].into_iter().enumerate() {
            let mut gen = Generator::new(i as u64);
            let x = Tensor::randn_on(&shape, DType::F32, dev, Some(&mut gen)).unwrap();
            let (a, b) = (
                captured.predict(&x, t).unwrap().to_vec_f64().unwrap(),
                plain.predict(&x, t).unwrap().to_vec_f64().unwrap(),
            );
            let worst = a
                .iter()
                .zip(&b)
                .map(|(p, q)| (p - q).abs())
                .fold(0.0, f64::max);
            assert!(
                worst < 1e-5,
                "{name} step {i} (t {t}): differs by {worst:.3e}"
            );
        }
        // UNets run op by op (their cuDNN convolutions cannot be captured), the MMDiTs replay.
        let expected = pipe.denoiser.gains_from_capture();
        assert_eq!(captured.is_captured(), expected, "{name}: captured?");
        assert!(!plain.is_captured());
    }
}
