//! Counter-based random numbers (Philox 4x32-10). A draw is a pure function of (seed, counter),
//! so the same seed gives the same numbers on every device and any thread split, and a generator
//! is just two integers that save and restore exactly.

use std::sync::Mutex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generator {
    seed: u64,
    /// Number of 32-bit words drawn so far.
    offset: u64,
}

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Four 32-bit random words for `counter` under `key`.
pub fn philox4x32(counter: u64, key: u64) -> [u32; 4] {
    let mut c = [counter as u32, (counter >> 32) as u32, 0, 0];
    let mut k = [key as u32, (key >> 32) as u32];
    for _ in 0..10 {
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        c = [
            ((p1 >> 32) as u32) ^ c[1] ^ k[0],
            p1 as u32,
            ((p0 >> 32) as u32) ^ c[3] ^ k[1],
            p0 as u32,
        ];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

impl Generator {
    pub fn new(seed: u64) -> Self {
        Generator { seed, offset: 0 }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Restores a generator saved with `seed()` and `offset()`.
    pub fn from_state(seed: u64, offset: u64) -> Self {
        Generator { seed, offset }
    }

    /// Moves past `words` words without drawing them and returns the offset they start at, for
    /// a device that draws the same words itself (a CUDA draw of n uniforms takes n words, of
    /// n normals 2n, as `uniform` and `normal` do here).
    pub fn advance(&mut self, words: u64) -> u64 {
        let start = self.offset;
        self.offset = self.offset.wrapping_add(words);
        start
    }

    /// `n` uniform words; the generator advances past them.
    pub fn next_u32s(&mut self, n: usize) -> Vec<u32> {
        let start = self.offset;
        self.offset += n as u64;
        let first_block = start / 4;
        let last_block = (start + n as u64).div_ceil(4);
        let mut out = Vec::with_capacity(n);
        for b in first_block..last_block {
            let words = philox4x32(b, self.seed);
            for (j, &w) in words.iter().enumerate() {
                let pos = b * 4 + j as u64;
                if pos >= start && pos < start + n as u64 {
                    out.push(w);
                }
            }
        }
        out
    }

    /// Uniform floats in [0, 1) with 24 bits of precision.
    pub fn uniform(&mut self, n: usize) -> Vec<f64> {
        self.next_u32s(n)
            .into_iter()
            .map(|w| (w >> 8) as f64 / (1u32 << 24) as f64)
            .collect()
    }

    /// Standard normal draws by Box-Muller over pairs of words.
    pub fn normal(&mut self, n: usize) -> Vec<f64> {
        let words = self.next_u32s(2 * n);
        words
            .chunks_exact(2)
            .map(|p| {
                // u1 in (0, 1] so the log is finite.
                let u1 = ((p[0] >> 8) as f64 + 1.0) / (1u32 << 24) as f64;
                let u2 = (p[1] >> 8) as f64 / (1u32 << 24) as f64;
                (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
            })
            .collect()
    }

    /// Integers in [low, high), by rejection so every value is equally likely.
    pub fn integers(&mut self, low: i64, high: i64, n: usize) -> Vec<i64> {
        let span = (high - low) as u64;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            for w in self.next_u32s(2 * (n - out.len())).chunks_exact(2) {
                let x = ((w[0] as u64) << 32) | w[1] as u64;
                let zone = u64::MAX - (u64::MAX % span);
                if x < zone && out.len() < n {
                    out.push(low + (x % span) as i64);
                }
            }
        }
        out
    }

    /// A seeded Fisher-Yates permutation of 0..n.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.integers(0, i as i64 + 1, 1)[0] as usize;
            p.swap(i, j);
        }
        p
    }
}

static DEFAULT: Mutex<Generator> = Mutex::new(Generator { seed: 0, offset: 0 });

/// Reseeds the default generator that constructors without an explicit generator use.
pub fn manual_seed(seed: u64) {
    *DEFAULT.lock().unwrap_or_else(|e| e.into_inner()) = Generator::new(seed);
}

/// Runs `f` with the default generator.
pub fn with_default<R>(f: impl FnOnce(&mut Generator) -> R) -> R {
    f(&mut DEFAULT.lock().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_depend_only_on_seed_and_position() {
        let mut a = Generator::new(7);
        let all = a.next_u32s(10);
        let mut b = Generator::new(7);
        let mut split = b.next_u32s(3);
        split.extend(b.next_u32s(7));
        assert_eq!(all, split);
        assert_ne!(Generator::new(8).next_u32s(10), all);
    }

    #[test]
    fn normal_draws_have_unit_variance() {
        let v = Generator::new(1).normal(100_000);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.02,
            "mean {mean} var {var}"
        );
    }

    #[test]
    fn advance_skips_exactly_the_words_a_draw_takes() {
        let mut a = Generator::new(9);
        a.uniform(5);
        a.normal(3);
        let mut b = Generator::new(9);
        assert_eq!(b.advance(5), 0);
        assert_eq!(b.advance(6), 5);
        assert_eq!(a, b);
    }

    #[test]
    fn integers_stay_in_range_and_cover_it() {
        let v = Generator::new(3).integers(-2, 3, 1000);
        assert!(v.iter().all(|&x| (-2..3).contains(&x)));
        for k in -2..3 {
            assert!(v.contains(&k));
        }
    }
}
