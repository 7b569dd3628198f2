"""PyTorch's side of benches/unet_bench.rs, in the same call: diffusers' UNet2DConditionModel
from the same config (benches/diffusion/{sd15,sdxl}_unet.json, random weights, SDPA attention),
one denoising step (inside one autocast scope over the steps, as a sampling loop runs) and a
training step (noise-prediction MSE, backward, fused AdamW) under BF16 autocast, eager and
torch.compile, with the peak memory each held. The first line is the floor:
the forward's FLOPs as torch's FlopCounterMode counts them, over 790 TFLOP/s (BF16).

    python benches/diffusion/torch_unet_bench.py --model sd15 --batch 4 --train-batch 8
Prints one JSON line per measurement. Needs torch and diffusers.
"""
import argparse
import json
import os
import time

import diffusers
import torch
from diffusers import UNet2DConditionModel
from torch.utils.flop_counter import FlopCounterMode

p = argparse.ArgumentParser()
p.add_argument("--model", default="sd15")
p.add_argument("--batch", type=int, default=4)
p.add_argument("--train-batch", type=int, default=8)
p.add_argument("--imgsz", type=int, default=512)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--variants", default="eager,compile")
a = p.parse_args()
PEAK = 790e12
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, f"{a.model}_unet.json")) as f:
    config = json.load(f)


def timed(f, steps):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        out = f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps, out


def inputs(unet, batch):
    c = unet.config
    side = a.imgsz // 8
    x = {"sample": torch.randn(batch, c.in_channels, side, side, device="cuda"),
         "timestep": torch.full((batch,), 500.0, device="cuda"),
         "encoder_hidden_states": torch.randn(batch, 77, c.cross_attention_dim, device="cuda")}
    if c.addition_embed_type == "text_time":
        pooled = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim
        x["added_cond_kwargs"] = {
            "text_embeds": torch.randn(batch, pooled, device="cuda"),
            "time_ids": torch.tensor([[1024.0, 1024, 0, 0, 1024, 1024]] * batch, device="cuda")}
    return x


def gib(n):
    return round(n / 2**30, 2)


torch.manual_seed(0)
unet = UNet2DConditionModel.from_config(config).cuda()
common = {"model": a.model, "imgsz": a.imgsz, "torch": torch.__version__,
          "diffusers": diffusers.__version__,
          "params": sum(p.numel() for p in unet.parameters())}
unet.eval()
x = inputs(unet, a.batch)
with torch.no_grad(), torch.autocast("cuda", torch.bfloat16), FlopCounterMode(display=False) as fc:
    unet(**x)
flops = fc.get_total_flops()
print(json.dumps({"bench": "unet_floor", "batch": a.batch, "forward_gflop": round(flops / 1e9),
                  "step_floor_ms": round(flops / PEAK * 1e3, 2),
                  "train_floor_ms": round(3 * flops * a.train_batch / a.batch / PEAK * 1e3, 2),
                  **common}), flush=True)

for variant in a.variants.split(","):
    # compile_graphs: torch.compile with its CUDA graphs (mode "reduce-overhead"), beside our
    # captured step.
    fwd = {"eager": unet, "compile": torch.compile(unet),
           "compile_graphs": torch.compile(unet, mode="reduce-overhead")}[variant]
    unet.eval()
    x = inputs(unet, a.batch)

    def step():
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
            return fwd(**x).sample

    # As a denoising loop runs: inside one autocast scope, which casts each weight once.
    with torch.autocast("cuda", torch.bfloat16):
        for _ in range(3 if variant == "eager" else 6):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        dt, _ = timed(step, a.steps)
    print(json.dumps({"bench": "torch_unet_step", "variant": variant, "batch": a.batch,
                      "step_ms": round(dt * 1e3, 2),
                      "peak_gib": gib(torch.cuda.max_memory_allocated()), **common}), flush=True)
    del x
    if a.train_batch == 0:
        continue
    unet.train()
    opt = torch.optim.AdamW(unet.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
    x = inputs(unet, a.train_batch)
    target = torch.randn_like(x["sample"])

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
    print(json.dumps({"bench": "torch_unet_train", "variant": variant, "batch": a.train_batch,
                      "step_ms": round(dt * 1e3, 2), "loss": loss.item(),
                      "peak_gib": gib(torch.cuda.max_memory_allocated()), **common}), flush=True)
    del opt, x, target
    torch.cuda.empty_cache()
