"""PyTorch's side of benches/vit_bench.rs, in the same call: transformers'
ViTForImageClassification at ViT-B/16 (1000 classes, random weights, SDPA attention), inference
at one batch size and a training step (forward, cross-entropy, backward, fused AdamW with
weight decay 0.05) at another, under BF16 autocast on random images and labels, eager and
torch.compile.

    python benches/torch_vit_bench.py --infer-batch 256 --train-batch 128 --steps 20
Prints one JSON line per measurement.
"""
import argparse
import json
import time

import torch
import transformers
from transformers import ViTConfig, ViTForImageClassification

p = argparse.ArgumentParser()
p.add_argument("--infer-batch", type=int, default=256)
p.add_argument("--train-batch", type=int, default=128)
p.add_argument("--imgsz", type=int, default=224)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--variants", default="eager,compile")
a = p.parse_args()


def timed(f, steps):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        out = f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps, out


def run(variant):
    torch.manual_seed(0)
    config = ViTConfig(num_labels=1000, image_size=a.imgsz, attn_implementation="sdpa",
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ViTForImageClassification(config).cuda()
    fwd = torch.compile(model) if variant == "compile" else model
    common = {"model": "vit-b16", "imgsz": a.imgsz, "variant": variant,
              "torch": torch.__version__, "transformers": transformers.__version__}

    model.eval()
    x = torch.rand(a.infer_batch, 3, a.imgsz, a.imgsz, device="cuda")

    def infer():
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
            return fwd(pixel_values=x).logits

    for _ in range(3 if variant == "eager" else 10):
        infer()
    dt, _ = timed(infer, a.steps)
    print(json.dumps({"bench": "torch_vit_infer", "batch": a.infer_batch,
                      "step_ms": round(dt * 1e3, 2), "images_per_s": round(a.infer_batch / dt),
                      **common}), flush=True)

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=True)
    x = torch.rand(a.train_batch, 3, a.imgsz, a.imgsz, device="cuda")
    y = torch.randint(0, 1000, (a.train_batch,), device="cuda")

    def step():
        with torch.autocast("cuda", torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(fwd(pixel_values=x).logits, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(5 if variant == "eager" else 10):
        step()
    dt, loss = timed(step, a.steps)
    print(json.dumps({"bench": "torch_vit_train", "batch": a.train_batch,
                      "step_ms": round(dt * 1e3, 2), "images_per_s": round(a.train_batch / dt),
                      "loss": loss.item(), **common}), flush=True)


for v in a.variants.split(","):
    run(v)
