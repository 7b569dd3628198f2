//! Seeded uniform and normal draws on the device (kernels/random.cu), with the CPU generator's
//! Philox4x32-10 stream: for the same (seed, offset) a device draw gives the CPU's values
//! (uniform bit for bit; normal computed in f64 like the CPU, so it can differ only by the last
//! ulp of the device's log and cos, which rounding to f32 or narrower almost always hides).
//! Narrower dtypes round through f32 on both devices.

use super::compile::RANDOM;
use super::copy::cast;
use super::launch::{args, grid_for, type_suffix};
use super::{CudaDevice, CudaStorage};
use crate::{DType, Layout, Result};
use std::sync::Arc;

const BLOCK: u32 = 256;

/// What a capture refuses in a random draw: the seed and offset are kernel arguments from the
/// host's generator, so a replayed graph would draw the same numbers every time.
pub const RANDOM_IN_CAPTURE: &str = "a random draw (its seed is fixed at capture)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// [0, 1) from one word each.
    Uniform,
    /// Standard normal from two words each (Box-Muller).
    Normal,
}

impl Distribution {
    /// The generator words that `n` draws take.
    pub fn words(self, n: usize) -> u64 {
        match self {
            Distribution::Uniform => n as u64,
            Distribution::Normal => 2 * n as u64,
        }
    }
}

/// `n` draws of `dtype` using the words from `start` of the stream with key `seed`. Integer and
/// bool dtypes draw in F64 and convert as the CPU's `from_f64` does.
pub fn draw(
    dev: &Arc<CudaDevice>,
    n: usize,
    dtype: DType,
    dist: Distribution,
    seed: u64,
    start: u64,
) -> Result<CudaStorage> {
    if !dtype.is_float() {
        let wide = draw(dev, n, DType::F64, dist, seed, start)?;
        return cast(&wide, &Layout::contiguous(&[n]), dtype);
    }
    dev.refuse_in_capture(RANDOM_IN_CAPTURE)?;
    let out = CudaStorage::alloc(dev, n, dtype)?;
    if n == 0 {
        return Ok(out);
    }
    let kernel = match dist {
        Distribution::Uniform => "rand_uniform",
        Distribution::Normal => "rand_normal",
    };
    let f = dev.function(&RANDOM, &format!("{kernel}_{}", type_suffix(dtype)))?;
    // Uniform runs a thread per Philox block of 4 words, normal a thread per value.
    let threads = match dist {
        Distribution::Uniform => (start % 4 + n as u64).div_ceil(4) as usize,
        Distribution::Normal => n,
    };
    let grid = grid_for(threads, BLOCK, dev.sm_count());
    let (y, count) = (out.ptr(), n as i64);
    // SAFETY: y holds n elements of `dtype`; the kernel writes exactly those.
    unsafe { dev.launch(f, (grid, 1, 1), BLOCK, 0, &mut args![y, count, seed, start])? };
    Ok(out)
}
