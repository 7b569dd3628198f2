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
    RB_BOUNDED_KERNEL(decode_gemv_##pro##_##name##_r##RT, GEMV_THREADS)(GemvTargets t, const void* in0, const void* in1, int in_dt, int aux_dt, \
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
    RB_BOUNDED_KERNEL(decode_gemv_mma_##pro##_##name##_n##NT##sfx, GEMV_THREADS)(          \
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
    RB_BOUNDED_KERNEL(decode_gemv_mma_##pro##_##name##_n##NT##_rotary, GEMV_THREADS)(      \
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
    RB_BOUNDED_KERNEL(decode_gemv_prologue_##pro##_##name, GEMV_THREADS)(                \
        const void* in0, const void* in1, int in_dt, int aux_dt, int k, float eps, W* out) {                        \
        gemv_prologue_rows<W, PRO>(in0, in1, in_dt, aux_dt, k, eps, out);                                           \
    }
RB_DECODE_GEMV_PROLOGUE(norm, GEMV_NORM, bf16, bf16)
RB_DECODE_GEMV_PROLOGUE(norm, GEMV_NORM, f16, f16)
RB_DECODE_GEMV_PROLOGUE(swiglu, GEMV_SWIGLU, bf16, bf16)
RB_DECODE_GEMV_PROLOGUE(swiglu, GEMV_SWIGLU, f16, f16)
