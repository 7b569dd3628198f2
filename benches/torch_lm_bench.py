# PyTorch reference for the language-model training benchmark, beside `lm_bench train`: the same
# model shapes, timed the same way, so both run side by side on one GPU. Extended from the
# shared reference (read-only) with grouped key/value heads, an explicit SwiGLU width, an
# untied head, and MFU against both 989 TFLOP/s (the H200's dense BF16 datasheet figure) and
# 790 TFLOP/s (what cuBLAS measures there).
#   python3 benches/torch_lm_bench.py --shape 124m [--compile]
#   python3 benches/torch_lm_bench.py --shape 1.1b [--compile]
#   python3 benches/torch_lm_bench.py --batch 16 --seq 1024 --d 768 --layers 12 --heads 12 --kv-heads 4 --ffn 2048 --vocab 50304 --compile
# Under torchrun it is PyTorch DDP, the reference for `brain launch` (issue 16): one process a
# GPU, NCCL, DDP's 25 MB buckets overlapping the backward, each rank its own batch; rank 0
# prints the tokens/s of all ranks together.
#   torchrun --nproc_per_node 2 benches/torch_lm_bench.py --shape 124m [--compile]
# Prints one JSON object per run.
import argparse, json, os, time, torch, torch.nn as nn, torch.nn.functional as F
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
RANK = int(os.environ.get("RANK", "0"))
dev = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"

# The named shapes: (batch, seq, vocab, d, layers, heads, kv_heads, ffn, tied).
SHAPES = {
    "124m": (16, 1024, 50304, 768, 12, 12, 12, 2048, True),
    "1.1b": (8, 2048, 32000, 2048, 22, 32, 4, 5632, False),
}


class Block(nn.Module):
    def __init__(s, d, h, kv, ffn):
        super().__init__()
        s.h, s.kv, s.hd = h, kv, d // h
        s.n1, s.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
        s.qkv = nn.Linear(d, (h + 2 * kv) * s.hd, bias=False)
        s.o = nn.Linear(d, d, bias=False)
        s.gu = nn.Linear(d, 2 * ffn, bias=False)
        s.dn = nn.Linear(ffn, d, bias=False)

    def forward(s, x, cos, sin):
        B, T, D = x.shape
        q, k, v = s.qkv(s.n1(x)).split([s.h * s.hd, s.kv * s.hd, s.kv * s.hd], -1)
        q = q.view(B, T, s.h, s.hd).transpose(1, 2)
        k = k.view(B, T, s.kv, s.hd).transpose(1, 2)
        v = v.view(B, T, s.kv, s.hd).transpose(1, 2)

        def rope(t):
            t1, t2 = t[..., ::2], t[..., 1::2]
            return torch.stack([t1 * cos - t2 * sin, t1 * sin + t2 * cos], -1).flatten(-2)

        q, k = rope(q), rope(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=s.kv != s.h)
        x = x + s.o(y.transpose(1, 2).reshape(B, T, D))
        g, u = s.gu(s.n2(x)).chunk(2, -1)
        return x + s.dn(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(s, V, d, L, h, kv, ffn, T, tied):
        super().__init__()
        s.wte = nn.Embedding(V, d)
        s.blocks = nn.ModuleList([Block(d, h, kv, ffn) for _ in range(L)])
        s.nf = nn.RMSNorm(d)
        s.head = nn.Linear(d, V, bias=False)
        if tied:
            s.head.weight = s.wte.weight
        hd = d // h
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(T).float(), inv)
        s.register_buffer("cos", ang.cos())
        s.register_buffer("sin", ang.sin())

    def forward(s, idx, tgt):
        B, T = idx.shape
        x = s.wte(idx)
        for b in s.blocks:
            x = b(x, s.cos[:T], s.sin[:T])
        logits = s.head(s.nf(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))


def bench(name, compile_, B, T, V, d, L, h, kv, ffn, tied, steps):
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    m = Llama(V, d, L, h, kv, ffn, T, tied).to(dev)
    nparams = sum(p.numel() for p in m.parameters())
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
    if WORLD > 1:
        m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[torch.device(dev).index])
    f = torch.compile(m) if compile_ else m
    if WORLD > 1:
        torch.manual_seed(1 + RANK)  # each rank its own batch
    x = torch.randint(0, V, (B, T), device=dev)
    y = torch.randint(0, V, (B, T), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = f(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t = time.time()
    for _ in range(steps):
        l = step()
    torch.cuda.synchronize()
    dt = (time.time() - t) / steps
    flops = 6 * nparams * B * T + 12 * L * d * T * B * T  # as lm_bench counts: weights + attention
    if RANK != 0:
        return
    print(json.dumps({
        "name": name, "params_m": round(nparams / 1e6, 1), "batch": B, "seq": T, "gpus": WORLD,
        "step_ms": round(dt * 1e3, 2), "tokens_per_s": round(WORLD * B * T / dt),
        "mfu_pct_of_989tf": round(flops / dt / 989e12 * 100, 1),
        "mfu_pct_of_790tf": round(flops / dt / 790e12 * 100, 1),
        "loss": round(l.item(), 3),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)}), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--compile", action="store_true")
    for flag, default in [("batch", 16), ("seq", 1024), ("vocab", 50304), ("d", 768), ("layers", 12),
                          ("heads", 12), ("kv-heads", 0), ("ffn", 0), ("steps", 20)]:
        ap.add_argument(f"--{flag}", type=int, default=default)
    ap.add_argument("--untied", action="store_true")
    a = ap.parse_args()
    torch.cuda.set_device(dev)
    if WORLD > 1:
        torch.distributed.init_process_group("nccl")
    if RANK == 0:
        print(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}))
    if a.shape:
        B, T, V, d, L, h, kv, ffn, tied = SHAPES[a.shape]
    else:
        B, T, V, d, L, h = a.batch, a.seq, a.vocab, a.d, a.layers, a.heads
        kv = a.kv_heads or h
        ffn = a.ffn or int(8 * d / 3 / 64 + 0.999) * 64
        tied = not a.untied
    label = a.shape or f"{d}x{L}"
    kind = ("ddp " if WORLD > 1 else "") + ("compiled" if a.compile else "eager")
    bench(f"torch llama {label} {kind}", a.compile, B, T, V, d, L, h, kv, ffn, tied, a.steps)
    if WORLD > 1:
        torch.distributed.destroy_process_group()
