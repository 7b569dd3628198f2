//! The captured decode step on the GPU: decode_attention against the CPU's masked product,
//! index_copy_ against the CPU, a CUDA graph that refuses a host copy and leaves the device
//! usable, a capture while another thread works on the device, and generation with the graph
//! giving the tokens of the step run op by op.

use rusting_brain::backend::cuda::{self, graph::CudaGraph};
use rusting_brain::models::transformer_lm::generate::{
    generate, Flow, GenerateOptions, SamplingOptions,
};
use rusting_brain::models::transformer_lm::{LmConfig, TransformerLm};
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, DType, Device, Generator, Tensor};

fn host(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .to_device(Device::Cpu)
        .unwrap()
        .to_vec_f32()
        .unwrap()
}

fn worst(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(p, q)| (p - q).abs())
        .fold(0f32, f32::max)
}

fn ids(v: Vec<i64>) -> Tensor {
    let n = v.len();
    Tensor::from_vec(v, &[n]).unwrap()
}

#[test]
fn decode_attention_follows_the_cpu_over_windows_groups_and_dtypes() {
    let Some(d) = cuda::device_for_test("decode_attention_follows_the_cpu") else {
        return;
    };
    let mut g = Generator::new(3);
    // (batch, heads, kv_heads, capacity, head_dim): one chunk, several chunks and a ragged
    // last one, groups of 1, 3 and 8, and 32 heads on one kv head (two blocks of 16).
    for (b, h, kv, cap, hd) in [
        (2, 4, 4, 40, 64),
        (3, 9, 3, 200, 64),
        (1, 32, 4, 1100, 64),
        (2, 32, 1, 130, 128),
    ] {
        let q = Tensor::randn(&[b, h, 1, hd], DType::F32, Some(&mut g)).unwrap();
        let k = Tensor::randn(&[b, kv, cap, hd], DType::F32, Some(&mut g)).unwrap();
        let v = Tensor::randn(&[b, kv, cap, hd], DType::F32, Some(&mut g)).unwrap();
        // Row 0 sees from key 0, the others from a padding that may start in a later chunk
        // or past the last key (an empty row beside full ones); the last key moves across
        // chunks. Every launch must leave the merge counters zero for the next one.
        let first = ids((0..b as i64).map(|r| (r * 70) % cap as i64).collect());
        for last in [cap as i64 - 1, (cap as i64) / 2, 0] {
            let last = ids(vec![last]);
            let want = no_grad(|| q.decode_attention(&k, &v, &first, &last, None)).unwrap();
            for dtype in [DType::F32, DType::BF16, DType::F16] {
                let on = |t: &Tensor| t.to_dtype(dtype).unwrap().to_device(d).unwrap();
                let window = |t: &Tensor| t.to_device(d).unwrap();
                let got = no_grad(|| {
                    on(&q).decode_attention(&on(&k), &on(&v), &window(&first), &window(&last), None)
                });
                let got = host(&got.unwrap());
                let tol = if dtype == DType::F32 { 1e-4 } else { 3e-2 };
                let err = worst(&host(&want), &got);
                assert!(
                    err < tol,
                    "b{b} h{h} kv{kv} cap{cap} hd{hd} {dtype} last {:?}: off by {err}",
                    host(&last)
                );
            }
        }
    }
}

#[test]
fn an_empty_window_gives_zeros_on_both_devices() {
    let Some(d) = cuda::device_for_test("an_empty_window_gives_zeros") else {
        return;
    };
    let q = Tensor::ones(&[1, 2, 1, 64], DType::F32, Device::Cpu).unwrap();
    let kv = Tensor::ones(&[1, 2, 100, 64], DType::F32, Device::Cpu).unwrap();
    let (first, last) = (ids(vec![70]), ids(vec![69]));
    let cpu = no_grad(|| q.decode_attention(&kv, &kv, &first, &last, None)).unwrap();
    let on = |t: &Tensor| t.to_device(d).unwrap();
    let gpu =
        no_grad(|| on(&q).decode_attention(&on(&kv), &on(&kv), &on(&first), &on(&last), None))
            .unwrap();
    assert!(host(&cpu).iter().all(|&x| x == 0.0));
    assert!(host(&gpu).iter().all(|&x| x == 0.0));
}

#[test]
fn index_copy_writes_the_slices_the_device_index_names() {
    let Some(d) = cuda::device_for_test("index_copy_writes_the_slices") else {
        return;
    };
    let mut g = Generator::new(5);
    let base = Tensor::randn(&[2, 3, 10, 4], DType::F32, Some(&mut g)).unwrap();
    // A strided source, as a decode step's transposed keys are.
    let src = Tensor::randn(&[2, 2, 3, 4], DType::F32, Some(&mut g))
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    let at = ids(vec![7, 2]);
    let cpu = base.contiguous_copy().unwrap();
    cpu.index_copy_(2, &at, &src).unwrap();
    let gpu = base.to_device(d).unwrap();
    gpu.index_copy_(2, &at.to_device(d).unwrap(), &src.to_device(d).unwrap())
        .unwrap();
    assert_eq!(host(&cpu), host(&gpu));
    assert_ne!(host(&cpu), host(&base));
    // (An index past the dim sets the device's error word, which any thread's next sync
    // reports; tests in this binary share the device, so that case is not run here.)
}

#[test]
fn a_capture_refuses_a_host_copy_and_leaves_the_device_usable() {
    let Some(d) = cuda::device_for_test("a_capture_refuses_a_host_copy") else {
        return;
    };
    let Device::Cuda(i) = d else { unreachable!() };
    let dev = cuda::device(i).unwrap();
    let x = Tensor::ones(&[8], DType::F32, d).unwrap();
    let refused = CudaGraph::capture(&dev, || {
        let y = x.add(&Tensor::from_vec(vec![1f32; 8], &[8])?.to_device(d)?)?;
        drop(y);
        Ok(())
    });
    let err = refused.err().expect("the capture must fail").to_string();
    assert!(err.contains("host-to-device"), "{err}");
    // The device still runs work, and a clean capture replays it.
    let out = Tensor::zeros(&[8], DType::F32, d).unwrap();
    let graph = CudaGraph::capture(&dev, || out.copy_(&x.mul_scalar(3.0)?)).unwrap();
    assert_eq!(host(&out), vec![0.0; 8], "a capture does not run the work");
    graph.replay().unwrap();
    assert_eq!(host(&out), vec![3.0; 8]);
}

fn model(d: Device) -> TransformerLm {
    let mut c = LmConfig::new(300, 64, 2, 8);
    c.n_kv_heads = 2;
    c.ffn_hidden = 96;
    c.max_seq_len = 128;
    c.init_std = 0.3;
    let cpu = TransformerLm::new(c.clone(), &mut Generator::new(9)).unwrap();
    TransformerLm::from_tensors(c, &cpu.state_dict(), DType::BF16, d).unwrap()
}

fn run(
    m: &TransformerLm,
    prompts: &[Vec<u32>],
    sampling: SamplingOptions,
    graph: bool,
) -> Vec<Vec<u32>> {
    let opts = GenerateOptions {
        max_new_tokens: 40,
        sampling,
        cuda_graph: graph,
        ..Default::default()
    };
    generate(m, prompts, &opts, &mut |_, _| Ok(Flow::Continue)).unwrap()
}

#[test]
fn the_captured_decode_step_gives_the_tokens_of_the_step_run_op_by_op() {
    let Some(d) = cuda::device_for_test("the_captured_decode_step_gives_the_tokens") else {
        return;
    };
    let m = model(d);
    let prompts = vec![vec![5, 9, 200], vec![1, 2, 3, 4, 5, 6, 7], vec![42]];
    let eager = run(&m, &prompts, SamplingOptions::greedy(), false);
    let graph = run(&m, &prompts, SamplingOptions::greedy(), true);
    assert_eq!(eager, graph);
    assert!(eager.iter().all(|r| r.len() == 40));
    let sampled = |seed| SamplingOptions {
        temperature: 1.0,
        top_k: 20,
        seed,
        ..Default::default()
    };
    let a = run(&m, &prompts, sampled(7), true);
    assert_eq!(a, run(&m, &prompts, sampled(7), true));
    assert_eq!(a, run(&m, &prompts, sampled(7), false));
}

#[test]
fn a_capture_records_only_its_own_thread_while_another_keeps_working() {
    let Some(d) = cuda::device_for_test("a_capture_records_only_its_own_thread") else {
        return;
    };
    let Device::Cuda(i) = d else { unreachable!() };
    let dev = cuda::device(i).unwrap();
    let busy = std::thread::spawn(move || {
        let x = Tensor::ones(&[256, 256], DType::F32, d).unwrap();
        let mut sum = 0.0;
        for _ in 0..200 {
            sum = x.matmul(&x).unwrap().sum().unwrap().item().unwrap();
        }
        sum
    });
    let x = Tensor::ones(&[64], DType::F32, d).unwrap();
    let out = Tensor::zeros(&[64], DType::F32, d).unwrap();
    let mut graphs = Vec::new();
    for _ in 0..20 {
        graphs.push(
            CudaGraph::capture(&dev, || out.copy_(&x.mul_scalar(2.0)?.add_scalar(1.0)?)).unwrap(),
        );
    }
    for g in &graphs {
        g.replay().unwrap();
    }
    assert_eq!(host(&out), vec![3.0; 64]);
    assert_eq!(busy.join().unwrap(), 256.0 * 256.0 * 256.0);
}
