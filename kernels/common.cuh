// Shared by every kernel file: element types, conversions through float/double, strided
// indexing, warp and block reductions. Prepended to each .cu file before NVRTC compiles it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef unsigned char u8;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
typedef __nv_bfloat16 bf16;
typedef __half f16;
typedef float f32;
typedef double f64;

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

#define RB_MAX_DIMS 8

// Kernel entry points. A program compiles one kernel of a file (the host defines
// `RB_WANT_<kernel>` as `~, 1` before the file, and only that entry is emitted: the others
// become templates nobody instantiates, so NVRTC parses them and generates no code), or the
// whole file under RB_ALL_KERNELS (the test that every kernel compiles). One kernel compiles
// in a tenth of a second where the file took up to a minute, so a run pays only for what it
// launches. Every `__global__` of kernels/ is declared through these two macros.
#define RB_PASTE_(a, b) a##b
#define RB_PASTE(a, b) RB_PASTE_(a, b)
#define RB_SECOND_(a, b, ...) b
#define RB_SECOND(...) RB_SECOND_(__VA_ARGS__, ~)
#define RB_IS_WANTED(name) RB_SECOND(RB_PASTE(RB_WANT_, name), 0)
#define RB_ENTRY_1 extern "C" __global__
#define RB_ENTRY_0 template <int RbLeftOut> __global__
#ifdef RB_ALL_KERNELS
#define RB_ENTRY(name) RB_ENTRY_1
#else
#define RB_ENTRY(name) RB_PASTE(RB_ENTRY_, RB_IS_WANTED(name))
#endif
#define RB_KERNEL(name) RB_ENTRY(name) void name
#define RB_BOUNDED_KERNEL(name, ...) RB_ENTRY(name) void __launch_bounds__(__VA_ARGS__) name

// A tensor view: element (i0, i1, ...) lives at offset + sum(i_d * stride[d]). Matches
// `backend::cuda::launch::Strided` field for field.
struct Strided {
    int rank;
    int small; // fewer than 2^32 elements: every index and coordinate fits 32 bits
    i64 offset;
    i64 shape[RB_MAX_DIMS];
    i64 stride[RB_MAX_DIMS];
};

// The storage offset of the i-th element in row-major order. Rank 0 means the view is
// contiguous from `offset` (the host folds contiguous layouts to that; a 0-d tensor has i = 0).
__device__ __forceinline__ i64 strided_offset(const Strided& s, i64 i) {
    if (s.rank == 0) return s.offset + i;
    i64 off = s.offset;
    if (s.small) {
        // 32-bit division is several times cheaper than 64-bit, which dominated strided kernels.
        u32 u = (u32)i;
#pragma unroll
        for (int d = RB_MAX_DIMS - 1; d >= 0; --d) {
            if (d < s.rank) {
                const u32 n = (u32)s.shape[d], q = u / n;
                off += (i64)(u - q * n) * s.stride[d];
                u = q;
            }
        }
        return off;
    }
#pragma unroll
    for (int d = RB_MAX_DIMS - 1; d >= 0; --d) {
        if (d < s.rank) {
            i64 n = s.shape[d];
            i64 c = i % n;
            i /= n;
            off += c * s.stride[d];
        }
    }
    return off;
}

// ----- conversions: every element type to and from float (compute) and double (exact) -----
template <class T> __device__ __forceinline__ float to_f(T x) { return (float)x; }
template <> __device__ __forceinline__ float to_f<bf16>(bf16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f<f16>(f16 x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_f(float x) { return (T)x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ f16 from_f<f16>(float x) { return __float2half(x); }

template <class T> __device__ __forceinline__ double to_d(T x) { return (double)x; }
template <> __device__ __forceinline__ double to_d<bf16>(bf16 x) { return (double)__bfloat162float(x); }
template <> __device__ __forceinline__ double to_d<f16>(f16 x) { return (double)__half2float(x); }

// Saturating float-to-integer conversion with NaN to 0, as Rust's `as` does.
template <class T> __device__ __forceinline__ T sat_int(double x, double lo, double hi) {
    if (x != x) return (T)0;
    if (x <= lo) return (T)lo;
    if (x >= hi) return (T)hi;
    return (T)x;
}

template <class T> __device__ __forceinline__ T from_d(double x);
template <> __device__ __forceinline__ f64 from_d<f64>(double x) { return x; }
template <> __device__ __forceinline__ f32 from_d<f32>(double x) { return (float)x; }
// Through float, as the CPU does, so both devices round the same way.
template <> __device__ __forceinline__ bf16 from_d<bf16>(double x) { return __float2bfloat16((float)x); }
template <> __device__ __forceinline__ f16 from_d<f16>(double x) { return __float2half((float)x); }
template <> __device__ __forceinline__ u8 from_d<u8>(double x) { return sat_int<u8>(x, 0.0, 255.0); }
template <> __device__ __forceinline__ u32 from_d<u32>(double x) { return sat_int<u32>(x, 0.0, 4294967295.0); }
template <> __device__ __forceinline__ i64 from_d<i64>(double x) {
    if (x != x) return 0;
    if (x >= 9.2233720368547758e18) return 0x7fffffffffffffffLL;
    if (x <= -9.2233720368547758e18) return (i64)0x8000000000000000ULL;
    return (i64)x;
}

// The type a kernel computes in: float for the 16- and 32-bit floats, double for f64, and the
// integer itself for integers.
template <class T> struct Acc { typedef float type; };
template <> struct Acc<f64> { typedef double type; };
template <> struct Acc<u8> { typedef i64 type; };
template <> struct Acc<u32> { typedef i64 type; };
template <> struct Acc<i64> { typedef i64 type; };

// x c + y s and x c - y s as every rotary kernel rounds them (kernels/rope.cu, the decode
// products' rotary epilogue): the first product fused, the second rounded on its own, whatever
// the compiler would contract, so that one rotation computed by two kernels agrees bit for bit.
__device__ __forceinline__ float rope_add(float x, float c, float y, float s) { return __fmaf_rn(x, c, __fmul_rn(y, s)); }
__device__ __forceinline__ float rope_sub(float x, float c, float y, float s) { return __fmaf_rn(x, c, -__fmul_rn(y, s)); }
__device__ __forceinline__ double rope_add(double x, double c, double y, double s) { return __fma_rn(x, c, __dmul_rn(y, s)); }
__device__ __forceinline__ double rope_sub(double x, double c, double y, double s) { return __fma_rn(x, c, -__dmul_rn(y, s)); }

template <class T> __device__ __forceinline__ typename Acc<T>::type to_acc(T x) { return (typename Acc<T>::type)x; }
template <> __device__ __forceinline__ float to_acc<bf16>(bf16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_acc<f16>(f16 x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T from_acc(typename Acc<T>::type x) { return (T)x; }
template <> __device__ __forceinline__ bf16 from_acc<bf16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ f16 from_acc<f16>(float x) { return __float2half(x); }

// The type elementwise math runs in: float for the 16- and 32-bit floats, double for f64 and
// for integers (as the CPU computes them), so both devices round the same way.
template <class T> struct Compute { typedef double type; };
template <> struct Compute<f32> { typedef float type; };
template <> struct Compute<bf16> { typedef float type; };
template <> struct Compute<f16> { typedef float type; };

template <class T> __device__ __forceinline__ typename Compute<T>::type to_c(T x) { return (typename Compute<T>::type)to_d(x); }
template <> __device__ __forceinline__ float to_c<f32>(f32 x) { return x; }
template <> __device__ __forceinline__ float to_c<bf16>(bf16 x) { return to_f(x); }
template <> __device__ __forceinline__ float to_c<f16>(f16 x) { return to_f(x); }
template <class T> __device__ __forceinline__ T from_c(typename Compute<T>::type x) { return from_d<T>((double)x); }
template <> __device__ __forceinline__ f32 from_c<f32>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_c<bf16>(float x) { return from_f<bf16>(x); }
template <> __device__ __forceinline__ f16 from_c<f16>(float x) { return from_f<f16>(x); }

// ----- 16-byte words: 16 / sizeof(T) elements to and from Acc<T>, element 0 at the lowest address -----
// For kernels that move rows 16 bytes at a time and keep the raw words in registers.
template <class T> __device__ __forceinline__ unsigned short bits16(T x);
template <> __device__ __forceinline__ unsigned short bits16<bf16>(bf16 x) { return __bfloat16_as_ushort(x); }
template <> __device__ __forceinline__ unsigned short bits16<f16>(f16 x) { return __half_as_ushort(x); }
template <class T> __device__ __forceinline__ T from_bits16(unsigned short b);
template <> __device__ __forceinline__ bf16 from_bits16<bf16>(unsigned short b) { return __ushort_as_bfloat16(b); }
template <> __device__ __forceinline__ f16 from_bits16<f16>(unsigned short b) { return __ushort_as_half(b); }

// bf16 and f16: eight elements, two to each 32-bit lane (the lower address in the low half).
template <class T> struct Word16Of16Bit {
    static __device__ __forceinline__ void unpack(const uint4& u, float* o) {
        const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            o[2 * i] = to_acc(from_bits16<T>((unsigned short)(w[i] & 0xffffu)));
            o[2 * i + 1] = to_acc(from_bits16<T>((unsigned short)(w[i] >> 16)));
        }
    }
    static __device__ __forceinline__ u32 lane(float lo, float hi) {
        return (u32)bits16(from_acc<T>(lo)) | ((u32)bits16(from_acc<T>(hi)) << 16);
    }
    static __device__ __forceinline__ uint4 pack(const float* v) {
        return make_uint4(lane(v[0], v[1]), lane(v[2], v[3]), lane(v[4], v[5]), lane(v[6], v[7]));
    }
};

template <class T> struct Word16;
template <> struct Word16<bf16> : Word16Of16Bit<bf16> {};
template <> struct Word16<f16> : Word16Of16Bit<f16> {};
template <> struct Word16<f32> {
    static __device__ __forceinline__ void unpack(const uint4& u, float* o) {
        o[0] = __uint_as_float(u.x);
        o[1] = __uint_as_float(u.y);
        o[2] = __uint_as_float(u.z);
        o[3] = __uint_as_float(u.w);
    }
    static __device__ __forceinline__ uint4 pack(const float* v) {
        return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
    }
};
template <> struct Word16<f64> {
    static __device__ __forceinline__ void unpack(const uint4& u, double* o) {
        o[0] = __hiloint2double((int)u.y, (int)u.x);
        o[1] = __hiloint2double((int)u.w, (int)u.z);
    }
    static __device__ __forceinline__ uint4 pack(const double* v) {
        return make_uint4((u32)__double2loint(v[0]), (u32)__double2hiint(v[0]), (u32)__double2loint(v[1]),
                          (u32)__double2hiint(v[1]));
    }
};

// Eight elements of a 16- or 32-bit float type as floats, moved as one or two 16-byte words
// (the pointer 16-byte aligned). For kernels that stream contiguous buffers of mixed types.
template <class T> struct Eight {
    static constexpr int WORDS = (int)(8 * sizeof(T) / 16);
    static constexpr int PER_WORD = (int)(16 / sizeof(T));
    static __device__ __forceinline__ void load(const T* p, float* o) {
#pragma unroll
        for (int w = 0; w < WORDS; ++w) Word16<T>::unpack(reinterpret_cast<const uint4*>(p)[w], o + w * PER_WORD);
    }
    static __device__ __forceinline__ void store(T* p, const float* v) {
#pragma unroll
        for (int w = 0; w < WORDS; ++w) reinterpret_cast<uint4*>(p)[w] = Word16<T>::pack(v + w * PER_WORD);
    }
};

// ----- tensor cores -----
// c += a * b for one m16n8k16 tile (FP32 accumulators; sm_80 and later), and the packing of
// two floats into the 16-bit pair a fragment register holds. Used by attention and the decode
// products.
template <class T> struct Mma;
template <> struct Mma<bf16> {
    static __device__ __forceinline__ void run(float* c, const u32* a, u32 b0, u32 b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(u32*)&v;
    }
    static __device__ __forceinline__ float2 unpack(u32 v) {
        return __bfloat1622float2(*(__nv_bfloat162*)&v);
    }
};
template <> struct Mma<f16> {
    static __device__ __forceinline__ void run(float* c, const u32* a, u32 b0, u32 b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *(u32*)&v;
    }
    static __device__ __forceinline__ float2 unpack(u32 v) { return __half22float2(*(__half2*)&v); }
};

// ----- activations shared by the elementwise kernels and the fused ones -----
__device__ __forceinline__ float rb_exp(float x) { return expf(x); }
__device__ __forceinline__ double rb_exp(double x) { return exp(x); }

// Two branches keep exp from overflowing for large |x|.
template <class C> __device__ __forceinline__ C sigmoid_c(C x) {
    if (x >= (C)0) return (C)1 / ((C)1 + rb_exp(-x));
    C e = rb_exp(x);
    return e / ((C)1 + e);
}
template <class C> __device__ __forceinline__ C silu_derivative_c(C x) {
    C s = sigmoid_c(x);
    return s * ((C)1 + x * ((C)1 - s));
}

// ----- asynchronous copies to shared memory (sm_80+) -----
// 16 bytes global -> shared without passing through registers; `valid` false writes zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    u32 s = (u32)__cvta_generic_to_shared(dst);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
}
// 4 bytes global -> shared (through L1); `valid` false writes zeros.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    u32 s = (u32)__cvta_generic_to_shared(dst);
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ----- bulk copies, transaction barriers and thread-block clusters (sm_90+) -----
// A bulk copy moves a whole span global -> shared in one instruction (the copy engine walks
// it, no thread computes addresses) and counts its bytes on an mbarrier in shared memory;
// waiting on that barrier's phase waits for every byte announced with `mbar_expect_tx`.
// With `.multicast::cluster`, one read of global memory lands at the same shared offset in
// every block of the cluster named by the mask, and completes bytes on each one's barrier.
// Only compiled where __CUDA_ARCH__ >= 900; callers keep another path for older devices.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RB_HAS_BULK 1
__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
// One arrival (the thread that announces the bytes) completes a phase.
__device__ __forceinline__ void mbar_init(u64* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
                 "fence.mbarrier_init.release.cluster;" ::"r"(smem_addr(bar))
                 : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, u32 phase) {
    asm volatile("{\n .reg .pred done;\n RB_MBAR_WAIT_%=:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra RB_MBAR_WAIT_%=;\n}" ::"r"(smem_addr(bar)),
                 "r"(phase)
                 : "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from src to dst, counted on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}
// The same, to dst and bar of every block of the cluster whose rank bit is set in mask.
__device__ __forceinline__ void bulk_copy_multicast(void* dst, const void* src, u32 bytes, u64* bar,
                                                    unsigned short mask) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::
            "r"(smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar)), "h"(mask)
        : "memory");
}
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_size() {
    u32 n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}
// Every thread of every block of the cluster arrives; `cluster_wait` returns once all have.
// Arriving releases this block's shared-memory writes to the others; waiting acquires theirs.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
#endif


// ----- programmatic dependent launch (sm_90+; nothing before) -----
// A kernel launched with `launch_dependent` may start while the kernel before it runs:
// rb_grid_wait() returns once that kernel has finished and its writes are visible. Call it
// before reading what an earlier kernel wrote and before writing anything. rb_grid_release()
// lets the next dependent kernel start early (its own waits keep it correct).
__device__ __forceinline__ void rb_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void rb_grid_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// ----- reductions -----
template <class T> __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <class T> __device__ __forceinline__ T warp_max(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { T w = __shfl_xor_sync(0xffffffffu, v, o); v = w > v ? w : v; }
    return v;
}

// Sum over the block; every thread gets the result. `scratch` holds 32 values.
template <class T> __device__ __forceinline__ T block_sum(T v, T* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : (T)0;
    return warp_sum(v);
}
template <class T> __device__ __forceinline__ T block_max(T v, T* scratch, T lowest) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : lowest;
    return warp_max(v);
}

// Grid-stride loop over [0, n).
#define RB_GRID_LOOP(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

// Element type names used in kernel names: <kernel>_<suffix>.
#define RB_FOR_ALL_TYPES(M) M(bool, u8) M(u8, u8) M(u32, u32) M(i64, i64) M(bf16, bf16) M(f16, f16) M(f32, f32) M(f64, f64)
#define RB_FOR_FLOAT_TYPES(M) M(bf16, bf16) M(f16, f16) M(f32, f32) M(f64, f64)
#define RB_FOR_NUMERIC_TYPES(M) M(u8, u8) M(u32, u32) M(i64, i64) M(bf16, bf16) M(f16, f16) M(f32, f32) M(f64, f64)
