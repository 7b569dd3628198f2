"""PyTorch's side of benches/mmdit_bench.rs, in the same call: diffusers' FluxTransformer2DModel
from the same config (benches/diffusion/flux_block.json: FLUX.1's width, one double-stream and
one single-stream block, random weights, SDPA attention) at 1024 image and 512 text tokens: one
denoising step (inside one autocast scope over the steps, as a sampling loop runs) and a
training step (velocity MSE, backward, fused AdamW) under BF16 autocast, eager and
torch.compile, with the peak memory each held. The first line is the floor: the forward's FLOPs
as torch's FlopCounterMode counts them, over 790 TFLOP/s (BF16).

    python benches/diffusion/torch_mmdit_bench.py --batch 1 --train-batch 1
Prints one JSON line per measurement. Needs torch and diffusers.
"""
import argparse
import json
import os
import time

import diffusers
import torch
from diffusers import FluxTransformer2DModel
from torch.utils.flop_counter import FlopCounterMode

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1)
p.add_argument("--train-batch", type=int, default=1)
p.add_argument("--image-tokens", type=int, default=1024)
p.add_argument("--text-tokens", type=int, default=512)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--variants", default="eager,compile")
p.add_argument("--no-step", action="store_true", help="only the training step")
a = p.parse_args()
PEAK = 790e12
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "flux_block.json")) as f:
    config = json.load(f)


def timed(f, steps):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        out = f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps, out


def inputs(model, batch):
    c = model.config
    side = int(a.image_tokens ** 0.5)
    ids = torch.zeros(side, side, 3)
    ids[..., 1] += torch.arange(side)[:, None]
    ids[..., 2] += torch.arange(side)[None, :]
    return {"hidden_states": torch.randn(batch, side * side, c.in_channels, device="cuda"),
            "encoder_hidden_states": torch.randn(batch, a.text_tokens, c.joint_attention_dim,
                                                 device="cuda"),
            "pooled_projections": torch.randn(batch, c.pooled_projection_dim, device="cuda"),
            "timestep": torch.full((batch,), 0.5, device="cuda"),
            "guidance": torch.full((batch,), 3.5, device="cuda"),
            "img_ids": ids.reshape(-1, 3).cuda(),
            "txt_ids": torch.zeros(a.text_tokens, 3, device="cuda")}


def gib(n):
    return round(n / 2**30, 2)


torch.manual_seed(0)
model = FluxTransformer2DModel.from_config(config).cuda()
common = {"model": "flux_block", "image_tokens": a.image_tokens, "text_tokens": a.text_tokens,
          "torch": torch.__version__, "diffusers": diffusers.__version__,
          "params": sum(p.numel() for p in model.parameters())}
model.eval()
x = inputs(model, a.batch)
with torch.no_grad(), torch.autocast("cuda", torch.bfloat16), FlopCounterMode(display=False) as fc:
    model(**x)
flops = fc.get_total_flops()
print(json.dumps({"bench": "mmdit_floor", "batch": a.batch, "forward_gflop": round(flops / 1e9),
                  "step_floor_ms": round(flops / PEAK * 1e3, 3),
                  "train_floor_ms": round(3 * flops * a.train_batch / a.batch / PEAK * 1e3, 3),
                  **common}), flush=True)

for variant in a.variants.split(","):
    # compile_graphs: torch.compile with its CUDA graphs (mode "reduce-overhead"), beside our
    # captured step.
    fwd = {"eager": model, "compile": torch.compile(model),
           "compile_graphs": torch.compile(model, mode="reduce-overhead")}[variant]
    model.eval()
    x = inputs(model, a.batch)

    def step():
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
            return fwd(**x).sample

    if not a.no_step:
        with torch.autocast("cuda", torch.bfloat16):
            for _ in range(3 if variant == "eager" else 6):
                step()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            dt, _ = timed(step, a.steps)
        print(json.dumps({"bench": "torch_mmdit_step", "variant": variant, "batch": a.batch,
                          "step_ms": round(dt * 1e3, 3),
                          "peak_gib": gib(torch.cuda.max_memory_allocated()), **common}),
              flush=True)
    del x
    if a.train_batch == 0:
        continue
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
    x = inputs(model, a.train_batch)
    target = torch.randn_like(x["hidden_states"])

    def train():
        with torch.autocast("cuda", torch.bfloat16):
            pred = fwd(**x).sample
        loss = torch.nn.functional.mse_loss(pred.float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(3 if variant == "eager" else 6):
        train()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    dt, loss = timed(train, a.steps)
    print(json.dumps({"bench": "torch_mmdit_train", "variant": variant, "batch": a.train_batch,
                      "step_ms": round(dt * 1e3, 3), "loss": loss.item(),
                      "peak_gib": gib(torch.cuda.max_memory_allocated()), **common}), flush=True)
