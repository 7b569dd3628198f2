// ggml's block formats as the products read them, shared by kernels/quant_matmul.cu (the
// quantized GEMV on its own) and kernels/decode_gemv.cu (the fused decode products): the split
// layouts, Q4_K's records, the int8 rounding of activations, and the int4 GEMV's warp loop.
// Prepended to both files after common.cuh (backend/src/cuda/compile.rs).

// Where the codes start in a split matrix: after the headers, rounded up to 16 bytes.
__device__ __forceinline__ u64 codes_offset(u64 headers_bytes) { return (headers_bytes + 15) & ~15ull; }


// Q4_K as stored (split): n * k/256 headers of 16 bytes, then n rows of k/2 code bytes, 16
// per sub-block in Q4_1's order. A header is f16 d and dmin, then sub-block j's record
// (scale | min << 6) at bit 12 j of words y, z and w.
__device__ __forceinline__ u64 q4_k_codes(int n, int k) { return (u64)n * (k / 256) * 16; }

// The shifts that bring record j to bit 0 (one funnel shift per header word: every record
// lies in y:z, z:w or w). Clamped shifts of 32 pass the high word through unchanged.
struct Q4kRecordShifts {
    u32 yz, zw, w;
    __device__ explicit Q4kRecordShifts(int j) {
        int bit = 12 * j;
        yz = bit < 32 ? bit : 32;
        zw = bit < 32 ? 0 : (bit < 64 ? bit - 32 : 32);
        w = bit < 64 ? 0 : bit - 64;
    }
};

__device__ __forceinline__ void q4_k_scale_min(uint4 head, Q4kRecordShifts at, int& sc, int& mn) {
    u32 r = __funnelshift_rc(head.y, head.z, at.yz);
    r = __funnelshift_rc(r, head.w, at.zw);
    r >>= at.w;
    sc = (int)(r & 63);
    mn = (int)((r >> 6) & 63);
}

// Q4_K's d and dmin.
__device__ __forceinline__ float2 q4_k_d_dmin(uint4 head) {
    return __half22float2(*reinterpret_cast<const __half2*>(&head.x));
}

// One 32-value block of activations rounded to int8 as llama.cpp's q8_1 rounds it (scale
// absmax / 127), a lane per value: this lane's code, the block's scale d and d times the sum
// of its codes. Every lane of the warp calls it with its own value v.
struct Int8Block {
    int q;
    float d, dsum;
};
__device__ __forceinline__ Int8Block quantize_block32(float v) {
    float amax = fabsf(v);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float d = amax / 127.f;
    const int q = d == 0.f ? 0 : __float2int_rn(v / d);
    int sum = q;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    return {q, d, d * (float)sum};
}

// Q4_1 and Q4_K with int8 activations.
// Both store a 32-value sub-block as 16 code bytes (value i in byte i's low nibble, value
// i + 16 in its high one) with a scale and a min, so one kernel serves both. Rows are short
// (a k = 2048 row is 1 KB of codes: two steps of a warp), so what a row costs besides its
// bytes (addresses, the warp reduction, the store) and what the activations cost are shared:
// a warp takes R rows at once, its lanes holding the same sub-blocks of each, and reads each
// activation vector once for the R rows. Loads of all R rows are issued before any use.
//
// Per 16 code bytes a lane splits the nibbles with two masks (the high ones stay 16 times
// their value, as unsigned bytes, which dp4a.u32.s32 multiplies exactly) and adds 16 * the
// low products and the high ones: 16 * sum(q x). The 1/16 goes into the activation scale.

// Rows per warp: all loads of R rows are in flight at once; beyond two activation rows the
// activations' registers and loads grow with M, so fewer weight rows share them.
template <int M>
struct Int4Rows {
    static constexpr int R = M <= 2 ? 4 : 2;
};

__device__ __forceinline__ int dp4a_u8_s8(u32 a, u32 b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// 16 * sum over the sub-block of code * activation, from the masked nibbles and the
// sub-block's 32 activation codes (xlo: values 0..15, xhi: 16..31).
__device__ __forceinline__ int dot_nibbles16(uint4 lo, uint4 hi, uint4 xlo, uint4 xhi) {
    int a = dp4a_u8_s8(lo.x, xlo.x, 0);
    a = dp4a_u8_s8(lo.y, xlo.y, a);
    a = dp4a_u8_s8(lo.z, xlo.z, a);
    a = dp4a_u8_s8(lo.w, xlo.w, a);
    int b = dp4a_u8_s8(hi.x, xhi.x, 0);
    b = dp4a_u8_s8(hi.y, xhi.y, b);
    b = dp4a_u8_s8(hi.z, xhi.z, b);
    b = dp4a_u8_s8(hi.w, xhi.w, b);
    return a * 16 + b;
}

// One sub-block of one weight row, ready to meet activations: the masked nibbles, the
// integer multiplier of the dot product (Q4_K's 6-bit scale; 1 for Q4_1), the float one (d)
// and the one of the activations' sum (Q4_1's m, Q4_K's -dmin * mn).
struct SubBlock {
    uint4 lo, hi;
    int isc;
    float d, bias;
};

__device__ __forceinline__ void mask_nibbles(uint4 q, SubBlock& b) {
    b.lo = make_uint4(q.x & 0x0F0F0F0Fu, q.y & 0x0F0F0F0Fu, q.z & 0x0F0F0F0Fu, q.w & 0x0F0F0F0Fu);
    b.hi = make_uint4(q.x & 0xF0F0F0F0u, q.y & 0xF0F0F0F0u, q.z & 0xF0F0F0F0u, q.w & 0xF0F0F0F0u);
}

// Q4_1 split: n * k/32 (f16 d, f16 m) headers, then the rows' codes. `row_bytes` and
// `head_row_bytes` step from row to row; `head_offset(s)` finds sub-block s's header in a row.
struct Q4_1Weights {
    static constexpr bool SCALED = false;
    const u8* heads;
    const u8* codes;
    u32 row_bytes, head_row_bytes;
    __device__ Q4_1Weights(const u8* w, int n, int k) {
        heads = w;
        codes = w + codes_offset((u64)n * (k / 32) * 4);
        row_bytes = k / 2;
        head_row_bytes = k / 8;
    }
    __device__ __forceinline__ u32 head_offset(u32 s) const { return 4 * s; }
    struct Raw {
        uint4 q;
        u32 head;
    };
    __device__ __forceinline__ Raw load(const u8* code, const u8* head) const {
        return {__ldg(reinterpret_cast<const uint4*>(code)), __ldg(reinterpret_cast<const u32*>(head))};
    }
    __device__ __forceinline__ SubBlock decode(Raw raw) const {
        SubBlock b;
        mask_nibbles(raw.q, b);
        float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&raw.head));
        b.isc = 1;
        b.d = dm.x;
        b.bias = dm.y;
        return b;
    }
};

// Q4_K split (q4_k_codes): a lane's sub-blocks are all record lane % 8 of their super-block.
struct Q4_KWeights {
    static constexpr bool SCALED = true;
    const u8* heads;
    const u8* codes;
    u32 row_bytes, head_row_bytes;
    Q4kRecordShifts at;
    __device__ Q4_KWeights(const u8* w, int n, int k) : at(threadIdx.x % 8) {
        heads = w;
        codes = w + q4_k_codes(n, k);
        row_bytes = k / 2;
        head_row_bytes = k / 16;
    }
    __device__ __forceinline__ u32 head_offset(u32 s) const { return (s / 8) * 16; }
    struct Raw {
        uint4 q;
        uint4 head;
    };
    __device__ __forceinline__ Raw load(const u8* code, const u8* head) const {
        return {__ldg(reinterpret_cast<const uint4*>(code)), __ldg(reinterpret_cast<const uint4*>(head))};
    }
    __device__ __forceinline__ SubBlock decode(Raw raw) const {
        SubBlock b;
        mask_nibbles(raw.q, b);
        float2 dm = q4_k_d_dmin(raw.head);
        int mn;
        q4_k_scale_min(raw.head, at, b.isc, mn);
        b.d = dm.x;
        b.bias = -dm.y * (float)mn;
        return b;
    }
};

// Where the int8 activations come from: the quantized GEMV's scratch in global memory (read
// through the read-only cache), or the decode products' shared memory.
struct GlobalActivations {
    static __device__ __forceinline__ uint4 codes16(const u8* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
    static __device__ __forceinline__ float2 scale(const float2* p) { return __ldg(p); }
};
struct SharedActivations {
    static __device__ __forceinline__ uint4 codes16(const u8* p) { return *reinterpret_cast<const uint4*>(p); }
    static __device__ __forceinline__ float2 scale(const float2* p) { return *p; }
};

// One warp's share of a product: row groups of R rows, each in steps of 32 sub-blocks (a
// lane each). A group is R consecutive rows of one matrix, or (paired) R / 2 rows of one
// matrix and the same rows of a second of its shape, as rows R / 2 .. R - 1 (SwiGLU's gate
// and up). A group running past row n - 1 is moved back to end there (or, with fewer rows in
// all, repeats the last row); rows that another group owns are computed again and not stored.
// Lanes past the row's end read its last sub-block again and add nothing. Addresses: one
// 64-bit base per item, plus each row's offset (fixed).
template <int M, typename Weights, class X = GlobalActivations>
struct Int4Gemv {
    static constexpr int R = Int4Rows<M>::R;
    using Raw = typename Weights::Raw;
    Weights wt;
    const u8* xcodes;      // activation row 0 of this launch's rows
    const float2* xscale;  // its (scale, sum) pairs
    int n, k, nsub, lane, span, xrow_bytes;
    const u8* code_row[R];  // row i of the group's matrix, whose offset by a group's first row
    const u8* head_row[R];  // finds row i of the group
    float acc[R][M];

    // Over w [n, k] (and, paired, w2 of the same shape), with M activation rows from xcodes
    // (row stride xrow_bytes) and their (scale, sum) pairs from xscale (row stride k / 32).
    __device__ Int4Gemv(const u8* w, const u8* w2, int n_, int k_, const u8* xcodes_, const float2* xscale_,
                        int xrow_bytes_)
        : wt(w, n_, k_), xcodes(xcodes_), xscale(xscale_), n(n_), k(k_), nsub(k_ / 32), lane(threadIdx.x % 32),
          span(w2 ? R / 2 : R), xrow_bytes(xrow_bytes_) {
        const Weights second(w2 ? w2 : w, n_, k_);
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const bool upper = w2 && i >= R / 2;
            const Weights& m = upper ? second : wt;
            const u64 row = (u64)min(upper ? i - R / 2 : i, n - 1);
            code_row[i] = m.codes + row * wt.row_bytes;
            head_row[i] = m.heads + row * wt.head_row_bytes;
        }
        clear();
    }

    // The first row the group starting at `first` reads.
    __device__ __forceinline__ int start(int first) const { return max(min(first, n - span), 0); }

    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
            for (int r = 0; r < M; ++r) acc[i][r] = 0.f;
    }

    __device__ __forceinline__ void load(Raw raw[R], int first, int step) const {
        u32 s = (u32)min(step * 32 + lane, nsub - 1);
        u64 row = (u64)start(first);
        u64 code = row * wt.row_bytes + 16 * s;
        u64 head = row * wt.head_row_bytes + wt.head_offset(s);
#pragma unroll
        for (int i = 0; i < R; ++i) raw[i] = wt.load(code_row[i] + code, head_row[i] + head);
    }

    __device__ __forceinline__ void compute(const Raw raw[R], int step) {
        int s = step * 32 + lane;
        if (s >= nsub) return;
        SubBlock b[R];
#pragma unroll
        for (int i = 0; i < R; ++i) b[i] = wt.decode(raw[i]);
#pragma unroll
        for (int r = 0; r < M; ++r) {
            const u8* xc = xcodes + (u64)r * xrow_bytes + s * 32;
            uint4 xlo = X::codes16(xc), xhi = X::codes16(xc + 16);
            float2 ss = X::scale(xscale + (u64)r * nsub + s);
            float xs16 = ss.x * 0.0625f;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                int t = dot_nibbles16(b[i].lo, b[i].hi, xlo, xhi);
                if (Weights::SCALED) t *= b[i].isc;
                acc[i][r] = fmaf(b[i].d * xs16, (float)t, fmaf(b[i].bias, ss.y, acc[i][r]));
            }
        }
    }

    // The group's sums, reduced over the warp, handed to store(sums, first row) on lane 0
    // (rows of the group before `first` belong to another group and are not to be stored);
    // then zeros for the next group.
    template <class Store> __device__ __forceinline__ void finish(int first, Store& store) {
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
            for (int r = 0; r < M; ++r) {
                float v = acc[i][r];
#pragma unroll
                for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
                acc[i][r] = v;
            }
        if (lane == 0) store(acc, start(first), first);
        clear();
    }
};

// A warp walks its items (row group, step) in order, from the group at `first`, every
// `stride` rows: each item's loads are issued, in their own branch, before the previous item
// is computed. ptxas otherwise sinks each row's loads to just before their use, leaving one
// row's bytes in flight per warp, and so the loads also overlap the row-end reductions. Two
// register sets alternate (a and b), so nothing is copied between items.
template <class G, class Store>
__device__ __forceinline__ void int4_walk(G& g, int first, int stride, Store& store) {
    constexpr int R = G::R;
    const int steps = (g.nsub + 31) / 32;
    if (first >= g.n) return;
    int step = 0;
    typename G::Raw a[R], b[R];
    g.load(a, first, step);
    // The item after (first, step); false past the warp's last.
    auto advance = [&](int& f, int& st) {
        if (++st == steps) {
            st = 0;
            f += stride;
        }
        return f < g.n;
    };
    while (true) {
        int f = first, st = step;
        bool more = advance(f, st);
        if (more) g.load(b, f, st);
        g.compute(a, step);
        if (st == 0) g.finish(first, store);
        if (!more) break;
        first = f, step = st;
        more = advance(f, st);
        if (more) g.load(a, f, st);
        g.compute(b, step);
        if (st == 0) g.finish(first, store);
        if (!more) break;
        first = f, step = st;
    }
}
