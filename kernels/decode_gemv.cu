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
//   tiles), so the prologue is paid once per resident block, not once per tile.
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
    const int groups = k / 8;

    // ----- prologue: P(in) for every row, rounded to in_dt then W, into shared memory -----
    if (PRO == GEMV_NORM) {
        for (int r = warp; r < rows; r += GEMV_WARPS) {
            float q = 0.f;
            for (int c = lane; c < groups; c += 32) {
                float v[8];
                gemv_load8(in0, in_dt, (i64)r * k + (i64)c * 8, v);
#pragma unroll
                for (int i = 0; i < 8; ++i) q += v[i] * v[i];
            }
            q = warp_sum(q);
            // As kernels/norm.cu: 1 / sqrt(mean of squares + eps), in float.
            if (lane == 0) rstd[r] = 1.f / sqrtf(q / (float)k + eps);
        }
        __syncthreads();
    }
    for (int g = threadIdx.x; g < rows * groups; g += GEMV_THREADS) {
        const int r = g / groups, c = g - r * groups;
        float v[8];
        gemv_load8(in0, in_dt, (i64)g * 8, v);
        if (PRO == GEMV_NORM) {
            float w[8];
            gemv_load8(in1, aux_dt, (i64)c * 8, w);
            const float s = rstd[r];
            // (x - 0) * rstd * w, the order of kernels/norm.cu.
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = gemv_round(in_dt, v[i] * s * w[i]);
        } else if (PRO == GEMV_SWIGLU) {
            float u[8];
            gemv_load8(in1, in_dt, (i64)g * 8, u);
            // a * sigmoid(a) * u, the expression of kernels/swiglu.cu.
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = gemv_round(in_dt, v[i] * (1.f / (1.f + expf(-v[i]))) * u[i]);
        }
        gemv_store8<W>(xs + (i64)g * 8, v);
    }
    __syncthreads();

    // ----- tiles of RB output rows -----
    i64 total_rows = t.end[0];
#pragma unroll
    for (int s = 1; s < GEMV_TARGETS; ++s)
        if (s < t.count) total_rows = t.end[s];
    const int words = k / EPW; // 16-byte words in a row
    const uint4* xw = reinterpret_cast<const uint4*>(xs);
    for (i64 tile = blockIdx.x; tile * RB < total_rows; tile += gridDim.x) {
        const uint4* wp[RB];
#pragma unroll
        for (int j = 0; j < RB; ++j) {
            // Rows past the end read the last row again (an L2 hit) and are not stored.
            const i64 g = min(tile * RB + j, total_rows - 1);
            i64 start, n;
            const int tt = gemv_target(t, g, start, n);
            wp[j] = reinterpret_cast<const uint4*>(gemv_pick(t.w, tt)) + (g - start) * words;
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
                i64 start, n;
                const int tt = gemv_target(t, g, start, n);
                const i64 at = (i64)r * n + (g - start);
                // The product as the matmul outputs it (W), then the residual's add.
                float y = to_f(from_f<W>(s));
                if (res) y = gemv_load1(res, res_dt, at) + y;
                gemv_store1(reinterpret_cast<void*>(gemv_pick(t.y, tt)), out_dt, at, y);
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
