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
// The bits are ggml's, only their places change. Q4_K's 144-byte super-blocks are already
// 16-byte aligned and stay as the file has them.
//
// One warp owns one output row for all M activation rows (each weight is read once whatever
// M is). Its lanes read 16 code bytes each per step, adjacent lanes adjacent bytes, so a warp
// load is 512 contiguous bytes; each lane scales its partial dot product once per block:
//   Q8_0: d * sum(q x)
//   Q4_1: d * sum(q x) + m * sum(x)
//   Q4_K: (d * sc) * sum(q x) - (dmin * mn) * sum(x)   (per 32-value sub-block)
// The activations (a few KB, reused by every row) are read through L1 as 16-byte vectors.
//
// Layouts of the file's blocks: see engine/src/io/gguf/quants.rs.

#define WARPS 8

// Where the codes start in a split matrix: after the headers, rounded up to 16 bytes.
__device__ __forceinline__ u64 codes_offset(u64 headers_bytes) { return (headers_bytes + 15) & ~15ull; }

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

// Byte i (0..11) of a Q4_K super-block's packed scales, which are bytes 4..15 of its header
// (words y, z and w). Selected from registers: indexing the header as bytes would put it in
// local memory.
__device__ __forceinline__ u32 scale_byte(uint4 head, int i) {
    u32 word = i < 4 ? head.y : (i < 8 ? head.z : head.w);
    return (word >> (8 * (i % 4))) & 0xFF;
}

// Q4_K's sub-block scale and min j (0..7) from the 12 packed bytes (6 bits each).
__device__ __forceinline__ void q4_k_scale_min(uint4 head, int j, float& sc, float& mn) {
    if (j < 4) {
        sc = (float)(scale_byte(head, j) & 63);
        mn = (float)(scale_byte(head, j + 4) & 63);
    } else {
        sc = (float)((scale_byte(head, j + 4) & 0x0F) | ((scale_byte(head, j - 4) >> 6) << 4));
        mn = (float)((scale_byte(head, j + 4) >> 4) | ((scale_byte(head, j) >> 6) << 4));
    }
}

// Q4_K as stored: 144-byte super-blocks of 256 values (f16 d, f16 dmin, 12 bytes of 6-bit
// scales and mins, 128 bytes of codes). Code chunk c (32 bytes) holds sub-block 2c in its low
// nibbles and 2c + 1 in its high ones. Eight lanes share a super-block, lane j taking bytes
// 16j..16j+15 of its codes: half h = j % 2 of chunk c = j / 2.
template <int M, typename T>
__device__ void gemv_q4_k(const u8* __restrict__ w, const T* __restrict__ x, T* __restrict__ y,
                          int n, int k) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= n) return;
    int nb = k / 256;
    const u8* wrow = w + (u64)row * nb * 144;
    int c = (lane % 8) / 2, h = lane % 2;
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
#pragma unroll 2
    for (int sb = lane / 8; sb < nb; sb += 4) {
        const u8* blk = wrow + (u64)sb * 144;
        uint4 head = __ldg(reinterpret_cast<const uint4*>(blk));
        uint4 q = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 32 * c + 16 * h));
        float d = __half2float(__ushort_as_half((unsigned short)(head.x & 0xFFFF)));
        float dmin = __half2float(__ushort_as_half((unsigned short)(head.x >> 16)));
        float sc0, mn0, sc1, mn1;
        q4_k_scale_min(head, 2 * c, sc0, mn0);
        q4_k_scale_min(head, 2 * c + 1, sc1, mn1);
        float lo[16], hi[16];
        nibbles(q, lo, hi);
#pragma unroll
        for (int r = 0; r < M; ++r) {
            float x0[16], x1[16];
            const T* xr = x + (u64)r * k + sb * 256 + 64 * c + 16 * h;
            load_x16(xr, x0);
            load_x16(xr + 32, x1);
            acc[r] += d * (sc0 * dot16(lo, x0) + sc1 * dot16(hi, x1)) -
                      dmin * (mn0 * sum16(x0) + mn1 * sum16(x1));
        }
    }
    reduce_store<M>(acc, y, n, row);
}

// One launch per (format, activation rows, dtype): rows 1 to 8 of activations.
#define GEMV(FMT, KERNEL, M, T, SUFFIX)                                                      \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                 \
        quant_gemv_##FMT##_m##M##_##SUFFIX(const u8* w, const T* x, T* y, int n, int k) { \
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
// Scratch for M rows of k activations: int8 codes [M, k], then f32 scales [M, k/32], then
// f32 sums of every 16 activations as quantized [M, k/16].
extern "C" __global__ void quantize_activations(const __nv_bfloat16* __restrict__ x,
                                                u8* __restrict__ scratch, int m, int k) {
    int lane = threadIdx.x % 32;
    u64 b = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    u64 blocks = (u64)m * k / 32;
    if (b >= blocks) return;
    float v = __bfloat162float(x[b * 32 + lane]);
    float amax = fabsf(v);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    float d = amax / 127.f;
    int q = d == 0.f ? 0 : __float2int_rn(v / d);
    signed char* codes = reinterpret_cast<signed char*>(scratch);
    float* scales = reinterpret_cast<float*>(scratch + (u64)m * k);
    float* sums = scales + blocks;
    codes[b * 32 + lane] = (signed char)q;
    int half_sum = q;
#pragma unroll
    for (int off = 8; off > 0; off /= 2) half_sum += __shfl_xor_sync(0xffffffffu, half_sum, off);
    if (lane == 0) scales[b] = d;
    if (lane % 16 == 0) sums[2 * b + lane / 16] = d * (float)half_sum;
}

// The scratch's parts for row r of m.
struct QuantizedRows {
    const u8* codes;
    const float* scales;
    const float* sums;
    __device__ QuantizedRows(const u8* scratch, int m, int k, int r) {
        u64 blocks = (u64)m * k / 32;
        codes = scratch + (u64)r * k;
        scales = reinterpret_cast<const float*>(scratch + (u64)m * k) + (u64)r * (k / 32);
        sums = reinterpret_cast<const float*>(scratch + (u64)m * k) + blocks + (u64)r * (k / 16);
    }
};

__device__ __forceinline__ int dot_words(uint4 a, uint4 b) {
    int s = __dp4a((int)a.x, (int)b.x, 0);
    s = __dp4a((int)a.y, (int)b.y, s);
    s = __dp4a((int)a.z, (int)b.z, s);
    return __dp4a((int)a.w, (int)b.w, s);
}

__device__ __forceinline__ void split_nibbles(uint4 q, uint4& lo, uint4& hi) {
    lo = make_uint4(q.x & 0x0F0F0F0Fu, q.y & 0x0F0F0F0Fu, q.z & 0x0F0F0F0Fu, q.w & 0x0F0F0F0Fu);
    hi = make_uint4((q.x >> 4) & 0x0F0F0F0Fu, (q.y >> 4) & 0x0F0F0F0Fu, (q.z >> 4) & 0x0F0F0F0Fu,
                    (q.w >> 4) & 0x0F0F0F0Fu);
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
            acc[r] += d * x.scales[i / 32] * (float)dot_words(q, codes16(x.codes + i));
        }
    }
    reduce_store<M>(acc, y, n, row);
}

template <int M>
__device__ void gemv_q4_1_int(const u8* __restrict__ w, const u8* __restrict__ xs,
                              __nv_bfloat16* __restrict__ y, int n, int k, int m,
                              int r0) {
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
        uint4 lo, hi;
        split_nibbles(codes16(codes + (u64)b * 16), lo, hi);
        float2 dm = __half22float2(heads[b]);
#pragma unroll
        for (int r = 0; r < M; ++r) {
            QuantizedRows x(xs, m, k, r0 + r);
            int s = dot_words(lo, codes16(x.codes + b * 32)) + dot_words(hi, codes16(x.codes + b * 32 + 16));
            acc[r] += dm.x * x.scales[b] * (float)s + dm.y * (x.sums[2 * b] + x.sums[2 * b + 1]);
        }
    }
    reduce_store<M>(acc, y, n, row);
}

template <int M>
__device__ void gemv_q4_k_int(const u8* __restrict__ w, const u8* __restrict__ xs,
                              __nv_bfloat16* __restrict__ y, int n, int k, int m,
                              int r0) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= n) return;
    int nb = k / 256;
    const u8* wrow = w + (u64)row * nb * 144;
    int c = (lane % 8) / 2, h = lane % 2;
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
#pragma unroll 2
    for (int sb = lane / 8; sb < nb; sb += 4) {
        const u8* blk = wrow + (u64)sb * 144;
        uint4 head = codes16(blk);
        uint4 lo, hi;
        split_nibbles(codes16(blk + 16 + 32 * c + 16 * h), lo, hi);
        float d = __half2float(__ushort_as_half((unsigned short)(head.x & 0xFFFF)));
        float dmin = __half2float(__ushort_as_half((unsigned short)(head.x >> 16)));
        float sc0, mn0, sc1, mn1;
        q4_k_scale_min(head, 2 * c, sc0, mn0);
        q4_k_scale_min(head, 2 * c + 1, sc1, mn1);
        int at = sb * 256 + 64 * c + 16 * h;  // the first activation of the low nibbles
#pragma unroll
        for (int r = 0; r < M; ++r) {
            QuantizedRows x(xs, m, k, r0 + r);
            float s0 = (float)dot_words(lo, codes16(x.codes + at)) * x.scales[at / 32];
            float s1 = (float)dot_words(hi, codes16(x.codes + at + 32)) * x.scales[at / 32 + 1];
            acc[r] += d * (sc0 * s0 + sc1 * s1) - dmin * (mn0 * x.sums[at / 16] + mn1 * x.sums[at / 16 + 2]);
        }
    }
    reduce_store<M>(acc, y, n, row);
}

#define GEMV_INT(FMT, KERNEL, M)                                                            \
    extern "C" __global__ void __launch_bounds__(WARPS * 32) quant_gemv_int_##FMT##_m##M(   \
        const u8* w, const u8* xs, __nv_bfloat16* y, int n, int k, int m, int r0) {         \
        KERNEL<M>(w, xs, y, n, k, m, r0);                                                   \
    }
#define GEMV_INT_ROWS(FMT, KERNEL) \
    GEMV_INT(FMT, KERNEL, 1)       \
    GEMV_INT(FMT, KERNEL, 2)       \
    GEMV_INT(FMT, KERNEL, 4)       \
    GEMV_INT(FMT, KERNEL, 8)
GEMV_INT_ROWS(Q8_0, gemv_q8_0_int)
GEMV_INT_ROWS(Q4_1, gemv_q4_1_int)
GEMV_INT_ROWS(Q4_K, gemv_q4_k_int)

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
    int u;
    if (!unit_index(n, k, row, u)) return;
    const u8* blk = w + row * (k / 256) * 144 + (u64)(u / 8) * 144;
    int j = u % 8;
    float d = __half2float(*reinterpret_cast<const __half*>(blk));
    float dmin = __half2float(*reinterpret_cast<const __half*>(blk + 2));
    float sc, mn;
    q4_k_scale_min(*reinterpret_cast<const uint4*>(blk), j, sc, mn);
    const uint4* q = reinterpret_cast<const uint4*>(blk + 16 + (j / 2) * 32);
    float lo[16], hi[16], v[32];
    int shift_high = j % 2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        nibbles(q[half], lo, hi);
#pragma unroll
        for (int i = 0; i < 16; ++i) v[16 * half + i] = shift_high ? hi[i] : lo[i];
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = d * sc * v[i] - dmin * mn;
    store32(out + row * k + (u64)u * 32, v);
}

#define DEQUANT(FMT, KERNEL, T, SUFFIX)                                                          \
    extern "C" __global__ void dequantize_##FMT##_##SUFFIX(const u8* w, T* out, int n, int k) { \
        KERNEL<T>(w, out, n, k);                                                                 \
    }
DEQUANT(Q8_0, dequantize_q8_0, float, f32)
DEQUANT(Q8_0, dequantize_q8_0, __nv_bfloat16, bf16)
DEQUANT(Q4_1, dequantize_q4_1, float, f32)
DEQUANT(Q4_1, dequantize_q4_1, __nv_bfloat16, bf16)
DEQUANT(Q4_K, dequantize_q4_k, float, f32)
DEQUANT(Q4_K, dequantize_q4_k, __nv_bfloat16, bf16)
