// softmax and log_softmax over contiguous rows, forward and backward. One block per row; the
// forward keeps the row in shared memory when it fits, so the input is read once, and finds
// max and normalizer in one online pass.

template <class T> struct SmComp { typedef float type; };
template <> struct SmComp<f64> { typedef double type; };

template <class T>
__device__ void softmax_fwd_impl(const T* x, T* y, i64 rows, i64 cols, int log_out, int cached) {
    typedef typename SmComp<T>::type C;
    extern __shared__ unsigned char smem_raw[];
    C* row_cache = (C*)smem_raw;
    __shared__ C scratch_m[32];
    __shared__ C scratch_s[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        C m = -INFINITY, s = 0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C v = (C)to_d(xr[j]);
            if (cached) row_cache[j] = v;
            if (v > m) { s = s * exp(m - v) + (C)1; m = v; }
            else if (v == v) { s += exp(v - m); }
            else { m = v; }
        }
        // Combine (max, sum) pairs across the warp, then across warps.
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            C om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
            C nm = om > m ? om : m;
            s = (m == -INFINITY ? (C)0 : s * exp(m - nm)) + (om == -INFINITY ? (C)0 : os * exp(om - nm));
            m = nm;
        }
        __syncthreads();
        if (lane == 0) { scratch_m[warp] = m; scratch_s[warp] = s; }
        __syncthreads();
        m = lane < warps ? scratch_m[lane] : -INFINITY;
        s = lane < warps ? scratch_s[lane] : (C)0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            C om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
            C nm = om > m ? om : m;
            s = (m == -INFINITY ? (C)0 : s * exp(m - nm)) + (om == -INFINITY ? (C)0 : os * exp(om - nm));
            m = nm;
        }
        C log_s = log(s);
        C inv_s = (C)1 / s;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C v = cached ? row_cache[j] : (C)to_d(xr[j]);
            C out = log_out ? v - m - log_s : exp(v - m) * inv_s;
            yr[j] = from_d<T>((double)out);
        }
        __syncthreads();
    }
}
#define RB_SOFTMAX_FWD(name, T) \
    extern "C" __global__ void softmax_fwd_##name(const T* x, T* y, i64 rows, i64 cols, int log_out, int cached) { softmax_fwd_impl<T>(x, y, rows, cols, log_out, cached); }
RB_FOR_FLOAT_TYPES(RB_SOFTMAX_FWD)

// softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g).
template <class T>
__device__ void softmax_bwd_impl(const T* y, const T* g, T* dx, i64 rows, i64 cols, int log_out) {
    typedef typename SmComp<T>::type C;
    __shared__ C scratch[32];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* yr = y + r * cols;
        const T* gr = g + r * cols;
        T* dr = dx + r * cols;
        C acc = 0;
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C gv = (C)to_d(gr[j]);
            acc += log_out ? gv : gv * (C)to_d(yr[j]);
        }
        acc = block_sum(acc, scratch);
        for (i64 j = threadIdx.x; j < cols; j += blockDim.x) {
            C gv = (C)to_d(gr[j]), yv = (C)to_d(yr[j]);
            C out = log_out ? gv - exp(yv) * acc : yv * (gv - acc);
            dr[j] = from_d<T>((double)out);
        }
        __syncthreads();
    }
}
#define RB_SOFTMAX_BWD(name, T) \
    extern "C" __global__ void softmax_bwd_##name(const T* y, const T* g, T* dx, i64 rows, i64 cols, int log_out) { softmax_bwd_impl<T>(y, g, dx, rows, cols, log_out); }
RB_FOR_FLOAT_TYPES(RB_SOFTMAX_BWD)
