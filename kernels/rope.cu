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

template <class T>
__device__ void rope_impl(const T* x, RopeView xv, const float* cs, RopeView cv, const float* sn, RopeView sv, T* y,
                          RopeView yv, int n1, int n2, int half, int inverse, i64 pairs) {
    typedef typename Acc<T>::type C;
    RB_GRID_LOOP(p, pairs) {
        // 32-bit index arithmetic: the host keeps pairs below 2^31.
        const u32 pu = (u32)p, hu = (u32)half;
        const u32 row = pu / hu, j = pu - row * hu;
        const u32 i2 = row % (u32)n2, r = row / (u32)n2;
        const u32 i1 = r % (u32)n1, i0 = r / (u32)n1;
        const i64 xo = i0 * xv.s0 + i1 * xv.s1 + i2 * xv.s2 + j;
        const i64 co = i0 * cv.s0 + i1 * cv.s1 + i2 * cv.s2 + j;
        const i64 so = i0 * sv.s0 + i1 * sv.s1 + i2 * sv.s2 + j;
        const i64 yo = i0 * yv.s0 + i1 * yv.s1 + i2 * yv.s2 + j;
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

#define RB_ROPE(name, T)                                                                                       \
    extern "C" __global__ void rope_##name(const T* x, RopeView xv, const float* cs, RopeView cv, const float* sn, \
                                           RopeView sv, T* y, RopeView yv, int n1, int n2, int half, int inverse,   \
                                           i64 pairs) {                                                         \
        rope_impl<T>(x, xv, cs, cv, sn, sv, y, yv, n1, n2, half, inverse, pairs);                              \
    }
RB_FOR_FLOAT_TYPES(RB_ROPE)
