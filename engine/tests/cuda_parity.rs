//! CUDA parity: every op of the op table runs on CUDA and on the CPU from the same seeded inputs,
//! in every dtype the table lists, and outputs and the gradients of every float input must agree
//! (see cuda_parity/harness.rs for the tolerances). One test per op family; each skips without
//! a GPU (set RB_REQUIRE_CUDA=1 to make a missing GPU fail instead).
//!
//! `every_op_in_the_table_has_a_cuda_parity_case` runs everywhere and fails when an op is added
//! to the table without a case in its family's file under cuda_parity/cases/.
//! `cuda_parity_cases_hold_with_the_cpu_standing_in_for_cuda` runs every case with the CPU as the
//! device under test, so the cases and the BF16/F16 tolerances are exercised without a GPU.

#[path = "cuda_parity/cases/mod.rs"]
mod cases;
#[path = "cuda_parity/harness.rs"]
mod harness;

use cases::{cases, Family};
use harness::{check, Outcome};
use rusting_brain::backend::cuda::device_for_test;
use rusting_brain::ops::table::OPS;
use rusting_brain::{DType, Device, Tensor};

/// Runs every case of every op of `family` in each of its table dtypes; returns the failures,
/// the (op, dtype) pairs whose reference errors, and the case count.
fn run_family(family: Option<Family>, device: Device) -> (Vec<String>, Vec<String>, usize) {
    let (mut failures, mut unsupported, mut ran) = (Vec::new(), Vec::new(), 0);
    for op in OPS {
        let Some((fam, op_cases)) = cases(op.name) else {
            continue;
        };
        if family.is_some_and(|f| f != fam) {
            continue;
        }
        for &dtype in op.dtypes {
            let mut worst = (0.0f64, String::new());
            for case in &op_cases {
                ran += 1;
                match check(op, case, dtype, device) {
                    Outcome::Pass(r) if r > worst.0 => worst = (r, case.label.clone()),
                    Outcome::Pass(_) => {}
                    Outcome::ReferenceError(e) => unsupported.push(e),
                    Outcome::Fail(e) => failures.push(e),
                }
            }
            if worst.0 > 0.5 {
                // Close calls are worth seeing in a passing run's output (--nocapture).
                println!(
                    "{} {dtype}: worst error {:.0}% of the allowed ({})",
                    op.name,
                    worst.0 * 100.0,
                    worst.1
                );
            }
        }
    }
    (failures, unsupported, ran)
}

fn parity(test: &str, family: Family) {
    let Some(device) = device_for_test(test) else {
        return;
    };
    let (failures, unsupported, ran) = run_family(Some(family), device);
    for u in &unsupported {
        println!("not compared (the CPU reference rejects it): {u}");
    }
    assert!(
        failures.is_empty(),
        "{family:?}: {} of {ran} cases differ between {device} and the CPU:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_op_in_the_table_has_a_cuda_parity_case() {
    let missing: Vec<&str> = OPS
        .iter()
        .filter(|o| cases(o.name).is_none_or(|(_, c)| c.is_empty()))
        .map(|o| o.name)
        .collect();
    assert!(
        missing.is_empty(),
        "ops of the op table without a CUDA parity case (add a line to their family's table under engine/tests/cuda_parity/cases/): {missing:?}"
    );
}

#[test]
fn every_cuda_parity_entry_names_an_op_of_the_table_once() {
    let names = cases::entry_names();
    let unknown: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !OPS.iter().any(|o| o.name == *n))
        .collect();
    let twice: Vec<&str> = names
        .iter()
        .enumerate()
        .filter(|&(i, n)| names[..i].contains(n))
        .map(|(_, n)| *n)
        .collect();
    assert!(
        unknown.is_empty() && twice.is_empty(),
        "parity entries for ops not in the op table: {unknown:?}; entries listed twice (only the first runs): {twice:?}"
    );
}

/// With the CPU as the device under test, F32 compares the CPU with itself, but BF16 and F16
/// compare the CPU's half-precision path with its F32 path: the tolerances are checked against
/// real rounding, and every case must build and run in every dtype the table lists.
#[test]
fn cuda_parity_cases_hold_with_the_cpu_standing_in_for_cuda() {
    let (failures, unsupported, ran) = run_family(None, Device::Cpu);
    assert!(
        failures.is_empty() && unsupported.is_empty(),
        "{} of {ran} cases fail on the CPU alone:\n{}\nand these error in the reference, though the table lists the dtype:\n{}",
        failures.len(),
        failures.join("\n"),
        unsupported.join("\n")
    );
}

#[test]
fn cuda_parity_elementwise() {
    parity("cuda_parity_elementwise", Family::Elementwise);
}

#[test]
fn cuda_parity_binary() {
    parity("cuda_parity_binary", Family::Binary);
}

#[test]
fn cuda_parity_compare_and_select() {
    parity("cuda_parity_compare_and_select", Family::CompareSelect);
}

#[test]
fn cuda_parity_reduce() {
    parity("cuda_parity_reduce", Family::Reduce);
}

#[test]
fn cuda_parity_norms() {
    parity("cuda_parity_norms", Family::Norms);
}

#[test]
fn cuda_parity_attention() {
    parity("cuda_parity_attention", Family::Attention);
}

#[test]
fn cuda_parity_softmax() {
    parity("cuda_parity_softmax", Family::Softmax);
}

#[test]
fn cuda_parity_views_and_copies() {
    parity("cuda_parity_views_and_copies", Family::Views);
}

#[test]
fn cuda_parity_index() {
    parity("cuda_parity_index", Family::Index);
}

#[test]
fn cuda_parity_matmul() {
    parity("cuda_parity_matmul", Family::Matmul);
}

#[test]
fn cuda_parity_conv_and_pool() {
    parity("cuda_parity_conv_and_pool", Family::ConvPool);
}

#[test]
fn cuda_parity_losses() {
    parity("cuda_parity_losses", Family::Losses);
}

#[test]
fn cuda_parity_creation_and_random() {
    parity("cuda_parity_creation_and_random", Family::Creation);
}

#[test]
fn cuda_op_with_inputs_on_different_devices_is_an_error_naming_both_devices() {
    let test = "cuda_op_with_inputs_on_different_devices_is_an_error_naming_both_devices";
    let Some(dev) = device_for_test(test) else {
        return;
    };
    let host = Tensor::randn(&[3, 4], DType::F32, None).unwrap();
    let gpu = host.to_device(dev).unwrap();
    let cond = host.gt_scalar(0.0).unwrap();
    let img = Tensor::randn(&[1, 2, 5, 5], DType::F32, None).unwrap();
    let kernel = Tensor::randn(&[3, 2, 3, 3], DType::F32, None)
        .unwrap()
        .to_device(dev)
        .unwrap();
    type Attempt<'a> = (&'a str, Box<dyn Fn() -> rusting_brain::Result<Tensor> + 'a>);
    let attempts: Vec<Attempt> = vec![
        ("add cpu+cuda", Box::new(|| host.add(&gpu))),
        ("add cuda+cpu", Box::new(|| gpu.add(&host))),
        ("sub", Box::new(|| gpu.sub(&host))),
        ("mul", Box::new(|| host.mul(&gpu))),
        ("div", Box::new(|| gpu.div(&host))),
        ("maximum", Box::new(|| gpu.maximum(&host))),
        ("minimum", Box::new(|| host.minimum(&gpu))),
        ("eq", Box::new(|| gpu.eq(&host))),
        ("lt", Box::new(|| host.lt(&gpu))),
        ("matmul", Box::new(|| host.matmul(&gpu.t()?))),
        (
            "where (cpu condition)",
            Box::new(|| Tensor::where_cond(&cond, &gpu, &gpu)),
        ),
        (
            "where (mixed values)",
            Box::new(|| Tensor::where_cond(&cond, &host, &gpu)),
        ),
        (
            "cat",
            Box::new(|| Tensor::cat(&[host.clone(), gpu.clone()], 0)),
        ),
        (
            "stack",
            Box::new(|| Tensor::stack(&[gpu.clone(), host.clone()], 0)),
        ),
        (
            "conv2d",
            Box::new(|| img.conv2d(&kernel, None, Default::default())),
        ),
        (
            "mse_loss",
            Box::new(|| rusting_brain::mse_loss(&gpu, &host, rusting_brain::Reduction::Mean)),
        ),
    ];
    let mut wrong = Vec::new();
    for (name, attempt) in &attempts {
        match attempt() {
            Ok(t) => wrong.push(format!("{name}: succeeded (on {})", t.device())),
            Err(e) => {
                let msg = e.to_string();
                if !(msg.contains("cpu") && msg.contains(&dev.to_string())) {
                    wrong.push(format!(
                        "{name}: the error does not name both devices: {msg}"
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "mixed-device ops:\n{}", wrong.join("\n"));
}

/// Bit patterns of a tensor's elements, read back on the host (f64 holds every value of every
/// dtype but the largest i64s exactly, so i64 reads as i64).
fn bits(t: &Tensor) -> Vec<u64> {
    if t.dtype() == DType::I64 {
        return t
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|v| v as u64)
            .collect();
    }
    t.to_vec_f64()
        .unwrap()
        .into_iter()
        .map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() })
        .collect()
}

#[test]
fn cuda_to_device_round_trips_every_dtype_exactly() {
    let Some(dev) = device_for_test("cuda_to_device_round_trips_every_dtype_exactly") else {
        return;
    };
    let mut wrong = Vec::new();
    for dtype in DType::ALL {
        let special: Vec<f64> = match dtype {
            DType::Bool => vec![0.0, 1.0],
            DType::U8 => vec![0.0, 1.0, 127.0, 128.0, 255.0],
            DType::U32 => vec![0.0, 1.0, 65_535.0, 2_147_483_648.0, 4_294_967_295.0],
            DType::I64 => vec![
                0.0,
                -1.0,
                1.0,
                -9_007_199_254_740_992.0,
                9_007_199_254_740_992.0,
            ],
            _ => vec![
                0.0,
                -0.0,
                1.0,
                -2.5,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                1e-6,
                65504.0,
                3.0e38,
            ],
        };
        let random = Tensor::randn(&[37, 41], DType::F32, None)
            .unwrap()
            .affine(50.0, 0.0)
            .unwrap();
        let mut tensors = vec![
            (
                "special values",
                Tensor::from_f64s(&special, &[special.len()], dtype).unwrap(),
            ),
            ("[37, 41]", random.to_dtype(dtype).unwrap()),
        ];
        if dtype == DType::I64 {
            tensors.push((
                "i64 extremes",
                Tensor::from_vec(vec![i64::MIN, i64::MAX, -3], &[3]).unwrap(),
            ));
        }
        let base = tensors[1].1.clone();
        tensors.push(("a transposed view", base.t().unwrap()));
        tensors.push((
            "a narrowed view at an offset",
            base.narrow(1, 5, 17).unwrap().narrow(0, 3, 20).unwrap(),
        ));
        tensors.push((
            "an empty [0, 3]",
            Tensor::zeros(&[0, 3], dtype, Device::Cpu).unwrap(),
        ));
        for (what, t) in &tensors {
            let result = t.to_device(dev).and_then(|g| {
                if g.device() != dev || g.dtype() != dtype || g.shape() != t.shape() {
                    return Ok(Err(format!(
                        "on the device as {:?} {} {:?}",
                        g.device(),
                        g.dtype(),
                        g.shape()
                    )));
                }
                let back = g.to_device(Device::Cpu)?;
                Ok(
                    if back.device() != Device::Cpu
                        || back.dtype() != dtype
                        || back.shape() != t.shape()
                    {
                        Err(format!(
                            "back as {:?} {} {:?}",
                            back.device(),
                            back.dtype(),
                            back.shape()
                        ))
                    } else if bits(&back) != bits(t) {
                        Err("values changed".to_string())
                    } else if bits(&g.contiguous()?) != bits(t) {
                        Err("values changed reading the device copy directly".to_string())
                    } else {
                        Ok(())
                    },
                )
            });
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => wrong.push(format!("{dtype} {what}: {e}")),
                Err(e) => wrong.push(format!("{dtype} {what}: {e}")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "to_device round trips:\n{}",
        wrong.join("\n")
    );
}
