// A mixture of experts' routing on the device, so a layer never reads its router's choices
// back to the host (and a CUDA graph can record it).
//
//   moe_topk:  chosen[t, j] = the j-th most probable expert of token t (ties to the lower
//              expert, as a stable sort orders them; NaN counts as -inf). k <= 32.
//   moe_count: counts[e] = the assignments (token, slot) that chose expert e.
//   moe_place: the assignments sorted by expert, each expert's in ascending assignment order
//              (what a stable sort gives): order[p] = assignment at sorted position p,
//              token[p] = its token, slot[a] = where assignment a went, offsets[e] = the first
//              position of expert e (offsets[E] = all). One block per expert scans every
//              assignment: O(E * assignments) reads, a few microseconds at the sizes of
//              published models, and no atomics, so the same order on every run.

#define MR_MAX_K 32

RB_KERNEL(moe_topk)(const float* probs, i64* chosen, i64 tokens, int experts, int k) {
    RB_GRID_LOOP(t, tokens) {
        float best_v[MR_MAX_K];
        int best_i[MR_MAX_K];
        int filled = 0;
        const float* row = probs + t * experts;
        for (int e = 0; e < experts; ++e) {
            const float x = row[e];
            const float v = x == x ? x : -INFINITY;
            int p = filled;
            while (p > 0 && v > best_v[p - 1]) --p;
            if (p >= k) continue;
            const int last = filled < k ? filled : k - 1;
            for (int q = last; q > p; --q) {
                best_v[q] = best_v[q - 1];
                best_i[q] = best_i[q - 1];
            }
            best_v[p] = v;
            best_i[p] = e;
            if (filled < k) ++filled;
        }
        for (int j = 0; j < k; ++j) chosen[t * k + j] = j < filled ? best_i[j] : 0;
    }
}

RB_KERNEL(moe_count)(const i64* chosen, i64* counts, i64 assignments) {
    __shared__ i64 scratch[32];
    const int e = blockIdx.x;
    i64 c = 0;
    for (i64 a = threadIdx.x; a < assignments; a += blockDim.x) c += chosen[a] == e;
    c = block_sum(c, scratch);
    if (threadIdx.x == 0) counts[e] = c;
}

// blockDim.x is a multiple of 32.
RB_KERNEL(moe_place)(const i64* chosen, const i64* counts, i64* offsets, i64* order, i64* token,
                                     i64* slot, i64 assignments, int experts, int k) {
    __shared__ i64 base;
    __shared__ int warp_total[32];
    const int e = blockIdx.x;
    if (threadIdx.x == 0) {
        i64 s = 0;
        for (int i = 0; i < e; ++i) s += counts[i];
        base = s;
        offsets[e] = s;
        if (e == experts - 1) offsets[experts] = s + counts[e];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    i64 running = base;
    for (i64 a0 = 0; a0 < assignments; a0 += blockDim.x) {
        const i64 a = a0 + threadIdx.x;
        const int flag = a < assignments && chosen[a] == e;
        const unsigned ballot = __ballot_sync(0xffffffffu, flag);
        if (lane == 0) warp_total[warp] = __popc(ballot);
        __syncthreads();
        i64 before = __popc(ballot & ((1u << lane) - 1u)), total = 0;
        for (int w = 0; w < warps; ++w) {
            if (w < warp) before += warp_total[w];
            total += warp_total[w];
        }
        if (flag) {
            const i64 p = running + before;
            order[p] = a;
            token[p] = a / k;
            slot[a] = p;
        }
        running += total;
        __syncthreads();
    }
}
