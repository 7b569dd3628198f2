// LayerNorm and RMSNorm over contiguous rows of `cols` elements (the trailing dims the weight
// covers, flattened). Statistics and arithmetic run in Acc<T> (float, double for f64); the weight
// and bias arrive already in Acc<T>, so one kernel serves a bf16 input with an f32 weight.
//
// Two families of kernels:
// - register kernels (norm_fwd_<s|v><NV>_<T>, norm_bwd_<rms|ln>_<s|v><NV>_<T>): one block per
//   row, each thread keeps its NV loads of the row in registers, so x (and g) are read from DRAM
//   once. `v` loads 16 bytes at a time (the host checks alignment and cols % VEC), `s` one
//   element. The backward also accumulates the weight/bias gradient of a fixed chunk of rows
//   in registers and writes one row of the [chunks, cols] partial buffers, so it does not
//   re-read x and g.
// - loop kernels (norm_fwd_<T>, norm_bwd_dx_<T>, norm_bwd_cols_<T>) for rows too long for
//   registers: they re-read the row from memory.
// dweight/dbias are always a two-step column reduction with a fixed order (per-chunk partials,
// then a fixed-order sum over chunks), no atomics, so a run repeats bit for bit.

// ----- 16-byte and scalar element access (Word16 is in common.cuh) -----

// VEC elements of T at a time: one 16-byte word (VEC = 16 / sizeof(T)) or one element (VEC = 1).
// `Raw` is what a thread keeps in registers between passes.
template <class T, int VEC> struct Io {
    typedef uint4 Raw;
    typedef typename Acc<T>::type C;
    static __device__ __forceinline__ Raw load(const T* p) { return *reinterpret_cast<const uint4*>(p); }
    static __device__ __forceinline__ void unpack(const Raw& r, C* o) { Word16<T>::unpack(r, o); }
    static __device__ __forceinline__ Raw pack(const C* v) { return Word16<T>::pack(v); }
    static __device__ __forceinline__ void store(T* p, const C* v) { *reinterpret_cast<uint4*>(p) = pack(v); }
};
template <class T> struct Io<T, 1> {
    typedef T Raw;
    typedef typename Acc<T>::type C;
    static __device__ __forceinline__ Raw load(const T* p) { return *p; }
    static __device__ __forceinline__ void unpack(const Raw& r, C* o) { o[0] = to_acc(r); }
    static __device__ __forceinline__ Raw pack(const C* v) { return from_acc<T>(v[0]); }
    static __device__ __forceinline__ void store(T* p, const C* v) { *p = pack(v); }
};

// Four elements of a 16-bit type: one 8-byte word. An F32 row moves four elements a load, so
// its BF16/F16 output (the forward cast for the products) or gradient (the backward's input
// from them) moves four at a time beside it.
template <class T> struct Io4Of16Bit {
    typedef uint2 Raw;
    typedef float C;
    static __device__ __forceinline__ Raw load(const T* p) { return *reinterpret_cast<const uint2*>(p); }
    static __device__ __forceinline__ void unpack(const Raw& r, C* o) {
        o[0] = to_acc(from_bits16<T>((unsigned short)(r.x & 0xffffu)));
        o[1] = to_acc(from_bits16<T>((unsigned short)(r.x >> 16)));
        o[2] = to_acc(from_bits16<T>((unsigned short)(r.y & 0xffffu)));
        o[3] = to_acc(from_bits16<T>((unsigned short)(r.y >> 16)));
    }
    static __device__ __forceinline__ Raw pack(const C* v) {
        return make_uint2(Word16<T>::lane(v[0], v[1]), Word16<T>::lane(v[2], v[3]));
    }
    static __device__ __forceinline__ void store(T* p, const C* v) { *reinterpret_cast<uint2*>(p) = pack(v); }
};
template <> struct Io<bf16, 4> : Io4Of16Bit<bf16> {};
template <> struct Io<f16, 4> : Io4Of16Bit<f16> {};

// N values of the compute type (weights, partial sums): 16-byte accesses when N > 1 (the host
// guarantees the alignment then), one element otherwise.
template <class C, int N> __device__ __forceinline__ void acc_load(const C* p, C* o) {
    if constexpr (N == 1) {
        o[0] = *p;
    } else {
#pragma unroll
        for (int i = 0; i < (int)(N * sizeof(C) / 16); ++i) {
            uint4 u = reinterpret_cast<const uint4*>(p)[i];
            Word16<C>::unpack(u, o + i * (int)(16 / sizeof(C)));
        }
    }
}
template <class C, int N> __device__ __forceinline__ void acc_store(C* p, const C* v) {
    if constexpr (N == 1) {
        *p = v[0];
    } else {
#pragma unroll
        for (int i = 0; i < (int)(N * sizeof(C) / 16); ++i)
            reinterpret_cast<uint4*>(p)[i] = Word16<C>::pack(v + i * (int)(16 / sizeof(C)));
    }
}

// a + b rounded once, never contracted with the product that made a: the sum equals a
// separate add of the stored values bit for bit.
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// Sums of two values over the block in one round; every thread gets both. `scratch` holds 64.
template <class T> __device__ __forceinline__ void block_sum2(T& a, T& b, T* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    __syncthreads();
    if (lane == 0) {
        scratch[warp] = a;
        scratch[32 + warp] = b;
    }
    __syncthreads();
    a = warp_sum(lane < warps ? scratch[lane] : (T)0);
    b = warp_sum(lane < warps ? scratch[32 + lane] : (T)0);
}

// ----- register kernels -----

// Forward, one row per block (grid-stride over rows). Thread t holds loads t, t + blockDim, ...
// (NV of them) of the row; the block covers the row: blockDim * NV * VEC >= cols.
// With `res` (rows of the output's dtype: a layer's output for the residual stream), the row
// normed is x + res, which is also written to `sum` in x's dtype: the residual add and the
// next norm in one pass over the stream.
template <class T, class O, int VEC, int NV>
__device__ void norm_fwd_reg_impl(const T* x, const O* res, const typename Acc<T>::type* w,
                                  const typename Acc<T>::type* b, O* y, T* sum, typename Acc<T>::type* mean_out,
                                  typename Acc<T>::type* rstd_out, i64 rows, i64 cols, double eps, int rms) {
    typedef typename Acc<T>::type C;
    typedef Io<T, VEC> IO;
    typedef Io<O, VEC> IOR;
    __shared__ C scratch[32];
    const int nvec = (int)(cols / VEC);
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * cols;
        O* yr = y + r * cols;
        typename IO::Raw raw[NV];
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            int v = threadIdx.x + k * blockDim.x;
            if (v < nvec) raw[k] = IO::load(xr + (i64)v * VEC);
        }
        if (res) {
            typename IOR::Raw ra[NV];
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                int v = threadIdx.x + k * blockDim.x;
                if (v < nvec) ra[k] = IOR::load(res + r * cols + (i64)v * VEC);
            }
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                int v = threadIdx.x + k * blockDim.x;
                if (v < nvec) {
                    C e[VEC], a[VEC];
                    IO::unpack(raw[k], e);
                    IOR::unpack(ra[k], a);
#pragma unroll
                    for (int i = 0; i < VEC; ++i) e[i] += a[i];
                    // Rounded to x's dtype, as a separate add would leave the stream.
                    raw[k] = IO::pack(e);
                    IO::store(sum + r * cols + (i64)v * VEC, e);
                }
            }
        }
        C mean = (C)0;
        if (!rms) {
            C s = (C)0;
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                if (threadIdx.x + k * blockDim.x < nvec) {
                    C e[VEC];
                    IO::unpack(raw[k], e);
#pragma unroll
                    for (int i = 0; i < VEC; ++i) s += e[i];
                }
            }
            mean = block_sum(s, scratch) / (C)cols;
        }
        // Two passes (mean, then squared deviations): stable where E[x^2] - E[x]^2 is not.
        C q = (C)0;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (threadIdx.x + k * blockDim.x < nvec) {
                C e[VEC];
                IO::unpack(raw[k], e);
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    C d = e[i] - mean;
                    q += d * d;
                }
            }
        }
        q = block_sum(q, scratch);
        C rstd = (C)1 / sqrt(q / (C)cols + (C)eps);
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[r] = mean;
            rstd_out[r] = rstd;
        }
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            int v = threadIdx.x + k * blockDim.x;
            if (v < nvec) {
                C e[VEC], wv[VEC], bv[VEC];
                IO::unpack(raw[k], e);
                if (w) acc_load<C, VEC>(w + (i64)v * VEC, wv);
                if (b) acc_load<C, VEC>(b + (i64)v * VEC, bv);
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    C o = (e[i] - mean) * rstd;
                    if (w) o = o * wv[i];
                    if (b) o = o + bv[i];
                    e[i] = o;
                }
                Io<O, VEC>::store(yr + (i64)v * VEC, e);
            }
        }
    }
}
#define RB_NORM_FWD_REG_TO(name, T, oname, O, tag, VEC, NV)                                                 \
    RB_BOUNDED_KERNEL(norm_fwd_##tag##NV##_##name##oname, 512)(const T* x, const O* res, const Acc<T>::type* w,                 \
                                           const Acc<T>::type* b, O* y, T* sum, Acc<T>::type* mean,         \
                                           Acc<T>::type* rstd, i64 rows, i64 cols, double eps, int rms) {   \
        norm_fwd_reg_impl<T, O, VEC, NV>(x, res, w, b, y, sum, mean, rstd, rows, cols, eps, rms);           \
    }
#define RB_NORM_FWD_REG(name, T, tag, VEC, NV) RB_NORM_FWD_REG_TO(name, T, , T, tag, VEC, NV)
#define RB_NORM_FWD_REGS(name, T)                            \
    RB_NORM_FWD_REG(name, T, s, 1, 1)                        \
    RB_NORM_FWD_REG(name, T, s, 1, 2)                        \
    RB_NORM_FWD_REG(name, T, s, 1, 4)                        \
    RB_NORM_FWD_REG(name, T, s, 1, 8)                        \
    RB_NORM_FWD_REG(name, T, v, (int)(16 / sizeof(T)), 1)   \
    RB_NORM_FWD_REG(name, T, v, (int)(16 / sizeof(T)), 2)   \
    RB_NORM_FWD_REG(name, T, v, (int)(16 / sizeof(T)), 4)   \
    RB_NORM_FWD_REG(name, T, v, (int)(16 / sizeof(T)), 8)
RB_FOR_FLOAT_TYPES(RB_NORM_FWD_REGS)
// F32 rows written as BF16/F16: the norm and the cast for the products in one pass
// (norm_fwd_v4_f32_to_bf16, ...).
#define RB_NORM_FWD_REGS_TO(oname, O)                        \
    RB_NORM_FWD_REG_TO(f32, f32, _to_##oname, O, s, 1, 1)    \
    RB_NORM_FWD_REG_TO(f32, f32, _to_##oname, O, s, 1, 2)    \
    RB_NORM_FWD_REG_TO(f32, f32, _to_##oname, O, s, 1, 4)    \
    RB_NORM_FWD_REG_TO(f32, f32, _to_##oname, O, s, 1, 8)    \
    RB_NORM_FWD_REG_TO(f32, f32, _to_##oname, O, v, 4, 1)    \
    RB_NORM_FWD_REG_TO(f32, f32, _to_##oname, O, v, 4, 2)    \
    RB_NORM_FWD_REG_TO(f32, f32, _to_##oname, O, v, 4, 4)    \
    RB_NORM_FWD_REG_TO(f32, f32, _to_##oname, O, v, 4, 8)
RB_NORM_FWD_REGS_TO(bf16, bf16)
RB_NORM_FWD_REGS_TO(f16, f16)

// Backward over the chunk of rows [blockIdx.x * rpc, ...), one row at a time, same layout as
// the forward. dx per row (when dx is non-null), with xhat = (x - mean) * rstd and gw = g * w:
//   LayerNorm: dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
//   RMSNorm:   dx = rstd * (gw - xhat * mean(gw * xhat))
// and, when pw / pb are non-null, the chunk's column sums of g * xhat and g (rows in order)
// into row blockIdx.x of the [chunks, cols] partial buffers. LN selects LayerNorm at compile
// time, so RMSNorm keeps no bias accumulators.
// When the forward added a residual (x = stream + res), `dsum` (non-null) is the gradient
// that reached x from its other uses and is added to dx, and `dres` (non-null) receives dx
// again in the gradient's dtype: the residual's own gradient.
template <class T, class G, int VEC, int NV, bool LN>
__device__ void norm_bwd_reg_impl(const T* x, const G* g, const typename Acc<T>::type* w,
                                  const typename Acc<T>::type* mean, const typename Acc<T>::type* rstd, T* dx,
                                  const T* dsum, G* dres, typename Acc<T>::type* pw, typename Acc<T>::type* pb,
                                  i64 rows, i64 cols, i64 rpc) {
    typedef typename Acc<T>::type C;
    typedef Io<T, VEC> IO;
    typedef Io<G, VEC> IOG;
    __shared__ C scratch[64];
    const int nvec = (int)(cols / VEC);
    const bool sums = pw || (LN && pb);
    C aw[NV][VEC], ab[LN ? NV : 1][VEC];
#pragma unroll
    for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            aw[k][i] = (C)0;
            ab[LN ? k : 0][i] = (C)0;
        }
    i64 r0 = (i64)blockIdx.x * rpc;
    i64 r1 = r0 + rpc < rows ? r0 + rpc : rows;
    for (i64 r = r0; r < r1; ++r) {
        const T* xr = x + r * cols;
        const G* gr = g + r * cols;
        typename IO::Raw rx[NV], rd[NV];
        typename IOG::Raw rg[NV];
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            int v = threadIdx.x + k * blockDim.x;
            if (v < nvec) {
                rx[k] = IO::load(xr + (i64)v * VEC);
                rg[k] = IOG::load(gr + (i64)v * VEC);
                if (dsum) rd[k] = IO::load(dsum + r * cols + (i64)v * VEC);
            }
        }
        C mu = LN ? mean[r] : (C)0;
        C rs = rstd[r];
        if (dx) {
            C sg = (C)0, sgx = (C)0;
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                int v = threadIdx.x + k * blockDim.x;
                if (v < nvec) {
                    C e[VEC], gv[VEC], wv[VEC];
                    IO::unpack(rx[k], e);
                    IOG::unpack(rg[k], gv);
                    if (w) acc_load<C, VEC>(w + (i64)v * VEC, wv);
#pragma unroll
                    for (int i = 0; i < VEC; ++i) {
                        C xh = (e[i] - mu) * rs;
                        C gw = w ? gv[i] * wv[i] : gv[i];
                        sg += gw;
                        sgx += gw * xh;
                    }
                }
            }
            C mg = (C)0, mgx;
            if (LN) {
                block_sum2(sg, sgx, scratch);
                mg = sg / (C)cols;
            } else {
                sgx = block_sum(sgx, scratch);
            }
            mgx = sgx / (C)cols;
            T* dr = dx + r * cols;
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                int v = threadIdx.x + k * blockDim.x;
                if (v < nvec) {
                    C e[VEC], gv[VEC], wv[VEC];
                    IO::unpack(rx[k], e);
                    IOG::unpack(rg[k], gv);
                    if (w) acc_load<C, VEC>(w + (i64)v * VEC, wv);
#pragma unroll
                    for (int i = 0; i < VEC; ++i) {
                        C xh = (e[i] - mu) * rs;
                        C gw = w ? gv[i] * wv[i] : gv[i];
                        e[i] = rs * (gw - mg - xh * mgx);
                    }
                    if (dsum) {
                        C ds[VEC];
                        IO::unpack(rd[k], ds);
#pragma unroll
                        for (int i = 0; i < VEC; ++i) e[i] = add_rn(e[i], ds[i]);
                    }
                    IO::store(dr + (i64)v * VEC, e);
                    if (dres) IOG::store(dres + r * cols + (i64)v * VEC, e);
                }
            }
        }
        if (sums) {
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                if (threadIdx.x + k * blockDim.x < nvec) {
                    C e[VEC], gv[VEC];
                    IO::unpack(rx[k], e);
                    IOG::unpack(rg[k], gv);
#pragma unroll
                    for (int i = 0; i < VEC; ++i) {
                        aw[k][i] += gv[i] * ((e[i] - mu) * rs);
                        if (LN) ab[LN ? k : 0][i] += gv[i];
                    }
                }
            }
        }
    }
    if (!sums) return;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        int v = threadIdx.x + k * blockDim.x;
        if (v < nvec) {
            i64 at = (i64)blockIdx.x * cols + (i64)v * VEC;
            if (pw) acc_store<C, VEC>(pw + at, aw[k]);
            if (LN && pb) acc_store<C, VEC>(pb + at, ab[LN ? k : 0]);
        }
    }
}
#define RB_NORM_BWD_REG_G(name, T, gname, G, kind, LN, tag, VEC, NV)                                        \
    RB_BOUNDED_KERNEL(norm_bwd_##kind##_##tag##NV##_##name##gname, 512)(           \
        const T* x, const G* g, const Acc<T>::type* w, const Acc<T>::type* mean, const Acc<T>::type* rstd, T* dx, \
        const T* dsum, G* dres, Acc<T>::type* pw, Acc<T>::type* pb, i64 rows, i64 cols, i64 rpc) {          \
        norm_bwd_reg_impl<T, G, VEC, NV, LN>(x, g, w, mean, rstd, dx, dsum, dres, pw, pb, rows, cols, rpc); \
    }
#define RB_NORM_BWD_REG(name, T, kind, LN, tag, VEC, NV) RB_NORM_BWD_REG_G(name, T, , T, kind, LN, tag, VEC, NV)
#define RB_NORM_BWD_REGS_OF(name, T, kind, LN)                              \
    RB_NORM_BWD_REG(name, T, kind, LN, s, 1, 1)                             \
    RB_NORM_BWD_REG(name, T, kind, LN, s, 1, 2)                             \
    RB_NORM_BWD_REG(name, T, kind, LN, s, 1, 4)                             \
    RB_NORM_BWD_REG(name, T, kind, LN, v, (int)(16 / sizeof(T)), 1)        \
    RB_NORM_BWD_REG(name, T, kind, LN, v, (int)(16 / sizeof(T)), 2)        \
    RB_NORM_BWD_REG(name, T, kind, LN, v, (int)(16 / sizeof(T)), 4)
#define RB_NORM_BWD_REGS(name, T) RB_NORM_BWD_REGS_OF(name, T, rms, false) RB_NORM_BWD_REGS_OF(name, T, ln, true)
RB_FOR_FLOAT_TYPES(RB_NORM_BWD_REGS)
// F32 rows whose output gradient arrives in BF16/F16 from the products: the backward reads it
// as it is instead of after a cast (norm_bwd_rms_v4_f32_g_bf16, ...).
#define RB_NORM_BWD_REGS_G_OF(gname, G, kind, LN)                          \
    RB_NORM_BWD_REG_G(f32, f32, _g_##gname, G, kind, LN, s, 1, 1)          \
    RB_NORM_BWD_REG_G(f32, f32, _g_##gname, G, kind, LN, s, 1, 2)          \
    RB_NORM_BWD_REG_G(f32, f32, _g_##gname, G, kind, LN, s, 1, 4)          \
    RB_NORM_BWD_REG_G(f32, f32, _g_##gname, G, kind, LN, v, 4, 1)          \
    RB_NORM_BWD_REG_G(f32, f32, _g_##gname, G, kind, LN, v, 4, 2)          \
    RB_NORM_BWD_REG_G(f32, f32, _g_##gname, G, kind, LN, v, 4, 4)
#define RB_NORM_BWD_REGS_G(gname, G) RB_NORM_BWD_REGS_G_OF(gname, G, rms, false) RB_NORM_BWD_REGS_G_OF(gname, G, ln, true)
RB_NORM_BWD_REGS_G(bf16, bf16)
RB_NORM_BWD_REGS_G(f16, f16)

// ----- loop kernels, for rows too long to keep in registers -----

// block_sum syncs the block, so each row's branches are uniform across the block.
template <class T>
__device__ void norm_fwd_impl(const T* x, const typename Acc<T>::type* w, const typename Acc<T>::type* b, T* y,
                              typename Acc<T>::type* mean_out, typename Acc<T>::type* rstd_out, i64 rows,
                              i64 cols, double eps, int rms) {
    typedef typename Acc<T>::type C;
    __shared__ C scratch[32];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        C mean = (C)0;
        if (!rms) {
            C s = (C)0;
            for (i64 j = threadIdx.x; j < cols; j += blockDim.x) s += to_acc(xr[j]);
            mean = block_sum(s, scratch) / (C)cols;
        }
        C q = (C)0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C d = to_acc(xr[j]) - mean;
            q += d * d;
        }
        q = block_sum(q, scratch);
        C rstd = (C)1 / sqrt(q / (C)cols + (C)eps);
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[r] = mean;
            rstd_out[r] = rstd;
        }
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C v = (to_acc(xr[j]) - mean) * rstd;
            if (w) v = v * w[j];
            if (b) v = v + b[j];
            yr[j] = from_acc<T>(v);
        }
    }
}
#define RB_NORM_FWD(name, T)                                                                          \
    RB_KERNEL(norm_fwd_##name)(const T* x, const Acc<T>::type* w, const Acc<T>::type* b, T* y, \
                                               Acc<T>::type* mean, Acc<T>::type* rstd, i64 rows, i64 cols,   \
                                               double eps, int rms) {                                 \
        norm_fwd_impl<T>(x, w, b, y, mean, rstd, rows, cols, eps, rms);                               \
    }
RB_FOR_FLOAT_TYPES(RB_NORM_FWD)

template <class T>
__device__ void norm_bwd_dx_impl(const T* x, const T* g, const typename Acc<T>::type* w,
                                 const typename Acc<T>::type* mean, const typename Acc<T>::type* rstd, T* dx,
                                 i64 rows, i64 cols, int rms) {
    typedef typename Acc<T>::type C;
    __shared__ C scratch[32];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * cols;
        const T* gr = g + r * cols;
        T* dr = dx + r * cols;
        C mu = rms ? (C)0 : mean[r];
        C rs = rstd[r];
        C sg = (C)0, sgx = (C)0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C xh = (to_acc(xr[j]) - mu) * rs;
            C gw = to_acc(gr[j]);
            if (w) gw = gw * w[j];
            sg += gw;
            sgx += gw * xh;
        }
        C mg = rms ? (C)0 : block_sum(sg, scratch) / (C)cols;
        C mgx = block_sum(sgx, scratch) / (C)cols;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C xh = (to_acc(xr[j]) - mu) * rs;
            C gw = to_acc(gr[j]);
            if (w) gw = gw * w[j];
            dr[j] = from_acc<T>(rs * (gw - mg - xh * mgx));
        }
    }
}
#define RB_NORM_BWD_DX(name, T)                                                                        \
    RB_KERNEL(norm_bwd_dx_##name)(const T* x, const T* g, const Acc<T>::type* w,       \
                                                  const Acc<T>::type* mean, const Acc<T>::type* rstd, T* dx, \
                                                  i64 rows, i64 cols, int rms) {                       \
        norm_bwd_dx_impl<T>(x, g, w, mean, rstd, dx, rows, cols, rms);                                 \
    }
RB_FOR_FLOAT_TYPES(RB_NORM_BWD_DX)

// Partial column sums of g * xhat (for dweight) and g (for dbias) over one chunk of rows.
// Block of 256 threads = 32 columns x 8 row lanes; grid = (column tiles, row chunks). Writes
// row `blockIdx.y` of the [chunks, cols] partial buffers. Either output may be null.
#define NORM_COL_LANES 8
template <class T>
__device__ void norm_bwd_cols_impl(const T* x, const T* g, const typename Acc<T>::type* mean,
                                   const typename Acc<T>::type* rstd, typename Acc<T>::type* pw,
                                   typename Acc<T>::type* pb, i64 rows, i64 cols, i64 rows_per_chunk, int rms) {
    typedef typename Acc<T>::type C;
    __shared__ C sw[NORM_COL_LANES][33];
    __shared__ C sb[NORM_COL_LANES][33];
    int lane = threadIdx.x & 31, ty = threadIdx.x >> 5;
    i64 col = (i64)blockIdx.x * 32 + lane;
    i64 r0 = (i64)blockIdx.y * rows_per_chunk;
    i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    C aw = (C)0, ab = (C)0;
    if (col < cols) {
        for (i64 r = r0 + ty; r < r1; r += NORM_COL_LANES) {
            C gv = to_acc(g[r * cols + col]);
            C xh = (to_acc(x[r * cols + col]) - (rms ? (C)0 : mean[r])) * rstd[r];
            aw += gv * xh;
            ab += gv;
        }
    }
    sw[ty][lane] = aw;
    sb[ty][lane] = ab;
    __syncthreads();
    if (ty == 0 && col < cols) {
        C tw = (C)0, tb = (C)0;
#pragma unroll
        for (int k = 0; k < NORM_COL_LANES; ++k) {
            tw += sw[k][lane];
            tb += sb[k][lane];
        }
        if (pw) pw[(i64)blockIdx.y * cols + col] = tw;
        if (pb) pb[(i64)blockIdx.y * cols + col] = tb;
    }
}
#define RB_NORM_BWD_COLS(name, T)                                                                       \
    RB_KERNEL(norm_bwd_cols_##name)(const T* x, const T* g, const Acc<T>::type* mean,    \
                                                    const Acc<T>::type* rstd, Acc<T>::type* pw,         \
                                                    Acc<T>::type* pb, i64 rows, i64 cols, i64 rpc, int rms) { \
        norm_bwd_cols_impl<T>(x, g, mean, rstd, pw, pb, rows, cols, rpc, rms);                          \
    }
RB_FOR_FLOAT_TYPES(RB_NORM_BWD_COLS)

// out[y, j] = sum over the chunks k of split y (blockIdx.y of gridDim.y, consecutive ranges) of
// partial[k, j], in a fixed order. Block of 256 threads = 32 columns x 8 chunk lanes (coalesced
// across columns); grid = column tiles x splits. Lane t sums its split's chunks t, t + 8, ... in
// order, then lane sums are added in lane order. Many chunks go through twice: once in splits
// (so the device has more than a block per 32 columns), then the splits' sums in one.
template <class C>
__device__ void norm_col_sum_impl(const C* partial, C* out, i64 chunks, i64 cols) {
    __shared__ C s[NORM_COL_LANES][33];
    int lane = threadIdx.x & 31, ty = threadIdx.x >> 5;
    i64 col = (i64)blockIdx.x * 32 + lane;
    const i64 per = (chunks + gridDim.y - 1) / gridDim.y;
    const i64 k0 = (i64)blockIdx.y * per, k1 = k0 + per < chunks ? k0 + per : chunks;
    C a = (C)0;
    if (col < cols) {
#pragma unroll 4
        for (i64 k = k0 + ty; k < k1; k += NORM_COL_LANES) a += partial[k * cols + col];
    }
    s[ty][lane] = a;
    __syncthreads();
    if (ty == 0 && col < cols) {
        C t = (C)0;
#pragma unroll
        for (int k = 0; k < NORM_COL_LANES; ++k) t += s[k][lane];
        out[(i64)blockIdx.y * cols + col] = t;
    }
}
RB_KERNEL(norm_col_sum_f32)(const f32* p, f32* out, i64 chunks, i64 cols) { norm_col_sum_impl(p, out, chunks, cols); }
RB_KERNEL(norm_col_sum_f64)(const f64* p, f64* out, i64 chunks, i64 cols) { norm_col_sum_impl(p, out, chunks, cols); }
