// Products over rows grouped by expert (a mixture of experts' layers), the groups given by
// offsets on the device (I64 [E + 1], ascending): group e is rows off[e] .. off[e + 1].
//
//   grouped_rows:   out[m, n]    = sum_k a[m, k] b[e(m), n, k]     (out [M, N], contiguous)
//   grouped_reduce: out[e, n, k] = sum_{m in e} a[m, n] b[m, k]    (out [E, N, K], contiguous)
//
// The first is the forward product x W_eᵀ and, with b's strides swapped, the input's gradient
// dy W_e; the second is the weights' gradient dy_eᵀ x_e. Operands are read through strides
// (a transposed weight is a view). Tiles of 64 x 64 outputs, 256 threads of 4 x 4, the
// reduction in chunks of 16 through shared memory, accumulated in float (double for f64).
//
// grouped_rows runs a grid of ceil(M / 64) + E row tiles (the most the groups can need, since
// each adds at most one partial tile): block t walks the offsets to find its group and its
// tile in it, so the host never reads the group sizes; blocks past the last tile return.
// Offsets are clamped to [0, M]: offsets that are not ascending give wrong sums, never a read
// or write outside the operands.

#define GM_TILE 64
#define GM_K 16
#define GM_THREADS 256

template <class T>
__device__ void grouped_rows_impl(const T* a, const T* b, T* out, const i64* off, int experts, i64 m_rows,
                                  i64 n_cols, i64 k_len, i64 a_m, i64 a_k, i64 b_e, i64 b_n, i64 b_k) {
    typedef typename Acc<T>::type C;
    __shared__ C as[GM_K][GM_TILE + 1];
    __shared__ C bs[GM_K][GM_TILE + 1];
    __shared__ i64 s_row0, s_row_end;
    __shared__ int s_group;
    if (threadIdx.x == 0) {
        i64 t = blockIdx.x;
        s_group = -1;
        for (int e = 0; e < experts; ++e) {
            const i64 lo = min(max(off[e], (i64)0), m_rows), hi = min(max(off[e + 1], lo), m_rows);
            const i64 tiles = (hi - lo + GM_TILE - 1) / GM_TILE;
            if (t < tiles) {
                s_group = e;
                s_row0 = lo + t * GM_TILE;
                s_row_end = min(hi, s_row0 + GM_TILE);
                break;
            }
            t -= tiles;
        }
    }
    __syncthreads();
    const int e = s_group;
    if (e < 0) return;
    const i64 row0 = s_row0, row_end = s_row_end, col0 = (i64)blockIdx.y * GM_TILE;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    C acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = (C)0;
    const T* be = b + (i64)e * b_e;
    for (i64 k0 = 0; k0 < k_len; k0 += GM_K) {
        for (int i = threadIdx.x; i < GM_TILE * GM_K; i += GM_THREADS) {
            const int r = i / GM_K, c = i % GM_K;
            const i64 m = row0 + r, n = col0 + r, k = k0 + c;
            as[c][r] = (m < row_end && k < k_len) ? to_acc(a[m * a_m + k * a_k]) : (C)0;
            bs[c][r] = (n < n_cols && k < k_len) ? to_acc(be[n * b_n + k * b_k]) : (C)0;
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < GM_K; ++c) {
            C av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                av[i] = as[c][ty * 4 + i];
                bv[i] = bs[c][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const i64 m = row0 + ty * 4 + i;
        if (m >= row_end) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const i64 n = col0 + tx * 4 + j;
            if (n < n_cols) out[m * n_cols + n] = from_acc<T>(acc[i][j]);
        }
    }
}

// Block (x, y, z) = (n tile, k tile, group): the group's rows reduced in chunks of 16. An
// empty group writes zeros.
template <class T>
__device__ void grouped_reduce_impl(const T* a, const T* b, T* out, const i64* off, i64 m_rows, i64 n_len,
                                    i64 k_len, i64 a_m, i64 a_n, i64 b_m, i64 b_k) {
    typedef typename Acc<T>::type C;
    __shared__ C as[GM_K][GM_TILE + 1];
    __shared__ C bs[GM_K][GM_TILE + 1];
    const int e = blockIdx.z;
    const i64 start = min(max(off[e], (i64)0), m_rows), end = min(max(off[e + 1], start), m_rows);
    const i64 n0 = (i64)blockIdx.x * GM_TILE, k0 = (i64)blockIdx.y * GM_TILE;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    C acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = (C)0;
    for (i64 m0 = start; m0 < end; m0 += GM_K) {
        for (int i = threadIdx.x; i < GM_TILE * GM_K; i += GM_THREADS) {
            const int r = i % GM_TILE, c = i / GM_TILE;
            const i64 m = m0 + c, n = n0 + r, k = k0 + r;
            as[c][r] = (m < end && n < n_len) ? to_acc(a[m * a_m + n * a_n]) : (C)0;
            bs[c][r] = (m < end && k < k_len) ? to_acc(b[m * b_m + k * b_k]) : (C)0;
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < GM_K; ++c) {
            C av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                av[i] = as[c][ty * 4 + i];
                bv[i] = bs[c][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    T* oe = out + (i64)e * n_len * k_len;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const i64 n = n0 + ty * 4 + i;
        if (n >= n_len) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const i64 k = k0 + tx * 4 + j;
            if (k < k_len) oe[n * k_len + k] = from_acc<T>(acc[i][j]);
        }
    }
}

// ----- tensor cores (BF16, F16) -----
// The same two products on mma.sync m16n8k16 tiles: a block of 4 warps computes 64 x 64
// outputs, each warp 16 rows by 8 tiles of 8 columns, the reduction staged through shared
// memory 32 at a time as [row][reduction] (rows padded to 40 elements: the fragments' 32-bit
// reads fall in distinct banks). Accumulated in FP32.

#define GMT_K 32
#define GMT_LD 40
#define GMT_THREADS 128

// c[j] += the warp's 16 rows of `as` times columns j*8 .. j*8+8 of `bs`ᵀ, over GMT_K.
template <class T>
__device__ __forceinline__ void gmt_tile(const T (*as)[GMT_LD], const T (*bs)[GMT_LD], float (*c)[4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int r = warp * 16 + g;
#pragma unroll
    for (int ks = 0; ks < GMT_K; ks += 16) {
        const u32 af[4] = {*(const u32*)&as[r][ks + 2 * t], *(const u32*)&as[r + 8][ks + 2 * t],
                           *(const u32*)&as[r][ks + 2 * t + 8], *(const u32*)&as[r + 8][ks + 2 * t + 8]};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int n = j * 8 + g;
            Mma<T>::run(c[j], af, *(const u32*)&bs[n][ks + 2 * t], *(const u32*)&bs[n][ks + 2 * t + 8]);
        }
    }
}

// Writes the warp's accumulators to out[row][col] (row stride ld) where row < rows, col < cols
// (tile-relative origin row0, col0).
template <class T>
__device__ __forceinline__ void gmt_store(T* out, i64 ld, i64 row0, i64 rows_end, i64 col0, i64 cols,
                                          const float (*c)[4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const i64 m = row0 + warp * 16 + g + 8 * h;
            if (m >= rows_end) continue;
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const i64 n = col0 + j * 8 + 2 * t + q;
                if (n < cols) out[m * ld + n] = from_f<T>(c[j][2 * h + q]);
            }
        }
    }
}

template <class T>
__device__ void grouped_rows_mma_impl(const T* a, const T* b, T* out, const i64* off, int experts, i64 m_rows,
                                      i64 n_cols, i64 k_len, i64 a_m, i64 a_k, i64 b_e, i64 b_n, i64 b_k) {
    __shared__ __align__(16) T as[GM_TILE][GMT_LD];
    __shared__ __align__(16) T bs[GM_TILE][GMT_LD];
    __shared__ i64 s_row0, s_row_end;
    __shared__ int s_group;
    if (threadIdx.x == 0) {
        i64 t = blockIdx.x;
        s_group = -1;
        for (int e = 0; e < experts; ++e) {
            const i64 lo = min(max(off[e], (i64)0), m_rows), hi = min(max(off[e + 1], lo), m_rows);
            const i64 tiles = (hi - lo + GM_TILE - 1) / GM_TILE;
            if (t < tiles) {
                s_group = e;
                s_row0 = lo + t * GM_TILE;
                s_row_end = min(hi, s_row0 + GM_TILE);
                break;
            }
            t -= tiles;
        }
    }
    __syncthreads();
    const int e = s_group;
    if (e < 0) return;
    const i64 row0 = s_row0, row_end = s_row_end, col0 = (i64)blockIdx.y * GM_TILE;
    const T zero = from_f<T>(0.f);
    const T* be = b + (i64)e * b_e;
    float c[8][4] = {};
    for (i64 k0 = 0; k0 < k_len; k0 += GMT_K) {
        for (int i = threadIdx.x; i < GM_TILE * GMT_K; i += GMT_THREADS) {
            const int r = i / GMT_K, kk = i % GMT_K;
            const i64 m = row0 + r, n = col0 + r, k = k0 + kk;
            as[r][kk] = (m < row_end && k < k_len) ? a[m * a_m + k * a_k] : zero;
            bs[r][kk] = (n < n_cols && k < k_len) ? be[n * b_n + k * b_k] : zero;
        }
        __syncthreads();
        gmt_tile<T>(as, bs, c);
        __syncthreads();
    }
    gmt_store<T>(out, n_cols, row0, row_end, col0, n_cols, c);
}

// out[e] [N, K] = a[rows of e]ᵀ b[rows of e]: the reduction runs over the group's rows.
template <class T>
__device__ void grouped_reduce_mma_impl(const T* a, const T* b, T* out, const i64* off, i64 m_rows, i64 n_len,
                                        i64 k_len, i64 a_m, i64 a_n, i64 b_m, i64 b_k) {
    __shared__ __align__(16) T as[GM_TILE][GMT_LD];
    __shared__ __align__(16) T bs[GM_TILE][GMT_LD];
    const int e = blockIdx.z;
    const i64 start = min(max(off[e], (i64)0), m_rows), end = min(max(off[e + 1], start), m_rows);
    const i64 n0 = (i64)blockIdx.x * GM_TILE, k0 = (i64)blockIdx.y * GM_TILE;
    const T zero = from_f<T>(0.f);
    float c[8][4] = {};
    for (i64 m0 = start; m0 < end; m0 += GMT_K) {
        for (int i = threadIdx.x; i < GM_TILE * GMT_K; i += GMT_THREADS) {
            const int r = i % GM_TILE, mm = i / GM_TILE;
            const i64 m = m0 + mm, n = n0 + r, k = k0 + r;
            as[r][mm] = (m < end && n < n_len) ? a[m * a_m + n * a_n] : zero;
            bs[r][mm] = (m < end && k < k_len) ? b[m * b_m + k * b_k] : zero;
        }
        __syncthreads();
        gmt_tile<T>(as, bs, c);
        __syncthreads();
    }
    gmt_store<T>(out + (i64)e * n_len * k_len, k_len, n0, n_len, k0, k_len, c);
}

#define RB_GROUPED_MMA(name, T)                                                                               \
    RB_BOUNDED_KERNEL(grouped_rows_mma_##name, GMT_THREADS)(const T* a, const T* b, T* out, const i64* off, int experts, i64 m_rows,      \
                                i64 n_cols, i64 k_len, i64 a_m, i64 a_k, i64 b_e, i64 b_n, i64 b_k) {         \
        grouped_rows_mma_impl<T>(a, b, out, off, experts, m_rows, n_cols, k_len, a_m, a_k, b_e, b_n, b_k);   \
    }                                                                                                         \
    RB_BOUNDED_KERNEL(grouped_reduce_mma_##name, GMT_THREADS)(const T* a, const T* b, T* out, const i64* off, i64 m_rows, i64 n_len,      \
                                  i64 k_len, i64 a_m, i64 a_n, i64 b_m, i64 b_k) {                            \
        grouped_reduce_mma_impl<T>(a, b, out, off, m_rows, n_len, k_len, a_m, a_n, b_m, b_k);                \
    }
RB_GROUPED_MMA(bf16, bf16)
RB_GROUPED_MMA(f16, f16)

#define RB_GROUPED(name, T)                                                                                   \
    RB_BOUNDED_KERNEL(grouped_rows_##name, GM_THREADS)(const T* a, const T* b, T* out, const i64* off, int experts, i64 m_rows,          \
                            i64 n_cols, i64 k_len, i64 a_m, i64 a_k, i64 b_e, i64 b_n, i64 b_k) {             \
        grouped_rows_impl<T>(a, b, out, off, experts, m_rows, n_cols, k_len, a_m, a_k, b_e, b_n, b_k);       \
    }                                                                                                         \
    RB_BOUNDED_KERNEL(grouped_reduce_##name, GM_THREADS)(const T* a, const T* b, T* out, const i64* off, i64 m_rows, i64 n_len,          \
                              i64 k_len, i64 a_m, i64 a_n, i64 b_m, i64 b_k) {                                \
        grouped_reduce_impl<T>(a, b, out, off, m_rows, n_len, k_len, a_m, a_n, b_m, b_k);                    \
    }
RB_FOR_FLOAT_TYPES(RB_GROUPED)
