//! The two ways the fused attention backward computes dQ agree: the one that adds each key
//! block's share with atomics (five products, the default) and the split one that recomputes the
//! probabilities per query block (eight products, deterministic). dK and dV come from the same
//! code in both, so they are equal bit for bit; dQ is summed in another order, so it is compared
//! to within a rounding of the output dtype.

use rusting_brain::backend::cuda::{self, attention as attn};
use rusting_brain::backend::spec::AttentionSpec;
use rusting_brain::backend::Storage;
use rusting_brain::{DType, Generator, Tensor};

fn cuda_storage(s: &Storage) -> &cuda::CudaStorage {
    match s {
        Storage::Cuda(s) => s,
        Storage::Cpu(_) => panic!("a CUDA tensor"),
    }
}

/// The operand view of a contiguous [b, h, t, d] tensor's storage.
fn operand<'a>(s: &'a Storage, t: &Tensor) -> attn::Operand<'a> {
    let [_, h, tokens, d] = t.shape()[..] else {
        panic!("a 4-d tensor")
    };
    attn::Operand {
        storage: cuda_storage(s),
        offset: 0,
        strides: [h * tokens * d, tokens * d, d],
    }
}

fn values(s: cuda::CudaStorage, shape: &[usize]) -> Vec<f32> {
    let t = Tensor::from_storage(Storage::Cuda(s), shape).unwrap();
    t.to_dtype(DType::F32).unwrap().to_vec_f32().unwrap()
}

#[test]
fn fused_dq_backward_agrees_with_the_split_one() {
    let Some(dev) = cuda::device_for_test("fused_dq_backward_agrees_with_the_split_one") else {
        return;
    };
    // (batch, heads, kv heads, queries, keys, head dim, causal, saturated): partial tiles,
    // grouped heads, more keys than queries and fewer (the first queries then see no key), both
    // head dims, causal and not. Saturated: q near -3 and k near 1 in every dim, so every scaled
    // score is about -24 and each row's log-sum-exp far below zero; then the zero-filled keys
    // past the end of a key block, which nothing masks when not causal, have P = 2^-lse, far
    // past F16's range.
    let cases = [
        (2, 4, 2, 70, 70, 64, true, false),
        (1, 2, 2, 33, 100, 128, false, false),
        (1, 2, 1, 40, 130, 64, true, false),
        (1, 4, 2, 300, 300, 64, true, false),
        (1, 2, 1, 150, 201, 128, true, false),
        (2, 2, 2, 257, 257, 64, false, false),
        (1, 2, 2, 100, 70, 64, true, false),
        (1, 2, 2, 40, 70, 64, false, true),
        (1, 2, 1, 20, 50, 128, false, true),
    ];
    let mut gen = Generator::new(7);
    for (b, h, kvh, tq, tk, d, causal, saturated) in cases {
        for dtype in [DType::BF16, DType::F16] {
            let mut randn = |shape: &[usize], shift: f64, spread: f64| {
                let t = Tensor::randn(shape, DType::F32, Some(&mut gen)).unwrap();
                let t = t.mul_scalar(spread).unwrap().add_scalar(shift).unwrap();
                t.to_device(dev).unwrap().to_dtype(dtype).unwrap()
            };
            let (qk_spread, q_shift, k_shift) = match saturated {
                true => (0.1, -3.0, 1.0),
                false => (1.0, 0.0, 0.0),
            };
            let (q, k, v) = (
                randn(&[b, h, tq, d], q_shift, qk_spread),
                randn(&[b, kvh, tk, d], k_shift, qk_spread),
                randn(&[b, kvh, tk, d], 0.0, 1.0),
            );
            let dout = randn(&[b, h, tq, d], 0.0, 1.0);
            let spec = AttentionSpec {
                batch: b,
                heads: h,
                kv_heads: kvh,
                tq,
                tk,
                head_dim: d,
                causal,
                scale: 1.0 / (d as f64).sqrt(),
            };
            let tensors = [&q, &k, &v, &dout];
            let guards = tensors.map(|t| t.storage());
            let [qo, ko, vo, go] = [0, 1, 2, 3].map(|i| operand(&guards[i], tensors[i]));
            let (o, lse) = attn::forward(qo, ko, vo, &spec).unwrap();
            let inputs = attn::BackwardInputs {
                q: qo,
                k: ko,
                v: vo,
                // The forward writes o token-major.
                o: attn::Operand {
                    storage: &o,
                    offset: 0,
                    strides: [tq * h * d, d, h * d],
                },
                dout: go,
                lse: &lse,
            };
            let fused = attn::backward_by(&inputs, &spec, attn::DqPath::Fused).unwrap();
            let split = attn::backward_by(&inputs, &spec, attn::DqPath::Split).unwrap();
            let what = format!(
                "q [{b}, {h}, {tq}, {d}] over {kvh} x {tk}, causal {causal}, saturated \
                 {saturated}, {dtype:?}"
            );
            let kv_shape = [b, tk, kvh, d];
            let (fdq, fdk, fdv) = fused;
            let (sdq, sdk, sdv) = split;
            for (name, x, y) in [("dk", fdk, sdk), ("dv", fdv, sdv)] {
                let (x, y) = (values(x, &kv_shape), values(y, &kv_shape));
                let same = x.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{name} differs between the paths: {what}");
            }
            let q_shape = [b, tq, h, d];
            let (x, y) = (values(fdq, &q_shape), values(sdq, &q_shape));
            let scale = y.iter().fold(0f32, |m, a| m.max(a.abs()));
            assert!(scale > 0.0, "dq is all zeros: {what}");
            // Two roundings to the dtype apart, plus the different order of the F32 sums.
            let ulp = if dtype == DType::BF16 {
                2f32.powi(-7)
            } else {
                2f32.powi(-10)
            };
            assert!(
                x.iter().chain(&y).all(|v| v.is_finite()),
                "dq is not finite: {what}"
            );
            for (i, (a, b)) in x.iter().zip(&y).enumerate() {
                let tol = 2.0 * ulp * a.abs().max(b.abs()) + 1e-3 * scale;
                assert!(
                    (a - b).abs() <= tol,
                    "dq[{i}]: fused {a} vs split {b} ({what})"
                );
            }
        }
    }
}
