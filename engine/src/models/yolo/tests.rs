//! Unit tests of the YOLO builder on a small definition in ultralytics' form.

use super::*;
use crate::nn::Module;
use crate::{DType, Device, Generator, Tensor};

/// A miniature YOLO11: every module type, three detection levels.
pub const MINI11: &str = include_str!("../../../../tests/fixtures/yolo/mini11.yaml");

fn mini(fused: bool) -> YoloModel {
    let cfg = YoloConfig::from_yaml_str(MINI11, "mini", None, None).unwrap();
    YoloModel::build(&cfg, vec![], fused, &mut Generator::new(0)).unwrap()
}

#[test]
fn yolo_parameter_names_follow_ultralytics_module_paths() {
    let m = mini(false);
    let names: Vec<String> = m.state_dict().into_keys().collect();
    for want in [
        "model.0.conv.weight",
        "model.0.bn.running_var",
        "model.2.m.0.cv1.conv.weight",
        "model.4.m.0.cv3.bn.weight",
        "model.4.m.0.m.1.cv2.conv.weight",
        "model.7.m.0.attn.qkv.conv.weight",
        "model.7.m.0.attn.pe.bn.bias",
        "model.7.m.0.ffn.1.conv.weight",
        "model.14.cv2.0.2.bias",
        "model.14.cv3.1.0.0.conv.weight",
        "model.14.cv3.2.1.1.bn.weight",
        "model.14.dfl.conv.weight",
    ] {
        assert!(names.iter().any(|n| n == want), "missing {want}");
    }
}

#[test]
fn yolo_strides_follow_the_layers_that_feed_detect() {
    let m = mini(false);
    assert_eq!(m.strides(), [4.0, 8.0, 16.0]);
}

#[test]
fn yolo_forward_gives_boxes_and_class_probabilities_for_every_anchor() {
    let mut m = mini(false);
    m.eval();
    let x = Tensor::rand(&[2, 3, 32, 64], DType::F32, Some(&mut Generator::new(1))).unwrap();
    let y = m.forward(&x).unwrap();
    // Anchors: 8x16 + 4x8 + 2x4 = 168; 4 box values + 3 classes.
    assert_eq!(y.shape(), [2, 7, 168]);
    let v = y.to_vec_f32().unwrap();
    let probs = &v[4 * 168..7 * 168];
    assert!(probs.iter().all(|p| (0.0..=1.0).contains(p)));
}

#[test]
fn yolo_rejects_input_that_is_not_a_multiple_of_the_largest_stride() {
    let m = mini(false);
    let x = Tensor::zeros(&[1, 3, 30, 32], DType::F32, Device::Cpu).unwrap();
    let e = m.forward(&x).unwrap_err().to_string();
    assert!(e.contains("multiples of 16"), "{e}");
}

#[test]
fn yolo_builder_names_an_unsupported_module_and_its_layer() {
    let text = MINI11.replace("[-1, 1, SPPF, [256, 5]]", "[-1, 1, SPPELAN, [256, 5]]");
    let cfg = YoloConfig::from_yaml_str(&text, "mini", None, None).unwrap();
    let e = YoloModel::build(&cfg, vec![], false, &mut Generator::new(0))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("layer 6") && e.contains("SPPELAN"), "{e}");
}

#[test]
fn a_definition_wider_than_its_weights_stops_before_building_past_them() {
    let small = mini(false).state_dict();
    let held: usize = small.values().map(|t| t.numel()).sum();
    let cfg = YoloConfig::from_yaml_str(MINI11, "mini", None, None).unwrap();
    // The definition the weights were saved from builds.
    YoloModel::build_for_weights(&cfg, vec![], false, &small).unwrap();
    // The same rows at full width (four times the channels, about 16 times the values) claim
    // more than the weights hold and stop there.
    let wide = MINI11.replace("n: [0.50, 0.25, 1024]", "n: [0.50, 1.0, 1024]");
    let cfg = YoloConfig::from_yaml_str(&wide, "mini", None, None).unwrap();
    let e = YoloModel::build_for_weights(&cfg, vec![], false, &small)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains(&format!("the {held} its weights hold")) && e.contains("not the network"),
        "{e}"
    );
}

#[test]
fn a_definition_alone_stops_at_the_ceiling() {
    // 64 repeats of a 65,536-channel C2f (16,384 at width 4): each 3x3 convolution of its
    // bottlenecks alone is 10^10 values, refused at the first.
    let huge = MINI11
        .replace("n: [0.50, 0.25, 1024]", "n: [1.0, 4.0, 16384]")
        .replace("[-1, 1, SPPF, [256, 5]]", "[-1, 64, C2f, [16384, True]]");
    let cfg = YoloConfig::from_yaml_str(&huge, "mini", None, None).unwrap();
    let e = YoloModel::build(&cfg, vec![], false, &mut Generator::new(0))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("far beyond any published YOLO"), "{e}");
}

/// Puts non-trivial statistics into every batch norm, so folding them is observable.
fn randomize_batch_norms(m: &YoloModel) {
    let mut g = Generator::new(7);
    for (name, t) in m.state_dict() {
        if name.ends_with("running_var") {
            let r = Tensor::rand(t.shape(), DType::F32, Some(&mut g)).unwrap();
            t.copy_(&r.add_scalar(0.5).unwrap()).unwrap();
        } else if name.ends_with("running_mean") || name.ends_with("bn.bias") {
            let r = Tensor::randn(t.shape(), DType::F32, Some(&mut g)).unwrap();
            t.copy_(&r.mul_scalar(0.1).unwrap()).unwrap();
        }
    }
}

#[test]
fn fused_yolo_gives_the_same_predictions_as_the_unfused_one_in_eval() {
    let mut m = mini(false);
    randomize_batch_norms(&m);
    m.eval();
    let f = m.fuse().unwrap();
    assert!(f.fused);
    assert!(!f.state_dict().keys().any(|k| k.contains(".bn.")));
    let x = Tensor::rand(&[1, 3, 32, 32], DType::F32, Some(&mut Generator::new(3))).unwrap();
    let (a, b) = (m.forward_head(&x).unwrap(), f.forward_head(&x).unwrap());
    for (a, b) in [(a.boxes, b.boxes), (a.scores, b.scores)] {
        let (a, b) = (a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
        let scale = a.iter().fold(0f32, |s, v| s.max(v.abs()));
        let diff = a
            .iter()
            .zip(&b)
            .fold(0f32, |s, (x, y)| s.max((x - y).abs()));
        assert!(diff / scale < 1e-5, "max |diff| {diff} of {scale}");
    }
}

#[test]
fn yolo_weights_round_trip_through_safetensors_with_yaml_and_names() {
    let cfg = YoloConfig::from_yaml_str(MINI11, "mini", None, None).unwrap();
    let names = vec!["circle".to_string(), "square".into(), "star".into()];
    let mut m = YoloModel::build(&cfg, names.clone(), false, &mut Generator::new(5)).unwrap();
    randomize_batch_norms(&m);
    m.eval();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mini.safetensors");
    m.save_safetensors(&path).unwrap();
    let back = YoloModel::load_safetensors(&path).unwrap();
    assert_eq!(back.names, names);
    let x = Tensor::rand(&[1, 3, 32, 32], DType::F32, Some(&mut Generator::new(3))).unwrap();
    assert_eq!(
        m.forward(&x).unwrap().to_vec_f32().unwrap(),
        back.forward(&x).unwrap().to_vec_f32().unwrap()
    );
}

#[test]
fn yolo_weight_load_lists_missing_unexpected_and_misshaped_together() {
    let m = mini(false);
    let mut state = m.state_dict();
    state.remove("model.0.conv.weight");
    state.insert(
        "model.99.extra".into(),
        Tensor::zeros(&[1], DType::F32, Device::Cpu).unwrap(),
    );
    state.insert(
        "model.1.bn.weight".into(),
        Tensor::zeros(&[5], DType::F32, Device::Cpu).unwrap(),
    );
    let e = m.load_weights(&state, "w.pt").unwrap_err().to_string();
    for part in [
        "w.pt",
        "missing 1: model.0.conv.weight",
        "unexpected 1: model.99.extra",
        "model.1.bn.weight is [5]",
    ] {
        assert!(e.contains(part), "{part} not in {e}");
    }
}

#[test]
fn builtin_definitions_resolve_by_scaled_name() {
    let c = YoloConfig::from_file(std::path::Path::new("yolo11s.yaml"), Some(4)).unwrap();
    assert_eq!((c.scale.as_deref(), c.width, c.nc), (Some("s"), 0.5, 4));
    let c = YoloConfig::from_file(std::path::Path::new("yolov8m.yaml"), None).unwrap();
    assert_eq!(
        (c.scale.as_deref(), c.depth, c.max_channels),
        (Some("m"), 0.67, 768)
    );
    let e = YoloConfig::from_file(std::path::Path::new("yolo99n.yaml"), None).unwrap_err();
    assert!(e.to_string().contains("yolo99n.yaml"), "{e}");
}

#[test]
fn recognise_finds_the_family_and_scale_of_a_fused_state_dict() {
    for name in ["yolo11n", "yolov8s"] {
        let cfg = definitions::builtin(name, Some(5)).unwrap().unwrap();
        let m = YoloModel::build(&cfg, vec![], true, &mut Generator::new(0)).unwrap();
        let found = definitions::recognise(&m.state_dict(), 5).unwrap();
        assert_eq!(
            found.source["yaml_file"].as_str(),
            Some(format!("{name}.yaml").as_str())
        );
    }
}

#[test]
fn validation_runs_end_to_end_on_a_generated_dataset() {
    use crate::data::yolo::{generate_shapes, DataConfig, ShapesOptions};
    let dir = tempfile::tempdir().unwrap();
    let opts = ShapesOptions {
        train: 1,
        val: 3,
        imgsz: 64,
        ..ShapesOptions::default()
    };
    let yaml = generate_shapes(dir.path(), &opts).unwrap();
    let data = DataConfig::load(&yaml).unwrap();
    let cfg = YoloConfig::from_yaml_str(MINI11, "mini", None, Some(data.names.len())).unwrap();
    let mut m = YoloModel::build(&cfg, data.names.clone(), false, &mut Generator::new(0)).unwrap();
    m.eval();
    let vo = val::ValOptions {
        imgsz: 64,
        batch: 2,
        save_json: true,
        ..val::ValOptions::default()
    };
    let mut calls = Vec::new();
    let r = val::validate(&m, &data, &vo, Device::Cpu, |d, t| calls.push((d, t))).unwrap();
    assert_eq!(r.metrics.seen, 3);
    // save_json: one record per kept box, on the original 64-pixel images.
    assert_eq!(r.predictions.len(), r.metrics.stats.conf.len());
    for p in &r.predictions {
        assert!(p["image_id"].as_str().unwrap().starts_with("val_"), "{p}");
        let b: Vec<f64> = p["bbox"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert!(
            b[0] >= 0.0 && b[1] >= 0.0 && b[0] + b[2] <= 64.001 && b[1] + b[3] <= 64.001,
            "{p}"
        );
    }
    assert_eq!(calls, [(1, 2), (2, 2)]);
    assert!(r.table.contains("all"), "{}", r.table);
    let (map50, map) = r.maps();
    assert!(
        (0.0..=1.0).contains(&map50) && map <= map50,
        "{map50} {map}"
    );
}

/// A dataset with more classes than the model: their labels are left out with a warning, as
/// ultralytics does, and the names that differ are named, instead of the run stopping.
#[test]
fn validation_skips_labels_of_classes_the_model_lacks() {
    use crate::data::yolo::{generate_shapes, DataConfig, ShapesOptions};
    let dir = tempfile::tempdir().unwrap();
    let opts = ShapesOptions {
        train: 1,
        val: 4,
        imgsz: 64,
        ..ShapesOptions::default()
    };
    let data = DataConfig::load(generate_shapes(dir.path(), &opts).unwrap()).unwrap();
    assert!(data.names.len() > 1, "{:?}", data.names);
    let cfg = YoloConfig::from_yaml_str(MINI11, "mini", None, Some(1)).unwrap();
    let mut m =
        YoloModel::build(&cfg, vec!["thing".into()], false, &mut Generator::new(0)).unwrap();
    m.eval();
    let vo = val::ValOptions {
        imgsz: 64,
        batch: 2,
        ..val::ValOptions::default()
    };
    let r = val::validate(&m, &data, &vo, Device::Cpu, |_, _| {}).unwrap();
    assert_eq!(r.metrics.seen, 4);
    let said = r.warnings.join("\n");
    assert!(
        said.contains("cannot predict (classes ") && said.contains("(nc=1)"),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "the dataset has {} classes and the model 1",
            data.names.len()
        )) && said.contains("\"thing\" in the model"),
        "{said}"
    );
}

/// Our own ONNX export loads back: the weights under ultralytics' names and shapes (the DFL
/// conv's too), the graph's constants apart from them, and the class names and stride in the
/// metadata as ultralytics writes them.
#[test]
fn an_onnx_export_loads_back_with_its_names_and_predictions() {
    use crate::io::onnx::export::ExportOptions;
    let cfg = definitions::builtin("yolo11n.yaml", Some(3))
        .unwrap()
        .unwrap();
    let names: Vec<String> = ["person", "it's", "c\\d"].map(String::from).to_vec();
    let mut m = YoloModel::build(&cfg, names.clone(), false, &mut Generator::new(3)).unwrap();
    m.eval();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("y.onnx");
    m.export_onnx((64, 64), &path, &ExportOptions::default())
        .unwrap();
    let onnx = crate::io::onnx::read_onnx(&path).unwrap();
    assert_eq!(onnx.metadata_value("stride"), Some("32"));
    let back = YoloModel::load(&path).unwrap();
    assert_eq!(back.names, names);
    let x = Tensor::rand(&[1, 3, 64, 64], DType::F32, Some(&mut Generator::new(4))).unwrap();
    let run = |model: &YoloModel| crate::no_grad(|| model.forward(&x)).unwrap();
    let (a, b) = (
        run(&m).to_vec::<f32>().unwrap(),
        run(&back).to_vec::<f32>().unwrap(),
    );
    let worst = a
        .iter()
        .zip(&b)
        .map(|(p, q)| (p - q).abs() / (1.0 + p.abs()))
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "{worst}");
}

/// A YOLO `.onnx` whose graph was edited to compute something else is refused, naming the
/// first difference: an operator no YOLO export uses, HardSigmoid for Sigmoid, another stride.
#[test]
fn an_onnx_file_whose_graph_differs_from_its_weights_network_is_refused() {
    use crate::io::onnx::export::ExportOptions;
    use crate::io::onnx::proto::{AttributeProto, ModelProto};
    use prost::Message;
    let cfg = definitions::builtin("yolov8n.yaml", Some(2))
        .unwrap()
        .unwrap();
    let m = YoloModel::build(
        &cfg,
        vec!["a".into(), "b".into()],
        true,
        &mut Generator::new(5),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("y.onnx");
    m.export_onnx((64, 64), &path, &ExportOptions::default())
        .unwrap();
    assert!(YoloModel::load(&path).is_ok(), "the export itself loads");
    let original = ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
    let edited = |edit: &dyn Fn(&mut ModelProto)| -> String {
        let mut model = original.clone();
        edit(&mut model);
        let p = dir.path().join("edited.onnx");
        std::fs::write(&p, model.encode_to_vec()).unwrap();
        match YoloModel::load(&p) {
            Ok(_) => panic!("the edited file loaded"),
            Err(e) => e.to_string(),
        }
    };
    fn nodes(m: &mut ModelProto) -> &mut Vec<crate::io::onnx::proto::NodeProto> {
        &mut m.graph.as_mut().unwrap().node
    }
    let hard = edited(&|m| {
        let n = nodes(m)
            .iter_mut()
            .find(|n| n.op_type == "Sigmoid")
            .unwrap();
        n.op_type = "HardSigmoid".into();
    });
    assert!(
        hard.contains("is a HardSigmoid, which a YOLO export does not use"),
        "{hard}"
    );
    let custom = edited(&|m| {
        let n = nodes(m).iter_mut().find(|n| n.op_type == "Mul").unwrap();
        n.domain = "com.example".into();
    });
    assert!(custom.contains("com.example.Mul"), "{custom}");
    let strided = edited(&|m| {
        let n = nodes(m).iter_mut().find(|n| n.op_type == "Conv").unwrap();
        let s = n
            .attribute
            .iter_mut()
            .find(|a: &&mut AttributeProto| a.name == "strides")
            .unwrap();
        s.ints = vec![3, 3];
    });
    assert!(
        strided.contains("model.0.conv.weight") && strided.contains("[3, 3]"),
        "{strided}"
    );
}
