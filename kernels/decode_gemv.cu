// Fused decode products: for a few activation rows (1 to 16, the batch of a decode step),
//   y_t[r, :] = P(in)[r, :] · W_tᵀ  (+ residual[r, :])        for weights W_t [n_t, k]
// in one launch, where the prologue P is one of
//   norm:   rms_norm(x) * norm_weight          (engine: Tensor::rms_norm_linears)
//   swiglu: silu(gate) * up                    (engine: Tensor::swiglu_linear)
//   cast:   x itself                           (engine: Tensor::linear_residual)
// Decoding multiplies every weight once per token by a handful of rows, so the time is the
// weight bytes over the bandwidth; the launches this replaces (norm, cast, GEMV, add) cost more
// than their arithmetic.
//
// Rounding follows the composition the model runs (ops norm, swiglu, matmul, add on CUDA): the
// prologue computes in float and rounds to the input's dtype (as the norm/swiglu op would
// materialize it), then to the weights' dtype W (the cast autocast makes for the product);
// products accumulate in float and are rounded to W (cuBLAS's output dtype); the residual is
// added in float to that rounded product and the sum rounded to the output dtype (the add's).
// Only the order of the float sums differs: the sum of squares, and the dot products.
//
// Layout of the work:
// - Every block first writes P(in) for all rows, rounded to W, into shared memory
//   (rows * k * sizeof(W) bytes: 180 KB for 16 rows of 5632 BF16 values). The host checks
//   it fits, and launches at most as many blocks as are resident at once (each loops over
//   tiles), so the prologue is paid once per resident block, not once per tile. Rows already
//   in W are copied in as they are (`gemv_stages_as_is`); on sm_90 the tensor-core kernels do
//   it with bulk copies shared across a thread-block cluster (`gemv_stage_bulk`).
// - A tile is RB consecutive output rows (across the weights: the grid spans the rows of
//   every W_t). All 8 warps of the block work on the tile, splitting k: lane l of warp w
//   reads 16-byte words w*32 + l, w*32 + l + 256, ... of each of the RB weight rows (adjacent
//   lanes adjacent words, so a warp load is 512 contiguous bytes of a row), and the matching
//   word of every activation row from shared memory. Every weight byte is read once for all
//   rows; accumulators acc[RB][RT] stay in registers.
// - A warp's RB * RT sums are reduced across lanes by recursive halving (each step trades half
//   the values with the partner lane: about RB * RT shuffles instead of 5 * RB * RT), then
//   across the 8 warps through shared memory, in a fixed order: a run repeats bit for bit.
// Each lane has RB 16-byte weight loads in flight per step (RB * 512 bytes a warp, twice that
// where UNROLL is 2).

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

// W: the weights' (and the staged activations') type. RT: the compiled row count (rows <= RT
// run). RB: output rows per tile. UNROLL: k steps a warp keeps in flight.
// in0: x (norm, cast) or gate (swiglu), [rows, k] of in_dt. in1: the norm weight [k] of aux_dt
// (norm) or up [rows, k] of in_dt (swiglu). res: [rows, n_0] of res_dt or null (only with one
// target). Outputs are of out_dt.
template <class W, int RT, int RB, int UNROLL, int PRO>
__device__ void decode_gemv_impl(const GemvTargets& t, const void* in0, const void* in1, int in_dt, int aux_dt,
                                 const void* res, int res_dt, int out_dt, int rows, int k, float eps) {
    extern __shared__ uint4 gemv_smem[];
    constexpr int EPW = 16 / sizeof(W); // elements of W in a 16-byte word
    constexpr int V = RB * RT;
    W* xs = reinterpret_cast<W*>(gemv_smem);
    float* red = reinterpret_cast<float*>(xs + (i64)rows * k); // [GEMV_WARPS][V]
    float* rstd = red + GEMV_WARPS * V;                       // [RT]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    gemv_stage<W, PRO>(in0, in1, in_dt, aux_dt, rows, k, eps, xs, k, rstd);

    // ----- tiles of RB output rows -----
    const i64 total_rows = gemv_total_rows(t);
    const int words = k / EPW; // 16-byte words in a row
    const uint4* xw = reinterpret_cast<const uint4*>(xs);
    for (i64 tile = blockIdx.x; tile * RB < total_rows; tile += gridDim.x) {
        const uint4* wp[RB];
#pragma unroll
        for (int j = 0; j < RB; ++j) {
            // Rows past the end read the last row again (an L2 hit) and are not stored.
            wp[j] = reinterpret_cast<const uint4*>(gemv_row(t, min(tile * RB + j, total_rows - 1), (i64)words * 16));
        }
        float acc[RB][RT];
#pragma unroll
        for (int j = 0; j < RB; ++j)
#pragma unroll
            for (int r = 0; r < RT; ++r) acc[j][r] = 0.f;
#pragma unroll UNROLL
        for (int v = warp * 32 + lane; v < words; v += GEMV_THREADS) {
            uint4 raw[RB];
#pragma unroll
            for (int j = 0; j < RB; ++j) raw[j] = __ldg(wp[j] + v);
            // Unpack whichever side is smaller once, the other one word at a time.
            if constexpr (RT < RB) {
                float xv[RT][EPW];
#pragma unroll
                for (int r = 0; r < RT; ++r)
                    if (r < rows) Word16<W>::unpack(xw[(i64)r * words + v], xv[r]);
#pragma unroll
                for (int j = 0; j < RB; ++j) {
                    float wf[EPW];
                    Word16<W>::unpack(raw[j], wf);
#pragma unroll
                    for (int r = 0; r < RT; ++r)
                        if (r < rows)
#pragma unroll
                            for (int e = 0; e < EPW; ++e) acc[j][r] = fmaf(wf[e], xv[r][e], acc[j][r]);
                }
            } else {
                float wf[RB][EPW];
#pragma unroll
                for (int j = 0; j < RB; ++j) Word16<W>::unpack(raw[j], wf[j]);
#pragma unroll
                for (int r = 0; r < RT; ++r) {
                    if (r < rows) {
                        float xv[EPW];
                        Word16<W>::unpack(xw[(i64)r * words + v], xv);
#pragma unroll
                        for (int j = 0; j < RB; ++j)
#pragma unroll
                            for (int e = 0; e < EPW; ++e) acc[j][r] = fmaf(wf[j][e], xv[e], acc[j][r]);
                    }
                }
            }
        }
        float vals[V];
#pragma unroll
        for (int j = 0; j < RB; ++j)
#pragma unroll
            for (int r = 0; r < RT; ++r) vals[j * RT + r] = acc[j][r];
        const int base = gemv_reduce_scatter<V>(vals, lane);
        constexpr int KEEP = V >= 32 ? V / 32 : 1;
        if (V >= 32 || (lane & (32 / V - 1)) == 0) {
#pragma unroll
            for (int i = 0; i < KEEP; ++i) red[warp * V + base + i] = vals[i];
        }
        __syncthreads();
        for (int o = threadIdx.x; o < V; o += GEMV_THREADS) {
            const int j = o / RT, r = o - j * RT;
            const i64 g = tile * RB + j;
            if (r < rows && g < total_rows) {
                float s = 0.f;
#pragma unroll
                for (int w = 0; w < GEMV_WARPS; ++w) s += red[w * V + o];
                gemv_finish<W>(t, g, r, s, res, res_dt, out_dt);
            }
        }
        // `red` is rewritten by the next tile.
        __syncthreads();
    }
}

#define RB_DECODE_GEMV(pro, PRO, name, W, RT, RB, UNROLL)                                                       \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                                   \
        decode_gemv_##pro##_##name##_r##RT(GemvTargets t, const void* in0, const void* in1, int in_dt, int aux_dt, \
                                           const void* res, int res_dt, int out_dt, int rows, int k, float eps) {  \
        decode_gemv_impl<W, RT, RB, UNROLL, PRO>(t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows, k, eps);  \
    }
// Rows per tile and unrolling by row count: more rows per tile amortize the reads of the staged
// activations (RT shared loads per RB weight loads), fewer keep the accumulators in registers.
#define RB_DECODE_GEMV_ROWS(pro, PRO, name, W) \
    RB_DECODE_GEMV(pro, PRO, name, W, 1, 8, 2) \
    RB_DECODE_GEMV(pro, PRO, name, W, 2, 8, 1) \
    RB_DECODE_GEMV(pro, PRO, name, W, 4, 8, 1) \
    RB_DECODE_GEMV(pro, PRO, name, W, 8, 4, 1) \
    RB_DECODE_GEMV(pro, PRO, name, W, 16, 4, 1)
#define RB_DECODE_GEMV_TYPES(pro, PRO)                   \
    RB_DECODE_GEMV_ROWS(pro, PRO, bf16, bf16)            \
    RB_DECODE_GEMV_ROWS(pro, PRO, f16, f16)              \
    RB_DECODE_GEMV_ROWS(pro, PRO, f32, f32)
RB_DECODE_GEMV_TYPES(norm, GEMV_NORM)
RB_DECODE_GEMV_TYPES(swiglu, GEMV_SWIGLU)
RB_DECODE_GEMV_TYPES(cast, GEMV_CAST)

// ----- the tensor-core form: BF16/F16 weights, k a multiple of 64 -----
// The same products through mma.sync m16n8k16: A is 16 weight rows, B the staged activation
// rows (8 per n-tile; rows past `rows` are zeros), C their sums in FP32. A dot product does not
// care in which order k is visited, so the fragments' k slots are assigned to fit wide loads:
// for chunk c (64 values of k), lane (g = lane / 4, q = lane % 4) loads the 16 values at
// k = 64c + 16q .. 64c + 16q + 15 of weight rows g and g + 8 (two 16-byte words each) and of
// activation row g. Each word feeds two mma: its 32-bit words 0-1 are PTX's a0..a7 (rows g,
// g + 8; k slots 2q, 2q + 1, 2q + 8, 2q + 9) and b0..b3 (the same slots) of one, words 2-3 of
// the next. A and B take the same assignment, so every product pairs matching k.
// A warp's load is 16 rows x 128 bytes, whole cache lines; every weight byte is read once for
// all activation rows, and with the multiplies on the tensor cores the loop is bound by its
// loads, at 1 row or 16.
// Tiles are 16 output rows. The 8 warps of a block split k by chunks (warp w takes chunks
// w, w + 8, ...) and sum through shared memory in a fixed order, so a run repeats bit for bit.
// A lane issues MMA_BATCH chunks' loads (4 x 16 bytes each) before it multiplies any, and the
// first tile's before the prologue: launched dependently (programmatic dependent launch), a
// kernel's first weights stream in while the kernel before it finishes.

#define MMA_BATCH 4

// Staged row stride in elements: rows 16 bytes apart modulo 128, so the two activation rows one
// quarter-warp reads fall in different banks. Mirrors `mma_stride` in decode_gemv.rs.
__device__ __forceinline__ int gemv_mma_stride(int k) { return k + 8; }

// The two mma of one 16-byte word of each of rows g, g + 8 (lo, hi) and of the activations (x).
template <class W>
__device__ __forceinline__ void gemv_mma_word(float (&acc)[4], const uint4& lo, const uint4& hi, const uint4& x) {
    const u32 a0[4] = {lo.x, hi.x, lo.y, hi.y};
    const u32 a1[4] = {lo.z, hi.z, lo.w, hi.w};
    Mma<W>::run(acc, a0, x.x, x.y);
    Mma<W>::run(acc, a1, x.z, x.w);
}

// Activation rows a launch takes at most (mirrors MAX_ROWS in decode_gemv.rs): the tensor-core
// kernels keep a norm per row after their sums, then the staging barrier.
#define GEMV_MAX_ROWS 16

#ifdef RB_HAS_BULK
// `gemv_stage` for rows staged as they are (`gemv_stages_as_is`), by bulk copies: thread 0
// copies whole rows, one instruction a row. In a cluster of n blocks, block i reads rows i,
// i + n, ... and multicasts them to every block of the cluster, so L2 serves each row once a
// cluster instead of once a block: at 16 rows, 16 to 180 KB went to every one of up to 264
// blocks, and the staging cost more than the weights' reads (docs/baseline.md). bar: an
// initialized barrier in its first phase.
template <class W, int PRO>
__device__ __forceinline__ void gemv_stage_bulk(const void* in0, const void* in1, int in_dt, int aux_dt, int rows,
                                                int k, float eps, W* xs, int stride, float* rstd, u64* bar) {
    if (threadIdx.x == 0) {
        const W* x = static_cast<const W*>(in0);
        const u32 row_bytes = (u32)k * sizeof(W), n = cluster_size();
        mbar_expect_tx(bar, row_bytes * (u32)rows);
        for (u32 r = cluster_rank(); r < (u32)rows; r += n) {
            if (n == 1) bulk_copy(xs + (i64)r * stride, x + (i64)r * k, row_bytes, bar);
            else bulk_copy_multicast(xs + (i64)r * stride, x + (i64)r * k, row_bytes, bar, (unsigned short)((1u << n) - 1));
        }
    }
    mbar_wait(bar, 0);
    if (PRO == GEMV_NORM) gemv_norm_staged<W>(in1, in_dt, aux_dt, rows, k, eps, xs, stride, rstd);
}
#endif

// A warp's weights for one work item: BATCH chunks of 64 k of the tile's 16 rows.
template <int BATCH> struct GemvWeights {
    uint4 lo[BATCH][2], hi[BATCH][2];
};

// The sums over the warps of a tile's paired rows m and m + 8 for one activation row (`at` =
// m * 8 + the row's place in n-tile nt, m < 8), each rounded to W as the product that the
// composition materializes.
template <class W, int NT>
__device__ __forceinline__ void gemv_pair_sums(const float* red, int nt, int at, float& lo, float& hi) {
    lo = 0.f;
    hi = 0.f;
#pragma unroll
    for (int w = 0; w < GEMV_WARPS; ++w) {
        lo += red[(w * NT + nt) * 128 + at];
        hi += red[(w * NT + nt) * 128 + at + 64];
    }
    lo = to_f(from_f<W>(lo));
    hi = to_f(from_f<W>(hi));
}

// SwiGLU's gating of a gate product a and an up product u: kernels/swiglu.cu's expression.
__device__ __forceinline__ float gemv_gate(float a, float u) { return a * (1.f / (1.f + expf(-a))) * u; }

// The weight rows a tile takes as its mma rows g and g + 8 (g < 8), by epilogue:
// - GEMV_EPI_STORE: 16 consecutive rows, past the end clamped to the last (an L2 hit, not
//   stored);
// - GEMV_EPI_SWIGLU: gate row 8i + g and the same up row (gate the first half of the rows), so
//   the block that sums a gate output also holds its up output;
// - GEMV_EPI_ROTARY: tiles over q's and k's rows (`rotated` of them) hold dims j0 .. j0 + 7 of
//   one head and the same dims a half head on, the pairs a rotation mixes; v's tiles are 16
//   consecutive rows.
template <int EPI>
__device__ __forceinline__ void gemv_tile_rows(i64 total, i64 rotated, int hd, i64 tile, int g, i64& lo, i64& hi) {
    if (EPI == GEMV_EPI_SWIGLU) {
        const i64 half = total / 2;
        lo = min(tile * 8 + g, half - 1);
        hi = half + lo;
    } else if (EPI == GEMV_EPI_ROTARY && tile * 16 < rotated) {
        const int per_head = hd / 16;
        const i64 head = tile / per_head;
        lo = head * hd + (tile - head * per_head) * 8 + g;
        hi = lo + hd / 2;
    } else {
        lo = min(tile * 16 + g, total - 1);
        hi = min(tile * 16 + g + 8, total - 1);
    }
}

// The rotary epilogue of one tile (GEMV_EPI_ROTARY; the tile's sums over the warps are in red,
// [warp][NT][16 x 8]). The products are rounded to W, as the q/k/v products the composition
// materializes, then a q or k pair is rotated as kernels/rope.cu's rope_cache_write rotates it
// (rope_sub / rope_add): q into the output [rows, heads * hd], k into the key cache at `pos`;
// v goes into the value cache there as it is. in_cache: pos lies inside the caches.
template <class W, int NT>
__device__ __forceinline__ void gemv_rotary_store(const float* red, const GemvTargets& t, const GemvRotary& rot,
                                                  i64 tile, int rows, int out_dt, i64 pos, bool in_cache) {
    const int hd = rot.head_dim, half = hd / 2;
    const i64 n_q = t.end[0], rotated = t.end[1], total = t.end[2];
    const i64 kv_heads = (total - rotated) / hd;
    // Element j of head h of row r of a cache.
    auto cache_at = [&](u64 cache, int r, i64 h, i64 j) {
        return reinterpret_cast<W*>(cache) + (((i64)r * kv_heads + h) * rot.capacity + pos) * hd + j;
    };
    if (tile * 16 < rotated) {
        const int per_head = hd / 16;
        const i64 head = tile / per_head, j0 = (tile - head * per_head) * 8;
        for (int o = threadIdx.x; o < NT * 64; o += GEMV_THREADS) {
            const int nt = o / 64, at = o % 64, m = at / 8, r = nt * 8 + at % 8;
            if (r >= rows) continue;
            float a, b;
            gemv_pair_sums<W, NT>(red, nt, at, a, b);
            const i64 j = j0 + m, lo = head * hd + j;
            const float* c = reinterpret_cast<const float*>(rot.cos) + r * rot.table_sb;
            const float* s = reinterpret_cast<const float*>(rot.sin) + r * rot.table_sb;
            const float y_lo = rope_sub(a, c[j], b, s[j]);
            const float y_hi = rope_add(b, c[j + half], a, s[j + half]);
            if (lo < n_q) {
                void* q = reinterpret_cast<void*>(t.y[0]);
                gemv_store1(q, out_dt, (i64)r * n_q + lo, y_lo);
                gemv_store1(q, out_dt, (i64)r * n_q + lo + half, y_hi);
            } else if (in_cache) {
                W* dst = cache_at(rot.k_cache, r, head - n_q / hd, j);
                dst[0] = from_f<W>(y_lo);
                dst[half] = from_f<W>(y_hi);
            }
        }
    } else if (in_cache) {
        for (int o = threadIdx.x; o < NT * 128; o += GEMV_THREADS) {
            const int nt = o / 128, at = o % 128, m = at / 8, r = nt * 8 + at % 8;
            const i64 gr = tile * 16 + m;
            if (r < rows && gr < total) {
                float s = 0.f;
#pragma unroll
                for (int w = 0; w < GEMV_WARPS; ++w) s += red[(w * NT + nt) * 128 + at];
                const i64 h = (gr - rotated) / hd;
                *cache_at(rot.v_cache, r, h, gr - rotated - h * hd) = from_f<W>(s);
            }
        }
    }
}

// EPI: what the tile's sums become (GEMV_EPI_*; the tiles' rows follow, `gemv_tile_rows`).
// With GEMV_EPI_SWIGLU the launch's two targets are SwiGLU's gate and up weights (n rows
// each), and it writes silu(gate) * up [rows, n] to the first target's output instead of both
// products. The gating follows the composition: both products rounded to W, then
// a * sigmoid(a) * u in float, rounded to the output dtype (kernels/swiglu.cu's expression).
// With GEMV_EPI_ROTARY the targets are q, k and v (`gemv_rotary_store`; rot its operands).
// BATCH: chunks a warp loads per work item; BUFFERS: work items in flight (1: the next item's
// loads are issued once the current one is multiplied; 2: the item after next is, so one
// item's loads are always in flight while another's multiply).
template <class W, int NT, int PRO, int EPI, int BATCH = MMA_BATCH, int BUFFERS = 1>
__device__ void decode_gemv_mma_impl(const GemvTargets& t, const void* in0, const void* in1, int in_dt, int aux_dt,
                                     const void* res, int res_dt, int out_dt, int rows, int k, float eps,
                                     const GemvRotary& rot) {
    static_assert(BUFFERS == 1 || BUFFERS == 2, "one or two work items in flight");
    extern __shared__ uint4 gemv_smem[];
    const int stride = gemv_mma_stride(k);
    W* xs = reinterpret_cast<W*>(gemv_smem);
    float* red = reinterpret_cast<float*>(xs + (i64)rows * stride); // [GEMV_WARPS][NT][16 x 8]
    float* rstd = red + GEMV_WARPS * NT * 128;                      // [GEMV_MAX_ROWS]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, q = lane & 3;
    const i64 total_rows = gemv_total_rows(t);
    const int chunks = k / 64;
    const i64 row_bytes = (i64)k * sizeof(W);
    constexpr int STEP = GEMV_WARPS * BATCH; // chunks a warp moves on by per work item

    // A warp's work items are (tile, its next BATCH chunks of k), in order: a tile's chunks,
    // then the next tile's. Loads run BUFFERS items ahead of the multiplies, so they are in
    // flight during the sums at the end of a tile and the start of the next.
    GemvWeights<BATCH> buf[BUFFERS];
    auto load = [&](GemvWeights<BATCH>& w8, i64 tile, int c0) {
        i64 r_lo, r_hi;
        gemv_tile_rows<EPI>(total_rows, EPI == GEMV_EPI_ROTARY ? t.end[1] : 0, rot.head_dim, tile, g, r_lo, r_hi);
        const uint4* w_lo = reinterpret_cast<const uint4*>(gemv_row(t, r_lo, row_bytes)) + q * 2;
        const uint4* w_hi = reinterpret_cast<const uint4*>(gemv_row(t, r_hi, row_bytes)) + q * 2;
#pragma unroll
        for (int b = 0; b < BATCH; ++b) {
            const int c = c0 + b * GEMV_WARPS;
            if (c < chunks) {
#pragma unroll
                for (int w = 0; w < 2; ++w) {
                    w8.lo[b][w] = __ldg(w_lo + (i64)c * 8 + w);
                    w8.hi[b][w] = __ldg(w_hi + (i64)c * 8 + w);
                }
            }
        }
    };
    auto advance = [&](i64& tile, int& c0) {
        c0 += STEP;
        if (c0 >= chunks) {
            c0 = warp;
            tile += gridDim.x;
        }
    };
    auto multiply = [&](const GemvWeights<BATCH>& w8, int c0, float (&acc)[NT][4]) {
#pragma unroll
        for (int b = 0; b < BATCH; ++b) {
            const int c = c0 + b * GEMV_WARPS; // the same for every lane of the warp
            if (c < chunks) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int r = nt * 8 + g;
                    uint4 x[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
                    if (r < rows) {
                        const uint4* xr = reinterpret_cast<const uint4*>(xs + (i64)r * stride + c * 64 + q * 16);
                        x[0] = xr[0];
                        x[1] = xr[1];
                    }
                    gemv_mma_word<W>(acc[nt], w8.lo[b][0], w8.hi[b][0], x[0]);
                    gemv_mma_word<W>(acc[nt], w8.lo[b][1], w8.hi[b][1], x[1]);
                }
            }
        }
    };
#ifdef RB_HAS_BULK
    u64* bar = reinterpret_cast<u64*>(rstd + GEMV_MAX_ROWS);
    const bool bulk = gemv_stages_as_is<W, PRO>(in_dt);
    const bool cluster = bulk && cluster_size() > 1;
    if (bulk) {
        if (threadIdx.x == 0) mbar_init(bar);
        // Every block's barrier is set before any block's copies count bytes on it.
        if (cluster) {
            cluster_arrive();
            cluster_wait();
        } else {
            __syncthreads();
        }
    }
#endif
    i64 tile = blockIdx.x;
    {
        i64 ahead = tile;
        int c0 = warp;
#pragma unroll
        for (int i = 0; i < BUFFERS; ++i) {
            if (ahead * 16 < total_rows) load(buf[i], ahead, c0);
            advance(ahead, c0);
        }
    }
    // The weights are no kernel's output (the host launches this kernel dependently only
    // where that holds); the activations and every write wait for the kernel before.
    rb_grid_release();
    rb_grid_wait();
#ifdef RB_HAS_BULK
    if (bulk) {
        gemv_stage_bulk<W, PRO>(in0, in1, in_dt, aux_dt, rows, k, eps, xs, stride, rstd, bar);
        if (cluster) cluster_arrive();
    } else
#endif
        gemv_stage<W, PRO>(in0, in1, in_dt, aux_dt, rows, k, eps, xs, stride, rstd);
    // The cache position, written by an earlier kernel (read after the wait).
    i64 pos = 0;
    bool in_cache = false;
    if (EPI == GEMV_EPI_ROTARY) {
        pos = *reinterpret_cast<const i64*>(rot.cursor);
        in_cache = pos >= 0 && pos < rot.capacity;
        if (!in_cache && blockIdx.x == 0 && threadIdx.x == 0) atomicExch(reinterpret_cast<u32*>(rot.err), (u32)rot.code);
    }

    int slot = 0; // the buffer holding the current item (always 0 with one buffer)
    for (; tile * 16 < total_rows; tile += gridDim.x) {
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
        for (int c0 = warp; c0 < chunks; c0 += STEP) {
            // The item BUFFERS ahead of this one goes into this one's buffer once it is used.
            i64 ahead = tile;
            int ahead_c0 = c0;
#pragma unroll
            for (int i = 0; i < BUFFERS; ++i) advance(ahead, ahead_c0);
            const bool more = ahead * 16 < total_rows;
            // Both branches name their buffer statically, so it stays in registers.
            if (slot == 0) {
                multiply(buf[0], c0, acc);
                if (more) load(buf[0], ahead, ahead_c0);
            } else {
                multiply(buf[BUFFERS - 1], c0, acc);
                if (more) load(buf[BUFFERS - 1], ahead, ahead_c0);
            }
            if (BUFFERS == 2) slot ^= 1;
        }
        // C: acc[nt][0..1] at weight row g and activation rows nt * 8 + 2q, + 1; [2..3] at g + 8.
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            float* mine = red + (warp * NT + nt) * 128;
            mine[g * 8 + 2 * q] = acc[nt][0];
            mine[g * 8 + 2 * q + 1] = acc[nt][1];
            mine[(g + 8) * 8 + 2 * q] = acc[nt][2];
            mine[(g + 8) * 8 + 2 * q + 1] = acc[nt][3];
        }
        __syncthreads();
        if (EPI == GEMV_EPI_ROTARY) {
            gemv_rotary_store<W, NT>(red, t, rot, tile, rows, out_dt, pos, in_cache);
        } else if (EPI == GEMV_EPI_SWIGLU) {
            const i64 n = total_rows / 2;
            for (int o = threadIdx.x; o < NT * 64; o += GEMV_THREADS) {
                const int nt = o / 64, at = o % 64, m = at / 8, r = nt * 8 + at % 8;
                const i64 gr = tile * 8 + m;
                if (r < rows && gr < n) {
                    float a, u;
                    gemv_pair_sums<W, NT>(red, nt, at, a, u);
                    gemv_store1(reinterpret_cast<void*>(t.y[0]), out_dt, (i64)r * n + gr, gemv_gate(a, u));
                }
            }
        } else {
            for (int o = threadIdx.x; o < NT * 128; o += GEMV_THREADS) {
                const int nt = o / 128, at = o % 128, m = at / 8, r = nt * 8 + at % 8;
                const i64 gr = tile * 16 + m;
                if (r < rows && gr < total_rows) {
                    float s = 0.f;
#pragma unroll
                    for (int w = 0; w < GEMV_WARPS; ++w) s += red[(w * NT + nt) * 128 + at];
                    gemv_finish<W>(t, gr, r, s, res, res_dt, out_dt);
                }
            }
        }
        // `red` is rewritten by the next tile.
        __syncthreads();
    }
#ifdef RB_HAS_BULK
    // No block leaves while a copy of its cluster may still be on the way to it.
    if (cluster) cluster_wait();
#endif
}

#define RB_DECODE_GEMV_MMA(pro, PRO, name, W, NT, EPI, BUFFERS, sfx)                                                \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS) decode_gemv_mma_##pro##_##name##_n##NT##sfx(          \
        GemvTargets t, const void* in0, const void* in1, int in_dt, int aux_dt, const void* res, int res_dt,          \
        int out_dt, int rows, int k, float eps) {                                                                     \
        decode_gemv_mma_impl<W, NT, PRO, EPI, MMA_BATCH, BUFFERS>(t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt,   \
                                                                  rows, k, eps, GemvRotary{});                        \
    }
#define RB_DECODE_GEMV_MMA_TYPES(pro, PRO, EPI, BUFFERS, sfx)          \
    RB_DECODE_GEMV_MMA(pro, PRO, bf16, bf16, 1, EPI, BUFFERS, sfx)     \
    RB_DECODE_GEMV_MMA(pro, PRO, bf16, bf16, 2, EPI, BUFFERS, sfx)     \
    RB_DECODE_GEMV_MMA(pro, PRO, f16, f16, 1, EPI, BUFFERS, sfx)       \
    RB_DECODE_GEMV_MMA(pro, PRO, f16, f16, 2, EPI, BUFFERS, sfx)
RB_DECODE_GEMV_MMA_TYPES(norm, GEMV_NORM, GEMV_EPI_STORE, 1, )
RB_DECODE_GEMV_MMA_TYPES(swiglu, GEMV_SWIGLU, GEMV_EPI_STORE, 1, )
RB_DECODE_GEMV_MMA_TYPES(cast, GEMV_CAST, GEMV_EPI_STORE, 1, )
// Two work items in flight, for the long rows of a down product (`deep_rows` in
// decode_gemv.rs): k 5632 took 7.7 µs instead of 8.8 at 1 row, 10.3 instead of 11.1 at 16;
// k 2048, where a warp has one item a tile, lost (benches/gemv_micro.cu).
RB_DECODE_GEMV_MMA_TYPES(cast, GEMV_CAST, GEMV_EPI_STORE, 2, _deep)
// SwiGLU's gate and up products gated in the epilogue, after a norm (or its output, staged).
RB_DECODE_GEMV_MMA_TYPES(norm, GEMV_NORM, GEMV_EPI_SWIGLU, 1, _pair)
RB_DECODE_GEMV_MMA_TYPES(cast, GEMV_CAST, GEMV_EPI_SWIGLU, 1, _pair)
// A decode step's q/k/v products with the rotation and the cache write in the epilogue, after a
// norm (or its output, staged): the launch that replaces the products, then rope_cache_write.
#define RB_DECODE_GEMV_MMA_ROTARY(pro, PRO, name, W, NT)                                                            \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS) decode_gemv_mma_##pro##_##name##_n##NT##_rotary(      \
        GemvTargets t, const void* in0, const void* in1, int in_dt, int aux_dt, const void* res, int res_dt,          \
        int out_dt, int rows, int k, float eps, GemvRotary rot) {                                                     \
        decode_gemv_mma_impl<W, NT, PRO, GEMV_EPI_ROTARY>(t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows, k,   \
                                                          eps, rot);                                                  \
    }
#define RB_DECODE_GEMV_MMA_ROTARY_TYPES(pro, PRO)                \
    RB_DECODE_GEMV_MMA_ROTARY(pro, PRO, bf16, bf16, 1)           \
    RB_DECODE_GEMV_MMA_ROTARY(pro, PRO, bf16, bf16, 2)           \
    RB_DECODE_GEMV_MMA_ROTARY(pro, PRO, f16, f16, 1)             \
    RB_DECODE_GEMV_MMA_ROTARY(pro, PRO, f16, f16, 2)
RB_DECODE_GEMV_MMA_ROTARY_TYPES(norm, GEMV_NORM)
RB_DECODE_GEMV_MMA_ROTARY_TYPES(cast, GEMV_CAST)

#define RB_DECODE_GEMV_PROLOGUE(pro, PRO, name, W)                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS) decode_gemv_prologue_##pro##_##name(                \
        const void* in0, const void* in1, int in_dt, int aux_dt, int k, float eps, W* out) {                        \
        gemv_prologue_rows<W, PRO>(in0, in1, in_dt, aux_dt, k, eps, out);                                           \
    }
RB_DECODE_GEMV_PROLOGUE(norm, GEMV_NORM, bf16, bf16)
RB_DECODE_GEMV_PROLOGUE(norm, GEMV_NORM, f16, f16)
RB_DECODE_GEMV_PROLOGUE(swiglu, GEMV_SWIGLU, bf16, bf16)
RB_DECODE_GEMV_PROLOGUE(swiglu, GEMV_SWIGLU, f16, f16)

// ----- the block-quantized form: Q4_K / Q4_1 weights (stored split), BF16 products -----
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
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS) decode_qgemv_##pro##_##fmt##_m##M##sfx(           \
        GemvTargets t, const void* in0, const void* in1, int in_dt, int aux_dt, const void* res, int res_dt,      \
        int out_dt, int rows, int k, float eps) {                                                                 \
        decode_qgemv_impl<PRO, EPI, WEIGHTS, M>(t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows, k, eps);   \
    }
#define RB_DECODE_QGEMV_ROWS(pro, PRO, fmt, WEIGHTS, EPI, sfx) \
    RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, 1, EPI, sfx)       \
    RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, 2, EPI, sfx)       \
    RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, 4, EPI, sfx)       \
    RB_DECODE_QGEMV(pro, PRO, fmt, WEIGHTS, 8, EPI, sfx)
#define RB_DECODE_QGEMV_FORMATS(pro, PRO, EPI, sfx)                      \
    RB_DECODE_QGEMV_ROWS(pro, PRO, Q4_K, Q4_KWeights, EPI, sfx)         \
    RB_DECODE_QGEMV_ROWS(pro, PRO, Q4_1, Q4_1Weights, EPI, sfx)
RB_DECODE_QGEMV_FORMATS(norm, GEMV_NORM, GEMV_EPI_STORE, )
RB_DECODE_QGEMV_FORMATS(swiglu, GEMV_SWIGLU, GEMV_EPI_STORE, )
RB_DECODE_QGEMV_FORMATS(cast, GEMV_CAST, GEMV_EPI_STORE, )
RB_DECODE_QGEMV_FORMATS(norm, GEMV_NORM, GEMV_EPI_SWIGLU, _pair)
RB_DECODE_QGEMV_FORMATS(cast, GEMV_CAST, GEMV_EPI_SWIGLU, _pair)
