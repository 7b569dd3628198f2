"""PyTorch's side of benches/clip_bench.rs, in the same call: transformers' CLIPModel at
`CLIPConfig()`'s defaults (ViT-B/32, random weights, SDPA attention), image and text
embeddings (`get_image_features`, `get_text_features`) at one batch size under BF16 autocast
with no grad, 77-token texts ending in the end token, eager and torch.compile.

    python benches/torch_clip_bench.py --batch 256 --steps 20
Prints one JSON line per measurement.
"""
import argparse
import json
import time

import torch
import transformers
from transformers import CLIPConfig, CLIPModel

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=256)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--variants", default="eager,compile")
a = p.parse_args()


def timed(f, steps, warmup):
    for _ in range(warmup):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps


def run(variant):
    torch.manual_seed(0)
    config = CLIPConfig()
    config._attn_implementation = "sdpa"
    model = CLIPModel(config).cuda().eval()
    images_fn, texts_fn = model.get_image_features, model.get_text_features
    if variant == "compile":
        images_fn, texts_fn = torch.compile(images_fn), torch.compile(texts_fn)
    common = {"model": "clip-vit-b32", "batch": a.batch, "variant": variant,
              "torch": torch.__version__, "transformers": transformers.__version__}
    x = torch.rand(a.batch, 3, 224, 224, device="cuda")
    ids = torch.randint(0, 49406, (a.batch, 77), device="cuda")
    ids[:, -1] = 49407
    warmup = 3 if variant == "eager" else 10
    for bench, f in [("torch_clip_images", lambda: images_fn(pixel_values=x)),
                     ("torch_clip_texts", lambda: texts_fn(input_ids=ids))]:
        def step():
            with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
                return f()
        dt = timed(step, a.steps, warmup)
        print(json.dumps({"bench": bench, "step_ms": round(dt * 1e3, 2),
                          "per_s": round(a.batch / dt), **common}), flush=True)


for v in a.variants.split(","):
    run(v)
