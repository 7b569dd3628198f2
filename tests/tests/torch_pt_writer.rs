//! The torch writer checked by torch itself: a file holding every kind of value the writer
//! knows is read by `torch.load` (with `weights_only` on and off) through
//! `tests/fixtures/torch/read_with_torch.py`, which describes what it read as JSON.

use rb_integration_tests::ultralytics_python::ultralytics_python;
use rusting_brain::io::torch::{save_pt, ModuleObject, PyObject};
use rusting_brain::{DType, Device, Tensor};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;

fn read_with_torch(py: &str, obj: &PyObject) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let (pt, out) = (dir.path().join("x.pt"), dir.path().join("x.json"));
    save_pt(&pt, obj).unwrap();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/torch/read_with_torch.py");
    let run = Command::new(py)
        .arg(script)
        .arg(&pt)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "read_with_torch.py failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

fn tensor_json(dtype: &str, shape: &[usize], values: Value) -> Value {
    json!({"dtype": dtype, "shape": shape, "contiguous": true, "values": values})
}

#[test]
fn torch_reads_python_data_and_tensors_as_written() {
    let Some(py) = ultralytics_python("torch_reads_python_data_and_tensors_as_written") else {
        return;
    };
    let m = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let obj = PyObject::str_dict([
        (
            "ints",
            PyObject::List(
                [0, 255, 256, 65536, -1, -(1i64 << 40), i64::MAX, i64::MIN]
                    .into_iter()
                    .map(PyObject::Int)
                    .collect(),
            ),
        ),
        ("float", PyObject::Float(0.1)),
        ("text", PyObject::str("é🦙")),
        ("bytes", PyObject::Bytes(vec![0, 200, 255])),
        (
            "tuple",
            PyObject::Tuple((0..5).map(PyObject::Int).collect()),
        ),
        (
            "set",
            PyObject::Set(vec![PyObject::Int(2), PyObject::Int(1)]),
        ),
        (
            "ordered",
            PyObject::OrderedDict(vec![(PyObject::str("k"), PyObject::None)]),
        ),
        (
            "int keys",
            PyObject::Dict(vec![(PyObject::Int(4), PyObject::Bool(true))]),
        ),
        ("f16", PyObject::Tensor(m.to_dtype(DType::F16).unwrap())),
        ("bf16", PyObject::Tensor(m.to_dtype(DType::BF16).unwrap())),
        ("f64", PyObject::Tensor(m.to_dtype(DType::F64).unwrap())),
        ("transposed", PyObject::Tensor(m.transpose(0, 1).unwrap())),
        (
            "i64 scalar",
            PyObject::Tensor(Tensor::from_vec(vec![-9i64], &[]).unwrap()),
        ),
        (
            "bool",
            PyObject::Tensor(Tensor::from_vec(vec![true, false], &[2]).unwrap()),
        ),
        (
            "empty",
            PyObject::Tensor(Tensor::zeros(&[0], DType::F16, Device::Cpu).unwrap()),
        ),
        (
            "parameter",
            PyObject::Parameter {
                data: m.clone(),
                requires_grad: true,
            },
        ),
    ]);
    let got = read_with_torch(&py, &obj);
    let entries = got["dict"].as_array().unwrap();
    let get = |k: &str| {
        entries
            .iter()
            .find(|e| e[0] == k)
            .map(|e| e[1].clone())
            .unwrap_or_else(|| panic!("no `{k}` in {got}"))
    };
    assert_eq!(
        get("ints"),
        json!([0, 255, 256, 65536, -1, -(1i64 << 40), i64::MAX, i64::MIN])
    );
    assert_eq!(get("float"), json!(0.1));
    assert_eq!(get("text"), json!("é🦙"));
    assert_eq!(get("bytes"), json!({"bytes": [0, 200, 255]}));
    assert_eq!(get("tuple"), json!({"tuple": [0, 1, 2, 3, 4]}));
    assert_eq!(get("set"), json!({"set": [1, 2]}));
    assert_eq!(get("ordered"), json!({"ordered": [["k", null]]}));
    assert_eq!(get("int keys"), json!({"dict": [[4, true]]}));
    let flat = json!([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(get("f16"), tensor_json("float16", &[2, 3], flat.clone()));
    assert_eq!(get("bf16"), tensor_json("bfloat16", &[2, 3], flat.clone()));
    assert_eq!(get("f64"), tensor_json("float64", &[2, 3], flat.clone()));
    assert_eq!(
        get("transposed"),
        tensor_json("float32", &[3, 2], json!([1.0, 4.0, 2.0, 5.0, 3.0, 6.0]))
    );
    assert_eq!(get("i64 scalar"), tensor_json("int64", &[], json!([-9])));
    assert_eq!(get("bool"), tensor_json("bool", &[2], json!([true, false])));
    assert_eq!(get("empty"), tensor_json("float16", &[0], json!([])));
    assert_eq!(
        get("parameter"),
        json!({"parameter": tensor_json("float32", &[2, 3], flat), "requires_grad": true})
    );
}

#[test]
fn torch_rebuilds_a_pickled_module_tree() {
    let Some(py) = ultralytics_python("torch_rebuilds_a_pickled_module_tree") else {
        return;
    };
    // nn.Sequential(nn.Linear(2, 1, bias=False), nn.ReLU()) in eval mode, then called by Python.
    let w = Tensor::from_vec(vec![0.5f32, -2.0], &[1, 2]).unwrap();
    let linear = ModuleObject::new("torch.nn.modules.linear.Linear")
        .param("weight", Some(w))
        .param("bias", None)
        .attr("in_features", PyObject::Int(2))
        .attr("out_features", PyObject::Int(1));
    let relu = ModuleObject::new("torch.nn.modules.activation.ReLU")
        .attr("inplace", PyObject::Bool(false));
    let seq = ModuleObject::container("torch.nn.modules.container.Sequential", vec![linear, relu]);
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("seq.pt");
    save_pt(&pt, &seq.to_object(false)).unwrap();
    let code = "import sys, torch\n\
        m = torch.load(sys.argv[1], weights_only=False)\n\
        assert isinstance(m, torch.nn.Sequential) and not m.training\n\
        y = m(torch.tensor([[6.0, 1.0], [1.0, 4.0]]))\n\
        print(y.flatten().tolist(), m[0].weight.requires_grad)";
    let out = Command::new(&py)
        .args(["-c", code])
        .arg(&pt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // relu(0.5 * 6 - 2 * 1) = 1, relu(0.5 - 8) = 0.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "[1.0, 0.0] False"
    );
}
