//! Unit tests of the ONNX reader: tensor decoding rules and the Python-literal parser.

use super::proto::{data_type as dt, StringStringEntryProto, TensorProto};
use super::tensor::decode_tensor;
use super::{parse_python_literal, read_onnx_bytes};
use crate::io::torch::Value;
use crate::DType;

fn tensor(data_type: i32, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: "w".into(),
        data_type,
        dims: dims.to_vec(),
        ..Default::default()
    }
}

#[test]
fn raw_data_must_match_the_dims() {
    let mut t = tensor(dt::FLOAT, &[2, 2]);
    t.raw_data = vec![0; 12];
    let e = decode_tensor(&t).unwrap_err().to_string();
    assert!(
        e.contains("tensor `w`") && e.contains("holds 12 bytes"),
        "{e}"
    );
    t.raw_data = [1.5f32, 2.0, 3.0, -4.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let ok = decode_tensor(&t).unwrap();
    assert_eq!(ok.shape(), &[2, 2]);
    assert_eq!(ok.to_vec::<f32>().unwrap(), [1.5, 2.0, 3.0, -4.0]);
}

#[test]
fn typed_fields_are_read_by_data_type() {
    let mut f = tensor(dt::FLOAT, &[3]);
    f.float_data = vec![1.0, 2.0, 3.0];
    assert_eq!(
        decode_tensor(&f).unwrap().to_vec::<f32>().unwrap(),
        [1.0, 2.0, 3.0]
    );
    let mut h = tensor(dt::FLOAT16, &[2]);
    h.int32_data = vec![0x3c00, 0xc000]; // 1.0 and -2.0 as f16 bits
    let h = decode_tensor(&h).unwrap();
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(h.to_vec::<f32>().unwrap(), [1.0, -2.0]);
    let mut i = tensor(dt::INT32, &[2]);
    i.int32_data = vec![-7, 9];
    let i = decode_tensor(&i).unwrap();
    assert_eq!(
        (i.dtype(), i.to_vec::<i64>().unwrap()),
        (DType::I64, vec![-7, 9])
    );
    let mut l = tensor(dt::INT64, &[]);
    l.int64_data = vec![42];
    assert_eq!(decode_tensor(&l).unwrap().to_vec::<i64>().unwrap(), [42]);
}

#[test]
fn typed_field_count_must_match_the_dims() {
    let mut f = tensor(dt::FLOAT, &[4]);
    f.float_data = vec![1.0];
    let e = decode_tensor(&f).unwrap_err().to_string();
    assert!(
        e.contains("float_data holds 1 values but the dims need 4"),
        "{e}"
    );
}

#[test]
fn raw_int8_and_int32_widen() {
    let mut t = tensor(dt::INT8, &[2]);
    t.raw_data = vec![0xff, 0x05];
    assert_eq!(decode_tensor(&t).unwrap().to_vec::<i64>().unwrap(), [-1, 5]);
    let mut t = tensor(dt::INT32, &[1]);
    t.raw_data = (-70000i32).to_le_bytes().to_vec();
    assert_eq!(
        decode_tensor(&t).unwrap().to_vec::<i64>().unwrap(),
        [-70000]
    );
}

#[test]
fn external_data_and_strings_are_refused() {
    let mut t = tensor(dt::FLOAT, &[1]);
    t.external_data = vec![StringStringEntryProto {
        key: "location".into(),
        value: "weights.bin".into(),
    }];
    let e = decode_tensor(&t).unwrap_err().to_string();
    assert!(e.contains("external file"), "{e}");
    let e = decode_tensor(&tensor(8, &[1])).unwrap_err().to_string();
    assert!(e.contains("element type STRING is not supported"), "{e}");
    let e = decode_tensor(&tensor(dt::FLOAT, &[-1]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("negative dim"), "{e}");
}

#[test]
fn garbage_is_not_a_model() {
    assert!(read_onnx_bytes(b"\xff\xff\xff\xff\xff").is_err());
    // A valid empty message, but no graph.
    let e = read_onnx_bytes(b"").unwrap_err().to_string();
    assert!(e.contains("no graph"), "{e}");
}

fn lit(s: &str) -> Value {
    parse_python_literal(s).unwrap()
}

#[test]
fn ultralytics_metadata_literals() {
    let names = lit("{0: 'person', 1: \"bicycle\", 2: 'traffic light'}");
    assert_eq!(names.as_dict_items().unwrap().len(), 3);
    assert_eq!(
        names.get_int(2).and_then(Value::as_str),
        Some("traffic light")
    );
    let imgsz = lit("[640, 640]");
    let dims: Vec<i64> = imgsz
        .as_list()
        .unwrap()
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    assert_eq!(dims, [640, 640]);
    assert_eq!(lit(" 32 ").as_i64(), Some(32));
    let args =
        lit("{'batch': 1, 'half': False, 'int8': True, 'data': None, 'lr': 1e-05, 'x': -0.5,}");
    assert_eq!(args.get("half").and_then(Value::as_bool), Some(false));
    assert_eq!(args.get("int8").and_then(Value::as_bool), Some(true));
    assert!(matches!(args.get("data"), Some(Value::None)));
    assert_eq!(args.get("lr").and_then(Value::as_f64), Some(1e-5));
    assert_eq!(args.get("x").and_then(Value::as_f64), Some(-0.5));
}

#[test]
fn string_escapes_and_quotes() {
    assert_eq!(lit(r#"'it\'s'"#).as_str(), Some("it's"));
    assert_eq!(lit(r#""say \"hi\"""#).as_str(), Some("say \"hi\""));
    assert_eq!(lit(r#"'a\nb\t\\'"#).as_str(), Some("a\nb\t\\"));
    assert_eq!(lit(r#"'\x41\u00e9\U0001F600'"#).as_str(), Some("Aé😀"));
    assert_eq!(lit(r#""it's""#).as_str(), Some("it's"));
    assert_eq!(lit("'ab' \"cd\"").as_str(), Some("abcd"));
}

#[test]
fn tuples_sets_and_nesting() {
    assert!(matches!(lit("()"), Value::Tuple(t) if t.is_empty()));
    assert!(matches!(lit("(1,)"), Value::Tuple(t) if t.len() == 1));
    assert_eq!(lit("(7)").as_i64(), Some(7));
    assert!(matches!(lit("{1, 2}"), Value::Set(s) if s.len() == 2));
    assert!(matches!(lit("{}"), Value::Dict(d) if d.is_empty()));
    let nested = lit("{'a': [1, (2, 3)], 'b': {'c': [True]}}");
    assert_eq!(
        nested
            .get("b")
            .unwrap()
            .get("c")
            .unwrap()
            .as_list()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn malformed_literals_give_errors() {
    for bad in [
        "",
        "'open",
        "[1, 2",
        "{0: 'a'",
        "{0 'a'}",
        "[1 2]",
        "1 2",
        "os.system('ls')",
        "__import__('os')",
        "0x10",
        "'\\x4'",
        "[",
        "-",
        "{0: }",
    ] {
        assert!(parse_python_literal(bad).is_err(), "`{bad}` parsed");
    }
    let deep = "[".repeat(10_000);
    assert!(parse_python_literal(&deep).is_err());
}

#[test]
fn an_empty_tensor_with_unaddressable_dims_is_an_error() {
    // Found by the corruption harness: zero elements, but strides past the address space.
    let t = tensor(dt::FLOAT, &[0, 1 << 40, 1 << 40]);
    let e = decode_tensor(&t).unwrap_err().to_string();
    assert!(e.contains("too large to address"), "{e}");
}
