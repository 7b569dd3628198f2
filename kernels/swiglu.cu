// SwiGLU's gating, silu(g) * u, and its backward in one pass each:
//   y = g s u with s = sigmoid(g);  dg = dy u s (1 + g (1 - s)),  du = dy g s.
// g, u, dy and the outputs are contiguous and of one shape; `vec` says all are 16-byte aligned,
// so whole 16-byte groups move at once. Arithmetic in float (double for f64).

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

template <class T> __device__ void swiglu_fwd_impl(const T* g, const T* u, T* y, i64 n, int vec) {
    i64 done = 0;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        const i64 groups = n / V;
        RB_GRID_LOOP(i, groups) {
            uint4 rg = ((const uint4*)g)[i], ru = ((const uint4*)u)[i], ry;
            const T* eg = (const T*)&rg;
            const T* eu = (const T*)&ru;
            T* ey = (T*)&ry;
#pragma unroll
            for (int k = 0; k < V; ++k) ey[k] = glu_fwd(eg[k], eu[k]);
            ((uint4*)y)[i] = ry;
        }
        done = groups * V;
    }
    RB_GRID_LOOP(i, n - done) y[done + i] = glu_fwd(g[done + i], u[done + i]);
}

template <class T> __device__ void swiglu_bwd_impl(const T* g, const T* u, const T* dy, T* dg, T* du, i64 n, int vec) {
    i64 done = 0;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        const i64 groups = n / V;
        RB_GRID_LOOP(i, groups) {
            uint4 rg = ((const uint4*)g)[i], ru = ((const uint4*)u)[i], rd = ((const uint4*)dy)[i], rdg, rdu;
            const T* eg = (const T*)&rg;
            const T* eu = (const T*)&ru;
            const T* ed = (const T*)&rd;
            T* edg = (T*)&rdg;
            T* edu = (T*)&rdu;
#pragma unroll
            for (int k = 0; k < V; ++k) glu_bwd(eg[k], eu[k], ed[k], edg[k], edu[k]);
            ((uint4*)dg)[i] = rdg;
            ((uint4*)du)[i] = rdu;
        }
        done = groups * V;
    }
    RB_GRID_LOOP(i, n - done) {
        const i64 j = done + i;
        glu_bwd(g[j], u[j], dy[j], dg[j], du[j]);
    }
}

#define RB_SWIGLU(name, T)                                                                               \
    extern "C" __global__ void swiglu_fwd_##name(const T* g, const T* u, T* y, i64 n, int vec) {         \
        swiglu_fwd_impl<T>(g, u, y, n, vec);                                                             \
    }                                                                                                    \
    extern "C" __global__ void swiglu_bwd_##name(const T* g, const T* u, const T* dy, T* dg, T* du, i64 n, \
                                                 int vec) {                                              \
        swiglu_bwd_impl<T>(g, u, dy, dg, du, n, vec);                                                    \
    }
RB_FOR_FLOAT_TYPES(RB_SWIGLU)
