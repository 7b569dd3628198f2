//! The fused training products' pieces on CUDA: SwiGLU reading the two halves of one gate/up
//! product in place equals SwiGLU of contiguous copies bit for bit, forward and backward; the
//! residual add fused into the next norm equals the two ops apart.

use rusting_brain::{backend::cuda, DType, Tensor};

fn bits(t: &Tensor) -> Vec<u32> {
    let v = t.to_dtype(DType::F32).unwrap().to_vec_f32().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn swiglu_of_the_halves_of_one_product_equals_swiglu_of_copies() {
    let Some(dev) = cuda::device_for_test("swiglu_of_the_halves_of_one_product") else {
        return;
    };
    // 64 columns: 16-byte groups; 61: one element at a time.
    for (rows, f) in [(2 * 37, 64), (5, 61)] {
        for dtype in [DType::BF16, DType::F32] {
            let gu = Tensor::randn(&[rows, 2 * f], DType::F32, None).unwrap();
            let gu = gu.to_device(dev).unwrap().to_dtype(dtype).unwrap();
            let probe = Tensor::randn(&[rows, f], DType::F32, None).unwrap();
            let probe = probe.to_device(dev).unwrap().to_dtype(dtype).unwrap();

            let packed = gu.detach().requires_grad_().unwrap();
            let halves = packed.split_with_sizes(&[f, f], -1).unwrap();
            let y = halves[0].swiglu(&halves[1]).unwrap();
            y.mul(&probe).unwrap().sum().unwrap().backward().unwrap();

            let gate = gu.narrow(1, 0, f).unwrap().contiguous().unwrap();
            let up = gu.narrow(1, f, f).unwrap().contiguous().unwrap();
            let (gate, up) = (gate.requires_grad_().unwrap(), up.requires_grad_().unwrap());
            let want = gate.swiglu(&up).unwrap();
            want.mul(&probe).unwrap().sum().unwrap().backward().unwrap();

            assert_eq!(bits(&y), bits(&want), "values, [{rows}, {f}] {dtype:?}");
            let joined = Tensor::cat(&[gate.grad().unwrap(), up.grad().unwrap()], 1).unwrap();
            let got = packed.grad().unwrap();
            assert_eq!(
                bits(&got),
                bits(&joined),
                "gradient, [{rows}, {f}] {dtype:?}"
            );
        }
    }
}

/// The residual add fused into the next norm (F32 stream, BF16 layer output, BF16 normed
/// output, as a mixed-precision layer has them) equals the add and then the norm bit for bit:
/// the values, and the gradients of the stream, the output and the norm weight, with the sum
/// used downstream (its gradient summed in the kernel) and without.
#[test]
fn residual_add_fused_into_the_norm_equals_the_add_then_the_norm() {
    let Some(dev) = cuda::device_for_test("residual_add_fused_into_the_norm") else {
        return;
    };
    // 768 columns: 16-byte groups; 93: one element at a time.
    for (rows, cols) in [(3 * 129, 768), (7, 93)] {
        for sum_used in [true, false] {
            let randn = |shape: &[usize], dtype| {
                let t = Tensor::randn(shape, DType::F32, None).unwrap();
                t.to_device(dev).unwrap().to_dtype(dtype).unwrap()
            };
            let stream = randn(&[rows, cols], DType::F32);
            let output = randn(&[rows, cols], DType::BF16);
            let weight = randn(&[cols], DType::F32).add_scalar(1.0).unwrap();
            let probe_sum = randn(&[rows, cols], DType::F32);
            let probe_normed = randn(&[rows, cols], DType::BF16);
            let leaves =
                || [&stream, &output, &weight].map(|t| t.detach().requires_grad_().unwrap());
            let loss = |sum: &Tensor, normed: &Tensor| {
                let n = normed
                    .mul(&probe_normed)
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap();
                let mut l = n.sum().unwrap();
                if sum_used {
                    l = l.add(&sum.mul(&probe_sum).unwrap().sum().unwrap()).unwrap();
                }
                l.backward().unwrap();
            };

            let fused = leaves();
            let (sum, normed) = fused[0]
                .add_rms_norm_as(&fused[1], &fused[2], 1e-5, DType::BF16)
                .unwrap();
            loss(&sum, &normed);

            let apart = leaves();
            let want_sum = apart[0].add(&apart[1]).unwrap();
            let want_normed = want_sum
                .rms_norm_as(Some(&apart[2]), 1e-5, DType::BF16)
                .unwrap();
            loss(&want_sum, &want_normed);

            let case = format!("[{rows}, {cols}], sum used: {sum_used}");
            assert_eq!(normed.dtype(), DType::BF16, "{case}");
            assert_eq!(bits(&sum), bits(&want_sum), "sum, {case}");
            assert_eq!(bits(&normed), bits(&want_normed), "normed, {case}");
            for (i, name) in ["stream", "output", "weight"].iter().enumerate() {
                let (got, want) = (fused[i].grad().unwrap(), apart[i].grad().unwrap());
                assert_eq!(got.dtype(), want.dtype(), "{name}'s gradient dtype, {case}");
                assert_eq!(bits(&got), bits(&want), "{name}'s gradient, {case}");
            }
        }
    }
}

#[test]
fn an_f32_weight_under_autocast_gets_its_gradient_from_the_fp32_accumulator() {
    let Some(dev) = cuda::device_for_test("an_f32_weight_under_autocast_gets_its_gradient") else {
        return;
    };
    // y = x Wᵀ with BF16 operands; the sum's gradient to W is column sums of x (rounded to
    // BF16 as the product read it) over 1,000 rows. Written by the product in F32 they match
    // the same sums on the CPU to float precision; rounded to BF16 first they would be off
    // by up to 2^-9 relative.
    let (rows, k, n) = (1000, 64, 48);
    let x = Tensor::randn(&[rows, k], DType::F32, None).unwrap();
    let w = Tensor::randn(&[n, k], DType::F32, None).unwrap();
    let wd = w.to_device(dev).unwrap().requires_grad_().unwrap();
    rusting_brain::amp::autocast(Some(DType::BF16), || {
        let y = x.to_device(dev)?.matmul(&wd.t()?)?;
        assert_eq!(y.dtype(), DType::BF16);
        y.sum()?.backward()
    })
    .unwrap();
    let grad = wd.grad().unwrap();
    assert_eq!(grad.dtype(), DType::F32, "the weight's own dtype");
    let got = grad
        .to_device(rusting_brain::Device::Cpu)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    let col_sums = x
        .to_dtype(DType::BF16)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let col_sums = col_sums
        .sum_dims(&[0], false)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    for (i, g) in got.iter().enumerate() {
        let want = col_sums[i % k];
        assert!(
            (g - want).abs() <= 1e-5 * want.abs().max(1.0),
            "dW[{}, {}] = {g}, the FP32 sum is {want}",
            i / k,
            i % k
        );
    }
}

#[test]
fn rotary_qkv_equals_the_split_rotated_part_by_part_forward_and_backward() {
    let Some(dev) = cuda::device_for_test("rotary_qkv_equals_the_split_rotated_part_by_part")
    else {
        return;
    };
    // Grouped heads, three dtypes; head dim 12 in BF16 (halves of 6, not whole 16-byte words)
    // takes the composed backward, the others the one-pass kernel. Positions: one table for
    // every row, or a table per row.
    let cases = [
        (DType::BF16, 64, [4, 2, 2], false),
        (DType::F16, 32, [2, 2, 2], true),
        (DType::F32, 16, [3, 1, 1], false),
        (DType::BF16, 12, [2, 1, 1], false),
    ];
    for (dtype, hd, heads, per_row) in cases {
        let (b, t) = (2, 37);
        let sizes = heads.map(|h| h * hd);
        let n: usize = sizes.iter().sum();
        let randn = |shape: &[usize]| {
            let x = Tensor::randn(shape, DType::F32, None).unwrap();
            x.to_device(dev).unwrap().to_dtype(dtype).unwrap()
        };
        let proj = randn(&[b, t, n]);
        let table_shape: Vec<usize> = if per_row {
            vec![b, 1, t, hd]
        } else {
            vec![t, hd]
        };
        let angles = Tensor::randn(&table_shape, DType::F32, None).unwrap();
        let angles = angles.to_device(dev).unwrap();
        let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
        let probes = heads.map(|h| randn(&[b, h, t, hd]));

        let joined = proj.detach().requires_grad_().unwrap();
        let got = joined.rotary_qkv(sizes, hd, &cos, &sin).unwrap();
        let parts_in = proj.detach().requires_grad_().unwrap();
        let parts = parts_in.split_with_sizes(&sizes, -1).unwrap();
        let head_view = |p: &Tensor, h: usize| {
            p.reshape_to(&[b, t, h, hd])
                .unwrap()
                .transpose(1, 2)
                .unwrap()
        };
        let want = [
            head_view(&parts[0], heads[0])
                .rotary_embedding(&cos, &sin)
                .unwrap(),
            head_view(&parts[1], heads[1])
                .rotary_embedding(&cos, &sin)
                .unwrap(),
            head_view(&parts[2], heads[2]),
        ];
        let loss = |outs: &[Tensor; 3]| {
            let mut total: Option<Tensor> = None;
            for (o, p) in outs.iter().zip(&probes) {
                let s = o
                    .mul(p)
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap()
                    .sum()
                    .unwrap();
                total = Some(match total {
                    Some(acc) => acc.add(&s).unwrap(),
                    None => s,
                });
            }
            total.unwrap()
        };
        loss(&got).backward().unwrap();
        loss(&want).backward().unwrap();
        let case = format!("{dtype:?}, head dim {hd}, heads {heads:?}, per-row tables {per_row}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.shape(), w.shape(), "output {i}: {case}");
            assert_eq!(bits(g), bits(w), "output {i}'s values: {case}");
        }
        assert_eq!(
            bits(&joined.grad().unwrap()),
            bits(&parts_in.grad().unwrap()),
            "the projection's gradient: {case}"
        );
    }
}

#[test]
fn linears_joined_under_autocast_equals_the_product_with_the_weights_concatenated() {
    let Some(dev) = cuda::device_for_test("linears_joined_under_autocast_equals_the_product")
    else {
        return;
    };
    // q/k/v-like weights of unequal rows; the input in F32 (cast by the op) and in BF16 (as a
    // norm leaves it for the products).
    for x_dtype in [DType::F32, DType::BF16] {
        let (b, t, k) = (3, 29, 64);
        let randn = |shape: &[usize], dtype: DType| {
            let x = Tensor::randn(shape, DType::F32, None).unwrap();
            x.to_device(dev).unwrap().to_dtype(dtype).unwrap()
        };
        let x = randn(&[b, t, k], x_dtype);
        let ws = [96, 32, 32].map(|n| randn(&[n, k], DType::F32));
        let probe = randn(&[b, t, 160], DType::BF16);
        let leaves = || {
            let x = x.detach().requires_grad_().unwrap();
            let ws = ws.clone().map(|w| w.detach().requires_grad_().unwrap());
            (x, ws)
        };
        let ((x1, w1), (x2, w2)) = (leaves(), leaves());
        let (got, want) = rusting_brain::amp::autocast(Some(DType::BF16), || {
            let got = x1.linears_joined(&[&w1[0], &w1[1], &w1[2]])?;
            // The rows flattened into one product, as `linear` runs it.
            let cat = Tensor::cat(&w2.clone(), 0)?;
            let rows = x2.reshape_to(&[b * t, k])?;
            let want = rows.matmul(&cat.t()?)?.reshape_to(&[b, t, 160])?;
            for y in [&got, &want] {
                y.mul(&probe)?.to_dtype(DType::F32)?.sum()?.backward()?;
            }
            Ok((got, want))
        })
        .unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        assert_eq!(bits(&got), bits(&want), "values, input {x_dtype:?}");
        assert_eq!(
            bits(&x1.grad().unwrap()),
            bits(&x2.grad().unwrap()),
            "the input's gradient, input {x_dtype:?}"
        );
        for i in 0..3 {
            let (g1, g2) = (w1[i].grad().unwrap(), w2[i].grad().unwrap());
            assert_eq!(g1.dtype(), DType::F32);
            assert_eq!(
                bits(&g1),
                bits(&g2),
                "weight {i}'s gradient, input {x_dtype:?}"
            );
        }
    }
}
