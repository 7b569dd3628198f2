"""PyTorch's side of benches/cnn_bench.rs, in the same call: torchvision's ResNet training step
(forward, cross-entropy, backward, SGD with momentum 0.9 and weight decay 1e-4) under BF16
autocast on random images and labels, eager and torch.compile, NCHW and channels_last.

    python benches/torch_cnn_bench.py --depth 18 --batch 128 --imgsz 224 --steps 20
Prints one JSON line per variant.
"""
import argparse
import json
import time

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--depth", type=int, default=18)
p.add_argument("--batch", type=int, default=128)
p.add_argument("--imgsz", type=int, default=224)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--variants", default="eager,eager_cl,compile,compile_cl")
a = p.parse_args()


def run(variant):
    torch.manual_seed(0)
    model = getattr(torchvision.models, f"resnet{a.depth}")(num_classes=1000).cuda()
    x = torch.rand(a.batch, 3, a.imgsz, a.imgsz, device="cuda")
    y = torch.randint(0, 1000, (a.batch,), device="cuda")
    if variant.endswith("_cl"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    fwd = torch.compile(model) if variant.startswith("compile") else model

    def step():
        with torch.autocast("cuda", torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(5 if variant.startswith("eager") else 10):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / a.steps
    print(json.dumps({
        "bench": "torch_cnn_train", "variant": variant, "model": f"resnet{a.depth}",
        "batch": a.batch, "imgsz": a.imgsz, "step_ms": round(dt * 1e3, 2),
        "images_per_s": round(a.batch / dt), "loss": loss.item(),
        "torch": torch.__version__,
    }), flush=True)


for v in a.variants.split(","):
    run(v)
