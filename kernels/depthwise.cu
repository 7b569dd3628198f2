// Depthwise convolution: groups == channels == outputs, one KH×KW filter per channel, weights
// [C, KH*KW] (OIHW with I = 1 and O·kh·kw·I are the same bytes). Images are NCHW or NHWC; the
// output of each pass is in the images' layout. Every pass gathers, so no atomics and a fixed
// order: the forward and the input gradient sum taps in (ky, kx) order per output element; the
// weight gradient sums fixed chunks of pixels per block (partials, in Acc<T>) and then the
// chunks in order (dw_wgrad_sum). Indices are 32-bit: the host sends only tensors below 2^31
// elements here. Only 3×3 filters are instantiated (YOLO's and MobileNet's common size; each
// further size costs NVRTC seconds of first-use compile time); the host sends others to cuDNN.

// Mirrors `DwGeom` in backend/src/cuda/depthwise.rs field for field.
struct DwGeom {
    int n, c, h, w, ho, wo, sh, sw, ph, pw, dh, dw;
};

// Element (n, c, y, x) of an [n, c, h, w] tensor laid out NCHW or NHWC.
template <bool NHWC>
__device__ __forceinline__ int dw_at(int n, int c, int y, int x, int C, int H, int W) {
    return NHWC ? ((n * H + y) * W + x) * C + c : ((n * C + c) * H + y) * W + x;
}

// (n, c, y, x) of the i-th element of an [n, c, h, w] tensor in its layout.
template <bool NHWC>
__device__ __forceinline__ void dw_coords(unsigned i, int C, int H, int W, int& n, int& c, int& y,
                                          int& x) {
    if (NHWC) {
        c = i % C; i /= C;
        x = i % W; i /= W;
        y = i % H;
        n = i / H;
    } else {
        x = i % W; i /= W;
        y = i % H; i /= H;
        c = i % C;
        n = i / C;
    }
}

// y[n, c, oy, ox] = sum over taps of x[n, c, oy*s - p + ky*d, ox*s - p + kx*d] * w[c, ky, kx].
template <class T, int KH, int KW, bool NHWC>
__device__ void dw_forward(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                           DwGeom g) {
    typedef typename Acc<T>::type A;
    const int total = g.n * g.c * g.ho * g.wo;
    RB_GRID_LOOP(i, total) {
        int n, c, oy, ox;
        dw_coords<NHWC>((unsigned)i, g.c, g.ho, g.wo, n, c, oy, ox);
        A s = (A)0;
#pragma unroll
        for (int ky = 0; ky < KH; ++ky) {
            const int iy = oy * g.sh - g.ph + ky * g.dh;
            if (iy < 0 || iy >= g.h) continue;
#pragma unroll
            for (int kx = 0; kx < KW; ++kx) {
                const int ix = ox * g.sw - g.pw + kx * g.dw;
                if (ix < 0 || ix >= g.w) continue;
                s += to_acc(x[dw_at<NHWC>(n, c, iy, ix, g.c, g.h, g.w)]) *
                     to_acc(w[c * (KH * KW) + ky * KW + kx]);
            }
        }
        y[i] = from_acc<T>(s);
    }
}

// dx[n, c, iy, ix] = sum over the taps that read (iy, ix) of dy[n, c, oy, ox] * w[c, ky, kx].
template <class T, int KH, int KW, bool NHWC>
__device__ void dw_input_grad(const T* __restrict__ dy, const T* __restrict__ w,
                              T* __restrict__ dx, DwGeom g) {
    typedef typename Acc<T>::type A;
    const int total = g.n * g.c * g.h * g.w;
    RB_GRID_LOOP(i, total) {
        int n, c, iy, ix;
        dw_coords<NHWC>((unsigned)i, g.c, g.h, g.w, n, c, iy, ix);
        A s = (A)0;
#pragma unroll
        for (int ky = 0; ky < KH; ++ky) {
            const int ty = iy + g.ph - ky * g.dh;
            if (ty < 0 || ty % g.sh != 0) continue;
            const int oy = ty / g.sh;
            if (oy >= g.ho) continue;
#pragma unroll
            for (int kx = 0; kx < KW; ++kx) {
                const int tx = ix + g.pw - kx * g.dw;
                if (tx < 0 || tx % g.sw != 0) continue;
                const int ox = tx / g.sw;
                if (ox >= g.wo) continue;
                s += to_acc(dy[dw_at<NHWC>(n, c, oy, ox, g.c, g.ho, g.wo)]) *
                     to_acc(w[c * (KH * KW) + ky * KW + kx]);
            }
        }
        dx[i] = from_acc<T>(s);
    }
}

// Adds dy[n, c, oy, ox] * x[...tap...] into acc[tap] for every tap of one output pixel.
template <class T, class A, int KH, int KW, bool NHWC>
__device__ __forceinline__ void dw_wgrad_pixel(const T* __restrict__ x, const T* __restrict__ dy,
                                               const DwGeom& g, int n, int c, int oy, int ox,
                                               A* acc) {
    const A d = to_acc(dy[dw_at<NHWC>(n, c, oy, ox, g.c, g.ho, g.wo)]);
#pragma unroll
    for (int ky = 0; ky < KH; ++ky) {
        const int iy = oy * g.sh - g.ph + ky * g.dh;
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) {
            const int ix = ox * g.sw - g.pw + kx * g.dw;
            if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                acc[ky * KW + kx] += d * to_acc(x[dw_at<NHWC>(n, c, iy, ix, g.c, g.h, g.w)]);
        }
    }
}

// ----- stride 1, dilation 1: strips -----
// The common case (every depthwise convolution of YOLO and MobileNet's stride-1 blocks) runs on
// strips of DW_STRIP consecutive outputs of one row per thread: each input row a strip needs is
// read once as DW_STRIP + KW - 1 values and reused by every tap, and the index arithmetic is
// paid once per strip. The per-element kernels above spent most of their time on that
// arithmetic (4× PyTorch's time on the H200).
#define DW_STRIP 8

// Row iy of image n, channel c, columns x0 .. x0 + DW_STRIP + KW - 2 (zero outside the image).
template <class T, int KW, bool NHWC>
__device__ __forceinline__ void dw_row(const T* __restrict__ x, int n, int c, int iy, int x0,
                                       int C, int H, int W, typename Acc<T>::type* r) {
    typedef typename Acc<T>::type A;
#pragma unroll
    for (int j = 0; j < DW_STRIP + KW - 1; ++j) {
        const int ix = x0 + j;
        r[j] = ix >= 0 && ix < W ? to_acc(x[dw_at<NHWC>(n, c, iy, ix, C, H, W)]) : (A)0;
    }
}

// (n, c, oy, strip) of the i-th strip of an [n, c, ho, strips] grid in the layout's order:
// NCHW strips fastest; NHWC channels fastest, so a warp reads neighbouring channels.
template <bool NHWC>
__device__ __forceinline__ void dw_strip_coords(unsigned i, int C, int Ho, int strips, int& n,
                                                int& c, int& oy, int& s) {
    if (NHWC) {
        c = i % C; i /= C;
        s = i % strips; i /= strips;
        oy = i % Ho;
        n = i / Ho;
    } else {
        s = i % strips; i /= strips;
        oy = i % Ho; i /= Ho;
        c = i % C;
        n = i / C;
    }
}

// y = the stride-1 convolution of x [n, c, h, w] with padding (ph, pw); with FLIP the taps
// are mirrored, which makes it the input gradient: dy convolved with the mirrored filter and
// padding (KH-1-ph, KW-1-pw) is dx. Sums in Acc<T>, as the per-element kernels.
template <class T, int KH, int KW, bool NHWC, bool FLIP>
__device__ void dw_strips(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                          int N, int C, int H, int W, int Ho, int Wo, int ph, int pw) {
    typedef typename Acc<T>::type A;
    const int strips = (Wo + DW_STRIP - 1) / DW_STRIP;
    const int total = N * C * Ho * strips;
    RB_GRID_LOOP(i, total) {
        int n, c, oy, s;
        dw_strip_coords<NHWC>((unsigned)i, C, Ho, strips, n, c, oy, s);
        const int ox0 = s * DW_STRIP;
        A acc[DW_STRIP];
#pragma unroll
        for (int j = 0; j < DW_STRIP; ++j) acc[j] = (A)0;
#pragma unroll
        for (int ky = 0; ky < KH; ++ky) {
            const int iy = oy - ph + ky;
            if (iy < 0 || iy >= H) continue;
            A r[DW_STRIP + KW - 1];
            dw_row<T, KW, NHWC>(x, n, c, iy, ox0 - pw, C, H, W, r);
#pragma unroll
            for (int kx = 0; kx < KW; ++kx) {
                const int tap = FLIP ? (KH - 1 - ky) * KW + (KW - 1 - kx) : ky * KW + kx;
                const A wk = to_acc(w[c * (KH * KW) + tap]);
#pragma unroll
                for (int j = 0; j < DW_STRIP; ++j) acc[j] += r[j + kx] * wk;
            }
        }
#pragma unroll
        for (int j = 0; j < DW_STRIP; ++j)
            if (ox0 + j < Wo) y[dw_at<NHWC>(n, c, oy, ox0 + j, C, Ho, Wo)] = from_acc<T>(acc[j]);
    }
}

// The strip of dy at (n, c, oy, ox0..) into d, and the taps' products with x into acc.
template <class T, class A, int KH, int KW, bool NHWC>
__device__ __forceinline__ void dw_wgrad_strip(const T* __restrict__ x, const T* __restrict__ dy,
                                               const DwGeom& g, int n, int c, int oy, int ox0,
                                               A* acc) {
    A d[DW_STRIP];
#pragma unroll
    for (int j = 0; j < DW_STRIP; ++j)
        d[j] = ox0 + j < g.wo ? to_acc(dy[dw_at<NHWC>(n, c, oy, ox0 + j, g.c, g.ho, g.wo)]) : (A)0;
#pragma unroll
    for (int ky = 0; ky < KH; ++ky) {
        const int iy = oy - g.ph + ky;
        if (iy < 0 || iy >= g.h) continue;
        A r[DW_STRIP + KW - 1];
        dw_row<T, KW, NHWC>(x, n, c, iy, ox0 - g.pw, g.c, g.h, g.w, r);
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) {
            A s = (A)0;
#pragma unroll
            for (int j = 0; j < DW_STRIP; ++j) s += d[j] * r[j + kx];
            acc[ky * KW + kx] += s;
        }
    }
}

// One output item of the weight gradient's first stage: a pixel, or with STRIPS a strip of
// DW_STRIP pixels of one row (`per_row` strips a row); `q` counts items row by row.
template <class T, class A, int KH, int KW, bool NHWC, bool STRIPS>
__device__ __forceinline__ void dw_wgrad_item(const T* __restrict__ x, const T* __restrict__ dy,
                                              const DwGeom& g, int n, int c, int q, int per_row,
                                              A* acc) {
    const int oy = q / per_row, at = q % per_row;
    if (STRIPS)
        dw_wgrad_strip<T, A, KH, KW, NHWC>(x, dy, g, n, c, oy, at * DW_STRIP, acc);
    else
        dw_wgrad_pixel<T, A, KH, KW, NHWC>(x, dy, g, n, c, oy, at, acc);
}

// The weight gradient's first stage, NCHW: block (c, n) sums its plane's items into
// parts[(n * C + c) * K + tap]; 256 threads stride over the plane, taps reduce over the block.
template <class T, int KH, int KW, bool STRIPS>
__device__ void dw_wgrad_nchw(const T* __restrict__ x, const T* __restrict__ dy,
                              typename Acc<T>::type* __restrict__ parts, DwGeom g) {
    typedef typename Acc<T>::type A;
    __shared__ A scratch[32];
    const int c = blockIdx.x, n = blockIdx.y;
    const int per_row = STRIPS ? (g.wo + DW_STRIP - 1) / DW_STRIP : g.wo;
    A acc[KH * KW];
#pragma unroll
    for (int k = 0; k < KH * KW; ++k) acc[k] = (A)0;
    for (int q = threadIdx.x; q < g.ho * per_row; q += blockDim.x)
        dw_wgrad_item<T, A, KH, KW, false, STRIPS>(x, dy, g, n, c, q, per_row, acc);
#pragma unroll
    for (int k = 0; k < KH * KW; ++k) {
        const A s = block_sum(acc[k], scratch);
        if (threadIdx.x == 0) parts[((i64)n * g.c + c) * (KH * KW) + k] = s;
    }
}

// NHWC: a block of 256 threads, 32 channels × 8 lanes (a warp is one lane, so it reads 32
// neighbouring channels of one pixel), sums items [chunk*per, (chunk+1)*per) of the n*ho rows'
// items into parts[(chunk * C + c) * K + tap].
template <class T, int KH, int KW, bool STRIPS>
__device__ void dw_wgrad_nhwc(const T* __restrict__ x, const T* __restrict__ dy,
                              typename Acc<T>::type* __restrict__ parts, DwGeom g, int per) {
    typedef typename Acc<T>::type A;
    __shared__ A lanes[8][33];
    const int lane = threadIdx.x & 31, row = threadIdx.x >> 5;
    const int c = blockIdx.x * 32 + lane, chunk = blockIdx.y;
    const int per_row = STRIPS ? (g.wo + DW_STRIP - 1) / DW_STRIP : g.wo;
    const int items_per_image = g.ho * per_row;
    const int first = chunk * per, last = min(first + per, g.n * items_per_image);
    A acc[KH * KW];
#pragma unroll
    for (int k = 0; k < KH * KW; ++k) acc[k] = (A)0;
    if (c < g.c) {
        for (int q = first + row; q < last; q += 8) {
            const int n = q / items_per_image;
            dw_wgrad_item<T, A, KH, KW, true, STRIPS>(x, dy, g, n, c, q - n * items_per_image,
                                                      per_row, acc);
        }
    }
#pragma unroll
    for (int k = 0; k < KH * KW; ++k) {
        lanes[row][lane] = acc[k];
        __syncthreads();
        if (row == 0 && c < g.c) {
            A s = (A)0;
#pragma unroll
            for (int l = 0; l < 8; ++l) s += lanes[l][lane];
            parts[((i64)chunk * g.c + c) * (KH * KW) + k] = s;
        }
        __syncthreads();
    }
}

// Second stage: dw[c, tap] = the sum of the chunks' partials, in chunk order.
template <class T>
__device__ void dw_wgrad_sum_impl(const typename Acc<T>::type* __restrict__ parts,
                                  T* __restrict__ dw, int chunks, int ck) {
    typedef typename Acc<T>::type A;
    RB_GRID_LOOP(i, ck) {
        A s = (A)0;
        for (int j = 0; j < chunks; ++j) s += parts[(i64)j * ck + i];
        dw[i] = from_acc<T>(s);
    }
}

#define RB_DW_LAYOUT(name, T, KH, KW, layout, NHWC)                                                 \
    RB_KERNEL(dw_fwd1_##layout##_##KH##x##KW##_##name)(const T* x, const T* w, T* y, \
                                                                       DwGeom g) {                   \
        dw_strips<T, KH, KW, NHWC, false>(x, w, y, g.n, g.c, g.h, g.w, g.ho, g.wo, g.ph, g.pw);      \
    }                                                                                                \
    RB_KERNEL(dw_dgrad1_##layout##_##KH##x##KW##_##name)(const T* dy, const T* w,    \
                                                                         T* dx, DwGeom g) {          \
        dw_strips<T, KH, KW, NHWC, true>(dy, w, dx, g.n, g.c, g.ho, g.wo, g.h, g.w, KH - 1 - g.ph,   \
                                         KW - 1 - g.pw);                                             \
    }                                                                                                \
    RB_KERNEL(dw_fwd_##layout##_##KH##x##KW##_##name)(const T* x, const T* w, T* y,  \
                                                                      DwGeom g) {                    \
        dw_forward<T, KH, KW, NHWC>(x, w, y, g);                                                     \
    }                                                                                                \
    RB_KERNEL(dw_dgrad_##layout##_##KH##x##KW##_##name)(const T* dy, const T* w,     \
                                                                        T* dx, DwGeom g) {           \
        dw_input_grad<T, KH, KW, NHWC>(dy, w, dx, g);                                                \
    }

#define RB_DW_WGRAD(name, T, KH, KW, tag, STRIPS)                                                    \
    RB_KERNEL(dw_wgrad##tag##_nchw_##KH##x##KW##_##name)(                            \
        const T* x, const T* dy, typename Acc<T>::type* parts, DwGeom g, int per) {                  \
        dw_wgrad_nchw<T, KH, KW, STRIPS>(x, dy, parts, g);                                           \
    }                                                                                                \
    RB_KERNEL(dw_wgrad##tag##_nhwc_##KH##x##KW##_##name)(                            \
        const T* x, const T* dy, typename Acc<T>::type* parts, DwGeom g, int per) {                  \
        dw_wgrad_nhwc<T, KH, KW, STRIPS>(x, dy, parts, g, per);                                      \
    }

#define RB_DW_SIZE(name, T, KH, KW)                                                                  \
    RB_DW_LAYOUT(name, T, KH, KW, nchw, false)                                                       \
    RB_DW_LAYOUT(name, T, KH, KW, nhwc, true)                                                        \
    RB_DW_WGRAD(name, T, KH, KW, , false)                                                            \
    RB_DW_WGRAD(name, T, KH, KW, 1, true)

#define RB_DW(name, T)                                                                               \
    RB_DW_SIZE(name, T, 3, 3)                                                                        \
    RB_KERNEL(dw_wgrad_sum_##name)(const typename Acc<T>::type* parts, T* dw,        \
                                                   int chunks, int ck) {                             \
        dw_wgrad_sum_impl<T>(parts, dw, chunks, ck);                                                 \
    }
RB_FOR_FLOAT_TYPES(RB_DW)
