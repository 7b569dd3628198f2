// LayerNorm and RMSNorm over contiguous rows of `cols` elements (the trailing dims the weight
// covers, flattened). Statistics and arithmetic run in Acc<T> (float, double for f64); the weight
// and bias arrive already in Acc<T>, so one kernel serves a bf16 input with an f32 weight.
//
// forward: one block per row; saves mean (LayerNorm) and rstd = 1/sqrt(var + eps) per row.
// backward: dx per row from the saved statistics; dweight/dbias as a column reduction in two
// deterministic steps (per-chunk partial sums, then a fixed-order sum over chunks), no atomics.

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
        // Two passes (mean, then squared deviations): stable where E[x^2] - E[x]^2 is not.
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
    extern "C" __global__ void norm_fwd_##name(const T* x, const Acc<T>::type* w, const Acc<T>::type* b, T* y, \
                                               Acc<T>::type* mean, Acc<T>::type* rstd, i64 rows, i64 cols,   \
                                               double eps, int rms) {                                 \
        norm_fwd_impl<T>(x, w, b, y, mean, rstd, rows, cols, eps, rms);                               \
    }
RB_FOR_FLOAT_TYPES(RB_NORM_FWD)

// dx for one row, with xhat = (x - mean) * rstd and gw = g * w:
//   LayerNorm: dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
//   RMSNorm:   dx = rstd * (gw - xhat * mean(gw * xhat))
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
    extern "C" __global__ void norm_bwd_dx_##name(const T* x, const T* g, const Acc<T>::type* w,       \
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
    extern "C" __global__ void norm_bwd_cols_##name(const T* x, const T* g, const Acc<T>::type* mean,    \
                                                    const Acc<T>::type* rstd, Acc<T>::type* pw,         \
                                                    Acc<T>::type* pb, i64 rows, i64 cols, i64 rpc, int rms) { \
        norm_bwd_cols_impl<T>(x, g, mean, rstd, pw, pb, rows, cols, rpc, rms);                          \
    }
RB_FOR_FLOAT_TYPES(RB_NORM_BWD_COLS)

// out[j] = sum over chunks k (in order) of partial[k, j].
template <class C>
__device__ void norm_col_sum_impl(const C* partial, C* out, i64 chunks, i64 cols) {
    RB_GRID_LOOP(j, cols) {
        C s = (C)0;
        for (i64 k = 0; k < chunks; ++k) s += partial[k * cols + j];
        out[j] = s;
    }
}
extern "C" __global__ void norm_col_sum_f32(const f32* p, f32* out, i64 chunks, i64 cols) { norm_col_sum_impl(p, out, chunks, cols); }
extern "C" __global__ void norm_col_sum_f64(const f64* p, f64* out, i64 chunks, i64 cols) { norm_col_sum_impl(p, out, chunks, cols); }
