// Seeded uniform and normal draws with the same Philox4x32-10 as engine/src/random.rs: word
// `pos` of a generator is word pos % 4 of philox(counter = pos / 4, key = seed), and a draw of n
// values starts at the generator's offset. The word-to-float mappings match `Generator::uniform`
// and `Generator::normal`, so a device draw equals the CPU draw for the same generator state
// (uniform bit for bit; normal up to the last-ulp differences of the device's log and cos).

__device__ __forceinline__ void philox4x32_10(u64 counter, u64 key, u32 out[4]) {
    u32 c0 = (u32)counter, c1 = (u32)(counter >> 32), c2 = 0, c3 = 0;
    u32 k0 = (u32)key, k1 = (u32)(key >> 32);
#pragma unroll
    for (int i = 0; i < 10; ++i) {
        u64 p0 = (u64)0xD2511F53u * (u64)c0;
        u64 p1 = (u64)0xCD9E8D57u * (u64)c2;
        u32 n0 = (u32)(p1 >> 32) ^ c1 ^ k0;
        u32 n1 = (u32)p1;
        u32 n2 = (u32)(p0 >> 32) ^ c3 ^ k1;
        u32 n3 = (u32)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

// The top 24 bits of a word as a double in [0, 1): exact (also in float).
__device__ __forceinline__ double word_unit(u32 w) { return (double)(w >> 8) * (1.0 / 16777216.0); }

// A draw (computed in double, as on the CPU) in the output dtype: f64 as is, the others
// through float, which is how the CPU rounds them too (f64 -> f32 -> 16-bit, each step RNE).
template <class T> __device__ __forceinline__ T rand_out(double v) { return from_f<T>((float)v); }
template <> __device__ __forceinline__ f64 rand_out<f64>(double v) { return v; }

// Uniform [0, 1): one thread per Philox block of 4 words, writing the words of [start, start + n).
template <class T>
__device__ void rand_uniform_impl(T* y, i64 n, u64 seed, u64 start) {
    u64 first = start / 4;
    u64 end = start + (u64)n;
    i64 blocks = (i64)((end + 3) / 4 - first);
    RB_GRID_LOOP(i, blocks) {
        u64 b = first + (u64)i;
        u32 w[4];
        philox4x32_10(b, seed, w);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            u64 pos = b * 4 + (u64)j;
            if (pos >= start && pos < end) y[pos - start] = rand_out<T>(word_unit(w[j]));
        }
    }
}
#define RB_RAND_UNIFORM(name, T) \
    RB_KERNEL(rand_uniform_##name)(T* y, i64 n, u64 seed, u64 start) { rand_uniform_impl<T>(y, n, seed, start); }
RB_FOR_FLOAT_TYPES(RB_RAND_UNIFORM)

// Standard normal by Box-Muller: value i uses words start + 2i and start + 2i + 1, computed in
// double as the CPU does: sqrt(-2 ln u1) * cos(2 pi u2) with u1 in (0, 1].
template <class T>
__device__ void rand_normal_impl(T* y, i64 n, u64 seed, u64 start) {
    RB_GRID_LOOP(i, n) {
        u64 pos = start + 2 * (u64)i;
        u32 w[4];
        philox4x32_10(pos / 4, seed, w);
        u32 j = (u32)(pos % 4);
        u32 a = w[j], b;
        if (j == 3) {
            u32 next[4];
            philox4x32_10(pos / 4 + 1, seed, next);
            b = next[0];
        } else {
            b = w[j + 1];
        }
        double u1 = ((double)(a >> 8) + 1.0) * (1.0 / 16777216.0);
        double u2 = word_unit(b);
        // 6.283185307179586 is Rust's std::f64::consts::TAU.
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        y[i] = rand_out<T>(z);
    }
}
#define RB_RAND_NORMAL(name, T) \
    RB_KERNEL(rand_normal_##name)(T* y, i64 n, u64 seed, u64 start) { rand_normal_impl<T>(y, n, seed, start); }
RB_FOR_FLOAT_TYPES(RB_RAND_NORMAL)
