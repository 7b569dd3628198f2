//! The general layers and ops against PyTorch's own outputs and gradients
//! (`tests/fixtures/layers/make_layers.py` wrote them with torch): GroupNorm,
//! ConvTranspose2d, MultiheadAttention (padding, float and causal masks, both layouts),
//! TransformerEncoderLayer (post-norm relu and pre-norm gelu), and cumsum, cumprod, flip, roll, repeat_interleave, the
//! norms, std, masked_select and the four pad modes, LSTM (variable lengths) and GRU, PReLU and the softmax layers. Each module is built here, loads torch's
//! state dict by its PyTorch names, and must give torch's numbers. The activations with
//! parameters or joints (`make_activations.py`) are checked as layers, values and gradients.

use rusting_brain::nn::{
    Activation, AttentionMasks, Cell, EncoderLayerConfig, GroupNorm, Module, MultiheadAttention,
    PRelu, Recurrent, RecurrentConfig, Softmax, TransformerEncoderLayer,
};
use rusting_brain::ops::rearrange::PadMode;
use rusting_brain::{Generator, Result, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixtures() -> BTreeMap<String, Tensor> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/layers/layers.safetensors");
    rusting_brain::io::safetensors::load(path).expect("the layer fixtures")
}

fn get<'a>(f: &'a BTreeMap<String, Tensor>, name: &str) -> &'a Tensor {
    f.get(name)
        .unwrap_or_else(|| panic!("{name} missing from the fixtures"))
}

/// Entries under `prefix.state.` with the prefix taken off: a state dict.
fn state(f: &BTreeMap<String, Tensor>, prefix: &str) -> BTreeMap<String, Tensor> {
    let p = format!("{prefix}.state.");
    f.iter()
        .filter_map(|(k, v)| k.strip_prefix(&p).map(|n| (n.to_string(), v.clone())))
        .collect()
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    // Each difference over 1 + |want|; a NaN on one side fails (f64::max would skip it).
    let worst = g.iter().zip(&w).fold(0.0, |m: f64, (a, b)| {
        let d = (a - b).abs() / (1.0 + b.abs());
        if d.is_nan() && !(a.is_nan() && b.is_nan()) {
            f64::INFINITY
        } else {
            m.max(d)
        }
    });
    assert!(worst < tol, "{what}: worst relative error {worst:e}");
}

/// A leaf copy of `t` that records gradients.
fn leaf(t: &Tensor) -> Tensor {
    t.contiguous_copy().unwrap().requires_grad_().unwrap()
}

/// The gradient of sum(y * probe) reaching `x`.
fn grad_of(y: &Tensor, probe: &Tensor, x: &Tensor) -> Tensor {
    y.mul(probe).unwrap().sum().unwrap().backward().unwrap();
    x.grad().expect("a gradient")
}

#[test]
fn group_norm_matches_torch_with_gradients() {
    let f = fixtures();
    let mut gn = GroupNorm::new(3, 6, 1e-5, true).unwrap();
    let weights: BTreeMap<String, Tensor> = [
        ("weight".to_string(), get(&f, "group_norm.weight").clone()),
        ("bias".to_string(), get(&f, "group_norm.bias").clone()),
    ]
    .into();
    gn.load_state_dict(&weights, true).unwrap();
    gn.eval();
    let x = leaf(get(&f, "group_norm.x"));
    let y = gn.forward(&x).unwrap();
    assert_close("group_norm out", &y, get(&f, "group_norm.out"), 1e-5);
    let gx = grad_of(&y, get(&f, "group_norm.probe"), &x);
    assert_close("group_norm grad x", &gx, get(&f, "group_norm.grad_x"), 1e-4);
    let gw = gn.weight.as_ref().unwrap().grad().unwrap();
    assert_close(
        "group_norm grad weight",
        &gw,
        get(&f, "group_norm.grad_weight"),
        1e-4,
    );
    let gb = gn.bias.as_ref().unwrap().grad().unwrap();
    assert_close(
        "group_norm grad bias",
        &gb,
        get(&f, "group_norm.grad_bias"),
        1e-4,
    );
}

fn mha(f: &BTreeMap<String, Tensor>, batch_first: bool) -> MultiheadAttention {
    let mut m =
        MultiheadAttention::new(8, 2, true, 0.0, batch_first, &mut Generator::new(9)).unwrap();
    m.load_state_dict(&state(f, "mha_padded"), true).unwrap();
    m.eval();
    m
}

#[test]
fn multi_head_attention_with_a_padding_mask_matches_torch() {
    let f = fixtures();
    let m = mha(&f, true);
    let q = leaf(get(&f, "mha_padded.query"));
    let kv = get(&f, "mha_padded.key_value");
    let masks = AttentionMasks {
        key_padding_mask: Some(get(&f, "mha_padded.key_padding_mask")),
        ..Default::default()
    };
    let y = m.attend(&q, kv, kv, masks).unwrap();
    assert_close("mha out", &y, get(&f, "mha_padded.out"), 1e-5);
    let gq = grad_of(&y, get(&f, "mha_padded.probe"), &q);
    assert_close(
        "mha grad query",
        &gq,
        get(&f, "mha_padded.grad_query"),
        1e-4,
    );
}

#[test]
fn multi_head_attention_seq_first_with_float_and_causal_masks_matches_torch() {
    let f = fixtures();
    let m = mha(&f, false);
    let src = get(&f, "mha_seq_first.src");
    let float = AttentionMasks {
        attn_mask: Some(get(&f, "mha_seq_first.float_mask")),
        ..Default::default()
    };
    let y = m.attend(src, src, src, float).unwrap();
    assert_close(
        "mha float mask",
        &y,
        get(&f, "mha_seq_first.out_float"),
        1e-5,
    );
    let causal = AttentionMasks {
        is_causal: true,
        ..Default::default()
    };
    // The fused path (no explicit mask) against torch's explicit upper-triangle mask.
    let y = m.attend(src, src, src, causal).unwrap();
    assert_close("mha causal", &y, get(&f, "mha_seq_first.out_causal"), 1e-5);
}

fn encoder(
    f: &BTreeMap<String, Tensor>,
    prefix: &str,
    norm_first: bool,
    batch_first: bool,
) -> Result<TransformerEncoderLayer> {
    let mut c = EncoderLayerConfig::new(8, 2);
    c.dim_feedforward = 16;
    c.norm_first = norm_first;
    c.batch_first = batch_first;
    if norm_first {
        c.activation = Activation::Gelu;
    }
    let mut layer = TransformerEncoderLayer::new(c, &mut Generator::new(3))?;
    layer.load_state_dict(&state(f, prefix), true)?;
    layer.eval();
    Ok(layer)
}

#[test]
fn transformer_encoder_layer_post_norm_with_padding_matches_torch() {
    let f = fixtures();
    let layer = encoder(&f, "encoder_post", false, true).unwrap();
    let x = leaf(get(&f, "encoder_post.x"));
    let masks = AttentionMasks {
        key_padding_mask: Some(get(&f, "encoder_post.key_padding_mask")),
        ..Default::default()
    };
    let y = layer.encode(&x, masks).unwrap();
    assert_close("encoder out", &y, get(&f, "encoder_post.out"), 1e-5);
    let gx = grad_of(&y, get(&f, "encoder_post.probe"), &x);
    assert_close("encoder grad x", &gx, get(&f, "encoder_post.grad_x"), 1e-4);
}

#[test]
fn transformer_encoder_layer_pre_norm_gelu_matches_torch() {
    let f = fixtures();
    let layer = encoder(&f, "encoder_pre", true, false).unwrap();
    let y = layer.forward(get(&f, "encoder_pre.x")).unwrap();
    assert_close("pre-norm encoder out", &y, get(&f, "encoder_pre.out"), 1e-5);
}

#[test]
fn the_new_ops_match_torch_with_gradients() {
    let f = fixtures();
    type Op = fn(&Tensor) -> Result<Tensor>;
    let ops: [(&str, Op); 10] = [
        ("cumsum", |t| t.cumsum(1)),
        ("cumprod", |t| t.cumprod(1)),
        ("flip", |t| t.flip(&[0, 1])),
        ("roll", |t| t.roll(2, 1)),
        ("repeat_interleave", |t| t.repeat_interleave(2, 0)),
        ("norm2", |t| t.norm_dims(2.0, &[-1], false)),
        ("norm_inf", |t| t.norm_dims(f64::INFINITY, &[0], false)),
        ("norm3", |t| t.norm_dims(3.0, &[], false)),
        ("std", |t| t.std_dims(&[0], true, false)),
        ("masked_select", |t| t.masked_select(&t.gt_scalar(0.0)?)),
    ];
    for (name, op) in ops {
        let x = leaf(get(&f, "op.input"));
        let y = op(&x).unwrap();
        assert_close(name, &y, get(&f, &format!("op.{name}.out")), 1e-5);
        let g = grad_of(&y, get(&f, &format!("op.{name}.probe")), &x);
        assert_close(
            &format!("{name} grad"),
            &g,
            get(&f, &format!("op.{name}.grad")),
            1e-4,
        );
    }
}

#[test]
fn pad_modes_match_torch_with_gradients() {
    let f = fixtures();
    let modes = [
        ("reflect", PadMode::Reflect, [2, 1, 1, 2]),
        ("replicate", PadMode::Replicate, [2, 1, 1, 2]),
        ("circular", PadMode::Circular, [2, 1, 1, 2]),
        ("constant", PadMode::Constant(0.5), [1, 0, 0, 2]),
    ];
    for (name, mode, pads) in modes {
        let x = leaf(get(&f, "pad.input"));
        let y = x.pad(&pads, mode).unwrap();
        assert_close(name, &y, get(&f, &format!("pad.{name}.out")), 1e-6);
        let g = grad_of(&y, get(&f, &format!("pad.{name}.probe")), &x);
        assert_close(
            &format!("{name} grad"),
            &g,
            get(&f, &format!("pad.{name}.grad")),
            1e-5,
        );
    }
}

#[test]
fn conv_transpose2d_matches_torch_with_gradients() {
    use rusting_brain::nn::ConvTranspose2d;
    use rusting_brain::ConvTranspose2dOptions;
    let f = fixtures();
    let opts = ConvTranspose2dOptions {
        stride: (2, 1),
        padding: (1, 1),
        output_padding: (1, 0),
        dilation: (1, 2),
        groups: 2,
    };
    let layer = ConvTranspose2d::new(4, 6, (3, 3), opts, true, &mut Generator::new(5)).unwrap();
    layer
        .load_state_dict(&state(&f, "conv_transpose"), true)
        .unwrap();
    let x = leaf(get(&f, "conv_transpose.x"));
    let y = layer.forward(&x).unwrap();
    assert_close(
        "conv_transpose out",
        &y,
        get(&f, "conv_transpose.out"),
        1e-5,
    );
    let gx = grad_of(&y, get(&f, "conv_transpose.probe"), &x);
    assert_close(
        "conv_transpose grad x",
        &gx,
        get(&f, "conv_transpose.grad_x"),
        1e-4,
    );
    let gw = layer.weight.grad().unwrap();
    assert_close(
        "conv_transpose grad weight",
        &gw,
        get(&f, "conv_transpose.grad_weight"),
        1e-4,
    );
    let gb = layer.bias.as_ref().unwrap().grad().unwrap();
    assert_close(
        "conv_transpose grad bias",
        &gb,
        get(&f, "conv_transpose.grad_bias"),
        1e-4,
    );
}

#[test]
fn adam_and_rmsprop_take_torchs_steps() {
    use rusting_brain::optim::{Adam, AdamConfig, Optimizer, Rmsprop, RmspropConfig};
    let f = fixtures();
    let start = get(&f, "optim.start");
    let grads = get(&f, "optim.grads");
    let run = |name: &str, make: &dyn Fn(Tensor) -> Box<dyn Optimizer>| {
        let p = leaf(start);
        let mut opt = make(p.clone());
        for i in 0..grads.shape()[0] {
            p.set_grad(Some(
                grads
                    .narrow(0, i, 1)
                    .unwrap()
                    .squeeze(0)
                    .unwrap()
                    .contiguous_copy()
                    .unwrap(),
            ));
            opt.step().unwrap();
        }
        assert_close(name, &p, get(&f, &format!("optim.{name}.final")), 1e-6);
    };
    run("adam", &|p| {
        let c = AdamConfig {
            lr: 0.01,
            weight_decay: 0.1,
            ..Default::default()
        };
        Box::new(Adam::new(vec![p], c).unwrap())
    });
    run("rmsprop", &|p| {
        let c = RmspropConfig {
            lr: 0.01,
            ..Default::default()
        };
        Box::new(Rmsprop::new(vec![p], c).unwrap())
    });
    run("rmsprop_centered", &|p| {
        let c = RmspropConfig {
            lr: 0.01,
            alpha: 0.9,
            weight_decay: 0.1,
            momentum: 0.5,
            centered: true,
            ..Default::default()
        };
        Box::new(Rmsprop::new(vec![p], c).unwrap())
    });
}

fn recurrent(f: &BTreeMap<String, Tensor>, case: &str, config: RecurrentConfig) -> Recurrent {
    let m = Recurrent::new(config, &mut Generator::new(0)).unwrap();
    m.load_state_dict(&state(f, case), true).unwrap();
    m
}

#[test]
fn lstm_with_variable_lengths_matches_torchs_packed_sequences() {
    let f = fixtures();
    let config = RecurrentConfig {
        cell: Cell::Lstm,
        input_size: 5,
        hidden_size: 4,
        layers: 2,
        bias: true,
        bidirectional: true,
        batch_first: true,
    };
    let lstm = recurrent(&f, "lstm", config);
    let x = leaf(get(&f, "lstm.x"));
    let lengths: Vec<usize> = get(&f, "lstm.lengths")
        .to_vec::<i64>()
        .unwrap()
        .iter()
        .map(|&n| n as usize)
        .collect();
    let out = lstm.run(&x, None, None, Some(&lengths)).unwrap();
    assert_close("lstm out", &out.output, get(&f, "lstm.out"), 1e-5);
    assert_close("lstm h", &out.h, get(&f, "lstm.h"), 1e-5);
    assert_close("lstm c", out.c.as_ref().unwrap(), get(&f, "lstm.c"), 1e-5);
    let gx = grad_of(&out.output, get(&f, "lstm.probe"), &x);
    assert_close("lstm grad x", &gx, get(&f, "lstm.grad_x"), 1e-5);
}

#[test]
fn gru_matches_torch_with_gradients() {
    let f = fixtures();
    let config = RecurrentConfig {
        cell: Cell::Gru { reset_after: true },
        input_size: 5,
        hidden_size: 3,
        layers: 1,
        bias: true,
        bidirectional: false,
        batch_first: false,
    };
    let gru = recurrent(&f, "gru", config);
    let x = leaf(get(&f, "gru.x"));
    let out = gru.run(&x, None, None, None).unwrap();
    assert_close("gru out", &out.output, get(&f, "gru.out"), 1e-5);
    assert_close("gru h", &out.h, get(&f, "gru.h"), 1e-5);
    let gx = grad_of(&out.output, get(&f, "gru.probe"), &x);
    assert_close("gru grad x", &gx, get(&f, "gru.grad_x"), 1e-5);
    let w = gru
        .named_parameters()
        .into_iter()
        .find(|(n, _)| n == "weight_hh_l0")
        .unwrap()
        .1;
    assert_close(
        "gru grad weight_hh",
        &w.grad().unwrap(),
        get(&f, "gru.grad_weight_hh"),
        1e-5,
    );
    assert!(
        gru.title().starts_with("GRU(5, 3, num_layers=1"),
        "{}",
        gru.title()
    );
}

/// leaky_relu, elu, selu, celu, hardtanh, relu6, hardsigmoid, hardswish, softsign and
/// log_sigmoid as layers (with torch's parameters where the fixture sets them), over inputs past
/// every joint: torch's values and gradients.
#[test]
fn the_activations_match_torch_with_gradients() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/layers/activations.safetensors");
    let f = rusting_brain::io::safetensors::load(path).expect("the activation fixtures");
    let cases = [
        ("leaky_relu", Activation::LeakyRelu(0.2)),
        ("elu", Activation::Elu(0.7)),
        ("selu", Activation::Selu),
        ("celu", Activation::Celu(1.5)),
        ("hardtanh", Activation::Hardtanh(-2.0, 3.0)),
        ("relu6", Activation::Relu6),
        ("hardsigmoid", Activation::Hardsigmoid),
        ("hardswish", Activation::Hardswish),
        ("softsign", Activation::Softsign),
        ("log_sigmoid", Activation::LogSigmoid),
    ];
    for (name, act) in cases {
        let x = leaf(get(&f, "input"));
        let y = act.module().forward(&x).unwrap();
        assert_close(name, &y, get(&f, &format!("{name}.out")), 1e-6);
        let g = grad_of(&y, get(&f, "probe"), &x);
        assert_close(
            &format!("{name} grad"),
            &g,
            get(&f, &format!("{name}.grad")),
            1e-6,
        );
    }
}

/// PReLU with a slope per channel: torch's values, and the gradients of the input and of the
/// slopes (loaded by torch's name, `weight`).
#[test]
fn prelu_matches_torch_with_gradients() {
    let f = fixtures();
    let prelu = PRelu::new(4, 0.25).unwrap();
    let weights: BTreeMap<String, Tensor> =
        [("weight".to_string(), get(&f, "prelu.weight").clone())].into();
    prelu.load_state_dict(&weights, true).unwrap();
    let x = leaf(get(&f, "prelu.x"));
    let y = prelu.forward(&x).unwrap();
    assert_close("prelu out", &y, get(&f, "prelu.out"), 1e-6);
    let gx = grad_of(&y, get(&f, "prelu.probe"), &x);
    assert_close("prelu grad x", &gx, get(&f, "prelu.grad_x"), 1e-6);
    let gw = prelu.weight.grad().expect("the slopes' gradient");
    assert_close("prelu grad weight", &gw, get(&f, "prelu.grad_weight"), 1e-5);
}

/// nn.Softmax(dim=1) and nn.LogSoftmax(dim=1) as layers, values and gradients.
#[test]
fn softmax_layers_match_torch_with_gradients() {
    let f = fixtures();
    for (name, layer) in [
        ("softmax", Softmax::new(1)),
        ("log_softmax", Softmax::log(1)),
    ] {
        let x = leaf(get(&f, &format!("{name}.x")));
        let y = layer.forward(&x).unwrap();
        assert_close(name, &y, get(&f, &format!("{name}.out")), 1e-6);
        let g = grad_of(&y, get(&f, &format!("{name}.probe")), &x);
        assert_close(
            &format!("{name} grad"),
            &g,
            get(&f, &format!("{name}.grad_x")),
            1e-6,
        );
    }
}
