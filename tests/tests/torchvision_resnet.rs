//! A torchvision ResNet-18 written by `torch.save` (zip and legacy formats) loads through
//! `io::load_any` with every tensor equal to torch's, and the engine's ResNet built from those
//! weights gives torch's logits in eval mode (running statistics) and train mode (batch
//! statistics), on the CPU and, where present, on CUDA. torch and torchvision run at test time
//! (tests/fixtures/torch/torchvision_resnet.py) from `RB_TORCH_PYTHON` (else `python3`); without
//! them the tests print SKIPPED.

use rusting_brain::io::any::load_any;
use rusting_brain::io::npy::read_npy;
use rusting_brain::models::resnet::{ResNet, ResNetConfig};
use rusting_brain::nn::Module;
use rusting_brain::{Device, Generator, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory the fixture script wrote into, once per test process; `None`: skip.
fn torch_outputs(test: &str) -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let py = std::env::var("RB_TORCH_PYTHON").unwrap_or_else(|_| "python3".into());
        let dir = std::env::temp_dir().join(format!("rb-torchvision-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/torch/torchvision_resnet.py");
        let out = Command::new(&py).arg(script).arg(&dir).output().ok()?;
        if !out.status.success() {
            eprintln!(
                "torchvision fixture failed under {py}: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            return None;
        }
        Some(dir)
    });
    if dir.is_none() {
        // Straight to the stream, past the test harness's capture, so the skip is visible.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: no python with torch and torchvision (set RB_TORCH_PYTHON)"
        );
    }
    dir.as_deref()
}

fn max_diff(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    g.iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

/// torch's own reading of every tensor (numpy's .npz of the state dict).
fn torch_tensors(dir: &Path) -> BTreeMap<String, Tensor> {
    load_any(dir.join("tensors.npz"))
        .unwrap()
        .into_iter()
        .collect()
}

#[test]
fn torch_save_files_of_a_torchvision_model_load_with_every_tensor_equal() {
    let Some(dir) = torch_outputs("torchvision_state_dict") else {
        return;
    };
    let want = torch_tensors(dir);
    assert_eq!(want.len(), 122);
    for file in ["resnet18.pth", "resnet18_legacy.pth"] {
        let got: BTreeMap<String, Tensor> = load_any(dir.join(file)).unwrap().into_iter().collect();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{file}"
        );
        for (name, t) in &got {
            let w = &want[name];
            assert_eq!(
                (t.dtype(), t.shape()),
                (w.dtype(), w.shape()),
                "{file}: {name}"
            );
            assert_eq!(max_diff(t, w), 0.0, "{file}: {name}");
        }
    }
}

/// The engine's ResNet-18 with the .pth's weights, on `device`, against torch's logits.
fn logits_match(test: &str, device: Device) {
    let Some(dir) = torch_outputs(test) else {
        return;
    };
    let mut model = ResNet::new(
        ResNetConfig::depth(18, 1000).unwrap(),
        &mut Generator::new(3),
    )
    .unwrap();
    let state: BTreeMap<String, Tensor> = load_any(dir.join("resnet18.pth"))
        .unwrap()
        .into_iter()
        .collect();
    model.load_state_dict(&state, true).unwrap();
    model.to_device(device).unwrap();
    let images = read_npy(dir.join("images.npy"))
        .unwrap()
        .to_device(device)
        .unwrap();
    for (mode, file) in [(false, "eval_logits.npy"), (true, "train_logits.npy")] {
        model.train(mode);
        let got = rusting_brain::no_grad(|| model.forward(&images))
            .unwrap()
            .to_device(Device::Cpu)
            .unwrap();
        let want = read_npy(dir.join(file)).unwrap();
        let err = max_diff(&got, &want);
        eprintln!("{test}: {file}: max abs diff {err:.2e}");
        assert!(err < 2e-4, "{test}: {file} differs from torch by {err:.2e}");
    }
}

#[test]
fn resnet18_from_a_torchvision_pth_gives_torchs_logits() {
    logits_match("torchvision_resnet18_cpu", Device::Cpu);
}

#[test]
fn resnet18_on_cuda_gives_torchs_logits() {
    let Some(cuda) = rusting_brain::backend::cuda::device_for_test("torchvision_resnet18_cuda")
    else {
        return;
    };
    logits_match("torchvision_resnet18_cuda", cuda);
}
