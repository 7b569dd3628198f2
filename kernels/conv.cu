// conv2d's data movement; the products run in cuBLAS. im2col lays a chunk of `n` contiguous
// images [n, C, H, W] out as columns [C*kh*kw, n*Ho*Wo], row (c*kh + ky)*kw + kx, column
// (img*Ho + oy)*Wo + ox, so group g's rows are one contiguous block [Cg*kh*kw, n*Ho*Wo] and a
// single batched GEMM over groups covers the whole chunk. col2im is its adjoint in gather form:
// each input pixel sums the columns that read it, so no atomics and a fixed order.

// Mirrors `ConvGeom` in backend/cuda/conv.rs field for field.
struct ConvGeom {
    i64 n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo;
};

template <class T>
__device__ void im2col_impl(const T* x, T* cols, ConvGeom g, i64 total) {
    const T zero = from_f<T>(0.0f);
    RB_GRID_LOOP(i, total) {
        i64 t = i;
        i64 ox = t % g.wo; t /= g.wo;
        i64 oy = t % g.ho; t /= g.ho;
        i64 img = t % g.n; t /= g.n;
        i64 kx = t % g.kw; t /= g.kw;
        i64 ky = t % g.kh;
        i64 c = t / g.kh;
        i64 y = oy * g.sh + ky * g.dh - g.ph;
        i64 xx = ox * g.sw + kx * g.dw - g.pw;
        bool inside = y >= 0 && y < g.h && xx >= 0 && xx < g.w;
        cols[i] = inside ? x[((img * g.c + c) * g.h + y) * g.w + xx] : zero;
    }
}

template <class T>
__device__ void col2im_impl(const T* cols, T* dx, ConvGeom g, i64 total) {
    typedef typename Acc<T>::type A;
    i64 row_len = g.n * g.ho * g.wo;
    RB_GRID_LOOP(i, total) {
        i64 t = i;
        i64 xx = t % g.w; t /= g.w;
        i64 y = t % g.h; t /= g.h;
        i64 c = t % g.c;
        i64 img = t / g.c;
        A s = (A)0;
        // Taps in (ky, kx) order, as the CPU's col2im adds them.
        for (i64 ky = 0; ky < g.kh; ++ky) {
            i64 ty = y + g.ph - ky * g.dh;
            if (ty < 0 || ty % g.sh != 0) continue;
            i64 oy = ty / g.sh;
            if (oy >= g.ho) continue;
            for (i64 kx = 0; kx < g.kw; ++kx) {
                i64 tx = xx + g.pw - kx * g.dw;
                if (tx < 0 || tx % g.sw != 0) continue;
                i64 ox = tx / g.sw;
                if (ox >= g.wo) continue;
                i64 row = (c * g.kh + ky) * g.kw + kx;
                s += to_acc(cols[row * row_len + (img * g.ho + oy) * g.wo + ox]);
            }
        }
        dx[i] = from_acc<T>(s);
    }
}

#define RB_CONV(name, T)                                                                       \
    RB_KERNEL(im2col_##name)(const T* x, T* cols, ConvGeom g, i64 total) {      \
        im2col_impl<T>(x, cols, g, total);                                                      \
    }                                                                                           \
    RB_KERNEL(col2im_##name)(const T* cols, T* dx, ConvGeom g, i64 total) {     \
        col2im_impl<T>(cols, dx, g, total);                                                     \
    }
RB_FOR_FLOAT_TYPES(RB_CONV)
