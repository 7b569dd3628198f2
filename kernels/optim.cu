// Optimizer kernels: the global gradient norm, clipping by that norm, and fused AdamW / Lion /
// SGD updates over many tensors per launch. The norm never leaves the device: every kernel
// reads it from memory, skips the step when it is not finite and clips the gradient on the
// fly, so an optimizer step needs no host round trip. The host side is
// engine/src/backend/cuda/optim/ (clip.rs, update.rs); its #[repr(C)] structs mirror the ones
// below.

// Tensors per launch; the tables are passed by value as kernel parameters (at most 32764
// bytes since CUDA 12.1), large enough that a GPT-2-sized model takes one launch per kernel.
#define OPT_NORM_MAX 256
#define OPT_UPDATE_MAX 256
// Elements one block handles: multiples of 4, so a chunk of a 16-byte aligned F32 tensor starts
// 16-byte aligned and can be read as float4; large, so the per-block prologue is paid rarely.
#define OPT_NORM_CHUNK 16384
#define OPT_UPDATE_CHUNK 16384
// Threads per block of the norm, scale and update kernels (BLOCK in optim/mod.rs).
#define OPT_BLOCK 256
// Layout of the i64 counter buffer: [0] applied steps, [1] skipped steps, then a ring of the
// last OPT_SKIP_LOG skips as (step, norm as f64 bits), then one step count per parameter.
#define OPT_SKIP_LOG 16
#define OPT_COUNTER_HEAD (2 + 2 * OPT_SKIP_LOG)

// dtype codes, as `dtype_code` in optim/mod.rs.
#define OPT_F32 0
#define OPT_BF16 1
#define OPT_F16 2
#define OPT_F64 3

// Many tensors for the norm (src) or for scaling (src -> dst). Block b works on tensor k with
// block_start[k] <= b < block_start[k + 1].
struct NormTable {
    u64 src[OPT_NORM_MAX];
    u64 dst[OPT_NORM_MAX];
    i64 numel[OPT_NORM_MAX];
    int dtype[OPT_NORM_MAX];
    int block_start[OPT_NORM_MAX + 1];
    int n;
};
static_assert(sizeof(NormTable) == 8200, "NormTable must match optim/clip.rs");

// Many parameters for one fused update. state0 is exp_avg (AdamW, Lion) or the momentum buffer
// (SGD), state1 is exp_avg_sq (AdamW); 0 where unused. slot indexes the per-parameter step
// counters; decay is 1 where weight decay applies.
struct UpdateTable {
    u64 param[OPT_UPDATE_MAX];
    u64 grad[OPT_UPDATE_MAX];
    u64 state0[OPT_UPDATE_MAX];
    u64 state1[OPT_UPDATE_MAX];
    i64 numel[OPT_UPDATE_MAX];
    int block_start[OPT_UPDATE_MAX + 1];
    int slot[OPT_UPDATE_MAX];
    int pdtype[OPT_UPDATE_MAX];
    int gdtype[OPT_UPDATE_MAX];
    int decay[OPT_UPDATE_MAX];
    int n;
};
static_assert(sizeof(UpdateTable) == 15368, "UpdateTable must match optim/update.rs");

// Hyperparameters of one step. The learning rate is `lr` when sched_kind < 0, else the
// schedule's rate at the device's step count (0 constant, 1 warmup-cosine, 2 warmup-stable-
// decay, 3 step, 4 one-cycle; x, y its other numbers and a, b, c its step counts;
// `DeviceSchedule` in backend/spec/optim.rs), so a step
// skipped on the device shifts the schedule exactly as on the CPU. max_norm = inf means no
// clipping.
struct Hyper {
    double lr, b1, b2, eps, wd, momentum, dampening, max_norm;
    double sched_peak, sched_min, sched_x, sched_y;
    i64 sched_a, sched_b, sched_c;
    u64 norm;      // const float*: the global gradient norm of this step
    u64 counters;  // i64*: the counter buffer above
    int sched_kind, nesterov;
};
static_assert(sizeof(Hyper) == 144, "Hyper must match optim/update.rs");

// The tensor that block b works on: the last k < n with block_start[k] <= b (block_start is
// non-decreasing from 0), by binary search since a table holds up to 256 tensors.
__device__ __forceinline__ int opt_find(const int* block_start, int n, int b) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (block_start[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Whether every address is 16-byte aligned, so float4 accesses from a chunk start are legal.
__device__ __forceinline__ bool opt_aligned16(u64 a, u64 b = 0, u64 c = 0, u64 d = 0) {
    return ((a | b | c | d) & 15) == 0;
}

// ----- dtype dispatch -----
template <class T> struct Tag { typedef T type; };

template <class F> __device__ __forceinline__ void opt_with_type(int code, F f) {
    switch (code) {
        case OPT_F32: f(Tag<f32>()); break;
        case OPT_BF16: f(Tag<bf16>()); break;
        case OPT_F16: f(Tag<f16>()); break;
        default: f(Tag<f64>()); break;
    }
}

// Math and optimizer state are f32 for f32/bf16/f16 parameters and f64 for f64 ones, as
// `state_dtype` on the host.
template <class S> struct Cv;
template <> struct Cv<float> {
    template <class T> static __device__ __forceinline__ float load(T x) { return to_f(x); }
    template <class T> static __device__ __forceinline__ T store(float x) { return from_f<T>(x); }
};
template <> struct Cv<double> {
    template <class T> static __device__ __forceinline__ double load(T x) { return to_d(x); }
    template <class T> static __device__ __forceinline__ T store(double x) { return from_d<T>(x); }
};
template <class P> struct StateOf { typedef float type; };
template <> struct StateOf<f64> { typedef double type; };

// ----- global gradient norm -----

template <class T> __device__ __forceinline__ float opt_sq_sum(const T* x, i64 start, i64 end) {
    float s = 0.f;
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        float v = to_f(x[i]);
        s += v * v;
    }
    return s;
}

__device__ __forceinline__ float opt_sq4(float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }

// F32 gradients (the common case) are read as float4, two loads in flight per thread, with a
// scalar tail; an unaligned tensor takes the scalar loop.
__device__ __forceinline__ float opt_sq_sum(const f32* x, i64 start, i64 end) {
    if (!opt_aligned16((u64)x)) return opt_sq_sum<f32>(x, start, end);
    const float4* x4 = (const float4*)(x + start);
    int n4 = (int)((end - start) >> 2);
    int step = blockDim.x;
    float s0 = 0.f, s1 = 0.f;
    int i = threadIdx.x;
    for (; i + step < n4; i += 2 * step) {
        float4 a = x4[i], b = x4[i + step];
        s0 += opt_sq4(a);
        s1 += opt_sq4(b);
    }
    if (i < n4) s0 += opt_sq4(x4[i]);
    return s0 + s1 + opt_sq_sum<f32>(x, start + 4 * (i64)n4, end);
}

// The table entry block b works on, and its element range [start, end) there.
__device__ __forceinline__ int opt_table_block(const NormTable& t, int b, i64& start, i64& end) {
    int k = opt_find(t.block_start, t.n, b);
    start = (i64)(b - t.block_start[k]) * OPT_NORM_CHUNK;
    end = min(t.numel[k], start + OPT_NORM_CHUNK);
    return k;
}

// One partial sum of squares per block, into partials[base + block]; a fixed order of
// additions, so the norm is the same on every run.
RB_BOUNDED_KERNEL(grad_sq_norm, OPT_BLOCK)(const __grid_constant__ NormTable t, float* partials, int base) {
    __shared__ float scratch[32];
    int b = blockIdx.x;
    i64 start, end;
    int k = opt_table_block(t, b, start, end);
    float s = 0.f;
    opt_with_type(t.dtype[k], [&](auto tag) {
        typedef typename decltype(tag)::type T;
        s = opt_sq_sum((const T*)t.src[k], start, end);
    });
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) partials[base + b] = s;
}

// One block: the square root of the sum of all partials, in a fixed order. With a counter
// buffer (an optimizer step) it also opens the step: a finite norm advances the applied-step
// count, a non-finite one is logged as a skip for the host to report when it next looks.
RB_KERNEL(grad_norm_finish)(const float* partials, int count, float* norm_out, i64* counters) {
    __shared__ float scratch[32];
    float s = 0.f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
    s = block_sum(s, scratch);
    if (threadIdx.x != 0) return;
    float norm = sqrtf(s);
    *norm_out = norm;
    if (counters == 0) return;
    if (isfinite(norm)) {
        counters[0] += 1;
    } else {
        i64 k = counters[1];
        i64* entry = counters + 2 + 2 * (k % OPT_SKIP_LOG);
        entry[0] = counters[0] + 1;
        entry[1] = __double_as_longlong((double)norm);
        counters[1] = k + 1;
    }
}

// The clip factor of torch.nn.utils.clip_grad_norm_ as the CPU computes it: scale only when
// the norm is above max_norm, by max_norm / (norm + 1e-6). No clipping is max_norm = inf.
__device__ __forceinline__ double opt_clip(double max_norm, float norm) {
    return (double)norm > max_norm ? max_norm / ((double)norm + 1e-6) : 1.0;
}

// dst = src * clip factor, for clip_grad_norm without an optimizer. A non-finite norm copies
// the gradients unchanged, as the CPU leaves them.
RB_BOUNDED_KERNEL(grad_scale, OPT_BLOCK)(const __grid_constant__ NormTable t, const float* norm, double max_norm) {
    float nv = *norm;
    double c = isfinite(nv) ? opt_clip(max_norm, nv) : 1.0;
    int b = blockIdx.x;
    i64 start, end;
    int k = opt_table_block(t, b, start, end);
    opt_with_type(t.dtype[k], [&](auto tag) {
        typedef typename decltype(tag)::type T;
        typedef typename Acc<T>::type A;
        const T* x = (const T*)t.src[k];
        T* y = (T*)t.dst[k];
        A ca = (A)c;
        for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) y[i] = from_acc<T>(to_acc(x[i]) * ca);
    });
}

// x = lerp(x, end, weight) for many tensors, as torch._foreach_lerp_ (src = end, dst = x): the
// form nearer the end that is picked keeps the result exact at weights 0 and 1. For a model's
// moving average (EMA) in one launch instead of a few per tensor.
RB_BOUNDED_KERNEL(foreach_lerp, OPT_BLOCK)(const __grid_constant__ NormTable t, double weight) {
    int b = blockIdx.x;
    i64 start, end;
    int k = opt_table_block(t, b, start, end);
    opt_with_type(t.dtype[k], [&](auto tag) {
        typedef typename decltype(tag)::type T;
        typedef typename Acc<T>::type A;
        const T* e = (const T*)t.src[k];
        T* x = (T*)t.dst[k];
        const A w = (A)weight;
        for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            A xv = to_acc(x[i]), ev = to_acc(e[i]);
            A d = ev - xv;
            x[i] = from_acc<T>(w < (A)0.5 ? xv + w * d : ev - d * ((A)1 - w));
        }
    });
}

// ----- fused updates -----

__device__ double opt_progress(i64 step, i64 start, i64 len) {
    if (len <= 0) return 1.0;
    i64 done = step > start ? step - start : 0;
    double p = (double)done / (double)len;
    return p < 1.0 ? p : 1.0;
}

// Schedule::lr_at, step from 1.
__device__ double opt_lr(const Hyper& h, i64 step) {
    if (h.sched_kind < 0) return h.lr;
    if (h.sched_kind == 0) return h.sched_peak;
    if (h.sched_kind == 3) {
        i64 size = h.sched_a > 0 ? h.sched_a : 1;
        i64 drops = step > 1 ? (step - 1) / size : 0;
        return h.sched_peak * pow(h.sched_x, (double)drops);
    }
    if (h.sched_kind == 4) {
        // torch's OneCycleLR: step number s - 1 rises from x to peak until y, then falls to min.
        double s = (double)(step > 1 ? step - 1 : 0), rise_end = h.sched_y;
        double from = h.sched_peak, to = h.sched_min, p;
        if (s <= rise_end) {
            from = h.sched_x;
            to = h.sched_peak;
            p = s / rise_end;
        } else {
            p = fmin((s - rise_end) / ((double)(h.sched_a - 1) - rise_end), 1.0);
        }
        if (h.sched_b == 1) return (to - from) * p + from;
        return to + (from - to) / 2.0 * (cos(3.141592653589793 * p) + 1.0);
    }
    i64 warmup = h.sched_a;
    if (warmup > 0 && step <= warmup) return h.sched_peak * (double)step / (double)warmup;
    if (h.sched_kind == 1) {
        i64 len = h.sched_b > warmup ? h.sched_b - warmup : 0;
        double p = opt_progress(step, warmup, len);
        return h.sched_min + (h.sched_peak - h.sched_min) * 0.5 * (1.0 + cos(3.141592653589793 * p));
    }
    double p = opt_progress(step, warmup + h.sched_b, h.sched_c);
    return h.sched_peak + (h.sched_min - h.sched_peak) * p;
}

// What every update kernel works out first: whether the step applies, which tensor and range
// this block has, the learning rate, the clip factor and the parameter's step count.
struct OptBlock {
    int k;
    i64 start, end, step;
    double lr, clip;
};

__device__ __forceinline__ bool opt_begin(const UpdateTable& t, const Hyper& h, OptBlock& o) {
    int b = blockIdx.x;
    o.k = opt_find(t.block_start, t.n, b);
    o.start = (i64)(b - t.block_start[o.k]) * OPT_UPDATE_CHUNK;
    o.end = min(t.numel[o.k], o.start + OPT_UPDATE_CHUNK);
    // The three words are independent, so their loads overlap; the counters are valid memory
    // even when the step is skipped, and nothing in this launch writes them.
    const i64* counters = (const i64*)h.counters;
    float norm = *(const float*)h.norm;
    i64 applied = counters[0];
    o.step = counters[OPT_COUNTER_HEAD + t.slot[o.k]];
    if (!isfinite(norm)) return false;
    o.lr = opt_lr(h, applied);
    o.clip = opt_clip(h.max_norm, norm);
    return true;
}

// Runs before each update launch: the parameters of that launch have one more update (only
// when the step applies). A separate launch, so no block of the update reads a count that
// another block is changing.
RB_KERNEL(optim_advance)(const __grid_constant__ UpdateTable t, const __grid_constant__ Hyper h) {
    float norm = *(const float*)h.norm;
    if (!isfinite(norm)) return;
    i64* counters = (i64*)h.counters;
    for (int i = threadIdx.x; i < t.n; i += blockDim.x) counters[OPT_COUNTER_HEAD + t.slot[i]] += 1;
}

// AdamW's per-element rule, in the order of adamw.rs: decoupled decay, moments, bias-corrected
// step. Returns the new parameter and updates the moments in place.
template <class S> struct AdamW {
    S clip, decay_mul, b1, omb1, b2, omb2, inv_sqrt_bias2, eps, step_size;
    __device__ __forceinline__ S operator()(S g, S p, S& m, S& v) const {
        S gi = g * clip;
        S pi = p * decay_mul;
        S mi = m * b1 + gi * omb1;
        S vi = v * b2 + (gi * gi) * omb2;
        m = mi;
        v = vi;
        S denom = sqrt(vi) * inv_sqrt_bias2 + eps;
        return pi - (mi / denom) * step_size;
    }
};

template <class P, class G, class S>
__device__ void adamw_range(P* p, const G* g, S* m, S* v, i64 start, i64 end, const AdamW<S>& rule) {
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        S mi = m[i], vi = v[i];
        S pi = rule(Cv<S>::load(g[i]), Cv<S>::load(p[i]), mi, vi);
        m[i] = mi;
        v[i] = vi;
        p[i] = Cv<S>::template store<P>(pi);
    }
}

__device__ __forceinline__ void adamw4(const AdamW<float>& r, float4 g, float4& p, float4& m, float4& v) {
    p.x = r(g.x, p.x, m.x, v.x);
    p.y = r(g.y, p.y, m.y, v.y);
    p.z = r(g.z, p.z, m.z, v.z);
    p.w = r(g.w, p.w, m.w, v.w);
}

// All-F32 AdamW (the common case) as float4 when the four tensors are 16-byte aligned: each
// thread issues the loads of two float4 groups (eight 16-byte loads) before using any, to keep
// enough bytes in flight to saturate HBM. The last numel % 4 elements, and unaligned tensors,
// take the scalar loop. Same arithmetic per element as the scalar path.
__device__ void adamw_range_f32(f32* p, const f32* g, f32* m, f32* v, i64 start, i64 end, const AdamW<float>& r) {
    if (opt_aligned16((u64)p, (u64)g, (u64)m, (u64)v)) {
        float4* p4 = (float4*)(p + start);
        const float4* g4 = (const float4*)(g + start);
        float4* m4 = (float4*)(m + start);
        float4* v4 = (float4*)(v + start);
        int n4 = (int)((end - start) >> 2);
        int step = blockDim.x;
        for (int i = threadIdx.x; i < n4; i += 2 * step) {
            int j = i + step;
            bool two = j < n4;
            float4 ga = g4[i], pa = p4[i], ma = m4[i], va = v4[i];
            float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
            float4 gb = zero, pb = zero, mb = zero, vb = zero;
            if (two) {
                gb = g4[j];
                pb = p4[j];
                mb = m4[j];
                vb = v4[j];
            }
            adamw4(r, ga, pa, ma, va);
            p4[i] = pa;
            m4[i] = ma;
            v4[i] = va;
            if (two) {
                adamw4(r, gb, pb, mb, vb);
                p4[j] = pb;
                m4[j] = mb;
                v4[j] = vb;
            }
        }
        start += 4 * (i64)n4;
    }
    adamw_range<f32, f32, float>(p, g, m, v, start, end, r);
}

RB_BOUNDED_KERNEL(adamw_update, OPT_BLOCK)(const __grid_constant__ UpdateTable t, const __grid_constant__ Hyper h) {
    OptBlock o;
    if (!opt_begin(t, h, o)) return;
    int k = o.k;
    double bias1 = 1.0 - pow(h.b1, (double)o.step);
    double bias2 = 1.0 - pow(h.b2, (double)o.step);
    double decay_mul = t.decay[k] ? 1.0 - o.lr * h.wd : 1.0;
    if (t.pdtype[k] == OPT_F32 && t.gdtype[k] == OPT_F32) {
        AdamW<float> r = {(float)o.clip, (float)decay_mul,         (float)h.b1,
                          (float)(1.0 - h.b1), (float)h.b2,        (float)(1.0 - h.b2),
                          (float)(1.0 / sqrt(bias2)), (float)h.eps, (float)(o.lr / bias1)};
        adamw_range_f32((f32*)t.param[k], (const f32*)t.grad[k], (f32*)t.state0[k], (f32*)t.state1[k], o.start,
                        o.end, r);
        return;
    }
    opt_with_type(t.pdtype[k], [&](auto ptag) {
        typedef typename decltype(ptag)::type P;
        typedef typename StateOf<P>::type S;
        opt_with_type(t.gdtype[k], [&](auto gtag) {
            typedef typename decltype(gtag)::type G;
            AdamW<S> r = {(S)o.clip, (S)decay_mul, (S)h.b1, (S)(1.0 - h.b1), (S)h.b2, (S)(1.0 - h.b2),
                          (S)(1.0 / sqrt(bias2)), (S)h.eps, (S)(o.lr / bias1)};
            adamw_range<P, G, S>((P*)t.param[k], (const G*)t.grad[k], (S*)t.state0[k], (S*)t.state1[k], o.start,
                                 o.end, r);
        });
    });
}

// Lion, in the order of lion.rs: decoupled decay, signed step, then the momentum.
template <class P, class G, class S>
__device__ void lion_range(P* p, const G* g, S* m, i64 start, i64 end, S clip, S decay_mul, S lr, S b1, S omb1,
                           S b2, S omb2) {
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        S gi = Cv<S>::load(g[i]) * clip;
        S pi = Cv<S>::load(p[i]) * decay_mul;
        S mi = m[i];
        S c = mi * b1 + gi * omb1;
        S sign = c != c ? c : (S)((c > (S)0) - (c < (S)0));
        p[i] = Cv<S>::template store<P>(pi - sign * lr);
        m[i] = mi * b2 + gi * omb2;
    }
}

RB_BOUNDED_KERNEL(lion_update, OPT_BLOCK)(const __grid_constant__ UpdateTable t, const __grid_constant__ Hyper h) {
    OptBlock o;
    if (!opt_begin(t, h, o)) return;
    int k = o.k;
    double decay_mul = t.decay[k] ? 1.0 - o.lr * h.wd : 1.0;
    opt_with_type(t.pdtype[k], [&](auto ptag) {
        typedef typename decltype(ptag)::type P;
        typedef typename StateOf<P>::type S;
        opt_with_type(t.gdtype[k], [&](auto gtag) {
            typedef typename decltype(gtag)::type G;
            lion_range<P, G, S>((P*)t.param[k], (const G*)t.grad[k], (S*)t.state0[k], o.start, o.end, (S)o.clip,
                                (S)decay_mul, (S)o.lr, (S)h.b1, (S)(1.0 - h.b1), (S)h.b2, (S)(1.0 - h.b2));
        });
    });
}

// SGD, in the order of sgd.rs: coupled (L2) decay into the gradient, momentum (the buffer is
// the gradient itself on a parameter's first step), Nesterov, then the step.
template <class P, class G, class S>
__device__ void sgd_range(P* p, const G* g, S* buf, i64 start, i64 end, S clip, bool decay, S wd, bool momentum,
                          bool first, S mu, S omd, bool nesterov, S lr) {
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        S gi = Cv<S>::load(g[i]) * clip;
        S pi = Cv<S>::load(p[i]);
        if (decay) gi = gi + pi * wd;
        if (momentum) {
            S bi = first ? gi : buf[i] * mu + gi * omd;
            buf[i] = bi;
            gi = nesterov ? gi + bi * mu : bi;
        }
        p[i] = Cv<S>::template store<P>(pi - gi * lr);
    }
}

RB_BOUNDED_KERNEL(sgd_update, OPT_BLOCK)(const __grid_constant__ UpdateTable t, const __grid_constant__ Hyper h) {
    OptBlock o;
    if (!opt_begin(t, h, o)) return;
    int k = o.k;
    bool momentum = h.momentum != 0.0;
    opt_with_type(t.pdtype[k], [&](auto ptag) {
        typedef typename decltype(ptag)::type P;
        typedef typename StateOf<P>::type S;
        opt_with_type(t.gdtype[k], [&](auto gtag) {
            typedef typename decltype(gtag)::type G;
            sgd_range<P, G, S>((P*)t.param[k], (const G*)t.grad[k], (S*)t.state0[k], o.start, o.end, (S)o.clip,
                               t.decay[k] != 0, (S)h.wd, momentum, o.step == 1, (S)h.momentum,
                               (S)(1.0 - h.dampening), h.nesterov != 0, (S)o.lr);
        });
    });
}
