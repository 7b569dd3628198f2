// Pooling and nearest upsampling over contiguous planes [planes, H, W], mirroring
// backend/cpu/pool.rs. A window is clipped to the input (padding never wins a max and counts
// only in the average's divisor). Backward kernels are in gather form: each input pixel sums
// the outputs whose windows hold it, in output order, so there are no atomics and results
// repeat exactly.

// Mirrors `PoolGeom` in backend/cuda/pool.rs field for field.
struct PoolGeom {
    i64 planes, h, w, kh, kw, sh, sw, ph, pw, ho, wo;
};

__device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }
__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }

// The outputs [lo, hi] along one axis whose windows (start o*s - p, length k) hold input i.
__device__ __forceinline__ void covering(i64 i, i64 k, i64 s, i64 p, i64 outs, i64* lo, i64* hi) {
    i64 first = i + p - k + 1;
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = imin((i + p) / s, outs - 1);
}

// Max pooling: the first strictly greater value in row-major window order wins (so a NaN wins
// only as the first value), and `arg` gets its in-plane index for the backward. `I` is the
// type of the index arithmetic: `int` when every index fits (the `32` kernels; 64-bit division
// costs several times more and bound these kernels), else i64.
template <class T, class I>
__device__ void max_pool_fwd_impl(const T* x, T* y, i64* arg, PoolGeom g, i64 total) {
    typedef typename Acc<T>::type A;
    const I h = (I)g.h, w = (I)g.w, ho = (I)g.ho, wo = (I)g.wo;
    const I kh = (I)g.kh, kw = (I)g.kw, sh = (I)g.sh, sw = (I)g.sw, ph = (I)g.ph, pw = (I)g.pw;
    RB_GRID_LOOP(n, total) {
        I i = (I)n;
        I ox = i % wo, t = i / wo;
        I oy = t % ho, p = t / ho;
        I y0 = oy * sh - ph, x0 = ox * sw - pw;
        I ya = y0 > 0 ? y0 : 0, yb = y0 + kh < h ? y0 + kh : h;
        I xa = x0 > 0 ? x0 : 0, xb = x0 + kw < w ? x0 + kw : w;
        const T* plane = x + (i64)p * h * w;
        bool found = false;
        A best = (A)0;
        I bi = 0;
        for (I yy = ya; yy < yb; ++yy) {
            for (I xx = xa; xx < xb; ++xx) {
                A v = to_acc(plane[yy * w + xx]);
                if (!found || v > best) {
                    best = v;
                    bi = yy * w + xx;
                    found = true;
                }
            }
        }
        y[n] = found ? plane[bi] : from_f<T>(-INFINITY);
        arg[n] = bi;
    }
}

// The outputs [lo, hi] along one axis whose windows (start o*s - p, length k) hold input i.
template <class I>
__device__ __forceinline__ void covering_i(I i, I k, I s, I p, I outs, I* lo, I* hi) {
    I first = i + p - k + 1;
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    I last = (i + p) / s;
    *hi = last < outs - 1 ? last : outs - 1;
}

template <class T, class I>
__device__ void max_pool_bwd_impl(const T* dy, const i64* arg, T* dx, PoolGeom g, i64 total) {
    typedef typename Acc<T>::type A;
    const I h = (I)g.h, w = (I)g.w, ho = (I)g.ho, wo = (I)g.wo;
    RB_GRID_LOOP(n, total) {
        I i = (I)n;
        I xx = i % w, t = i / w;
        I yy = t % h, p = t / h;
        I oy0, oy1, ox0, ox1;
        covering_i<I>(yy, (I)g.kh, (I)g.sh, (I)g.ph, ho, &oy0, &oy1);
        covering_i<I>(xx, (I)g.kw, (I)g.sw, (I)g.pw, wo, &ox0, &ox1);
        i64 me = (i64)yy * w + xx;
        const i64* parg = arg + (i64)p * ho * wo;
        const T* pdy = dy + (i64)p * ho * wo;
        A s = (A)0;
        for (I oy = oy0; oy <= oy1; ++oy)
            for (I ox = ox0; ox <= ox1; ++ox) {
                I o = oy * wo + ox;
                if (parg[o] == me) s += to_acc(pdy[o]);
            }
        dx[n] = from_acc<T>(s);
    }
}

// Average pooling divides by the full kernel area, padding included (PyTorch's default).
template <class T>
__device__ void avg_pool_fwd_impl(const T* x, T* y, PoolGeom g, i64 total) {
    typedef typename Acc<T>::type A;
    A area = (A)(g.kh * g.kw);
    RB_GRID_LOOP(i, total) {
        i64 ox = i % g.wo, t = i / g.wo;
        i64 oy = t % g.ho, p = t / g.ho;
        i64 y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        i64 ya = imax(y0, 0), yb = imin(y0 + g.kh, g.h);
        i64 xa = imax(x0, 0), xb = imin(x0 + g.kw, g.w);
        const T* plane = x + p * g.h * g.w;
        A s = (A)0;
        for (i64 yy = ya; yy < yb; ++yy)
            for (i64 xx = xa; xx < xb; ++xx) s += to_acc(plane[yy * g.w + xx]);
        y[i] = from_acc<T>(s / area);
    }
}

template <class T>
__device__ void avg_pool_bwd_impl(const T* dy, T* dx, PoolGeom g, i64 total) {
    typedef typename Acc<T>::type A;
    A area = (A)(g.kh * g.kw);
    RB_GRID_LOOP(i, total) {
        i64 xx = i % g.w, t = i / g.w;
        i64 yy = t % g.h, p = t / g.h;
        i64 oy0, oy1, ox0, ox1;
        covering(yy, g.kh, g.sh, g.ph, g.ho, &oy0, &oy1);
        covering(xx, g.kw, g.sw, g.pw, g.wo, &ox0, &ox1);
        const T* plane = dy + p * g.ho * g.wo;
        A s = (A)0;
        for (i64 oy = oy0; oy <= oy1; ++oy)
            for (i64 ox = ox0; ox <= ox1; ++ox) s += to_acc(plane[oy * g.wo + ox]) / area;
        dx[i] = from_acc<T>(s);
    }
}

// Nearest upsampling by integer factors: [planes, h, w] to [planes, h*sy, w*sx].
template <class T>
__device__ void upsample_fwd_impl(const T* x, T* y, i64 h, i64 w, i64 sy, i64 sx, i64 total) {
    i64 oh = h * sy, ow = w * sx;
    RB_GRID_LOOP(i, total) {
        i64 ox = i % ow, t = i / ow;
        i64 oy = t % oh, p = t / oh;
        y[i] = x[(p * h + oy / sy) * w + ox / sx];
    }
}

template <class T>
__device__ void upsample_bwd_impl(const T* dy, T* dx, i64 h, i64 w, i64 sy, i64 sx, i64 total) {
    typedef typename Acc<T>::type A;
    i64 ow = w * sx;
    RB_GRID_LOOP(i, total) {
        i64 xx = i % w, t = i / w;
        i64 yy = t % h, p = t / h;
        const T* block = dy + ((p * h + yy) * sy) * ow + xx * sx;
        A s = (A)0;
        for (i64 a = 0; a < sy; ++a)
            for (i64 b = 0; b < sx; ++b) s += to_acc(block[a * ow + b]);
        dx[i] = from_acc<T>(s);
    }
}

#define RB_POOL(name, T)                                                                                    \
    RB_KERNEL(max_pool_fwd_##name)(const T* x, T* y, i64* arg, PoolGeom g, i64 total) {      \
        max_pool_fwd_impl<T, i64>(x, y, arg, g, total);                                                      \
    }                                                                                                        \
    RB_KERNEL(max_pool_fwd32_##name)(const T* x, T* y, i64* arg, PoolGeom g, i64 total) {    \
        max_pool_fwd_impl<T, int>(x, y, arg, g, total);                                                      \
    }                                                                                                        \
    RB_KERNEL(max_pool_bwd_##name)(const T* dy, const i64* arg, T* dx, PoolGeom g, i64 total) { \
        max_pool_bwd_impl<T, i64>(dy, arg, dx, g, total);                                                    \
    }                                                                                                        \
    RB_KERNEL(max_pool_bwd32_##name)(const T* dy, const i64* arg, T* dx, PoolGeom g, i64 total) { \
        max_pool_bwd_impl<T, int>(dy, arg, dx, g, total);                                                    \
    }                                                                                                        \
    RB_KERNEL(avg_pool_fwd_##name)(const T* x, T* y, PoolGeom g, i64 total) {                \
        avg_pool_fwd_impl<T>(x, y, g, total);                                                                \
    }                                                                                                        \
    RB_KERNEL(avg_pool_bwd_##name)(const T* dy, T* dx, PoolGeom g, i64 total) {              \
        avg_pool_bwd_impl<T>(dy, dx, g, total);                                                              \
    }                                                                                                        \
    RB_KERNEL(upsample_fwd_##name)(const T* x, T* y, i64 h, i64 w, i64 sy, i64 sx, i64 total) { \
        upsample_fwd_impl<T>(x, y, h, w, sy, sx, total);                                                     \
    }                                                                                                        \
    RB_KERNEL(upsample_bwd_##name)(const T* dy, T* dx, i64 h, i64 w, i64 sy, i64 sx, i64 total) { \
        upsample_bwd_impl<T>(dy, dx, h, w, sy, sx, total);                                                   \
    }
RB_FOR_FLOAT_TYPES(RB_POOL)
