//! The YOLO detection loss against ultralytics 8.4.190's `v8DetectionLoss`, from fixed head
//! outputs and labels (tests/fixtures/yolo/loss/make_loss_fixture.py made the fixture):
//! the three loss terms, the gradients with respect to the three maps, and the assigner's
//! foreground mask, box indices, target boxes and soft scores. Also the pieces alone (top-k
//! selection, padded labels) and the errors. The CUDA test skips without a GPU
//! (RB_REQUIRE_CUDA=1 makes that a failure).

use rusting_brain::io::safetensors;
use rusting_brain::models::yolo::loss::{
    top_k_mask, DetectionLoss, DetectionTargets, LossGains, LossOutput,
};
use rusting_brain::{DType, Device, Generator, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;

struct Case {
    nc: usize,
    reg_max: usize,
    strides: Vec<f64>,
    maps: Vec<Tensor>,
    targets: DetectionTargets,
    t: BTreeMap<String, Tensor>,
    name: &'static str,
}

impl Case {
    fn get(&self, key: &str) -> &Tensor {
        let k = format!("{}.{key}", self.name);
        self.t
            .get(&k)
            .unwrap_or_else(|| panic!("fixture has no {k}"))
    }

    fn loss_fn(&self) -> DetectionLoss {
        DetectionLoss::new(self.nc, self.reg_max, &self.strides, LossGains::default()).unwrap()
    }

    /// The loss on `device` from the maps in `dtype`, and the gradient of its total w.r.t.
    /// each map (on the CPU, F64).
    fn run(&self, dtype: DType, device: Device) -> (LossOutput, Vec<Tensor>) {
        let maps: Vec<Tensor> = self
            .maps
            .iter()
            .map(|m| m.to(device, dtype).unwrap().requires_grad_().unwrap())
            .collect();
        let out = self.loss_fn().forward(&maps, &self.targets).unwrap();
        out.total.backward().unwrap();
        let grads = maps
            .iter()
            .map(|m| m.grad().unwrap().to(Device::Cpu, DType::F64).unwrap())
            .collect();
        (out, grads)
    }
}

fn fixture() -> (BTreeMap<String, Tensor>, serde_json::Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/yolo/loss/loss_fixture.safetensors");
    let loaded = safetensors::load_with_metadata(&path).unwrap();
    let meta = serde_json::from_str(&loaded.metadata["cases"]).unwrap();
    (loaded.tensors, meta)
}

fn case(name: &'static str) -> Case {
    let (t, meta) = fixture();
    let m = &meta[name];
    let maps = (0..3)
        .map(|i| t[&format!("{name}.map{i}")].to_dtype(DType::F64).unwrap())
        .collect();
    let rows: Vec<[f64; 6]> = t[&format!("{name}.labels")]
        .to_vec_f64()
        .unwrap()
        .chunks(6)
        .map(|r| r.try_into().unwrap())
        .collect();
    let batch = m["batch"].as_u64().unwrap() as usize;
    Case {
        nc: m["nc"].as_u64().unwrap() as usize,
        reg_max: m["reg_max"].as_u64().unwrap() as usize,
        strides: m["strides"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap())
            .collect(),
        maps,
        targets: DetectionTargets::from_rows(batch, &rows).unwrap(),
        t,
        name,
    }
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to(Device::Cpu, DType::F64).unwrap().to_vec_f64().unwrap()
}

/// max over elements of |got - want| / (|want| + floor), with the floor a millionth of the
/// largest |want| (so that elements near zero are compared at the tensor's scale).
fn worst_relative(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let floor = 1e-6 * want.iter().fold(0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / (w.abs() + floor))
        .fold(0.0, f64::max)
}

/// max|got - want| / max|want|: the measure for F32, where elements near zero lose their
/// relative precision to cancellation.
fn max_norm_relative(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max);
    worst / scale
}

fn check_loss(c: &Case, out: &LossOutput, tol: f64) {
    for (key, got) in [("loss", &out.loss), ("items", &out.items)] {
        let (got, want) = (f64s(got), f64s(c.get(key)));
        let err = worst_relative(&got, &want);
        assert!(
            err <= tol,
            "case {} {key}: {got:?} vs ultralytics {want:?} (relative {err:e})",
            c.name
        );
    }
    let total = out.total.item().unwrap();
    let want: f64 = f64s(c.get("loss")).iter().sum();
    assert!(
        (total - want).abs() <= tol * want.abs(),
        "total {total} vs {want}"
    );
}

/// `measure` compares one map's gradient with ultralytics'.
fn check_grads(c: &Case, grads: &[Tensor], measure: fn(&[f64], &[f64]) -> f64, tol: f64) {
    for (i, g) in grads.iter().enumerate() {
        let err = measure(&f64s(g), &f64s(c.get(&format!("grad{i}"))));
        assert!(
            err <= tol,
            "case {} map {i}: gradient off by {err:e}",
            c.name
        );
    }
}

fn check_assignment(c: &Case, out: &LossOutput, tol: f64) {
    let a = &out.assignment;
    let fg: Vec<f64> = f64s(&a.fg_mask.to_dtype(DType::F64).unwrap());
    assert_eq!(
        fg,
        f64s(c.get("fg_mask")),
        "case {}: foreground mask",
        c.name
    );
    assert_eq!(
        a.target_gt_idx
            .to_device(Device::Cpu)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        c.get("target_gt_idx").to_vec::<i64>().unwrap(),
        "case {}: target box indices",
        c.name
    );
    for (key, got) in [
        ("target_scores", &a.target_scores),
        ("target_bboxes", &a.target_bboxes),
    ] {
        let (got, want) = (f64s(got), f64s(c.get(key)));
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
            .fold(0.0, f64::max);
        assert!(worst <= tol, "case {}: {key} off by {worst:e}", c.name);
    }
}

#[test]
fn loss_terms_match_ultralytics_in_f64() {
    for name in ["a", "b"] {
        let c = case(name);
        let (out, _) = c.run(DType::F64, Device::Cpu);
        check_loss(&c, &out, 1e-9);
    }
}

#[test]
fn gradients_wrt_the_three_maps_match_ultralytics_in_f64() {
    for name in ["a", "b"] {
        let c = case(name);
        let (_, grads) = c.run(DType::F64, Device::Cpu);
        // Element by element; the fixture stores gradients in f32.
        check_grads(&c, &grads, worst_relative, 1e-6);
    }
}

#[test]
fn assigner_gives_ultralytics_foreground_and_box_indices() {
    for name in ["a", "b"] {
        let c = case(name);
        let (out, _) = c.run(DType::F64, Device::Cpu);
        check_assignment(&c, &out, 1e-12);
    }
}

#[test]
fn f32_loss_gradients_and_assignment_match_ultralytics() {
    for name in ["a", "b"] {
        let c = case(name);
        let (out, grads) = c.run(DType::F32, Device::Cpu);
        assert_eq!(out.loss.dtype(), DType::F32);
        check_loss(&c, &out, 1e-5);
        check_grads(&c, &grads, max_norm_relative, 1e-5);
        check_assignment(&c, &out, 1e-5);
    }
}

#[test]
fn bf16_maps_are_computed_in_f32_and_get_bf16_gradients() {
    let c = case("b");
    let (out, _) = c.run(DType::BF16, Device::Cpu);
    assert_eq!(out.loss.dtype(), DType::F32);
    // The maps rounded to BF16 move the loss by well under a percent.
    let err = worst_relative(&f64s(&out.loss), &f64s(c.get("loss")));
    assert!(err < 1e-2, "{err:e}");
    let maps: Vec<Tensor> = c
        .maps
        .iter()
        .map(|m| m.to_dtype(DType::BF16).unwrap().requires_grad_().unwrap())
        .collect();
    c.loss_fn()
        .forward(&maps, &c.targets)
        .unwrap()
        .total
        .backward()
        .unwrap();
    assert!(maps
        .iter()
        .all(|m| m.grad().unwrap().dtype() == DType::BF16));
}

#[test]
fn a_batch_without_labels_has_only_the_class_term() {
    let mut c = case("a");
    c.targets = DetectionTargets::new(c.maps[0].shape()[0]);
    let (out, grads) = c.run(DType::F64, Device::Cpu);
    let (got, want) = (f64s(&out.loss), f64s(c.get("empty_loss")));
    assert!(worst_relative(&got, &want) <= 1e-9, "{got:?} vs {want:?}");
    assert_eq!(
        f64s(&out.assignment.fg_mask.to_dtype(DType::F64).unwrap())
            .iter()
            .sum::<f64>(),
        0.0
    );
    // Only the class logits get a gradient: sigmoid(x) * gain * batch size, the sum clamped to 1.
    let bins = 4 * c.reg_max;
    let g = &grads[0];
    let box_grad = f64s(&g.narrow(1, 0, bins).unwrap());
    assert!(box_grad.iter().all(|&v| v == 0.0));
    let x = f64s(&c.maps[0].narrow(1, bins, c.nc).unwrap());
    let gc = f64s(&g.narrow(1, bins, c.nc).unwrap());
    let batch = c.maps[0].shape()[0] as f64;
    for (x, g) in x.iter().zip(&gc) {
        let want = 0.5 * batch / (1.0 + (-x).exp());
        assert!((g - want).abs() <= 1e-12, "{g} vs {want}");
    }
}

#[test]
fn top_k_mask_takes_the_k_largest_and_the_earlier_of_equal_values() {
    // Values on a coarse grid, so that most rows have ties at the k-th place.
    let mut gen = Generator::new(7);
    let x = Tensor::randint(0, 5, &[3, 4, 37], Some(&mut gen))
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let got = top_k_mask(&x, 10).unwrap();
    let (_, idx) = x.topk(10, -1, true).unwrap();
    let want = Tensor::zeros(&[3, 4, 37], DType::F32, Device::Cpu)
        .unwrap()
        .scatter_add(
            -1,
            &idx,
            &Tensor::ones(&[3, 4, 10], DType::F32, Device::Cpu).unwrap(),
        )
        .unwrap();
    assert_eq!(f64s(&got.to_dtype(DType::F64).unwrap()), f64s(&want));
    // k past the row length takes the whole row.
    let all = top_k_mask(&x.narrow(-1, 0, 6).unwrap(), 10).unwrap();
    assert!(f64s(&all.to_dtype(DType::F64).unwrap())
        .iter()
        .all(|&v| v == 1.0));
}

#[test]
fn targets_are_padded_per_image_as_pixel_corners() {
    let rows = [
        [1.0, 2.0, 0.5, 0.5, 0.25, 0.5],
        [0.0, 1.0, 0.25, 0.75, 0.5, 0.25],
        [1.0, 0.0, 0.125, 0.25, 0.25, 0.5],
    ];
    let t = DetectionTargets::from_rows(3, &rows).unwrap();
    let padded = t.padded((64, 32), DType::F64, Device::Cpu).unwrap();
    assert_eq!(padded.shape(), &[3, 2, 5]);
    #[rustfmt::skip]
    let want = [
        1.0, 0.0, 40.0, 16.0, 56.0,   0.0, 0.0, 0.0, 0.0, 0.0,
        2.0, 12.0, 16.0, 20.0, 48.0,  0.0, 0.0, 0.0, 8.0, 32.0,
        0.0, 0.0, 0.0, 0.0, 0.0,      0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    assert_eq!(f64s(&padded), want);
    let empty = DetectionTargets::new(2)
        .padded((64, 64), DType::F32, Device::Cpu)
        .unwrap();
    assert_eq!(empty.shape(), &[2, 0, 5]);
}

#[test]
fn bad_inputs_are_errors_that_name_the_problem() {
    let c = case("b");
    let loss = c.loss_fn();
    let err = |r: rusting_brain::Result<LossOutput>| r.unwrap_err().to_string();
    let e = err(loss.forward(&c.maps[..2], &c.targets));
    assert!(e.contains("expected 3 feature maps"), "{e}");
    let narrow = c.maps[1].narrow(1, 0, 5).unwrap();
    let e = err(loss.forward(&[c.maps[0].clone(), narrow, c.maps[2].clone()], &c.targets));
    assert!(e.contains("map 1") && e.contains("class logits"), "{e}");
    let mut wrong_class = DetectionTargets::new(2);
    wrong_class.push(1, 2, [0.5, 0.5, 0.1, 0.1]).unwrap();
    let e = err(loss.forward(&c.maps, &wrong_class));
    assert!(e.contains("class 2") && e.contains("2 classes"), "{e}");
    let e = err(loss.forward(&c.maps, &DetectionTargets::new(3)));
    assert!(e.contains("batch of 3 images"), "{e}");
    let e = DetectionTargets::new(2)
        .push(2, 0, [0.5, 0.5, 0.1, 0.1])
        .unwrap_err()
        .to_string();
    assert!(e.contains("image index 2"), "{e}");
    let e = DetectionTargets::from_rows(2, &[[0.5, 0.0, 0.5, 0.5, 0.1, 0.1]])
        .unwrap_err()
        .to_string();
    assert!(e.contains("whole numbers"), "{e}");
    let e = DetectionLoss::new(3, 1, &[8.0], LossGains::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("reg_max"), "{e}");
}

/// On CUDA in F32 the loss, the gradients and the assignment follow the CPU run.
#[test]
fn cuda_detection_loss_matches_the_cpu() {
    let Some(dev) =
        rusting_brain::backend::cuda::device_for_test("cuda_detection_loss_matches_the_cpu")
    else {
        return;
    };
    for name in ["a", "b"] {
        let c = case(name);
        let (cpu, cpu_grads) = c.run(DType::F32, Device::Cpu);
        let (gpu, gpu_grads) = c.run(DType::F32, dev);
        assert_eq!(gpu.loss.device(), dev);
        let err = worst_relative(&f64s(&gpu.loss), &f64s(&cpu.loss));
        assert!(err <= 1e-5, "case {name}: loss off by {err:e}");
        for (i, (g, w)) in gpu_grads.iter().zip(&cpu_grads).enumerate() {
            let err = max_norm_relative(&f64s(g), &f64s(w));
            assert!(err <= 1e-4, "case {name} map {i}: gradient off by {err:e}");
        }
        check_assignment(&c, &gpu, 1e-5);
    }
}
