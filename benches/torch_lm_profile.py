# Kernel time of one PyTorch training step of the reference LLaMA shapes (benches/torch_lm_bench.py's
# model), grouped by kernel name, with the step's wall time beside the kernels' sum: what to
# compare `ncu` on lm_bench's `profile` mode against.
#   python3 benches/torch_lm_profile.py [--shape 124m|1.1b] [--compile]
# With --ncu the profiled step runs between cudaProfilerStart and Stop instead, for
#   ncu --profile-from-start off --clock-control none --csv --page raw \
#       --metrics gpu__time_duration.sum python3 benches/torch_lm_profile.py --compile --ncu
# so that its kernels are timed as `lm_bench profile`'s are (benches/ncu_by_kernel.py).
import argparse, os, sys, time, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_lm_bench as ref
from torch.profiler import profile, ProfilerActivity

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="124m", choices=sorted(ref.SHAPES))
ap.add_argument("--compile", action="store_true")
ap.add_argument("--rows", type=int, default=45)
ap.add_argument("--ncu", action="store_true")
a = ap.parse_args()
B, T, V, d, L, h, kv, ffn, tied = ref.SHAPES[a.shape]
torch.manual_seed(0)
m = ref.Llama(V, d, L, h, kv, ffn, T, tied).to("cuda")
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
f = torch.compile(m) if a.compile else m
x = torch.randint(0, V, (B, T), device="cuda")
y = torch.randint(0, V, (B, T), device="cuda")


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = f(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for _ in range(5):
    step()
torch.cuda.synchronize()
t = time.time()
for _ in range(10):
    step()
torch.cuda.synchronize()
wall = (time.time() - t) / 10 * 1e3
if a.ncu:
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"one step under ncu; the step took {wall:.2f} ms wall outside it")
    sys.exit(0)
with profile(activities=[ProfilerActivity.CUDA]) as p:
    step()
    torch.cuda.synchronize()
# Only device activity is recorded, so every event with device time is a kernel, copy or set.
events = [e for e in p.key_averages() if e.self_device_time_total > 0]
total = sum(e.self_device_time_total for e in events) / 1e3
print(f"{'compiled' if a.compile else 'eager'} {a.shape}: step {wall:.2f} ms wall, kernels {total:.2f} ms")
for e in sorted(events, key=lambda e: -e.self_device_time_total)[: a.rows]:
    print(f"{e.self_device_time_total / 1e3:8.3f} ms {e.count:5d}  {e.key[:110]}")
