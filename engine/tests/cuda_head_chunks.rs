//! The LM head's chunked loss on CUDA: the weight gradient summed over chunks (each later
//! chunk's product adding into the first's sum) equals one chunk's. Its own test binary: it
//! sets `RB_LOGITS_CHUNK_MIB`, which no other thread may read meanwhile.

use rusting_brain::{backend::cuda, DType, Tensor};

#[test]
fn the_head_s_weight_gradient_summed_over_chunks_equals_one_chunk_s() {
    let Some(dev) = cuda::device_for_test("the_head_s_weight_gradient_summed_over_chunks") else {
        return;
    };
    use rusting_brain::{linear_cross_entropy, CrossEntropyOptions};
    // 3,000 rows of 1,000 BF16 logits are 6 MB: chunks of 1 MiB take six, each adding its
    // product into the first one's sum. The sums differ from one product's only in the order
    // of float additions.
    let (rows, d, classes) = (3000, 64, 1000);
    let h = Tensor::randn(&[rows, d], DType::F32, None)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let w = Tensor::randn(&[classes, d], DType::F32, None).unwrap();
    let w = w.mul_scalar(0.1).unwrap().to_device(dev).unwrap();
    let t: Vec<i64> = (0..rows as i64)
        .map(|r| (r * 7919) % classes as i64)
        .collect();
    let t = Tensor::from_vec(t, &[rows])
        .unwrap()
        .to_device(dev)
        .unwrap();
    let grad_with_chunk_mib = |mib: &str| {
        std::env::set_var("RB_LOGITS_CHUNK_MIB", mib);
        let w = w.detach().requires_grad_().unwrap();
        rusting_brain::amp::autocast(Some(DType::BF16), || {
            linear_cross_entropy(&h, &w, &t, CrossEntropyOptions::default())?.backward()
        })
        .unwrap();
        std::env::remove_var("RB_LOGITS_CHUNK_MIB");
        w.grad().unwrap().to_vec_f32().unwrap()
    };
    let (chunked, whole) = (grad_with_chunk_mib("1"), grad_with_chunk_mib("2048"));
    let scale = whole.iter().fold(0f32, |m, x| m.max(x.abs()));
    for (i, (c, o)) in chunked.iter().zip(&whole).enumerate() {
        assert!(
            (c - o).abs() <= 1e-5 * scale,
            "dW[{i}]: {c} in six chunks, {o} in one (largest {scale})"
        );
    }
}
