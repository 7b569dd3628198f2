// Attention of one new query per (row, head) against a key/value cache, split over the keys
// (flash-decoding): a decode step has too few queries to fill the device, so the keys are cut
// into chunks of CHUNK, and each block scores one chunk for the query heads that share a
// key/value head. The last block of a (row, head group) to finish merges the chunks' partial
// results by their log-sum-exp, in the same launch: a second kernel cost its launch and a
// gap on the device, more than its work at short contexts.
//
// The visible keys of row b are first[b] ..= last[b * last_stride], read from device memory:
// a decode step captured in a CUDA graph moves its cursor without new kernel arguments. The
// grid covers the cache's capacity; chunks outside the visible window exit at once.
//
// q [batch, heads, head_dim], k and v [batch, kv_heads, capacity, head_dim], all contiguous.
// partial [batch, heads, chunks, head_dim] f32 and stats [batch, heads, chunks, 2] (max, sum of
// exp2(score - max)), scores in base 2 (the scale includes log2(e)). counters [batch, head
// groups] are zero before the launch and left zero after it.

#define CHUNK 64
#define THREADS 128
// Row stride of the scores in shared memory (floats): padded so the tensor-core path's
// fragment loads of two rows g and g + 8 fall in different banks.
#define PS (CHUNK + 8)
// Query heads a block scores at once (a divisor of the group, chosen by the host).
#define MAX_HEADS 16

// The chunks c_first ..= c_last of heads row_head .. row_head + n_heads - 1 (row-major
// (row, head) indices) merged by their log-sum-exp, in one pass (a running max rescales what
// was summed), a thread per (head, dim). Partials come from other blocks: read past L1.
// The merge runs in the one block left at the end, so it is pure latency: each thread carries
// MERGE_OUTS outputs through the pass and loads MERGE_UNROLL chunks of each before it uses
// any, so one pass over a short window costs about one round trip to L2.
#define MERGE_OUTS 4
#define MERGE_UNROLL 4
template <class T>
__device__ __forceinline__ void decode_attention_merge(const float* partial, const float* stats, T* out,
                                                       u64 row_head, int n_heads, int chunks, int c_first,
                                                       int c_last, int head_dim) {
    const int n = n_heads * head_dim;
    for (int i0 = threadIdx.x; i0 < n; i0 += blockDim.x * MERGE_OUTS) {
        u64 base[MERGE_OUTS];
        int dim[MERGE_OUTS];
        float m[MERGE_OUTS], num[MERGE_OUTS], den[MERGE_OUTS];
#pragma unroll
        for (int j = 0; j < MERGE_OUTS; ++j) {
            const int i = min(i0 + j * (int)blockDim.x, n - 1);
            base[j] = (row_head + i / head_dim) * chunks;
            dim[j] = i % head_dim;
            m[j] = -INFINITY;
            num[j] = 0.f;
            den[j] = 0.f;
        }
        for (int c0 = c_first; c0 <= c_last; c0 += MERGE_UNROLL) {
            float mc[MERGE_UNROLL][MERGE_OUTS], lc[MERGE_UNROLL][MERGE_OUTS], pc[MERGE_UNROLL][MERGE_OUTS];
#pragma unroll
            for (int u = 0; u < MERGE_UNROLL; ++u) {
                const int c = min(c0 + u, c_last);
#pragma unroll
                for (int j = 0; j < MERGE_OUTS; ++j) {
                    mc[u][j] = __ldcg(stats + (base[j] + c) * 2);
                    lc[u][j] = __ldcg(stats + (base[j] + c) * 2 + 1);
                    pc[u][j] = __ldcg(partial + (base[j] + c) * head_dim + dim[j]);
                }
            }
#pragma unroll
            for (int u = 0; u < MERGE_UNROLL; ++u) {
                if (c0 + u > c_last) break;
#pragma unroll
                for (int j = 0; j < MERGE_OUTS; ++j) {
                    if (mc[u][j] == -INFINITY) continue;
                    const float mn = fmaxf(m[j], mc[u][j]);
                    const float old = m[j] == -INFINITY ? 0.f : exp2f(m[j] - mn);
                    const float w = exp2f(mc[u][j] - mn);
                    num[j] = num[j] * old + w * pc[u][j];
                    den[j] = den[j] * old + w * lc[u][j];
                    m[j] = mn;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < MERGE_OUTS; ++j) {
            const int i = i0 + j * (int)blockDim.x;
            if (i < n) out[row_head * head_dim + i] = from_f<T>(num[j] * (den[j] > 0.f ? 1.f / den[j] : 0.f));
        }
    }
}

// The tensor-core path (BF16/F16, head_dim a multiple of 16 up to 128, 16-byte aligned
// operands; the host picks it): the chunk's scores Q Kᵀ and weighted values P V are two small
// products through mma.sync m16n8k16, heads along M (a group's heads share the key/value
// rows, so the 8 or 16 of a block form one tile), keys or head dims along N. Each thread of
// the scalar path ran a few thousand dependent instructions for the same two products, and a
// block's latency is the kernel's. P is rounded to the cache's dtype for its product, as
// flash-attention does; its sums stay in FP32.
// Shared rows of that path are padded by 8 elements (16 bytes), so the fragment loads of the
// 8 rows a quarter-warp reads hit distinct banks.
template <class T>
__device__ __forceinline__ u32 pair16(T lo, T hi) {
    return (u32)(*reinterpret_cast<const unsigned short*>(&lo)) |
           ((u32)(*reinterpret_cast<const unsigned short*>(&hi)) << 16);
}

template <class T, bool MMA>
__device__ void decode_attention_chunk(const T* __restrict__ q, const T* __restrict__ k,
                                       const T* __restrict__ v, const i64* __restrict__ first,
                                       const i64* __restrict__ last, int last_stride,
                                       float* __restrict__ partial, float* __restrict__ stats,
                                       u32* __restrict__ counters, T* __restrict__ out, int heads,
                                       int kv_heads, int heads_per_block, int capacity, int head_dim,
                                       float scale2) {
    extern __shared__ float smem[];
    // The output projection after this kernel is launched dependently in a decode step: let it
    // start now, so its blocks load their weights while this kernel's latency runs (they wait
    // for its end before reading anything it writes).
    rb_grid_release();
    const int chunk = blockIdx.x, chunks = gridDim.x, b = blockIdx.z;
    const int group = heads / kv_heads, blocks_per_kv = group / heads_per_block;
    const int kv = blockIdx.y / blocks_per_kv;
    const int h0 = kv * group + (blockIdx.y % blocks_per_kv) * heads_per_block;
    const int tid = threadIdx.x;
    const i64 lo = max(first[b], (i64)chunk * CHUNK);
    const i64 hi = min(min(last[(i64)b * last_stride] + 1, (i64)(chunk + 1) * CHUNK), (i64)capacity);
    // Scalar path: queries [heads_per_block, head_dim] as floats, then the scores
    // [heads_per_block, PS], the stats [heads_per_block, 2], and (from a 16-byte boundary) the
    // chunk's key and value rows [CHUNK, head_dim]. Tensor-core path: queries [16, head_dim + 8]
    // in T (rows past heads_per_block zero), scores [16, PS], stats [16, 2], then key and value
    // rows [CHUNK, head_dim + 8]. Mirrors `shared_bytes` in decode_attention.rs.
    const int mrows = MMA ? 16 : heads_per_block;
    const int qfloats = MMA ? 16 * (head_dim + 8) / 2 : heads_per_block * head_dim;
    const int kstride = MMA ? head_dim + 8 : head_dim;
    float* qs = smem;
    T* qh = reinterpret_cast<T*>(smem);
    float* ps = smem + qfloats;
    float* ms = ps + mrows * PS;
    T* ks = reinterpret_cast<T*>(smem + ((qfloats + mrows * (PS + 2) + 3) & ~3));
    T* vs = ks + CHUNK * kstride;
    const u64 stat_base = ((u64)b * heads + h0) * chunks + chunk;
    // The chunks holding the window [wlo, whi): only those run, and the last of them merges.
    const i64 wlo = first[b], whi = min(last[(i64)b * last_stride] + 1, (i64)capacity);
    if (wlo >= whi) {
        // No visible key: the row's output is zeros, written by the first chunk's block.
        if (chunk == 0)
            for (int i = tid; i < heads_per_block * head_dim; i += THREADS)
                out[((u64)b * heads + h0) * head_dim + i] = from_f<T>(0.f);
        return;
    }
    const int c_first = (int)(wlo / CHUNK), c_last = (int)((whi - 1) / CHUNK);
    if (lo >= hi) return;
    const u64 kv_base = ((u64)b * kv_heads + kv) * capacity;
    const int warp = tid / 32, lane = tid % 32;
    if constexpr (MMA) {
        // Every word in flight at once; keys outside [lo, hi) and heads past the block's are
        // zeros, so the products read no stale cache entries (which may hold any bits).
        const int words = head_dim / 8;
        const T* qb = q + ((u64)b * heads + h0) * head_dim;
        for (int i = tid; i < 16 * words; i += THREADS) {
            const int r = i / words, w = i % words;
            const bool ok = r < heads_per_block;
            cp_async16(qh + r * kstride + w * 8, ok ? qb + (u64)r * head_dim + w * 8 : qb, ok);
        }
        for (int i = tid; i < CHUNK * words; i += THREADS) {
            const int t = i / words, w = i % words;
            const i64 j = (i64)chunk * CHUNK + t;
            const bool ok = j >= lo && j < hi;
            const u64 at = ok ? (kv_base + j) * head_dim + w * 8 : 0;
            cp_async16(ks + t * kstride + w * 8, k + at, ok);
            cp_async16(vs + t * kstride + w * 8, v + at, ok);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        // Scores: warp w takes keys 16w .. 16w + 15 (two n-tiles of 8), all heads (M).
        const int g = lane >> 2, qd = lane & 3;
        float sc[2][4] = {};
        for (int d0 = 0; d0 < head_dim; d0 += 16) {
            const u32 a[4] = {*reinterpret_cast<const u32*>(qh + g * kstride + d0 + 2 * qd),
                              *reinterpret_cast<const u32*>(qh + (g + 8) * kstride + d0 + 2 * qd),
                              *reinterpret_cast<const u32*>(qh + g * kstride + d0 + 2 * qd + 8),
                              *reinterpret_cast<const u32*>(qh + (g + 8) * kstride + d0 + 2 * qd + 8)};
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const T* kr = ks + (warp * 16 + nt * 8 + g) * kstride + d0 + 2 * qd;
                Mma<T>::run(sc[nt], a, *reinterpret_cast<const u32*>(kr), *reinterpret_cast<const u32*>(kr + 8));
            }
        }
        // C: sc[nt][0..1] at head g, keys 2qd and 2qd + 1 of the n-tile; [2..3] at head g + 8.
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int h = g + (e >> 1) * 8, t = warp * 16 + nt * 8 + 2 * qd + (e & 1);
                const i64 j = (i64)chunk * CHUNK + t;
                if (h < heads_per_block) ps[h * PS + t] = (j >= lo && j < hi) ? sc[nt][e] * scale2 : -INFINITY;
            }
    } else {
    for (int i = tid; i < heads_per_block * head_dim; i += THREADS)
        qs[i] = to_f(q[((u64)b * heads + h0) * head_dim + i]) * scale2;
    // Stage the chunk's keys and values: one contiguous run each, read 16 bytes a thread at a
    // time, so the whole tile is in flight at once (read from global memory one key at a time,
    // the chunk took ~35 us of latency).
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
                if (half == 0) ps[h * PS + t] = visible ? s : -INFINITY;
            }
        }
    }
    }
    __syncthreads();

    // Per head: the chunk's max and the probabilities relative to it (a warp per head).
    for (int h = warp; h < heads_per_block; h += THREADS / 32) {
        float* p = ps + h * PS;
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

    if constexpr (MMA) {
        // P V: warp w takes head dims [w, w + 1) * head_dim / 4, in n-tiles of 8; keys are K.
        const int g = lane >> 2, qd = lane & 3, tiles = head_dim / 32;
        float o[4][4] = {};
#pragma unroll
        for (int t0 = 0; t0 < CHUNK; t0 += 16) {
            const float* p0 = ps + g * PS + t0 + 2 * qd;
            const float* p1 = p0 + 8 * PS;
            const u32 a[4] = {Mma<T>::pack(p0[0], p0[1]), Mma<T>::pack(p1[0], p1[1]), Mma<T>::pack(p0[8], p0[9]),
                              Mma<T>::pack(p1[8], p1[9])};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (j < tiles) {
                    const T* vc = vs + (t0 + 2 * qd) * kstride + (warp * tiles + j) * 8 + g;
                    Mma<T>::run(o[j], a, pair16(vc[0], vc[kstride]), pair16(vc[8 * kstride], vc[9 * kstride]));
                }
            }
        }
        // C: o[j][0..1] at head g, dims 2qd and 2qd + 1 of the n-tile; [2..3] at head g + 8.
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int h = g + (e >> 1) * 8, d = (warp * tiles + j) * 8 + 2 * qd + (e & 1);
                if (j < tiles && h < heads_per_block) partial[(stat_base + (u64)h * chunks) * head_dim + d] = o[j][e];
            }
    } else {
    // The chunk's weighted values: consecutive threads read consecutive dims of a value row.
    const int t0 = (int)(lo - (i64)chunk * CHUNK), t1 = (int)(hi - (i64)chunk * CHUNK);
    for (int i = tid; i < heads_per_block * head_dim; i += THREADS) {
        const int h = i / head_dim, d = i % head_dim;
        const float* p = ps + h * PS;
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
    }
    for (int h = tid; h < heads_per_block; h += THREADS) {
        stats[(stat_base + (u64)h * chunks) * 2] = ms[2 * h];
        stats[(stat_base + (u64)h * chunks) * 2 + 1] = ms[2 * h + 1];
    }

    // Count this chunk in; the block that completes the count merges (threadFenceReduction's
    // pattern: every writer fences before the count, the merger after it and reads past L1).
    __shared__ int merger;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        u32* counter = counters + (u64)b * gridDim.y + blockIdx.y;
        const u32 arrived = atomicAdd(counter, 1u) + 1u;
        merger = arrived == (u32)(c_last - c_first + 1);
        // Every chunk has counted: leave the counter zero for the next launch.
        if (merger) *counter = 0u;
    }
    __syncthreads();
    if (!merger) return;
    __threadfence();
    decode_attention_merge(partial, stats, out, (u64)b * heads + h0, heads_per_block, chunks, c_first, c_last,
                           head_dim);
}

#define DECODE_ATTENTION(T, MMA, name)                                                                  \
    RB_BOUNDED_KERNEL(name, THREADS)(                                         \
        const T* q, const T* k, const T* v, const i64* first, const i64* last, int last_stride,         \
        float* partial, float* stats, u32* counters, T* out, int heads, int kv_heads,                   \
        int heads_per_block, int capacity, int head_dim, float scale2) {                                \
        decode_attention_chunk<T, MMA>(q, k, v, first, last, last_stride, partial, stats, counters, out, \
                                       heads, kv_heads, heads_per_block, capacity, head_dim, scale2);    \
    }
DECODE_ATTENTION(f32, false, decode_attention_f32)
DECODE_ATTENTION(bf16, false, decode_attention_bf16)
DECODE_ATTENTION(f16, false, decode_attention_f16)
DECODE_ATTENTION(bf16, true, decode_attention_mma_bf16)
DECODE_ATTENTION(f16, true, decode_attention_mma_f16)
