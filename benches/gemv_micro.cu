// A design probe for the decode products, outside the engine: the 1.1B LLaMA layer's four
// products as a decode step runs them (q/k/v with the norm; o with the residual; gate/up with
// the norm and SwiGLU in the epilogue; down with the residual), 22 layers of distinct weights
// (so nothing stays in L2), captured in one CUDA graph with programmatic dependent launch and
// replayed, at 1 and 16 activation rows. It launches the committed kernels of
// kernels/decode_gemv.cu in each configuration the host can pick: thread-block clusters of 1, 2
// or 4 (multicast staging), and the norm in every block or once in a kernel of its own; and
// checks every configuration's outputs against the first bit for bit. Results: docs/baseline.md.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/gemv_micro benches/gemv_micro.cu && /tmp/gemv_micro
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "../kernels/common.cuh"
#include "../kernels/decode_gemv.cuh"
#include "../kernels/decode_gemv.cu"
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1);} } while (0)

__global__ void fill(bf16* p, size_t n, unsigned seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        p[i] = __float2bfloat16(((h & 0xffff) / 65536.f - 0.5f) * scale);
    }
}
struct Product { const char* name; int k; int parts[3]; int count; bool residual; };
static const Product P[4] = {
    {"qkv+norm", 2048, {2048, 512, 512}, 3, false},
    {"o+res", 2048, {2048, 0, 0}, 1, true},
    {"gateup+norm+swiglu", 2048, {5632, 5632, 0}, 2, false},
    {"down+res", 5632, {2048, 0, 0}, 1, true},
};
#define LAYERS 22
#define MAXR 16
static int total_rows(const Product& p) { int t = 0; for (int i = 0; i < p.count; ++i) t += p.parts[i]; return t; }
typedef void (*Kernel)(GemvTargets, const void*, const void*, int, int, const void*, int, int, int, int, float);
// The products of each work-item depth (decode_gemv_mma_impl's BATCH and BUFFERS), by norm
// placement, n-tiles (rows 1-8, 9-16) and product; the norm apart stages its output as it is.
#define MICRO_MMA(name, PRO, NT, EPI, B, U)                                                                    \
    __global__ void __launch_bounds__(GEMV_THREADS) name(GemvTargets t, const void* in0, const void* in1,        \
                                                         int in_dt, int aux_dt, const void* res, int res_dt,    \
                                                         int out_dt, int rows, int k, float eps) {              \
        decode_gemv_mma_impl<bf16, NT, PRO, EPI, B, U>(t, in0, in1, in_dt, aux_dt, res, res_dt, out_dt, rows, k, eps, \
                                                      GemvRotary{});                                            \
    }
#define MICRO_SET(B, U)                                             \
    MICRO_MMA(norm_n1_b##B##u##U, GEMV_NORM, 1, GEMV_EPI_STORE, B, U)        \
    MICRO_MMA(cast_n1_b##B##u##U, GEMV_CAST, 1, GEMV_EPI_STORE, B, U)        \
    MICRO_MMA(norm_pair_n1_b##B##u##U, GEMV_NORM, 1, GEMV_EPI_SWIGLU, B, U)    \
    MICRO_MMA(cast_pair_n1_b##B##u##U, GEMV_CAST, 1, GEMV_EPI_SWIGLU, B, U)    \
    MICRO_MMA(norm_n2_b##B##u##U, GEMV_NORM, 2, GEMV_EPI_STORE, B, U)        \
    MICRO_MMA(cast_n2_b##B##u##U, GEMV_CAST, 2, GEMV_EPI_STORE, B, U)        \
    MICRO_MMA(norm_pair_n2_b##B##u##U, GEMV_NORM, 2, GEMV_EPI_SWIGLU, B, U)    \
    MICRO_MMA(cast_pair_n2_b##B##u##U, GEMV_CAST, 2, GEMV_EPI_SWIGLU, B, U)
MICRO_SET(4, 1)
MICRO_SET(2, 2)
MICRO_SET(3, 2)
MICRO_SET(4, 2)
MICRO_SET(8, 1)
struct Variant { const char* name; Kernel k[2][2][4]; int cl; bool apart; };
#define KERNELS(B, U)                                                                                   \
    {{{norm_n1_b##B##u##U, cast_n1_b##B##u##U, norm_pair_n1_b##B##u##U, cast_n1_b##B##u##U},            \
      {norm_n2_b##B##u##U, cast_n2_b##B##u##U, norm_pair_n2_b##B##u##U, cast_n2_b##B##u##U}},           \
     {{cast_n1_b##B##u##U, cast_n1_b##B##u##U, cast_pair_n1_b##B##u##U, cast_n1_b##B##u##U},            \
      {cast_n2_b##B##u##U, cast_n2_b##B##u##U, cast_pair_n2_b##B##u##U, cast_n2_b##B##u##U}}}
// cl / apart 0 = what the host picks (rows <= 2: the norm in the blocks, no clusters; more: the
// norm apart, clusters of 2).
static Variant V[] = {
    {"b4u1 (committed)", KERNELS(4, 1), 0, false},
    {"b2u2", KERNELS(2, 2), 0, false},
    {"b3u2", KERNELS(3, 2), 0, false},
    {"b4u2", KERNELS(4, 2), 0, false},
    {"b8u1", KERNELS(8, 1), 0, false},
    {"b4u1 in-block", KERNELS(4, 1), 1, false}, {"b4u1 in-block+c2", KERNELS(4, 1), 2, false},
    {"b4u1 in-block+c4", KERNELS(4, 1), 4, false}, {"b4u1 apart", KERNELS(4, 1), 1, true},
    {"b4u1 apart+c2", KERNELS(4, 1), 2, true}, {"b4u1 apart+c4", KERNELS(4, 1), 4, true},
};
#define NV (int)(sizeof V / sizeof V[0])
struct Buffers { bf16* w[4][LAYERS]; bf16* x; bf16* xn; bf16* normw; bf16* res; bf16* y[4][3]; };
static int sms;
static bool pdl_on = true;

static void launch(const Variant& v, const Buffers& b, int pi, int layer, int rows, cudaStream_t s) {
    const Product& p = P[pi];
    const int nt = (rows + 7) / 8;
    const bool apart = v.cl == 0 ? rows > 2 : v.apart;
    const int cl = v.cl == 0 ? (rows > 2 ? 2 : 1) : v.cl;
    Kernel f = v.k[apart][nt - 1][pi];
    const bool norm = pi == 0 || pi == 2;
    int in_dt = GEMV_BF16, aux_dt = GEMV_BF16, res_dt = GEMV_BF16, out_dt = GEMV_BF16, k = p.k; float eps = 1e-5f;
    const void* in0 = b.x; const void* in1 = b.normw;
    if (apart && norm) {
        bf16* xo = b.xn;
        void* pargs[] = {&in0, &in1, &in_dt, &aux_dt, &k, &eps, &xo};
        CK(cudaLaunchKernel((const void*)decode_gemv_prologue_norm_bf16, dim3(rows), dim3(GEMV_THREADS), pargs, 0, s));
        in0 = b.xn;
    }
    GemvTargets t; memset(&t, 0, sizeof t);
    i64 end = 0; const bf16* w = b.w[pi][layer];
    for (int i = 0; i < p.count; ++i) { t.w[i] = (u64)w; w += (size_t)p.parts[i] * p.k; t.y[i] = (u64)b.y[pi][i]; end += p.parts[i]; t.end[i] = end; }
    t.count = p.count;
    size_t shared = (size_t)rows * (p.k + 8) * 2 + (GEMV_WARPS * nt * 128 + 16) * 4 + 16;
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    if (cl > 1) CK(cudaFuncSetAttribute(f, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    int tiles = (total_rows(p) + 15) / 16;
    cudaLaunchConfig_t cfg = {}; cfg.blockDim = dim3(GEMV_THREADS); cfg.dynamicSmemBytes = shared; cfg.stream = s;
    cudaLaunchAttribute attr[2]; int na = 0;
    if (pdl_on) { attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization; attr[na].val.programmaticStreamSerializationAllowed = 1; ++na; }
    int grid;
    if (cl > 1) {
        attr[na].id = cudaLaunchAttributeClusterDimension; attr[na].val.clusterDim.x = cl; attr[na].val.clusterDim.y = 1; attr[na].val.clusterDim.z = 1; ++na;
        cfg.attrs = attr; cfg.numAttrs = na; cfg.gridDim = dim3(cl * 64);
        int clusters = 0; CK(cudaOccupancyMaxActiveClusters(&clusters, (const void*)f, &cfg));
        grid = clusters * cl; int want = (tiles + cl - 1) / cl * cl; if (grid > want) grid = want;
    } else {
        int per = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, f, GEMV_THREADS, shared));
        grid = sms * per; if (grid > tiles) grid = tiles;
    }
    static bool said[64][2][4]; int vi = (int)(&v - V);
    if (!said[vi][nt - 1][pi]) { said[vi][nt - 1][pi] = true; if (rows == 16) fprintf(stderr, "%s %s grid %d\n", v.name, p.name, grid); }
    const void* res = p.residual ? (const void*)b.res : nullptr;
    void* args[] = {&t, &in0, &in1, &in_dt, &aux_dt, &res, &res_dt, &out_dt, &rows, &k, &eps};
    cfg.gridDim = dim3(grid); cfg.attrs = attr; cfg.numAttrs = na;
    CK(cudaLaunchKernelExC(&cfg, (const void*)f, args));
}

int main(int argc, char** argv) {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    Buffers b;
    for (int pi = 0; pi < 4; ++pi) {
        size_t n = (size_t)total_rows(P[pi]) * P[pi].k;
        for (int l = 0; l < LAYERS; ++l) { CK(cudaMalloc(&b.w[pi][l], n * 2)); fill<<<1024, 256>>>(b.w[pi][l], n, pi * 100 + l, 0.05f); }
        for (int i = 0; i < 3; ++i) CK(cudaMalloc(&b.y[pi][i], MAXR * 5632 * 2));
    }
    CK(cudaMalloc(&b.x, MAXR * 5632 * 2)); CK(cudaMalloc(&b.xn, MAXR * 5632 * 2)); CK(cudaMalloc(&b.normw, 5632 * 2)); CK(cudaMalloc(&b.res, MAXR * 5632 * 2));
    fill<<<64, 256>>>(b.x, MAXR * 5632, 1, 2.f); fill<<<64, 256>>>(b.normw, 5632, 3, 2.f); fill<<<64, 256>>>(b.res, MAXR * 5632, 4, 2.f);
    CK(cudaDeviceSynchronize());
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    double fb[4]; for (int pi = 0; pi < 4; ++pi) fb[pi] = (double)total_rows(P[pi]) * P[pi].k * 2;

    std::vector<unsigned short> ref(3 * MAXR * 5632), got(ref.size());
    for (int rows : {1, 16}) for (int pi = 0; pi < 4; ++pi) for (int vi = 0; vi < NV; ++vi) {
        for (int i = 0; i < 3; ++i) CK(cudaMemset(b.y[pi][i], 0, MAXR * 5632 * 2));
        launch(V[vi], b, pi, 0, rows, s); CK(cudaStreamSynchronize(s));
        for (int i = 0; i < 3; ++i) CK(cudaMemcpy(got.data() + (size_t)i * MAXR * 5632, b.y[pi][i], MAXR * 5632 * 2, cudaMemcpyDeviceToHost));
        if (vi == 0) ref = got; else { size_t d = 0; for (size_t i = 0; i < ref.size(); ++i) d += ref[i] != got[i];
            if (d) printf("MISMATCH %s %s rows %d: %zu values differ\n", V[vi].name, P[pi].name, rows, d); }
    }
    auto time_graph = [&](auto&& body) {
        cudaGraph_t gr; cudaGraphExec_t ex;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)); body(); CK(cudaStreamEndCapture(s, &gr));
        CK(cudaGraphInstantiate(&ex, gr, 0));
        for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ex, s));
        const int reps = 20; CK(cudaEventRecord(e0, s));
        for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(ex, s));
        CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); CK(cudaGraphExecDestroy(ex)); CK(cudaGraphDestroy(gr));
        return ms * 1000.0 / reps;
    };
    // `gemv_micro ncu`: each configuration's products once, for a profiler to pick.
    const bool only_time = argc > 1 && !strcmp(argv[1], "ncu");
    for (int rows : {1, 16}) for (int vi = 0; vi < NV; ++vi) {
        if (only_time) { for (int pi = 0; pi < 4; ++pi) launch(V[vi], b, pi, 0, rows, s); continue; }
        printf("rows %2d %-15s |", rows, V[vi].name);
        for (int pi = 0; pi < 4; ++pi) {
            double us = time_graph([&] { for (int l = 0; l < LAYERS; ++l) launch(V[vi], b, pi, l, rows, s); }) / LAYERS;
            printf(" %s %.2f (%.0f GB/s) |", P[pi].name, us, fb[pi] / us / 1e3);
        }
        double us = time_graph([&] { for (int l = 0; l < LAYERS; ++l) for (int pi : {0, 1, 2, 3}) launch(V[vi], b, pi, l, rows, s); }) / LAYERS;
        printf(" layer %.2f us\n", us);
    }
    if (only_time) { CK(cudaDeviceSynchronize()); return 0; }
    return 0;
}
