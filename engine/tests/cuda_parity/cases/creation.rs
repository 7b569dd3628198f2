//! Creation and random ops: zeros, ones, full, arange, linspace, rand, randn, randint.

use super::{one, SIZES};
use crate::harness::{normal, Case};
use rusting_brain::{Generator, Result, Tensor};

pub const OPS: &[super::Entry] = &[
    ("zeros", || {
        creation(|a, s| Tensor::zeros(s, a.dtype(), a.device()))
    }),
    ("ones", || {
        creation(|a, s| Tensor::ones(s, a.dtype(), a.device()))
    }),
    ("full", || {
        creation(|a, s| Tensor::full(2.5, s, a.dtype(), a.device()))
    }),
    ("arange", || {
        creation(|a, s| {
            let n = (s[0] * s[1]) as f64;
            on_anchor(a, Tensor::arange(-3.0, n - 3.0, 1.0, a.dtype()))
        })
    }),
    ("linspace", || {
        creation(|a, s| on_anchor(a, Tensor::linspace(-1.5, 2.0, s[1], a.dtype())))
    }),
    // Drawn on the device itself: the CUDA Philox stream must give the CPU's values.
    ("rand", || {
        creation(|a, s| Tensor::rand_on(s, a.dtype(), a.device(), Some(&mut gen(11))))
    }),
    ("randn", || {
        creation(|a, s| Tensor::randn_on(s, a.dtype(), a.device(), Some(&mut gen(12))))
    }),
    ("randint", || {
        creation(|a, s| on_anchor(a, Tensor::randint(-5, 1000, s, Some(&mut gen(13)))))
    }),
];

/// Creation ops take the case's dtype and device from an anchor input.
fn creation(f: impl Fn(&Tensor, &[usize]) -> Result<Tensor> + Clone + 'static) -> Vec<Case> {
    SIZES
        .iter()
        .map(|&(r, c)| {
            let g = f.clone();
            Case::new(
                format!("[{r}, {c}]"),
                vec![normal(&[1]).frozen()],
                1,
                move |x| one(g(&x[0], &[r, c])),
            )
        })
        .collect()
}

/// Made on the host (where the seeded generators live) and moved to the anchor's device.
fn on_anchor(anchor: &Tensor, t: Result<Tensor>) -> Result<Tensor> {
    t?.to_device(anchor.device())?.contiguous()
}

fn gen(seed: u64) -> Generator {
    Generator::new(seed)
}
