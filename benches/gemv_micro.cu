// A design probe for the decode products, outside the engine: the 1.1B LLaMA layer's four
// products (q/k/v and gate/up with the norm, o with the residual, down with SwiGLU and the
// residual) at 1-4 activation rows, 22 layers of distinct weights (so nothing stays in L2),
// captured in one CUDA graph and replayed. It times the committed kernels of
// kernels/decode_gemv.cu, and any variants added to VARIANTS, with and without programmatic
// dependent launch (PDL) and at two grid sizes, and checks that each variant's outputs equal
// the committed kernel's bit for bit. (The prefetching form and PDL went in from its first
// run: docs/baseline.md.)
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/gemv_micro benches/gemv_micro.cu && /tmp/gemv_micro
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "../kernels/common.cuh"
#include "../kernels/decode_gemv.cu"

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e = (x);                                                                    \
        if (e != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void fill(bf16* p, size_t n, unsigned seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        p[i] = __float2bfloat16(((h & 0xffff) / 65536.f - 0.5f) * scale);
    }
}

struct Product {
    const char* name;
    int pro;       // GEMV_NORM / GEMV_SWIGLU / GEMV_CAST
    int k;
    int parts[3];  // rows of each target
    int count;
    bool residual;
};

static const Product PRODUCTS[4] = {
    {"qkv+norm", GEMV_NORM, 2048, {2048, 512, 512}, 3, false},
    {"o+res", GEMV_CAST, 2048, {2048, 0, 0}, 1, true},
    {"gate/up+norm", GEMV_NORM, 2048, {5632, 5632, 0}, 2, false},
    {"down+swiglu+res", GEMV_SWIGLU, 5632, {2048, 0, 0}, 1, true},
};
#define LAYERS 22

static int total_rows(const Product& p) {
    int t = 0;
    for (int i = 0; i < p.count; ++i) t += p.parts[i];
    return t;
}

typedef void (*Kernel)(GemvTargets, const void*, const void*, int, int, const void*, int, int, int, int, float);

struct Variant {
    const char* name;
    Kernel k[3];  // by pro
};

// A variant under test goes here beside the committed kernels (the first entry is the
// reference the others must equal bit for bit).
static Variant VARIANTS[] = {
    {"committed", {decode_gemv_mma_norm_bf16_n1, decode_gemv_mma_swiglu_bf16_n1, decode_gemv_mma_cast_bf16_n1}},
};

struct Buffers {
    bf16* w[4][LAYERS];  // product, layer
    bf16* x;             // [4, 5632]: x, gate
    bf16* up;            // [4, 5632]
    bf16* normw;         // [2048]
    bf16* res;           // [4, 2048]
    bf16* y[4][3];       // outputs by product, target
};

static int sms;
static int gemv_host_stride(int k) { return k + 8; }
static int sm_blocks(Kernel f, size_t shared) {
    int b = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, f, GEMV_THREADS, shared));
    return b;
}

// Queues one product on s; `pdl` sets programmatic stream serialization; grid_frac scales the
// resident-block grid.
static void launch(const Variant& v, const Buffers& b, int pi, int layer, int rows, bool pdl, float grid_frac,
                   cudaStream_t s) {
    const Product& p = PRODUCTS[pi];
    Kernel f = v.k[p.pro];
    GemvTargets t;
    memset(&t, 0, sizeof t);
    i64 end = 0;
    const bf16* w = b.w[pi][layer];
    for (int i = 0; i < p.count; ++i) {
        t.w[i] = (u64)w;
        w += (size_t)p.parts[i] * p.k;
        t.y[i] = (u64)b.y[pi][i];
        end += p.parts[i];
        t.end[i] = end;
    }
    t.count = p.count;
    const int nt = 1;
    size_t shared = (size_t)rows * gemv_host_stride(p.k) * 2 + (GEMV_WARPS * nt * 128 + 16) * 4;
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    int tiles = (total_rows(p) + 15) / 16;
    int resident = sms * sm_blocks(f, shared);
    int grid = (int)(resident * grid_frac);
    if (grid < 1) grid = 1;
    if (grid > tiles) grid = tiles;
    const void* in0 = b.x;
    const void* in1 = p.pro == GEMV_NORM ? (const void*)b.normw : (const void*)b.up;
    const void* res = p.residual ? (const void*)b.res : nullptr;
    int in_dt = GEMV_BF16, aux_dt = GEMV_BF16, res_dt = GEMV_BF16, out_dt = GEMV_BF16, k = p.k;
    float eps = 1e-5f;
    void* args[] = {&t, &in0, &in1, &in_dt, &aux_dt, &res, &res_dt, &out_dt, &rows, &k, &eps};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(GEMV_THREADS);
    cfg.dynamicSmemBytes = shared;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelExC(&cfg, (const void*)f, args));
}

int main() {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    Buffers b;
    for (int pi = 0; pi < 4; ++pi) {
        size_t n = (size_t)total_rows(PRODUCTS[pi]) * PRODUCTS[pi].k;
        for (int l = 0; l < LAYERS; ++l) {
            CK(cudaMalloc(&b.w[pi][l], n * 2));
            fill<<<1024, 256>>>(b.w[pi][l], n, pi * 100 + l, 0.05f);
        }
        for (int i = 0; i < 3; ++i) CK(cudaMalloc(&b.y[pi][i], 4 * 5632 * 2 * 4));
    }
    CK(cudaMalloc(&b.x, 4 * 5632 * 2));
    CK(cudaMalloc(&b.up, 4 * 5632 * 2));
    CK(cudaMalloc(&b.normw, 5632 * 2));
    CK(cudaMalloc(&b.res, 4 * 5632 * 2));
    fill<<<64, 256>>>(b.x, 4 * 5632, 1, 2.f);
    fill<<<64, 256>>>(b.up, 4 * 5632, 2, 2.f);
    fill<<<64, 256>>>(b.normw, 5632, 3, 2.f);
    fill<<<64, 256>>>(b.res, 4 * 5632, 4, 2.f);
    CK(cudaDeviceSynchronize());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    double floor_bytes[4];
    for (int pi = 0; pi < 4; ++pi) floor_bytes[pi] = (double)total_rows(PRODUCTS[pi]) * PRODUCTS[pi].k * 2;

    // Correctness: each variant's outputs against the committed kernel's, bit for bit.
    std::vector<unsigned short> ref(3 * 4 * 5632 * 4), got(ref.size());
    for (int rows : {1, 4}) {
        for (int pi = 0; pi < 4; ++pi) {
            for (size_t vi = 0; vi < sizeof VARIANTS / sizeof VARIANTS[0]; ++vi) {
                for (int i = 0; i < 3; ++i) CK(cudaMemset(b.y[pi][i], 0, 4 * 5632 * 2 * 4));
                launch(VARIANTS[vi], b, pi, 0, rows, vi > 0, 1.f, s);
                CK(cudaStreamSynchronize(s));
                for (int i = 0; i < 3; ++i)
                    CK(cudaMemcpy(got.data() + (size_t)i * 4 * 5632 * 4, b.y[pi][i], 4 * 5632 * 2 * 4, cudaMemcpyDeviceToHost));
                if (vi == 0) ref = got;
                else if (memcmp(ref.data(), got.data(), ref.size() * 2) != 0)
                    printf("MISMATCH %s %s rows %d\n", VARIANTS[vi].name, PRODUCTS[pi].name, rows);
            }
        }
    }

    auto time_graph = [&](auto&& body) {
        cudaGraph_t gr;
        cudaGraphExec_t ex;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        body();
        CK(cudaStreamEndCapture(s, &gr));
        CK(cudaGraphInstantiate(&ex, gr, 0));
        for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ex, s));
        const int reps = 20;
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(ex, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        CK(cudaGraphExecDestroy(ex));
        CK(cudaGraphDestroy(gr));
        return ms * 1000.0 / reps;  // us per replay
    };

    for (int rows : {1, 4}) {
        for (float frac : {1.f, 0.5f}) {
            for (int pdl = 0; pdl < 2; ++pdl) {
                for (size_t vi = 0; vi < sizeof VARIANTS / sizeof VARIANTS[0]; ++vi) {
                    printf("rows %d grid %.1fx %-10s pdl %d |", rows, frac, VARIANTS[vi].name, pdl);
                    for (int pi = 0; pi < 4; ++pi) {
                        double us = time_graph([&] {
                            for (int l = 0; l < LAYERS; ++l) launch(VARIANTS[vi], b, pi, l, rows, pdl, frac, s);
                        }) / LAYERS;
                        printf(" %s %.2f us (%.0f GB/s) |", PRODUCTS[pi].name, us, floor_bytes[pi] / us / 1e3);
                    }
                    double us = time_graph([&] {
                        for (int l = 0; l < LAYERS; ++l)
                            for (int pi : {0, 1, 2, 3}) launch(VARIANTS[vi], b, pi, l, rows, pdl, frac, s);
                    }) / LAYERS;
                    double bytes = floor_bytes[0] + floor_bytes[1] + floor_bytes[2] + floor_bytes[3];
                    printf(" layer %.2f us (%.0f GB/s)\n", us, bytes / us / 1e3);
                }
            }
        }
    }
    return 0;
}
