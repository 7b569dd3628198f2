"""The PyTorch side of benches/yolo_bench.rs: ultralytics' fused YOLO11 forward in half
precision at batch 32, 640, timed the same way (warm-up, then the mean of N synchronised
forwards), as ultralytics validates (NCHW) and with channels_last, and a per-kernel profile.

python3 benches/yolo_torch_bench.py [scale] [batch] [imgsz] [iters]   (needs ultralytics)
"""
import json
import sys
import time

import torch
from ultralytics import YOLO

scale = sys.argv[1] if len(sys.argv) > 1 else "n"
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
imgsz = int(sys.argv[3]) if len(sys.argv) > 3 else 640
iters = int(sys.argv[4]) if len(sys.argv) > 4 else 50

model = YOLO(f"yolo11{scale}.yaml").model.fuse().cuda().half().eval()
x = torch.rand(batch, 3, imgsz, imgsz, device="cuda").half()


def timed(m, x):
    with torch.inference_mode():
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            m(x)
        torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / iters


for bench in (False, True):
    torch.backends.cudnn.benchmark = bench
    for cl in (False, True):
        fmt = torch.channels_last if cl else torch.contiguous_format
        m = model.to(memory_format=fmt)
        ms = timed(m, x.contiguous(memory_format=fmt))
        print(json.dumps({"name": "torch yolo forward", "scale": scale, "batch": batch,
                          "imgsz": imgsz, "cudnn_benchmark": bench, "channels_last": cl,
                          "ms_per_batch": round(ms, 2), "ms_per_image": round(ms / batch, 3),
                          "images_per_s": round(batch * 1e3 / ms)}))

# Where ultralytics' time goes: one forward, NCHW, cudnn.benchmark off (as `yolo val` runs).
torch.backends.cudnn.benchmark = False
m = model.to(memory_format=torch.contiguous_format)
with torch.inference_mode():
    for _ in range(3):
        m(x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        m(x)
        torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=90))
