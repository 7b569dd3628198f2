//! Unit tests of the torch writer: what it writes reads back through our reader (Python data,
//! tensors of every dtype, module objects), and the container is laid out as torch lays it out.
//! That Python and torch read it too is checked by `tests/tests/yolo_pt_writer.rs`.

use super::materialise::{Materialiser, NoStorages};
use super::pickle::Vm;
use super::pickle_writer::pickle;
use super::{load_pt_bytes, module_state_dict, save_pt_bytes, ModuleObject, PyObject, Value};
use crate::{DType, Generator, Tensor};
use std::io::Cursor;

fn unpickle(obj: &PyObject) -> Value {
    let bytes = pickle(obj).unwrap().pickle;
    let mut vm = Vm::new(&bytes, "written.pkl");
    let root = vm.run(0).unwrap();
    Materialiser::new(&vm, &mut NoStorages("written.pkl"))
        .value(root)
        .unwrap()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_list()
        .unwrap()
        .iter()
        .map(|i| i.as_i64().unwrap())
        .collect()
}

#[test]
fn python_data_reads_back_the_same() {
    let boundaries = [
        0,
        255,
        256,
        65535,
        65536,
        -1,
        i32::MIN as i64,
        i32::MAX as i64,
        i32::MAX as i64 + 1,
        1 << 40,
        -(1 << 40),
        i64::MAX,
        i64::MIN,
    ];
    let tuples: Vec<PyObject> = (0..6)
        .map(|n| PyObject::Tuple((0..n).map(PyObject::Int).collect()))
        .collect();
    let obj = PyObject::str_dict([
        (
            "ints",
            PyObject::List(boundaries.iter().map(|&i| PyObject::Int(i)).collect()),
        ),
        ("float", PyObject::Float(-1.5e-300)),
        ("text", PyObject::str("é ünïcode 🦙")),
        ("bytes", PyObject::Bytes(vec![0, 1, 0x7f, 0x80, 0xff])),
        (
            "flags",
            PyObject::Tuple(vec![
                PyObject::Bool(true),
                PyObject::Bool(false),
                PyObject::None,
            ]),
        ),
        ("tuples", PyObject::List(tuples)),
        (
            "long list",
            PyObject::List((0..2500).map(PyObject::Int).collect()),
        ),
        (
            "int keys",
            PyObject::Dict(vec![(PyObject::Int(3), PyObject::str("three"))]),
        ),
        (
            "ordered",
            PyObject::OrderedDict(vec![(PyObject::str("p"), PyObject::Int(1))]),
        ),
        (
            "set",
            PyObject::Set(vec![PyObject::Int(7), PyObject::Int(8)]),
        ),
        ("empty set", PyObject::Set(Vec::new())),
    ]);
    let v = unpickle(&obj);
    assert_eq!(ints(v.get("ints").unwrap()), boundaries);
    assert_eq!(v.get("float").and_then(Value::as_f64), Some(-1.5e-300));
    assert_eq!(v.get("text").and_then(Value::as_str), Some("é ünïcode 🦙"));
    assert!(matches!(v.get("bytes"), Some(Value::Bytes(b)) if b == &[0, 1, 0x7f, 0x80, 0xff]));
    let flags = v.get("flags").and_then(Value::as_list).unwrap();
    assert_eq!(flags[0].as_bool(), Some(true));
    assert_eq!(flags[1].as_bool(), Some(false));
    assert!(matches!(flags[2], Value::None));
    for (n, t) in v
        .get("tuples")
        .and_then(Value::as_list)
        .unwrap()
        .iter()
        .enumerate()
    {
        assert!(matches!(t, Value::Tuple(_)));
        assert_eq!(ints(t), (0..n as i64).collect::<Vec<_>>());
    }
    assert_eq!(
        ints(v.get("long list").unwrap()),
        (0..2500).collect::<Vec<_>>()
    );
    assert_eq!(
        v.get("int keys")
            .and_then(|d| d.get_int(3))
            .and_then(Value::as_str),
        Some("three")
    );
    assert_eq!(
        v.get("ordered")
            .and_then(|d| d.get("p"))
            .and_then(Value::as_i64),
        Some(1)
    );
    assert!(matches!(v.get("set"), Some(Value::Set(s)) if s.len() == 2));
    assert!(matches!(v.get("empty set"), Some(Value::Set(s)) if s.is_empty()));
}

#[test]
fn tensors_of_every_dtype_read_back_bit_equal() {
    let mut gen = Generator::new(1);
    let f32s = Tensor::randn(&[3, 5], DType::F32, Some(&mut gen)).unwrap();
    let tensors = [
        ("f16", f32s.to_dtype(DType::F16).unwrap()),
        ("bf16", f32s.to_dtype(DType::BF16).unwrap()),
        ("f32", f32s.clone()),
        ("f64", f32s.to_dtype(DType::F64).unwrap()),
        (
            "i64",
            Tensor::from_vec(vec![-3i64, 0, 123_456_789_012], &[3]).unwrap(),
        ),
        ("u8", Tensor::from_vec(vec![0u8, 200, 255], &[3]).unwrap()),
        (
            "bool",
            Tensor::from_vec(vec![true, false, true], &[1, 3]).unwrap(),
        ),
        ("scalar", Tensor::from_vec(vec![7i64], &[]).unwrap()),
        (
            "empty",
            Tensor::zeros(&[0, 4], DType::F16, crate::Device::Cpu).unwrap(),
        ),
        // A transposed view is written contiguous, in its logical order.
        ("transposed", f32s.transpose(0, 1).unwrap()),
    ];
    let obj = PyObject::str_dict(
        tensors
            .iter()
            .map(|(n, t)| (n.to_string(), PyObject::Tensor(t.clone()))),
    );
    let bytes = save_pt_bytes(&obj).unwrap();
    let v = load_pt_bytes(&bytes, "tensors.pt").unwrap();
    for (name, want) in &tensors {
        let got = v.get(name).and_then(Value::as_tensor).unwrap();
        assert_eq!(got.dtype(), want.dtype(), "{name}");
        assert_eq!(got.dims(), want.dims(), "{name}");
        let as_f64 = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let (g, w) = (as_f64(got), as_f64(&want.contiguous().unwrap()));
        assert!(
            g.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}: {g:?} vs {w:?}"
        );
    }
}

#[test]
fn storages_are_stored_uncompressed_on_64_byte_boundaries_in_torchs_order() {
    let obj = PyObject::List(
        [3usize, 1, 17]
            .iter()
            .map(|&n| PyObject::Tensor(Tensor::ones(&[n], DType::F16, crate::Device::Cpu).unwrap()))
            .collect(),
    );
    let bytes = save_pt_bytes(&obj).unwrap();
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes.as_slice())).unwrap();
    let names: Vec<String> = zip.file_names().map(str::to_string).collect();
    let mut sorted_by_offset = Vec::new();
    for i in 0..zip.len() {
        let f = zip.by_index(i).unwrap();
        assert_eq!(
            f.compression(),
            zip::CompressionMethod::Stored,
            "{}",
            f.name()
        );
        assert_eq!(
            f.data_start() % 64,
            0,
            "{} starts at {}",
            f.name(),
            f.data_start()
        );
        sorted_by_offset.push((f.data_start(), f.name().to_string()));
    }
    sorted_by_offset.sort();
    let order: Vec<&str> = sorted_by_offset.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        order,
        [
            "archive/data.pkl",
            "archive/.format_version",
            "archive/.storage_alignment",
            "archive/byteorder",
            "archive/data/0",
            "archive/data/1",
            "archive/data/2",
            "archive/version",
            "archive/.data/serialization_id",
        ],
        "{names:?}"
    );
    let mut read = |name: &str| {
        let mut f = zip.by_name(name).unwrap();
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut out).unwrap();
        out
    };
    assert_eq!(read("archive/version"), b"3\n");
    assert_eq!(read("archive/byteorder"), b"little");
    assert_eq!(read("archive/data/2").len(), 17 * 2);
    assert_eq!(read("archive/.data/serialization_id").len(), 40);
}

#[test]
fn module_objects_read_back_as_modules_with_their_state_dict() {
    let w = Tensor::randn(&[2, 3], DType::F32, Some(&mut Generator::new(2))).unwrap();
    let mean = Tensor::zeros(&[2], DType::F32, crate::Device::Cpu).unwrap();
    let linear = ModuleObject::new("torch.nn.modules.linear.Linear")
        .param("weight", Some(w.clone()))
        .param("bias", None)
        .attr("in_features", PyObject::Int(3));
    let bn = ModuleObject::new("torch.nn.modules.batchnorm.BatchNorm1d")
        .buffer("running_mean", Some(mean))
        .attr("eps", PyObject::Float(1e-3));
    let seq = ModuleObject::container("torch.nn.modules.container.Sequential", vec![linear, bn]);
    assert_eq!(seq.num_parameters(), 6);
    let bytes = save_pt_bytes(&seq.to_object(false)).unwrap();
    let v = load_pt_bytes(&bytes, "seq.pt").unwrap();
    assert_eq!(
        v.class_name(),
        Some("torch.nn.modules.container.Sequential")
    );
    let first = v.get("0").unwrap();
    assert_eq!(first.class_name(), Some("torch.nn.modules.linear.Linear"));
    assert_eq!(first.get("in_features").and_then(Value::as_i64), Some(3));
    assert_eq!(first.get("training").and_then(Value::as_bool), Some(false));
    assert!(matches!(first.get("_forward_hooks"), Some(Value::Dict(d)) if d.is_empty()));
    let names: Vec<String> = module_state_dict(&v)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["0.weight", "1.running_mean"]);
    let got = first.get("weight").and_then(Value::as_tensor).unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
}

#[test]
fn what_torch_cannot_hold_is_an_error() {
    let u32s = Tensor::from_vec(vec![1u32, 2], &[2]).unwrap();
    let e = save_pt_bytes(&PyObject::Tensor(u32s))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no u32 storage"), "{e}");
    let bad = PyObject::Global {
        module: "os\nsystem".into(),
        name: "x".into(),
    };
    let e = save_pt_bytes(&bad).unwrap_err().to_string();
    assert!(e.contains("not a global a pickle can name"), "{e}");
}
