// SwiGLU's gating, silu(g) * u, and its backward in one pass each:
//   y = g s u with s = sigmoid(g);  dg = dy u s (1 + g (1 - s)),  du = dy g s.
// Arithmetic in float (double for f64).

__device__ __forceinline__ float glu_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ double glu_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

template <class T> __device__ __forceinline__ T glu_fwd(T g, T u) {
    typedef typename Acc<T>::type C;
    const C a = to_acc(g);
    return from_acc<T>(a * glu_sigmoid(a) * to_acc(u));
}

template <class T> __device__ __forceinline__ void glu_bwd(T g, T u, T dy, T& dg, T& du) {
    typedef typename Acc<T>::type C;
    const C a = to_acc(g), b = to_acc(u), d = to_acc(dy);
    const C s = glu_sigmoid(a);
    du = from_acc<T>(d * a * s);
    dg = from_acc<T>(d * b * s * ((C)1 + a * ((C)1 - s)));
}

// The gate and up operands are `n / cols` rows of `cols` elements, row r of each at r * ld_in
// from its pointer (ld_in = cols when contiguous; 2 * cols for the two halves of one fused
// gate/up product). y is contiguous; dg and du are rows at r * ld_out (2 * cols: the two
// halves of one gradient buffer, which the fused product's split takes without a copy).
// `vec`: cols and both row strides are multiples of 16 bytes and every pointer is aligned.
__device__ __forceinline__ i64 glu_row_offset(i64 e, i64 cols, i64 ld) {
    const i64 r = e / cols;
    return r * ld + (e - r * cols);
}

template <class T> __device__ void swiglu_fwd_impl(const T* g, const T* u, T* y, i64 n, i64 cols, i64 ld_in, int vec) {
    i64 done = 0;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        const i64 groups = n / V;
        RB_GRID_LOOP(i, groups) {
            const i64 at = glu_row_offset(i * V, cols, ld_in);
            uint4 rg = *(const uint4*)(g + at), ru = *(const uint4*)(u + at), ry;
            const T* eg = (const T*)&rg;
            const T* eu = (const T*)&ru;
            T* ey = (T*)&ry;
#pragma unroll
            for (int k = 0; k < V; ++k) ey[k] = glu_fwd(eg[k], eu[k]);
            ((uint4*)y)[i] = ry;
        }
        done = groups * V;
    }
    RB_GRID_LOOP(i, n - done) {
        const i64 e = done + i, at = glu_row_offset(e, cols, ld_in);
        y[e] = glu_fwd(g[at], u[at]);
    }
}

template <class T>
__device__ void swiglu_bwd_impl(const T* g, const T* u, const T* dy, T* dg, T* du, i64 n, i64 cols, i64 ld_in,
                                i64 ld_out, int vec) {
    i64 done = 0;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        const i64 groups = n / V;
        RB_GRID_LOOP(i, groups) {
            const i64 at = glu_row_offset(i * V, cols, ld_in), to = glu_row_offset(i * V, cols, ld_out);
            uint4 rg = *(const uint4*)(g + at), ru = *(const uint4*)(u + at), rd = ((const uint4*)dy)[i], rdg, rdu;
            const T* eg = (const T*)&rg;
            const T* eu = (const T*)&ru;
            const T* ed = (const T*)&rd;
            T* edg = (T*)&rdg;
            T* edu = (T*)&rdu;
#pragma unroll
            for (int k = 0; k < V; ++k) glu_bwd(eg[k], eu[k], ed[k], edg[k], edu[k]);
            *(uint4*)(dg + to) = rdg;
            *(uint4*)(du + to) = rdu;
        }
        done = groups * V;
    }
    RB_GRID_LOOP(i, n - done) {
        const i64 e = done + i, at = glu_row_offset(e, cols, ld_in), to = glu_row_offset(e, cols, ld_out);
        glu_bwd(g[at], u[at], dy[e], dg[to], du[to]);
    }
}

#define RB_SWIGLU(name, T)                                                                                   \
    RB_KERNEL(swiglu_fwd_##name)(const T* g, const T* u, T* y, i64 n, i64 cols, i64 ld_in,   \
                                                 int vec) {                                                  \
        swiglu_fwd_impl<T>(g, u, y, n, cols, ld_in, vec);                                                    \
    }                                                                                                        \
    RB_KERNEL(swiglu_bwd_##name)(const T* g, const T* u, const T* dy, T* dg, T* du, i64 n,   \
                                                 i64 cols, i64 ld_in, i64 ld_out, int vec) {                 \
        swiglu_bwd_impl<T>(g, u, dy, dg, du, n, cols, ld_in, ld_out, vec);                                   \
    }
RB_FOR_FLOAT_TYPES(RB_SWIGLU)
