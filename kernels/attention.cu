// Fused scaled-dot-product attention for BF16 and F16 with head dims 64 and 128, in the
// flash-attention manner: the [queries, keys] score matrix never reaches memory. Tensor-core
// products through mma.sync m16n8k16 (FP32 accumulation), tiles staged in shared memory by
// cp.async and read with ldmatrix.
//
// Views: element (b, h, t, d) of q, k, v, o and the gradients lives at
// b * sb + h * sh + t * st + d (the last dim is contiguous, rows are 16-byte aligned; the host
// checks both). Grouped-query attention: query head h reads key/value head h / (heads / kv_heads).
// Causal: query i sees keys j <= i + (tk - tq), the last query seeing every key.
//
// Forward: a block owns 128 queries of one (batch, head) at head dim 64 (64 at head dim 128);
// each warp owns 16 rows and walks the keys, tile by double-buffered tile, with an online softmax
// in the base-2 domain (see `FwdTile`). It also writes each row's log-sum-exp (base 2, of the
// scaled scores) for the backward.
// Backward: `attn_bwd_dot` computes D_i = sum_d dO_id * O_id; `attn_bwd_kv` owns 128 keys (64 at
// head dim 128) of one kv head and walks every query tile of every query head in its group,
// accumulating dK and dV in registers (see `BwdTile`). dQ comes one of two ways:
// - fused (`attn_bwd_kvq`, FlashAttention-2's five products): the same walk also multiplies each
//   chunk's dS by the block's keys and adds the partial dQ into an F32 buffer with atomics
//   (zeroed by `attn_bwd_dot`), which `attn_bwd_dq` then scales and rounds. The order of those
//   additions varies from run to run, so dQ may differ in its last bits between runs;
// - split (`attn_bwd_q`, deterministic): a second kernel owns 128 queries (64) and walks their
//   key tiles, recomputing the probabilities once more: eight products in all instead of five.
// Both recompute the probabilities from the saved log-sum-exp.

struct AttnView {
    i64 sb, sh, st;
};

struct AttnShape {
    int batch, heads, kv_heads, tq, tk, causal;
    float scale;      // the softmax scale, applied to q . k
    float scale_log2; // scale * log2(e)
};

// ----- tensor-core and copy primitives (Mma is in common.cuh) -----

__device__ __forceinline__ void ldsm_x4(u32* r, const void* p) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_trans(u32* r, const void* p) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// A tile is rows of D elements; its 16-byte chunks are XOR-swizzled by row so that the eight
// rows an ldmatrix reads at one column land in eight different bank groups.
template <int D> __device__ __forceinline__ int swz(int row, int chunk) {
    return row * D + ((chunk ^ (row & 7)) << 3);
}

// The same for tiles of COLS <= 64 elements a row (COLS / 8 chunks): the chunk is XORed with a
// run of rows long enough that eight consecutive rows at one chunk still cover the eight bank
// groups (equal to `swz` at 64 columns).
template <int COLS> __device__ __forceinline__ int swz_narrow(int row, int chunk) {
    constexpr int C = COLS / 8, SHIFT = C == 8 ? 0 : C == 4 ? 1 : C == 2 ? 2 : 3;
    static_assert(COLS % 8 == 0 && COLS <= 64, "one to eight chunks a row");
    return row * COLS + ((chunk ^ ((row >> SHIFT) & (C - 1))) << 3);
}

// Rows [0, valid) of a ROWS-row tile from `g` (row stride `st`), copied by THREADS threads;
// rows past `valid` are zero-filled. `safe` is any readable address, used as the source of the
// zero-filled chunks.
template <int D, int ROWS, int THREADS, class T>
__device__ __forceinline__ void load_rows(T* sm, const T* g, i64 st, int valid, const T* safe) {
    // Thread t copies chunk t % CH of rows t / CH + n * STEP: one running source pointer, and a
    // destination that moves by whole multiples of 8 rows, so its swizzle never changes.
    constexpr int CH = D / 8, STEP = THREADS / CH;
    static_assert(THREADS % CH == 0 && ROWS % STEP == 0 && STEP % 8 == 0, "whole swizzle periods a pass");
    const int r0 = threadIdx.x / CH, c = threadIdx.x % CH;
    const T* src = g + r0 * st + c * 8;
    T* dst = sm + swz<D>(r0, c);
#pragma unroll
    for (int n = 0; n < ROWS / STEP; ++n) {
        const bool ok = r0 + n * STEP < valid;
        cp_async16(dst + n * STEP * D, ok ? src : safe, ok);
        src += STEP * st;
    }
}

// A-operand fragments (16 rows from `row0`, k-step kk) of a swizzled tile.
template <int D, class T> __device__ __forceinline__ void load_a(u32* a, const T* sm, int row0, int kk) {
    int lane = threadIdx.x & 31;
    ldsm_x4(a, sm + swz<D>(row0 + (lane & 15), kk * 2 + (lane >> 4)));
}

// B-operand fragments of two n-tiles (rows n0 .. n0 + 15 of a tile stored [n][k]), k-step kk:
// {r[0], r[1]} for n-tile n0 / 8, {r[2], r[3]} for the next.
template <int D, class T> __device__ __forceinline__ void load_b(u32* r, const T* sm, int n0, int kk) {
    int lane = threadIdx.x & 31;
    ldsm_x4(r, sm + swz<D>(n0 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
}

// B-operand fragments from a tile stored [k][n] (rows k0 .. k0 + 15), n columns n0 .. n0 + 15.
template <int D, class T> __device__ __forceinline__ void load_b_trans(u32* r, const T* sm, int k0, int n0) {
    int lane = threadIdx.x & 31;
    ldsm_x4_trans(r, sm + swz<D>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4)));
}

// Accumulator fragments to zero: N m16n8 tiles.
template <int N> __device__ __forceinline__ void zero_frags(float (*c)[4]) {
#pragma unroll
    for (int i = 0; i < N; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.f;
}

// C[16 x N] += A[16 x D] * B^T where B is an [N][D] tile in shared memory.
// m16n8k16 fragments (g = lane / 4, t4 = lane % 4): A holds a[0] = (row g, cols 2t4, 2t4+1),
// a[1] = (row g+8, same cols), a[2] = (row g, cols 8+2t4, 9+2t4), a[3] = (row g+8, those);
// B (k x n, "col") holds b0 = (k 2t4, 2t4+1; n g), b1 = (k 8+2t4, 9+2t4; n g); C holds
// c[0], c[1] = (row g, cols 2t4, 2t4+1) and c[2], c[3] = (row g+8, same cols). B^T rows of the
// [N][D] tile are B's columns, so ldmatrix without .trans gives b0, b1 directly (load_b).
template <int D, int N, class T>
__device__ __forceinline__ void mma_abt(float (*c)[4], const u32 (*a)[4], const T* sm) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < N / 16; ++np) {
            u32 b[4];
            load_b<D>(b, sm, np * 16, kk);
            Mma<T>::run(c[2 * np], a[kk], b[0], b[1]);
            Mma<T>::run(c[2 * np + 1], a[kk], b[2], b[3]);
        }
    }
}

// As `mma_abt`, with A read from rows row0 .. row0 + 15 of a swizzled [rows][D] tile in shared
// memory at each k-step, for operands too costly to keep in registers.
template <int D, int N, class T>
__device__ __forceinline__ void mma_abt_sa(float (*c)[4], const T* sa, int row0, const T* sm) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        u32 a[4];
        load_a<D>(a, sa, row0, kk);
#pragma unroll
        for (int np = 0; np < N / 16; ++np) {
            u32 b[4];
            load_b<D>(b, sm, np * 16, kk);
            Mma<T>::run(c[2 * np], a, b[0], b[1]);
            Mma<T>::run(c[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// C[16 x D] += P[16 x N] * B where P is held as accumulator fragments (rounded to T here) and
// B is an [N][D] tile in shared memory. P's accumulator tiles 2kq and 2kq+1 cover its columns
// 16kq .. 16kq+15, and their fragments are exactly the A fragments of that k-step: a[0] =
// (row g, cols 2t4, 2t4+1) = p[2kq][0..1], a[1] = (row g+8) = p[2kq][2..3], a[2] = (row g,
// cols 8+2t4 ..) = p[2kq+1][0..1], a[3] = p[2kq+1][2..3]; no shuffles are needed.
template <int D, int N, class T>
__device__ __forceinline__ void mma_pb(float (*c)[4], const float (*p)[4], const T* sm) {
#pragma unroll
    for (int kq = 0; kq < N / 16; ++kq) {
        u32 a[4] = {Mma<T>::pack(p[2 * kq][0], p[2 * kq][1]), Mma<T>::pack(p[2 * kq][2], p[2 * kq][3]),
                    Mma<T>::pack(p[2 * kq + 1][0], p[2 * kq + 1][1]), Mma<T>::pack(p[2 * kq + 1][2], p[2 * kq + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            u32 b[4];
            load_b_trans<D>(b, sm, kq * 16, dp * 16);
            Mma<T>::run(c[2 * dp], a, b[0], b[1]);
            Mma<T>::run(c[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

// Writes rows `row` and `row + 8` (accumulator halves 0 and 1) of a [16 x D] accumulator, scaled.
template <int D, class T>
__device__ __forceinline__ void store_rows(T* base, i64 st, int row, int limit, const float (*c)[4], float s0, float s1) {
    int t4 = threadIdx.x & 3;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        int r = row + half * 8;
        if (r >= limit) continue;
        float s = half ? s1 : s0;
        T* p = base + r * st + 2 * t4;
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) *(u32*)(p + dn * 8) = Mma<T>::pack(c[dn][2 * half] * s, c[dn][2 * half + 1] * s);
    }
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// ----- forward -----

// The forward's tiles per head dim: WARPS warps of 16 query rows each (a block owns 16 * WARPS
// queries) walk the keys KEYS at a time. Shared memory is two stages of one K and one V tile
// (2 * 2 * KEYS * D elements: 32 KB for both head dims), and the block's Q tile (16 * WARPS * D
// elements, the size of one stage) is staged through stage 1 before the walk starts. Head dim
// 128 keeps 64 queries: its accumulators and Q fragments alone take 96 registers a thread.
// The launcher mirrors these numbers (`forward_block` in backend/src/cuda/attention.rs).
template <int D> struct FwdTile;
template <> struct FwdTile<64> { static constexpr int WARPS = 8, KEYS = 64, BLOCKS_PER_SM = 2; };
template <> struct FwdTile<128> { static constexpr int WARPS = 4, KEYS = 32, BLOCKS_PER_SM = 3; };

// A block owns 16 * WARPS queries of one (batch, head). Key tile j + 1 is copied (cp.async) into
// one stage while tile j is computed from the other, with one barrier a tile. Tiles wholly in a
// warp's causal future are skipped by that warp; masks are applied only on tiles that cross a
// warp's diagonal or the end of the keys.
template <class T, int D>
__device__ void attn_fwd(const T* q, AttnView qv, const T* k, AttnView kv, const T* v, AttnView vv, T* o,
                         AttnView ov, float* lse, AttnShape s) {
    constexpr int WARPS = FwdTile<D>::WARPS, BQ = 16 * WARPS, BK = FwdTile<D>::KEYS, NT = 32 * WARPS;
    constexpr int KV = BK * D; // elements of one K or V tile
    static_assert(BQ * D == 2 * KV, "the Q tile fills exactly one stage");
    __shared__ __align__(128) T smem[2][2 * KV]; // stage: K tile, then V tile
    const int nqb = (s.tq + BQ - 1) / BQ;
    const int q0 = (nqb - 1 - (int)blockIdx.x) * BQ; // the longest (causal) blocks first
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (s.heads / s.kv_heads);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const T* qb = q + b * qv.sb + h * qv.sh;
    const T* kb = k + b * kv.sb + hk * kv.sh;
    const T* vb = v + b * vv.sb + hk * vv.sh;
    const int off = s.tk - s.tq;
    // Keys the block needs: [0, kend), the last query of the block seeing keys <= q0 + BQ - 1 + off.
    const int kend = s.causal ? min(s.tk, q0 + BQ + off) : s.tk;
    const int nkb = kend > 0 ? (kend + BK - 1) / BK : 0;

    // Starts the copies of key tile j into stage `st` as one commit group.
    auto issue = [&](int j, int st) {
        const int k0 = j * BK;
        load_rows<D, BK, NT>(smem[st], kb + k0 * kv.st, kv.st, s.tk - k0, k);
        load_rows<D, BK, NT>(smem[st] + KV, vb + k0 * vv.st, vv.st, s.tk - k0, v);
        cp_async_commit();
    };
    load_rows<D, BQ, NT>(smem[1], qb + q0 * qv.st, qv.st, s.tq - q0, q);
    cp_async_commit();
    if (nkb > 0) {
        issue(0, 0);
        cp_async_wait<1>(); // Q has landed; tile 0 may still be in flight
    } else {
        cp_async_wait<0>();
    }
    __syncthreads();
    // This warp's 16 query rows as A fragments, k-step kk covering dims 16kk .. 16kk + 15.
    u32 qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) load_a<D>(qf[kk], smem[1], warp * 16, kk);
    __syncthreads(); // every warp holds its Q before stage 1 is refilled with tile 1

    float acc[D / 8][4];
    zero_frags<D / 8>(acc);
    // Row statistics of rows g and g + 8 of this warp (accumulator halves 0 and 1): the running
    // max m (base-2 domain, scaled) and this thread's partial sum l of its columns.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int wq0 = q0 + warp * 16; // this warp's first query
    const int row0 = wq0 + g;

    for (int j = 0; j < nkb; ++j) {
        const int k0 = j * BK, st = j & 1;
        cp_async_wait<0>(); // tile j (the only group in flight) has landed for this thread
        __syncthreads();    // ... and for every thread; every warp is done with stage st ^ 1
        if (j + 1 < nkb) issue(j + 1, st ^ 1);
        // Warp-uniform skips: rows past the queries, or keys all after this warp's last query
        // (then also for every later tile).
        if (wq0 >= s.tq || (s.causal && k0 > wq0 + 15 + off)) continue;

        float sc[BK / 8][4];
        zero_frags<BK / 8>(sc);
        mma_abt<D, BK>(sc, qf, smem[st]);

        // Some key of the tile is past the end, or past the diagonal of this warp's first row.
        const bool edge = k0 + BK > s.tk || (s.causal && k0 + BK - 1 > wq0 + off);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            // The last key this row sees, relative to this thread's first column k0 + 2t4.
            const int row = row0 + half * 8;
            const int last = (s.causal ? min(row + off, s.tk - 1) : s.tk - 1) - k0 - 2 * t4;
            float mx = m[half];
#pragma unroll
            for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    // sc[n][2 half + e] is (row, key k0 + 8n + 2t4 + e).
                    float x = sc[n][2 * half + e] * s.scale_log2;
                    if (edge && n * 8 + e > last) x = -INFINITY;
                    sc[n][2 * half + e] = x;
                    mx = fmaxf(mx, x);
                }
            }
            mx = quad_max(mx); // the four lanes of a quad share the row
            const float base = mx == -INFINITY ? 0.f : mx;
            const float corr = fast_exp2(m[half] - base);
            m[half] = mx;
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float p = fast_exp2(sc[n][2 * half + e] - base);
                    sc[n][2 * half + e] = p;
                    sum += p;
                }
            }
            l[half] = l[half] * corr + sum;
#pragma unroll
            for (int dn = 0; dn < D / 8; ++dn) {
                acc[dn][2 * half] *= corr;
                acc[dn][2 * half + 1] *= corr;
            }
        }
        mma_pb<D, BK>(acc, sc, smem[st] + KV);
    }

    float inv[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        l[half] = quad_sum(l[half]);
        inv[half] = l[half] > 0.f ? 1.f / l[half] : 0.f;
        const int row = row0 + half * 8;
        if (t4 == 0 && row < s.tq)
            lse[((i64)b * s.heads + h) * s.tq + row] = l[half] > 0.f ? m[half] + __log2f(l[half]) : INFINITY;
    }
    store_rows<D>(o + b * ov.sb + h * ov.sh, ov.st, row0, s.tq, acc, inv[0], inv[1]);
}

// ----- backward -----

// dd[b, h, i] = sum_d dO[b, h, i, d] * O[b, h, i, d], D / 8 lanes a row, 16 bytes each. Where
// the fused backward runs, this pass also zeroes its F32 dQ rows (`dqacc`, else null).
template <class T, int D>
__device__ void attn_bwd_dot(const T* o, AttnView ov, const T* dout, AttnView dv, float* dd, float* dqacc,
                             AttnShape s) {
    constexpr int LANES = D / 8;
    const i64 rows = (i64)s.batch * s.heads * s.tq;
    const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 r = tid / LANES;
    const int c = tid % LANES;
    float acc = 0.f;
    if (r < rows) {
        const i64 i = r % s.tq, h = (r / s.tq) % s.heads, b = r / ((i64)s.tq * s.heads);
        uint4 x = *(const uint4*)(o + b * ov.sb + h * ov.sh + i * ov.st + c * 8);
        uint4 y = *(const uint4*)(dout + b * dv.sb + h * dv.sh + i * dv.st + c * 8);
        const u32* xa = (const u32*)&x;
        const u32* ya = (const u32*)&y;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float2 p = Mma<T>::unpack(xa[e]), q = Mma<T>::unpack(ya[e]);
            acc += p.x * q.x + p.y * q.y;
        }
        if (dqacc) {
            float4* z = (float4*)(dqacc + r * D + c * 8);
            z[0] = z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
#pragma unroll
    for (int w = LANES / 2; w > 0; w /= 2) acc += __shfl_xor_sync(0xffffffff, acc, w);
    if (r < rows && c == 0) dd[r] = acc;
}

// The backward's tiles per head dim. `attn_bwd_kv`: KV_WARPS warps of 16 keys each (a block
// owns 16 * KV_WARPS keys) walk the query tiles QT at a time, QC queries a product (QC bounds the
// score fragments a thread holds beside its K, V, dK and dV fragments: 214 registers at head dim
// 64 with QC 32, one 8-warp block a multiprocessor). Shared memory: two stages of a Q and a dO
// tile (32 KB), through which the block's K and V are staged first; fused with dQ (dynamic
// shared memory, `bwd_kvq_shared` in the launcher), also the block's K, kept (16 KB at head dim
// 64), and the dS^T of one dQ product (BKV x DQ_COLS: both chunks of a tile at head dim 64, one
// chunk at 128).
// `attn_bwd_q`: Q_WARPS warps of 16 queries walk the keys BK at a time; its dO tile stays in
// shared memory beside two stages of a K and a V tile (Q staged through them first), which keeps
// it at 128 registers at head dim 64: two 8-warp blocks a multiprocessor. BLOCKS_PER_SM are the
// launch bounds' minimum blocks. The launcher mirrors the block sizes (`backward_blocks` in
// backend/src/cuda/attention.rs).
template <int D> struct BwdTile;
template <> struct BwdTile<64> {
    static constexpr int KV_WARPS = 8, QT = 64, QC = 32, KV_BLOCKS_PER_SM = 1, DQ_COLS = 64;
    static constexpr int Q_WARPS = 8, BK = 32, Q_BLOCKS_PER_SM = 2;
};
template <> struct BwdTile<128> {
    static constexpr int KV_WARPS = 4, QT = 32, QC = 16, KV_BLOCKS_PER_SM = 1, DQ_COLS = 16;
    static constexpr int Q_WARPS = 4, BK = 32, Q_BLOCKS_PER_SM = 1;
};

// dK and dV for 16 * KV_WARPS keys of one kv head, summed over the query heads of its group.
// Each warp holds its 16 keys' K and V rows as A fragments and accumulates its dK, dV rows:
// per query chunk, S^T = K Q^T and dP^T = V dO^T (rows keys, columns queries), P^T = exp2(S^T *
// scale_log2 - lse), dV += P^T dO, dS^T = P^T (dP^T - D), dK += dS^T Q. P^T and dS^T are already
// in the A layout of the next product (see `mma_pb`). Query tile it + 1 (over every head of the
// group) is copied into one stage while tile it is computed from the other.
//
// With DQ, every warp also leaves its rows of each chunk's dS^T in shared memory, and once
// DQ_COLS queries of them are in (the whole tile at head dim 64: one barrier a tile; a chunk at
// 128, where the registers are spent), the block computes their partial dQ = dS K over all its
// keys (a DQ_COLS x D product split among the warps by output tiles, both operands read by
// ldmatrix.trans) and adds it into `dqacc` ([batch, heads, tq, D] F32) with vector atomics: one
// addition per element a block and step.
template <class T, int D, bool DQ>
__device__ void attn_bwd_kv(const T* q, AttnView qv, const T* k, AttnView kv, const T* v, AttnView vv, const T* dout,
                            AttnView dov, const float* lse, const float* dd, T* dk, AttnView dkv, T* dvv_, AttnView dvv,
                            float* dqacc, AttnShape s) {
    constexpr int WARPS = BwdTile<D>::KV_WARPS, BKV = 16 * WARPS, NT = 32 * WARPS;
    constexpr int QT = BwdTile<D>::QT, QC = BwdTile<D>::QC, TILE = QT * D;
    static_assert(BKV * D == 2 * TILE, "the block's K (or V) tile fills exactly one stage");
    static_assert(QT % QC == 0 && QC % 16 == 0 && QT <= NT, "whole chunks; one thread a row for lse");
    // The dQ product's output tiles (16 queries x 8 dims) a warp owns, all in one 16-query row.
    constexpr int DQ_COLS = BwdTile<D>::DQ_COLS, DQ_TILES = (DQ_COLS / 16) * (D / 8) / WARPS;
    static_assert(DQ_TILES % 2 == 0 && (D / 8) % DQ_TILES == 0, "pairs of dQ tiles in one row");
    static_assert(QT % DQ_COLS == 0 && DQ_COLS % QC == 0, "whole chunks a dQ product");
    // Stage st: the Q tile at st * 2 TILE, then the dO tile. Split, the 32 KB fit static shared
    // memory; fused, the launcher sizes the dynamic shared memory (`bwd_kvq_shared`).
    extern __shared__ __align__(128) u8 bwd_kv_smem[];
    __shared__ __align__(128) T split_smem[DQ ? 1 : 4 * TILE];
    T* const stage0 = DQ ? (T*)bwd_kv_smem : split_smem;
    T* const sk = DQ ? stage0 + 4 * TILE : stage0;    // the block's K (kept with DQ)
    T* const sds = sk + BKV * D;                      // with DQ: dS^T [BKV][DQ_COLS]
    __shared__ float slse[2][QT], sdd[2][QT];
    const int k0 = blockIdx.x * BKV, hk = blockIdx.y, b = blockIdx.z;
    const int group = s.heads / s.kv_heads;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int off = s.tk - s.tq;

    // This warp's 16 keys and values as A fragments: K staged in `sk`, V through stage 1.
    load_rows<D, BKV, NT>(sk, k + b * kv.sb + hk * kv.sh + k0 * kv.st, kv.st, s.tk - k0, k);
    load_rows<D, BKV, NT>(stage0 + 2 * TILE, v + b * vv.sb + hk * vv.sh + k0 * vv.st, vv.st, s.tk - k0, v);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    u32 kf[D / 16][4], vf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        load_a<D>(kf[kk], sk, warp * 16, kk);
        load_a<D>(vf[kk], stage0 + 2 * TILE, warp * 16, kk);
    }
    __syncthreads(); // every warp holds its K and V before the stages are refilled

    float dka[D / 8][4], dva[D / 8][4];
    zero_frags<D / 8>(dka);
    zero_frags<D / 8>(dva);
    const int kw0 = k0 + warp * 16; // this warp's first key
    // Query tiles before `first` see none of the block's keys (query i sees keys <= i + off).
    const int first = s.causal ? max(0, k0 - off) / QT : 0;
    const int nqt = (s.tq + QT - 1) / QT;
    const int per_head = max(nqt - first, 0), steps = group * per_head;

    // Starts the copies of step `it` (query head, query tile) into stage `st`: Q, dO and the
    // rows' lse and D, all by cp.async in one commit group (no warp waits on a load here). Rows
    // past the queries are zero-filled, lse and D too: harmless, since with zero Q and dO rows
    // their P = 1 meets dO = 0 in dV, and dS = P (dP - D) = 1 (0 - 0) = 0 in dK and dQ.
    auto issue = [&](int it, int st) {
        const int h = hk * group + it / per_head, q0 = (first + it % per_head) * QT;
        T* const sq = stage0 + st * 2 * TILE;
        load_rows<D, QT, NT>(sq, q + b * qv.sb + h * qv.sh + q0 * qv.st, qv.st, s.tq - q0, q);
        load_rows<D, QT, NT>(sq + TILE, dout + b * dov.sb + h * dov.sh + q0 * dov.st, dov.st, s.tq - q0, dout);
        if (threadIdx.x < QT) {
            const int i = q0 + threadIdx.x;
            const i64 row = ((i64)b * s.heads + h) * s.tq + i;
            cp_async4(&slse[st][threadIdx.x], i < s.tq ? lse + row : lse, i < s.tq);
            cp_async4(&sdd[st][threadIdx.x], i < s.tq ? dd + row : dd, i < s.tq);
        }
        cp_async_commit();
    };
    if (steps > 0) issue(0, 0);

    for (int it = 0; it < steps; ++it) {
        const int st = it & 1;
        const int q0 = (first + it % per_head) * QT;
        cp_async_wait<0>(); // step it (the only group in flight) has landed for this thread
        __syncthreads();    // ... and for every thread; every warp is done with stage st ^ 1
        if (it + 1 < steps) issue(it + 1, st ^ 1);
        const T* sq = stage0 + st * 2 * TILE;
        const T* sdo = sq + TILE;

#pragma unroll 1
        for (int c0 = 0; c0 < QT; c0 += QC) {
            const int qc0 = q0 + c0; // the chunk's first query
            // Warp-uniform: the chunk's last query sees none of this warp's keys. With DQ the
            // warp still takes part in the block's product, with zero rows of dS^T.
            const bool idle = s.causal && kw0 > qc0 + QC - 1 + off;
            const int cc = (c0 % DQ_COLS) / 8; // the chunk's first 8-query group in dS^T
            // With DQ: this thread's word of dS^T at key row warp * 16 + g + 8 half and queries
            // 8 (cc + n) + 2t4 and the next.
            auto ds_word = [&](int n, int half) {
                return (u32*)(sds + swz_narrow<DQ_COLS>(warp * 16 + g + 8 * half, cc + n) + 2 * t4);
            };
            if (!DQ && idle) continue;
            if constexpr (DQ) {
                if (idle) {
#pragma unroll
                    for (int n = 0; n < QC / 8; ++n)
#pragma unroll
                        for (int half = 0; half < 2; ++half) *ds_word(n, half) = 0u;
                }
            }
            if (!idle) {
                // P^T and dP^T of the chunk: pt[n][e] is (key kw0 + g + 8 (e >> 1), query
                // qc0 + 8n + 2t4 + (e & 1)).
                float pt[QC / 8][4], dpt[QC / 8][4];
                zero_frags<QC / 8>(pt);
                zero_frags<QC / 8>(dpt);
                mma_abt<D, QC>(pt, kf, sq + c0 * D);
                mma_abt<D, QC>(dpt, vf, sdo + c0 * D);
                // Some key of the warp is past the diagonal of the chunk's first query.
                const bool edge = s.causal && kw0 + 15 > qc0 + off;
                // Key kw0 + g + 8 half is masked for queries qc0 + 8n + 2t4 + (e & 1) with
                // 8n + (e & 1) < lim0 + 8 half (past its diagonal: key > query + off).
                const int lim0 = kw0 + g - off - qc0 - 2 * t4;
#pragma unroll
                for (int n = 0; n < QC / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = c0 + n * 8 + 2 * t4 + (e & 1);
                        float p = fast_exp2(pt[n][e] * s.scale_log2 - slse[st][col]);
                        if (edge && n * 8 + (e & 1) < lim0 + (e >> 1) * 8) p = 0.f;
                        pt[n][e] = p;
                    }
                }
                mma_pb<D, QC>(dva, pt, sdo + c0 * D);
#pragma unroll
                for (int n = 0; n < QC / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) pt[n][e] *= dpt[n][e] - sdd[st][c0 + n * 8 + 2 * t4 + (e & 1)];
                mma_pb<D, QC>(dka, pt, sq + c0 * D);
                if constexpr (DQ) {
                    // This warp's rows (keys) of dS^T, rounded as the dK product rounds them.
                    // Keys past the end are zero rows of K, but unless causal nothing masks
                    // their P: zero their dS here, since in F16 it can overflow (P = 2^-lse)
                    // and inf * 0 would be NaN in the product.
#pragma unroll
                    for (int n = 0; n < QC / 8; ++n)
#pragma unroll
                        for (int half = 0; half < 2; ++half) {
                            const bool key = kw0 + g + 8 * half < s.tk;
                            *ds_word(n, half) = key ? Mma<T>::pack(pt[n][2 * half], pt[n][2 * half + 1]) : 0u;
                        }
                }
            }
            if constexpr (DQ) {
                if ((c0 + QC) % DQ_COLS != 0) continue; // more chunks before the product
                __syncthreads(); // dS^T of the DQ_COLS queries is whole
                const int dq0 = q0 + c0 + QC - DQ_COLS; // the product's first query
                // This warp's dQ tiles: queries dq0 + 16 wm + [0, 16), dims wd0 + [0, 8 DQ_TILES).
                constexpr int ROW_WARPS = (D / 8) / DQ_TILES;
                const int wm = warp / ROW_WARPS, wd0 = (warp % ROW_WARPS) * DQ_TILES * 8;
                float dqc[DQ_TILES][4];
                zero_frags<DQ_TILES>(dqc);
#pragma unroll
                for (int ks = 0; ks < BKV / 16; ++ks) {
                    // A = dS (queries x keys) from the [key][query] tile: ldmatrix.trans, its
                    // four matrices (queries 0-7 | 8-15) x (keys 0-7 | 8-15) in fragment order.
                    u32 a[4];
                    ldsm_x4_trans(a, sds + swz_narrow<DQ_COLS>(ks * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                               wm * 2 + ((lane >> 3) & 1)));
#pragma unroll
                    for (int j = 0; j < DQ_TILES / 2; ++j) {
                        u32 bf[4];
                        load_b_trans<D>(bf, sk, ks * 16, wd0 + 16 * j);
                        Mma<T>::run(dqc[2 * j], a, bf[0], bf[1]);
                        Mma<T>::run(dqc[2 * j + 1], a, bf[2], bf[3]);
                    }
                }
                // Every warp has read dS^T before the next chunk rewrites it (a later step's
                // chunks wait at the step's barrier).
                if (DQ_COLS < QT) __syncthreads();
                const int h = hk * group + it / per_head; // the step's query head
                float* const base = dqacc + (((i64)b * s.heads + h) * s.tq) * D + wd0 + 2 * t4;
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int row = dq0 + wm * 16 + g + 8 * half;
                    if (row >= s.tq) continue;
#pragma unroll
                    for (int j = 0; j < DQ_TILES; ++j) {
                        float* p = base + (i64)row * D + 8 * j;
#if __CUDA_ARCH__ >= 900
                        atomicAdd((float2*)p, make_float2(dqc[j][2 * half], dqc[j][2 * half + 1]));
#else
                        atomicAdd(p, dqc[j][2 * half]);
                        atomicAdd(p + 1, dqc[j][2 * half + 1]);
#endif
                    }
                }
            }
        }
    }
    const int key0 = kw0 + g;
    store_rows<D>(dk + b * dkv.sb + hk * dkv.sh, dkv.st, key0, s.tk, dka, s.scale, s.scale);
    store_rows<D>(dvv_ + b * dvv.sb + hk * dvv.sh, dvv.st, key0, s.tk, dva, 1.f, 1.f);
}

// dq[b, i, h, :] = dqacc[b, h, i, :] * scale, rounded to T: the fused backward's last pass, one
// thread per 8 elements.
template <class T, int D>
__device__ void attn_bwd_dq(const float* dqacc, T* dq, AttnView dqv, AttnShape s) {
    constexpr int LANES = D / 8;
    const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 r = tid / LANES;
    const int c = tid % LANES;
    if (r >= (i64)s.batch * s.heads * s.tq) return;
    const i64 i = r % s.tq, h = (r / s.tq) % s.heads, b = r / ((i64)s.tq * s.heads);
    const float4* src = (const float4*)(dqacc + r * D + c * 8);
    const float4 x = src[0], y = src[1];
    uint4 out;
    out.x = Mma<T>::pack(x.x * s.scale, x.y * s.scale);
    out.y = Mma<T>::pack(x.z * s.scale, x.w * s.scale);
    out.z = Mma<T>::pack(y.x * s.scale, y.y * s.scale);
    out.w = Mma<T>::pack(y.z * s.scale, y.w * s.scale);
    *(uint4*)(dq + b * dqv.sb + h * dqv.sh + i * dqv.st + c * 8) = out;
}

// dQ for 16 * Q_WARPS queries of one head. Each warp holds its 16 rows' Q as A fragments (dO
// stays in shared memory, read as A at each tile: registers for two blocks a multiprocessor),
// and per key tile: S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K. Key tile j + 1 is
// copied into one stage while tile j is computed from the other; tiles wholly in a warp's causal
// future are skipped by that warp, and masks apply only on tiles crossing a warp's diagonal or
// the end of the keys.
template <class T, int D>
__device__ void attn_bwd_q(const T* q, AttnView qv, const T* k, AttnView kv, const T* v, AttnView vv, const T* dout,
                           AttnView dov, const float* lse, const float* dd, T* dq, AttnView dqv, AttnShape s) {
    constexpr int WARPS = BwdTile<D>::Q_WARPS, BQ = 16 * WARPS, NT = 32 * WARPS;
    constexpr int BK = BwdTile<D>::BK, KV = BK * D, STAGE = 2 * KV;
    static_assert(BQ * D <= 2 * STAGE, "the block's Q tile fits in the two stages");
    // dO of the block's queries, then two stages of a K and a V tile (which first hold Q).
    __shared__ __align__(128) T smem[BQ * D + 2 * STAGE];
    T* const sdo = smem;
    T* const stages = smem + BQ * D;
    const int nqb = (s.tq + BQ - 1) / BQ;
    const int q0 = (nqb - 1 - (int)blockIdx.x) * BQ; // the longest (causal) blocks first
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (s.heads / s.kv_heads);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int off = s.tk - s.tq;
    const T* kb = k + b * kv.sb + hk * kv.sh;
    const T* vb = v + b * vv.sb + hk * vv.sh;

    load_rows<D, BQ, NT>(stages, q + b * qv.sb + h * qv.sh + q0 * qv.st, qv.st, s.tq - q0, q);
    load_rows<D, BQ, NT>(sdo, dout + b * dov.sb + h * dov.sh + q0 * dov.st, dov.st, s.tq - q0, dout);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    u32 qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) load_a<D>(qf[kk], stages, warp * 16, kk);
    __syncthreads(); // every warp holds its Q before the stages are refilled

    const int wq0 = q0 + warp * 16; // this warp's first query
    const int row0 = wq0 + g;
    const i64 row_base = ((i64)b * s.heads + h) * s.tq;
    float lr[2], dr[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row0 + half * 8;
        lr[half] = row < s.tq ? lse[row_base + row] : INFINITY;
        dr[half] = row < s.tq ? dd[row_base + row] : 0.f;
    }
    float dqa[D / 8][4];
    zero_frags<D / 8>(dqa);
    const int kend = s.causal ? min(s.tk, q0 + BQ + off) : s.tk;
    const int nkb = kend > 0 ? (kend + BK - 1) / BK : 0;

    auto issue = [&](int j, int st) {
        const int k0 = j * BK;
        load_rows<D, BK, NT>(stages + st * STAGE, kb + k0 * kv.st, kv.st, s.tk - k0, k);
        load_rows<D, BK, NT>(stages + st * STAGE + KV, vb + k0 * vv.st, vv.st, s.tk - k0, v);
        cp_async_commit();
    };
    if (nkb > 0) issue(0, 0);

    for (int j = 0; j < nkb; ++j) {
        const int k0 = j * BK, st = j & 1;
        cp_async_wait<0>(); // tile j (the only group in flight) has landed for this thread
        __syncthreads();    // ... and for every thread; every warp is done with stage st ^ 1
        if (j + 1 < nkb) issue(j + 1, st ^ 1);
        // Warp-uniform skips: rows past the queries, or keys all after this warp's last query.
        if (wq0 >= s.tq || (s.causal && k0 > wq0 + 15 + off)) continue;
        const T* sk = stages + st * STAGE;
        const T* sv = sk + KV;

        // p[n][e] is (query row0 + 8 (e >> 1), key k0 + 8n + 2t4 + (e & 1)).
        float p[BK / 8][4], dp[BK / 8][4];
        zero_frags<BK / 8>(p);
        zero_frags<BK / 8>(dp);
        mma_abt<D, BK>(p, qf, sk);
        mma_abt_sa<D, BK>(dp, sdo, warp * 16, sv);
        // Some key of the tile is past the end, or past the diagonal of this warp's first row.
        const bool edge = k0 + BK > s.tk || (s.causal && k0 + BK - 1 > wq0 + off);
        // The last key each half's row sees, relative to this thread's first column k0 + 2t4.
        int last[2];
#pragma unroll
        for (int half = 0; half < 2; ++half)
            last[half] = (s.causal ? min(row0 + half * 8 + off, s.tk - 1) : s.tk - 1) - k0 - 2 * t4;
#pragma unroll
        for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int half = e >> 1;
                float pv = fast_exp2(p[n][e] * s.scale_log2 - lr[half]);
                if (edge && n * 8 + (e & 1) > last[half]) pv = 0.f;
                p[n][e] = pv * (dp[n][e] - dr[half]);
            }
        }
        mma_pb<D, BK>(dqa, p, sk);
    }
    store_rows<D>(dq + b * dqv.sb + h * dqv.sh, dqv.st, row0, s.tq, dqa, s.scale, s.scale);
}

#define RB_ATTENTION(name, T, D)                                                                                     \
    RB_BOUNDED_KERNEL(attn_fwd_##name##_##D, FwdTile<D>::WARPS * 32, FwdTile<D>::BLOCKS_PER_SM)(\
        const T* q, AttnView qv, const T* k, AttnView kv, const T* v, AttnView vv, T* o, AttnView ov, float* lse,    \
        AttnShape s) {                                                                                               \
        attn_fwd<T, D>(q, qv, k, kv, v, vv, o, ov, lse, s);                                                          \
    }                                                                                                                \
    RB_KERNEL(attn_bwd_dot_##name##_##D)(const T* o, AttnView ov, const T* dout, AttnView dv,        \
                                                         float* dd, float* dqacc, AttnShape s) {                     \
        attn_bwd_dot<T, D>(o, ov, dout, dv, dd, dqacc, s);                                                           \
    }                                                                                                                \
    RB_BOUNDED_KERNEL(attn_bwd_kv_##name##_##D, BwdTile<D>::KV_WARPS * 32, BwdTile<D>::KV_BLOCKS_PER_SM)(                                                                                    \
        const T* q, AttnView qv, const T* k, AttnView kv, const T* v, AttnView vv, const T* dout, AttnView dov,      \
        const float* lse, const float* dd, T* dk, AttnView dkv, T* dv, AttnView dvv, AttnShape s) {                  \
        attn_bwd_kv<T, D, false>(q, qv, k, kv, v, vv, dout, dov, lse, dd, dk, dkv, dv, dvv, nullptr, s);             \
    }                                                                                                                \
    RB_BOUNDED_KERNEL(attn_bwd_kvq_##name##_##D, BwdTile<D>::KV_WARPS * 32, BwdTile<D>::KV_BLOCKS_PER_SM)(                                                                                   \
        const T* q, AttnView qv, const T* k, AttnView kv, const T* v, AttnView vv, const T* dout, AttnView dov,      \
        const float* lse, const float* dd, T* dk, AttnView dkv, T* dv, AttnView dvv, float* dqacc, AttnShape s) {    \
        attn_bwd_kv<T, D, true>(q, qv, k, kv, v, vv, dout, dov, lse, dd, dk, dkv, dv, dvv, dqacc, s);                \
    }                                                                                                                \
    RB_KERNEL(attn_bwd_dq_##name##_##D)(const float* dqacc, T* dq, AttnView dqv, AttnShape s) {     \
        attn_bwd_dq<T, D>(dqacc, dq, dqv, s);                                                                        \
    }                                                                                                                \
    RB_BOUNDED_KERNEL(attn_bwd_q_##name##_##D, BwdTile<D>::Q_WARPS * 32, BwdTile<D>::Q_BLOCKS_PER_SM)(                                                                                     \
        const T* q, AttnView qv, const T* k, AttnView kv, const T* v, AttnView vv, const T* dout, AttnView dov,      \
        const float* lse, const float* dd, T* dq, AttnView dqv, AttnShape s) {                                       \
        attn_bwd_q<T, D>(q, qv, k, kv, v, vv, dout, dov, lse, dd, dq, dqv, s);                                       \
    }

RB_ATTENTION(bf16, bf16, 64)
RB_ATTENTION(bf16, bf16, 128)
RB_ATTENTION(f16, f16, 64)
RB_ATTENTION(f16, f16, 128)
