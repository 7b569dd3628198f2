//! The fused decode products on the GPU (ops/fused_linear.rs, kernels/decode_gemv.cu) against
//! the same ops on the CPU, where they are the composition: 1 to 16 rows, TinyLlama's shapes
//! (k 2048 with n 256, 2048 and 5632; k 5632 with n 2048), BF16 and F32 weights, with and
//! without a residual; mixed precision; a gradient needed (the composition, gradients
//! flowing); a capture in a CUDA graph; and a decode step's q/k/v products with the rotation and
//! the cache write in their epilogue, against the same ops composed on the GPU; and the same ops
//! with Q4_K weights against their composition through the quantized GEMV.

#[path = "support/relative_error.rs"]
mod relative_error;

use relative_error::relative_error;
use rusting_brain::amp::autocast;
use rusting_brain::backend::cuda::{self, graph::CudaGraph};
use rusting_brain::ops::fused_linear::{
    fused_max_rows, qkv_into_cache_runs_kernel, runs_fused_kernel, set_block_products, RotaryCache,
};
use rusting_brain::ops::quant_matmul::{BlockFormat, QuantizedMatrix};
use rusting_brain::ops::rope::rotary_into_cache;
use rusting_brain::{no_grad, DType, Device, Generator, Tensor};

fn randn(shape: &[usize], scale: f64, dtype: DType, seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed)))
        .unwrap()
        .mul_scalar(scale)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// Relative to the output's largest value: BF16 outputs are rounded to 8 bits, and the
/// kernel and the CPU may round a sum on either side of a tie.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        _ => 1.6e-2,
    }
}

/// Whether the kernel (not the composition) takes r rows of k with weights of `dtype`: the
/// staged rows (padded by 16 bytes on the tensor cores) must fit the 227 KB of shared memory
/// an H100/H200 block may use.
fn kernel_expected(r: usize, k: usize, dtype: DType) -> bool {
    r <= fused_max_rows(k, dtype) && r * (k + 8) * dtype.size_in_bytes() + 8256 <= 227 << 10
}

/// The inputs of one case, on the CPU.
struct Case {
    x: Tensor,
    up: Tensor,
    norm: Tensor,
    weights: Vec<Tensor>,
    residuals: Vec<Tensor>,
}

fn case(r: usize, k: usize, ns: &[usize], dtype: DType, seed: u64) -> Case {
    let scale = 1.0 / (k as f64).sqrt();
    Case {
        x: randn(&[r, 1, k], 1.0, dtype, seed),
        up: randn(&[r, 1, k], 1.0, dtype, seed + 1),
        norm: randn(&[k], 0.2, DType::F32, seed + 2)
            .add_scalar(1.0)
            .unwrap()
            .to_dtype(dtype)
            .unwrap(),
        weights: ns
            .iter()
            .enumerate()
            .map(|(i, &n)| randn(&[n, k], scale, dtype, seed + 10 + i as u64))
            .collect(),
        residuals: ns
            .iter()
            .enumerate()
            .map(|(i, &n)| randn(&[r, 1, n], 1.0, dtype, seed + 20 + i as u64))
            .collect(),
    }
}

fn on(ts: &[Tensor], d: Device) -> Vec<Tensor> {
    ts.iter().map(|t| t.to_device(d).unwrap()).collect()
}

fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(
        (got.dtype(), got.shape()),
        (want.dtype(), want.shape()),
        "{what}"
    );
    let err = relative_error(got, want);
    assert!(
        err < tolerance(want.dtype()),
        "{what}: relative error {err:.2e}"
    );
}

/// The three ops on one case, on the GPU against the CPU.
fn check_case(c: &Case, r: usize, k: usize, dtype: DType, d: Device) {
    let what = |op: &str| format!("{op} rows {r} k {k} {dtype:?}");
    let (x, up, norm) = (
        c.x.to_device(d).unwrap(),
        c.up.to_device(d).unwrap(),
        c.norm.to_device(d).unwrap(),
    );
    let (weights, residuals) = (on(&c.weights, d), on(&c.residuals, d));
    assert_eq!(
        runs_fused_kernel(&x, &weights[0]).unwrap(),
        kernel_expected(r, k, dtype),
        "{}",
        what("routing")
    );
    // All weights in one launch of rms_norm_linears.
    let refs = |ws: &[Tensor]| -> Vec<Tensor> { ws.to_vec() };
    let (cw, gw) = (refs(&c.weights), refs(&weights));
    let want =
        c.x.rms_norm_linears(&c.norm, 1e-5, &cw.iter().collect::<Vec<_>>())
            .unwrap();
    let got = x
        .rms_norm_linears(&norm, 1e-5, &gw.iter().collect::<Vec<_>>())
        .unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(g, w, &format!("{} weight {i}", what("rms_norm_linears")));
    }
    // One weight at a time, with and without its residual.
    for (i, (w, cw)) in weights.iter().zip(&c.weights).enumerate() {
        for with_residual in [false, true] {
            let (res, cres) = if with_residual {
                (Some(&residuals[i]), Some(&c.residuals[i]))
            } else {
                (None, None)
            };
            let name =
                |op: &str| format!("{} n {} residual {with_residual}", what(op), w.shape()[0]);
            let want = c.x.linear_residual(cw, cres).unwrap();
            let got = x.linear_residual(w, res).unwrap();
            assert_close(&got, &want, &name("linear_residual"));
            let want = c.x.swiglu_linear(&c.up, cw, cres).unwrap();
            let got = x.swiglu_linear(&up, w, res).unwrap();
            assert_close(&got, &want, &name("swiglu_linear"));
        }
    }
}

#[test]
fn fused_products_on_cuda_match_the_composition_on_the_cpu() {
    let Some(d) = cuda::device_for_test("fused_products_on_cuda_match_the_composition") else {
        return;
    };
    no_grad(|| {
        for dtype in [DType::BF16, DType::F32] {
            for r in [1, 2, 3, 8, 16] {
                // 37 rows: tiles straddle two weights and the last tile is partial.
                let c = case(r, 2048, &[256, 37, 2048, 5632], dtype, r as u64);
                check_case(&c, r, 2048, dtype, d);
                let c = case(r, 5632, &[2048], dtype, 100 + r as u64);
                check_case(&c, r, 5632, dtype, d);
            }
        }
    });
}

#[test]
fn gate_and_up_gated_in_the_epilogue_match_the_composition_on_the_cpu() {
    let Some(d) = cuda::device_for_test("gate_and_up_gated_in_the_epilogue") else {
        return;
    };
    no_grad(|| {
        // TinyLlama's gate/up (5632 wide), and a width whose last tile is partial (8 + 4).
        for (r, n) in [(1, 5632), (3, 12), (16, 5632)] {
            let k = 2048;
            let c = case(r, k, &[n, n], DType::BF16, 300 + r as u64);
            let on = |t: &Tensor| t.to_device(d).unwrap();
            let want =
                c.x.rms_norm_swiglu(&c.norm, 1e-5, &c.weights[0], &c.weights[1])
                    .unwrap();
            let got = on(&c.x)
                .rms_norm_swiglu(&on(&c.norm), 1e-5, &on(&c.weights[0]), &on(&c.weights[1]))
                .unwrap();
            assert!(runs_fused_kernel(&on(&c.x), &on(&c.weights[0])).unwrap());
            assert_close(&got, &want, &format!("rms_norm_swiglu rows {r} n {n}"));
        }
    });
}

#[test]
fn more_weights_than_one_launch_takes_run_as_several() {
    let Some(d) = cuda::device_for_test("more_weights_than_one_launch_takes") else {
        return;
    };
    no_grad(|| {
        let c = case(2, 64, &[8, 16, 24, 40, 8, 64], DType::BF16, 7);
        let cw: Vec<&Tensor> = c.weights.iter().collect();
        let gpu = on(&c.weights, d);
        let gw: Vec<&Tensor> = gpu.iter().collect();
        let want = c.x.rms_norm_linears(&c.norm, 1e-6, &cw).unwrap();
        let (x, norm) = (c.x.to_device(d).unwrap(), c.norm.to_device(d).unwrap());
        let got = x.rms_norm_linears(&norm, 1e-6, &gw).unwrap();
        assert_eq!(got.len(), 6);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, &format!("weight {i}"));
        }
    });
}

#[test]
fn strided_inputs_are_copied_and_take_the_kernel() {
    let Some(d) = cuda::device_for_test("strided_inputs_are_copied") else {
        return;
    };
    no_grad(|| {
        let (r, k, n) = (2, 256, 64);
        // x as a transposed view: [r, k] with strides [1, r].
        let xt = randn(&[k, r], 1.0, DType::BF16, 80);
        let w = randn(&[n, k], 0.0625, DType::BF16, 81);
        let h = randn(&[n, r], 1.0, DType::BF16, 82);
        let want = xt
            .t()
            .unwrap()
            .linear_residual(&w, Some(&h.t().unwrap()))
            .unwrap();
        let (xt, w, h) = (
            xt.to_device(d).unwrap(),
            w.to_device(d).unwrap(),
            h.to_device(d).unwrap(),
        );
        let x = xt.t().unwrap();
        assert!(!x.is_contiguous());
        assert!(runs_fused_kernel(&x, &w).unwrap());
        let got = x.linear_residual(&w, Some(&h.t().unwrap())).unwrap();
        assert_close(&got, &want, "a transposed input and residual");
    });
}

#[test]
fn mixed_precision_multiplies_in_bf16_and_adds_the_f32_residual() {
    let Some(d) = cuda::device_for_test("mixed_precision_multiplies_in_bf16") else {
        return;
    };
    let (r, k, n) = (2, 2048, 512);
    let c = case(r, k, &[n], DType::F32, 40);
    let bf = |t: &Tensor| t.to_dtype(DType::BF16).unwrap();
    // The composition as autocast runs it on CUDA, written out on the CPU: normed in F32, cast
    // to BF16 with the weight, product in BF16, added to the F32 residual.
    let normed = bf(&c.x.rms_norm(Some(&c.norm), 1e-5).unwrap());
    let want_norm = normed.matmul(&bf(&c.weights[0]).t().unwrap()).unwrap();
    let want_res = c.residuals[0]
        .add(&bf(&c.x).matmul(&bf(&c.weights[0]).t().unwrap()).unwrap())
        .unwrap();
    let (x, norm, w, h) = (
        c.x.to_device(d).unwrap(),
        c.norm.to_device(d).unwrap(),
        c.weights[0].to_device(d).unwrap(),
        c.residuals[0].to_device(d).unwrap(),
    );
    autocast(Some(DType::BF16), || {
        no_grad(|| {
            assert!(runs_fused_kernel(&x, &w)?, "F32 weights multiply as BF16");
            let got = x.rms_norm_linears(&norm, 1e-5, &[&w])?;
            assert_close(&got[0], &want_norm, "rms_norm_linears under autocast");
            let got = x.linear_residual(&w, Some(&h))?;
            assert_close(&got, &want_res, "linear_residual under autocast");
            Ok(())
        })
    })
    .unwrap();
}

#[test]
fn with_a_gradient_needed_the_ops_compose_and_gradients_flow() {
    let Some(d) = cuda::device_for_test("with_a_gradient_needed_the_ops_compose") else {
        return;
    };
    let c = case(2, 256, &[64], DType::F32, 50);
    let grads = |dev: Device| -> (Tensor, Tensor) {
        let w = c.weights[0]
            .to_device(dev)
            .unwrap()
            .detach()
            .requires_grad_()
            .unwrap();
        let (g, u, h) = (
            c.x.to_device(dev).unwrap(),
            c.up.to_device(dev).unwrap(),
            c.residuals[0].to_device(dev).unwrap(),
        );
        if dev != Device::Cpu {
            assert!(
                !runs_fused_kernel(&g, &w).unwrap(),
                "a weight needs its gradient"
            );
        }
        let y = g.swiglu_linear(&u, &w, Some(&h)).unwrap();
        y.sum().unwrap().backward().unwrap();
        (y, w.grad().expect("the weight's gradient"))
    };
    let (want_y, want_dw) = grads(Device::Cpu);
    let (got_y, got_dw) = grads(d);
    assert_close(&got_y, &want_y, "output");
    assert_close(&got_dw, &want_dw, "weight gradient");
}

#[test]
fn a_captured_fused_product_replays_on_new_inputs() {
    let Some(d) = cuda::device_for_test("a_captured_fused_product_replays") else {
        return;
    };
    let Device::Cuda(i) = d else { unreachable!() };
    let dev = cuda::device(i).unwrap();
    no_grad(|| {
        let c = case(3, 2048, &[256], DType::BF16, 60);
        let (x, up, w, h) = (
            c.x.to_device(d).unwrap(),
            c.up.to_device(d).unwrap(),
            c.weights[0].to_device(d).unwrap(),
            c.residuals[0].to_device(d).unwrap(),
        );
        let out = Tensor::zeros(&[3, 1, 256], DType::BF16, d).unwrap();
        // Once outside the capture, as a decode step's warm-up runs: kernels load and the
        // launch geometry is cached.
        x.swiglu_linear(&up, &w, Some(&h)).unwrap();
        let graph =
            CudaGraph::capture(&dev, || out.copy_(&x.swiglu_linear(&up, &w, Some(&h))?)).unwrap();
        let fresh = randn(&[3, 1, 2048], 1.0, DType::BF16, 61);
        x.copy_(&fresh.to_device(d).unwrap()).unwrap();
        graph.replay().unwrap();
        let want = fresh
            .swiglu_linear(&c.up, &c.weights[0], Some(&c.residuals[0]))
            .unwrap();
        assert_close(&out, &want, "replayed on the new gate");
    });
}

/// One layer's products of TinyLlama (d 2048, ffn 5632, 4 KV heads of 64) as the fused ops
/// run them: a name, the op, k and the weights' rows.
#[derive(Clone, Copy)]
enum Layer {
    Qkv,
    O,
    GateUp,
    Down,
}

impl Layer {
    fn shape(self) -> (&'static str, usize, &'static [usize]) {
        match self {
            Layer::Qkv => ("rms_norm_linears q,k,v", 2048, &[2048, 256, 256]),
            Layer::O => ("linear_residual o", 2048, &[2048]),
            Layer::GateUp => ("rms_norm_linears gate,up", 2048, &[5632, 5632]),
            Layer::Down => ("swiglu_linear down", 5632, &[2048]),
        }
    }
}

/// Replays a graph of the op over 8 copies of its weights (more bytes than L2 holds, so every
/// weight comes from DRAM) and prints the time per op and the weight bandwidth. A measurement,
/// not a check: `cargo test -p rusting_brain --test cuda_decode_gemv -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement; run with --ignored --nocapture"]
fn weight_bandwidth_of_the_fused_products() {
    let Some(d) = cuda::device_for_test("weight_bandwidth_of_the_fused_products") else {
        return;
    };
    let Device::Cuda(i) = d else { unreachable!() };
    let dev = cuda::device(i).unwrap();
    let copies = 8;
    no_grad(|| {
        for layer in [Layer::Qkv, Layer::O, Layer::GateUp, Layer::Down] {
            let (name, k, ns) = layer.shape();
            let c = case(16, k, ns, DType::BF16, 70);
            let weights: Vec<Vec<Tensor>> = (0..copies).map(|_| on(&c.weights, d)).collect();
            for rows in [1, 2, 4, 8, 16] {
                let cut = |t: &Tensor| t.narrow(0, 0, rows).unwrap().to_device(d).unwrap();
                let (x, up, norm, h) = (
                    cut(&c.x),
                    cut(&c.up),
                    c.norm.to_device(d).unwrap(),
                    cut(&c.residuals[0]),
                );
                let run = || -> rusting_brain::Result<()> {
                    for ws in &weights {
                        match layer {
                            Layer::Qkv | Layer::GateUp => {
                                x.rms_norm_linears(&norm, 1e-5, &ws.iter().collect::<Vec<_>>())?;
                            }
                            Layer::O => {
                                x.linear_residual(&ws[0], Some(&h))?;
                            }
                            Layer::Down => {
                                x.swiglu_linear(&up, &ws[0], Some(&h))?;
                            }
                        }
                    }
                    Ok(())
                };
                run().unwrap();
                let graph = CudaGraph::capture(&dev, run).unwrap();
                graph.replay().unwrap();
                dev.synchronize().unwrap();
                let reps = 50;
                let started = std::time::Instant::now();
                for _ in 0..reps {
                    graph.replay().unwrap();
                }
                dev.synchronize().unwrap();
                let per_op = started.elapsed().as_secs_f64() / (reps * copies) as f64;
                let bytes = ns.iter().sum::<usize>() * k * 2;
                let tbs = bytes as f64 / per_op / 1e12;
                println!(
                    "{name:26} rows {rows:2}: {:6.2} us, {tbs:5.2} TB/s ({:3.0}% of 4.3)",
                    per_op * 1e6,
                    tbs / 4.3 * 100.0
                );
            }
        }
    });
}

/// Launched dependently (inside `with_fixed_weights`, as a decode step runs them), a product
/// still reads its input only after the kernel that writes it has finished: each round writes
/// a new input with a large kernel right before the product, and the outputs must equal those
/// of plain launches bit for bit (an early read would see the previous round's input).
#[test]
fn a_dependent_launch_reads_the_input_the_kernel_before_it_wrote() {
    let Some(d) = cuda::device_for_test("a_dependent_launch_reads_the_input") else {
        return;
    };
    no_grad(|| {
        let c = case(1, 2048, &[2048, 512, 512], DType::BF16, 70);
        let norm = c.norm.to_device(d).unwrap();
        let weights = on(&c.weights, d);
        let w: Vec<&Tensor> = weights.iter().collect();
        // The input is a row sum over 64 MB: the kernel right before each product runs long
        // enough for an early start to read what the round before left.
        let big = randn(&[2048, 16384], 1.0, DType::BF16, 71)
            .to_device(d)
            .unwrap();
        let rounds = |dependent: bool| -> Vec<Vec<f64>> {
            let round = |r: usize| {
                let x = big
                    .narrow(1, r * 1024, 8192)
                    .unwrap()
                    .mean_dims(&[-1], false)
                    .unwrap()
                    .reshape_to(&[1, 2048])
                    .unwrap();
                assert_eq!(x.dtype(), DType::BF16);
                x.rms_norm_linears(&norm, 1e-5, &w).unwrap()[0]
                    .to_vec_f64()
                    .unwrap()
            };
            if dependent {
                cuda::decode_gemv::with_fixed_weights(|| (0..8).map(round).collect())
            } else {
                (0..8).map(round).collect()
            }
        };
        assert_eq!(rounds(true), rounds(false));
    });
}

/// One decode step's q/k/v operands on the GPU: the stream x [rows, 1, k], the norm, the three
/// weights, the angle tables [rows, 1, 1, hd] (any values: the kernel does not assume
/// cos² + sin² = 1), the cursor at `pos`, and random caches [rows, kv, 8, hd], built twice so
/// that each path writes its own.
struct QkvStep {
    x: Tensor,
    norm: Tensor,
    weights: Vec<Tensor>,
    tables: [Tensor; 2],
    cursor: Tensor,
    caches: [[Tensor; 2]; 2],
}

fn qkv_step(rows: usize, k: usize, [heads, kv, hd]: [usize; 3], pos: i64, d: Device) -> QkvStep {
    let c = case(
        rows,
        k,
        &[heads * hd, kv * hd, kv * hd],
        DType::BF16,
        80 + rows as u64,
    );
    let table = |seed| {
        randn(&[rows, 1, 1, hd], 1.0, DType::F32, seed)
            .to_device(d)
            .unwrap()
    };
    let cache = |seed| randn(&[rows, kv, 8, hd], 1.0, DType::BF16, seed);
    let (ck, cv) = (cache(90), cache(91));
    let twice = || [ck.to_device(d).unwrap(), cv.to_device(d).unwrap()];
    QkvStep {
        x: c.x.to_device(d).unwrap(),
        norm: c.norm.to_device(d).unwrap(),
        weights: on(&c.weights, d),
        tables: [table(92), table(93)],
        cursor: Tensor::from_vec(vec![pos], &[1])
            .unwrap()
            .to_device(d)
            .unwrap(),
        caches: [twice(), twice()],
    }
}

impl QkvStep {
    fn target(&self, i: usize) -> RotaryCache<'_> {
        RotaryCache {
            cos: &self.tables[0],
            sin: &self.tables[1],
            k_cache: &self.caches[i][0],
            v_cache: &self.caches[i][1],
            cursor: &self.cursor,
        }
    }

    fn weights(&self) -> [&Tensor; 3] {
        [&self.weights[0], &self.weights[1], &self.weights[2]]
    }

    /// q rotated by the fused op, writing caches[0].
    fn fused(&self, hd: usize) -> Tensor {
        let (target, w) = (self.target(0), self.weights());
        assert!(
            qkv_into_cache_runs_kernel(&self.x, &self.norm, w, hd, &target).unwrap(),
            "the rotary epilogue should take {} rows",
            self.x.shape()[0]
        );
        self.x
            .rms_norm_qkv_into_cache(&self.norm, 1e-5, w, hd, target)
            .unwrap()
    }

    /// q rotated by the ops the fused one replaces, writing caches[1]: the norm's products
    /// (the fused decode kernel without the rotation), then rope_cache_write.
    fn composed(&self, [heads, kv, hd]: [usize; 3]) -> Tensor {
        let qkv = self
            .x
            .rms_norm_linears(&self.norm, 1e-5, &self.weights())
            .unwrap();
        let rows = self.x.shape()[0];
        let split = |t: &Tensor, n| {
            t.reshape_to(&[rows, 1, n, hd])
                .unwrap()
                .transpose(1, 2)
                .unwrap()
        };
        let [t, c] = [self.target(1), self.target(1)];
        rotary_into_cache(
            &split(&qkv[0], heads),
            &split(&qkv[1], kv),
            &split(&qkv[2], kv),
            t.cos,
            t.sin,
            c.k_cache,
            c.v_cache,
            t.cursor,
        )
        .unwrap()
    }
}

/// The fused op's q and both caches equal the composition's bit for bit: the same sums (one
/// row's products do not depend on its tile), rounded where the composition materializes them
/// and rotated with the same roundings. 1-2 rows normalize in every block, 3-16 apart; heads of
/// 64 and of 32 pair different dims in a tile; TinyLlama's q/k/v at one row.
#[test]
fn qkv_rotated_into_the_caches_in_the_epilogue_equal_the_composition() {
    let Some(d) = cuda::device_for_test("qkv_rotated_into_the_caches_in_the_epilogue") else {
        return;
    };
    no_grad(|| {
        let shapes: [(usize, usize, [usize; 3]); 9] = [
            (1, 256, [4, 2, 64]),
            (2, 256, [4, 2, 64]),
            (3, 256, [4, 2, 64]),
            (16, 256, [4, 2, 64]),
            (1, 256, [8, 4, 32]),
            (5, 256, [8, 4, 32]),
            (16, 256, [8, 4, 32]),
            (1, 2048, [32, 4, 64]),
            (16, 2048, [32, 4, 64]),
        ];
        for (rows, k, heads) in shapes {
            let s = qkv_step(rows, k, heads, 5, d);
            let what = format!("rows {rows} k {k} heads/kv/dim {heads:?}");
            let (got, want) = (s.fused(heads[2]), s.composed(heads));
            assert_eq!(got.shape(), [rows, heads[0], 1, heads[2]], "{what}");
            assert_eq!(
                got.to_vec_f64().unwrap(),
                want.to_vec_f64().unwrap(),
                "q, {what}"
            );
            for (i, name) in ["keys", "values"].iter().enumerate() {
                assert_eq!(
                    s.caches[0][i].to_vec_f64().unwrap(),
                    s.caches[1][i].to_vec_f64().unwrap(),
                    "{name}, {what}"
                );
            }
        }
    });
}

/// A cursor past the caches writes no cache and fails the next synchronization, naming the
/// rotary cache write, as the separate rotary kernel does.
#[test]
fn a_cursor_outside_the_caches_writes_nothing_and_is_reported() {
    let Some(d) = cuda::device_for_test("a_cursor_outside_the_caches") else {
        return;
    };
    let Device::Cuda(i) = d else { unreachable!() };
    let dev = cuda::device(i).unwrap();
    no_grad(|| {
        let heads = [4, 2, 64];
        let s = qkv_step(1, 256, heads, 8, d);
        let before = s.caches[0][0].to_vec_f64().unwrap();
        s.fused(heads[2]);
        let err = dev.synchronize().unwrap_err().to_string();
        assert!(err.contains("rotary cache write"), "{err}");
        assert_eq!(s.caches[0][0].to_vec_f64().unwrap(), before);
        assert_eq!(
            s.caches[0][1].to_vec_f64().unwrap(),
            s.caches[1][1].to_vec_f64().unwrap()
        );
    });
}

/// With Q4_K weights the four ops take the block-format kernels up to 8 rows (norm in every
/// block at 1-2 rows, apart above), with Q4_1 they compose; both agree with the composition
/// written out on the same GPU:
/// the norm or gating op, then the quantized GEMV of each weight, the gating and the add. Only
/// the norm's sum of squares is summed in another order, so BF16 tolerances hold.
#[test]
fn block_quantized_weights_take_the_fused_products() {
    let Some(d) = cuda::device_for_test("block_quantized_weights_take_the_fused_products") else {
        return;
    };
    set_block_products(true);
    no_grad(|| {
        for format in [BlockFormat::Q4_K, BlockFormat::Q4_1] {
            // Q4_1 has no fused kernels (decode_gemv.rs, `takes_blocks`): it composes.
            let fused = format == BlockFormat::Q4_K;
            for rows in [1, 2, 3, 8] {
                let (k, ns) = (512, [256, 512, 512]);
                let c = case(rows, k, &ns, DType::BF16, 100 + rows as u64);
                let what = format!("{format:?} rows {rows}");
                let qs: Vec<QuantizedMatrix> = c
                    .weights
                    .iter()
                    .map(|w| {
                        QuantizedMatrix::quantize(&w.to_dtype(DType::F32).unwrap(), format)
                            .unwrap()
                            .to_device(d)
                            .unwrap()
                    })
                    .collect();
                let (x, up, norm) = (
                    c.x.to_device(d).unwrap(),
                    c.up.to_device(d).unwrap(),
                    c.norm.to_device(d).unwrap(),
                );
                let res = c.residuals[0].to_device(d).unwrap();
                assert_eq!(
                    runs_fused_kernel(&x, &qs[0]).unwrap(),
                    fused,
                    "routing, {what}"
                );
                let normed = x.rms_norm(Some(&norm), 1e-5).unwrap();
                let q: Vec<&QuantizedMatrix> = qs.iter().collect();
                let got = x.rms_norm_linears(&norm, 1e-5, &q).unwrap();
                for (i, g) in got.iter().enumerate() {
                    let want = qs[i].matmul_t(&normed).unwrap();
                    assert_close(g, &want, &format!("rms_norm_linears weight {i}, {what}"));
                }
                let got = x.rms_norm_swiglu(&norm, 1e-5, &qs[1], &qs[2]).unwrap();
                let want = qs[1]
                    .matmul_t(&normed)
                    .unwrap()
                    .swiglu(&qs[2].matmul_t(&normed).unwrap())
                    .unwrap();
                assert_close(&got, &want, &format!("rms_norm_swiglu, {what}"));
                let got = x.linear_residual(&qs[0], Some(&res)).unwrap();
                let want = res.add(&qs[0].matmul_t(&x).unwrap()).unwrap();
                assert_close(&got, &want, &format!("linear_residual, {what}"));
                let got = x.swiglu_linear(&up, &qs[0], Some(&res)).unwrap();
                let want = res
                    .add(&qs[0].matmul_t(&x.swiglu(&up).unwrap()).unwrap())
                    .unwrap();
                assert_close(&got, &want, &format!("swiglu_linear, {what}"));
            }
        }
    });
}
