//! The diffusion samplers against diffusers 0.42: every case of
//! `tests/fixtures/diffusion/schedulers.json` (made by `make_schedulers.py` there) is built from
//! the same config, walked from the same start with the same stand-in denoiser and noise, and
//! must give diffusers' timesteps, σs, initial noise scale, every step's sample (within 1e-5 of
//! the sample's scale) and add_noise; plus the training inputs and v targets, and the errors.

use rusting_brain::models::diffusion::scheduler::{
    from_config, GivenNoise, NoiseSchedule, Scheduler,
};
use rusting_brain::models::hf_config::Fields;
use rusting_brain::{DType, Tensor};
use serde_json::Value;
use std::collections::VecDeque;
use std::path::PathBuf;

fn fixture() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/diffusion/schedulers.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn shape(d: &Value) -> Vec<usize> {
    d["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

fn tensor(v: &Value, shape: &[usize]) -> Tensor {
    Tensor::from_f64s(&floats(v), shape, DType::F32).unwrap()
}

/// The worst difference over the reference's largest magnitude (at least 1).
fn worst(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f64, |m, w| m.max(w.abs()));
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / scale)
        .fold(0.0, f64::max)
}

fn build(case: &Value) -> Box<dyn Scheduler> {
    let class = case["class_name"].as_str().unwrap();
    let mut s = from_config(&case["config"].to_string(), Some(class))
        .unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
    if let Some(tokens) = case["image_tokens"].as_u64() {
        s.set_image_tokens(tokens as usize);
    }
    s.set_timesteps(case["steps"].as_u64().unwrap() as usize)
        .unwrap();
    s
}

#[test]
fn every_case_walks_where_diffusers_walks() {
    let d = fixture();
    let shape = shape(&d);
    let cases = d["cases"].as_array().unwrap();
    assert!(cases.len() >= 17, "the fixture lost cases");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let mut s = build(case);
        if let Some(eta) = case["eta"].as_f64() {
            s.set_eta(eta).unwrap();
        }
        let want_t = floats(&case["timesteps"]);
        assert_eq!(s.timesteps().len(), want_t.len(), "{name}: timestep count");
        for (g, w) in s.timesteps().iter().zip(&want_t) {
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "{name}: timesteps {:?} vs {want_t:?}",
                s.timesteps()
            );
        }
        let init = case["init_noise_sigma"].as_f64().unwrap();
        assert!(
            (s.init_noise_sigma() - init).abs() <= 1e-5 * init,
            "{name}: init_noise_sigma {} vs {init}",
            s.init_noise_sigma()
        );
        let mut noise = GivenNoise(
            case["noises"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| tensor(n, &shape))
                .collect::<VecDeque<_>>(),
        );
        let mut x = tensor(&case["start"], &shape);
        for (i, want) in case["outputs"].as_array().unwrap().iter().enumerate() {
            let t = s.timesteps()[i];
            let scaled = s.scale_model_input(&x).unwrap();
            let out = scaled
                .tanh()
                .unwrap()
                .mul_scalar(0.5)
                .unwrap()
                .add_scalar(0.05 * (t as f32 as f64 / 100.0).cos())
                .unwrap();
            x = s.step(&out, &x, &mut noise).unwrap();
            let err = worst(&x.to_vec_f64().unwrap(), &floats(want));
            assert!(
                err < 1e-5,
                "{name}: step {i} (t = {t}) differs by {err:.2e}"
            );
        }
        assert!(
            noise.0.is_empty(),
            "{name}: {} noises left unused",
            noise.0.len()
        );
        // One step past the end is refused by name.
        let err = s.step(&x, &x, &mut noise).unwrap_err().to_string();
        assert!(err.contains("walk is over"), "{name}: {err}");

        let a = &case["add_noise"];
        let got = s
            .add_noise(
                &tensor(&a["original"], &shape),
                &tensor(&a["noise"], &shape),
                5,
            )
            .unwrap();
        let err = worst(&got.to_vec_f64().unwrap(), &floats(&a["out"]));
        assert!(err < 1e-5, "{name}: add_noise differs by {err:.2e}");
    }
}

#[test]
fn training_inputs_and_velocity_targets_are_diffusers() {
    let d = fixture();
    let tr = &d["training"];
    let schedule = NoiseSchedule::read(&Fields::new(&tr["config"], "scheduler")).unwrap();
    let shape = [3, 2, 2, 2];
    let t: Vec<usize> = tr["timesteps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    let (x0, z) = (tensor(&tr["x0"], &shape), tensor(&tr["noise"], &shape));
    let noisy = schedule.add_noise(&x0, &z, &t).unwrap();
    assert!(worst(&noisy.to_vec_f64().unwrap(), &floats(&tr["noisy"])) < 1e-5);
    let v = schedule.velocity(&x0, &z, &t).unwrap();
    assert!(worst(&v.to_vec_f64().unwrap(), &floats(&tr["velocity"])) < 1e-5);
    let err = schedule
        .add_noise(&x0, &z, &[0, 1])
        .unwrap_err()
        .to_string();
    assert!(err.contains("2 timesteps for a batch of 3"), "{err}");
    let err = schedule
        .add_noise(&x0, &z, &[0, 1, 1000])
        .unwrap_err()
        .to_string();
    assert!(err.contains("timestep 1000 is past the 1000"), "{err}");
}

#[test]
fn bad_configs_are_refused_by_name() {
    let refused = [
        (
            r#"{"_class_name": "PNDMScheduler"}"#,
            "scheduler `PNDMScheduler` is not supported",
        ),
        (
            r#"{"_class_name": "DDIMScheduler", "beta_schedule": "cubic"}"#,
            "beta_schedule `cubic`",
        ),
        (
            r#"{"_class_name": "DDPMScheduler", "thresholding": true}"#,
            "thresholding is not supported",
        ),
        (
            r#"{"_class_name": "DPMSolverMultistepScheduler", "solver_order": 3}"#,
            "solver_order 3",
        ),
        (
            r#"{"_class_name": "EulerDiscreteScheduler", "prediction_type": "x"}"#,
            "prediction_type `x`",
        ),
        (
            r#"{"_class_name": "DDIMScheduler", "trained_betas": [0.1, 0.2]}"#,
            "trained_betas has 2 values",
        ),
        (
            r#"{"_class_name": "DDIMScheduler", "num_train_timesteps": 0}"#,
            "num_train_timesteps",
        ),
        (r#"{"beta_start": 0.1}"#, "no `_class_name`"),
        (r#"[1, 2]"#, "not a JSON object"),
        (
            r#"{"_class_name": "DDIMScheduler", "beta_end": 1.5}"#,
            "outside [0, 1)",
        ),
    ];
    for (text, want) in refused {
        let err = from_config(text, None).err().unwrap().to_string();
        assert!(err.contains(want), "{text}: {err}");
    }
    let mut s = from_config(r#"{"_class_name": "EulerDiscreteScheduler"}"#, None).unwrap();
    let err = s.set_timesteps(1001).unwrap_err().to_string();
    assert!(err.contains("1001 inference steps"), "{err}");
    let mut clipped = from_config(
        r#"{"_class_name": "DPMSolverMultistepScheduler", "lambda_min_clipped": 1e9}"#,
        None,
    )
    .unwrap();
    let err = clipped.set_timesteps(10).unwrap_err().to_string();
    assert!(err.contains("cuts every training timestep"), "{err}");
    let mut flux = from_config(
        r#"{"_class_name": "FlowMatchEulerDiscreteScheduler", "use_dynamic_shifting": true}"#,
        None,
    )
    .unwrap();
    let err = flux.set_timesteps(10).unwrap_err().to_string();
    assert!(err.contains("image tokens"), "{err}");
    let err = s.set_eta(0.5).unwrap_err().to_string();
    assert!(err.contains("eta is DDIM's"), "{err}");
    let mut ddim = from_config(r#"{"_class_name": "DDIMScheduler"}"#, None).unwrap();
    assert!(ddim
        .set_eta(1.5)
        .unwrap_err()
        .to_string()
        .contains("outside [0, 1]"));
    let x = Tensor::zeros(&[1, 2], DType::F32, rusting_brain::Device::Cpu).unwrap();
    let err = ddim
        .step(&x, &x, &mut GivenNoise(VecDeque::new()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("set_timesteps first"), "{err}");
}
