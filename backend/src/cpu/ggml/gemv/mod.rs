//! Products of a few activation rows with a weight kept in ggml blocks, on the host, reading
//! the blocks where they lie (the kernels' split layout, `cuda::quant_matmul::split`) instead
//! of a dense copy: a decode step reads a quarter (Q4_1) or about half (Q8_0) of F16's bytes.
//!
//! Activations come in one of two ways (`Activations`). As llama.cpp does, each row may first
//! be rounded to 8-bit blocks of 32 (a scale, and for Q4_1 the sum the weights' offset
//! multiplies), so a block's dot product is integer multiply-adds and one scale: Q8_0 · Q8_0
//! is d_w·d_x·Σ w·x, Q4_1 · Q8_1 is d_w·d_x·Σ q·x + m_w·s_x. Or the rows stay F32 and each
//! block is widened to floats in registers: the product of the dequantized weight, exactly up
//! to the order of the sums, for a layer whose outputs must equal the dense path's (a tied
//! head, whose logits pick the next token).
//!
//! Kernels by instruction set (`Isa`, detected once): AVX-512 with VNNI takes two blocks per
//! instruction, AVX2 with FMA and F16C (the development and CI machines') one, and scalar code
//! computes the same integers and floats elsewhere. Rows are shared among the threads of
//! `cpu::workers`.

mod avx2;
mod avx512;
mod scalar;
#[cfg(test)]
mod tests;

use crate::cpu::simd::{isa, Isa};
use crate::cpu::workers;
use crate::cuda::quant_matmul::{codes_offset, BlockFormat};
use crate::{Error, Result};
use half::f16;

/// Values per block of the formats read here (and of the activations' 8-bit blocks).
const BLOCK: usize = 32;

/// How far ahead of the blocks being multiplied the kernels ask for the weight's code bytes:
/// a product streams its weight from memory once, and the hardware's prefetchers alone kept a
/// core at 6 of the 9.6 GB/s it reads a plain stream at (the layers of SmolLM2-135M, one
/// thread, `cpu_qgemv`); 2 KiB ahead brought it to 8.9.
const PREFETCH_AHEAD: usize = 2048;

/// Asks for the cache lines `PREFETCH_AHEAD` past `codes`, `code_bytes` of them (what one
/// step of a kernel reads), and the line of headers as far ahead in blocks (`per_header_byte`:
/// code bytes per header byte, 4 for Q4_1 and 16 for Q8_0). Addresses past the weight are
/// hints only, never read.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch(codes: *const u8, headers: *const u8, code_bytes: usize, per_header_byte: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let mut line = 0;
    while line < code_bytes {
        // SAFETY: a prefetch reads nothing and faults on no address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(codes.wrapping_add(PREFETCH_AHEAD + line) as *const i8)
        };
        line += 64;
    }
    let ahead = headers.wrapping_add(PREFETCH_AHEAD / per_header_byte);
    // SAFETY: as above.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8) };
}

/// How a product reads its activation rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Activations {
    /// Rounded to 8-bit blocks of 32 first, as llama.cpp does: integer dot products.
    #[default]
    Int8,
    /// F32 as given: the dense product of the dequantized weight.
    F32,
}

/// Whether `quant_gemv` reads this format.
pub fn reads(format: BlockFormat) -> bool {
    matches!(format, BlockFormat::Q8_0 | BlockFormat::Q4_1)
}

/// One activation row as 8-bit blocks: per block a scale `d` (rounded through f16 as ggml
/// stores it), the block's sum `s` = d·Σq (Q4_1's offset multiplies it), and 32 codes.
struct Q8Row {
    d: Vec<f32>,
    /// `d` and `s` interleaved, as Q4_1's headers interleave d and m.
    ds: Vec<f32>,
    q: Vec<i8>,
}

impl Q8Row {
    fn s(&self, b: usize) -> f32 {
        self.ds[2 * b + 1]
    }
}

fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

fn quantize_row(x: &[f32]) -> Q8Row {
    let blocks = x.len() / BLOCK;
    let mut row = Q8Row {
        d: Vec::with_capacity(blocks),
        ds: Vec::with_capacity(2 * blocks),
        q: vec![0; x.len()],
    };
    for (values, codes) in x.chunks_exact(BLOCK).zip(row.q.chunks_exact_mut(BLOCK)) {
        let amax = values.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let inverse = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (c, v) in codes.iter_mut().zip(values) {
            *c = (v * inverse).round() as i8;
            sum += *c as i32;
        }
        row.d.push(f16_round(d));
        row.ds.extend([f16_round(d), f16_round(sum as f32 * d)]);
    }
    row
}

/// One F32 activation row, with what Q4_1's offsets multiply: per block `1` and Σx
/// interleaved (as the headers interleave d and m).
struct F32Row<'a> {
    x: &'a [f32],
    one_sums: Vec<f32>,
}

fn f32_row(x: &[f32]) -> F32Row<'_> {
    let one_sums = x
        .chunks_exact(BLOCK)
        .flat_map(|b| [1.0, b.iter().sum()])
        .collect();
    F32Row { x, one_sums }
}

/// The blocks of one weight row: per block its f16 header words and its codes.
struct WeightRow<'a> {
    headers: &'a [u8],
    codes: &'a [u8],
}

/// An [n, k] matrix stored split (every block's header, then every block's codes), read by rows.
struct WeightRows<'a> {
    headers: &'a [u8],
    codes: &'a [u8],
    /// Header and code bytes of one row.
    row_headers: usize,
    row_codes: usize,
}

impl<'a> WeightRows<'a> {
    /// `stored`, of `format.stored_bytes(n, k)` bytes (checked by the caller).
    fn new(format: BlockFormat, stored: &'a [u8], [n, k]: [usize; 2]) -> Self {
        // As `stored_bytes` counts them: a format without split headers moves none.
        let header = format.split_header().unwrap_or(0);
        let blocks = k / format.block_values();
        let (headers, codes) = stored.split_at(codes_offset(n * blocks * header));
        WeightRows {
            headers,
            codes,
            row_headers: blocks * header,
            row_codes: blocks * (format.block_bytes() - header),
        }
    }

    fn row(&self, r: usize) -> WeightRow<'a> {
        WeightRow {
            headers: &self.headers[r * self.row_headers..][..self.row_headers],
            codes: &self.codes[r * self.row_codes..][..self.row_codes],
        }
    }
}

/// Activation rows as the kernels read them.
enum Rows<'a> {
    Int8(Vec<Q8Row>),
    F32(Vec<F32Row<'a>>),
}

/// Σ over a row's blocks of the product with activation row `i`, in f32, by `isa`'s kernels.
fn dot(isa: Isa, format: BlockFormat, w: &WeightRow, rows: &Rows, i: usize) -> f32 {
    let q8_0 = format == BlockFormat::Q8_0;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `isa` is at most what the CPU has (`detected`), and each kernel checks that its
    // operands hold the row's blocks.
    unsafe {
        match (isa, rows, q8_0) {
            (Isa::Avx512, Rows::Int8(x), true) => return avx512::dot_q8_0(w, &x[i]),
            (Isa::Avx512, Rows::Int8(x), false) => return avx512::dot_q4_1(w, &x[i]),
            (Isa::Avx512, Rows::F32(x), true) => return avx512::dot_q8_0_f32(w, &x[i]),
            (Isa::Avx512, Rows::F32(x), false) => return avx512::dot_q4_1_f32(w, &x[i]),
            (Isa::Avx2, Rows::Int8(x), true) => return avx2::dot_q8_0(w, &x[i], 0),
            (Isa::Avx2, Rows::Int8(x), false) => return avx2::dot_q4_1(w, &x[i], 0),
            (Isa::Avx2, Rows::F32(x), true) => return avx2::dot_q8_0_f32(w, &x[i], 0),
            (Isa::Avx2, Rows::F32(x), false) => return avx2::dot_q4_1_f32(w, &x[i], 0),
            (Isa::Scalar, ..) => {}
        }
    }
    match (rows, q8_0) {
        (Rows::Int8(x), true) => scalar::dot_q8_0(w, &x[i]),
        (Rows::Int8(x), false) => scalar::dot_q4_1(w, &x[i]),
        (Rows::F32(x), true) => scalar::dot_q8_0_f32(w, &x[i]),
        (Rows::F32(x), false) => scalar::dot_q4_1_f32(w, &x[i]),
    }
}

/// y [m, n] = x [m, k] · Wᵀ for W [n, k] stored split in `format` (`stored`, the kernels'
/// layout), x row-major f32 read as `activations` says. `k` must be a whole number of
/// 32-value blocks.
pub fn quant_gemv(
    format: BlockFormat,
    stored: &[u8],
    [n, k]: [usize; 2],
    x: &[f32],
    m: usize,
    activations: Activations,
) -> Result<Vec<f32>> {
    let op = "quantized matmul";
    if !reads(format) {
        return Err(Error::invalid(
            op,
            format!(
                "the CPU product reads Q8_0 and Q4_1 blocks, not {}",
                format.name()
            ),
        ));
    }
    if !k.is_multiple_of(BLOCK) || x.len() != m * k || stored.len() != format.stored_bytes(n, k)? {
        return Err(Error::invalid(
            op,
            format!(
                "a {n}×{k} {} weight ({} bytes stored) times {m} rows of {k}: got {} bytes and {} values",
                format.name(),
                format.stored_bytes(n, k)?,
                stored.len(),
                x.len()
            ),
        ));
    }
    if m == 0 {
        return Ok(Vec::new());
    }
    let weights = WeightRows::new(format, stored, [n, k]);
    let rows = match activations {
        Activations::Int8 => Rows::Int8(x.chunks_exact(k).map(quantize_row).collect()),
        Activations::F32 => Rows::F32(x.chunks_exact(k).map(f32_row).collect()),
    };
    let isa = isa();
    // Computed as [n, m] so each task writes whole output rows of W, then transposed.
    let mut by_weight_row = vec![0f32; n * m];
    let shares = workers::Rows {
        len: m,
        grain: 16,
        work: n * k * m,
    };
    workers::for_each_rows(&mut by_weight_row, shares, |first, out| {
        for (i, y) in out.chunks_exact_mut(m).enumerate() {
            let w = weights.row(first + i);
            for (r, yi) in y.iter_mut().enumerate() {
                *yi = dot(isa, format, &w, &rows, r);
            }
        }
    });
    if m == 1 {
        return Ok(by_weight_row);
    }
    let mut y = vec![0f32; m * n];
    for (r, values) in by_weight_row.chunks_exact(m).enumerate() {
        for (i, v) in values.iter().enumerate() {
            y[i * n + r] = *v;
        }
    }
    Ok(y)
}
