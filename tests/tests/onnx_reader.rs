//! The ONNX reader on a real model: nudenet's YOLOv8n, exported by ultralytics 8.2.46 (18
//! classes, opset 17, 320x320). Expected values come from the `onnx` Python package
//! (`numpy_helper.to_array`) on the same file.

use rb_integration_tests::assets::asset;
use rusting_brain::io::onnx::{parse_python_literal, read_onnx, read_onnx_bytes, OnnxAttribute};
use rusting_brain::io::torch::Value;
use rusting_brain::DType;

const MODEL: &str = "nudenet/320n.onnx";

#[test]
fn header_opset_and_graph_sizes() {
    let Some(path) = asset("header_opset_and_graph_sizes", MODEL) else {
        return;
    };
    let m = read_onnx(&path).unwrap();
    assert_eq!(m.ir_version, 10);
    assert_eq!(
        (m.producer.as_str(), m.producer_version.as_str()),
        ("pytorch", "2.3.1")
    );
    assert_eq!(m.opset, 17);
    assert_eq!(m.initializers.len(), 199);
    assert_eq!(m.nodes.len(), 323);
    assert_eq!(m.inputs, [("images".to_string(), vec![-1, 3, -1, -1])]);
    assert_eq!(m.outputs.len(), 1);
    assert_eq!(m.outputs[0].0, "output0");
    assert_eq!(m.outputs[0].1[..2], [-1, 22]);
}

#[test]
fn ultralytics_metadata_parses() {
    let Some(path) = asset("ultralytics_metadata_parses", MODEL) else {
        return;
    };
    let m = read_onnx(&path).unwrap();
    assert_eq!(m.metadata_value("version"), Some("8.2.46"));
    assert_eq!(m.metadata_value("task"), Some("detect"));
    let names = parse_python_literal(m.metadata_value("names").unwrap()).unwrap();
    assert_eq!(names.as_dict_items().unwrap().len(), 18);
    assert_eq!(
        names.get_int(0).and_then(Value::as_str),
        Some("FEMALE_GENITALIA_COVERED")
    );
    assert_eq!(
        names.get_int(17).and_then(Value::as_str),
        Some("BUTTOCKS_COVERED")
    );
    let imgsz = parse_python_literal(m.metadata_value("imgsz").unwrap()).unwrap();
    let imgsz: Vec<i64> = imgsz
        .as_list()
        .unwrap()
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    assert_eq!(imgsz, [320, 320]);
    let stride = parse_python_literal(m.metadata_value("stride").unwrap()).unwrap();
    assert_eq!(stride.as_i64(), Some(32));
}

#[test]
fn initializer_shapes_and_values() {
    let Some(path) = asset("initializer_shapes_and_values", MODEL) else {
        return;
    };
    let m = read_onnx(&path).unwrap();
    assert_eq!(m.initializers[0].0, "model.0.conv.weight");
    let w = m.initializer("model.0.conv.weight").unwrap();
    assert_eq!((w.dtype(), w.shape()), (DType::F32, &[16, 3, 3, 3][..]));
    let v = w.to_vec::<f32>().unwrap();
    assert_eq!(v[..3], [-1.697_239_9, -1.403_400_5, 2.607_917_5]);
    assert_eq!(v[431], -1.422_880_6);
    let sum: f64 = v.iter().map(|&x| x as f64).sum();
    assert!((sum - -59.398_699_580_691_755).abs() < 1e-9, "{sum}");
    // The DFL projection is arange(16).
    let dfl = m.initializer("model.22.dfl.conv.weight").unwrap();
    assert_eq!(dfl.shape(), &[1, 16, 1, 1]);
    let expected: Vec<f32> = (0..16).map(|i| i as f32).collect();
    assert_eq!(dfl.to_vec::<f32>().unwrap(), expected);
    let split = m.initializer("onnx::Split_138").unwrap();
    assert_eq!(
        (split.dtype(), split.to_vec::<i64>().unwrap()),
        (DType::I64, vec![16, 16])
    );
}

#[test]
fn nodes_and_attributes() {
    let Some(path) = asset("nodes_and_attributes", MODEL) else {
        return;
    };
    let m = read_onnx(&path).unwrap();
    let first = &m.nodes[0];
    assert_eq!(
        (first.name.as_str(), first.op_type.as_str()),
        ("/model.0/conv/Conv", "Conv")
    );
    assert_eq!(
        first.inputs,
        ["images", "model.0.conv.weight", "model.0.conv.bias"]
    );
    assert_eq!(first.outputs, ["/model.0/conv/Conv_output_0"]);
    assert!(matches!(first.attribute("strides"), Some(OnnxAttribute::Ints(s)) if s == &[2, 2]));
    assert!(matches!(
        first.attribute("group"),
        Some(OnnxAttribute::Int(1))
    ));
    let conv_count = m.nodes.iter().filter(|n| n.op_type == "Conv").count();
    assert_eq!(conv_count, 64);
    // ConstantOfShape carries its fill value as a tensor attribute.
    let fill = m
        .nodes
        .iter()
        .find(|n| n.op_type == "ConstantOfShape")
        .unwrap();
    let Some(OnnxAttribute::Tensor(t)) = fill.attribute("value") else {
        panic!("no tensor value");
    };
    assert_eq!(
        (t.shape(), t.to_vec::<f32>().unwrap()),
        (&[1][..], vec![0.0])
    );
}

#[test]
fn truncated_model_errors_or_loses_trailing_fields() {
    let Some(path) = asset("truncated_model_errors_or_loses_trailing_fields", MODEL) else {
        return;
    };
    let bytes = std::fs::read(path).unwrap();
    let full = read_onnx_bytes(&bytes).unwrap();
    // A protobuf prefix that ends on a field boundary is itself valid, minus the trailing
    // fields (opset, metadata): any prefix must fail or lose some of them, never panic.
    let n = bytes.len();
    let lengths = (0..100).map(|i| i * (n / 100)).chain(n - 1200..n);
    for len in lengths {
        match read_onnx_bytes(&bytes[..len]) {
            Err(_) => {}
            Ok(m) => assert!(
                m.metadata.len() < full.metadata.len() || m.opsets.len() < full.opsets.len(),
                "prefix of {len} bytes decoded whole"
            ),
        }
    }
}

#[test]
fn corrupted_model_bytes_never_panic() {
    let Some(path) = asset("corrupted_model_bytes_never_panic", MODEL) else {
        return;
    };
    let bytes = std::fs::read(path).unwrap();
    let mut b = bytes.clone();
    // Corrupt bytes in the head (graph structure) and the tail (metadata), one at a time.
    let positions = (0..200).chain(bytes.len() - 1000..bytes.len());
    for i in positions {
        for flip in [0x80u8, 0xff] {
            b[i] ^= flip;
            let _ = read_onnx_bytes(&b);
            b[i] ^= flip;
        }
    }
}
