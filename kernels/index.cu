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
    extern "C" __global__ void index_read_##bytes(const T* x, IndexGeom g, const void* idx, Strided is, \
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
extern "C" __global__ void index_rows16(const uint4* x, i64 stride_words, i64 dim_size, const void* idx, Strided is,
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
    extern "C" __global__ void index_write_##bytes(T* y, IndexGeom g, const void* idx, Strided is, int kind, \
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
    extern "C" __global__ void index_add_##name(Acc<S>::type* out, IndexGeom g, const void* idx,      \
                                                Strided is, int kind, int per_element, const S* src,   \
                                                Strided ss, i64 n, u32* err, u32 code) {               \
        index_add_impl<S>(out, g, idx, is, kind, per_element, src, ss, n, err, code);                  \
    }
RB_FOR_NUMERIC_TYPES(RB_INDEX_ADD)
