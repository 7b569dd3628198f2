//! A real ultralytics ONNX export (nudenet's YOLOv8n, 18 classes, exported by ultralytics
//! 8.2.46) loads onto our fused YOLOv8n: family, scale, class names and every weight.

use rb_integration_tests::assets::asset;
use rusting_brain::models::yolo::YoloModel;
use rusting_brain::{DType, Device, Tensor};

#[test]
fn nudenet_onnx_loads_as_a_fused_yolov8n_with_its_class_names() {
    let Some(path) = asset("nudenet_onnx_loads", "nudenet/320n.onnx") else {
        return;
    };
    let m = YoloModel::load(&path).unwrap();
    assert!(m.fused);
    assert_eq!(m.config.scale.as_deref(), Some("n"));
    assert_eq!(m.config.source["yaml_file"].as_str(), Some("yolov8n.yaml"));
    assert_eq!(m.names.len(), 18);
    assert_eq!(m.names[0], "FEMALE_GENITALIA_COVERED");
    assert_eq!(m.strides(), [8.0, 16.0, 32.0]);
    let x = Tensor::zeros(&[1, 3, 64, 64], DType::F32, Device::Cpu).unwrap();
    // 8x8 + 4x4 + 2x2 anchors, 4 box values + 18 classes.
    assert_eq!(m.forward(&x).unwrap().shape(), [1, 22, 84]);
}
