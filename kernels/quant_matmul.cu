// Products with weights kept in ggml's block formats (GGUF's Q8_0, Q4_1 and Q4_K) on the
// device: y[m, n] = sum_k x[m, k] * W[n, k].
//
// Decode multiplies a few rows of activations by every weight once per token, so the time is
// the weight bytes over the bandwidth, provided every load is wide and coalesced. ggml's
// Q8_0 (34 bytes) and Q4_1 (20 bytes) blocks are only 2-byte aligned, and a lane per block
// made each warp load touch 34 different sectors: the kernels ran at an eighth of the
// bandwidth, limited by L1 traffic. So on upload (backend/src/cuda/quant_matmul.rs, `split`)
// those two formats are stored split: every block's header (Q8_0's f16 scale, Q4_1's f16
// scale and min) in one array, then the codes of every row, contiguous and 16-byte aligned.
// The bits are ggml's, only their places change. Q4_K is split too, and rearranged so that
// each 32-value sub-block's 16 code bytes are ordered as Q4_1's and its 6-bit scale and min
// are one 12-bit record (backend/src/cuda/q4_k_layout.rs): a lane then reads one sub-block
// per 16 bytes with one scale and one min, as for Q4_1.
//
// Each weight is read once whatever M (the activation rows) is. Lanes read 16 code bytes
// each per step, adjacent lanes adjacent bytes, so a warp load is 512 contiguous bytes; each
// lane scales its partial dot product once per block (or 32-value sub-block):
//   Q8_0: d * sum(q x)
//   Q4_1: d * sum(q x) + m * sum(x)
//   Q4_K: (d * sc) * sum(q x) - (dmin * mn) * sum(x)
// The activations (a few KB, reused by every row) are read through L1 as 16-byte vectors.
//
// Layouts of the file's blocks: see engine/src/io/gguf/quants.rs.

#define WARPS 8

// Sixteen activations starting at x (16-byte aligned) as floats.
__device__ __forceinline__ void load_x16(const float* x, float v[16]) {
    const float4* p = reinterpret_cast<const float4*>(x);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float4 t = __ldg(p + j);
        v[4 * j] = t.x;
        v[4 * j + 1] = t.y;
        v[4 * j + 2] = t.z;
        v[4 * j + 3] = t.w;
    }
}
__device__ __forceinline__ void load_x16(const __nv_bfloat16* x, float v[16]) {
    const uint4* p = reinterpret_cast<const uint4*>(x);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        uint4 t = __ldg(p + j);
        u32 w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            // A bf16 is the top half of an f32.
            v[8 * j + 2 * i] = __uint_as_float(w[i] << 16);
            v[8 * j + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        }
    }
}

__device__ __forceinline__ void store_y(float* y, float v) { *y = v; }
__device__ __forceinline__ void store_y(__nv_bfloat16* y, float v) { *y = __float2bfloat16(v); }

// The 16 bytes of a uint4 as signed codes (Q8_0).
__device__ __forceinline__ void signed_codes(uint4 q, float c[16]) {
    u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) c[i] = (float)(signed char)((w[i / 4] >> (8 * (i % 4))) & 0xFF);
}

// The 16 bytes of a uint4 as low nibbles (lo) and high nibbles (hi).
__device__ __forceinline__ void nibbles(uint4 q, float lo[16], float hi[16]) {
    u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        u32 b = (w[i / 4] >> (8 * (i % 4))) & 0xFF;
        lo[i] = (float)(b & 0xF);
        hi[i] = (float)(b >> 4);
    }
}

__device__ __forceinline__ float dot16(const float a[16], const float b[16]) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) s = fmaf(a[i], b[i], s);
    return s;
}

__device__ __forceinline__ float sum16(const float a[16]) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) s += a[i];
    return s;
}

template <int M, typename T>
__device__ __forceinline__ void reduce_store(float acc[M], T* y, int n, int row) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < M; ++r) {
        float v = acc[r];
#pragma unroll
        for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) store_y(y + (u64)r * n + row, v);
    }
}

// Q8_0 split: n * k/32 f16 scales, then the n rows of k signed bytes. A lane's 16 codes lie
// in one block (lanes 2b and 2b + 1 share block b).
template <int M, typename T>
__device__ void gemv_q8_0(const u8* __restrict__ w, const T* __restrict__ x, T* __restrict__ y,
                          int n, int k) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= n) return;
    int nb = k / 32;
    const __half* scales = reinterpret_cast<const __half*>(w) + (u64)row * nb;
    const u8* codes = w + codes_offset((u64)n * nb * 2) + (u64)row * k;
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
#pragma unroll 2
    for (int i = lane * 16; i < k; i += 32 * 16) {
        uint4 q = __ldg(reinterpret_cast<const uint4*>(codes + i));
        float d = __half2float(scales[i / 32]);
        float c[16];
        signed_codes(q, c);
#pragma unroll
        for (int r = 0; r < M; ++r) {
            float xv[16];
            load_x16(x + (u64)r * k + i, xv);
            acc[r] = fmaf(d, dot16(c, xv), acc[r]);
        }
    }
    reduce_store<M>(acc, y, n, row);
}

// Q4_1 split: n * k/32 (f16 scale, f16 min) pairs, then the n rows of k/2 bytes, 16 per
// block; byte j holds value j (low nibble) and value j + 16 (high). A lane takes a block.
template <int M, typename T>
__device__ void gemv_q4_1(const u8* __restrict__ w, const T* __restrict__ x, T* __restrict__ y,
                          int n, int k) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= n) return;
    int nb = k / 32;
    const __half2* heads = reinterpret_cast<const __half2*>(w) + (u64)row * nb;
    const u8* codes = w + codes_offset((u64)n * nb * 4) + (u64)row * (k / 2);
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
#pragma unroll 2
    for (int b = lane; b < nb; b += 32) {
        uint4 q = __ldg(reinterpret_cast<const uint4*>(codes + (u64)b * 16));
        float2 dm = __half22float2(heads[b]);
        float lo[16], hi[16];
        nibbles(q, lo, hi);
#pragma unroll
        for (int r = 0; r < M; ++r) {
            float x0[16], x1[16];
            const T* xr = x + (u64)r * k + b * 32;
            load_x16(xr, x0);
            load_x16(xr + 16, x1);
            float qx = dot16(lo, x0) + dot16(hi, x1);
            acc[r] += dm.x * qx + dm.y * (sum16(x0) + sum16(x1));
        }
    }
    reduce_store<M>(acc, y, n, row);
}

// One warp per row, a lane per sub-block (its record is lane % 8: a super-block has eight).
template <int M, typename T>
__device__ void gemv_q4_k(const u8* __restrict__ w, const T* __restrict__ x, T* __restrict__ y,
                          int n, int k) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= n) return;
    int nsub = k / 32;
    const uint4* heads = reinterpret_cast<const uint4*>(w) + (u64)row * (nsub / 8);
    const u8* codes = w + q4_k_codes(n, k) + (u64)row * (k / 2);
    Q4kRecordShifts at(lane % 8);
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
#pragma unroll 2
    for (int s = lane; s < nsub; s += 32) {
        uint4 head = __ldg(heads + s / 8);
        uint4 q = __ldg(reinterpret_cast<const uint4*>(codes + (u64)s * 16));
        float2 dm = q4_k_d_dmin(head);
        int sc, mn;
        q4_k_scale_min(head, at, sc, mn);
        float ds = dm.x * (float)sc, ms = dm.y * (float)mn;
        float lo[16], hi[16];
        nibbles(q, lo, hi);
#pragma unroll
        for (int r = 0; r < M; ++r) {
            float x0[16], x1[16];
            const T* xr = x + (u64)r * k + s * 32;
            load_x16(xr, x0);
            load_x16(xr + 16, x1);
            acc[r] += ds * (dot16(lo, x0) + dot16(hi, x1)) - ms * (sum16(x0) + sum16(x1));
        }
    }
    reduce_store<M>(acc, y, n, row);
}

// One launch per (format, activation rows, dtype): rows 1 to 8 of activations.
#define GEMV(FMT, KERNEL, M, T, SUFFIX)                                                      \
    RB_BOUNDED_KERNEL(quant_gemv_##FMT##_m##M##_##SUFFIX, WARPS * 32)(const u8* w, const T* x, T* y, int n, int k) { \
        KERNEL<M, T>(w, x, y, n, k);                                                         \
    }
#define GEMV_ROWS(FMT, KERNEL, T, SUFFIX) \
    GEMV(FMT, KERNEL, 1, T, SUFFIX)       \
    GEMV(FMT, KERNEL, 2, T, SUFFIX)       \
    GEMV(FMT, KERNEL, 4, T, SUFFIX)       \
    GEMV(FMT, KERNEL, 8, T, SUFFIX)
#define GEMV_TYPES(FMT, KERNEL)              \
    GEMV_ROWS(FMT, KERNEL, float, f32)       \
    GEMV_ROWS(FMT, KERNEL, __nv_bfloat16, bf16)

GEMV_TYPES(Q8_0, gemv_q8_0)
GEMV_TYPES(Q4_1, gemv_q4_1)
GEMV_TYPES(Q4_K, gemv_q4_k)

// ---- BF16 activations: integer products ----
//
// Converting each 4-bit code to a float costs more than reading it (conversions issue at an
// eighth of the FMA rate), which held Q4_K and Q4_1 to a third of the bandwidth. For BF16
// activations, as a mixed-precision decode step has, the activations are first quantized to
// int8 in blocks of 32 (scale absmax / 127, as llama.cpp's q8_1), which rounds them about as
// much as BF16 already did, and the codes multiply four at a time with __dp4a. The float
// kernels above remain the F32 path.
//
// Scratch for M rows of k activations: int8 codes [M, k], then per 32 activations
// [M, k/32] the pair (scale, sum of the 32 activations as quantized).
RB_KERNEL(quantize_activations)(const __nv_bfloat16* __restrict__ x,
                                                u8* __restrict__ scratch, int m, int k) {
    int lane = threadIdx.x % 32;
    u64 b = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    u64 blocks = (u64)m * k / 32;
    if (b >= blocks) return;
    const Int8Block q = quantize_block32(__bfloat162float(x[b * 32 + lane]));
    signed char* codes = reinterpret_cast<signed char*>(scratch);
    float2* scale_sum = reinterpret_cast<float2*>(scratch + (u64)m * k);
    codes[b * 32 + lane] = (signed char)q.q;
    if (lane == 0) scale_sum[b] = make_float2(q.d, q.dsum);
}

// The scratch's parts for row r of m.
struct QuantizedRows {
    const u8* codes;
    const float2* scale_sum;
    __device__ QuantizedRows(const u8* scratch, int m, int k, int r) {
        codes = scratch + (u64)r * k;
        scale_sum = reinterpret_cast<const float2*>(scratch + (u64)m * k) + (u64)r * (k / 32);
    }
};

__device__ __forceinline__ int dot_words(uint4 a, uint4 b) {
    int s = __dp4a((int)a.x, (int)b.x, 0);
    s = __dp4a((int)a.y, (int)b.y, s);
    s = __dp4a((int)a.z, (int)b.z, s);
    return __dp4a((int)a.w, (int)b.w, s);
}

__device__ __forceinline__ uint4 codes16(const u8* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

template <int M>
__device__ void gemv_q8_0_int(const u8* __restrict__ w, const u8* __restrict__ xs,
                              __nv_bfloat16* __restrict__ y, int n, int k, int m,
                              int r0) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= n) return;
    int nb = k / 32;
    const __half* scales = reinterpret_cast<const __half*>(w) + (u64)row * nb;
    const u8* codes = w + codes_offset((u64)n * nb * 2) + (u64)row * k;
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
#pragma unroll 2
    for (int i = lane * 16; i < k; i += 32 * 16) {
        uint4 q = codes16(codes + i);
        float d = __half2float(scales[i / 32]);
#pragma unroll
        for (int r = 0; r < M; ++r) {
            QuantizedRows x(xs, m, k, r0 + r);
            acc[r] += d * x.scale_sum[i / 32].x * (float)dot_words(q, codes16(x.codes + i));
        }
    }
    reduce_store<M>(acc, y, n, row);
}

// ---- Q4_1 and Q4_K with int8 activations ----
// The warp loop is quant_blocks.cuh's (Int4Gemv, int4_walk); each warp stores its rows'
// sums. Warps take row groups w, w + all warps, ...

#define INT4_WARPS 4

template <int M>
struct Int4Store {
    __nv_bfloat16* y;
    int n;
    __device__ void operator()(const float (&acc)[Int4Rows<M>::R][M], int row0, int first) const {
#pragma unroll
        for (int i = 0; i < Int4Rows<M>::R; ++i) {
            const int row = row0 + i;
#pragma unroll
            for (int r = 0; r < M; ++r)
                if (row >= first && row < n) y[(u64)r * n + row] = __float2bfloat16(acc[i][r]);
        }
    }
};

template <int M, typename Weights>
__device__ void gemv_int4(const u8* __restrict__ w, const u8* __restrict__ xs, __nv_bfloat16* __restrict__ y,
                          int n, int k, int m, int r0) {
    using G = Int4Gemv<M, Weights>;
    const u8* xcodes = xs + (u64)r0 * k;
    const float2* xscale = reinterpret_cast<const float2*>(xs + (u64)m * k) + (u64)r0 * (k / 32);
    G g(w, nullptr, n, k, xcodes, xscale, k);
    Int4Store<M> store{y, n};
    int4_walk(g, (blockIdx.x * INT4_WARPS + threadIdx.x / 32) * G::R, gridDim.x * INT4_WARPS * G::R, store);
}

#define GEMV_INT(FMT, KERNEL, M)                                                            \
    RB_BOUNDED_KERNEL(quant_gemv_int_##FMT##_m##M, WARPS * 32)(   \
        const u8* w, const u8* xs, __nv_bfloat16* y, int n, int k, int m, int r0) {         \
        KERNEL<M>(w, xs, y, n, k, m, r0);                                                   \
    }
#define GEMV_INT4(FMT, WEIGHTS, M)                                                               \
    RB_BOUNDED_KERNEL(quant_gemv_int_##FMT##_m##M, INT4_WARPS * 32)(   \
        const u8* w, const u8* xs, __nv_bfloat16* y, int n, int k, int m, int r0) {              \
        gemv_int4<M, WEIGHTS>(w, xs, y, n, k, m, r0);                                            \
    }
#define GEMV_INT_ROWS(FMT, KERNEL) \
    GEMV_INT(FMT, KERNEL, 1)       \
    GEMV_INT(FMT, KERNEL, 2)       \
    GEMV_INT(FMT, KERNEL, 4)       \
    GEMV_INT(FMT, KERNEL, 8)
#define GEMV_INT4_ROWS(FMT, WEIGHTS) \
    GEMV_INT4(FMT, WEIGHTS, 1)       \
    GEMV_INT4(FMT, WEIGHTS, 2)       \
    GEMV_INT4(FMT, WEIGHTS, 4)       \
    GEMV_INT4(FMT, WEIGHTS, 8)
GEMV_INT_ROWS(Q8_0, gemv_q8_0_int)
GEMV_INT4_ROWS(Q4_1, Q4_1Weights)
GEMV_INT4_ROWS(Q4_K, Q4_KWeights)

// W [n, k] dequantized to T (for larger batches: the product then runs on cuBLAS). One thread
// per 32 values (a Q8_0 or Q4_1 block, a Q4_K sub-block), rows of whole units.
template <typename T>
__device__ __forceinline__ void store32(T* o, const float v[32]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) store_y(o + i, v[i]);
}

__device__ __forceinline__ bool unit_index(int n, int k, u64& row, int& unit) {
    u64 units = (u64)n * (k / 32);
    u64 u = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= units) return false;
    row = u / (k / 32);
    unit = (int)(u % (k / 32));
    return true;
}

template <typename T>
__device__ void dequantize_q8_0(const u8* __restrict__ w, T* __restrict__ out, int n, int k) {
    u64 row;
    int b;
    if (!unit_index(n, k, row, b)) return;
    int nb = k / 32;
    float d = __half2float(reinterpret_cast<const __half*>(w)[row * nb + b]);
    const uint4* q = reinterpret_cast<const uint4*>(w + codes_offset((u64)n * nb * 2) + row * k + b * 32);
    float v[32];
    signed_codes(q[0], v);
    signed_codes(q[1], v + 16);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] *= d;
    store32(out + row * k + b * 32, v);
}

template <typename T>
__device__ void dequantize_q4_1(const u8* __restrict__ w, T* __restrict__ out, int n, int k) {
    u64 row;
    int b;
    if (!unit_index(n, k, row, b)) return;
    int nb = k / 32;
    float2 dm = __half22float2(reinterpret_cast<const __half2*>(w)[row * nb + b]);
    uint4 q = *reinterpret_cast<const uint4*>(w + codes_offset((u64)n * nb * 4) + row * (k / 2) + b * 16);
    float v[32];
    nibbles(q, v, v + 16);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = dm.x * v[i] + dm.y;
    store32(out + row * k + b * 32, v);
}

template <typename T>
__device__ void dequantize_q4_k(const u8* __restrict__ w, T* __restrict__ out, int n, int k) {
    u64 row;
    int s;
    if (!unit_index(n, k, row, s)) return;
    int nsub = k / 32;
    uint4 head = reinterpret_cast<const uint4*>(w)[(row * nsub + s) / 8];
    float2 dm = q4_k_d_dmin(head);
    int sc, mn;
    q4_k_scale_min(head, Q4kRecordShifts(s % 8), sc, mn);
    uint4 q = *reinterpret_cast<const uint4*>(w + q4_k_codes(n, k) + (row * nsub + s) * 16);
    float v[32];
    nibbles(q, v, v + 16);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = dm.x * (float)sc * v[i] - dm.y * (float)mn;
    store32(out + row * k + (u64)s * 32, v);
}

#define DEQUANT(FMT, KERNEL, T, SUFFIX)                                                          \
    RB_KERNEL(dequantize_##FMT##_##SUFFIX)(const u8* w, T* out, int n, int k) { \
        KERNEL<T>(w, out, n, k);                                                                 \
    }
DEQUANT(Q8_0, dequantize_q8_0, float, f32)
DEQUANT(Q8_0, dequantize_q8_0, __nv_bfloat16, bf16)
DEQUANT(Q4_1, dequantize_q4_1, float, f32)
DEQUANT(Q4_1, dequantize_q4_1, __nv_bfloat16, bf16)
DEQUANT(Q4_K, dequantize_q4_k, float, f32)
DEQUANT(Q4_K, dequantize_q4_k, __nv_bfloat16, bf16)
