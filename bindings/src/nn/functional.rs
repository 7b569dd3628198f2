//! `nn::` functions over tensors: convolution, pooling, upsampling, normalization and the losses.

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Map, INT};
use rusting_brain::{
    Conv2dOptions, ConvTranspose2dOptions, CrossEntropyOptions, Reduction, Tensor,
};

/// The `reduction` option ("mean" when absent).
fn reduction(r: Option<String>) -> RhaiResult<Reduction> {
    match r {
        None => Ok(Reduction::Mean),
        Some(r) => Reduction::parse(&r).ok_or_else(|| {
            crate::error::runtime_error(format!(
                "reduction must be \"mean\", \"sum\" or \"none\", got \"{r}\""
            ))
        }),
    }
}

crate::options! {
    struct Conv2dOpts {
        stride: (usize, usize) = (1, 1),
        padding: (usize, usize) = (0, 0),
        dilation: (usize, usize) = (1, 1),
        groups: usize = 1,
    }
}

fn conv2d(x: Tensor, w: Tensor, bias: Option<Tensor>, opts: Map) -> RhaiResult<Tensor> {
    let o = Conv2dOpts::parse("nn::conv2d", opts)?;
    let c = Conv2dOptions {
        stride: o.stride,
        padding: o.padding,
        dilation: o.dilation,
        groups: o.groups,
    };
    guard(|| x.conv2d(&w, bias.as_ref(), c))
}

crate::options! {
    /// The options of a transposed convolution, as torch.nn.ConvTranspose2d names them.
    struct ConvTransposeOpts {
        stride: (usize, usize) = (1, 1),
        padding: (usize, usize) = (0, 0),
        output_padding: (usize, usize) = (0, 0),
        dilation: (usize, usize) = (1, 1),
        groups: usize = 1,
    }
}

fn conv_transpose2d(x: Tensor, w: Tensor, bias: Option<Tensor>, opts: Map) -> RhaiResult<Tensor> {
    let o = ConvTransposeOpts::parse("nn::conv_transpose2d", opts)?;
    let c = ConvTranspose2dOptions {
        stride: o.stride,
        padding: o.padding,
        output_padding: o.output_padding,
        dilation: o.dilation,
        groups: o.groups,
    };
    guard(|| x.conv_transpose2d(&w, bias.as_ref(), c))
}

crate::options! {
    struct PoolOpts {
        kernel: (usize, usize) = (2, 2),
        stride: (usize, usize) = kernel,
        padding: (usize, usize) = (0, 0),
    }
}

fn pool(x: Tensor, opts: Map, what: &str, max: bool) -> RhaiResult<Tensor> {
    let PoolOpts {
        kernel,
        stride,
        padding,
    } = PoolOpts::parse(what, opts)?;
    guard(|| {
        if max {
            x.max_pool2d(kernel, stride, padding)
        } else {
            x.avg_pool2d(kernel, stride, padding)
        }
    })
}

crate::options! {
    struct CrossEntropyOpts {
        ignore_index: INT = -100,
        label_smoothing: f64 = 0.0,
        reduction: String,
    }
}

/// cross_entropy's options, for `what` (which names the function in errors).
fn ce_options(what: &str, opts: Map) -> RhaiResult<CrossEntropyOptions> {
    let o = CrossEntropyOpts::parse(what, opts)?;
    Ok(CrossEntropyOptions {
        ignore_index: Some(o.ignore_index),
        label_smoothing: o.label_smoothing,
        reduction: reduction(o.reduction)?,
    })
}

fn cross_entropy(logits: Tensor, targets: Tensor, opts: Map) -> RhaiResult<Tensor> {
    let c = ce_options("nn::cross_entropy", opts)?;
    guard(|| rusting_brain::cross_entropy(&logits, &targets, c))
}

/// A weight or bias argument: a tensor, or () for none.
fn optional_tensor(v: rhai::Dynamic, what: &str) -> RhaiResult<Option<Tensor>> {
    if v.is_unit() {
        return Ok(None);
    }
    v.try_cast::<Tensor>().map(Some).ok_or_else(|| {
        crate::error::runtime_error(format!("{what}: weight and bias must be tensors or ()"))
    })
}

crate::options! {
    struct LayerNormOpts {
        eps: f64 = 1e-5,
    }
}

fn layer_norm(x: Tensor, w: rhai::Dynamic, b: rhai::Dynamic, opts: Map) -> RhaiResult<Tensor> {
    let eps = LayerNormOpts::parse("nn::layer_norm", opts)?.eps;
    let (w, b) = (
        optional_tensor(w, "nn::layer_norm")?,
        optional_tensor(b, "nn::layer_norm")?,
    );
    guard(|| x.layer_norm(w.as_ref(), b.as_ref(), eps))
}

fn group_norm(
    x: Tensor,
    groups: INT,
    w: rhai::Dynamic,
    b: rhai::Dynamic,
    opts: Map,
) -> RhaiResult<Tensor> {
    const WHAT: &str = "nn::group_norm";
    let eps = LayerNormOpts::parse(WHAT, opts)?.eps;
    let groups = crate::convert::usize_of(groups, WHAT)?;
    let (w, b) = (optional_tensor(w, WHAT)?, optional_tensor(b, WHAT)?);
    guard(|| x.group_norm(groups, w.as_ref(), b.as_ref(), eps))
}

crate::options! {
    struct BatchNormOpts {
        training: bool = false,
        momentum: f64 = 0.1,
        eps: f64 = 1e-5,
        silu: bool = false,
    }
}

/// torch.nn.functional.batch_norm: running statistics, weight and bias may each be ().
fn batch_norm(x: Tensor, stats: [rhai::Dynamic; 4], opts: Map) -> RhaiResult<Tensor> {
    const WHAT: &str = "nn::batch_norm";
    let BatchNormOpts {
        training,
        momentum,
        eps,
        silu,
    } = BatchNormOpts::parse(WHAT, opts)?;
    let norm = if silu {
        Tensor::batch_norm_silu
    } else {
        Tensor::batch_norm
    };
    let [rm, rv, w, b] = stats.map(|v| optional_tensor(v, WHAT));
    let (rm, rv, w, b) = (rm?, rv?, w?, b?);
    let running = match (&rm, &rv) {
        (Some(m), Some(v)) => Some((m, v)),
        (None, None) => None,
        _ => {
            return Err(crate::error::runtime_error(format!(
                "{WHAT}: give both running_mean and running_var, or neither"
            )))
        }
    };
    guard(|| norm(&x, running, w.as_ref(), b.as_ref(), training, momentum, eps))
}

crate::options! {
    struct RmsNormOpts {
        eps: f64 = 1e-6,
    }
}

fn rms_norm(x: Tensor, w: rhai::Dynamic, opts: Map) -> RhaiResult<Tensor> {
    let eps = RmsNormOpts::parse("nn::rms_norm", opts)?.eps;
    let w = optional_tensor(w, "nn::rms_norm")?;
    guard(|| x.rms_norm(w.as_ref(), eps))
}

crate::options! {
    struct AttentionOpts {
        causal: bool = false,
        scale: f64,
    }
}

fn attention(q: Tensor, k: Tensor, v: Tensor, opts: Map) -> RhaiResult<Tensor> {
    let o = AttentionOpts::parse("nn::scaled_dot_product_attention", opts)?;
    let opts = rusting_brain::AttentionOptions {
        causal: o.causal,
        scale: o.scale,
    };
    guard(|| q.scaled_dot_product_attention(&k, &v, opts))
}

fn linear_cross_entropy(h: Tensor, w: Tensor, t: Tensor, opts: Map) -> RhaiResult<Tensor> {
    let c = ce_options("nn::linear_cross_entropy", opts)?;
    guard(|| rusting_brain::linear_cross_entropy(&h, &w, &t, c))
}

crate::options! {
    struct LossOpts {
        reduction: String,
    }
}

crate::options! {
    struct HuberOpts {
        reduction: String,
        delta: f64 = 1.0,
    }
}

fn simple_loss(pred: Tensor, target: Tensor, opts: Map, what: &'static str) -> RhaiResult<Tensor> {
    if what == "nn::huber_loss" {
        let o = HuberOpts::parse(what, opts)?;
        let (r, delta) = (reduction(o.reduction)?, o.delta);
        return guard(|| rusting_brain::huber_loss(&pred, &target, delta, r));
    }
    let r = reduction(LossOpts::parse(what, opts)?.reduction)?;
    match what {
        "nn::mse_loss" => guard(|| rusting_brain::mse_loss(&pred, &target, r)),
        _ => guard(|| rusting_brain::bce_with_logits(&pred, &target, r)),
    }
}

pub fn register(api: &mut Api) {
    api.func(
        "conv2d",
        "nn::conv2d(x, weight) -> Tensor",
        "2-D convolution of [N, C, H, W] by [O, C/groups, kh, kw].",
        "let x = randn([1, 3, 8, 8]); let w = randn([4, 3, 3, 3]); nn::conv2d(x, w)",
        |x: Tensor, w: Tensor| conv2d(x, w, None, Map::new()),
    );
    api.func(
        "conv2d",
        "nn::conv2d(x, weight, bias, #{ stride, padding, dilation, groups }) -> Tensor",
        "2-D convolution with a bias [O] (or ()) and options; sizes are ints or [h, w].",
        "let x = randn([1, 3, 8, 8]); let w = randn([4, 3, 3, 3]); let b = zeros([4]); nn::conv2d(x, w, b, #{ stride: 2, padding: 1 })",
        |x: Tensor, w: Tensor, b: rhai::Dynamic, o: Map| conv2d(x, w, b.try_cast::<Tensor>(), o),
    );
    api.func(
        "conv_transpose2d",
        "nn::conv_transpose2d(x, weight) -> Tensor",
        "Transposed 2-D convolution of [N, Cin, H, W] by [Cin, Cout/groups, kh, kw] (torch.nn.functional.conv_transpose2d).",
        "let x = randn([1, 4, 5, 5]); let w = randn([4, 2, 3, 3]); nn::conv_transpose2d(x, w).shape",
        |x: Tensor, w: Tensor| conv_transpose2d(x, w, None, Map::new()),
    );
    api.func(
        "conv_transpose2d",
        "nn::conv_transpose2d(x, weight, bias, #{ stride, padding, output_padding, dilation, groups }) -> Tensor",
        "Transposed convolution with a bias [Cout] (or ()) and options: the output side is (H - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1.",
        "let x = randn([1, 4, 5, 5]); let w = randn([4, 2, 3, 3]); nn::conv_transpose2d(x, w, (), #{ stride: 2, padding: 1, output_padding: 1 }).shape",
        |x: Tensor, w: Tensor, b: rhai::Dynamic, o: Map| conv_transpose2d(x, w, b.try_cast::<Tensor>(), o),
    );
    api.func(
        "max_pool2d",
        "nn::max_pool2d(x, #{ kernel, stride, padding }) -> Tensor",
        "2-D max pooling; stride defaults to the kernel.",
        "let x = randn([1, 2, 4, 4]); nn::max_pool2d(x, #{ kernel: 2 })",
        |x: Tensor, o: Map| pool(x, o, "nn::max_pool2d", true),
    );
    api.func(
        "avg_pool2d",
        "nn::avg_pool2d(x, #{ kernel, stride, padding }) -> Tensor",
        "2-D average pooling (padding counts in the divisor).",
        "let x = randn([1, 2, 4, 4]); nn::avg_pool2d(x, #{ kernel: 2 })",
        |x: Tensor, o: Map| pool(x, o, "nn::avg_pool2d", false),
    );
    api.func(
        "upsample_nearest2d",
        "nn::upsample_nearest2d(x, scale) -> Tensor",
        "Nearest-neighbour upsampling of [N, C, H, W] by an integer factor.",
        "let x = randn([1, 2, 4, 4]); nn::upsample_nearest2d(x, 2)",
        |x: Tensor, s: INT| {
            let s = crate::convert::usize_of(s, "nn::upsample_nearest2d")?;
            guard(|| x.upsample_nearest2d(s, s))
        },
    );
    api.func(
        "layer_norm",
        "nn::layer_norm(x, weight, bias[, #{ eps }]) -> Tensor",
        "LayerNorm over the trailing dims of weight's shape (the last dim when weight and bias are ()); eps defaults to 1e-5.",
        "let x = randn([2, 4]); let w = ones([4]); let b = zeros([4]); nn::layer_norm(x, w, b)",
        |x: Tensor, w: rhai::Dynamic, b: rhai::Dynamic| layer_norm(x, w, b, Map::new()),
    );
    api.func(
        "layer_norm",
        "nn::layer_norm(x, weight, bias, #{ eps }) -> Tensor",
        "LayerNorm with options; weight and bias may be ().",
        "let x = randn([2, 4]); nn::layer_norm(x, (), (), #{ eps: 1e-6 })",
        layer_norm,
    );
    api.func(
        "group_norm",
        "nn::group_norm(x, groups, weight, bias[, #{ eps }]) -> Tensor",
        "GroupNorm of [N, C, ...]: the channels in groups, each normalized over its channels and positions, then the per-channel weight and bias [C] (either may be ()); as torch.nn.functional.group_norm.",
        "let x = randn([2, 8, 4, 4]); nn::group_norm(x, 2, ones([8]), zeros([8]))",
        |x: Tensor, g: INT, w: rhai::Dynamic, b: rhai::Dynamic| group_norm(x, g, w, b, Map::new()),
    );
    api.func(
        "group_norm",
        "nn::group_norm(x, groups, weight, bias, #{ eps }) -> Tensor",
        "GroupNorm with options.",
        "let x = randn([2, 8, 5]); nn::group_norm(x, 4, (), (), #{ eps: 1e-6 })",
        group_norm,
    );
    api.func(
        "batch_norm",
        "nn::batch_norm(x, running_mean, running_var, weight, bias[, #{ training, momentum, eps }]) -> Tensor",
        "BatchNorm over the channels (dim 1) of [N, C, ...]. training (default false) normalizes with the batch's statistics and updates the running ones in place (momentum 0.1); eval uses the running ones. Any of the four [C] tensors may be (); eps defaults to 1e-5.",
        "let x = randn([4, 3, 5, 5]); let m = zeros([3]); let v = ones([3]); nn::batch_norm(x, m, v, (), (), #{ training: true })",
        |x: Tensor, rm: rhai::Dynamic, rv: rhai::Dynamic, w: rhai::Dynamic, b: rhai::Dynamic| {
            batch_norm(x, [rm, rv, w, b], Map::new())
        },
    );
    api.func(
        "batch_norm",
        "nn::batch_norm(x, running_mean, running_var, weight, bias, #{ training, momentum, eps, silu }) -> Tensor",
        "BatchNorm with options; silu: true applies SiLU after it in the same pass (a convolution block's norm and activation).",
        "let x = randn([4, 3]); nn::batch_norm(x, (), (), (), (), #{ training: true, eps: 1e-3 })",
        |x: Tensor, rm: rhai::Dynamic, rv: rhai::Dynamic, w: rhai::Dynamic, b: rhai::Dynamic, o: Map| {
            batch_norm(x, [rm, rv, w, b], o)
        },
    );
    api.func(
        "rms_norm",
        "nn::rms_norm(x, weight[, #{ eps }]) -> Tensor",
        "RMSNorm over the trailing dims of weight's shape (the last dim when weight is ()); eps defaults to 1e-6.",
        "let x = randn([2, 4]); let w = ones([4]); nn::rms_norm(x, w)",
        |x: Tensor, w: rhai::Dynamic| rms_norm(x, w, Map::new()),
    );
    api.func(
        "rms_norm",
        "nn::rms_norm(x, weight, #{ eps }) -> Tensor",
        "RMSNorm with options; weight may be ().",
        "let x = randn([2, 4]); let w = ones([4]); nn::rms_norm(x, w, #{ eps: 1e-5 })",
        rms_norm,
    );
    api.func(
        "scaled_dot_product_attention",
        "nn::scaled_dot_product_attention(q, k, v[, #{ causal, scale }]) -> Tensor",
        "softmax(q k^T * scale) v for q [B, H, T, hd] and k, v [B, KV, S, hd] (H a multiple of KV); scale defaults to 1/sqrt(hd); causal lets query i see keys up to i + S - T. Fused on CUDA for bf16/f16 with hd 64 or 128.",
        "let q = randn([1, 2, 4, 8]); let k = randn([1, 2, 4, 8]); let v = randn([1, 2, 4, 8]); nn::scaled_dot_product_attention(q, k, v, #{ causal: true })",
        |q: Tensor, k: Tensor, v: Tensor| attention(q, k, v, Map::new()),
    );
    api.func(
        "scaled_dot_product_attention",
        "nn::scaled_dot_product_attention(q, k, v, #{ causal, scale }) -> Tensor",
        "Attention with options: causal (default false), scale (default 1/sqrt(head_dim)).",
        "let q = randn([1, 4, 4, 8]); let k = randn([1, 2, 4, 8]); let v = randn([1, 2, 4, 8]); nn::scaled_dot_product_attention(q, k, v, #{ causal: true, scale: 0.125 })",
        attention,
    );
    api.func(
        "rotary_embedding",
        "nn::rotary_embedding(x, cos, sin) -> Tensor",
        "Rotary position embedding in the rotate-half layout: x * cos + rotate_half(x) * sin over the last dim (even), rotate_half([a, b]) = [-b, a]; cos and sin broadcast against x, e.g. [seq, dim].",
        "let q = randn([1, 2, 4, 8]); let cos = ones([4, 8]); let sin = zeros([4, 8]); nn::rotary_embedding(q, cos, sin)",
        |x: Tensor, c: Tensor, s: Tensor| guard(|| x.rotary_embedding(&c, &s)),
    );
    api.func(
        "cross_entropy",
        "nn::cross_entropy(logits, targets) -> Tensor",
        "Mean cross-entropy of logits [N, C] against class ids [N], or against class probabilities [N, C] (float; mixup and cutmix labels), as PyTorch.",
        "let logits = randn([4, 3]); let y = tensor([0, 2, 1, 0]); nn::cross_entropy(logits, y)",
        |l: Tensor, t: Tensor| cross_entropy(l, t, Map::new()),
    );
    api.func("cross_entropy", "nn::cross_entropy(logits, targets, #{ ignore_index, label_smoothing, reduction }) -> Tensor", "Cross-entropy with options (ignore_index defaults to -100).", "let logits = randn([4, 3]); let y = tensor([0, 2, 1, -100]); nn::cross_entropy(logits, y, #{ label_smoothing: 0.1 })", cross_entropy);
    api.func(
        "linear_cross_entropy",
        "nn::linear_cross_entropy(hidden, weight, targets[, #{ ignore_index, label_smoothing, reduction }]) -> Tensor",
        "Cross-entropy of hidden [..., d] x weight [classes, d]^T against targets (hidden's leading dims): a model's head and loss in one op; on CUDA in bf16 the logits exist a chunk of rows at a time.",
        "let h = randn([4, 8]); let model_weight = randn([10, 8]); let y = tensor([1, 2, 3, 4]); nn::linear_cross_entropy(h, model_weight, y)",
        |h: Tensor, w: Tensor, t: Tensor| linear_cross_entropy(h, w, t, Map::new()),
    );
    api.func(
        "linear_cross_entropy",
        "nn::linear_cross_entropy(hidden, weight, targets, #{ ignore_index, label_smoothing, reduction }) -> Tensor",
        "linear_cross_entropy with cross_entropy's options.",
        "let h = randn([4, 8]); let w = randn([10, 8]); let y = tensor([1, 2, 3, 4]); nn::linear_cross_entropy(h, w, y, #{ label_smoothing: 0.1 })",
        linear_cross_entropy,
    );
    for (name, sig, doc, ex) in [
        (
            "mse_loss",
            "nn::mse_loss(pred, target[, #{ reduction }]) -> Tensor",
            "Mean squared error.",
            "let pred = randn([4]); let y = randn([4]); nn::mse_loss(pred, y)",
        ),
        (
            "bce_with_logits",
            "nn::bce_with_logits(logits, targets[, #{ reduction }]) -> Tensor",
            "Binary cross-entropy on logits, in the stable form.",
            "let z = randn([4]); let y = tensor([0.0, 1.0, 1.0, 0.0]); nn::bce_with_logits(z, y)",
        ),
        (
            "huber_loss",
            "nn::huber_loss(pred, target[, #{ delta, reduction }]) -> Tensor",
            "Quadratic below delta (default 1), linear above.",
            "let pred = randn([4]); let y = randn([4]); nn::huber_loss(pred, y, #{ delta: 0.5 })",
        ),
    ] {
        let q: &'static str = match name {
            "mse_loss" => "nn::mse_loss",
            "bce_with_logits" => "nn::bce_with_logits",
            _ => "nn::huber_loss",
        };
        api.func(name, sig, doc, ex, move |p: Tensor, t: Tensor| {
            simple_loss(p, t, Map::new(), q)
        });
        api.func(name, sig, doc, ex, move |p: Tensor, t: Tensor, o: Map| {
            simple_loss(p, t, o, q)
        });
    }
    api.func(
        "relu",
        "nn::relu(x) -> Tensor",
        "max(x, 0).",
        "let x = randn([3]); nn::relu(x)",
        |x: Tensor| guard(|| x.relu()),
    );
    api.func(
        "softmax",
        "nn::softmax(x, dim) -> Tensor",
        "Softmax along dim.",
        "let logits = randn([2, 5]); nn::softmax(logits, -1)",
        |x: Tensor, d: INT| guard(|| x.softmax(d as isize)),
    );
}
