"""Joins `yolo_bench convs` and `conv_torch_bench.py` output (JSON lines) into one table:
per shape, ms forward and backward (input + weight gradient) for ours NHWC, ours NCHW and
PyTorch channels_last, then the totals weighted by each shape's count.

python3 benches/conv_compare.py ours.jsonl torch.jsonl
"""
import json
import sys


def lines(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]


def key(s):
    return tuple(s[k] for k in ("c", "h", "w", "o", "k", "stride", "groups"))


ours = {key(r["shape"]): r for r in lines(sys.argv[1]) if r.get("name") == "rusting_brain conv"}
torch = {key(r["shape"]): r for r in lines(sys.argv[2]) if r.get("name") == "torch conv"}
tot = {"nhwc": [0, 0], "nchw": [0, 0], "torch": [0, 0]}
print(f"{'c,h,w,o,k,s,g':>26} {'n':>2} | {'NHWC fwd':>8} {'bwd':>7} | {'NCHW fwd':>8} {'bwd':>7} | {'torch fwd':>9} {'bwd':>7}")
for k, r in ours.items():
    t = torch.get(k)
    if t is None:
        continue
    n = r["shape"]["count"]
    row = {}
    for f in ("nhwc", "nchw"):
        row[f] = (r[f]["fwd_ms"], r[f]["dgrad_ms"] + r[f]["wgrad_ms"])
    row["torch"] = (t["fwd_ms"], t["bwd_ms"])
    for f, (a, b) in row.items():
        tot[f][0] += a * n
        tot[f][1] += b * n
    print(f"{str(k):>26} {n:>2} | {row['nhwc'][0]:8.4f} {row['nhwc'][1]:7.4f} | {row['nchw'][0]:8.4f} {row['nchw'][1]:7.4f} | {row['torch'][0]:9.4f} {row['torch'][1]:7.4f}")
for f, (a, b) in tot.items():
    print(f"total {f}: forward {a:.2f} ms, backward {b:.2f} ms, both {a + b:.2f} ms")
t = tot["torch"]
for f in ("nhwc", "nchw"):
    o = tot[f]
    print(f"ours {f} vs torch: forward {t[0] / o[0]:.2f}x, backward {t[1] / o[1]:.2f}x, both {(t[0] + t[1]) / (o[0] + o[1]):.2f}x of PyTorch's speed")
