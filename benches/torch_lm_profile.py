# Kernel time of one PyTorch eager training step of the reference LLaMA shape (torch_lm_bench.py's
# model), grouped by kernel name: what to compare `ncu` on lm_bench's `profile` mode against.
#   python3 benches/torch_lm_profile.py [path to torch_lm_bench.py's folder]
import sys, torch
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".device/reference")
import torch_lm_bench as ref
from torch.profiler import profile, ProfilerActivity

torch.manual_seed(0)
m = ref.GPT(50304, 768, 12, 12, 1024, True).to("cuda")
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
x = torch.randint(0, 50304, (16, 1024), device="cuda"); y = torch.randint(0, 50304, (16, 1024), device="cuda")
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x, y)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(3): step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as p:
    step(); torch.cuda.synchronize()
print(p.key_averages().table(sort_by="cuda_time_total", row_limit=40, max_name_column_width=90))
