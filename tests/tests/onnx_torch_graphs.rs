//! ONNX graphs torch exported from the general layers and ops (tests/fixtures/onnx_torch, made by
//! make_torch_graphs.py with both of torch's exporters), run as graphs (`OnnxGraph`) on the
//! fixture's inputs: every output within 1e-4 of onnxruntime's (relative to the output's scale,
//! as the published models are checked). Every file in the folder is a case; a file whose
//! outputs are missing from io.safetensors fails, so a case cannot drop out unseen.

use rb_integration_tests::parity::worst_difference;
use rusting_brain::graph::OnnxGraph;
use rusting_brain::nn::Module;
use rusting_brain::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/onnx_torch")
}

/// Every exported file, by case name (`gru`, `gru.dynamo`), sorted.
fn exported_files() -> Vec<(String, PathBuf)> {
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, p)
        })
        .collect();
    files.sort();
    files
}

/// The largest difference over the output's scale (its largest magnitude, at least 1).
fn relative_error(got: &Tensor, want: &Tensor) -> Result<f64, String> {
    if got.shape() != want.shape() {
        return Err(format!("shape {:?}, want {:?}", got.shape(), want.shape()));
    }
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    Ok(worst_difference(&g, &w) / scale)
}

/// Runs one exported file on `device`; the worst relative error over its outputs.
fn run_case(
    name: &str,
    path: &Path,
    io: &HashMap<String, Tensor>,
    device: Device,
) -> Result<f64, String> {
    // `gru.dynamo` reads `gru`'s inputs and its own outputs.
    let case = name.split('.').next().unwrap();
    let graph = OnnxGraph::load(path).map_err(|e| format!("load: {e}"))?;
    graph.to_device(device).map_err(|e| e.to_string())?;
    let feeds: Vec<(String, Tensor)> = graph
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (input, _))| {
            let x = io
                .get(&format!("{case}.in.{i}"))
                .ok_or(format!("no input {i} in io.safetensors"))?;
            Ok((input.clone(), x.to_device(device).unwrap()))
        })
        .collect::<Result<_, String>>()?;
    let outputs = graph.run(&feeds).map_err(|e| format!("run: {e}"))?;
    let mut worst = 0.0f64;
    for (i, (output, got)) in outputs.iter().enumerate() {
        let want = io
            .get(&format!("{name}.out.{i}"))
            .ok_or(format!("output {i} `{output}` is not in io.safetensors"))?;
        let got = got
            .to_device(Device::Cpu)
            .and_then(|g| g.to_dtype(DType::F32))
            .unwrap();
        let err = relative_error(&got, &want.to_dtype(DType::F32).unwrap())
            .map_err(|e| format!("output `{output}`: {e}"))?;
        worst = worst.max(err);
    }
    if !io.contains_key(&format!("{name}.out.{}", outputs.len())) {
        Ok(worst)
    } else {
        Err(format!(
            "onnxruntime gave more than {} outputs",
            outputs.len()
        ))
    }
}

/// Runs every exported file on `device`, printing each case's error, and fails naming every
/// case that failed or differs by more than 1e-4.
fn check_all(device: Device) {
    let io: HashMap<String, Tensor> =
        rusting_brain::io::safetensors::load(fixture_dir().join("io.safetensors"))
            .expect("the exported graphs' inputs and outputs")
            .into_iter()
            .collect();
    let files = exported_files();
    assert!(files.len() >= 90, "only {} exported files", files.len());
    let mut failed = Vec::new();
    for (name, path) in &files {
        match run_case(name, path, &io, device) {
            Ok(err) if err <= 1e-4 => eprintln!("{name}: relative error {err:.2e}"),
            Ok(err) => failed.push(format!("{name}: differs from onnxruntime by {err:.2e}")),
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} exported graphs failed:\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
}

#[test]
fn torch_exported_graphs_of_the_general_layers_match_onnxruntime() {
    check_all(Device::Cpu);
}

#[test]
fn torch_exported_graphs_on_cuda_match_onnxruntime() {
    let Some(cuda) = rusting_brain::backend::cuda::device_for_test("onnx_torch_graphs_on_cuda")
    else {
        return;
    };
    check_all(cuda);
}
