// Unary and binary arithmetic, comparisons and select. Float types compute in float (f64 and
// integers in double, as on the CPU); contiguous aligned operands take 16-byte vector accesses.
//
// Each op's expression comes from its line in the engine's op tables
// (engine/src/backend/spec/{unary,binary}.rs): the engine prepends the `case` lists
// RB_UNARY_VALUE_CASES, RB_UNARY_DERIVATIVE_CASES, RB_BINARY_CASES and RB_COMPARE_CASES to this
// file, so the op codes exist in one place only.

template <class C> __device__ __forceinline__ C sign_c(C x) { return x > (C)0 ? (C)1 : (x < (C)0 ? (C)-1 : (C)0); }
// log(1 + exp(x)), and x above torch's default threshold of 20.
template <class C> __device__ __forceinline__ C softplus_c(C x) { return x > (C)20 ? x : log1p(rb_exp(x)); }
template <class C> __device__ __forceinline__ C gelu_c(C x) { return (C)0.5 * x * ((C)1 + erf(x * (C)0.7071067811865476)); }
template <class C> __device__ __forceinline__ C gelu_derivative_c(C x) {
    C cdf = (C)0.5 * ((C)1 + erf(x * (C)0.7071067811865476));
    C pdf = rb_exp(-(x * x) * (C)0.5) * (C)0.3989422804014327;
    return cdf + x * pdf;
}
template <class C> __device__ __forceinline__ C gelu_tanh_inner_c(C x) { return (C)0.7978845608028654 * (x + (C)0.044715 * x * x * x); }
template <class C> __device__ __forceinline__ C quick_gelu_derivative_c(C x) {
    const C s = sigmoid_c((C)1.702 * x);
    return s + (C)1.702 * x * s * ((C)1 - s);
}
template <class C> __device__ __forceinline__ C gelu_tanh_c(C x) { return (C)0.5 * x * ((C)1 + tanh(gelu_tanh_inner_c(x))); }
template <class C> __device__ __forceinline__ C gelu_tanh_derivative_c(C x) {
    C t = tanh(gelu_tanh_inner_c(x));
    C dinner = (C)0.7978845608028654 * ((C)1 + (C)(3.0 * 0.044715) * x * x);
    return (C)0.5 * ((C)1 + t) + (C)0.5 * x * ((C)1 - t * t) * dinner;
}
template <class C> __device__ __forceinline__ C mish_derivative_c(C x) {
    C t = tanh(softplus_c(x));
    return t + x * sigmoid_c(x) * ((C)1 - t * t);
}

template <class C> __device__ __forceinline__ C unary_op(int op, C x, C p0, C p1) {
    switch (op) { RB_UNARY_VALUE_CASES }
    return x;
}

// f'(x) given x and y = f(x).
template <class C> __device__ __forceinline__ C unary_derivative(int op, C x, C y, C p0, C p1) {
    switch (op) { RB_UNARY_DERIVATIVE_CASES }
    return (C)0;
}

// `vec`: x and y are 16-byte aligned, so whole 16-byte groups move at once.
template <class T>
__device__ void unary_impl(const T* x, T* y, i64 n, int op, double p0, double p1, int vec) {
    typedef typename Compute<T>::type C;
    const C a = (C)p0, b = (C)p1;
    i64 done = 0;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        i64 groups = n / V;
        const uint4* xv = (const uint4*)x;
        uint4* yv = (uint4*)y;
        RB_GRID_LOOP(g, groups) {
            uint4 raw = xv[g];
            T* e = (T*)&raw;
#pragma unroll
            for (int k = 0; k < V; ++k) e[k] = from_c<T>(unary_op<C>(op, to_c(e[k]), a, b));
            yv[g] = raw;
        }
        done = groups * V;
    }
    RB_GRID_LOOP(i, n - done) { y[done + i] = from_c<T>(unary_op<C>(op, to_c(x[done + i]), a, b)); }
}
#define RB_UNARY(name, T) \
    RB_KERNEL(unary_##name)(const T* x, T* y, i64 n, int op, double p0, double p1, int vec) { unary_impl<T>(x, y, n, op, p0, p1, vec); }
RB_FOR_NUMERIC_TYPES(RB_UNARY)

// dx = g * f'(x, y) over contiguous x, y = f(x) and g: the backward of every unary op.
// `vec`: all four pointers are 16-byte aligned.
template <class T>
__device__ void unary_backward_impl(const T* x, const T* y, const T* g, T* dx, i64 n, int op, double p0, double p1, int vec) {
    typedef typename Compute<T>::type C;
    const C a = (C)p0, b = (C)p1;
    i64 done = 0;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        i64 groups = n / V;
        RB_GRID_LOOP(q, groups) {
            uint4 rx = ((const uint4*)x)[q], ry = ((const uint4*)y)[q], rg = ((const uint4*)g)[q];
            const T *ex = (const T*)&rx, *ey = (const T*)&ry;
            T* eg = (T*)&rg;
#pragma unroll
            for (int k = 0; k < V; ++k)
                eg[k] = from_c<T>(to_c(eg[k]) * unary_derivative<C>(op, to_c(ex[k]), to_c(ey[k]), a, b));
            ((uint4*)dx)[q] = rg;
        }
        done = groups * V;
    }
    RB_GRID_LOOP(i, n - done) {
        i64 j = done + i;
        dx[j] = from_c<T>(to_c(g[j]) * unary_derivative<C>(op, to_c(x[j]), to_c(y[j]), a, b));
    }
}
#define RB_UNARY_BACKWARD(name, T) \
    RB_KERNEL(unary_backward_##name)(const T* x, const T* y, const T* g, T* dx, i64 n, int op, double p0, double p1, int vec) { unary_backward_impl<T>(x, y, g, dx, n, op, p0, p1, vec); }
RB_FOR_FLOAT_TYPES(RB_UNARY_BACKWARD)

// y = f(x + b[channel]) over the flat run of x, where element i sits in channel
// (i / inner) % channels: inner is H*W for NCHW images and 1 for channels-last ones. A layer's
// bias and activation in one pass (op -1 is no activation). `vec`: x and y are 16-byte
// aligned, and either inner is a multiple of the group (one channel per group) or inner is 1
// and channels is a multiple of the group (a group holds consecutive channels).
template <class T>
__device__ void bias_unary_impl(const T* x, const T* bias, T* y, i64 n, i64 inner, i64 channels, int op, double p0, double p1, int vec) {
    typedef typename Compute<T>::type C;
    const C a = (C)p0, b = (C)p1;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        RB_GRID_LOOP(g, n / V) {
            uint4 raw = ((const uint4*)x)[g];
            T* e = (T*)&raw;
            const i64 first = g * V;
            if (inner == 1) {
                const i64 c0 = first % channels;
#pragma unroll
                for (int k = 0; k < V; ++k) e[k] = from_c<T>(unary_op<C>(op, to_c(e[k]) + to_c(bias[c0 + k]), a, b));
            } else {
                const C bc = to_c(bias[(first / inner) % channels]);
#pragma unroll
                for (int k = 0; k < V; ++k) e[k] = from_c<T>(unary_op<C>(op, to_c(e[k]) + bc, a, b));
            }
            ((uint4*)y)[g] = raw;
        }
        return;
    }
    RB_GRID_LOOP(i, n) { y[i] = from_c<T>(unary_op<C>(op, to_c(x[i]) + to_c(bias[(i / inner) % channels]), a, b)); }
}
#define RB_BIAS_UNARY(name, T) \
    RB_KERNEL(bias_unary_##name)(const T* x, const T* bias, T* y, i64 n, i64 inner, i64 channels, int op, double p0, double p1, int vec) { bias_unary_impl<T>(x, bias, y, n, inner, channels, op, p0, p1, vec); }
RB_FOR_FLOAT_TYPES(RB_BIAS_UNARY)

template <class C> __device__ __forceinline__ C binary_op(int op, C a, C b) {
    switch (op) { RB_BINARY_CASES }
    return a;
}

// Broadcast operands arrive as views of the output's shape (stride 0 on broadcast dims).
// `vec` (the output is contiguous and 16-byte aligned): 1, both operands are contiguous and
// aligned; 2, a is and b is one value broadcast to every element (a scale); 3, the reverse;
// 4, a is and b is one aligned row (its last dim, a multiple of the word) broadcast over the
// leading dims (a bias); 5, the reverse. A row is read by words too: the general strided path
// divides per element and ran a bias add at a third of the bandwidth.
template <class T>
__device__ void binary_impl(const T* a, Strided as, const T* b, Strided bs, T* y, i64 n, int op, int vec) {
    typedef typename Compute<T>::type C;
    i64 done = 0;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        i64 groups = n / V;
        const uint4* av = (const uint4*)(a + as.offset);
        const uint4* bv = (const uint4*)(b + bs.offset);
        const C one_a = vec == 3 ? to_c(a[as.offset]) : C(0), one_b = vec == 2 ? to_c(b[bs.offset]) : C(0);
        const i64 row_words = vec == 4 ? bs.shape[bs.rank - 1] / V : vec == 5 ? as.shape[as.rank - 1] / V : 1;
        uint4* yv = (uint4*)y;
        RB_GRID_LOOP(g, groups) {
            const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
            const i64 in_row = vec >= 4 ? (i64)((u64)g % (u64)row_words) : g;
            uint4 ra = vec == 3 ? zero : av[vec == 5 ? in_row : g];
            uint4 rb = vec == 2 ? zero : bv[vec == 4 ? in_row : g];
            T* ea = (T*)&ra;
            const T* eb = (const T*)&rb;
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const C x = vec == 3 ? one_a : to_c(ea[k]), w = vec == 2 ? one_b : to_c(eb[k]);
                ea[k] = from_c<T>(binary_op<C>(op, x, w));
            }
            yv[g] = ra;
        }
        done = groups * V;
    }
    RB_GRID_LOOP(i, n - done) {
        i64 j = done + i;
        y[j] = from_c<T>(binary_op<C>(op, to_c(a[strided_offset(as, j)]), to_c(b[strided_offset(bs, j)])));
    }
}
#define RB_BINARY(name, T) \
    RB_KERNEL(binary_##name)(const T* a, Strided as, const T* b, Strided bs, T* y, i64 n, int op, int vec) { binary_impl<T>(a, as, b, bs, y, n, op, vec); }
RB_FOR_NUMERIC_TYPES(RB_BINARY)

// F32 + BF16/F16 -> F32 over contiguous, 16-byte aligned operands, eight elements a thread:
// what promoting the low operand to F32 and adding computes, without the promoted copy (a
// mixed-precision layer's output added to its F32 residual stream).
template <class L>
__device__ void add_f32_low_impl(const f32* a, const L* b, f32* y, i64 n) {
    const i64 groups = n / 8;
    RB_GRID_LOOP(g, groups) {
        float va[8], vb[8];
        Eight<f32>::load(a + g * 8, va);
        Eight<L>::load(b + g * 8, vb);
#pragma unroll
        for (int k = 0; k < 8; ++k) va[k] = va[k] + vb[k];
        Eight<f32>::store(y + g * 8, va);
    }
    for (i64 i = groups * 8 + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)blockDim.x * gridDim.x)
        y[i] = a[i] + to_f(b[i]);
}
RB_KERNEL(add_f32_bf16)(const f32* a, const bf16* b, f32* y, i64 n) { add_f32_low_impl(a, b, y, n); }
RB_KERNEL(add_f32_f16)(const f32* a, const f16* b, f32* y, i64 n) { add_f32_low_impl(a, b, y, n); }

template <class A> __device__ __forceinline__ bool compare_op(int op, A a, A b) {
    switch (op) { RB_COMPARE_CASES }
    return false;
}

// Comparisons in the operands' own type (exact for i64), giving 0 or 1.
template <class T>
__device__ void compare_impl(const T* a, Strided as, const T* b, Strided bs, u8* y, i64 n, int op) {
    RB_GRID_LOOP(i, n) {
        auto p = to_acc(a[strided_offset(as, i)]);
        auto q = to_acc(b[strided_offset(bs, i)]);
        y[i] = compare_op(op, p, q) ? 1 : 0;
    }
}
#define RB_COMPARE(name, T) \
    RB_KERNEL(compare_##name)(const T* a, Strided as, const T* b, Strided bs, u8* y, i64 n, int op) { compare_impl<T>(a, as, b, bs, y, n, op); }
RB_FOR_ALL_TYPES(RB_COMPARE)

template <class T>
__device__ void where_impl(const u8* c, Strided cs, const T* a, Strided as, const T* b, Strided bs, T* y, i64 n) {
    RB_GRID_LOOP(i, n) {
        y[i] = c[strided_offset(cs, i)] ? a[strided_offset(as, i)] : b[strided_offset(bs, i)];
    }
}
#define RB_WHERE(name, T) \
    RB_KERNEL(where_##name)(const u8* c, Strided cs, const T* a, Strided as, const T* b, Strided bs, T* y, i64 n) { where_impl<T>(c, cs, a, as, b, bs, y, n); }
RB_FOR_ALL_TYPES(RB_WHERE)
