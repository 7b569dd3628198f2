// Copies and casts between any two views: contiguous(), to_dtype(), copy_() into a view, cat.
// A view of rank 0 in `Strided` means "contiguous from offset" (see common.cuh).

// Same element type: a copy by element size, whatever the dtype.
template <class T>
__device__ void copy_impl(const T* x, Strided xs, T* y, Strided ys, i64 n) {
    RB_GRID_LOOP(i, n) { y[strided_offset(ys, i)] = x[strided_offset(xs, i)]; }
}
RB_KERNEL(copy_1)(const u8* x, Strided xs, u8* y, Strided ys, i64 n) { copy_impl(x, xs, y, ys, n); }
RB_KERNEL(copy_2)(const unsigned short* x, Strided xs, unsigned short* y, Strided ys, i64 n) { copy_impl(x, xs, y, ys, n); }
RB_KERNEL(copy_4)(const u32* x, Strided xs, u32* y, Strided ys, i64 n) { copy_impl(x, xs, y, ys, n); }
RB_KERNEL(copy_8)(const u64* x, Strided xs, u64* y, Strided ys, i64 n) { copy_impl(x, xs, y, ys, n); }

// Same element type, rows of `words` 16-byte words at a stride on each side (`Layout::as_rows`):
// one part of each row of a wider matrix, as a concatenation along the last dim writes it.
RB_KERNEL(copy_rows16)(const uint4* x, i64 x_ld, uint4* y, i64 y_ld, i64 rows, i64 words) {
    RB_GRID_LOOP(i, rows * words) {
        const i64 r = i / words, c = i - r * words;
        y[r * y_ld + c] = x[r * x_ld + c];
    }
}

// Conversions go through double with saturation, exactly as the CPU backend's `as` casts do;
// a cast to bool tests for non-zero.
template <class S, class D, bool TO_BOOL>
__device__ void cast_impl(const S* x, Strided xs, D* y, Strided ys, i64 n) {
    RB_GRID_LOOP(i, n) {
        double v = to_d(x[strided_offset(xs, i)]);
        y[strided_offset(ys, i)] = TO_BOOL ? (D)(v != 0.0) : from_d<D>(v);
    }
}

#define RB_CAST(sn, S, dn, D, TB) \
    RB_KERNEL(cast_##sn##_##dn)(const S* x, Strided xs, D* y, Strided ys, i64 n) { cast_impl<S, D, TB>(x, xs, y, ys, n); }
#define RB_CAST_FROM(sn, S) \
    RB_CAST(sn, S, bool, u8, true) RB_CAST(sn, S, u8, u8, false) RB_CAST(sn, S, u32, u32, false) \
    RB_CAST(sn, S, i64, i64, false) RB_CAST(sn, S, bf16, bf16, false) RB_CAST(sn, S, f16, f16, false) \
    RB_CAST(sn, S, f32, f32, false) RB_CAST(sn, S, f64, f64, false)
RB_FOR_ALL_TYPES(RB_CAST_FROM)

// Contiguous casts between the 16- and 32-bit floats, eight elements a thread in 16-byte words
// (both buffers 16-byte aligned; the host checks). Through float, which for these types is what
// the double path above computes too, so the two kernels agree bit for bit.
template <class S, class D>
__device__ void cast_vec_impl(const S* x, D* y, i64 n) {
    const i64 groups = n / 8;
    RB_GRID_LOOP(g, groups) {
        float v[8];
        Eight<S>::load(x + g * 8, v);
        Eight<D>::store(y + g * 8, v);
    }
    for (i64 i = groups * 8 + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)blockDim.x * gridDim.x)
        y[i] = from_f<D>(to_f(x[i]));
}
#define RB_CAST_VEC(sn, S, dn, D) \
    RB_KERNEL(cast_vec_##sn##_##dn)(const S* x, D* y, i64 n) { cast_vec_impl<S, D>(x, y, n); }
RB_CAST_VEC(f32, f32, bf16, bf16) RB_CAST_VEC(f32, f32, f16, f16) RB_CAST_VEC(bf16, bf16, f32, f32)
RB_CAST_VEC(f16, f16, f32, f32) RB_CAST_VEC(bf16, bf16, f16, f16) RB_CAST_VEC(f16, f16, bf16, bf16)

// Fills a view with one value (given as double, converted once).
template <class T>
__device__ void fill_impl(T* y, Strided ys, double v, i64 n) {
    T value = from_d<T>(v);
    RB_GRID_LOOP(i, n) { y[strided_offset(ys, i)] = value; }
}
#define RB_FILL(name, T) \
    RB_KERNEL(fill_##name)(T* y, Strided ys, double v, i64 n) { fill_impl<T>(y, ys, v, n); }
RB_FOR_ALL_TYPES(RB_FILL)
