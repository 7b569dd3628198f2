//! NMS of a head output on CUDA (backend/src/cuda/nms.rs) keeps exactly the CPU path's rows:
//! the same boxes, scores and classes bit for bit, from the same anchors, in the same order,
//! on crowded random heads with many tied scores, for multi-label and best-class rows, class
//! filters, agnostic suppression, the max_nms and max_det cuts, F16 input and batches of tiny
//! heads. Skips without a GPU (RB_REQUIRE_CUDA=1 makes that a failure).

use rusting_brain::backend::cuda::device_for_test;
use rusting_brain::vision::nms::{non_max_suppression, Detections, NmsOptions};
use rusting_brain::{DType, Tensor};

/// A head [batch, 4 + nc, anchors] whose boxes crowd around a few centres (so most pairs
/// overlap) and whose scores are multiples of 1/64 (so many tie).
fn crowded_head(batch: usize, nc: usize, anchors: usize, seed: u64) -> Tensor {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let channels = 4 + nc;
    let mut data = vec![0f32; batch * channels * anchors];
    for b in 0..batch {
        let image = &mut data[b * channels * anchors..(b + 1) * channels * anchors];
        for a in 0..anchors {
            let centre = (a % 5) as f32 * 60.0 + 100.0;
            let values = [
                centre + uniform() * 20.0,
                centre + uniform() * 20.0,
                30.0 + uniform() * 40.0,
                30.0 + uniform() * 40.0,
            ];
            for (k, v) in values.into_iter().enumerate() {
                image[k * anchors + a] = v;
            }
            for k in 0..nc {
                // A third of the scores sit below any threshold used here.
                let s = (uniform() * 64.0).floor() / 64.0;
                image[(4 + k) * anchors + a] = if uniform() < 0.33 { s * 1e-4 } else { s };
            }
        }
    }
    Tensor::from_vec(data, &[batch, channels, anchors]).unwrap()
}

fn bits(d: &Detections) -> Vec<[u32; 6]> {
    d.rows().iter().map(|r| r.map(f32::to_bits)).collect()
}

#[test]
fn cuda_nms_keeps_the_cpu_rows_bit_for_bit() {
    let Some(dev) = device_for_test("cuda_nms_keeps_the_cpu_rows_bit_for_bit") else {
        return;
    };
    let validation = NmsOptions::validation();
    let cases: Vec<(&str, [usize; 3], DType, NmsOptions)> = vec![
        ("validation", [5, 3, 2000], DType::F32, validation.clone()),
        (
            "best class",
            [3, 4, 1500],
            DType::F32,
            NmsOptions::prediction(),
        ),
        (
            "max_nms and max_det cuts among ties",
            [4, 3, 1200],
            DType::F32,
            NmsOptions {
                max_nms: 100,
                max_det: 20,
                ..validation.clone()
            },
        ),
        (
            "agnostic with a class filter",
            [3, 4, 800],
            DType::F32,
            NmsOptions {
                agnostic: true,
                classes: Some(vec![0, 2]),
                ..validation.clone()
            },
        ),
        ("one class", [3, 1, 900], DType::F32, validation.clone()),
        (
            "tiny heads, many images",
            [40, 2, 21],
            DType::F32,
            validation.clone(),
        ),
        ("f16 scores", [4, 3, 1000], DType::F16, validation.clone()),
        ("bf16 scores", [2, 3, 1000], DType::BF16, validation.clone()),
        (
            "eighty classes",
            [2, 80, 8400],
            DType::F32,
            validation.clone(),
        ),
    ];
    for (i, (name, [batch, nc, anchors], dtype, opts)) in cases.into_iter().enumerate() {
        let head = crowded_head(batch, nc, anchors, 1 + i as u64)
            .to_dtype(dtype)
            .unwrap();
        let want = non_max_suppression(&head, &opts).unwrap();
        let on_device = head.to_device(dev).unwrap();
        let got = non_max_suppression(&on_device, &opts).unwrap();
        assert_eq!(got.len(), want.len(), "{name}: images");
        let mut kept = 0;
        for (b, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(bits(g), bits(w), "{name}: image {b} rows");
            assert_eq!(g.anchors, w.anchors, "{name}: image {b} anchors");
            kept += w.len();
        }
        // Each case keeps something, so it compares rows and not only empty lists.
        assert!(kept > 0, "{name}: nothing kept");
    }
}
