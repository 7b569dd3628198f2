//! The decode products from Q4_K blocks (kernels/decode_qgemv.cu): the prologue staged in BF16,
//! rounded to int8 in shared memory, then the int4 GEMV's warp loop with the epilogue.

use super::*;

/// The block-format form of `decode_gemv` (`Weights::Blocks`): a store, residual or SwiGLU
/// epilogue, BF16 products.
pub(super) fn decode_gemv_blocks(
    prologue: &Prologue,
    rows: usize,
    k: usize,
    weights: &[(At, usize)],
    format: BlockFormat,
    epilogue: Epilogue,
    out_dtype: DType,
) -> Result<Vec<CudaStorage>> {
    let dev = weights[0].0 .0.cuda_device();
    if !supports_blocks(dev, rows, k, weights.len(), format) {
        return Err(invalid(format!(
            "{rows} rows of {k} with {} {} weights are outside the kernels (1..={BLOCK_MAX_ROWS} rows, 1..={TARGETS} weights, Q4_K with whole blocks, {} bytes of shared memory at most)",
            weights.len(),
            format.name(),
            dev.shared_limit()
        )));
    }
    let (residual, pair) = match epilogue {
        Epilogue::Products => (None, false),
        Epilogue::Rotary(_) => {
            return Err(invalid(
                "the rotary epilogue takes dense weights, not blocks".into(),
            ))
        }
        Epilogue::Residual(r) if weights.len() == 1 => (Some(r), false),
        Epilogue::Swiglu if matches!(weights, [(_, a), (_, b)] if a == b)
            && !matches!(prologue, Prologue::Swiglu { .. }) =>
        {
            (None, true)
        }
        _ => {
            return Err(invalid(format!(
                "block-format weights take a store, a residual (one weight) or the SwiGLU epilogue (gate and up of one width, after a norm or a plain input); got {} weights",
                weights.len()
            )))
        }
    };
    if prologue_apart(prologue, rows) {
        let staged = prologue_alone(prologue, rows, k, DType::BF16)?;
        let plain = Prologue::Plain { x: (&staged, 0) };
        return decode_gemv_blocks(&plain, rows, k, weights, format, epilogue, out_dtype);
    }
    let (in0, in1, in_dt, aux_dt, eps) = prologue_args(prologue, rows, k)?;
    let out_dt = dtype_code(out_dtype)?;
    let (res, res_dt) = residual_args(residual, rows * weights[0].1)?;
    let mut t = Targets::new(weights.len());
    let mut total = 0usize;
    for (i, &(w, n)) in weights.iter().enumerate() {
        if w.0.dtype() != DType::U8 {
            return Err(invalid(format!(
                "weight {i} holds {} blocks as U8, got {:?}",
                format.name(),
                w.0.dtype()
            )));
        }
        t.w[i] = check_span(&format!("weight {i}"), w, format.stored_bytes(n, k)?, true)?;
        total += n;
        t.end[i] = total as i64;
    }
    let outs = weights[..if pair { 1 } else { weights.len() }]
        .iter()
        .map(|&(_, n)| CudaStorage::alloc(dev, rows * n, out_dtype))
        .collect::<Result<Vec<_>>>()?;
    for (slot, o) in outs.iter().enumerate() {
        t.y[slot] = o.ptr();
    }
    let m = block_rows(rows);
    let name = format!(
        "decode_qgemv_{}_{}_m{m}{}",
        prologue.name(),
        format.name(),
        if pair { "_pair" } else { "" }
    );
    let f = dev.function(&DECODE_QGEMV, &name)?;
    let shared = block_shared_bytes(rows, k);
    // The kernel waits for the kernel before it first thing, so it may always start early.
    let how = Launch {
        dependent: FIXED_WEIGHTS.get(),
        cluster: 1,
    };
    let resident = resident_blocks(dev, f, shared, how)?;
    // Row groups of the int4 loop (kernels/quant_blocks.cuh's Int4Rows: 4 rows a warp up to 2
    // activation rows, else 2; paired, half of them in each weight), a warp each.
    let group = if m <= 2 { 4 } else { 2 };
    let groups: usize = if pair {
        weights[0].1.div_ceil(group / 2)
    } else {
        weights.iter().map(|&(_, n)| n.div_ceil(group)).sum()
    };
    let grid = groups.div_ceil(WARPS).clamp(1, resident.max(1) as usize) as u32;
    let (rows32, k32) = (rows as i32, k as i32);
    // SAFETY: the inputs' spans were checked (`prologue_args`, the residual rows × n_0), each
    // weight holds the stored bytes of its n_i × k blocks, the outputs are fresh buffers of
    // rows × n_i (or rows × n_0 gated), and `shared` is what the kernel carves for `rows` rows,
    // allowed on `f` by `resident_blocks`.
    let params = &mut args![t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows32, k32, eps];
    unsafe { dev.launch_with(how, f, (grid, 1, 1), THREADS, shared as u32, params)? };
    Ok(outs)
}
