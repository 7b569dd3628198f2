// Rotary position embedding in the rotate-half layout, one pass over x:
//   y[j] = x[j] cos[j] - x[j + h] sin[j],  y[j + h] = x[j + h] cos[j + h] + x[j] sin[j + h]
// for j < h = dim / 2, and its transpose for the backward (`inverse`):
//   dx[j] = g[j] cos[j] + g[j + h] sin[j + h],  dx[j + h] = g[j + h] cos[j + h] - g[j] sin[j].
// x, y and the tables are [n0, n1, n2, dim] views with a contiguous last dim (the tables usually
// broadcast with stride 0 over n0 and n1). The tables are F32; arithmetic runs in float (double
// for f64).

struct RopeView {
    i64 s0, s1, s2;
};

// Where pair j of row `row` (rows counting [n0, n1, n2] in order) sits in x, the tables and y.
struct RopeAt {
    i64 x, c, s, y;
};
__device__ __forceinline__ RopeAt rope_at(u32 row, u32 j, int n1, int n2, const RopeView& xv, const RopeView& cv,
                                          const RopeView& sv, const RopeView& yv) {
    const u32 i2 = row % (u32)n2, r = row / (u32)n2;
    const u32 i1 = r % (u32)n1, i0 = r / (u32)n1;
    const auto at = [&](const RopeView& v) { return i0 * v.s0 + i1 * v.s1 + i2 * v.s2 + j; };
    return RopeAt{at(xv), at(cv), at(sv), at(yv)};
}

template <class T>
__device__ void rope_impl(const T* x, RopeView xv, const float* cs, RopeView cv, const float* sn, RopeView sv, T* y,
                          RopeView yv, int n1, int n2, int half, int inverse, i64 pairs) {
    typedef typename Acc<T>::type C;
    RB_GRID_LOOP(p, pairs) {
        // 32-bit index arithmetic: the host keeps pairs below 2^31.
        const u32 pu = (u32)p, hu = (u32)half;
        const u32 row = pu / hu, j = pu - row * hu;
        const RopeAt at = rope_at(row, j, n1, n2, xv, cv, sv, yv);
        const i64 xo = at.x, co = at.c, so = at.s, yo = at.y;
        const C a = to_acc(x[xo]), b = to_acc(x[xo + half]);
        const C c1 = cs[co], c2 = cs[co + half], s1 = sn[so], s2 = sn[so + half];
        C lo, hi;
        if (inverse) {
            lo = a * c1 + b * s2;
            hi = b * c2 - a * s1;
        } else {
            lo = a * c1 - b * s1;
            hi = b * c2 + a * s2;
        }
        y[yo] = from_acc<T>(lo);
        y[yo + half] = from_acc<T>(hi);
    }
}

// The same, V = 16 / sizeof(T) consecutive pairs a thread: 16-byte loads and stores of x and
// y, the tables' rows read as whole 16-byte words. The host takes this kernel when half is a
// multiple of V and every stride and base address keeps the words aligned; the arithmetic is
// the scalar kernel's, element for element.
template <class T>
__device__ void rope_vec_impl(const T* x, RopeView xv, const float* cs, RopeView cv, const float* sn, RopeView sv,
                              T* y, RopeView yv, int n1, int n2, int half, int inverse, i64 pairs) {
    constexpr int V = 16 / sizeof(T);
    typedef typename Acc<T>::type C;
    const u32 per_row = (u32)half / V;
    RB_GRID_LOOP(g, pairs / V) {
        const u32 gu = (u32)g;
        const u32 row = gu / per_row, j = (gu - row * per_row) * V;
        const RopeAt at = rope_at(row, j, n1, n2, xv, cv, sv, yv);
        const i64 xo = at.x, co = at.c, so = at.s, yo = at.y;
        C a[V], b[V];
        Word16<T>::unpack(*(const uint4*)(x + xo), a);
        Word16<T>::unpack(*(const uint4*)(x + xo + half), b);
        float c1[V], c2[V], s1[V], s2[V];
#pragma unroll
        for (int w = 0; w < V / 4; ++w) {
            Word16<f32>::unpack(*(const uint4*)(cs + co + 4 * w), c1 + 4 * w);
            Word16<f32>::unpack(*(const uint4*)(cs + co + half + 4 * w), c2 + 4 * w);
            Word16<f32>::unpack(*(const uint4*)(sn + so + 4 * w), s1 + 4 * w);
            Word16<f32>::unpack(*(const uint4*)(sn + so + half + 4 * w), s2 + 4 * w);
        }
        C lo[V], hi[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (inverse) {
                lo[k] = rope_add(a[k], c1[k], b[k], s2[k]);
                hi[k] = rope_sub(b[k], c2[k], a[k], s1[k]);
            } else {
                lo[k] = rope_sub(a[k], c1[k], b[k], s1[k]);
                hi[k] = rope_add(b[k], c2[k], a[k], s2[k]);
            }
        }
        *(uint4*)(y + yo) = Word16<T>::pack(lo);
        *(uint4*)(y + yo + half) = Word16<T>::pack(hi);
    }
}

#define RB_ROPE_VEC(name, T)                                                                                       \
    RB_KERNEL(rope_vec_##name)(const T* x, RopeView xv, const float* cs, RopeView cv,                \
                                               const float* sn, RopeView sv, T* y, RopeView yv, int n1, int n2,      \
                                               int half, int inverse, i64 pairs) {                                  \
        rope_vec_impl<T>(x, xv, cs, cv, sn, sv, y, yv, n1, n2, half, inverse, pairs);                              \
    }
RB_ROPE_VEC(bf16, bf16)
RB_ROPE_VEC(f16, f16)
RB_ROPE_VEC(f32, f32)

#define RB_ROPE(name, T)                                                                                       \
    RB_KERNEL(rope_##name)(const T* x, RopeView xv, const float* cs, RopeView cv, const float* sn, \
                                           RopeView sv, T* y, RopeView yv, int n1, int n2, int half, int inverse,   \
                                           i64 pairs) {                                                         \
        rope_impl<T>(x, xv, cs, cv, sn, sv, y, yv, n1, n2, half, inverse, pairs);                              \
    }
RB_FOR_FLOAT_TYPES(RB_ROPE)

// The gradient of one q/k/v projection whose q and k parts were rotated, in one pass: row
// (b, t) of the output [batch * seq, nq + nk + nv] is [ rope^T(dq) | rope^T(dk) | dv ] at
// (b, t). Training's projection is one product with the three weights side by side, so its
// gradient is one buffer, written here directly instead of by two transposed rotations and
// three copies into it. The gradients and the tables are [batch, seq, heads, head_dim] views
// (strides of b, t and the head; the tables broadcast with zero strides). A thread writes one
// 16-byte word (V elements, all in one half of a head: the host checks half % V == 0) with the
// transposed rotation's arithmetic of `rope_vec_impl`:
//   dx[j] = g[j] cos[j] + g[j + h] sin[j + h],  dx[j + h] = g[j + h] cos[j + h] - g[j] sin[j].
template <class T>
__device__ void rope_qkv_backward_impl(const T* dq, RopeView qv, const T* dk, RopeView kv_, const T* dv, RopeView vv,
                                       const float* cs, RopeView cv, const float* sn, RopeView sv, T* out, int seq,
                                       int nq, int nk, int nv, int head_dim, i64 words) {
    constexpr int V = 16 / sizeof(T);
    typedef typename Acc<T>::type C;
    const u32 row_words = (u32)(nq + nk + nv) / V, half = (u32)head_dim / 2;
    RB_GRID_LOOP(w, words) {
        // 32-bit index arithmetic: the host keeps the words below 2^31.
        const u32 wu = (u32)w, row = wu / row_words, c = (wu - row * row_words) * V;
        const u32 b = row / (u32)seq, t = row - b * (u32)seq;
        uint4* dst = (uint4*)(out + (i64)row * (nq + nk + nv) + c);
        const T* g;
        RopeView gv;
        u32 col;
        if (c >= (u32)(nq + nk)) {
            col = c - nq - nk;
            const u32 head = col / (u32)head_dim, j = col - head * (u32)head_dim;
            *dst = *(const uint4*)(dv + b * vv.s0 + t * vv.s1 + head * vv.s2 + j);
            continue;
        }
        if (c < (u32)nq) {
            g = dq, gv = qv, col = c;
        } else {
            g = dk, gv = kv_, col = c - nq;
        }
        const u32 head = col / (u32)head_dim, j = col - head * (u32)head_dim;
        const T* gr = g + b * gv.s0 + t * gv.s1 + head * gv.s2;
        const float* cr = cs + b * cv.s0 + t * cv.s1 + head * cv.s2;
        const float* sr = sn + b * sv.s0 + t * sv.s1 + head * sv.s2;
        // This word and its partner a half away; the tables at this word and at the partner's.
        const bool lo = j < half;
        const u32 p = lo ? j + half : j - half;
        C mine[V], other[V];
        Word16<T>::unpack(*(const uint4*)(gr + j), mine);
        Word16<T>::unpack(*(const uint4*)(gr + p), other);
        float cj[V], sp[V];
#pragma unroll
        for (int q = 0; q < V / 4; ++q) {
            Word16<f32>::unpack(*(const uint4*)(cr + j + 4 * q), cj + 4 * q);
            Word16<f32>::unpack(*(const uint4*)(sr + p + 4 * q), sp + 4 * q);
        }
        C y[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
            // rope_vec_impl's inverse, operand for operand (mine is its a in the low half, b in
            // the high one).
            y[e] = lo ? rope_add(mine[e], cj[e], other[e], sp[e]) : rope_sub(mine[e], cj[e], other[e], sp[e]);
        }
        *dst = Word16<T>::pack(y);
    }
}

#define RB_ROPE_QKV_BACKWARD(name, T)                                                                            \
    RB_KERNEL(rope_qkv_backward_##name)(const T* dq, RopeView qv, const T* dk, RopeView kv_,      \
                                                        const T* dv, RopeView vv, const float* cs, RopeView cv,   \
                                                        const float* sn, RopeView sv, T* out, int seq, int nq,    \
                                                        int nk, int nv, int head_dim, i64 words) {                \
        rope_qkv_backward_impl<T>(dq, qv, dk, kv_, dv, vv, cs, cv, sn, sv, out, seq, nq, nk, nv, head_dim, words); \
    }
RB_ROPE_QKV_BACKWARD(bf16, bf16)
RB_ROPE_QKV_BACKWARD(f16, f16)
RB_ROPE_QKV_BACKWARD(f32, f32)

// One decode step's rotary embedding and key/value cache write in one pass: q rotated into a
// fresh [batch, heads, dim] buffer, k rotated and v copied into the caches [batch, kv_heads,
// capacity, dim] at the position `cursor` points to (device memory, so a captured step replays
// at every position). q, k and v are [batch, n, dim] views with a contiguous last dim; the
// tables are F32 rows [batch, dim].
struct HeadsView {
    i64 sb, sh;
};

template <class T>
__device__ void rope_cache_write_impl(const T* q, HeadsView qv, const T* k, HeadsView kv_, const T* v,
                                      HeadsView vv, const float* cs, const float* sn, i64 table_sb, T* q_out,
                                      T* k_cache, T* v_cache, const i64* cursor, int heads, int kv_heads,
                                      int capacity, int half, i64 pairs, u32* err, u32 code) {
    typedef typename Acc<T>::type C;
    const i64 pos = *cursor;
    if (pos < 0 || pos >= capacity) {
        if (blockIdx.x == 0 && threadIdx.x == 0) atomicExch(err, code);
        return;
    }
    const u32 slots = (u32)(heads + 2 * kv_heads), dim = 2 * (u32)half;
    RB_GRID_LOOP(p, pairs) {
        const u32 pu = (u32)p, hu = (u32)half;
        const u32 row = pu / hu, j = pu - row * hu;
        const u32 b = row / slots, s = row - b * slots;
        if (s >= (u32)(heads + kv_heads)) {
            const u32 g = s - heads - kv_heads;
            const T* src = v + b * vv.sb + g * vv.sh;
            T* dst = v_cache + (((i64)b * kv_heads + g) * capacity + pos) * dim;
            dst[j] = src[j];
            dst[j + half] = src[j + half];
            continue;
        }
        const float* c = cs + b * table_sb;
        const float* sn_ = sn + b * table_sb;
        const T* src;
        T* dst;
        if (s < (u32)heads) {
            src = q + b * qv.sb + s * qv.sh;
            dst = q_out + ((i64)b * heads + s) * dim;
        } else {
            const u32 g = s - heads;
            src = k + b * kv_.sb + g * kv_.sh;
            dst = k_cache + (((i64)b * kv_heads + g) * capacity + pos) * dim;
        }
        const C a = to_acc(src[j]), bb = to_acc(src[j + half]);
        dst[j] = from_acc<T>(rope_sub(a, (C)c[j], bb, (C)sn_[j]));
        dst[j + half] = from_acc<T>(rope_add(bb, (C)c[j + half], a, (C)sn_[j + half]));
    }
}

#define RB_ROPE_CACHE(name, T)                                                                                   \
    RB_KERNEL(rope_cache_write_##name)(                                                          \
        const T* q, HeadsView qv, const T* k, HeadsView kv_, const T* v, HeadsView vv, const float* cs,           \
        const float* sn, i64 table_sb, T* q_out, T* k_cache, T* v_cache, const i64* cursor, int heads,           \
        int kv_heads, int capacity, int half, i64 pairs, u32* err, u32 code) {                                   \
        rope_cache_write_impl<T>(q, qv, k, kv_, v, vv, cs, sn, table_sb, q_out, k_cache, v_cache, cursor, heads, \
                                 kv_heads, capacity, half, pairs, err, code);                                    \
    }
RB_FOR_FLOAT_TYPES(RB_ROPE_CACHE)
