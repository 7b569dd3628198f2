// BatchNorm over [outer, C, inner] contiguous tensors (NCHW: outer = N, inner = H * W), with
// statistics per channel over its outer * inner values. Arithmetic runs in Acc<T> (float,
// double for f64); per-channel buffers (mean, rstd, weight, bias, running statistics, the
// backward's coefficients) are Acc<T>.
//
// Every reduction is deterministic: each block reduces one fixed chunk of one channel into a
// partial ([C, chunks]), and one thread per channel adds its partials in order, in double.
//
// Kernels, each in an `s` form (one element a thread per step) and a `v` form (one 16-byte word:
// the host checks that inner is a multiple of the word and the buffers are aligned):
// - bn_partials_stats_<s|v>_<T>: a = sum(x - K), b = sum((x - K)^2) per chunk, where K is the
//   channel's first value. The shift keeps the one-pass variance free of the cancellation that
//   E[x^2] - E[x]^2 suffers when |mean| >> std, at the cost of one extra load a block.
// - bn_stats_finalize_<T>: mean and rstd = 1 / sqrt(var + eps) with the biased variance, and,
//   when given, the running statistics updated in place with the unbiased variance:
//   running = (1 - momentum) * running + momentum * batch.
// - bn_apply_<s|v>_<T>: y = x * (rstd * w) + (b - mean * rstd * w), then the activation `act`.
// - bn_partials_grad_<s|v>_<T>: a = sum(g), b = sum(g * (x - mean)) per chunk, with g the
//   gradient at the norm's output: after `act`, the output gradient times its derivative
//   at y, recomputed from x (so the forward saves x alone, not y).
// - bn_grad_finalize_<C>: dweight = rstd * b, dbias = a, and the input gradient's coefficients
//   dx = k0 * g + k1 * (x - mean) + k2; with batch statistics k1 and k2 carry the gradient
//   through the mean and the variance, with running statistics they are 0.
// - bn_grad_input_<s|v>_<T>: dx from those coefficients (and the same g).
//
// `act` is 0 (none), 1 (SiLU) or 2 (ReLU): a convolution's norm and activation in one pass
// each way.

#define BN_THREADS 256

// VEC elements of T in the compute type: one 16-byte word, or one element.
template <class T, int VEC> struct BnIo {
    typedef typename Acc<T>::type C;
    static __device__ __forceinline__ void load(const T* p, C* o) {
        if constexpr (VEC == 1) {
            o[0] = to_acc(*p);
        } else {
            Word16<T>::unpack(*reinterpret_cast<const uint4*>(p), o);
        }
    }
    static __device__ __forceinline__ void store(T* p, const C* v) {
        if constexpr (VEC == 1) {
            *p = from_acc<T>(v[0]);
        } else {
            *reinterpret_cast<uint4*>(p) = Word16<T>::pack(v);
        }
    }
};

// The affine map of channel c: y = x * scale + shift.
template <class C>
__device__ __forceinline__ void bn_affine(const C* mean, const C* rstd, const C* w, const C* b, i64 c,
                                          C& scale, C& shift) {
    scale = rstd[c] * (w ? w[c] : (C)1);
    shift = (b ? b[c] : (C)0) - mean[c] * scale;
}

// The gradient at the norm's output from the one at the activation's: itself, or times the
// activation's derivative at y = x * scale + shift (act 1 SiLU, 2 ReLU).
template <class C> __device__ __forceinline__ C bn_grad_at_norm(C g, C x, C scale, C shift, int act) {
    if (act == 1) return g * silu_derivative_c(x * scale + shift);
    if (act == 2) return x * scale + shift > (C)0 ? g : (C)0;
    return g;
}

// The element offset of step j (in units of VEC elements) of channel c: j runs over the
// channel's outer * inner_v steps, plane by plane.
__device__ __forceinline__ i64 bn_at(u32 j, u32 inner_v, i64 c, i64 channels, int vec) {
    u32 n = j / inner_v;
    u32 s = j - n * inner_v;
    return (((i64)n * channels + c) * inner_v + s) * vec;
}

// Per-channel inputs of the backward's sums: the statistics and affine parameters the forward
// used (w, b may be null), and the activation after the norm.
template <class C> struct BnGradArgs {
    const C* mean;
    const C* rstd;
    const C* w;
    const C* b;
    int act;
};

// One block: channel blockIdx.y, chunk blockIdx.x of `per_chunk` steps. MODE 0: statistics of
// x shifted by its channel's first value; MODE 1: sums of g and g * (x - mean).
template <class T, int VEC, int MODE>
__device__ void bn_partials_impl(const T* x, const T* g, BnGradArgs<typename Acc<T>::type> ga,
                                 typename Acc<T>::type* pa, typename Acc<T>::type* pb, i64 channels,
                                 u32 inner_v, u32 count_v, u32 per_chunk) {
    typedef typename Acc<T>::type C;
    typedef BnIo<T, VEC> IO;
    __shared__ C scratch[32];
    const i64 c = blockIdx.y;
    const u32 j0 = blockIdx.x * per_chunk;
    const u32 j1 = j0 + per_chunk < count_v ? j0 + per_chunk : count_v;
    const C shift = MODE == 0 ? to_acc(x[c * inner_v * VEC]) : ga.mean[c];
    C y_scale = (C)1, y_shift = (C)0;
    if (MODE == 1 && ga.act) bn_affine(ga.mean, ga.rstd, ga.w, ga.b, c, y_scale, y_shift);
    C a = (C)0, b = (C)0;
#pragma unroll 4
    for (u32 j = j0 + threadIdx.x; j < j1; j += BN_THREADS) {
        const i64 at = bn_at(j, inner_v, c, channels, VEC);
        C xv[VEC];
        IO::load(x + at, xv);
        if constexpr (MODE == 0) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                C d = xv[i] - shift;
                a += d;
                b += d * d;
            }
        } else {
            C gv[VEC];
            IO::load(g + at, gv);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const C gn = bn_grad_at_norm(gv[i], xv[i], y_scale, y_shift, ga.act);
                a += gn;
                b += gn * (xv[i] - shift);
            }
        }
    }
    a = block_sum(a, scratch);
    b = block_sum(b, scratch);
    if (threadIdx.x == 0) {
        pa[c * gridDim.x + blockIdx.x] = a;
        pb[c * gridDim.x + blockIdx.x] = b;
    }
}

#define RB_BN_PARTIALS(name, T)                                                                          \
    RB_BOUNDED_KERNEL(bn_partials_stats_s_##name, BN_THREADS)(                 \
        const T* x, Acc<T>::type* pa, Acc<T>::type* pb, i64 channels, u32 inner_v, u32 count_v,         \
        u32 per_chunk) {                                                                                 \
        bn_partials_impl<T, 1, 0>(x, nullptr, {}, pa, pb, channels, inner_v, count_v, per_chunk);       \
    }                                                                                                    \
    RB_BOUNDED_KERNEL(bn_partials_stats_v_##name, BN_THREADS)(                 \
        const T* x, Acc<T>::type* pa, Acc<T>::type* pb, i64 channels, u32 inner_v, u32 count_v,         \
        u32 per_chunk) {                                                                                 \
        bn_partials_impl<T, (int)(16 / sizeof(T)), 0>(x, nullptr, {}, pa, pb, channels, inner_v,        \
                                                      count_v, per_chunk);                               \
    }                                                                                                    \
    RB_BOUNDED_KERNEL(bn_partials_grad_s_##name, BN_THREADS)(                  \
        const T* x, const T* g, BnGradArgs<Acc<T>::type> ga, Acc<T>::type* pa, Acc<T>::type* pb,         \
        i64 channels, u32 inner_v, u32 count_v, u32 per_chunk) {                                         \
        bn_partials_impl<T, 1, 1>(x, g, ga, pa, pb, channels, inner_v, count_v, per_chunk);             \
    }                                                                                                    \
    RB_BOUNDED_KERNEL(bn_partials_grad_v_##name, BN_THREADS)(                  \
        const T* x, const T* g, BnGradArgs<Acc<T>::type> ga, Acc<T>::type* pa, Acc<T>::type* pb,         \
        i64 channels, u32 inner_v, u32 count_v, u32 per_chunk) {                                         \
        bn_partials_impl<T, (int)(16 / sizeof(T)), 1>(x, g, ga, pa, pb, channels, inner_v, count_v,     \
                                                      per_chunk);                                        \
    }
RB_FOR_FLOAT_TYPES(RB_BN_PARTIALS)

// One thread per channel. `count` values per channel, `inner` elements per plane (the shift K
// is the channel's value at offset c * inner). rmean and rvar are null when the running statistics
// are not updated.
template <class T>
__device__ void bn_stats_finalize_impl(const T* x, const typename Acc<T>::type* pa,
                                       const typename Acc<T>::type* pb, i64 chunks, i64 channels,
                                       i64 inner, double count, double eps, double momentum,
                                       typename Acc<T>::type* rmean, typename Acc<T>::type* rvar,
                                       typename Acc<T>::type* mean, typename Acc<T>::type* rstd) {
    typedef typename Acc<T>::type C;
    const i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double sa = 0.0, sb = 0.0;
    for (i64 k = 0; k < chunks; ++k) {
        sa += (double)pa[c * chunks + k];
        sb += (double)pb[c * chunks + k];
    }
    const double shifted_mean = sa / count;
    double var = sb / count - shifted_mean * shifted_mean;
    var = var > 0.0 ? var : 0.0;
    const double m = to_d(x[c * inner]) + shifted_mean;
    mean[c] = (C)m;
    rstd[c] = (C)(1.0 / sqrt(var + eps));
    if (rmean) {
        rmean[c] = (C)((1.0 - momentum) * (double)rmean[c] + momentum * m);
        rvar[c] = (C)((1.0 - momentum) * (double)rvar[c] + momentum * var * count / (count - 1.0));
    }
}

#define RB_BN_STATS_FINALIZE(name, T)                                                                    \
    RB_KERNEL(bn_stats_finalize_##name)(                                                 \
        const T* x, const Acc<T>::type* pa, const Acc<T>::type* pb, i64 chunks, i64 channels, i64 inner, \
        double count, double eps, double momentum, Acc<T>::type* rmean, Acc<T>::type* rvar,             \
        Acc<T>::type* mean, Acc<T>::type* rstd) {                                                        \
        bn_stats_finalize_impl<T>(x, pa, pb, chunks, channels, inner, count, eps, momentum, rmean, rvar, \
                                  mean, rstd);                                                           \
    }
RB_FOR_FLOAT_TYPES(RB_BN_STATS_FINALIZE)

// The channel of step j of the whole tensor (in VEC units): narrow (32-bit) division when the
// tensor has fewer than 2^32 steps, which is the usual case and much cheaper.
__device__ __forceinline__ i64 bn_channel(i64 j, u32 inner_v, i64 channels, int narrow) {
    if (narrow) return (i64)(((u32)j / inner_v) % (u32)channels);
    return (j / inner_v) % channels;
}

template <class T, int VEC>
__device__ void bn_apply_impl(const T* x, const typename Acc<T>::type* mean,
                              const typename Acc<T>::type* rstd, const typename Acc<T>::type* w,
                              const typename Acc<T>::type* b, T* y, i64 channels, u32 inner_v,
                              i64 total_v, int narrow, int act) {
    typedef typename Acc<T>::type C;
    typedef BnIo<T, VEC> IO;
    RB_GRID_LOOP(j, total_v) {
        const i64 c = bn_channel(j, inner_v, channels, narrow);
        C scale, shift;
        bn_affine(mean, rstd, w, b, c, scale, shift);
        C v[VEC];
        IO::load(x + j * VEC, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const C yv = v[i] * scale + shift;
            v[i] = act == 1 ? yv * sigmoid_c(yv) : act == 2 ? (yv > (C)0 ? yv : (C)0) : yv;
        }
        IO::store(y + j * VEC, v);
    }
}

template <class T, int VEC>
__device__ void bn_grad_input_impl(const T* x, const T* g, BnGradArgs<typename Acc<T>::type> ga,
                                   const typename Acc<T>::type* k, T* dx, i64 channels, u32 inner_v,
                                   i64 total_v, int narrow) {
    typedef typename Acc<T>::type C;
    typedef BnIo<T, VEC> IO;
    RB_GRID_LOOP(j, total_v) {
        const i64 c = bn_channel(j, inner_v, channels, narrow);
        const C k0 = k[c], k1 = k[channels + c], k2 = k[2 * channels + c], m = ga.mean[c];
        C y_scale = (C)1, y_shift = (C)0;
        if (ga.act) bn_affine(ga.mean, ga.rstd, ga.w, ga.b, c, y_scale, y_shift);
        C xv[VEC], gv[VEC];
        IO::load(x + j * VEC, xv);
        IO::load(g + j * VEC, gv);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const C gn = bn_grad_at_norm(gv[i], xv[i], y_scale, y_shift, ga.act);
            xv[i] = k0 * gn + k1 * (xv[i] - m) + k2;
        }
        IO::store(dx + j * VEC, xv);
    }
}

#define RB_BN_ELEMENTWISE(name, T)                                                                       \
    RB_KERNEL(bn_apply_s_##name)(const T* x, const Acc<T>::type* mean,                   \
                                                 const Acc<T>::type* rstd, const Acc<T>::type* w,        \
                                                 const Acc<T>::type* b, T* y, i64 channels, u32 inner_v, \
                                                 i64 total_v, int narrow, int act) {                     \
        bn_apply_impl<T, 1>(x, mean, rstd, w, b, y, channels, inner_v, total_v, narrow, act);            \
    }                                                                                                    \
    RB_KERNEL(bn_apply_v_##name)(const T* x, const Acc<T>::type* mean,                   \
                                                 const Acc<T>::type* rstd, const Acc<T>::type* w,        \
                                                 const Acc<T>::type* b, T* y, i64 channels, u32 inner_v, \
                                                 i64 total_v, int narrow, int act) {                     \
        bn_apply_impl<T, (int)(16 / sizeof(T))>(x, mean, rstd, w, b, y, channels, inner_v, total_v,     \
                                                narrow, act);                                            \
    }                                                                                                    \
    RB_KERNEL(bn_grad_input_s_##name)(const T* x, const T* g, BnGradArgs<Acc<T>::type> ga, \
                                                      const Acc<T>::type* k, T* dx, i64 channels,        \
                                                      u32 inner_v, i64 total_v, int narrow) {            \
        bn_grad_input_impl<T, 1>(x, g, ga, k, dx, channels, inner_v, total_v, narrow);                   \
    }                                                                                                    \
    RB_KERNEL(bn_grad_input_v_##name)(const T* x, const T* g, BnGradArgs<Acc<T>::type> ga, \
                                                      const Acc<T>::type* k, T* dx, i64 channels,        \
                                                      u32 inner_v, i64 total_v, int narrow) {            \
        bn_grad_input_impl<T, (int)(16 / sizeof(T))>(x, g, ga, k, dx, channels, inner_v, total_v,       \
                                                     narrow);                                            \
    }
RB_FOR_FLOAT_TYPES(RB_BN_ELEMENTWISE)

// One thread per channel; pa/pb are null when there are no partials (chunks 0). `batch_stats`:
// the forward normalized with this batch's statistics (training), so the gradient also flows
// through the mean and the variance.
template <class C>
__device__ void bn_grad_finalize_impl(const C* pa, const C* pb, i64 chunks, i64 channels,
                                      const C* rstd, const C* w, double count, int batch_stats,
                                      C* dweight, C* dbias, C* k) {
    const i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double sg = 0.0, sgx = 0.0;
    for (i64 i = 0; i < chunks; ++i) {
        sg += (double)pa[c * chunks + i];
        sgx += (double)pb[c * chunks + i];
    }
    const double r = (double)rstd[c];
    if (dweight) dweight[c] = (C)(sgx * r);
    if (dbias) dbias[c] = (C)sg;
    if (k) {
        const double k0 = (w ? (double)w[c] : 1.0) * r;
        k[c] = (C)k0;
        k[channels + c] = batch_stats ? (C)(-k0 * r * r * sgx / count) : (C)0;
        k[2 * channels + c] = batch_stats ? (C)(-k0 * sg / count) : (C)0;
    }
}
RB_KERNEL(bn_grad_finalize_f32)(const f32* pa, const f32* pb, i64 chunks, i64 channels,
                                                const f32* rstd, const f32* w, double count,
                                                int batch_stats, f32* dweight, f32* dbias, f32* k) {
    bn_grad_finalize_impl(pa, pb, chunks, channels, rstd, w, count, batch_stats, dweight, dbias, k);
}
RB_KERNEL(bn_grad_finalize_f64)(const f64* pa, const f64* pb, i64 chunks, i64 channels,
                                                const f64* rstd, const f64* w, double count,
                                                int batch_stats, f64* dweight, f64* dbias, f64* k) {
    bn_grad_finalize_impl(pa, pb, chunks, channels, rstd, w, count, batch_stats, dweight, dbias, k);
}
