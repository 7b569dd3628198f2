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

// One block per row. Writes the row loss, its logsumexp (kept for the backward) and whether
// it counts toward the mean (1 or 0).
template <class T>
__device__ void ce_fwd_impl(const T* x, const i64* t, typename Acc<T>::type* loss, typename Acc<T>::type* lse_out,
                            typename Acc<T>::type* valid, i64 rows, i64 cols, i64 ignore, double smoothing,
                            u32* err) {
    typedef typename Acc<T>::type C;
    __shared__ C scratch[32];
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
        C m = -INFINITY, sx = (C)0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C v = to_acc(xr[j]);
            m = v > m ? v : m;
            sx += v;
        }
        m = block_max(m, scratch, (C)-INFINITY);
        sx = block_sum(sx, scratch);
        C s = (C)0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) s += exp(to_acc(xr[j]) - m);
        s = block_sum(s, scratch);
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

// One thread per logit; `g` is the gradient of each row's loss.
template <class T>
__device__ void ce_bwd_impl(const T* x, const i64* t, const typename Acc<T>::type* lse,
                            const typename Acc<T>::type* g, T* dx, i64 rows, i64 cols, i64 ignore,
                            double smoothing) {
    typedef typename Acc<T>::type C;
    RB_GRID_LOOP(i, rows * cols) {
        i64 r = i / cols, c = i - r * cols;
        i64 target = t[r];
        C d = (C)0;
        if (target != ignore && target >= 0 && target < cols) {
            C p = exp(to_acc(x[i]) - lse[r]);
            C want = (C)smoothing / (C)cols + (c == target ? (C)1 - (C)smoothing : (C)0);
            d = g[r] * (p - want);
        }
        dx[i] = from_acc<T>(d);
    }
}
#define RB_CE_BWD(name, T)                                                                               \
    extern "C" __global__ void ce_bwd_##name(const T* x, const i64* t, const Acc<T>::type* lse,          \
                                             const Acc<T>::type* g, T* dx, i64 rows, i64 cols, i64 ignore, \
                                             double smoothing) {                                          \
        ce_bwd_impl<T>(x, t, lse, g, dx, rows, cols, ignore, smoothing);                                  \
    }
RB_FOR_FLOAT_TYPES(RB_CE_BWD)
