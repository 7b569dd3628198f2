// NF4 with double quantization (bitsandbytes' QLoRA format), read from one matrix's bytes:
// [packed indices | f32 group scales | f32 offset | absmax codes], laid out by
// backend/src/spec/nf4.rs (Nf4Layout), which also holds the rules. The tables RB_NF4_VALUES and
// RB_DYNAMIC_VALUES are generated from that file and prepended.
//
// A block of 64 values has absmax a = DYNAMIC[code] * scale[block / 256] + offset and value
// NF4[index] * a. Each operation is rounded on its own (__fmul_rn / __fadd_rn, which NVRTC does
// not contract into an FMA), so the dequantized bits equal the host's.

#define NF4_WARPS 8

// The two tables in shared memory: lanes index them with different values, which constant
// memory would serialize.
struct Nf4Tables {
    float nf4[16];
    float dynamic[256];
};

__device__ __forceinline__ void load_tables(Nf4Tables& t) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        t.dynamic[i] = RB_DYNAMIC_VALUES[i];
        if (i < 16) t.nf4[i] = RB_NF4_VALUES[i];
    }
    __syncthreads();
}

// Where the parts of one matrix start: byte offsets into its storage.
struct Nf4Parts {
    const u8* indices;
    const float* scales;
    float offset;
    const u8* absmax_codes;
};

__device__ __forceinline__ Nf4Parts parts_of(const u8* w, u64 scales_at, u64 offset_at,
                                             u64 absmax_at) {
    Nf4Parts p;
    p.indices = w;
    p.scales = reinterpret_cast<const float*>(w + scales_at);
    p.offset = *reinterpret_cast<const float*>(w + offset_at);
    p.absmax_codes = w + absmax_at;
    return p;
}

__device__ __forceinline__ float block_absmax(const Nf4Tables& t, const Nf4Parts& p, u64 block) {
    return __fadd_rn(__fmul_rn(t.dynamic[p.absmax_codes[block]], p.scales[block / 256]),
                     p.offset);
}

__device__ __forceinline__ void store8(float* o, const float v[8]) {
    float4* o4 = reinterpret_cast<float4*>(o);
    o4[0] = make_float4(v[0], v[1], v[2], v[3]);
    o4[1] = make_float4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ void store8(bf16* o, const float v[8]) {
    union {
        uint4 u;
        __nv_bfloat162 h[4];
    } pack;
#pragma unroll
    for (int i = 0; i < 4; ++i) pack.h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(o) = pack.u;
}

// The whole matrix of `values` numbers to T, eight values (four bytes of indices) a thread:
// loads and stores stay coalesced, and a warp covers four blocks.
template <typename T>
__device__ void nf4_dequantize(const u8* __restrict__ w, T* __restrict__ out, u64 values,
                               u64 scales_at, u64 offset_at, u64 absmax_at) {
    __shared__ Nf4Tables t;
    load_tables(t);
    Nf4Parts p = parts_of(w, scales_at, offset_at, absmax_at);
    const u32* words = reinterpret_cast<const u32*>(p.indices);
    u64 units = values / 8;
    for (u64 u = (u64)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (u64)gridDim.x * blockDim.x) {
        float a = block_absmax(t, p, u / 8);
        u32 q = words[u];
        float v[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            u32 byte = (q >> (8 * i)) & 0xFF;
            v[2 * i] = __fmul_rn(t.nf4[byte >> 4], a);
            v[2 * i + 1] = __fmul_rn(t.nf4[byte & 0xF], a);
        }
        store8(out + u * 8, v);
    }
}

#define NF4_DEQUANT(T, SUFFIX)                                                                 \
    RB_KERNEL(nf4_dequantize_##SUFFIX)(const u8* w, T* out, u64 values,       \
                                                       u64 scales_at, u64 offset_at,          \
                                                       u64 absmax_at) {                       \
        nf4_dequantize<T>(w, out, values, scales_at, offset_at, absmax_at);                   \
    }
NF4_DEQUANT(float, f32)
NF4_DEQUANT(bf16, bf16)

__device__ __forceinline__ float nf4_load_x(const float* x, u64 i) { return __ldg(x + i); }
__device__ __forceinline__ float nf4_load_x(const bf16* x, u64 i) { return __bfloat162float(x[i]); }
__device__ __forceinline__ void nf4_store_y(float* y, float v) { *y = v; }
__device__ __forceinline__ void nf4_store_y(bf16* y, float v) { *y = __float2bfloat16(v); }

// y [M, n] = x [M, k] · W^T for a few activation rows (decode). One warp owns one output row
// and reads its bytes once for all M rows; lanes take its 64-value blocks in turn, sum
// NF4[index] * x over a block and scale the sum once by the block's absmax.
template <int M, typename T>
__device__ void nf4_gemv(const u8* __restrict__ w, const T* __restrict__ x, T* __restrict__ y,
                         int n, int k, u64 scales_at, u64 offset_at, u64 absmax_at) {
    __shared__ Nf4Tables t;
    load_tables(t);
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * NF4_WARPS + threadIdx.x / 32;
    if (row >= n) return;
    Nf4Parts p = parts_of(w, scales_at, offset_at, absmax_at);
    int blocks_per_row = k / 64;
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
    for (int j = lane; j < blocks_per_row; j += 32) {
        u64 block = (u64)row * blocks_per_row + j;
        float a = block_absmax(t, p, block);
        // A block's 32 bytes of indices start at 32 * block: 16-byte aligned.
        const uint4* q4 = reinterpret_cast<const uint4*>(p.indices + block * 32);
        uint4 lo = q4[0], hi = q4[1];
        u32 words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        float sum[M];
#pragma unroll
        for (int r = 0; r < M; ++r) sum[r] = 0.f;
#pragma unroll
        for (int wi = 0; wi < 8; ++wi) {
#pragma unroll
            for (int bi = 0; bi < 4; ++bi) {
                u32 byte = (words[wi] >> (8 * bi)) & 0xFF;
                float q0 = t.nf4[byte >> 4], q1 = t.nf4[byte & 0xF];
                u64 col = (u64)j * 64 + wi * 8 + bi * 2;
#pragma unroll
                for (int r = 0; r < M; ++r) {
                    const T* xr = x + (u64)r * k + col;
                    sum[r] = fmaf(q0, nf4_load_x(xr, 0), sum[r]);
                    sum[r] = fmaf(q1, nf4_load_x(xr, 1), sum[r]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < M; ++r) acc[r] = fmaf(a, sum[r], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < M; ++r) {
        float v = acc[r];
#pragma unroll
        for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) nf4_store_y(y + (u64)r * n + row, v);
    }
}

// One launch per (activation rows, dtype): rows 1, 2, 4 and 8.
#define NF4_GEMV(M, T, SUFFIX)                                                                 \
    RB_BOUNDED_KERNEL(nf4_gemv_m##M##_##SUFFIX, NF4_WARPS * 32)(    \
        const u8* w, const T* x, T* y, int n, int k, u64 scales_at, u64 offset_at,            \
        u64 absmax_at) {                                                                       \
        nf4_gemv<M, T>(w, x, y, n, k, scales_at, offset_at, absmax_at);                       \
    }
#define NF4_GEMV_ROWS(T, SUFFIX) \
    NF4_GEMV(1, T, SUFFIX)       \
    NF4_GEMV(2, T, SUFFIX)       \
    NF4_GEMV(4, T, SUFFIX)       \
    NF4_GEMV(8, T, SUFFIX)
NF4_GEMV_ROWS(float, f32)
NF4_GEMV_ROWS(bf16, bf16)
