// Batched non-maximum suppression of a YOLO head output [batch, channels, anchors] with the
// semantics of the CPU path (engine/src/vision/nms.rs), kept row for row:
//   1. nms_candidates: each (image, anchor) whose best class score beats `conf` gives its rows
//      (every class above `conf` when multi-label, else the first best class), each as a key
//      (~score bits) << 32 | (anchor * nc + class). Slots come from a per-image counter, so
//      their positions vary between runs; the sort makes the order exact again.
//   2. nms_sort: one block per image sorts its keys ascending (bitonic, in global memory):
//      descending score, then ascending row, which is the CPU's stable sort of rows laid out
//      by anchor, then class. Scores here are above conf >= 0, so never NaN or -0, and the
//      bits of positive floats order as the values do.
//   3. nms_suppress: one block per image walks the first max_nms rows in that order, keeps a
//      row unless suppressed, and marks every later row whose IoU with it is above `iou`;
//      it stops at max_det kept rows. The IoU is the CPU's f32 arithmetic with each operation
//      rounded on its own (no fused multiply-adds), compared in double.

// Mirrors `NmsGeom` in backend/src/cuda/nms.rs field for field.
struct NmsGeom {
    int batch, channels, anchors, nc, multi_label, max_nms, max_det, cap;
    float conf, offset;
    double iou;
};

// Image b's block of the head output: channel k of anchor a is at [k * anchors + a].
template <class T>
__device__ __forceinline__ float nms_at(const T* pred, const NmsGeom& g, int b, int k, int a) {
    return to_f(pred[((i64)b * g.channels + k) * g.anchors + a]);
}

// The anchor's box as corners, as `xywh_to_xyxy` computes it.
template <class T>
__device__ __forceinline__ void nms_box(const T* pred, const NmsGeom& g, int b, int a, float* o) {
    const float cx = nms_at(pred, g, b, 0, a), cy = nms_at(pred, g, b, 1, a);
    const float hw = __fdiv_rn(nms_at(pred, g, b, 2, a), 2.0f);
    const float hh = __fdiv_rn(nms_at(pred, g, b, 3, a), 2.0f);
    o[0] = __fsub_rn(cx, hw);
    o[1] = __fsub_rn(cy, hh);
    o[2] = __fadd_rn(cx, hw);
    o[3] = __fadd_rn(cy, hh);
}

__device__ __forceinline__ u64 nms_key(float score, int row) {
    return ((u64)(~__float_as_uint(score)) << 32) | (u64)(u32)row;
}

// One thread per (image, anchor), blocks of consecutive anchors; a block's rows take their
// slots from a shared counter per image it touches, then one global add per image.
template <class T>
__device__ void nms_candidates_impl(const T* pred, const u8* keep_class, u64* keys, int* counts,
                                    NmsGeom g) {
    extern __shared__ int s_counts[]; // [span] counts, then [span] bases
    const i64 first = (i64)blockIdx.x * blockDim.x;
    const i64 i = first + threadIdx.x;
    const i64 total = (i64)g.batch * g.anchors;
    const int b_first = (int)(first / g.anchors);
    const i64 last = min(first + (i64)blockDim.x, total) - 1;
    const int span = (int)(last / g.anchors) - b_first + 1;
    int* s_base = s_counts + span;
    for (int k = threadIdx.x; k < span; k += blockDim.x) s_counts[k] = 0;
    __syncthreads();

    int b = 0, a = 0, rows = 0, local = 0, best_class = 0;
    float best = -INFINITY;
    if (i < total) {
        b = (int)(i / g.anchors);
        a = (int)(i - (i64)b * g.anchors);
        // The largest score; NaN wins, as torch's amax propagates it.
        for (int k = 0; k < g.nc; ++k) {
            const float v = nms_at(pred, g, b, 4 + k, a);
            if (!(best != best) && (v != v || v > best)) best = v;
        }
        if (best > g.conf) {
            if (g.multi_label) {
                for (int k = 0; k < g.nc; ++k)
                    rows += nms_at(pred, g, b, 4 + k, a) > g.conf && keep_class[k];
            } else {
                // torch's max(1): the first index of the largest value.
                float s = nms_at(pred, g, b, 4, a);
                for (int k = 1; k < g.nc; ++k) {
                    const float v = nms_at(pred, g, b, 4 + k, a);
                    if (v > s) { s = v; best_class = k; }
                }
                best = s;
                rows = keep_class[best_class] ? 1 : 0;
            }
        }
        if (rows > 0) local = atomicAdd(&s_counts[b - b_first], rows);
    }
    __syncthreads();
    for (int k = threadIdx.x; k < span; k += blockDim.x)
        s_base[k] = s_counts[k] > 0 ? atomicAdd(&counts[b_first + k], s_counts[k]) : 0;
    __syncthreads();
    if (rows == 0) return;
    int slot = s_base[b - b_first] + local;
    u64* image_keys = keys + (i64)b * g.cap;
    if (g.multi_label) {
        for (int k = 0; k < g.nc; ++k) {
            const float v = nms_at(pred, g, b, 4 + k, a);
            if (v > g.conf && keep_class[k] && slot < g.cap) image_keys[slot++] = nms_key(v, a * g.nc + k);
        }
    } else if (slot < g.cap) {
        image_keys[slot] = nms_key(best, a * g.nc + best_class);
    }
}

// One block per image: sorts its first counts[b] keys ascending, padded to a power of two with
// the largest key.
__device__ void nms_sort_impl(u64* keys, const int* counts, NmsGeom g) {
    const int b = blockIdx.x;
    const int n = min(counts[b], g.cap);
    int p = 1;
    while (p < n) p <<= 1;
    u64* k = keys + (i64)b * g.cap;
    for (int i = n + threadIdx.x; i < p; i += blockDim.x) k[i] = ~0ull;
    __syncthreads();
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < p; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    const u64 x = k[i], y = k[j];
                    const bool ascending = (i & size) == 0;
                    if ((x > y) == ascending) {
                        k[i] = y;
                        k[j] = x;
                    }
                }
            }
            __syncthreads();
        }
    }
}

// C++'s std::max / std::min, whose NaN behaviour the CPU path copies.
__device__ __forceinline__ float cpp_max(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float cpp_min(float a, float b) { return b < a ? b : a; }

// One block per image: greedy suppression over the sorted rows. `boxes` is scratch for
// [batch, max_nms] class-shifted boxes and areas (5 floats each); a bit per row in shared
// memory marks suppression. Writes the kept rows' (row, x1, y1, x2, y2, score) and the count.
template <class T>
__device__ void nms_suppress_impl(const T* pred, const u64* keys, const int* counts,
                                  float* boxes, u32* out_rows, float* out_vals, int* out_counts,
                                  NmsGeom g) {
    extern __shared__ u32 suppressed[];
    const int b = blockIdx.x;
    const int m = min(min(counts[b], g.cap), g.max_nms);
    const int words = (m + 31) >> 5;
    const u64* k = keys + (i64)b * g.cap;
    float* bx = boxes + (i64)b * g.max_nms * 5;
    for (int w = threadIdx.x; w < words; w += blockDim.x) suppressed[w] = 0;
    for (int j = threadIdx.x; j < m; j += blockDim.x) {
        const int row = (int)(u32)k[j];
        float o[4];
        nms_box(pred, g, b, row / g.nc, o);
        const float shift = __fmul_rn((float)(row % g.nc), g.offset);
        for (int c = 0; c < 4; ++c) bx[j * 5 + c] = __fadd_rn(o[c], shift);
        bx[j * 5 + 4] = __fmul_rn(__fsub_rn(bx[j * 5 + 2], bx[j * 5]), __fsub_rn(bx[j * 5 + 3], bx[j * 5 + 1]));
    }
    __syncthreads();
    int kept = 0;
    int i = 0;
    while (kept < g.max_det) {
        // The next row not suppressed, from i on (every thread finds the same one).
        int w = i >> 5;
        if (w >= words) break;
        u32 free_bits = ~suppressed[w] & (0xffffffffu << (i & 31));
        while (free_bits == 0 && ++w < words) free_bits = ~suppressed[w];
        if (free_bits == 0) break;
        i = (w << 5) + __ffs(free_bits) - 1;
        if (i >= m) break;
        if (threadIdx.x == 0) {
            const u64 key = k[i];
            const int row = (int)(u32)key;
            const i64 o = (i64)b * g.max_det + kept;
            out_rows[o] = (u32)row;
            float box[4];
            nms_box(pred, g, b, row / g.nc, box);
            for (int c = 0; c < 4; ++c) out_vals[o * 5 + c] = box[c];
            out_vals[o * 5 + 4] = __uint_as_float(~(u32)(key >> 32));
        }
        ++kept;
        const float x1 = bx[i * 5], y1 = bx[i * 5 + 1], x2 = bx[i * 5 + 2], y2 = bx[i * 5 + 3];
        const float area = bx[i * 5 + 4];
        for (int j = i + 1 + threadIdx.x; j < m; j += blockDim.x) {
            if (suppressed[j >> 5] & (1u << (j & 31))) continue;
            const float* q = bx + j * 5;
            const float w_ = cpp_max(0.0f, __fsub_rn(cpp_min(x2, q[2]), cpp_max(x1, q[0])));
            const float h_ = cpp_max(0.0f, __fsub_rn(cpp_min(y2, q[3]), cpp_max(y1, q[1])));
            const float inter = __fmul_rn(w_, h_);
            const float iou = __fdiv_rn(inter, __fsub_rn(__fadd_rn(area, q[4]), inter));
            if ((double)iou > g.iou) atomicOr(&suppressed[j >> 5], 1u << (j & 31));
        }
        __syncthreads();
        ++i;
    }
    if (threadIdx.x == 0) out_counts[b] = kept;
}

RB_KERNEL(nms_sort)(u64* keys, const int* counts, NmsGeom g) {
    nms_sort_impl(keys, counts, g);
}

#define RB_NMS(name, T)                                                                             \
    RB_KERNEL(nms_candidates_##name)(const T* pred, const u8* keep_class,           \
                                                     u64* keys, int* counts, NmsGeom g) {           \
        nms_candidates_impl<T>(pred, keep_class, keys, counts, g);                                  \
    }                                                                                               \
    RB_KERNEL(nms_suppress_##name)(const T* pred, const u64* keys,                  \
                                                   const int* counts, float* boxes, u32* out_rows,  \
                                                   float* out_vals, int* out_counts, NmsGeom g) {   \
        nms_suppress_impl<T>(pred, keys, counts, boxes, out_rows, out_vals, out_counts, g);         \
    }
RB_NMS(bf16, bf16)
RB_NMS(f16, f16)
RB_NMS(f32, f32)
