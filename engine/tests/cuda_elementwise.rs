//! Element-wise kernels on CUDA: a binary op with one operand a single value broadcast to the
//! other's shape (a scale) streams the other in 16-byte words, and equals the op with that
//! value materialized at every element, bit for bit.

use rusting_brain::{backend::cuda, DType, Tensor};

fn bits(t: &Tensor) -> Vec<u32> {
    let v = t.to_dtype(DType::F32).unwrap().to_vec_f32().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn a_binary_op_with_a_broadcast_value_equals_it_with_the_value_materialized() {
    let Some(dev) = cuda::device_for_test("a_binary_op_with_a_broadcast_value") else {
        return;
    };
    // 1,003 elements: whole words and a tail; the value on either side of a non-commutative op.
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let x = Tensor::randn(&[17, 59], DType::F32, None).unwrap();
        let x = x.to_device(dev).unwrap().to_dtype(dtype).unwrap();
        let one = Tensor::from_vec(vec![0.37f32], &[]).unwrap();
        let one = one.to_device(dev).unwrap().to_dtype(dtype).unwrap();
        let everywhere = one.expand(x.shape()).unwrap().contiguous().unwrap();
        let cases: [(&str, Tensor, Tensor); 4] = [
            ("x - v", x.sub(&one).unwrap(), x.sub(&everywhere).unwrap()),
            ("v - x", one.sub(&x).unwrap(), everywhere.sub(&x).unwrap()),
            ("x / v", x.div(&one).unwrap(), x.div(&everywhere).unwrap()),
            ("v / x", one.div(&x).unwrap(), everywhere.div(&x).unwrap()),
        ];
        for (what, got, want) in cases {
            assert_eq!(got.shape(), want.shape(), "{what}, {dtype:?}");
            assert_eq!(bits(&got), bits(&want), "{what}, {dtype:?}");
        }
    }
}

/// A row (a bias [N]) broadcast over the leading dims streams by words too, on either side,
/// and equals the op with the row materialized; a row of a width that is not whole words, or
/// not aligned, takes the general path and agrees as well.
#[test]
fn a_binary_op_with_a_broadcast_row_equals_it_with_the_row_materialized() {
    let Some(dev) = cuda::device_for_test("a_binary_op_with_a_broadcast_row") else {
        return;
    };
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for (rows, width, offset) in [(37, 64, 0), (5, 24, 0), (9, 40, 8), (7, 20, 0), (6, 16, 3)] {
            let x = Tensor::randn(&[2, rows, width], DType::F32, None).unwrap();
            let x = x.to_device(dev).unwrap().to_dtype(dtype).unwrap();
            let row = Tensor::randn(&[offset + width], DType::F32, None).unwrap();
            let row = row.to_device(dev).unwrap().to_dtype(dtype).unwrap();
            let row = row.narrow(0, offset, width).unwrap();
            let everywhere = row.expand(x.shape()).unwrap().contiguous().unwrap();
            let cases: [(&str, Tensor, Tensor); 3] = [
                ("x + row", x.add(&row).unwrap(), x.add(&everywhere).unwrap()),
                ("row - x", row.sub(&x).unwrap(), everywhere.sub(&x).unwrap()),
                ("x / row", x.div(&row).unwrap(), x.div(&everywhere).unwrap()),
            ];
            for (what, got, want) in cases {
                let at = format!("{what}, {dtype:?}, {rows}x{width} at offset {offset}");
                assert_eq!(got.shape(), want.shape(), "{at}");
                assert_eq!(bits(&got), bits(&want), "{at}");
            }
        }
    }
}
