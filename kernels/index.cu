// Indexing: index_select and gather read through an index, index_add and scatter_add add
// through one, index_copy_ writes through one. The host never reads the indices (that would synchronize every op): each kernel
// checks its index against the indexed dim and, when it is out of range, sets the device error
// word (reported at the next host read) and skips the element.
//
// One geometry serves all four ops. The kernel walks the elements of an "iteration" shape (the
// output for reads, the source for adds); an element's coordinates address the "target" (the
// input for reads, the accumulator for adds) through the target's strides, except along `dim`,
// where the target coordinate is the index value. That index sits at the element's own position
// in the index tensor (gather, scatter_add: `per_element`) or at its coordinate along `dim`
// (index_select, index_add: a 1-D index).

#define RB_INDEX_DIMS 8

// Mirrors `IndexGeom` in backend/cuda/index.rs field for field.
struct IndexGeom {
    int rank;
    int dim;
    i64 dim_size;
    i64 offset;
    i64 shape[RB_INDEX_DIMS];
    i64 stride[RB_INDEX_DIMS];
};

// Index tensors are u8, u32 or i64 (kind 0, 1, 2); read as i64.
__device__ __forceinline__ i64 load_index(const void* p, int kind, i64 off) {
    if (kind == 0) return (i64)((const u8*)p)[off];
    if (kind == 1) return (i64)((const u32*)p)[off];
    return ((const i64*)p)[off];
}

// For element i of the iteration shape: the target offset of every coordinate but `dim`, and
// (through `along`) the coordinate along `dim`.
__device__ __forceinline__ i64 target_base(const IndexGeom& g, i64 i, i64* along) {
    i64 off = g.offset;
    *along = 0;
#pragma unroll
    for (int d = RB_INDEX_DIMS - 1; d >= 0; --d) {
        if (d < g.rank) {
            i64 n = g.shape[d];
            i64 c = i % n;
            i /= n;
            if (d == g.dim) *along = c;
            else off += c * g.stride[d];
        }
    }
    return off;
}

// The checked index for element i, or -1 after flagging an out-of-range one.
__device__ __forceinline__ i64 checked_index(const IndexGeom& g, const void* idx, Strided is, int kind,
                                             int per_element, i64 i, i64 along, u32* err, u32 code) {
    i64 v = load_index(idx, kind, strided_offset(is, per_element ? i : along));
    if (v < 0 || v >= g.dim_size) {
        atomicExch(err, code);
        return -1;
    }
    return v;
}

// Reads copy elements by size, so one kernel per element size serves every dtype.
template <class T>
__device__ void index_read_impl(const T* x, IndexGeom g, const void* idx, Strided is, int kind, int per_element,
                                T* y, i64 n, u32* err, u32 code) {
    RB_GRID_LOOP(i, n) {
        i64 along;
        i64 base = target_base(g, i, &along);
        i64 v = checked_index(g, idx, is, kind, per_element, i, along, err, code);
        // A skipped element is zero rather than whatever the allocation held.
        y[i] = v < 0 ? (T)0 : x[base + v * g.stride[g.dim]];
    }
}
#define RB_INDEX_READ(bytes, T)                                                                        \
    RB_KERNEL(index_read_##bytes)(const T* x, IndexGeom g, const void* idx, Strided is, \
                                                  int kind, int per_element, T* y, i64 n, u32* err,      \
                                                  u32 code) {                                            \
        index_read_impl<T>(x, g, idx, is, kind, per_element, y, n, err, code);                           \
    }
RB_INDEX_READ(1, u8)
RB_INDEX_READ(2, unsigned short)
RB_INDEX_READ(4, u32)
RB_INDEX_READ(8, u64)

// index_select of whole rows along dim 0 (an embedding's lookup): x rows of `row_words` 16-byte
// words, `stride_words` apart; the output [n, row] contiguous, a thread a word. The element
// loop above forms every coordinate of every element and moves 4 bytes at a time.
RB_KERNEL(index_rows16)(const uint4* x, i64 stride_words, i64 dim_size, const void* idx, Strided is,
                                        int kind, uint4* y, i64 row_words, i64 words, u32* err, u32 code) {
    RB_GRID_LOOP(w, words) {
        const i64 r = w / row_words, c = w - r * row_words;
        const i64 v = load_index(idx, kind, strided_offset(is, r));
        if (v < 0 || v >= dim_size) {
            atomicExch(err, code);
            y[w] = make_uint4(0u, 0u, 0u, 0u); // a skipped row is zero, as in the element loop
            continue;
        }
        y[w] = x[v * stride_words + c];
    }
}

// index_copy_: writes src[.., j, ..] at y[.., idx[j], ..] in place (the mirror of a read),
// element by size like the reads. A decode step writes its keys and values into the cache at a
// position held in device memory this way, so a captured step needs no host-side offset.
template <class T>
__device__ void index_write_impl(T* y, IndexGeom g, const void* idx, Strided is, int kind, const T* src,
                                 Strided ss, i64 n, u32* err, u32 code) {
    RB_GRID_LOOP(i, n) {
        i64 along;
        i64 base = target_base(g, i, &along);
        i64 v = checked_index(g, idx, is, kind, 0, i, along, err, code);
        if (v >= 0) y[base + v * g.stride[g.dim]] = src[strided_offset(ss, i)];
    }
}
#define RB_INDEX_WRITE(bytes, T)                                                                          \
    RB_KERNEL(index_write_##bytes)(T* y, IndexGeom g, const void* idx, Strided is, int kind, \
                                                   const T* src, Strided ss, i64 n, u32* err, u32 code) {   \
        index_write_impl<T>(y, g, idx, is, kind, src, ss, n, err, code);                                    \
    }
RB_INDEX_WRITE(1, u8)
RB_INDEX_WRITE(2, unsigned short)
RB_INDEX_WRITE(4, u32)
RB_INDEX_WRITE(8, u64)

// Adds go into an accumulator of the source's Acc type (f32 for the 16- and 32-bit floats, f64,
// i64 for integers): the host casts the base to it first and back afterwards, so half types
// round once and integer sums saturate once, as the CPU's per-element adds do for non-negative
// values.
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
// Two's-complement addition is the same for signed and unsigned words.
__device__ __forceinline__ void atomic_add(i64* p, i64 v) {
    atomicAdd((unsigned long long*)p, (unsigned long long)v);
}

template <class S>
__device__ void index_add_impl(typename Acc<S>::type* out, IndexGeom g, const void* idx, Strided is, int kind,
                               int per_element, const S* src, Strided ss, i64 n, u32* err, u32 code) {
    RB_GRID_LOOP(i, n) {
        i64 along;
        i64 base = target_base(g, i, &along);
        i64 v = checked_index(g, idx, is, kind, per_element, i, along, err, code);
        if (v < 0) continue;
        atomic_add(out + base + v * g.stride[g.dim], to_acc(src[strided_offset(ss, i)]));
    }
}
#define RB_INDEX_ADD(name, S)                                                                        \
    RB_KERNEL(index_add_##name)(Acc<S>::type* out, IndexGeom g, const void* idx,      \
                                                Strided is, int kind, int per_element, const S* src,   \
                                                Strided ss, i64 n, u32* err, u32 code) {               \
        index_add_impl<S>(out, g, idx, is, kind, per_element, src, ss, n, err, code);                  \
    }
RB_FOR_NUMERIC_TYPES(RB_INDEX_ADD)

// ---------------------------------------------------------------------------------------------
// index_add of floats in a fixed order. Float adds do not associate, so atomics would make the
// gradient of an embedding (index_select's backward) differ from run to run wherever a row is
// looked up more than once. Instead: sort the entries by target row, stably (an LSD radix sort
// of 11-bit digits; one warp ranks a tile of entries with __match_any_sync), then let one
// thread per target column walk each row's entries in ascending entry order and add their sum.
// The result is the same on every run and does not depend on the grid.

#define RB_SORT_BITS 11
#define RB_SORT_BUCKETS (1 << RB_SORT_BITS)
#define RB_SORT_TILE 1024

// The checked target row of each entry (the sort's keys) and the entry's position (its
// values). An out-of-range row is flagged and becomes `dim_size`, which sorts last and is
// skipped.
RB_KERNEL(sorted_add_keys)(const void* idx, Strided is, int kind, i64 m, i64 dim_size,
                                           u32* keys, u32* vals, u32* err, u32 code) {
    RB_GRID_LOOP(j, m) {
        i64 v = load_index(idx, kind, strided_offset(is, j));
        if (v < 0 || v >= dim_size) {
            atomicExch(err, code);
            v = dim_size;
        }
        keys[j] = (u32)v;
        vals[j] = (u32)j;
    }
}

// The digit of the entry at j for this pass, or RB_SORT_BUCKETS (matching no digit) past the end.
__device__ __forceinline__ u32 sort_digit(const u32* keys, i64 j, i64 end, int shift) {
    return j < end ? (keys[j] >> shift) & (RB_SORT_BUCKETS - 1) : RB_SORT_BUCKETS;
}

// One warp per tile: how many of the tile's entries have each digit, digit-major
// (`hist[digit * tiles + tile]`), so one exclusive scan gives every tile's first slot per digit.
RB_KERNEL(sorted_add_hist)(const u32* keys, i64 m, int shift, u32* hist, i64 tiles) {
    __shared__ u32 count[RB_SORT_BUCKETS];
    const int lane = threadIdx.x;
    for (int d = lane; d < RB_SORT_BUCKETS; d += 32) count[d] = 0;
    __syncwarp();
    const i64 tile = blockIdx.x, start = tile * RB_SORT_TILE;
    const i64 end = min(m, start + RB_SORT_TILE);
    for (i64 base = start; base < end; base += 32) {
        const u32 d = sort_digit(keys, base + lane, end, shift);
        const unsigned peers = __match_any_sync(0xffffffffu, d);
        if (d < RB_SORT_BUCKETS && lane == __ffs(peers) - 1) count[d] += __popc(peers);
        __syncwarp();
    }
    for (int d = lane; d < RB_SORT_BUCKETS; d += 32) hist[(i64)d * tiles + tile] = count[d];
}

// An exclusive prefix sum of n counts in place, by one block of 1024 threads (each sums a run,
// the block scans the runs' totals, each writes its run's prefixes).
RB_KERNEL(sorted_add_scan)(u32* h, i64 n) {
    __shared__ u32 sums[1024];
    const int t = threadIdx.x;
    const i64 per = (n + 1023) / 1024;
    const i64 a = min(n, t * per), b = min(n, a + per);
    u32 s = 0;
    for (i64 i = a; i < b; ++i) s += h[i];
    sums[t] = s;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
        const u32 v = t >= off ? sums[t - off] : 0;
        __syncthreads();
        sums[t] += v;
        __syncthreads();
    }
    u32 run = t ? sums[t - 1] : 0;
    for (i64 i = a; i < b; ++i) {
        const u32 c = h[i];
        h[i] = run;
        run += c;
    }
}

// One warp per tile: each entry goes to its digit's next slot. Lanes of one digit take slots
// in lane order and the tile is walked in order, so the pass is stable.
RB_KERNEL(sorted_add_scatter)(const u32* keys, const u32* vals, i64 m, int shift,
                                              const u32* first, i64 tiles, u32* keys_out, u32* vals_out) {
    __shared__ u32 next[RB_SORT_BUCKETS];
    const int lane = threadIdx.x;
    const i64 tile = blockIdx.x, start = tile * RB_SORT_TILE;
    for (int d = lane; d < RB_SORT_BUCKETS; d += 32) next[d] = first[(i64)d * tiles + tile];
    __syncwarp();
    const i64 end = min(m, start + RB_SORT_TILE);
    for (i64 base = start; base < end; base += 32) {
        const i64 j = base + lane;
        const u32 d = sort_digit(keys, j, end, shift);
        const unsigned peers = __match_any_sync(0xffffffffu, d);
        if (d < RB_SORT_BUCKETS) {
            const u32 slot = next[d] + __popc(peers & ((1u << lane) - 1));
            keys_out[slot] = keys[j];
            vals_out[slot] = vals[j];
        }
        __syncwarp();
        if (d < RB_SORT_BUCKETS && lane == __ffs(peers) - 1) next[d] += __popc(peers);
        __syncwarp();
    }
}

// Block (s, y): if sorted entry s starts a run of one target row, threads y * blockDim.x + t
// (the target's columns: outer x inner) add the run's source values in entry order onto that
// row, starting from what the row holds (as the CPU adds into its base). Every (row, column)
// has one writer, so no atomics.
template <class S>
__device__ void sorted_add_rows_impl(typename Acc<S>::type* out, const u32* keys, const u32* vals, i64 m,
                                     i64 dim_size, i64 inner, i64 cols, const S* src, Strided ss) {
    const i64 s = blockIdx.x;
    const u32 key = keys[s];
    if (key >= dim_size || (s > 0 && keys[s - 1] == key)) return;
    const i64 c = (i64)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    i64 end = s + 1;
    while (end < m && keys[end] == key) ++end;
    const i64 o = c / inner, in = c - o * inner;
    typename Acc<S>::type* target = out + (o * dim_size + key) * inner + in;
    typename Acc<S>::type sum = *target;
#pragma unroll 8
    for (i64 e = s; e < end; ++e) sum += to_acc(src[strided_offset(ss, (o * m + vals[e]) * inner + in)]);
    *target = sum;
}
#define RB_SORTED_ADD_ROWS(name, S)                                                                        \
    RB_KERNEL(sorted_add_rows_##name)(Acc<S>::type* out, const u32* keys, const u32* vals, \
                                                      i64 m, i64 dim_size, i64 inner, i64 cols,            \
                                                      const S* src, Strided ss) {                          \
        sorted_add_rows_impl<S>(out, keys, vals, m, dim_size, inner, cols, src, ss);                       \
    }
RB_SORTED_ADD_ROWS(bf16, bf16)
RB_SORTED_ADD_ROWS(f16, f16)
RB_SORTED_ADD_ROWS(f32, f32)
RB_SORTED_ADD_ROWS(f64, f64)
