//! Every differentiable op in the op table has a finite-difference gradient check here. The
//! table walk fails when an op is added to `OPS` without a case below.

use rusting_brain::gradcheck::{gradcheck, GradcheckOptions};
use rusting_brain::ops::table::OPS;
use rusting_brain::{
    bce_with_logits, cross_entropy, huber_loss, mse_loss, Conv2dOptions, CrossEntropyOptions,
    DType, Device, Generator, Reduction, Result, Tensor,
};

type OpFn = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;

struct Case {
    inputs: Vec<Tensor>,
    f: OpFn,
    opts: GradcheckOptions,
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F64, Some(&mut Generator::new(seed))).unwrap()
}

/// Values kept away from zero, for log, sqrt, division.
fn positive(shape: &[usize], seed: u64) -> Tensor {
    randn(shape, seed).abs().unwrap().affine(1.0, 0.5).unwrap()
}

fn idx(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

fn case(inputs: Vec<Tensor>, f: impl Fn(&[Tensor]) -> Result<Tensor> + 'static) -> Option<Case> {
    Some(Case {
        inputs,
        f: Box::new(f),
        opts: GradcheckOptions::default(),
    })
}

fn unary(f: impl Fn(&Tensor) -> Result<Tensor> + 'static) -> Option<Case> {
    case(vec![randn(&[3, 5], 1)], move |x| f(&x[0]))
}

fn binary(f: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + 'static) -> Option<Case> {
    // Broadcasting on both sides: [3, 1, 4] with [5, 1].
    case(vec![randn(&[3, 1, 4], 2), positive(&[5, 1], 3)], move |x| {
        f(&x[0], &x[1])
    })
}

fn gradcheck_case(name: &str) -> Option<Case> {
    match name {
        "neg" => unary(|x| x.neg()),
        "abs" => unary(|x| x.abs()),
        "exp" => unary(|x| x.exp()),
        "log" => case(vec![positive(&[4, 3], 4)], |x| x[0].log()),
        "sqrt" => case(vec![positive(&[4, 3], 5)], |x| x[0].sqrt()),
        "rsqrt" => case(vec![positive(&[4, 3], 6)], |x| x[0].rsqrt()),
        "sin" => unary(|x| x.sin()),
        "cos" => unary(|x| x.cos()),
        "atan" => unary(|x| x.atan()),
        "tanh" => unary(|x| x.tanh()),
        "sigmoid" => unary(|x| x.sigmoid()),
        "relu" => unary(|x| x.relu()),
        "gelu" => unary(|x| x.gelu()),
        "gelu_tanh" => unary(|x| x.gelu_tanh()),
        "quick_gelu" => unary(|x| x.quick_gelu()),
        "silu" => unary(|x| x.silu()),
        "softplus" => unary(|x| x.softplus()),
        "mish" => unary(|x| x.mish()),
        "leaky_relu" => unary(|x| x.leaky_relu(0.1)),
        "elu" => unary(|x| x.elu(0.7)),
        "selu" => unary(|x| x.selu()),
        "celu" => unary(|x| x.celu(1.5)),
        // Scaled so that elements fall on both sides of each bound, none at one.
        "hardtanh" => unary(|x| x.hardtanh(-0.5, 0.7)),
        "relu6" => unary(|x| x.mul_scalar(4.0)?.relu6()),
        "hardsigmoid" => unary(|x| x.mul_scalar(2.5)?.hardsigmoid()),
        "hardswish" => unary(|x| x.mul_scalar(2.5)?.hardswish()),
        "softsign" => unary(|x| x.softsign()),
        "log_sigmoid" => unary(|x| x.log_sigmoid()),
        "swiglu" => case(vec![randn(&[3, 5], 69), randn(&[3, 5], 70)], |x| {
            x[0].swiglu(&x[1])
        }),
        "sign" => unary(|x| x.sign()?.mul(x)),
        "erf" => unary(|x| x.erf()),
        // Rounding is flat almost everywhere: its zero gradient times x, as sign's above.
        "floor" => unary(|x| x.floor()?.mul(x)),
        "ceil" => unary(|x| x.ceil()?.mul(x)),
        "round" => unary(|x| x.round()?.mul(x)),
        "pow" => case(vec![positive(&[4, 3], 7)], |x| x[0].pow_scalar(2.5)),
        "clamp" => unary(|x| x.clamp(-0.5, 0.7)),
        "affine" => unary(|x| x.affine(-2.0, 1.0)),
        "add" => binary(|a, b| a.add(b)),
        "sub" => binary(|a, b| a.sub(b)),
        "mul" => binary(|a, b| a.mul(b)),
        "div" => binary(|a, b| a.div(b)),
        "maximum" => binary(|a, b| a.maximum(b)),
        "minimum" => binary(|a, b| a.minimum(b)),
        "where" => {
            let cond = randn(&[3, 4], 8).gt_scalar(0.0).unwrap();
            case(vec![randn(&[3, 4], 9), randn(&[4], 10)], move |x| {
                Tensor::where_cond(&cond, &x[0], &x[1])
            })
        }
        "masked_fill" => {
            let mask = randn(&[3, 4], 11).gt_scalar(0.0).unwrap();
            case(vec![randn(&[3, 4], 12)], move |x| {
                x[0].masked_fill(&mask, 2.0)
            })
        }
        "sum" => case(vec![randn(&[2, 3, 4], 13)], |x| {
            x[0].sum_dims(&[0, 2], false)?.mul(&x[0].sum()?)
        }),
        "mean" => case(vec![randn(&[2, 3, 4], 14)], |x| x[0].mean_dims(&[1], true)),
        "max" => case(vec![randn(&[3, 5], 15)], |x| {
            x[0].max_dims(&[1], false)?.add(&x[0].max()?)
        }),
        "min" => case(vec![randn(&[3, 5], 16)], |x| x[0].min_dims(&[0], true)),
        "var" => case(vec![randn(&[3, 5], 17)], |x| {
            x[0].var_dims(&[1], true, false)
        }),
        "logsumexp" => case(vec![randn(&[3, 5], 18)], |x| x[0].logsumexp(&[-1], false)),
        "softmax" => case(vec![randn(&[3, 5], 19)], |x| {
            x[0].softmax(0)?.mul(&x[0].softmax(-1)?)
        }),
        "log_softmax" => case(vec![randn(&[3, 5], 20)], |x| x[0].log_softmax(1)),
        "reshape" => case(vec![randn(&[3, 4], 21)], |x| x[0].t()?.reshape(&[-1, 2])),
        "permute" => case(vec![randn(&[2, 3, 4], 22)], |x| {
            x[0].permute(&[2, 0, 1])?.exp()
        }),
        "transpose" => case(vec![randn(&[2, 3], 23)], |x| {
            x[0].transpose(0, 1)?.matmul(&x[0])
        }),
        "narrow" => case(vec![randn(&[4, 5], 24)], |x| x[0].narrow(1, 1, 3)?.exp()),
        "expand" => case(vec![randn(&[3, 1], 25)], |x| {
            x[0].expand(&[2, 3, 4])?.mul(&randn(&[2, 3, 4], 26))
        }),
        "squeeze" => case(vec![randn(&[3, 1, 2], 27)], |x| x[0].squeeze(1)?.exp()),
        "unsqueeze" => case(vec![randn(&[3, 2], 28)], |x| x[0].unsqueeze(0)?.exp()),
        "contiguous" => case(vec![randn(&[3, 4], 29)], |x| x[0].t()?.contiguous()?.exp()),
        "to_dtype" => Some(Case {
            inputs: vec![randn(&[3, 4], 30)],
            f: Box::new(|x| x[0].to_dtype(DType::F32)?.exp()?.to_dtype(DType::F64)),
            opts: GradcheckOptions {
                eps: 1e-3,
                atol: 1e-4,
                rtol: 1e-2,
            },
        }),
        "cat" => case(vec![randn(&[2, 3], 31), randn(&[2, 2], 32)], |x| {
            Tensor::cat(&[x[0].clone(), x[1].exp()?], 1)
        }),
        "stack" => case(vec![randn(&[2, 3], 33), randn(&[2, 3], 34)], |x| {
            Tensor::stack(&[x[0].clone(), x[1].clone()], 1)
        }),
        "split" => case(vec![randn(&[5, 2], 35)], |x| {
            let parts = x[0].split(2, 0)?;
            parts[0].mul(&parts[1])?.sum()?.add(&parts[2].sum()?)
        }),
        "chunk" => case(vec![randn(&[2, 6], 36)], |x| {
            let parts = x[0].chunk(3, 1)?;
            parts[0].mul(&parts[2])
        }),
        "index_select" => case(vec![randn(&[4, 3], 37)], |x| {
            x[0].index_select(0, &idx(&[2, 0, 2], &[3]))
        }),
        // Random values have no ties, so the order is constant near the point.
        "sort" => case(vec![randn(&[3, 5], 71)], |x| Ok(x[0].sort(-1, true)?.0)),
        "topk" => case(vec![randn(&[4, 6], 72)], |x| Ok(x[0].topk(3, 0, false)?.0)),
        "gather" => case(vec![randn(&[3, 4], 38)], |x| {
            x[0].gather(1, &idx(&[0, 3, 3, 1, 2, 0], &[3, 2]))
        }),
        "scatter_add" => case(vec![randn(&[3, 4], 39), randn(&[2, 4], 40)], |x| {
            x[0].scatter_add(0, &idx(&[2, 0, 1, 2, 2, 2, 0, 1], &[2, 4]), &x[1])
        }),
        // A batch letter, a summed one and one each side keeps, over three operands.
        "einsum" => case(
            vec![
                randn(&[2, 3, 4], 91),
                randn(&[2, 4, 5], 92),
                randn(&[5], 93),
            ],
            |x| Tensor::einsum("bij,bjk,k->bi", x),
        ),
        "matmul" => case(
            vec![
                randn(&[2, 1, 3, 4], 41),
                randn(&[5, 4, 2], 42),
                randn(&[4], 43),
            ],
            |x| x[0].matmul(&x[1])?.sum()?.add(&x[0].matmul(&x[2])?.sum()?),
        ),
        // Rows in groups of 2, 0 and 3, each group times its own weight; a weighted sum, so each
        // output's gradient differs.
        "grouped_matmul" => case(vec![randn(&[5, 3], 91), randn(&[3, 2, 3], 92)], |x| {
            let offsets = idx(&[0, 2, 2, 5], &[4]);
            x[0].grouped_matmul(&x[1], &offsets)?
                .mul(&randn(&[5, 2], 93))?
                .sum()
        }),
        // The general convolution, and one whose windows tile the input (a patch embedding,
        // run as a product over the patches).
        "conv2d" => case(
            vec![
                randn(&[2, 4, 5, 6], 44),
                randn(&[6, 2, 3, 2], 45),
                randn(&[6], 46),
                randn(&[2, 3, 5, 7], 144),
                randn(&[4, 3, 2, 3], 145),
                randn(&[4], 146),
            ],
            |x| {
                let opts = Conv2dOptions {
                    stride: (2, 1),
                    padding: (1, 1),
                    dilation: (1, 2),
                    groups: 2,
                };
                let patches = Conv2dOptions {
                    stride: (2, 3),
                    ..Default::default()
                };
                let general = x[0].conv2d(&x[1], Some(&x[2]), opts)?.sum()?;
                general.add(&x[3].conv2d(&x[4], Some(&x[5]), patches)?.square()?.sum()?)
            },
        ),
        "max_pool2d" => case(vec![randn(&[1, 2, 5, 5], 47)], |x| {
            x[0].max_pool2d((2, 2), (2, 2), (1, 1))
        }),
        "avg_pool2d" => case(vec![randn(&[1, 2, 5, 5], 48)], |x| {
            x[0].avg_pool2d((3, 3), (2, 2), (1, 1))
        }),
        "upsample_nearest2d" => case(vec![randn(&[1, 2, 2, 3], 49)], |x| {
            x[0].upsample_nearest2d(2, 3)
        }),
        "cross_entropy" => case(vec![randn(&[5, 4], 50), randn(&[2, 3, 4], 51)], |x| {
            let opts = CrossEntropyOptions {
                label_smoothing: 0.1,
                ..Default::default()
            };
            let flat = cross_entropy(&x[0], &idx(&[3, -100, 0, 1, 3], &[5]), opts)?;
            let spatial = cross_entropy(
                &x[1],
                &idx(&[0, 2, 1, 1, 0, 2, 2, 1], &[2, 4]),
                CrossEntropyOptions::default(),
            )?;
            flat.add(&spatial)
        }),
        "linear_cross_entropy" => case(vec![randn(&[2, 3, 4], 71), randn(&[5, 4], 72)], |x| {
            let opts = CrossEntropyOptions {
                label_smoothing: 0.1,
                ..Default::default()
            };
            let t = idx(&[3, -100, 0, 1, 4, 2], &[2, 3]);
            rusting_brain::linear_cross_entropy(&x[0], &x[1], &t, opts)
        }),
        "layer_norm" => case(
            vec![
                randn(&[3, 2, 4], 58),
                randn(&[2, 4], 59),
                randn(&[2, 4], 60),
            ],
            |x| {
                // Over two trailing dims with weight and bias, and over the last dim without.
                let affine = x[0].layer_norm(Some(&x[1]), Some(&x[2]), 1e-5)?;
                affine.add(&x[0].layer_norm(None, None, 1e-5)?.mul(&x[0])?)
            },
        ),
        "batch_norm" => case(
            vec![randn(&[3, 2, 2, 3], 63), randn(&[2], 64), randn(&[2], 65)],
            |x| {
                // Training (through the batch statistics, the running ones fresh each call so
                // the finite differences see the same op), and eval with fixed statistics.
                let c = x[0].shape()[1];
                let (rm, rv) = (
                    Tensor::zeros(&[c], DType::F64, Device::Cpu)?,
                    Tensor::ones(&[c], DType::F64, Device::Cpu)?,
                );
                let train =
                    x[0].batch_norm(Some((&rm, &rv)), Some(&x[1]), Some(&x[2]), true, 0.1, 1e-5)?;
                let (m, v) = (
                    Tensor::from_vec(vec![0.3f64, -0.2], &[2])?,
                    Tensor::from_vec(vec![0.8f64, 1.7], &[2])?,
                );
                let eval = x[0].batch_norm(Some((&m, &v)), Some(&x[1]), None, false, 0.1, 1e-5)?;
                // With SiLU fused, training and eval.
                let silu = x[0].batch_norm_silu(None, Some(&x[1]), Some(&x[2]), true, 0.1, 1e-5)?;
                let silu_eval =
                    x[0].batch_norm_silu(Some((&m, &v)), None, Some(&x[2]), false, 0.1, 1e-5)?;
                let relu = x[0].batch_norm_act(
                    None,
                    Some(&x[1]),
                    Some(&x[2]),
                    true,
                    0.1,
                    1e-5,
                    rusting_brain::backend::spec::NormAct::Relu,
                )?;
                train
                    .add(&eval.mul(&x[0])?)?
                    .add(&silu.mul(&x[0])?)?
                    .add(&silu_eval)?
                    .add(&relu.mul(&x[0])?)
            },
        ),
        "rms_norm" => case(vec![randn(&[4, 5], 61), randn(&[5], 62)], |x| {
            x[0].rms_norm(Some(&x[1]), 1e-6)?
                .add(&x[0].rms_norm(None, 1e-6)?.mul(&x[0])?)
        }),
        "scaled_dot_product_attention" => case(
            vec![
                randn(&[1, 2, 3, 4], 63),
                randn(&[1, 1, 5, 4], 64),
                randn(&[1, 1, 5, 4], 65),
            ],
            |x| {
                // Grouped heads, causal with more keys than queries.
                let opts = rusting_brain::AttentionOptions {
                    causal: true,
                    scale: Some(0.7),
                };
                x[0].scaled_dot_product_attention(&x[1], &x[2], opts)
            },
        ),
        "rotary_embedding" => case(
            vec![
                randn(&[2, 3, 4, 6], 66),
                randn(&[4, 6], 67),
                randn(&[2, 1, 4, 6], 68),
            ],
            // Gradients reach x and both tables (a per-row sin, a shared cos).
            |x| x[0].rotary_embedding(&x[1], &x[2]),
        ),
        "bce_with_logits" => case(vec![randn(&[3, 4], 52)], |x| {
            bce_with_logits(&x[0], &randn(&[3, 4], 53).sigmoid()?, Reduction::Mean)
        }),
        "mse_loss" => case(vec![randn(&[3, 4], 54)], |x| {
            mse_loss(&x[0], &randn(&[3, 4], 55), Reduction::Sum)
        }),
        "huber_loss" => case(vec![randn(&[3, 4], 56)], |x| {
            huber_loss(&x[0], &randn(&[3, 4], 57), 0.5, Reduction::Mean)
        }),
        "std" => unary(|x| x.std_dims(&[1], true, false)),
        "conv_transpose2d" => case(
            vec![
                randn(&[2, 4, 3, 4], 84),
                randn(&[4, 3, 3, 2], 85),
                randn(&[6], 86),
            ],
            |x| {
                let opts = rusting_brain::ConvTranspose2dOptions {
                    stride: (2, 1),
                    padding: (1, 0),
                    output_padding: (1, 0),
                    dilation: (1, 2),
                    groups: 2,
                };
                x[0].conv_transpose2d(&x[1], Some(&x[2]), opts)
            },
        ),
        "group_norm" => case(
            vec![randn(&[2, 6, 3], 81), randn(&[6], 82), randn(&[6], 83)],
            |x| {
                // Three groups of two channels with weight and bias, and two without.
                let affine = x[0].group_norm(3, Some(&x[1]), Some(&x[2]), 1e-5)?;
                affine.add(&x[0].group_norm(2, None, None, 1e-5)?.mul(&x[0])?)
            },
        ),
        "norm" => unary(|x| {
            // The 2-norm of rows, the 3-norm of everything and the largest magnitude of columns.
            let rows = x.norm_dims(2.0, &[-1], false)?.sum()?;
            let p3 = x.norm_dims(3.0, &[], false)?;
            let inf = x.norm_dims(f64::INFINITY, &[0], false)?.sum()?;
            rows.add(&p3)?.add(&inf)
        }),
        "cumsum" => unary(|x| x.cumsum(1)?.mul(&x.cumsum(0)?)),
        "cumprod" => case(vec![positive(&[3, 6], 80)], |x| x[0].cumprod(-1)),
        "masked_select" => unary(|x| x.masked_select(&x.gt_scalar(0.0)?)),
        "flip" => unary(|x| x.flip(&[0, 1])?.mul(x)),
        "roll" => unary(|x| x.roll(2, 1)?.mul(x)),
        "repeat_interleave" => unary(|x| x.repeat_interleave(3, 1)?.square()),
        "pad" => unary(|x| {
            use rusting_brain::ops::rearrange::PadMode;
            let reflect = x.pad(&[2, 1], PadMode::Reflect)?.sum()?;
            let constant = x
                .pad(&[1, 1, 1, 0], PadMode::Constant(0.5))?
                .square()?
                .sum()?;
            let circular = x.pad(&[3, 0], PadMode::Circular)?.square()?.sum()?;
            reflect.add(&constant)?.add(&circular)
        }),
        _ => None,
    }
}

#[test]
fn every_differentiable_op_in_the_table_has_a_gradcheck_case() {
    let missing: Vec<&str> = OPS
        .iter()
        .filter(|o| o.differentiable && gradcheck_case(o.name).is_none())
        .map(|o| o.name)
        .collect();
    assert!(
        missing.is_empty(),
        "ops without a gradcheck case: {missing:?}"
    );
}

#[test]
fn every_differentiable_op_passes_gradcheck() {
    let mut failures = Vec::new();
    for op in OPS.iter().filter(|o| o.differentiable) {
        let Some(c) = gradcheck_case(op.name) else {
            continue;
        };
        if let Err(e) = gradcheck(&c.f, &c.inputs, c.opts) {
            failures.push(format!("{}: {e}", op.name));
        }
    }
    assert!(
        failures.is_empty(),
        "gradcheck failures:\n{}",
        failures.join("\n")
    );
}
