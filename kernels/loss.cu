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
    extern "C" __global__ void ce_fwd_##name(const T* x, const i64* t, Acc<T>::type* loss, Acc<T>::type* lse, \
                                             Acc<T>::type* valid, i64 rows, i64 cols, i64 ignore,        \
                                             double smoothing, u32* err) {                               \
        ce_fwd_impl<T>(x, t, loss, lse, valid, rows, cols, ignore, smoothing, err);                      \
    }
RB_FOR_FLOAT_TYPES(RB_CE_FWD)

// One block per row (the row's target, logsumexp and gradient read once); `g` is the gradient
// of each row's loss. The gradient may be written in a lower dtype TO than the logits (F32
// logits of a BF16 product give the BF16 gradient that product's backward reads).
template <class T, class TO>
__device__ void ce_bwd_impl(const T* x, const i64* t, const typename Acc<T>::type* lse,
                            const typename Acc<T>::type* g, TO* dx, i64 rows, i64 cols, i64 ignore,
                            double smoothing) {
    typedef typename Acc<T>::type C;
    const C base = (C)smoothing / (C)cols, hit = (C)1 - (C)smoothing;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 target = t[r];
        const bool counted = target != ignore && target >= 0 && target < cols;
        const C l = lse[r], gr = g[r];
        const T* xr = x + r * cols;
        TO* dr = dx + r * cols;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C d = (C)0;
            if (counted) d = gr * (exp(to_acc(xr[j]) - l) - base - (j == target ? hit : (C)0));
            dr[j] = from_acc<TO>(d);
        }
    }
}
#define RB_CE_BWD_TO(name, T, TO)                                                                        \
    extern "C" __global__ void ce_bwd_##name(const T* x, const i64* t, const Acc<T>::type* lse,          \
                                             const Acc<T>::type* g, TO* dx, i64 rows, i64 cols, i64 ignore, \
                                             double smoothing) {                                          \
        ce_bwd_impl<T, TO>(x, t, lse, g, dx, rows, cols, ignore, smoothing);                              \
    }
#define RB_CE_BWD(name, T) RB_CE_BWD_TO(name, T, T)
RB_FOR_FLOAT_TYPES(RB_CE_BWD)
RB_CE_BWD_TO(f32_bf16, f32, bf16)
RB_CE_BWD_TO(f32_f16, f32, f16)
