// Row reductions: the host moves the reduced dims last and makes the input contiguous, so each
// kernel reduces `rows` rows of `k` elements (sums over the leading dims of a contiguous
// input take the column kernels below instead). A warp reduces one row when rows are short; a
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
    RB_KERNEL(sum_##name)(const T* x, SumOut<T>::type* y, i64 rows, i64 k, int bpr) { sum_impl<T>(x, y, rows, k, bpr); }
RB_FOR_NUMERIC_TYPES(RB_SUM)

// Column sums of a contiguous [k, cols] matrix, for sums over leading dims (a bias gradient
// summed over its rows), with no transposing copy first. Pass one: a block of 256 threads takes
// 32 columns and `chunk` rows (8 row lanes, each striding by 8) and writes one partial sum per
// column; pass two adds a column's partials in chunk order. The order is fixed, so results
// repeat.
template <class T>
__device__ void col_sum_partial_impl(const T* x, typename Acc<T>::type* partial, i64 k, i64 cols, i64 chunk) {
    typedef typename Acc<T>::type A;
    __shared__ A scratch[8][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const i64 c = (i64)blockIdx.x * 32 + tx;
    const i64 r0 = (i64)blockIdx.y * chunk;
    const i64 r1 = r0 + chunk < k ? r0 + chunk : k;
    A s = (A)0;
    if (c < cols)
        for (i64 r = r0 + ty; r < r1; r += 8) s += to_acc(x[r * cols + c]);
    scratch[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < cols) {
        A t = (A)0;
#pragma unroll
        for (int i = 0; i < 8; ++i) t += scratch[i][tx];
        partial[(i64)blockIdx.y * cols + c] = t;
    }
}
template <class T>
__device__ void col_sum_finish_impl(const typename Acc<T>::type* partial, typename SumOut<T>::type* y, i64 chunks, i64 cols) {
    typedef typename Acc<T>::type A;
    RB_GRID_LOOP(c, cols) {
        A t = (A)0;
        for (i64 i = 0; i < chunks; ++i) t += partial[i * cols + c];
        y[c] = from_acc<typename SumOut<T>::type>(t);
    }
}
#define RB_COL_SUM(name, T) \
    RB_KERNEL(col_sum_partial_##name)(const T* x, Acc<T>::type* p, i64 k, i64 cols, i64 chunk) { col_sum_partial_impl<T>(x, p, k, cols, chunk); } \
    RB_KERNEL(col_sum_finish_##name)(const Acc<T>::type* p, SumOut<T>::type* y, i64 chunks, i64 cols) { col_sum_finish_impl<T>(p, y, chunks, cols); }
RB_FOR_NUMERIC_TYPES(RB_COL_SUM)

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
    RB_KERNEL(extreme_##name)(const T* x, T* yv, i64* yi, i64 rows, i64 k, int seek_max, int bpr) { extreme_impl<T>(x, yv, yi, rows, k, seek_max, bpr); }
RB_FOR_NUMERIC_TYPES(RB_EXTREME)
