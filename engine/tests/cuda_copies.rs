//! Copies and casts on CUDA equal the CPU's bit for bit: casts between the 16- and 32-bit floats
//! on both copy kernels (the 16-byte one, contiguous and aligned; the strided one, at an odd
//! offset), row copies into part of a wider matrix, the norm that casts, and the mixed add.

use rusting_brain::{backend::cuda, DType, Tensor};

/// Values that test rounding, overflow, subnormals, signed zero, infinities and NaN, cycled
/// to `n` elements and scaled so neighbouring elements differ.
fn values(n: usize) -> Vec<f64> {
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.5,
        1.0 / 3.0,
        65504.0,
        65520.0,
        3.0e38,
        -3.4e38,
        1.0e-40,
        6.0e-8,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.00390625,
        1.001953125,
    ];
    (0..n)
        .map(|i| special[i % special.len()] * (1.0 + (i / special.len()) as f64 * 0.0078125))
        .collect()
}

/// Each element as an F32 bit pattern, NaNs folded to one pattern (payloads may differ).
fn bits(t: &Tensor) -> Vec<u32> {
    let v = t.to_dtype(DType::F32).unwrap().to_vec_f32().unwrap();
    v.iter()
        .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
        .collect()
}

#[test]
fn casts_between_float_types_equal_the_cpu_bit_for_bit() {
    let Some(dev) = cuda::device_for_test("casts_between_float_types_equal_the_cpu") else {
        return;
    };
    let pairs = [
        (DType::F32, DType::BF16),
        (DType::F32, DType::F16),
        (DType::BF16, DType::F32),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F16),
        (DType::F16, DType::BF16),
    ];
    for (from, to) in pairs {
        for n in [1, 7, 8, 9, 31, 64, 1003, 4096 + 5] {
            let src = Tensor::from_f64s(&values(n + 1), &[n + 1], from).unwrap();
            let gpu = src.to_device(dev).unwrap();
            // Offset 0 (aligned: the 16-byte kernel) and 1 (misaligned: the strided one).
            for start in [0, 1] {
                let cpu = src.narrow(0, start, n).unwrap().to_dtype(to).unwrap();
                let got = gpu.narrow(0, start, n).unwrap().to_dtype(to).unwrap();
                assert_eq!(got.dtype(), to);
                assert_eq!(
                    bits(&got),
                    bits(&cpu),
                    "{from:?} -> {to:?}, {n} elements from offset {start}"
                );
            }
        }
    }
}

/// The graph a layer records for its normed product input, as values and gradients: F32 rows
/// [rows, cols] through `norm`, then a product-like use `y * probe`, backward from its sum.
fn normed_and_grads(
    x: &Tensor,
    w: &Tensor,
    probe: &Tensor,
    norm: impl Fn(&Tensor, &Tensor) -> Tensor,
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let leaf = |t: &Tensor| t.detach().requires_grad_().unwrap();
    let (x, w) = (leaf(x), leaf(w));
    let y = norm(&x, &w);
    assert_eq!(y.dtype(), probe.dtype());
    y.mul(probe).unwrap().sum().unwrap().backward().unwrap();
    let grad = |t: &Tensor| bits(&t.grad().unwrap());
    (bits(&y), grad(&x), grad(&w))
}

#[test]
fn rms_norm_as_equals_the_norm_then_the_cast_bit_for_bit() {
    let Some(dev) = cuda::device_for_test("rms_norm_as_equals_the_norm_then_the_cast") else {
        return;
    };
    // 768 columns take the 16-byte register kernels, 770 the scalar ones, 20000 the loop
    // kernels (more than a block's registers hold).
    for (rows, cols) in [(37, 768), (5, 770), (3, 20000)] {
        for dtype in [DType::BF16, DType::F16] {
            let x = Tensor::randn(&[rows, cols], DType::F32, None).unwrap();
            let w = Tensor::randn(&[cols], DType::F32, None).unwrap();
            let probe = Tensor::randn(&[rows, cols], DType::F32, None).unwrap();
            let (x, w) = (x.to_device(dev).unwrap(), w.to_device(dev).unwrap());
            let probe = probe.to_device(dev).unwrap().to_dtype(dtype).unwrap();
            let fused = normed_and_grads(&x, &w, &probe, |x, w| {
                x.rms_norm_as(Some(w), 1e-5, dtype).unwrap()
            });
            let composed = normed_and_grads(&x, &w, &probe, |x, w| {
                x.rms_norm(Some(w), 1e-5).unwrap().to_dtype(dtype).unwrap()
            });
            assert!(
                fused.0 == composed.0,
                "values, [{rows}, {cols}] as {dtype:?}"
            );
            assert!(
                fused.1 == composed.1,
                "x's gradient, [{rows}, {cols}] as {dtype:?}"
            );
            assert!(
                fused.2 == composed.2,
                "w's gradient, [{rows}, {cols}] as {dtype:?}"
            );
        }
    }
}

#[test]
fn adding_a_bf16_tensor_to_an_f32_one_equals_promoting_it_first() {
    let Some(dev) = cuda::device_for_test("adding_a_bf16_tensor_to_an_f32_one") else {
        return;
    };
    for low in [DType::BF16, DType::F16] {
        // 4096 + 3 elements: the 16-byte groups and a tail; offset 1: the promoting path.
        for start in [0, 1] {
            let n = 4096 + 3;
            let wide = Tensor::randn(&[n + 1], DType::F32, None).unwrap();
            let narrow = Tensor::randn(&[n + 1], DType::F32, None).unwrap();
            let wide = wide.to_device(dev).unwrap().narrow(0, start, n).unwrap();
            let narrow = narrow.to_device(dev).unwrap().to_dtype(low).unwrap();
            let narrow = narrow.narrow(0, start, n).unwrap();
            let leaf = |t: &Tensor| t.detach().requires_grad_().unwrap();
            let (w, l) = (leaf(&wide), leaf(&narrow));
            let expected = wide.add(&narrow.to_dtype(DType::F32).unwrap()).unwrap();
            for sum in [w.add(&l).unwrap(), l.add(&w).unwrap()] {
                assert_eq!(sum.dtype(), DType::F32);
                assert_eq!(bits(&sum), bits(&expected), "{low:?} from offset {start}");
            }
            let probe = Tensor::randn(&[n], DType::F32, None)
                .unwrap()
                .to_device(dev)
                .unwrap();
            w.add(&l)
                .unwrap()
                .mul(&probe)
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            assert_eq!(bits(&w.grad().unwrap()), bits(&probe));
            let lg = l.grad().unwrap();
            assert_eq!(lg.dtype(), low);
            assert_eq!(bits(&lg), bits(&probe.to_dtype(low).unwrap()));
        }
    }
}

#[test]
fn concatenating_along_the_last_dim_equals_the_cpu() {
    let Some(dev) = cuda::device_for_test("concatenating_along_the_last_dim") else {
        return;
    };
    // Widths of whole 16-byte words (the row kernel) and not (the strided kernel).
    for (dtype, widths) in [
        (DType::BF16, [64, 16, 24]),
        (DType::F32, [8, 12, 4]),
        (DType::BF16, [5, 3, 8]),
    ] {
        let parts: Vec<Tensor> = widths
            .iter()
            .map(|&w| {
                Tensor::randn(&[3, 37, w], DType::F32, None)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
            })
            .collect();
        let on_gpu: Vec<Tensor> = parts.iter().map(|p| p.to_device(dev).unwrap()).collect();
        let want = Tensor::cat(&parts, -1).unwrap();
        let got = Tensor::cat(&on_gpu, -1).unwrap();
        assert_eq!(bits(&got), bits(&want), "{dtype:?} widths {widths:?}");
        // The other way: one piece of each row copied out contiguous.
        let piece = got
            .narrow(2, widths[0], widths[1])
            .unwrap()
            .contiguous()
            .unwrap();
        let want_piece = want
            .narrow(2, widths[0], widths[1])
            .unwrap()
            .contiguous()
            .unwrap();
        assert_eq!(
            bits(&piece),
            bits(&want_piece),
            "{dtype:?} piece of widths {widths:?}"
        );
    }
}

/// index_select's gradient (an embedding's), `[.., rows, ..]` looked up by `ids` along `dim`:
/// each element's bits.
fn lookup_grad(table: &Tensor, dim: usize, ids: &Tensor) -> Vec<u32> {
    let table = table.detach().requires_grad_().unwrap();
    let y = table.index_select(dim as isize, ids).unwrap();
    let n = y.numel();
    // Values over six decades, so the order of the adds shows in the sum's last bits.
    let probe: Vec<f64> = (0..n)
        .map(|i| (i as f64 * 0.7311).sin() * 10f64.powi((i % 7) as i32 - 3))
        .collect();
    let probe = Tensor::from_f64s(&probe, y.shape(), DType::F32)
        .unwrap()
        .to_device(y.device())
        .unwrap();
    y.mul(&probe).unwrap().sum().unwrap().backward().unwrap();
    bits(&table.grad().unwrap())
}

#[test]
fn an_embedding_gradient_equals_the_cpu_bit_for_bit_on_every_run() {
    let Some(dev) = cuda::device_for_test("an_embedding_gradient_equals_the_cpu_bit_for_bit")
    else {
        return;
    };
    // 3000 lookups of 60 of a table's 5000 rows: each row about 50 times, three tiles of the
    // sort, and rows of 13 bits, so two radix passes.
    let ids: Vec<f64> = (0..3000).map(|i| ((i * 7919 % 60) * 83) as f64).collect();
    let ids = Tensor::from_f64s(&ids, &[3000], DType::I64).unwrap();
    for (shape, dim) in [(vec![5000, 40], 0), (vec![2, 5000, 3], 1)] {
        let n: usize = shape.iter().product();
        let table = Tensor::from_f64s(&vec![0.5; n], &shape, DType::F32).unwrap();
        let cpu = lookup_grad(&table, dim, &ids);
        let (table, ids) = (table.to_device(dev).unwrap(), ids.to_device(dev).unwrap());
        for run in 0..3 {
            assert!(
                lookup_grad(&table, dim, &ids) == cpu,
                "{shape:?} along dim {dim}, run {run}: the gradient differs from the CPU's"
            );
        }
    }
}
