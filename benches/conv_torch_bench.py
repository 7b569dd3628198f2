"""The PyTorch side of `yolo_bench convs`: each convolution shape it wrote (--shapes FILE)
through F.conv2d and aten's convolution_backward, BF16, channels_last, cudnn.benchmark on,
timed as ours is (warm-up, then the mean of N queued calls between two synchronisations).

python3 benches/conv_torch_bench.py shapes.json [iters]
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

shapes = json.load(open(sys.argv[1]))
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
torch.backends.cudnn.benchmark = True
cl = torch.channels_last


def timed(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / iters


total = [0.0, 0.0]
for s in shapes:
    n, c, h, w, o, k, st, p, g = (s[x] for x in ("n", "c", "h", "w", "o", "k", "stride", "padding", "groups"))
    x = torch.randn(n, c, h, w, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    wt = torch.randn(o, c // g, k, k, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    with torch.no_grad():
        y = F.conv2d(x, wt, None, st, p, 1, g)
        fwd = timed(lambda: F.conv2d(x, wt, None, st, p, 1, g))
        dy = torch.randn_like(y).contiguous(memory_format=cl)
        bwd = timed(lambda: torch.ops.aten.convolution_backward(
            dy, x, wt, None, [st, st], [p, p], [1, 1], False, [0, 0], g, [True, True, False]))
    total[0] += fwd * s["count"]
    total[1] += bwd * s["count"]
    print(json.dumps({"name": "torch conv", "shape": s, "fwd_ms": round(fwd, 4), "bwd_ms": round(bwd, 4)}))
print(json.dumps({"name": "torch convs total (bf16 channels_last, each shape times its count)",
                  "shapes": len(shapes), "fwd_ms": round(total[0], 2), "bwd_ms": round(total[1], 2)}))
