// Attention of one new query per (row, head) against a key/value cache, split over the keys
// (flash-decoding): a decode step has too few queries to fill the device, so the keys are cut
// into chunks of CHUNK, each block scores one chunk for the query heads that share a key/value
// head, and a second kernel merges the chunks' partial results by their log-sum-exp.
//
// The visible keys of row b are first[b] ..= last[b * last_stride], read from device memory:
// a decode step captured in a CUDA graph moves its cursor without new kernel arguments. The
// grid covers the cache's capacity; chunks past the visible window exit at once.
//
// q [batch, heads, head_dim], k and v [batch, kv_heads, capacity, head_dim], all contiguous.
// partial [batch, heads, chunks, head_dim] f32 and stats [batch, heads, chunks, 2] (max, sum of
// exp2(score - max)), scores in base 2 (the scale includes log2(e)).

#define CHUNK 64
#define THREADS 128
// Query heads a block scores at once (a divisor of the group, chosen by the host).
#define MAX_HEADS 16
// The most chunks the merge takes (a cache of MERGE_CHUNKS * CHUNK positions).
#define MERGE_CHUNKS 2048

// Block-wide max and sum that every thread receives (blocks of whole warps, at most 32).
__device__ __forceinline__ float block_max_all(float v) {
    __shared__ float part[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = part[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) r = fmaxf(r, part[w]);
    return r;
}
__device__ __forceinline__ float block_sum_all(float v) {
    __shared__ float part[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) r += part[w];
    return r;
}

template <class T>
__device__ void decode_attention_chunk(const T* __restrict__ q, const T* __restrict__ k,
                                       const T* __restrict__ v, const i64* __restrict__ first,
                                       const i64* __restrict__ last, int last_stride,
                                       float* __restrict__ partial, float* __restrict__ stats,
                                       int heads, int kv_heads, int heads_per_block, int capacity,
                                       int head_dim, float scale2) {
    extern __shared__ float smem[];
    const int chunk = blockIdx.x, chunks = gridDim.x, b = blockIdx.z;
    const int group = heads / kv_heads, blocks_per_kv = group / heads_per_block;
    const int kv = blockIdx.y / blocks_per_kv;
    const int h0 = kv * group + (blockIdx.y % blocks_per_kv) * heads_per_block;
    const int tid = threadIdx.x;
    const i64 lo = max(first[b], (i64)chunk * CHUNK);
    const i64 hi = min(min(last[(i64)b * last_stride] + 1, (i64)(chunk + 1) * CHUNK), (i64)capacity);
    float* qs = smem;                                  // [heads_per_block, head_dim]
    float* ps = smem + heads_per_block * head_dim;     // [heads_per_block, CHUNK]
    float* ms = ps + heads_per_block * CHUNK;          // [heads_per_block, 2]
    // The chunk's key and value rows [CHUNK, head_dim], after the floats rounded up to 16 bytes.
    T* ks = reinterpret_cast<T*>(smem + ((heads_per_block * (head_dim + CHUNK + 2) + 3) & ~3));
    T* vs = ks + CHUNK * head_dim;
    const u64 stat_base = ((u64)b * heads + h0) * chunks + chunk;
    if (lo >= hi) {
        // Nothing visible here: an empty partial the merge weighs zero.
        for (int i = tid; i < heads_per_block * head_dim; i += THREADS) {
            int h = i / head_dim, d = i % head_dim;
            partial[(stat_base + (u64)h * chunks) * head_dim + d] = 0.f;
        }
        for (int h = tid; h < heads_per_block; h += THREADS) {
            stats[(stat_base + (u64)h * chunks) * 2] = -INFINITY;
            stats[(stat_base + (u64)h * chunks) * 2 + 1] = 0.f;
        }
        return;
    }
    for (int i = tid; i < heads_per_block * head_dim; i += THREADS)
        qs[i] = to_f(q[((u64)b * heads + h0) * head_dim + i]) * scale2;
    // Stage the chunk's keys and values: one contiguous run each, read 16 bytes a thread at a
    // time, so the whole tile is in flight at once (read from global memory one key at a time,
    // the chunk took ~35 us of latency).
    const u64 kv_base = ((u64)b * kv_heads + kv) * capacity;
    {
        const int rows = min(CHUNK, capacity - chunk * CHUNK);
        const u64 first = (kv_base + (u64)chunk * CHUNK) * head_dim;
        const int n = rows * head_dim, per = 16 / (int)sizeof(T);
        const bool aligned = ((reinterpret_cast<u64>(k + first) | reinterpret_cast<u64>(v + first)) & 15) == 0;
        if ((head_dim % per) == 0 && aligned) {
            const uint4* kg = reinterpret_cast<const uint4*>(k + first);
            const uint4* vg = reinterpret_cast<const uint4*>(v + first);
            uint4* kd = reinterpret_cast<uint4*>(ks);
            uint4* vd = reinterpret_cast<uint4*>(vs);
            // Four words of each a thread before it stores any, so one latency covers them.
            for (int i0 = tid; i0 < n / per; i0 += 4 * THREADS) {
                uint4 kw[4], vw[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int i = i0 + u * THREADS;
                    if (i < n / per) {
                        kw[u] = __ldg(kg + i);
                        vw[u] = __ldg(vg + i);
                    }
                }
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int i = i0 + u * THREADS;
                    if (i < n / per) {
                        kd[i] = kw[u];
                        vd[i] = vw[u];
                    }
                }
            }
        } else {
            for (int i = tid; i < n; i += THREADS) {
                ks[i] = k[first + i];
                vs[i] = v[first + i];
            }
        }
    }
    __syncthreads();

    // Scores: two threads per key, each over half the head dims, joined by one shuffle.
    {
        const int t = tid >> 1, half = tid & 1;
        const i64 j = (i64)chunk * CHUNK + t;
        const bool visible = j >= lo && j < hi;
        const int d0 = half * (head_dim / 2), d1 = d0 + head_dim / 2;
        float acc[MAX_HEADS];
#pragma unroll
        for (int h = 0; h < MAX_HEADS; ++h) acc[h] = 0.f;
        if (visible) {
            const T* kr = ks + t * head_dim;
#pragma unroll 8
            for (int d = d0; d < d1; ++d) {
                float kd = to_f(kr[d]);
#pragma unroll
                for (int h = 0; h < MAX_HEADS; ++h)
                    if (h < heads_per_block) acc[h] += qs[h * head_dim + d] * kd;
            }
        }
#pragma unroll
        for (int h = 0; h < MAX_HEADS; ++h) {
            if (h < heads_per_block) {
                float s = acc[h] + __shfl_xor_sync(0xffffffffu, acc[h], 1);
                if (half == 0) ps[h * CHUNK + t] = visible ? s : -INFINITY;
            }
        }
    }
    __syncthreads();

    // Per head: the chunk's max and the probabilities relative to it (a warp per head).
    const int warp = tid / 32, lane = tid % 32;
    for (int h = warp; h < heads_per_block; h += THREADS / 32) {
        float* p = ps + h * CHUNK;
        float m = fmaxf(p[lane], p[lane + 32]);
#pragma unroll
        for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        float e0 = exp2f(p[lane] - m), e1 = exp2f(p[lane + 32] - m);
        p[lane] = e0;
        p[lane + 32] = e1;
        float l = e0 + e1;
#pragma unroll
        for (int off = 16; off > 0; off /= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
        if (lane == 0) {
            ms[2 * h] = m;
            ms[2 * h + 1] = l;
        }
    }
    __syncthreads();

    // The chunk's weighted values: consecutive threads read consecutive dims of a value row.
    const int t0 = (int)(lo - (i64)chunk * CHUNK), t1 = (int)(hi - (i64)chunk * CHUNK);
    for (int i = tid; i < heads_per_block * head_dim; i += THREADS) {
        const int h = i / head_dim, d = i % head_dim;
        const float* p = ps + h * CHUNK;
        const T* vc = vs + d;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        int t = t0;
#pragma unroll 2
        for (; t + 4 <= t1; t += 4) {
#pragma unroll
            for (int u = 0; u < 4; ++u) acc[u] += p[t + u] * to_f(vc[(u64)(t + u) * head_dim]);
        }
        for (; t < t1; ++t) acc[0] += p[t] * to_f(vc[(u64)t * head_dim]);
        partial[(stat_base + (u64)h * chunks) * head_dim + d] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
    for (int h = tid; h < heads_per_block; h += THREADS) {
        stats[(stat_base + (u64)h * chunks) * 2] = ms[2 * h];
        stats[(stat_base + (u64)h * chunks) * 2 + 1] = ms[2 * h + 1];
    }
}

// One block per (head, row), a thread per head dim: the chunks weighed by exp2(max - overall
// max), divided by the weighed sums. A row with no visible key gets zeros.

template <class T>
__device__ void decode_attention_merge(const float* __restrict__ partial,
                                       const float* __restrict__ stats, T* __restrict__ out,
                                       int heads, int chunks, int head_dim) {
    // Each chunk's weight exp2(max - overall max), computed once per block into shared memory
    // (all chunks' stats loaded in parallel), then one pass per head dim over the partials.
    __shared__ float weight[MERGE_CHUNKS];
    __shared__ float norm;
    const int h = blockIdx.x, b = blockIdx.y;
    const u64 base = ((u64)b * heads + h) * chunks;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) m = fmaxf(m, stats[(base + c) * 2]);
    m = block_max_all(m);
    float den = 0.f;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        float mc = stats[(base + c) * 2];
        float w = (m == -INFINITY || mc == -INFINITY) ? 0.f : exp2f(mc - m);
        weight[c] = w;
        den += w * stats[(base + c) * 2 + 1];
    }
    den = block_sum_all(den);
    if (threadIdx.x == 0) norm = den > 0.f ? 1.f / den : 0.f;
    __syncthreads();
    // Only chunks with keys in the window weigh anything: a short window in a long cache reads
    // a few partials, not all of them.
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float num[4] = {0.f, 0.f, 0.f, 0.f};
        for (int c = 0; c < chunks; c += 4) {
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (c + u < chunks && weight[c + u] != 0.f)
                    num[u] += weight[c + u] * partial[(base + c + u) * head_dim + d];
        }
        out[((u64)b * heads + h) * head_dim + d] = from_f<T>(((num[0] + num[1]) + (num[2] + num[3])) * norm);
    }
}

#define DECODE_ATTENTION(T)                                                                        \
    extern "C" __global__ void __launch_bounds__(THREADS) decode_attention_chunk_##T(               \
        const T* q, const T* k, const T* v, const i64* first, const i64* last, int last_stride,    \
        float* partial, float* stats, int heads, int kv_heads, int heads_per_block, int capacity,  \
        int head_dim, float scale2) {                                                              \
        decode_attention_chunk<T>(q, k, v, first, last, last_stride, partial, stats, heads,        \
                                  kv_heads, heads_per_block, capacity, head_dim, scale2);          \
    }                                                                                              \
    extern "C" __global__ void decode_attention_merge_##T(const float* partial, const float* stats, \
                                                          T* out, int heads, int chunks,           \
                                                          int head_dim) {                          \
        decode_attention_merge<T>(partial, stats, out, heads, chunks, head_dim);                   \
    }
DECODE_ATTENTION(f32)
DECODE_ATTENTION(bf16)
DECODE_ATTENTION(f16)
