// Fused cross-entropy over contiguous logits [rows, cols] with int64 targets [rows], with
// ignore_index and label smoothing s. Computed in Acc<T> (float; double for f64 logits), so
// bf16 logits give an FP32 loss.
//
//   loss[r] = lse[r] - (1 - s) * x[r, t] - s * mean_c(x[r, c])       (0 for an ignored row)
//   dx[r, c] = g[r] * (softmax[r, c] - (1 - s) * [c == t] - s / cols)  (0 for an ignored row)
//
// A target outside [0, cols) that is not ignore_index sets the device error word to 5
// (cross_entropy) and its row is treated as ignored.

#define RB_CE_FLAG 5u

// (max, sum of exp(x - max)) pairs merged: the online-softmax reduction, so the forward reads
// each row once.
// A NaN logit leaves s NaN on its side (m stays -inf there), and the NaN carries through: with
// top finite, exp(-inf - top) = 0 and NaN * 0 is NaN.
template <class C> __device__ __forceinline__ void lse_merge(C& m, C& s, C m2, C s2) {
    const C top = m > m2 ? m : m2;
    if (top == -INFINITY) {
        s += s2;
        return;
    }
    s = s * exp(m - top) + s2 * exp(m2 - top);
    m = top;
}

template <class C> __device__ __forceinline__ void block_lse(C& m, C& s, C* sm, C* ss) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) lse_merge(m, s, __shfl_xor_sync(0xffffffff, m, o), __shfl_xor_sync(0xffffffff, s, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    m = lane < warps ? sm[lane] : (C)-INFINITY;
    s = lane < warps ? ss[lane] : (C)0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) lse_merge(m, s, __shfl_xor_sync(0xffffffff, m, o), __shfl_xor_sync(0xffffffff, s, o));
}

// One block per row, one pass over it. Writes the row loss, its logsumexp (kept for the
// backward) and whether it counts toward the mean (1 or 0).
template <class T>
__device__ void ce_fwd_impl(const T* x, const i64* t, typename Acc<T>::type* loss, typename Acc<T>::type* lse_out,
                            typename Acc<T>::type* valid, i64 rows, i64 cols, i64 ignore, double smoothing,
                            u32* err) {
    typedef typename Acc<T>::type C;
    __shared__ C scratch[32], scratch_s[32];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 target = t[r];
        bool ignored = target == ignore;
        bool bad = !ignored && (target < 0 || target >= cols);
        // The branch depends only on the row, so the whole block takes it together.
        if (ignored || bad) {
            if (threadIdx.x == 0) {
                if (bad) atomicExch(err, RB_CE_FLAG);
                loss[r] = (C)0;
                lse_out[r] = (C)0;
                valid[r] = (C)0;
            }
            continue;
        }
        const T* xr = x + r * cols;
        C m = -INFINITY, s = (C)0, sx = (C)0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C v = to_acc(xr[j]);
            sx += v;
            if (v > m) {
                s = s * exp(m - v) + (C)1;
                m = v;
            } else if (v != -INFINITY) {
                s += exp(v - m);
            }
        }
        block_lse(m, s, scratch, scratch_s);
        sx = block_sum(sx, scratch);
        if (threadIdx.x == 0) {
            C lse = m + log(s);
            C l = lse - ((C)1 - (C)smoothing) * to_acc(xr[target]);
            // Only with smoothing: without it a -inf logit elsewhere must not turn the loss NaN.
            if (smoothing > 0.0) l = l - (C)smoothing * sx / (C)cols;
            loss[r] = l;
            lse_out[r] = lse;
            valid[r] = (C)1;
        }
    }
}
#define RB_CE_FWD(name, T)                                                                              \
    RB_KERNEL(ce_fwd_##name)(const T* x, const i64* t, Acc<T>::type* loss, Acc<T>::type* lse, \
                                             Acc<T>::type* valid, i64 rows, i64 cols, i64 ignore,        \
                                             double smoothing, u32* err) {                               \
        ce_fwd_impl<T>(x, t, loss, lse, valid, rows, cols, ignore, smoothing, err);                      \
    }
RB_FOR_FLOAT_TYPES(RB_CE_FWD)

// One block per row (the row's target, logsumexp and gradient read once); `g` is the gradient
// of each row's loss.
template <class T>
__device__ void ce_bwd_impl(const T* x, const i64* t, const typename Acc<T>::type* lse,
                            const typename Acc<T>::type* g, T* dx, i64 rows, i64 cols, i64 ignore,
                            double smoothing) {
    typedef typename Acc<T>::type C;
    const C base = (C)smoothing / (C)cols, hit = (C)1 - (C)smoothing;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 target = t[r];
        const bool counted = target != ignore && target >= 0 && target < cols;
        const C l = lse[r], gr = g[r];
        const T* xr = x + r * cols;
        T* dr = dx + r * cols;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C d = (C)0;
            if (counted) d = gr * (exp(to_acc(xr[j]) - l) - base - (j == target ? hit : (C)0));
            dr[j] = from_acc<T>(d);
        }
    }
}
#define RB_CE_BWD(name, T)                                                                               \
    RB_KERNEL(ce_bwd_##name)(const T* x, const i64* t, const Acc<T>::type* lse,          \
                                             const Acc<T>::type* g, T* dx, i64 rows, i64 cols, i64 ignore, \
                                             double smoothing) {                                          \
        ce_bwd_impl<T>(x, t, lse, g, dx, rows, cols, ignore, smoothing);                                  \
    }
RB_FOR_FLOAT_TYPES(RB_CE_BWD)

// ----- the loss and its gradient from one kernel -----
// The products of a language model's head write logits (F32, or BF16/F16 as an autocast head
// leaves them) chunk by chunk; this kernel takes each chunk's loss and, when `dx` is given, its
// gradient for an upstream gradient of 1 per counted row (the mean's scale is applied later). A
// block takes a row at a time:
// - pass 1 streams the row in words of four logits (16 bytes in F32, 8 in half precision), with
//   F32 arithmetic throughout: the online logsumexp (exp2 of log2e-scaled logits), the sum for
//   smoothing, and, from thread 0, the target's logit;
// - pass 2 reads the row again and writes the gradient. The host launches one block per SM, so
//   the rows in flight (132 rows of 50,304 logits: 27 MB) may still be in L2, and pass 2 reads
//   them as a last use (`__ldcs`) and streams the gradient out (`__stcs`) past L2.
// Holding the row in shared memory between the passes instead (201 KB, one block an SM) was
// measured no faster on the H200 (docs/baseline.md, 2026-12-04, second session).
// The forward alone (dx null) is the cross_entropy op's forward for F32 logits.
#define RB_LOG2E 1.4426950408889634f

// exp(v - m) for one logit against the running max; a -inf logit adds nothing and a NaN
// carries through.
__device__ __forceinline__ float ce_term(float v, float m) {
    return v == -INFINITY ? 0.f : exp2f((v - m) * RB_LOG2E);
}

__device__ __forceinline__ void ce_take4(float& m, float& s, float& sx, float4 v) {
    sx += (v.x + v.y) + (v.z + v.w);
    const float top = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
    if (top > m) {
        s *= exp2f((m - top) * RB_LOG2E);
        m = top;
    }
    s += (ce_term(v.x, m) + ce_term(v.y, m)) + (ce_term(v.z, m) + ce_term(v.w, m));
}

__device__ __forceinline__ void ce_take1(float& m, float& s, float& sx, float v) {
    sx += v;
    if (v > m) {
        s *= exp2f((m - v) * RB_LOG2E);
        m = v;
    }
    s += ce_term(v, m);
}

// The gradient of one logit v at column c: softmax - smoothing's share - the target's hit.
// `shift` is the row's logsumexp times log2e.
__device__ __forceinline__ float ce_grad(float v, i64 c, i64 target, float shift, float base, float hit) {
    return exp2f(fmaf(v, RB_LOG2E, -shift)) - base - (c == target ? hit : 0.f);
}

// The gradient of four logits at column c (a multiple of 4), stored as one word.
template <class TO> struct CeStore4;
template <> struct CeStore4<f32> {
    static __device__ __forceinline__ void put(f32* p, float4 d) { __stcs(reinterpret_cast<float4*>(p), d); }
};
template <class T> struct CeStore4Half {
    static __device__ __forceinline__ void put(T* p, float4 d) {
        const uint2 w = make_uint2(Word16<T>::lane(d.x, d.y), Word16<T>::lane(d.z, d.w));
        __stcs(reinterpret_cast<uint2*>(p), w);
    }
};
template <> struct CeStore4<bf16> : CeStore4Half<bf16> {};
template <> struct CeStore4<f16> : CeStore4Half<f16> {};

template <class TO>
__device__ __forceinline__ void ce_grad4(TO* dr, float4 v, i64 c, i64 target, float shift, float base, float hit) {
    const float4 d = make_float4(ce_grad(v.x, c, target, shift, base, hit), ce_grad(v.y, c + 1, target, shift, base, hit),
                                 ce_grad(v.z, c + 2, target, shift, base, hit), ce_grad(v.w, c + 3, target, shift, base, hit));
    CeStore4<TO>::put(dr + c, d);
}

// Four logits from word w of a row, as F32; `last` marks the second pass's read as a last use.
template <class TI> struct CeLoad4;
template <> struct CeLoad4<f32> {
    static __device__ __forceinline__ float4 get(const f32* r, i64 w, bool last) {
        const float4* p = reinterpret_cast<const float4*>(r) + w;
        return last ? __ldcs(p) : __ldg(p);
    }
};
template <class T> struct CeLoad4Half {
    static __device__ __forceinline__ float4 get(const T* r, i64 w, bool last) {
        const uint2* p = reinterpret_cast<const uint2*>(r) + w;
        const uint2 u = last ? __ldcs(p) : __ldg(p);
        const float2 a = Mma<T>::unpack(u.x), b = Mma<T>::unpack(u.y);
        return make_float4(a.x, a.y, b.x, b.y);
    }
};
template <> struct CeLoad4<bf16> : CeLoad4Half<bf16> {};
template <> struct CeLoad4<f16> : CeLoad4Half<f16> {};

// Visits the words of a row this thread owns (threadIdx.x, then a block's stride apart), four
// loaded before any is used so that four are in flight: `use(w, load(w))` for each word w.
template <class Load, class Use> __device__ __forceinline__ void ce_words(i64 words, Load load, Use use) {
    const int step = blockDim.x;
    i64 w = threadIdx.x;
    for (; w + 3 * step < words; w += 4 * step) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = load(w + u * step);
#pragma unroll
        for (int u = 0; u < 4; ++u) use(w + u * step, v[u]);
    }
    for (; w < words; w += step) use(w, load(w));
}

template <class TI, class TO>
__device__ void ce_rows_impl(const TI* x, const i64* t, float* loss, float* lse_out, float* valid, TO* dx,
                             i64 rows, i64 cols, i64 ignore, double smoothing, u32* err) {
    __shared__ float sm[32], ss[32];
    const float base = (float)smoothing / (float)cols, hit = 1.f - (float)smoothing;
    // Words of four when every row starts on one (and the gradient's words with it); then cols
    // is a multiple of 4 and there is no scalar tail.
    const bool vec = (cols & 3) == 0 && (reinterpret_cast<unsigned long long>(x) & (4 * sizeof(TI) - 1)) == 0 &&
                     (reinterpret_cast<unsigned long long>(dx) & (4 * sizeof(TO) - 1)) == 0;
    const i64 words = vec ? cols >> 2 : 0;
    const int step = blockDim.x;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 target = t[r];
        const bool ignored = target == ignore;
        const bool bad = !ignored && (target < 0 || target >= cols);
        const TI* xr = x + r * cols;
        TO* dr = dx == nullptr ? nullptr : dx + r * cols;
        // The branch depends only on the row, so the whole block takes it together.
        if (ignored || bad) {
            if (threadIdx.x == 0) {
                if (bad) atomicExch(err, RB_CE_FLAG);
                loss[r] = 0.f;
                lse_out[r] = 0.f;
                valid[r] = 0.f;
            }
            if (dr != nullptr)
                for (i64 j = threadIdx.x; j < cols; j += step) dr[j] = from_acc<TO>(0.f);
            continue;
        }
        float m = -INFINITY, s = 0.f, sx = 0.f;
        ce_words(
            words, [&](i64 w) { return CeLoad4<TI>::get(xr, w, false); },
            [&](i64, float4 v) { ce_take4(m, s, sx, v); });
        for (i64 k = words * 4 + threadIdx.x; k < cols; k += step) ce_take1(m, s, sx, to_acc(xr[k]));
        block_lse(m, s, sm, ss);
        sx = block_sum(sx, sm);
        const float l = m + logf(s);
        if (threadIdx.x == 0) {
            float out = l - hit * to_acc(xr[target]);
            // Only with smoothing: without it a -inf logit elsewhere must not turn the loss NaN.
            if (smoothing > 0.0) out -= (float)smoothing * sx / (float)cols;
            loss[r] = out;
            lse_out[r] = l;
            valid[r] = 1.f;
        }
        if (dr == nullptr) continue;
        const float shift = l * RB_LOG2E;
        ce_words(
            words, [&](i64 w) { return CeLoad4<TI>::get(xr, w, true); },
            [&](i64 w, float4 v) { ce_grad4(dr, v, w * 4, target, shift, base, hit); });
        for (i64 k = words * 4 + threadIdx.x; k < cols; k += step)
            dr[k] = from_acc<TO>(ce_grad(to_acc(xr[k]), k, target, shift, base, hit));
    }
}
#define RB_CE_ROWS(name, TI, TO)                                                                            \
    RB_BOUNDED_KERNEL(ce_rows_##name, 1024)(const TI* x, const i64* t, f32* loss, f32* lse, f32* valid,  \
                                              TO* dx, i64 rows, i64 cols, i64 ignore, double smoothing,     \
                                              u32* err) {                                                   \
        ce_rows_impl<TI, TO>(x, t, loss, lse, valid, dx, rows, cols, ignore, smoothing, err);               \
    }
RB_CE_ROWS(f32, f32, f32)
RB_CE_ROWS(f32_bf16, f32, bf16)
RB_CE_ROWS(f32_f16, f32, f16)
RB_CE_ROWS(bf16_bf16, bf16, bf16)
RB_CE_ROWS(f16_f16, f16, f16)
