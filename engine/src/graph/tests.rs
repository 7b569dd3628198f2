//! The runtime on graphs this crate writes (so these run without any fetched file): modules
//! exported through `nn::export_module` give the module's own outputs when run as graphs, and
//! graphs the runtime cannot run are refused by name. Published models and ONNX's conformance
//! data are checked in tests/tests/onnx_graph_models.rs and onnx_conformance.rs.

use super::OnnxGraph;
use crate::io::onnx::export::{Attr, ExportOptions, GraphBuilder};
use crate::io::onnx::read_onnx_bytes;
use crate::nn::{
    export_module, Activation, ActivationLayer, AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2d,
    ConvTranspose2d, Flatten, Linear, MaxPool2d, Module, Sequential, Window,
};
use crate::ops::conv::Conv2dOptions;
use crate::ops::conv_transpose::ConvTranspose2dOptions;
use crate::{no_grad, DType, Generator, Tensor};
use prost::Message;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed))).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Exports `module`, loads the file as a graph, and compares the two on `x`.
fn round_trip(module: &dyn Module, x: &Tensor, name: &str) -> OnnxGraph {
    let path = std::env::temp_dir().join(format!("rb-graph-{name}-{}.onnx", std::process::id()));
    let shape = [&[1], &x.shape()[1..]].concat();
    export_module(module, &shape, &path, &ExportOptions::default()).unwrap();
    let graph = OnnxGraph::load(&path).unwrap();
    let want = no_grad(|| module.forward(x)).unwrap();
    let got = graph.forward(x).unwrap();
    let diff = max_diff(&got, &want);
    assert!(
        diff < 1e-5,
        "{name}: the graph differs from the module by {diff}"
    );
    std::fs::remove_file(&path).ok();
    graph
}

fn cnn() -> Sequential {
    let mut gen = Generator::new(5);
    let pad1 = Conv2dOptions {
        padding: (1, 1),
        ..Conv2dOptions::default()
    };
    let strided = Conv2dOptions {
        stride: (2, 2),
        padding: (1, 1),
        groups: 2,
        ..Conv2dOptions::default()
    };
    let bn = BatchNorm2d::new(8).unwrap();
    // Running statistics that are not the identity, so the graph must read them.
    for (name, t) in bn.named_buffers() {
        let v = if name.ends_with("mean") { 0.3 } else { 1.7 };
        t.fill_(v).unwrap();
    }
    let mut model = Sequential::new()
        .with(Conv2d::new(3, 8, (3, 3), pad1, true, &mut gen).unwrap())
        .with(bn)
        .with(ActivationLayer::new(Activation::Silu))
        .with(MaxPool2d::new(Window::new((2, 2))))
        .with(Conv2d::new(8, 8, (3, 3), strided, true, &mut gen).unwrap())
        .with(ActivationLayer::new(Activation::Gelu))
        .with(AvgPool2d::new(Window {
            kernel: (3, 3),
            stride: (1, 1),
            padding: (1, 1),
        }))
        .with(ActivationLayer::new(Activation::Mish))
        .with(AdaptiveAvgPool2d::new((1, 1)))
        .with(Flatten::new(1))
        .with(Linear::new(8, 3, true, &mut gen).unwrap());
    model.eval();
    model
}

#[test]
fn an_exported_cnn_runs_as_its_graph_with_the_modules_outputs() {
    let graph = round_trip(&cnn(), &randn(&[2, 3, 12, 10], 6), "cnn");
    // Conv, BatchNorm and Linear weights are parameters; BatchNorm's statistics buffers.
    assert_eq!(
        graph.named_parameters().len(),
        8,
        "{:?}",
        graph
            .named_parameters()
            .iter()
            .map(|(n, _)| n)
            .collect::<Vec<_>>()
    );
    assert!(graph.title().starts_with("OnnxGraph(nodes="));
}

#[test]
fn an_exported_transposed_convolution_runs_as_its_graph() {
    let opts = ConvTranspose2dOptions {
        stride: (2, 2),
        padding: (1, 1),
        output_padding: (1, 1),
        groups: 2,
        ..Default::default()
    };
    let up = ConvTranspose2d::new(4, 6, (3, 3), opts, true, &mut Generator::new(8)).unwrap();
    round_trip(&up, &randn(&[2, 4, 5, 5], 9), "conv_transpose");
}

#[test]
fn gradients_flow_through_a_graph_in_training_mode() {
    let path = std::env::temp_dir().join(format!("rb-graph-train-{}.onnx", std::process::id()));
    export_module(&cnn(), &[1, 3, 8, 8], &path, &ExportOptions::default()).unwrap();
    let mut graph = OnnxGraph::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let x = randn(&[2, 3, 8, 8], 1);
    // In eval mode nothing is recorded.
    assert!(graph.forward(&x).unwrap().grad_fn().is_none());
    graph.train(true);
    let loss = graph.forward(&x).unwrap().square().unwrap().sum().unwrap();
    loss.backward().unwrap();
    let with_grad = graph
        .named_parameters()
        .iter()
        .filter(|(_, p)| p.grad().is_some())
        .count();
    assert_eq!(with_grad, graph.named_parameters().len());
}

/// A graph of one node `op` (in `domain`) over a [2, 3] input, as the reader sees it.
fn one_node_graph(op: &str, domain: &str, attrs: &[(&str, Attr)]) -> crate::Result<OnnxGraph> {
    let mut g = GraphBuilder::new(17);
    let opts = ExportOptions::default();
    let x = g.input("x", &opts.dims(&[2, 3]), DType::F32);
    let y = g.node(op, &[&x], attrs);
    g.output(&y, "y", &opts.dims(&[2, 3]));
    let mut model = g.into_model("test");
    if let Some(graph) = model.graph.as_mut() {
        graph.node[0].domain = domain.into();
    }
    OnnxGraph::from_model(read_onnx_bytes(&model.encode_to_vec())?)
}

#[test]
fn an_unknown_operator_is_refused_at_load_naming_it_its_node_and_the_opset() {
    let Err(e) = one_node_graph("FancyOp", "", &[]) else {
        panic!("a graph with an unknown operator loaded");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("FancyOp") && msg.contains("fancyop") && msg.contains("opset 17"),
        "{msg}"
    );
}

#[test]
fn an_operator_of_another_domain_is_refused_naming_the_domain() {
    let Err(e) = one_node_graph("Relu", "com.microsoft", &[]) else {
        panic!("a com.microsoft node loaded");
    };
    assert!(e.to_string().contains("com.microsoft"), "{e}");
}

#[test]
fn an_attribute_value_the_runtime_lacks_is_refused_by_name_at_run() {
    let g = one_node_graph("Gelu", "", &[("approximate", Attr::Str("cubic"))]).unwrap();
    let e = g.forward(&randn(&[2, 3], 0)).unwrap_err().to_string();
    assert!(e.contains("Gelu node") && e.contains("cubic"), "{e}");
}

#[test]
fn inputs_are_checked_by_name_and_shape() {
    let g = one_node_graph("Relu", "", &[]).unwrap();
    let x = randn(&[2, 3], 0);
    let e = g
        .run(&[("images".into(), x.clone())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("no input `images`") && e.contains("`x`"), "{e}");
    let e = g.run(&[]).unwrap_err().to_string();
    assert!(e.contains("input `x`") && e.contains("not given"), "{e}");
    let e = g.forward(&randn(&[2, 4], 0)).unwrap_err().to_string();
    assert!(e.contains("[2, 4]") && e.contains("declares"), "{e}");
    let y = g.forward(&x).unwrap();
    assert_eq!(
        y.to_vec_f32().unwrap(),
        x.relu().unwrap().to_vec_f32().unwrap()
    );
}
