// Row reductions: the host moves the reduced dims last and makes the input contiguous, so each
// kernel reduces `rows` rows of `k` elements. A warp reduces one row when rows are short; a
// whole block does when they are long. The order of additions is fixed, so results repeat.

template <class T> struct SumOut { typedef T type; };
template <> struct SumOut<u8> { typedef i64 type; };
template <> struct SumOut<u32> { typedef i64 type; };

// One row reduced by `lanes` threads starting at `lane`; returns this thread's partial.
template <class T, class A>
__device__ __forceinline__ A partial_sum(const T* row, i64 k, int lane, int lanes) {
    A s = (A)0;
    for (i64 j = lane; j < k; j += lanes) s += to_acc(row[j]);
    return s;
}

template <class T>
__device__ void sum_impl(const T* x, typename SumOut<T>::type* y, i64 rows, i64 k, int block_per_row) {
    typedef typename Acc<T>::type A;
    typedef typename SumOut<T>::type O;
    __shared__ A scratch[32];
    if (block_per_row) {
        for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
            A s = partial_sum<T, A>(x + r * k, k, threadIdx.x, blockDim.x);
            s = block_sum(s, scratch);
            if (threadIdx.x == 0) y[r] = from_acc<O>(s);
        }
    } else {
        int lane = threadIdx.x & 31;
        i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
        for (i64 r = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
            A s = warp_sum(partial_sum<T, A>(x + r * k, k, lane, 32));
            if (lane == 0) y[r] = from_acc<O>(s);
        }
    }
}
#define RB_SUM(name, T) \
    extern "C" __global__ void sum_##name(const T* x, SumOut<T>::type* y, i64 rows, i64 k, int bpr) { sum_impl<T>(x, y, rows, k, bpr); }
RB_FOR_NUMERIC_TYPES(RB_SUM)

// Max/min and argmax/argmin share one scan that tracks value and first index; `seek_max` picks
// the direction, and the output pointer given (values or indices) picks what is written.
// NaN wins a comparison, as in PyTorch.
template <class A> __device__ __forceinline__ bool better(int seek_max, A v, i64 j, A best, i64 bj) {
    if (v != v) return !(best != best) || j < bj;
    if (best != best) return false;
    if (v == best) return j < bj;
    return seek_max ? v > best : v < best;
}

// The best of (value, index) pairs across a warp.
template <class A>
__device__ __forceinline__ void warp_best(int seek_max, A& best, i64& bj) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        A ov = __shfl_xor_sync(0xffffffffu, best, o);
        i64 oj = __shfl_xor_sync(0xffffffffu, bj, o);
        if (better(seek_max, ov, oj, best, bj)) { best = ov; bj = oj; }
    }
}

// This thread's best over row[lane], row[lane + lanes], ...
template <class T, class A>
__device__ __forceinline__ void scan_best(const T* row, i64 k, int lane, int lanes, int seek_max, A& best, i64& bj) {
    best = to_acc(row[0]);
    bj = 0;
    for (i64 j = lane; j < k; j += lanes) {
        A v = to_acc(row[j]);
        if (better(seek_max, v, j, best, bj)) { best = v; bj = j; }
    }
}

// A warp per row when rows are many; a block per row when they are few and long (a decode
// step's argmax over the vocabulary: one warp alone would walk 32k logits serially).
template <class T>
__device__ void extreme_impl(const T* x, T* y_val, i64* y_idx, i64 rows, i64 k, int seek_max, int block_per_row) {
    typedef typename Acc<T>::type A;
    int lane = threadIdx.x & 31;
    if (block_per_row) {
        __shared__ A vals[32];
        __shared__ i64 idxs[32];
        int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
        for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
            const T* row = x + r * k;
            A best;
            i64 bj;
            scan_best<T, A>(row, k, threadIdx.x, blockDim.x, seek_max, best, bj);
            warp_best(seek_max, best, bj);
            if (lane == 0) { vals[warp] = best; idxs[warp] = bj; }
            __syncthreads();
            if (warp == 0) {
                best = lane < nwarps ? vals[lane] : vals[0];
                bj = lane < nwarps ? idxs[lane] : idxs[0];
                warp_best(seek_max, best, bj);
                if (lane == 0) {
                    if (y_val) y_val[r] = row[bj];
                    else y_idx[r] = bj;
                }
            }
            __syncthreads();
        }
        return;
    }
    i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
    for (i64 r = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
        const T* row = x + r * k;
        A best;
        i64 bj;
        scan_best<T, A>(row, k, lane, 32, seek_max, best, bj);
        warp_best(seek_max, best, bj);
        if (lane == 0) {
            if (y_val) y_val[r] = row[bj];
            else y_idx[r] = bj;
        }
    }
}
#define RB_EXTREME(name, T) \
    extern "C" __global__ void extreme_##name(const T* x, T* yv, i64* yi, i64 rows, i64 k, int seek_max, int bpr) { extreme_impl<T>(x, yv, yi, rows, k, seek_max, bpr); }
RB_FOR_NUMERIC_TYPES(RB_EXTREME)
