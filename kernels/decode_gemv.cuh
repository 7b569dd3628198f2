// What the fused decode products share (kernels/decode_gemv.cu for dense weights,
// kernels/decode_qgemv.cu for block-quantized ones): the launch's targets, the operand dtypes,
// the prologue staged in shared memory, and the epilogue's stores. Prepended to both files
// after common.cuh (backend/src/cuda/compile.rs); the layout of the work is described in
// decode_gemv.cu.

#define GEMV_WARPS 8
#define GEMV_THREADS (GEMV_WARPS * 32)
#define GEMV_TARGETS 4

// Runtime dtypes of the operands that are not the weights (mirrors decode_gemv.rs).
#define GEMV_F32 0
#define GEMV_BF16 1
#define GEMV_F16 2

#define GEMV_NORM 0
#define GEMV_SWIGLU 1
#define GEMV_CAST 2

// The weights of one launch; mirrors `Targets` in backend/src/cuda/decode_gemv.rs. Target t
// owns global rows [end[t-1], end[t]) (end[-1] = 0); its weight is [n_t, k] of W and its output
// [rows, n_t], both contiguous.
struct GemvTargets {
    u64 w[GEMV_TARGETS];
    u64 y[GEMV_TARGETS];
    i64 end[GEMV_TARGETS];
    int count;
};

// What the tensor-core kernels do with a tile's sums (mirrors `Epilogue` in decode_gemv.rs).
#define GEMV_EPI_STORE 0   // store each product (plus the residual, if any)
#define GEMV_EPI_SWIGLU 1  // silu(gate) * up of two targets of one width, one output
#define GEMV_EPI_ROTARY 2  // q, k, v: q and k rotated, k and v written into the caches

// The rotary epilogue's operands; mirrors `RotaryArgs` in decode_gemv.rs. The targets are q
// [rows, heads * hd], k and v [rows, kv_heads * hd]; the tables F32 [rows, hd] with row
// stride table_sb; the caches [rows, kv_heads, capacity, hd] of W; cursor an I64 position.
// A cursor outside the caches sets the error word to `code` and writes no cache.
struct GemvRotary {
    u64 cos, sin;
    i64 table_sb;
    u64 k_cache, v_cache, cursor, err;
    int capacity, head_dim, code;
};

// Eight elements from element i of p (16-byte aligned) in the runtime dtype dt, as float.
__device__ __forceinline__ void gemv_load8(const void* p, int dt, i64 i, float v[8]) {
    if (dt == GEMV_F32) {
        const uint4* q = reinterpret_cast<const uint4*>(static_cast<const float*>(p) + i);
        Word16<f32>::unpack(q[0], v);
        Word16<f32>::unpack(q[1], v + 4);
    } else if (dt == GEMV_BF16) {
        Word16<bf16>::unpack(*reinterpret_cast<const uint4*>(static_cast<const bf16*>(p) + i), v);
    } else {
        Word16<f16>::unpack(*reinterpret_cast<const uint4*>(static_cast<const f16*>(p) + i), v);
    }
}

__device__ __forceinline__ float gemv_load1(const void* p, int dt, i64 i) {
    if (dt == GEMV_F32) return static_cast<const float*>(p)[i];
    if (dt == GEMV_BF16) return to_f(static_cast<const bf16*>(p)[i]);
    return to_f(static_cast<const f16*>(p)[i]);
}

__device__ __forceinline__ void gemv_store1(void* p, int dt, i64 i, float v) {
    if (dt == GEMV_F32) static_cast<float*>(p)[i] = v;
    else if (dt == GEMV_BF16) static_cast<bf16*>(p)[i] = from_f<bf16>(v);
    else static_cast<f16*>(p)[i] = from_f<f16>(v);
}

// v rounded to the runtime dtype dt and back: what materializing it in that dtype keeps.
__device__ __forceinline__ float gemv_round(int dt, float v) {
    if (dt == GEMV_BF16) return to_f(from_f<bf16>(v));
    if (dt == GEMV_F16) return to_f(from_f<f16>(v));
    return v;
}

// Eight floats stored as W at p (16-byte aligned).
template <class W> __device__ __forceinline__ void gemv_store8(W* p, const float v[8]) {
    uint4* q = reinterpret_cast<uint4*>(p);
    if constexpr (sizeof(W) == 4) {
        q[0] = Word16<W>::pack(v);
        q[1] = Word16<W>::pack(v + 4);
    } else {
        q[0] = Word16<W>::pack(v);
    }
}

// Sums V values over the warp by recursive halving: at the step with lane offset O, each lane
// keeps half of its current window of M values (the upper half where bit O of the lane is
// set), adds the partner's values for that half, and sends the other half. Once a window is one
// value, the remaining steps are plain butterfly sums. Afterwards the lane holds the full sums
// of indices base .. base + max(V / 32, 1) - 1 in v[0..], where base is what `gemv_reduce_scatter`
// returns; for V < 32, the 32 / V lanes that differ only in their low bits hold the same sums.
// Templates keep every index a compile-time constant, so v stays in registers.
template <int V, int M, int O> struct GemvHalve {
    static __device__ __forceinline__ void step(float (&v)[V], int lane, int& base) {
        if constexpr (M >= 2) {
            constexpr int H = M / 2;
            const bool upper = (lane & O) != 0;
#pragma unroll
            for (int i = 0; i < H; ++i) {
                const float send = upper ? v[i] : v[i + H];
                const float keep = upper ? v[i + H] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            if (upper) base += H;
            if constexpr (O > 1) GemvHalve<V, H, O / 2>::step(v, lane, base);
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
            if constexpr (O > 1) GemvHalve<V, 1, O / 2>::step(v, lane, base);
        }
    }
};
template <int V> __device__ __forceinline__ int gemv_reduce_scatter(float (&v)[V], int lane) {
    int base = 0;
    GemvHalve<V, V, 16>::step(v, lane, base);
    return base;
}

// The target holding global row g (g < total): its first row, its row count and its index.
__device__ __forceinline__ int gemv_target(const GemvTargets& t, i64 g, i64& start, i64& n) {
    int tt = 0;
    start = 0;
#pragma unroll
    for (int s = 1; s < GEMV_TARGETS; ++s) {
        if (s < t.count && g >= t.end[s - 1]) {
            tt = s;
            start = t.end[s - 1];
        }
    }
    // Written as a select over the unrolled index, so the struct stays in parameter space.
    i64 end = t.end[0];
#pragma unroll
    for (int s = 1; s < GEMV_TARGETS; ++s)
        if (s == tt) end = t.end[s];
    n = end - start;
    return tt;
}

__device__ __forceinline__ u64 gemv_pick(const u64 (&a)[GEMV_TARGETS], int tt) {
    u64 p = a[0];
#pragma unroll
    for (int s = 1; s < GEMV_TARGETS; ++s)
        if (s == tt) p = a[s];
    return p;
}

// The norm of 8 values v of a row with 1 / rms rstd and norm weights w: (x - 0) * rstd * w,
// the order of kernels/norm.cu, rounded to in_dt.
__device__ __forceinline__ void gemv_norm8(float v[8], const float w[8], float rstd, int in_dt) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = gemv_round(in_dt, v[i] * rstd * w[i]);
}

// P(in) of the 8 values at element c * 8 of row r, from their inputs v (x or gate): the norm
// (rstd: the row's 1 / rms) or the gating, rounded to in_dt; the cast leaves v as it is.
template <int PRO>
__device__ __forceinline__ void gemv_prologue8(float v[8], const void* in1, int in_dt, int aux_dt, int r, int c, int k,
                                               float rstd) {
    if (PRO == GEMV_NORM) {
        float w[8];
        gemv_load8(in1, aux_dt, (i64)c * 8, w);
        gemv_norm8(v, w, rstd, in_dt);
    } else if (PRO == GEMV_SWIGLU) {
        float u[8];
        gemv_load8(in1, in_dt, (i64)r * k + (i64)c * 8, u);
        // a * sigmoid(a) * u, the expression of kernels/swiglu.cu.
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = gemv_round(in_dt, v[i] * (1.f / (1.f + expf(-v[i]))) * u[i]);
    }
}

// 1 / sqrt(mean of squares + eps) as kernels/norm.cu computes it, from the sum of squares q.
__device__ __forceinline__ float gemv_rstd(float q, int k, float eps) { return 1.f / sqrtf(q / (float)k + eps); }

// The runtime dtype code of W.
__device__ __forceinline__ constexpr int gemv_code_of(const f32*) { return GEMV_F32; }
__device__ __forceinline__ constexpr int gemv_code_of(const bf16*) { return GEMV_BF16; }
__device__ __forceinline__ constexpr int gemv_code_of(const f16*) { return GEMV_F16; }
template <class W> __device__ __forceinline__ constexpr int gemv_code() {
    return gemv_code_of(static_cast<const W*>(nullptr));
}

// Elements a thread's staging loop loads before it stores any (in groups of 8).
#define STAGE_UNROLL 4

// The norm of rows already staged at xs in W (row r at xs + r * stride), in place: a warp a row
// for the sum of squares into rstd, then each thread normalizes its column groups of every row.
// Starts and ends with a block barrier.
template <class W>
__device__ __forceinline__ void gemv_norm_staged(const void* norm_w, int in_dt, int aux_dt, int rows, int k,
                                                 float eps, W* xs, int stride, float* rstd) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int groups = k / 8;
    __syncthreads();
    for (int r = warp; r < rows; r += GEMV_WARPS) {
        float q = 0.f;
        for (int c = lane; c < groups; c += 32) {
            float v[8];
            gemv_load8(xs + (i64)r * stride, gemv_code<W>(), (i64)c * 8, v);
#pragma unroll
            for (int i = 0; i < 8; ++i) q += v[i] * v[i];
        }
        q = warp_sum(q);
        if (lane == 0) rstd[r] = gemv_rstd(q, k, eps);
    }
    __syncthreads();
    // A thread keeps its columns' norm weights across the rows: one load of them, not one per
    // row (a load per row cost a round trip to L2 each at 16 rows).
    for (int c = threadIdx.x; c < groups; c += GEMV_THREADS) {
        float w[8];
        gemv_load8(norm_w, aux_dt, (i64)c * 8, w);
        for (int r = 0; r < rows; ++r) {
            float v[8];
            gemv_load8(xs + (i64)r * stride, gemv_code<W>(), (i64)c * 8, v);
            gemv_norm8(v, w, rstd[r], in_dt);
            gemv_store8<W>(xs + (i64)r * stride + (i64)c * 8, v);
        }
    }
    __syncthreads();
}

// Whether the rows are staged as they are, then normalized in shared memory if at all: the
// cast, or a norm of rows already in W (the residual stream, or a prologue kernel's output).
template <class W, int PRO> __device__ __forceinline__ bool gemv_stages_as_is(int in_dt) {
    return (PRO == GEMV_CAST || PRO == GEMV_NORM) && in_dt == gemv_code<W>();
}

// The prologue: P(in) for every row, rounded to in_dt then W, into shared memory at xs (row r
// at xs + r * stride). rstd holds a float per row (the norm's). Ends with a block barrier.
// Each thread issues STAGE_UNROLL loads before it uses one: staging 16 rows one load at a time
// cost a memory latency per 8 values.
template <class W, int PRO>
__device__ __forceinline__ void gemv_stage(const void* in0, const void* in1, int in_dt, int aux_dt, int rows, int k,
                                           float eps, W* xs, int stride, float* rstd) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int groups = k / 8, total = rows * groups;
    if (gemv_stages_as_is<W, PRO>(in_dt)) {
        // Rows already in W are copied without passing through registers, every word in
        // flight at once; the norm then runs on the staged rows in place. Staged through
        // registers four words at a time, 16 rows of 5632 took a dozen round trips to L2.
        const W* x = static_cast<const W*>(in0);
        constexpr int EPW = 16 / sizeof(W); // elements of a 16-byte word
        for (int g = threadIdx.x; g < total; g += GEMV_THREADS) {
            const int r = g / groups, c = g - r * groups;
#pragma unroll
            for (int e = 0; e < 8; e += EPW) cp_async16(xs + (i64)r * stride + (i64)c * 8 + e, x + (i64)g * 8 + e, true);
        }
        cp_async_commit();
        cp_async_wait<0>();
        if (PRO == GEMV_NORM) gemv_norm_staged<W>(in1, in_dt, aux_dt, rows, k, eps, xs, stride, rstd);
        else __syncthreads();
        return;
    }
    if (PRO == GEMV_NORM) {
        for (int r = warp; r < rows; r += GEMV_WARPS) {
            float q = 0.f;
            for (int c0 = lane; c0 < groups; c0 += 32 * STAGE_UNROLL) {
                float v[STAGE_UNROLL][8];
#pragma unroll
                for (int u = 0; u < STAGE_UNROLL; ++u)
                    if (c0 + u * 32 < groups) gemv_load8(in0, in_dt, (i64)r * k + (i64)(c0 + u * 32) * 8, v[u]);
#pragma unroll
                for (int u = 0; u < STAGE_UNROLL; ++u)
                    if (c0 + u * 32 < groups)
#pragma unroll
                        for (int i = 0; i < 8; ++i) q += v[u][i] * v[u][i];
            }
            q = warp_sum(q);
            if (lane == 0) rstd[r] = gemv_rstd(q, k, eps);
        }
        __syncthreads();
    }
    for (int g0 = threadIdx.x; g0 < total; g0 += GEMV_THREADS * STAGE_UNROLL) {
        float v[STAGE_UNROLL][8];
#pragma unroll
        for (int u = 0; u < STAGE_UNROLL; ++u)
            if (g0 + u * GEMV_THREADS < total) gemv_load8(in0, in_dt, (i64)(g0 + u * GEMV_THREADS) * 8, v[u]);
#pragma unroll
        for (int u = 0; u < STAGE_UNROLL; ++u) {
            const int g = g0 + u * GEMV_THREADS;
            if (g < total) {
                const int r = g / groups, c = g - r * groups;
                gemv_prologue8<PRO>(v[u], in1, in_dt, aux_dt, r, c, k, PRO == GEMV_NORM ? rstd[r] : 1.f);
                gemv_store8<W>(xs + (i64)r * stride + (i64)c * 8, v[u]);
            }
        }
    }
    __syncthreads();
}

// The prologue alone, for launches of many rows: block r writes P(in) of row r, rounded to in_dt
// then W, to out [rows, k]; the products then stage it as it is (the cast prologue). Computed
// once here instead of in every block of the product, where 16 rows of gating cost more than
// the weights' reads.
template <class W, int PRO>
__device__ void gemv_prologue_rows(const void* in0, const void* in1, int in_dt, int aux_dt, int k, float eps, W* out) {
    __shared__ float scratch[32];
    // The products after this kernel may start now and load their weights meanwhile.
    rb_grid_release();
    const int r = blockIdx.x, groups = k / 8;
    float rstd = 1.f;
    if (PRO == GEMV_NORM) {
        float q = 0.f;
        for (int c = threadIdx.x; c < groups; c += blockDim.x) {
            float v[8];
            gemv_load8(in0, in_dt, (i64)r * k + (i64)c * 8, v);
#pragma unroll
            for (int i = 0; i < 8; ++i) q += v[i] * v[i];
        }
        rstd = gemv_rstd(block_sum(q, scratch), k, eps);
    }
    for (int c = threadIdx.x; c < groups; c += blockDim.x) {
        float v[8];
        gemv_load8(in0, in_dt, (i64)r * k + (i64)c * 8, v);
        gemv_prologue8<PRO>(v, in1, in_dt, aux_dt, r, c, k, rstd);
        gemv_store8<W>(out + (i64)r * k + (i64)c * 8, v);
    }
}

// Rows of every target together.
__device__ __forceinline__ i64 gemv_total_rows(const GemvTargets& t) {
    i64 total = t.end[0];
#pragma unroll
    for (int s = 1; s < GEMV_TARGETS; ++s)
        if (s < t.count) total = t.end[s];
    return total;
}

// The first byte of global row g (g < total) of the weights: `bytes` per row.
__device__ __forceinline__ const char* gemv_row(const GemvTargets& t, i64 g, i64 bytes) {
    i64 start, n;
    const int tt = gemv_target(t, g, start, n);
    return reinterpret_cast<const char*>(gemv_pick(t.w, tt)) + (g - start) * bytes;
}

// Stores activation row r's sum s for global row g: the product as the matmul outputs it (W),
// then the residual's add, in out_dt.
template <class W>
__device__ __forceinline__ void gemv_finish(const GemvTargets& t, i64 g, int r, float s, const void* res, int res_dt,
                                            int out_dt) {
    i64 start, n;
    const int tt = gemv_target(t, g, start, n);
    const i64 at = (i64)r * n + (g - start);
    float y = to_f(from_f<W>(s));
    if (res) y = gemv_load1(res, res_dt, at) + y;
    gemv_store1(reinterpret_cast<void*>(gemv_pick(t.y, tt)), out_dt, at, y);
}

// Activation rows a launch takes at most (mirrors MAX_ROWS in decode_gemv.rs): the tensor-core
// kernels keep a norm per row after their sums, then the staging barrier.
#define GEMV_MAX_ROWS 16

// SwiGLU's gating of a gate product a and an up product u: kernels/swiglu.cu's expression.
__device__ __forceinline__ float gemv_gate(float a, float u) { return a * (1.f / (1.f + expf(-a))) * u; }
