"""The numpy side of benches/cpu_bench.rs: the same benchmarks, the same JSON lines."""

import json
import time

import numpy as np


def best_of(warmup, reps, f):
    for _ in range(warmup):
        f()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    rng = np.random.default_rng(0)
    for n, reps in [(256, 50), (1024, 10), (2048, 3)]:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        secs = best_of(1, reps, lambda: a @ b)
        print(json.dumps({"bench": "matmul_f32", "size": n, "seconds": secs,
                          "gflops": 2.0 * n**3 / secs / 1e9}))

    n = 1 << 24
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    ops = [("add", 12, lambda: a + b), ("mul", 12, lambda: a * b),
           ("exp", 8, lambda: np.exp(a)), ("relu", 8, lambda: np.maximum(a, 0)),
           ("sum", 4, lambda: a.sum()), ("gt", 9, lambda: a > b)]
    for name, bytes_per_elem, f in ops:
        secs = best_of(2, 10, f)
        print(json.dumps({"bench": f"{name}_f32", "n": n, "seconds": secs,
                          "gbps": n * bytes_per_elem / secs / 1e9}))

    x = np.ones(1, dtype=np.float32)
    y = np.ones(1, dtype=np.float32)
    iters = 100_000

    def loop():
        for _ in range(iters):
            x + y

    secs = best_of(1, 5, loop)
    print(json.dumps({"bench": "tiny_add_f32", "n": 1, "ns_per_op": secs / iters * 1e9}))
    print(json.dumps({"numpy": np.__version__,
                      "blas": np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]}))


if __name__ == "__main__":
    main()
