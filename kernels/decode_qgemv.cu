// Fused decode products with Q4_K weights: the prologues and epilogues of
// decode_gemv.cu (decode_gemv.cuh) around quant_matmul.cu's int4 GEMV (quant_blocks.cuh). A
// file of its own so that a dense model's first decode step does not compile these kernels:
// their unrolled loops took NVRTC and ptxas two of decode_gemv.cu's two and a half minutes.

// What the composition does for BF16 activations (engine/src/ops/quant_matmul.rs): the
// prologue's output in BF16, rounded to int8 in blocks of 32 (quantize_activations), then the
// int4 GEMV (quant_blocks.cuh), whose sums are rounded to BF16. Here every block stages the
// prologue's output in BF16 as the other forms do, rounds it to int8 in shared memory with the
// same arithmetic (`quantize_block32`), and its warps walk the targets' row groups as that GEMV
// does, reading the activations from shared memory. The sums go through gemv_finish (the
// residual's add) or, for SwiGLU's gate and up, are gated in pairs (a group's rows R / 2 ..
// R - 1 are the up rows of its gate rows 0 .. R / 2 - 1). M: the compiled activation rows
// (rows <= M; the codes of rows past `rows` are zeros).
// Shared memory: BF16 rows [rows, k], int8 codes [M, k], (scale, scale * sum) [M, k / 32], the
// norms [GEMV_MAX_ROWS]. Mirrors `block_shared_bytes` in decode_gemv.rs.

// Stores a group's sums as products (rows of target `target`, which starts at global row
// `start`), through gemv_finish.
template <int M> struct QgemvStore {
    const GemvTargets& t;
    i64 start;
    int n, rows, res_dt, out_dt;
    const void* res;
    __device__ void operator()(const float (&acc)[Int4Rows<M>::R][M], int row0, int first) const {
#pragma unroll
        for (int i = 0; i < Int4Rows<M>::R; ++i) {
            const int row = row0 + i;
            if (row < first || row >= n) continue;
#pragma unroll
            for (int r = 0; r < M; ++r)
                if (r < rows) gemv_finish<bf16>(t, start + row, r, acc[i][r], res, res_dt, out_dt);
        }
    }
};

// Stores silu(gate) * up of a paired group into the first target's output [rows, n], as the
// tensor-core form's SwiGLU epilogue does.
template <int M> struct QgemvGate {
    void* y;
    int n, rows, out_dt;
    __device__ void operator()(const float (&acc)[Int4Rows<M>::R][M], int row0, int first) const {
        constexpr int H = Int4Rows<M>::R / 2;
#pragma unroll
        for (int i = 0; i < H; ++i) {
            const int row = row0 + i;
            if (row < first || row >= n) continue;
#pragma unroll
            for (int r = 0; r < M; ++r) {
                if (r >= rows) continue;
                const float a = to_f(from_f<bf16>(acc[i][r])), u = to_f(from_f<bf16>(acc[i + H][r]));
                gemv_store1(y, out_dt, (i64)r * n + row, gemv_gate(a, u));
            }
        }
    }
};

template <int PRO, int EPI, class Weights, int M>
__device__ void decode_qgemv_impl(const GemvTargets& t, const void* in0, const void* in1, int in_dt, int aux_dt,
                                  const void* res, int res_dt, int out_dt, int rows, int k, float eps) {
    extern __shared__ uint4 gemv_smem[];
    using G = Int4Gemv<M, Weights, SharedActivations>;
    bf16* xs = reinterpret_cast<bf16*>(gemv_smem);
    u8* codes = reinterpret_cast<u8*>(xs + (i64)rows * k);
    float2* scales = reinterpret_cast<float2*>(codes + (i64)M * k);
    float* rstd = reinterpret_cast<float*>(scales + (i64)M * (k / 32));
    // Launched dependently in a decode step: wait for the kernel before, which writes the input.
    rb_grid_release();
    rb_grid_wait();
    gemv_stage<bf16, PRO>(in0, in1, in_dt, aux_dt, rows, k, eps, xs, k, rstd);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, per_row = k / 32;
    for (int b = warp; b < M * per_row; b += GEMV_WARPS) {
        const float v = b / per_row < rows ? to_f(xs[(i64)b * 32 + lane]) : 0.f;
        const Int8Block q = quantize_block32(v);
        codes[(i64)b * 32 + lane] = (u8)(signed char)q.q;
        if (lane == 0) scales[b] = make_float2(q.d, q.dsum);
    }
    __syncthreads();
    const int gwarp = blockIdx.x * GEMV_WARPS + warp, warps = gridDim.x * GEMV_WARPS;
    if (EPI == GEMV_EPI_SWIGLU) {
        const int n = (int)(t.end[1] / 2);
        G g(reinterpret_cast<const u8*>(t.w[0]), reinterpret_cast<const u8*>(t.w[1]), n, k, codes, scales, k);
        QgemvGate<M> gate{reinterpret_cast<void*>(t.y[0]), n, rows, out_dt};
        int4_walk(g, gwarp * (G::R / 2), warps * (G::R / 2), gate);
        return;
    }
    // The targets' groups follow one another across the warps (target s's first group goes to
    // the warp after target s - 1's last), so the grid the host sizes for all of them gives
    // each warp about one group.
    int before = 0; // groups of the targets before s
    for (int s = 0; s < t.count; ++s) {
        // Target s's rows: a select over the unrolled index keeps the struct in parameter space.
        i64 start = 0, end = t.end[0];
#pragma unroll
        for (int i = 1; i < GEMV_TARGETS; ++i)
            if (i == s) {
                start = t.end[i - 1];
                end = t.end[i];
            }
        const int n = (int)(end - start);
        G g(reinterpret_cast<const u8*>(gemv_pick(t.w, s)), nullptr, n, k, codes, scales, k);
        QgemvStore<M> store{t, start, n, rows, res_dt, out_dt, res};
        const int mine = ((gwarp - before % warps) % warps + warps) % warps;
        int4_walk(g, mine * G::R, warps * G::R, store);
        before += (n + G::R - 1) / G::R;
    }
}

#define RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, M, EPI, sfx)                                                     \
    RB_BOUNDED_KERNEL(decode_qgemv_##pro##_##fmt##_m##M##sfx, GEMV_THREADS)(           \
        GemvTargets t, const void* in0, const void* in1, int in_dt, int aux_dt, const void* res, int res_dt,      \
        int out_dt, int rows, int k, float eps) {                                                                 \
        decode_qgemv_impl<PRO, EPI, WEIGHTS, M>(t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows, k, eps);   \
    }
#define RB_DECODE_QGEMV_ROWS(pro, PRO, fmt, WEIGHTS, EPI, sfx) \
    RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, 1, EPI, sfx)       \
    RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, 2, EPI, sfx)       \
    RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, 4, EPI, sfx)       \
    RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, 8, EPI, sfx)
// Q4_K only: each format's 20 kernels take NVRTC and ptxas about a minute, paid at the first
// decode step; Q4_1 (the int4 GEMV serves it too) composes.
#define RB_DECODE_QGEMV_FORMATS(pro, PRO, EPI, sfx) RB_DECODE_QGEMV_ROWS(pro, PRO, Q4_K, Q4_KWeights, EPI, sfx)
RB_DECODE_QGEMV_FORMATS(norm, GEMV_NORM, GEMV_EPI_STORE, )
RB_DECODE_QGEMV_FORMATS(swiglu, GEMV_SWIGLU, GEMV_EPI_STORE, )
RB_DECODE_QGEMV_FORMATS(cast, GEMV_CAST, GEMV_EPI_STORE, )
RB_DECODE_QGEMV_FORMATS(norm, GEMV_NORM, GEMV_EPI_SWIGLU, _pair)
RB_DECODE_QGEMV_FORMATS(cast, GEMV_CAST, GEMV_EPI_SWIGLU, _pair)
