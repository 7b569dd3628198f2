// Products with weights kept in ggml's block formats (GGUF's Q8_0, Q4_1 and Q4_K), read
// straight from the file's bytes on the device: y[m, n] = sum_k x[m, k] * W[n, k].
//
// Decode multiplies a few rows of activations by every weight once per token, so the time is
// the weight bytes over the bandwidth. One warp owns one output row n for all M activation
// rows (the weights are read once whatever M is); its lanes take "units" of 32 weights in turn:
// a whole block for Q8_0 and Q4_1, one of the eight 32-value sub-blocks of a Q4_K super-block.
// A unit's sum is scaled once, after its 32 products:
//   Q8_0: d * sum(q x)
//   Q4_1: d * sum(q x) + m * sum(x)
//   Q4_K: (d * sc) * sum(q x) - (dmin * mn) * sum(x)
// and the lane sums meet in a warp reduction. Blocks are only 2-byte aligned in the file
// (34, 20 and 144 bytes), so their bytes are read as 16-bit words.
//
// Layouts: see engine/src/io/gguf/quants.rs, which dequantizes them on the host.

#define WARPS 8

__device__ __forceinline__ float half_at(const u8* p) {
    return __half2float(*reinterpret_cast<const __half*>(p));
}

__device__ __forceinline__ float load_x(const float* x, int i) { return __ldg(x + i); }
__device__ __forceinline__ float load_x(const __nv_bfloat16* x, int i) {
    return __bfloat162float(x[i]);
}
__device__ __forceinline__ void store_y(float* y, float v) { *y = v; }
__device__ __forceinline__ void store_y(__nv_bfloat16* y, float v) { *y = __float2bfloat16(v); }

// Sixteen bytes of a unit as four 32-bit words, from 2-byte-aligned memory.
__device__ __forceinline__ void load16(const u8* p, u32 w[4]) {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (u32)h[2 * i] | ((u32)h[2 * i + 1] << 16);
}

// Unit u of a row in each format: its 32 weight codes as floats and the two coefficients
// (scale a on sum(q x), offset b on sum(x)).
struct Q8_0 {
    static constexpr int BYTES = 34, UNITS_PER_BLOCK = 1;
    static __device__ __forceinline__ void unit(const u8* row, int u, float q[32], float& a,
                                                float& b) {
        const u8* blk = row + (u64)u * BYTES;
        a = half_at(blk);
        b = 0.f;
        u32 w[8];
        load16(blk + 2, w);
        load16(blk + 18, w + 4);
#pragma unroll
        for (int i = 0; i < 32; ++i) q[i] = (float)(signed char)((w[i / 4] >> (8 * (i % 4))) & 0xFF);
    }
};

struct Q4_1 {
    static constexpr int BYTES = 20, UNITS_PER_BLOCK = 1;
    static __device__ __forceinline__ void unit(const u8* row, int u, float q[32], float& a,
                                                float& b) {
        const u8* blk = row + (u64)u * BYTES;
        a = half_at(blk);
        b = half_at(blk + 2);
        u32 w[4];
        load16(blk + 4, w);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            u32 byte = (w[j / 4] >> (8 * (j % 4))) & 0xFF;
            q[j] = (float)(byte & 0xF);
            q[j + 16] = (float)(byte >> 4);
        }
    }
};

struct Q4_K {
    static constexpr int BYTES = 144, UNITS_PER_BLOCK = 8;
    static __device__ __forceinline__ void unit(const u8* row, int u, float q[32], float& a,
                                                float& b) {
        const u8* blk = row + (u64)(u / 8) * BYTES;
        int j = u % 8;
        float d = half_at(blk), dmin = half_at(blk + 2);
        const u8* s = blk + 4;
        u8 sc, mn;
        if (j < 4) {
            sc = s[j] & 63;
            mn = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
            mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        a = d * (float)sc;
        b = -(dmin * (float)mn);
        // Sub-blocks 2c and 2c + 1 share the 32 bytes of chunk c: low and high nibbles.
        const u8* qs = blk + 16 + (j / 2) * 32;
        int shift = 4 * (j % 2);
        u32 w[8];
        load16(qs, w);
        load16(qs + 16, w + 4);
#pragma unroll
        for (int i = 0; i < 32; ++i) q[i] = (float)((w[i / 4] >> (8 * (i % 4) + shift)) & 0xF);
    }
};

// y [M, n] = x [M, k] · W^T, W [n, k] in format F. One warp per output row; k is a multiple
// of the block size (checked on the host).
template <typename F, int M, typename T>
__device__ void quant_gemv(const u8* __restrict__ w, const T* __restrict__ x,
                           T* __restrict__ y, int n, int k) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= n) return;
    int units = k / 32;
    u64 row_bytes = (u64)(units / F::UNITS_PER_BLOCK) * F::BYTES;
    const u8* wrow = w + row * row_bytes;
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
    for (int u = lane; u < units; u += 32) {
        float q[32], a, b;
        F::unit(wrow, u, q, a, b);
#pragma unroll
        for (int r = 0; r < M; ++r) {
            const T* xr = x + (u64)r * k + u * 32;
            float qx = 0.f, sx = 0.f;
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                float xv = load_x(xr, i);
                qx = fmaf(q[i], xv, qx);
                sx += xv;
            }
            acc[r] += a * qx + b * sx;
        }
    }
#pragma unroll
    for (int r = 0; r < M; ++r) {
        float v = acc[r];
#pragma unroll
        for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) store_y(y + (u64)r * n + row, v);
    }
}

// One launch per (format, activation rows, dtype): rows 1 to 8 of activations.
#define GEMV(FMT, M, T, SUFFIX)                                                              \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                 \
        quant_gemv_##FMT##_m##M##_##SUFFIX(const u8* w, const T* x, T* y, int n, int k) { \
        quant_gemv<FMT, M, T>(w, x, y, n, k);                                                \
    }
#define GEMV_ROWS(FMT, T, SUFFIX) \
    GEMV(FMT, 1, T, SUFFIX)       \
    GEMV(FMT, 2, T, SUFFIX)       \
    GEMV(FMT, 4, T, SUFFIX)       \
    GEMV(FMT, 8, T, SUFFIX)
#define GEMV_TYPES(FMT)              \
    GEMV_ROWS(FMT, float, f32)       \
    GEMV_ROWS(FMT, __nv_bfloat16, bf16)

GEMV_TYPES(Q8_0)
GEMV_TYPES(Q4_1)
GEMV_TYPES(Q4_K)

// W [n, k] in format F dequantized to T (for larger batches: the product then runs on cuBLAS).
// One thread per unit of 32 values.
template <typename F, typename T>
__device__ void dequantize(const u8* __restrict__ w, T* __restrict__ out, int n, int k) {
    u64 units = (u64)n * (k / 32);
    u64 u = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= units) return;
    int per_row = k / 32;
    u64 row = u / per_row;
    int ur = (int)(u % per_row);
    u64 row_bytes = (u64)(per_row / F::UNITS_PER_BLOCK) * F::BYTES;
    float q[32], a, b;
    F::unit(w + row * row_bytes, ur, q, a, b);
    T* o = out + row * k + (u64)ur * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) store_y(o + i, a * q[i] + b);
}

#define DEQUANT(FMT, T, SUFFIX)                                                                  \
    extern "C" __global__ void dequantize_##FMT##_##SUFFIX(const u8* w, T* out, int n, int k) { \
        dequantize<FMT, T>(w, out, n, k);                                                        \
    }
DEQUANT(Q8_0, float, f32)
DEQUANT(Q8_0, __nv_bfloat16, bf16)
DEQUANT(Q4_1, float, f32)
DEQUANT(Q4_1, __nv_bfloat16, bf16)
DEQUANT(Q4_K, float, f32)
DEQUANT(Q4_K, __nv_bfloat16, bf16)
