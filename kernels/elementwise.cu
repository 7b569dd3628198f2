// Unary and binary arithmetic, comparisons and select. Float types compute in float (f64 and
// integers in double, as on the CPU); contiguous aligned operands take 16-byte vector accesses.

template <class T> struct Comp { typedef double type; };
template <> struct Comp<f32> { typedef float type; };
template <> struct Comp<bf16> { typedef float type; };
template <> struct Comp<f16> { typedef float type; };

template <class T> __device__ __forceinline__ typename Comp<T>::type to_c(T x) { return (typename Comp<T>::type)to_d(x); }
template <> __device__ __forceinline__ float to_c<f32>(f32 x) { return x; }
template <> __device__ __forceinline__ float to_c<bf16>(bf16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_c<f16>(f16 x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T from_c(typename Comp<T>::type x) { return from_d<T>((double)x); }
template <> __device__ __forceinline__ f32 from_c<f32>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_c<bf16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ f16 from_c<f16>(float x) { return __float2half(x); }

__device__ __forceinline__ float rb_exp(float x) { return expf(x); }
__device__ __forceinline__ double rb_exp(double x) { return exp(x); }

template <class C> __device__ __forceinline__ C sigmoid_c(C x) {
    if (x >= (C)0) return (C)1 / ((C)1 + rb_exp(-x));
    C e = rb_exp(x);
    return e / ((C)1 + e);
}

// Op codes follow `UnaryOp`'s order in engine/src/ops/kinds.rs (see backend/cuda/elementwise.rs).
template <class C> __device__ __forceinline__ C unary_op(int op, C x, C p0, C p1) {
    const C half = (C)0.5, one = (C)1;
    const C sqrt_2_over_pi = (C)0.7978845608028654, gc = (C)0.044715;
    const C inv_sqrt2 = (C)0.7071067811865476, inv_sqrt_2pi = (C)0.3989422804014327;
    switch (op) {
    case 0: return -x;
    case 1: return x < (C)0 ? -x : x;
    case 2: return rb_exp(x);
    case 3: return log(x);
    case 4: return sqrt(x);
    case 5: return one / sqrt(x);
    case 6: return sin(x);
    case 7: return cos(x);
    case 8: return tanh(x);
    case 9: return sigmoid_c(x);
    case 10: return x > (C)0 ? x : (C)0;
    case 11: return half * x * (one + erf(x * inv_sqrt2));
    case 12: return half * x * (one + tanh(sqrt_2_over_pi * (x + gc * x * x * x)));
    case 13: return x * sigmoid_c(x);
    case 14: return x > (C)0 ? one : (x < (C)0 ? -one : (C)0);
    case 15: return pow(x, p0);
    case 16: return x != x ? x : fmin(fmax(x, p0), p1);
    case 17: return x * p0 + p1;
    case 18: {
        C cdf = half * (one + erf(x * inv_sqrt2));
        C pdf = rb_exp(-(x * x) * half) * inv_sqrt_2pi;
        return cdf + x * pdf;
    }
    case 19: {
        C t = tanh(sqrt_2_over_pi * (x + gc * x * x * x));
        C dinner = sqrt_2_over_pi * (one + (C)(3.0 * 0.044715) * x * x);
        return half * (one + t) + half * x * (one - t * t) * dinner;
    }
    case 20: {
        C s = sigmoid_c(x);
        return s * (one + x * (one - s));
    }
    }
    return x;
}

// `vec`: x and y are 16-byte aligned, so whole 16-byte groups move at once.
template <class T>
__device__ void unary_impl(const T* x, T* y, i64 n, int op, double p0, double p1, int vec) {
    typedef typename Comp<T>::type C;
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
    extern "C" __global__ void unary_##name(const T* x, T* y, i64 n, int op, double p0, double p1, int vec) { unary_impl<T>(x, y, n, op, p0, p1, vec); }
RB_FOR_NUMERIC_TYPES(RB_UNARY)

template <class C> __device__ __forceinline__ C binary_op(int op, C a, C b) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return fmax(a, b);
    case 5: return fmin(a, b);
    }
    return a;
}

// Broadcast operands arrive as views of the output's shape (stride 0 on broadcast dims).
// `vec`: both operands and the output are contiguous and 16-byte aligned.
template <class T>
__device__ void binary_impl(const T* a, Strided as, const T* b, Strided bs, T* y, i64 n, int op, int vec) {
    typedef typename Comp<T>::type C;
    i64 done = 0;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        i64 groups = n / V;
        const uint4* av = (const uint4*)(a + as.offset);
        const uint4* bv = (const uint4*)(b + bs.offset);
        uint4* yv = (uint4*)y;
        RB_GRID_LOOP(g, groups) {
            uint4 ra = av[g], rb = bv[g];
            T* ea = (T*)&ra;
            const T* eb = (const T*)&rb;
#pragma unroll
            for (int k = 0; k < V; ++k) ea[k] = from_c<T>(binary_op<C>(op, to_c(ea[k]), to_c(eb[k])));
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
    extern "C" __global__ void binary_##name(const T* a, Strided as, const T* b, Strided bs, T* y, i64 n, int op, int vec) { binary_impl<T>(a, as, b, bs, y, n, op, vec); }
RB_FOR_NUMERIC_TYPES(RB_BINARY)

// Comparisons in the operands' own type (exact for i64), giving 0 or 1.
template <class T>
__device__ void compare_impl(const T* a, Strided as, const T* b, Strided bs, u8* y, i64 n, int op) {
    RB_GRID_LOOP(i, n) {
        auto p = to_acc(a[strided_offset(as, i)]);
        auto q = to_acc(b[strided_offset(bs, i)]);
        bool r;
        switch (op) {
        case 0: r = p == q; break;
        case 1: r = p != q; break;
        case 2: r = p < q; break;
        case 3: r = p <= q; break;
        case 4: r = p > q; break;
        default: r = p >= q; break;
        }
        y[i] = r ? 1 : 0;
    }
}
#define RB_COMPARE(name, T) \
    extern "C" __global__ void compare_##name(const T* a, Strided as, const T* b, Strided bs, u8* y, i64 n, int op) { compare_impl<T>(a, as, b, bs, y, n, op); }
RB_FOR_ALL_TYPES(RB_COMPARE)

template <class T>
__device__ void where_impl(const u8* c, Strided cs, const T* a, Strided as, const T* b, Strided bs, T* y, i64 n) {
    RB_GRID_LOOP(i, n) {
        y[i] = c[strided_offset(cs, i)] ? a[strided_offset(as, i)] : b[strided_offset(bs, i)];
    }
}
#define RB_WHERE(name, T) \
    extern "C" __global__ void where_##name(const u8* c, Strided cs, const T* a, Strided as, const T* b, Strided bs, T* y, i64 n) { where_impl<T>(c, cs, a, as, b, bs, y, n); }
RB_FOR_ALL_TYPES(RB_WHERE)
