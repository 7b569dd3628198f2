// softmax and log_softmax over contiguous rows, forward and backward. One block per row; the
// forward keeps the row in shared memory when it fits, so the input is read once, and finds
// max and normalizer in one online pass.

template <class T> struct SmComp { typedef float type; };
template <> struct SmComp<f64> { typedef double type; };

template <class T>
__device__ void softmax_fwd_impl(const T* x, T* y, i64 rows, i64 cols, int log_out, int cached) {
    typedef typename SmComp<T>::type C;
    extern __shared__ unsigned char smem_raw[];
    C* row_cache = (C*)smem_raw;
    __shared__ C scratch_m[32];
    __shared__ C scratch_s[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        C m = -INFINITY, s = 0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C v = (C)to_d(xr[j]);
            if (cached) row_cache[j] = v;
            if (v > m) { s = s * exp(m - v) + (C)1; m = v; }
            else if (v == v) { s += exp(v - m); }
            else { m = v; }
        }
        // Combine (max, sum) pairs across the warp, then across warps.
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            C om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
            C nm = om > m ? om : m;
            s = (m == -INFINITY ? (C)0 : s * exp(m - nm)) + (om == -INFINITY ? (C)0 : os * exp(om - nm));
            m = nm;
        }
        __syncthreads();
        if (lane == 0) { scratch_m[warp] = m; scratch_s[warp] = s; }
        __syncthreads();
        m = lane < warps ? scratch_m[lane] : -INFINITY;
        s = lane < warps ? scratch_s[lane] : (C)0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            C om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
            C nm = om > m ? om : m;
            s = (m == -INFINITY ? (C)0 : s * exp(m - nm)) + (om == -INFINITY ? (C)0 : os * exp(om - nm));
            m = nm;
        }
        C log_s = log(s);
        C inv_s = (C)1 / s;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C v = cached ? row_cache[j] : (C)to_d(xr[j]);
            C out = log_out ? v - m - log_s : exp(v - m) * inv_s;
            yr[j] = from_d<T>((double)out);
        }
        __syncthreads();
    }
}
#define RB_SOFTMAX_FWD(name, T) \
    RB_KERNEL(softmax_fwd_##name)(const T* x, T* y, i64 rows, i64 cols, int log_out, int cached) { softmax_fwd_impl<T>(x, y, rows, cols, log_out, cached); }
RB_FOR_FLOAT_TYPES(RB_SOFTMAX_FWD)

// softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g).
template <class T>
__device__ void softmax_bwd_impl(const T* y, const T* g, T* dx, i64 rows, i64 cols, int log_out) {
    typedef typename SmComp<T>::type C;
    __shared__ C scratch[32];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* yr = y + r * cols;
        const T* gr = g + r * cols;
        T* dr = dx + r * cols;
        C acc = 0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C gv = (C)to_d(gr[j]);
            acc += log_out ? gv : gv * (C)to_d(yr[j]);
        }
        acc = block_sum(acc, scratch);
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C gv = (C)to_d(gr[j]), yv = (C)to_d(yr[j]);
            C out = log_out ? gv - exp(yv) * acc : yv * (gv - acc);
            dr[j] = from_d<T>((double)out);
        }
        __syncthreads();
    }
}
#define RB_SOFTMAX_BWD(name, T) \
    RB_KERNEL(softmax_bwd_##name)(const T* y, const T* g, T* dx, i64 rows, i64 cols, int log_out) { softmax_bwd_impl<T>(y, g, dx, rows, cols, log_out); }
RB_FOR_FLOAT_TYPES(RB_SOFTMAX_BWD)

// ----- the fast path: 16-byte vectors held in registers -----
// Rows whose length is a multiple of the vector width and whose start is 16-byte aligned are
// read from memory once: each thread keeps up to MAXV vectors of the row in registers between
// the max, the sum and the write. The host picks MAXV (1, 2 or 4) and the block size.

template <class T, int MAXV>
__device__ void softmax_fwd_vec_impl(const T* x, T* y, i64 rows, i64 cols, int log_out) {
    constexpr int V = 16 / sizeof(T);
    __shared__ float scratch[32];
    const i64 nvec = cols / V;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const uint4* xr = (const uint4*)(x + r * cols);
        uint4* yr = (uint4*)(y + r * cols);
        float d[MAXV][V];
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < MAXV; ++j) {
            i64 idx = threadIdx.x + (i64)j * blockDim.x;
            if (idx < nvec) {
                uint4 raw = xr[idx];
                const T* e = (const T*)&raw;
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    d[j][k] = to_f(e[k]);
                    m = fmaxf(m, d[j][k]);
                }
            }
        }
        m = block_max(m, scratch, -INFINITY);
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < MAXV; ++j) {
            i64 idx = threadIdx.x + (i64)j * blockDim.x;
            if (idx < nvec) {
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    d[j][k] -= m;
                    s += expf(d[j][k]);
                }
            }
        }
        s = block_sum(s, scratch);
        const float inv = 1.f / s, log_s = logf(s);
#pragma unroll
        for (int j = 0; j < MAXV; ++j) {
            i64 idx = threadIdx.x + (i64)j * blockDim.x;
            if (idx < nvec) {
                uint4 raw;
                T* e = (T*)&raw;
#pragma unroll
                for (int k = 0; k < V; ++k) e[k] = from_f<T>(log_out ? d[j][k] - log_s : expf(d[j][k]) * inv);
                yr[idx] = raw;
            }
        }
    }
}

template <class T, int MAXV>
__device__ void softmax_bwd_vec_impl(const T* y, const T* g, T* dx, i64 rows, i64 cols, int log_out) {
    constexpr int V = 16 / sizeof(T);
    __shared__ float scratch[32];
    const i64 nvec = cols / V;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const uint4* yr = (const uint4*)(y + r * cols);
        const uint4* gr = (const uint4*)(g + r * cols);
        uint4* dr = (uint4*)(dx + r * cols);
        float yv[MAXV][V], gv[MAXV][V];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < MAXV; ++j) {
            i64 idx = threadIdx.x + (i64)j * blockDim.x;
            if (idx < nvec) {
                uint4 ry = yr[idx], rg = gr[idx];
                const T* ey = (const T*)&ry;
                const T* eg = (const T*)&rg;
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    yv[j][k] = to_f(ey[k]);
                    gv[j][k] = to_f(eg[k]);
                    acc += log_out ? gv[j][k] : gv[j][k] * yv[j][k];
                }
            }
        }
        acc = block_sum(acc, scratch);
#pragma unroll
        for (int j = 0; j < MAXV; ++j) {
            i64 idx = threadIdx.x + (i64)j * blockDim.x;
            if (idx < nvec) {
                uint4 raw;
                T* e = (T*)&raw;
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    float out = log_out ? gv[j][k] - expf(yv[j][k]) * acc : yv[j][k] * (gv[j][k] - acc);
                    e[k] = from_f<T>(out);
                }
                dr[idx] = raw;
            }
        }
    }
}

#define RB_SOFTMAX_VEC(name, T, MAXV) \
    RB_KERNEL(softmax_fwd_vec##MAXV##_##name)(const T* x, T* y, i64 rows, i64 cols, int log_out) { softmax_fwd_vec_impl<T, MAXV>(x, y, rows, cols, log_out); } \
    RB_KERNEL(softmax_bwd_vec##MAXV##_##name)(const T* y, const T* g, T* dx, i64 rows, i64 cols, int log_out) { softmax_bwd_vec_impl<T, MAXV>(y, g, dx, rows, cols, log_out); }
#define RB_SOFTMAX_VEC_ALL(name, T) RB_SOFTMAX_VEC(name, T, 1) RB_SOFTMAX_VEC(name, T, 2) RB_SOFTMAX_VEC(name, T, 4)
RB_SOFTMAX_VEC_ALL(bf16, bf16)
RB_SOFTMAX_VEC_ALL(f16, f16)
RB_SOFTMAX_VEC_ALL(f32, f32)

// ----- short rows: a group of G lanes per row -----
// Rows of at most 32 elements (the DFL's 16 bins over every anchor) would leave most of a
// block idle with one block per row. Here G lanes (a power of two, G >= cols) hold a row, one
// element a lane, and reduce it with shuffles inside the group; a warp holds 32 / G rows. The
// row loop steps whole warps, so every lane of a warp takes the same trips and the shuffles
// always see the full warp. NaN anywhere in a row makes the row NaN, as in the kernels above.

template <class C> __device__ __forceinline__ C group_max(C m, int G) {
    for (int o = G >> 1; o > 0; o >>= 1) {
        C om = __shfl_xor_sync(0xffffffffu, m, o, G);
        m = (om > m || om != om) ? om : m;
    }
    return m;
}

template <class C> __device__ __forceinline__ C group_sum(C s, int G) {
    for (int o = G >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o, G);
    return s;
}

template <class T>
__device__ void softmax_fwd_short_impl(const T* x, T* y, i64 rows, int cols, int G, int log_out) {
    typedef typename SmComp<T>::type C;
    const int lane = threadIdx.x & 31, in_row = lane & (G - 1);
    const i64 rows_per_warp = 32 / G;
    const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
    for (i64 w = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w * rows_per_warp < rows; w += warps) {
        const i64 r = w * rows_per_warp + lane / G;
        const bool in = r < rows && in_row < cols;
        C v = in ? (C)to_d(x[r * cols + in_row]) : (C)-INFINITY;
        C m = group_max(v, G);
        C e = in ? exp(v - m) : (C)0;
        C s = group_sum(e, G);
        if (in) y[r * cols + in_row] = from_d<T>((double)(log_out ? v - m - log(s) : e / s));
    }
}

template <class T>
__device__ void softmax_bwd_short_impl(const T* y, const T* g, T* dx, i64 rows, int cols, int G, int log_out) {
    typedef typename SmComp<T>::type C;
    const int lane = threadIdx.x & 31, in_row = lane & (G - 1);
    const i64 rows_per_warp = 32 / G;
    const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
    for (i64 w = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w * rows_per_warp < rows; w += warps) {
        const i64 r = w * rows_per_warp + lane / G;
        const bool in = r < rows && in_row < cols;
        C gv = in ? (C)to_d(g[r * cols + in_row]) : (C)0;
        C yv = in ? (C)to_d(y[r * cols + in_row]) : (C)0;
        C acc = group_sum(log_out ? gv : gv * yv, G);
        if (in) dx[r * cols + in_row] = from_d<T>((double)(log_out ? gv - exp(yv) * acc : yv * (gv - acc)));
    }
}

#define RB_SOFTMAX_SHORT(name, T) \
    RB_KERNEL(softmax_fwd_short_##name)(const T* x, T* y, i64 rows, int cols, int G, int log_out) { softmax_fwd_short_impl<T>(x, y, rows, cols, G, log_out); } \
    RB_KERNEL(softmax_bwd_short_##name)(const T* y, const T* g, T* dx, i64 rows, int cols, int G, int log_out) { softmax_bwd_short_impl<T>(y, g, dx, rows, cols, G, log_out); }
RB_FOR_FLOAT_TYPES(RB_SOFTMAX_SHORT)
