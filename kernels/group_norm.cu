// Group normalization in one kernel for inference: one block per (image, group) reduces the
// group's values (its channels at every position) to a mean and variance in FP32, then writes
// (x - mean) * rstd * weight[c] + bias[c], optionally through SiLU, in x's dtype and layout.
// x is [N, C, HW] either channel-major (NCHW: a group's values are one contiguous run) or
// channels-last (NHWC: each position holds the group's channels side by side).
//
// The variance comes from sums of (x - shift) and its square, the shift being the group's
// first value, so a group whose values sit far from zero loses no precision to cancellation.

#define GN_THREADS 512

// The offset of the group's element e (of cpg * hw) from the image's start.
__device__ __forceinline__ i64 gn_offset(i64 e, i64 g, i64 cpg, i64 hw, i64 c, int channels_last) {
    if (channels_last) {
        const i64 p = e / cpg;
        return p * c + g * cpg + (e - p * cpg);
    }
    return g * cpg * hw + e;
}

__device__ __forceinline__ i64 gn_channel(i64 e, i64 g, i64 cpg, i64 hw, int channels_last) {
    return g * cpg + (channels_last ? e % cpg : e / hw);
}

template <class T>
__device__ void group_norm_impl(const T* x, const float* w, const float* b, T* y, i64 c, i64 hw,
                                i64 groups, int channels_last, float eps, int silu) {
    __shared__ float part[2][GN_THREADS / 32];
    __shared__ float stats[2];
    const i64 n = blockIdx.x / groups, g = blockIdx.x % groups;
    const i64 cpg = c / groups, count = cpg * hw;
    const T* xi = x + n * c * hw;
    T* yi = y + n * c * hw;
    const float shift = to_f(xi[gn_offset(0, g, cpg, hw, c, channels_last)]);
    float s = 0.f, ss = 0.f;
    for (i64 e = threadIdx.x; e < count; e += blockDim.x) {
        const float v = to_f(xi[gn_offset(e, g, cpg, hw, c, channels_last)]) - shift;
        s += v;
        ss = fmaf(v, v, ss);
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        part[0][warp] = s;
        part[1][warp] = ss;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float ts = 0.f, tss = 0.f;
        for (int i = 0; i < (int)(blockDim.x / 32); ++i) {
            ts += part[0][i];
            tss += part[1][i];
        }
        const float mean = ts / (float)count;
        const float var = fmaxf(tss / (float)count - mean * mean, 0.f);
        stats[0] = shift + mean;
        stats[1] = rsqrtf(var + eps);
    }
    __syncthreads();
    const float mean = stats[0], rstd = stats[1];
    for (i64 e = threadIdx.x; e < count; e += blockDim.x) {
        const i64 at = gn_offset(e, g, cpg, hw, c, channels_last);
        const i64 ch = gn_channel(e, g, cpg, hw, channels_last);
        float v = (to_f(xi[at]) - mean) * rstd;
        if (w) v *= w[ch];
        if (b) v += b[ch];
        if (silu) v = v / (1.f + __expf(-v));
        yi[at] = from_f<T>(v);
    }
}

#define RB_GROUP_NORM(name, T)                                                                              \
    RB_BOUNDED_KERNEL(group_norm_fwd_##name, GN_THREADS)(                        \
        const T* x, const float* w, const float* b, T* y, i64 c, i64 hw, i64 groups, int channels_last,   \
        float eps, int silu) {                                                                              \
        group_norm_impl<T>(x, w, b, y, c, hw, groups, channels_last, eps, silu);                           \
    }
RB_GROUP_NORM(f32, f32)
RB_GROUP_NORM(bf16, bf16)
RB_GROUP_NORM(f16, f16)
