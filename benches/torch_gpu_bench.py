"""The PyTorch side of benches/gpu_bench.rs: the same measurements on the same GPU, printed as
one JSON object whose result names match the Rust side's, so the two compare side by side.

    python benches/torch_gpu_bench.py

Each figure is the median of timed repetitions after a warm-up; a repetition runs the op a few
times between two device synchronizations. Without a usable GPU it prints {"error": ...} and
exits with code 2.
"""

import json
import sys
import time

GIB = 1 << 30


def median(values):
    # The upper median, as the Rust side takes it.
    return sorted(values)[len(values) // 2]


def time_per_call(torch, warmup, reps, inner, f):
    for _ in range(warmup):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            f()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) / inner)
    return median(times)


def figure(name, value, unit, label):
    return {"name": name, "value": value, "unit": unit, "label": label}


def gemm(torch, n, out):
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda", generator=g)
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda", generator=g)
    inner = 5 if n >= 8192 else 20
    secs = time_per_call(torch, 3, 10, inner, lambda: torch.matmul(a, b))
    out.append(figure(f"gemm_bf16_{n}", 2.0 * n**3 / secs / 1e12, "TFLOP/s",
                      f"BF16 [{n}, {n}] x [{n}, {n}] via torch.matmul (FP32 accumulate)"))
    out.append(figure(f"gemm_bf16_{n}_ms", secs * 1e3, "ms", "time per GEMM"))


def bandwidth(torch, out):
    x = torch.full((GIB // 4,), 1.5, dtype=torch.float32, device="cuda")
    copy = time_per_call(torch, 2, 10, 5, lambda: x.clone())
    copy_gbps = 2.0 * GIB / copy / 1e9
    out.append(figure("copy_1gib", copy_gbps, "GB/s",
                      "device-to-device copy of a contiguous 1 GiB F32 tensor (clone), read + write"))
    scale = time_per_call(torch, 2, 10, 5, lambda: x * 2.0)
    scale_gbps = 2.0 * GIB / scale / 1e9
    out.append(figure("scale_f32_1gib", scale_gbps, "GB/s",
                      "x * 2 over 1 GiB of F32, read + write"))
    out.append(figure("scale_f32_1gib_of_copy", scale_gbps / copy_gbps, "fraction",
                      "the scale's bandwidth as a fraction of the copy's"))
    del x
    a = torch.full((GIB // 2,), 1.5, dtype=torch.bfloat16, device="cuda")
    b = torch.full((GIB // 2,), -0.5, dtype=torch.bfloat16, device="cuda")
    add = time_per_call(torch, 2, 10, 5, lambda: a + b)
    add_gbps = 3.0 * GIB / add / 1e9
    out.append(figure("add_bf16_1gib", add_gbps, "GB/s",
                      "a + b over two 1 GiB BF16 tensors, two reads + one write"))
    out.append(figure("add_bf16_1gib_of_copy", add_gbps / copy_gbps, "fraction",
                      "the add's bandwidth as a fraction of the copy's"))


def fwd_bwd(torch, name, label, params, f, out):
    g = torch.Generator(device="cuda").manual_seed(7)
    shape = (16384, 4096)
    x = torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=g).requires_grad_()
    dy = torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=g)

    def forward():
        with torch.no_grad():
            f(x)

    def both():
        x.grad = None
        for p in params:
            p.grad = None
        f(x).backward(dy)

    fwd = time_per_call(torch, 3, 10, 10, forward)
    fb = time_per_call(torch, 3, 10, 10, both)
    out.append(figure(f"{name}_fwd_ms", fwd * 1e3, "ms", f"{label} forward on [16384, 4096] BF16"))
    out.append(figure(f"{name}_fwd_bwd_ms", fb * 1e3, "ms",
                      f"{label} forward + backward on [16384, 4096] BF16"))


def gpt2_small_shapes():
    """GPT-2 small's parameter shapes: 124,439,808 parameters in 148 tensors."""
    d, v, ctx, layers = 768, 50257, 1024, 12
    shapes = [(v, d), (ctx, d)]
    for _ in range(layers):
        shapes += [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,),
                   (d,), (d,), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    shapes += [(d,), (d,)]
    return shapes


def adamw(torch, out):
    shapes = gpt2_small_shapes()
    params = []
    for s in shapes:
        p = torch.full(s, 0.02, dtype=torch.float32, device="cuda", requires_grad=True)
        p.grad = torch.full(s, 1e-3, dtype=torch.float32, device="cuda")
        params.append(p)
    count = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                            fused=True)
    secs = time_per_call(torch, 3, 10, 5, opt.step)
    out.append(figure("adamw_124m_ms", secs * 1e3, "ms",
                      f"one AdamW step over {count} F32 parameters in {len(shapes)} tensors "
                      "(torch.optim.AdamW, fused=True)"))
    out.append(figure("adamw_124m_gbps", count * 28.0 / secs / 1e9, "GB/s",
                      "the step's traffic at 28 bytes per parameter (param, exp_avg, exp_avg_sq "
                      "read + write; grad read)"))


def tiny_op(torch, out):
    a = torch.full((16,), 1.0, dtype=torch.float32, device="cuda")
    b = torch.full((16,), 2.0, dtype=torch.float32, device="cuda")
    for _ in range(1000):
        a + b
    torch.cuda.synchronize()
    n = 10_000
    queued, drained = [], []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            a + b
        queued.append((time.perf_counter() - t) / n)
        torch.cuda.synchronize()
        drained.append((time.perf_counter() - t) / n)
    out.append(figure("tiny_add_us", median(queued) * 1e6, "us/op",
                      "host time per [16]-element F32 add on the GPU, 10k adds queued without a sync"))
    out.append(figure("tiny_add_drained_us", median(drained) * 1e6, "us/op",
                      "the same 10k adds including the final sync"))

    def add_and_sync():
        a + b
        torch.cuda.synchronize()

    synced = time_per_call(torch, 10, 5, 2000, add_and_sync)
    out.append(figure("tiny_add_sync_us", synced * 1e6, "us/op",
                      "one [16]-element add followed by a device synchronize"))


def section(out, name, f):
    t = time.perf_counter()
    try:
        f(out)
    except Exception as e:  # a failed section is recorded; the others still run
        out.append({"name": name, "error": f"{type(e).__name__}: {e}"})
    print(f"torch_gpu_bench: {name} took {time.perf_counter() - t:.1f} s", file=sys.stderr)


def main():
    start = time.perf_counter()
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"bench": "gpu", "framework": "torch", "error": f"no torch: {e}"}))
        sys.exit(2)
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "gpu", "framework": "torch",
                          "error": "no usable CUDA device (torch.cuda.is_available() is False)"}))
        print("torch_gpu_bench: no usable CUDA device", file=sys.stderr)
        sys.exit(2)
    # FP32 accumulation in BF16 GEMMs, as the engine's cuBLAS call does; TF32 stays off.
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_tf32 = False
    F = torch.nn.functional
    results = []
    section(results, "gemm_bf16_4096", lambda o: gemm(torch, 4096, o))
    section(results, "gemm_bf16_8192", lambda o: gemm(torch, 8192, o))
    section(results, "bandwidth", lambda o: bandwidth(torch, o))
    section(results, "softmax", lambda o: fwd_bwd(
        torch, "softmax_bf16", "softmax over the last dim", [],
        lambda x: torch.softmax(x, -1), o))

    def rms(o):
        w = torch.ones(4096, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        fwd_bwd(torch, "rms_norm_bf16",
                "torch.nn.functional.rms_norm with a [4096] BF16 weight (eps 1e-6)", [w],
                lambda x: F.rms_norm(x, (4096,), weight=w, eps=1e-6), o)

    section(results, "rms_norm", rms)
    section(results, "adamw", lambda o: adamw(torch, o))
    section(results, "tiny_op", lambda o: tiny_op(torch, o))
    props = torch.cuda.get_device_properties(0)
    print(json.dumps({
        "bench": "gpu",
        "framework": f"torch {torch.__version__}",
        "device": torch.cuda.get_device_name(0),
        "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "results": results,
        "seconds": time.perf_counter() - start,
    }))


if __name__ == "__main__":
    main()
