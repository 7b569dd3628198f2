//! Forward values of the ops against direct computations, and their errors on bad input.

use rusting_brain::{
    cross_entropy, Conv2dOptions, CrossEntropyOptions, DType, Device, Error, Generator, Tensor,
};

fn t(values: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_f64s(values, shape, DType::F32).unwrap()
}

fn randn(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(shape, dtype, Some(&mut Generator::new(seed))).unwrap()
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {i}: {x} vs {y}"
        );
    }
}

fn naive_matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    out
}

#[test]
fn matmul_of_odd_sized_and_transposed_operands_matches_a_naive_product() {
    for &(m, k, n) in &[(1, 1, 1), (7, 33, 5), (65, 17, 129)] {
        let a = randn(&[m, k], 1, DType::F32);
        let bt = randn(&[n, k], 2, DType::F32);
        let b = bt.t().unwrap();
        let got = a.matmul(&b).unwrap().to_vec_f64().unwrap();
        let want = naive_matmul(&a.to_vec_f64().unwrap(), &b.to_vec_f64().unwrap(), m, k, n);
        close(&got, &want, 1e-4);
    }
}

#[test]
fn batched_matmul_broadcasts_batch_dims() {
    let a = randn(&[2, 1, 3, 4], 3, DType::F64);
    let b = randn(&[5, 4, 2], 4, DType::F64);
    let out = a.matmul(&b).unwrap();
    assert_eq!(out.shape(), &[2, 5, 3, 2]);
    let want = naive_matmul(
        &a.narrow(0, 1, 1).unwrap().to_vec_f64().unwrap(),
        &b.narrow(0, 3, 1).unwrap().to_vec_f64().unwrap(),
        3,
        4,
        2,
    );
    close(
        &out.narrow(0, 1, 1)
            .unwrap()
            .narrow(1, 3, 1)
            .unwrap()
            .to_vec_f64()
            .unwrap(),
        &want,
        1e-12,
    );
}

/// Every rank case of torch.matmul: a 1-D operand gains a dim for the product and loses it
/// after (1-D · 1-D is a 0-d dot product), a 2-D one multiplies each of the other's matrices,
/// and batch dims broadcast. Each result is checked against the product of 2-D matrices.
#[test]
fn matmul_follows_torchs_rank_rules() {
    let (m, k, n) = (3, 4, 2);
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[k], &[k], &[]),
        (&[k], &[k, n], &[n]),
        (&[m, k], &[k], &[m]),
        (&[m, k], &[k, n], &[m, n]),
        (&[k], &[5, k, n], &[5, n]),
        (&[5, m, k], &[k], &[5, m]),
        (&[5, m, k], &[k, n], &[5, m, n]),
        (&[2, 1, m, k], &[5, k, n], &[2, 5, m, n]),
    ];
    for (i, &(sa, sb, want_shape)) in cases.iter().enumerate() {
        let a = randn(sa, 10 + i as u64, DType::F64);
        let b = randn(sb, 20 + i as u64, DType::F64);
        let out = a
            .matmul(&b)
            .unwrap_or_else(|e| panic!("{sa:?} · {sb:?}: {e}"));
        assert_eq!(out.shape(), want_shape, "{sa:?} · {sb:?}");
        // The same product with both operands made at least 2-D, then the added dims dropped.
        let a2 = if sa.len() == 1 {
            a.unsqueeze(0).unwrap()
        } else {
            a.clone()
        };
        let b2 = if sb.len() == 1 {
            b.unsqueeze(1).unwrap()
        } else {
            b.clone()
        };
        let want = a2.matmul(&b2).unwrap().to_vec_f64().unwrap();
        close(&out.to_vec_f64().unwrap(), &want, 1e-12);
    }
    let err = randn(&[3], 1, DType::F64)
        .matmul(&randn(&[4], 2, DType::F64))
        .unwrap_err()
        .to_string();
    assert!(err.contains("[3]") && err.contains("[4]"), "{err}");
}

/// A cast to a wider dtype allocates a new buffer, checked first: an expanded view of one
/// element cast to f64 would need 8 TB, and is an out-of-memory error naming the op and dtype.
#[test]
fn a_cast_too_large_for_memory_is_an_error() {
    let view = Tensor::ones(&[1], DType::F32, rusting_brain::Device::Cpu)
        .unwrap()
        .expand(&[1_000_000, 1_000_000])
        .unwrap();
    let err = view.to_dtype(DType::F64).unwrap_err().to_string();
    assert!(
        err.contains("to_dtype") && err.contains("f64") && err.contains("out of memory"),
        "{err}"
    );
}

#[test]
fn bf16_matmul_stays_within_bf16_rounding_of_f32() {
    let a = randn(&[16, 64], 5, DType::F32);
    let b = randn(&[64, 8], 6, DType::F32);
    let want = a.matmul(&b).unwrap().to_vec_f64().unwrap();
    let got = a
        .to_dtype(DType::BF16)
        .unwrap()
        .matmul(&b.to_dtype(DType::BF16).unwrap())
        .unwrap();
    assert_eq!(got.dtype(), DType::BF16);
    let got = got.to_vec_f64().unwrap();
    let max_err = got
        .iter()
        .zip(&want)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(max_err < 0.25, "max error {max_err}");
}

#[test]
fn matmul_with_mismatched_inner_dims_names_both_shapes() {
    let err = randn(&[2, 3], 1, DType::F32)
        .matmul(&randn(&[4, 2], 2, DType::F32))
        .unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "matmul", lhs, rhs } if lhs == &[2, 3] && rhs == &[4, 2]),
        "{err}"
    );
}

/// Windows that tile the input (stride = kernel: a patch embedding) run as one product over the
/// patches; the result equals the direct sum, with the bias, and leaves out the rows and
/// columns no window reaches.
#[test]
fn conv2d_with_windows_that_tile_the_input_matches_a_direct_convolution() {
    let (n, c, h, w, o, kh, kw) = (2, 3, 7, 10, 5, 2, 3);
    let opts = Conv2dOptions {
        stride: (kh, kw),
        padding: (0, 0),
        dilation: (1, 1),
        groups: 1,
    };
    let x = randn(&[n, c, h, w], 17, DType::F64);
    let k = randn(&[o, c, kh, kw], 18, DType::F64);
    let bias = randn(&[o], 19, DType::F64);
    let out = x.conv2d(&k, Some(&bias), opts).unwrap();
    let (ho, wo) = (h / kh, w / kw);
    assert_eq!(out.shape(), [n, o, ho, wo]);
    let (xv, kv, bv, ov) = (
        x.to_vec_f64().unwrap(),
        k.to_vec_f64().unwrap(),
        bias.to_vec_f64().unwrap(),
        out.to_vec_f64().unwrap(),
    );
    for b in 0..n {
        for oc in 0..o {
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut s = bv[oc];
                    for ci in 0..c {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let xi = ((b * c + ci) * h + oy * kh + ky) * w + ox * kw + kx;
                                s += xv[xi] * kv[((oc * c + ci) * kh + ky) * kw + kx];
                            }
                        }
                    }
                    let got = ov[((b * o + oc) * ho + oy) * wo + ox];
                    assert!(
                        (got - s).abs() < 1e-12,
                        "[{b}, {oc}, {oy}, {ox}]: {got} vs {s}"
                    );
                }
            }
        }
    }
}

#[test]
fn conv2d_matches_a_direct_convolution_with_stride_padding_dilation_and_groups() {
    let (n, c, h, w, o, kh, kw) = (2, 4, 6, 5, 6, 3, 2);
    let opts = Conv2dOptions {
        stride: (2, 1),
        padding: (1, 2),
        dilation: (2, 1),
        groups: 2,
    };
    let x = randn(&[n, c, h, w], 7, DType::F64);
    let k = randn(&[o, c / 2, kh, kw], 8, DType::F64);
    let out = x.conv2d(&k, None, opts).unwrap();
    let (ho, wo) = (out.shape()[2], out.shape()[3]);
    assert_eq!(
        (ho, wo),
        ((h + 2 - 2 * (kh - 1) - 1) / 2 + 1, w + 4 - kw + 1)
    );
    let (xv, kv, ov) = (
        x.to_vec_f64().unwrap(),
        k.to_vec_f64().unwrap(),
        out.to_vec_f64().unwrap(),
    );
    let (cg, og) = (c / 2, o / 2);
    for b in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut s = 0.0;
                    for ci in 0..cg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let y = (oy * 2 + ky * 2) as isize - 1;
                                let xx = (ox + kx) as isize - 2;
                                if y >= 0 && (y as usize) < h && xx >= 0 && (xx as usize) < w {
                                    let xi =
                                        ((b * c + g * cg + ci) * h + y as usize) * w + xx as usize;
                                    s += xv[xi] * kv[((oc * cg + ci) * kh + ky) * kw + kx];
                                }
                            }
                        }
                    }
                    let got = ov[((b * o + oc) * ho + oy) * wo + ox];
                    assert!(
                        (got - s).abs() < 1e-10,
                        "({b},{oc},{oy},{ox}): {got} vs {s}"
                    );
                }
            }
        }
    }
}

#[test]
fn binary_ops_broadcast_and_promote_like_pytorch() {
    let a = Tensor::from_vec(vec![1i64, 2, 3], &[3, 1]).unwrap();
    let b = t(&[0.5, 1.5], &[2]);
    let s = a.add(&b).unwrap();
    assert_eq!((s.shape(), s.dtype()), (&[3usize, 2][..], DType::F32));
    assert_eq!(
        s.to_vec::<f32>().unwrap(),
        vec![1.5, 2.5, 2.5, 3.5, 3.5, 4.5]
    );
    let q = Tensor::from_vec(vec![1i64, 2], &[2])
        .unwrap()
        .div(&Tensor::from_vec(vec![2i64, 2], &[2]).unwrap())
        .unwrap();
    assert_eq!(
        (q.dtype(), q.to_vec::<f32>().unwrap()),
        (DType::F32, vec![0.5, 1.0])
    );
    let bf = t(&[1.0], &[1])
        .to_dtype(DType::BF16)
        .unwrap()
        .mul_scalar(2.0)
        .unwrap();
    assert_eq!(bf.dtype(), DType::BF16);
    let err = t(&[1.0, 2.0], &[2])
        .add(&t(&[1.0, 2.0, 3.0], &[3]))
        .unwrap_err();
    assert!(
        matches!(err, Error::BroadcastMismatch { op: "add", .. }),
        "{err}"
    );
}

#[test]
fn comparisons_return_bool_tensors() {
    let c = t(&[1.0, 2.0, 3.0], &[3]).gt_scalar(1.5).unwrap();
    assert_eq!(c.dtype(), DType::Bool);
    assert_eq!(c.to_vec::<bool>().unwrap(), vec![false, true, true]);
}

#[test]
fn reductions_over_dims_of_a_permuted_view() {
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).t().unwrap();
    assert_eq!(
        x.sum_dims(&[1], false).unwrap().to_vec::<f32>().unwrap(),
        vec![5.0, 7.0, 9.0]
    );
    assert_eq!(x.max_dims(&[0], true).unwrap().shape(), &[1, 2]);
    assert_eq!(
        x.argmax(Some(0), false).unwrap().to_vec::<i64>().unwrap(),
        vec![2, 2]
    );
    assert_eq!(x.argmin(None, false).unwrap().item().unwrap(), 0.0);
    close(
        &x.var_dims(&[0], true, false).unwrap().to_vec_f64().unwrap(),
        &[1.0, 1.0],
        1e-6,
    );
    let sum_i = Tensor::from_vec(vec![true, true, false], &[3])
        .unwrap()
        .sum()
        .unwrap();
    assert_eq!((sum_i.dtype(), sum_i.item().unwrap()), (DType::I64, 2.0));
}

#[test]
fn logsumexp_and_softmax_are_stable_for_large_and_infinite_values() {
    let x = t(&[1000.0, 1000.0, f64::NEG_INFINITY], &[3]);
    close(
        &x.logsumexp(&[0], false).unwrap().to_vec_f64().unwrap(),
        &[1000.0 + 2f64.ln()],
        1e-6,
    );
    close(
        &x.softmax(0).unwrap().to_vec_f64().unwrap(),
        &[0.5, 0.5, 0.0],
        1e-6,
    );
    let neg = t(&[f64::NEG_INFINITY, f64::NEG_INFINITY], &[2]);
    assert_eq!(
        neg.logsumexp(&[0], false).unwrap().item().unwrap(),
        f64::NEG_INFINITY
    );
}

#[test]
fn cross_entropy_matches_the_formula_with_ignore_index_and_label_smoothing() {
    let logits = t(&[2.0, 0.5, -1.0, 0.1, 0.2, 0.3, 1.0, 1.0, 1.0], &[3, 3]);
    let targets = Tensor::from_vec(vec![0i64, -100, 2], &[3]).unwrap();
    let rows = logits.to_vec_f64().unwrap();
    let lse = |r: &[f64]| r.iter().map(|v| v.exp()).sum::<f64>().ln();
    let nll0 = lse(&rows[0..3]) - 2.0;
    let nll2 = lse(&rows[6..9]) - 1.0;
    let plain = cross_entropy(&logits, &targets, CrossEntropyOptions::default())
        .unwrap()
        .item()
        .unwrap();
    close(&[plain], &[(nll0 + nll2) / 2.0], 1e-6);
    let eps = 0.2;
    let smooth = |r: &[f64], nll: f64| {
        (1.0 - eps) * nll + eps * r.iter().map(|v| lse(r) - v).sum::<f64>() / 3.0
    };
    let opts = CrossEntropyOptions {
        label_smoothing: eps,
        ..Default::default()
    };
    let got = cross_entropy(&logits, &targets, opts)
        .unwrap()
        .item()
        .unwrap();
    close(
        &[got],
        &[(smooth(&rows[0..3], nll0) + smooth(&rows[6..9], nll2)) / 2.0],
        1e-6,
    );
    let bad = Tensor::from_vec(vec![0i64, 3, 1], &[3]).unwrap();
    assert!(matches!(
        cross_entropy(&logits, &bad, CrossEntropyOptions::default()),
        Err(Error::IndexOutOfRange { index: 3, .. })
    ));
}

#[test]
fn indexing_ops_pick_the_right_values_and_reject_bad_indices() {
    let x = t(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
    let idx = Tensor::from_vec(vec![2i64, 0], &[2]).unwrap();
    assert_eq!(
        x.index_select(0, &idx).unwrap().to_vec::<f32>().unwrap(),
        vec![4.0, 5.0, 0.0, 1.0]
    );
    let g = Tensor::from_vec(vec![1i64, 0, 0], &[3, 1]).unwrap();
    assert_eq!(
        x.gather(1, &g).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 4.0]
    );
    let bad = Tensor::from_vec(vec![3i64], &[1]).unwrap();
    assert!(matches!(
        x.index_select(0, &bad),
        Err(Error::IndexOutOfRange {
            index: 3,
            size: 3,
            ..
        })
    ));
    let parts = Tensor::cat(&[x.clone(), x.clone()], 1).unwrap();
    assert_eq!(parts.shape(), &[3, 4]);
    assert_eq!(
        parts
            .split(3, 1)
            .unwrap()
            .iter()
            .map(|p| p.shape()[1])
            .collect::<Vec<_>>(),
        vec![3, 1]
    );
    assert_eq!(
        Tensor::stack(&[x.clone(), x], 0).unwrap().shape(),
        &[2, 3, 2]
    );
}

#[test]
fn pooling_and_upsampling_produce_the_expected_values() {
    let x = t(&(0..16).map(f64::from).collect::<Vec<_>>(), &[1, 1, 4, 4]);
    assert_eq!(
        x.max_pool2d((2, 2), (2, 2), (0, 0))
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![5.0, 7.0, 13.0, 15.0]
    );
    assert_eq!(
        x.avg_pool2d((2, 2), (2, 2), (0, 0))
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![2.5, 4.5, 10.5, 12.5]
    );
    let u = t(&[1.0, 2.0], &[1, 1, 1, 2])
        .upsample_nearest2d(2, 2)
        .unwrap();
    assert_eq!(
        u.to_vec::<f32>().unwrap(),
        vec![1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]
    );
}

#[test]
fn views_share_storage_and_reshape_of_a_transpose_copies() {
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    assert!(x.narrow(1, 1, 2).unwrap().shares_storage(&x));
    assert!(x.reshape(&[3, -1]).unwrap().shares_storage(&x));
    let tr = x.t().unwrap();
    assert!(tr.shares_storage(&x) && !tr.is_contiguous());
    let r = tr.reshape(&[6]).unwrap();
    assert!(!r.shares_storage(&x));
    assert_eq!(
        r.to_vec::<f32>().unwrap(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    assert!(x.reshape(&[4, -1]).is_err());
}

#[test]
fn casts_between_all_dtypes_round_trip_small_integers() {
    let x = t(&[0.0, 1.0, 2.0, 100.0], &[4]);
    for d in DType::ALL {
        if d == DType::Bool {
            continue;
        }
        let back = x.to_dtype(d).unwrap().to_dtype(DType::F32).unwrap();
        assert_eq!(
            back.to_vec::<f32>().unwrap(),
            vec![0.0, 1.0, 2.0, 100.0],
            "{d}"
        );
    }
    assert_eq!(
        x.to_dtype(DType::Bool).unwrap().to_vec::<bool>().unwrap(),
        vec![false, true, true, true]
    );
}

#[test]
fn seeded_random_constructors_repeat_and_arange_linspace_count_right() {
    let a = Tensor::randn(&[5], DType::F32, Some(&mut Generator::new(3))).unwrap();
    let b = Tensor::randn(&[5], DType::F32, Some(&mut Generator::new(3))).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    assert_eq!(
        Tensor::arange(0.0, 1.0, 0.25, DType::F32).unwrap().numel(),
        4
    );
    assert_eq!(
        Tensor::linspace(0.0, 1.0, 5, DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        vec![0.0, 0.25, 0.5, 0.75, 1.0]
    );
    let r = Tensor::randint(0, 3, &[100], Some(&mut Generator::new(1)))
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    assert!(r.iter().all(|&v| (0..3).contains(&v)));
}

#[test]
fn dim_arguments_on_a_0d_tensor_are_errors_not_panics() {
    let s = t(&[1.0, 2.0], &[2]).sum().unwrap();
    assert!(matches!(s.squeeze(0), Err(Error::DimOutOfRange { .. })));
    assert!(s.transpose(0, 0).is_err());
    assert!(Tensor::cat(&[s.clone(), s.clone()], 0).is_err());
    assert!(s.mean_dims(&[0], false).is_err());
    assert!(s.narrow(0, 0, 1).is_err());
    assert_eq!(s.unsqueeze(0).unwrap().shape(), &[1]);
    assert_eq!(s.softmax(0).unwrap().item().unwrap(), 1.0);
}

#[test]
fn bad_kernels_and_writes_into_broadcast_views_are_errors() {
    let x = t(&[1.0; 4], &[1, 1, 2, 2]);
    assert!(x
        .conv2d(&t(&[], &[1, 1, 0, 1]), None, Conv2dOptions::default())
        .is_err());
    let row = t(&[1.0, 2.0], &[1, 2]);
    assert!(row
        .expand(&[3, 2])
        .unwrap()
        .copy_(&t(&[0.0; 6], &[3, 2]))
        .is_err());
}

#[test]
fn softmax_of_a_narrowed_view_uses_the_view_not_the_storage() {
    let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 6.0], &[3, 2]).unwrap();
    let y = x
        .narrow(0, 1, 2)
        .unwrap()
        .softmax(-1)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    let e = 1.0f32 / (1.0 + 1.0f32.exp());
    let e2 = 1.0f32 / (1.0 + 2.0f32.exp());
    let want = [e, 1.0 - e, e2, 1.0 - e2];
    assert!(
        y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
        "{y:?}"
    );
}

#[test]
fn sums_over_nothing_are_zero_and_means_are_nan_as_in_pytorch() {
    let empty = Tensor::zeros(&[0, 3], DType::F32, Device::Cpu).unwrap();
    assert_eq!(empty.sum().unwrap().item().unwrap(), 0.0);
    assert!(empty.mean().unwrap().item().unwrap().is_nan());
    // Over the empty dim every kept position sums nothing; over the other, nothing is kept.
    let cols = empty.sum_dims(&[0], false).unwrap();
    assert_eq!(cols.to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(empty.sum_dims(&[1], true).unwrap().shape(), &[0, 1]);
    let means = empty.mean_dims(&[0], true).unwrap();
    assert_eq!(means.shape(), &[1, 3]);
    assert!(means.to_vec::<f32>().unwrap().iter().all(|m| m.is_nan()));
    let ints = Tensor::from_vec(Vec::<i64>::new(), &[0])
        .unwrap()
        .sum()
        .unwrap();
    assert_eq!((ints.dtype(), ints.item().unwrap()), (DType::I64, 0.0));
}

#[test]
fn a_tensor_larger_than_memory_is_an_error_naming_op_shape_and_bytes() {
    let e = Tensor::zeros(&[100_000, 100_000, 100_000], DType::F32, Device::Cpu).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("zeros: out of memory"), "{msg}");
    assert!(msg.contains("[100000, 100000, 100000]"), "{msg}");
    assert!(msg.contains("4000000000000000 bytes"), "{msg}");
    // Sizes that only grow inside an op: a broadcast and an expanded view made contiguous.
    let col = Tensor::zeros(&[1_000_000, 1], DType::F32, Device::Cpu).unwrap();
    let row = Tensor::zeros(&[1, 1_000_000], DType::F32, Device::Cpu).unwrap();
    let msg = col.add(&row).unwrap_err().to_string();
    assert!(msg.starts_with("add: out of memory"), "{msg}");
    let msg = col.matmul(&row).unwrap_err().to_string();
    assert!(msg.starts_with("matmul: out of memory"), "{msg}");
    let wide = col.expand(&[1_000_000, 1_000_000]).unwrap();
    let msg = wide.contiguous().unwrap_err().to_string();
    assert!(msg.starts_with("contiguous: out of memory"), "{msg}");
}

#[test]
fn index_copy_writes_slices_in_place_and_refuses_a_misshaped_source() {
    let x = Tensor::zeros(&[3, 2], DType::F32, Device::Cpu).unwrap();
    let idx = Tensor::from_vec(vec![2i64, 0], &[2]).unwrap();
    x.index_copy_(0, &idx, &t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]))
        .unwrap();
    assert_eq!(
        x.to_vec::<f32>().unwrap(),
        vec![3.0, 4.0, 0.0, 0.0, 1.0, 2.0]
    );
    let wrong = x.index_copy_(0, &idx, &t(&[1.0, 2.0], &[1, 2]));
    assert!(wrong
        .unwrap_err()
        .to_string()
        .contains("source of shape [2, 2]"));
    let bad = Tensor::from_vec(vec![3i64], &[1]).unwrap();
    assert!(matches!(
        x.index_copy_(0, &bad, &t(&[1.0, 2.0], &[1, 2])),
        Err(Error::IndexOutOfRange { index: 3, .. })
    ));
}

/// Class probabilities as targets (mixup's soft labels): one-hot rows give the loss of the
/// class ids, label smoothing included; a mixed row gives -sum(p · log_softmax(x)).
#[test]
fn cross_entropy_against_class_probabilities_matches_pytorch() {
    use rusting_brain::{cross_entropy, CrossEntropyOptions};
    let logits = randn(&[4, 3], 31, DType::F64);
    let ids = Tensor::from_vec(vec![0i64, 2, 1, 2], &[4]).unwrap();
    let one_hot = rusting_brain::data::scaling::one_hot(&ids, 3)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    for smoothing in [0.0, 0.1] {
        let opts = CrossEntropyOptions {
            label_smoothing: smoothing,
            ..Default::default()
        };
        let a = cross_entropy(&logits, &ids, opts).unwrap().item().unwrap();
        let b = cross_entropy(&logits, &one_hot, opts)
            .unwrap()
            .item()
            .unwrap();
        assert!((a - b).abs() < 1e-12, "smoothing {smoothing}: {a} vs {b}");
    }
    let p = Tensor::from_vec(vec![0.25f64, 0.75, 0.0], &[1, 3]).unwrap();
    let x = logits.narrow(0, 0, 1).unwrap();
    let xv = x.to_vec_f64().unwrap();
    let lse = xv.iter().map(|v| v.exp()).sum::<f64>().ln();
    let want = -(0.25 * (xv[0] - lse) + 0.75 * (xv[1] - lse));
    let got = cross_entropy(&x, &p, Default::default())
        .unwrap()
        .item()
        .unwrap();
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    let wrong = Tensor::zeros(&[4, 2], DType::F64, rusting_brain::Device::Cpu).unwrap();
    assert!(cross_entropy(&logits, &wrong, Default::default()).is_err());
}
