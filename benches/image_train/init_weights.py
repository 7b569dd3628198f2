"""The shared initial weights of the training comparison (benches/image_train/compare.sh): timm's
own initialisation of ViT-S/16 (at 64x64, 10 classes) and of ResNet-18 (10 classes), seeded.

    python init_weights.py OUT [SEED]        (torch, timm, transformers, safetensors)

Writes OUT/vit-s16/ (transformers' ViTForImageClassification layout: config.json,
model.safetensors, preprocessor_config.json), OUT/vit-s16-timm.safetensors and
OUT/resnet18.safetensors (timm's names, which are torchvision's, buffers included). The ViT is
converted timm -> transformers, and the script asserts that transformers' model read from the folder gives timm's logits.
"""
import json
import os
import sys

import timm
import torch
from safetensors.torch import save_file
from transformers import ViTConfig, ViTForImageClassification

SIDE, CLASSES = 64, 10


def vit_to_transformers(sd, depth):
    out = {
        "vit.embeddings.cls_token": sd["cls_token"],
        "vit.embeddings.position_embeddings": sd["pos_embed"],
        "vit.embeddings.patch_embeddings.projection.weight": sd["patch_embed.proj.weight"],
        "vit.embeddings.patch_embeddings.projection.bias": sd["patch_embed.proj.bias"],
        "vit.layernorm.weight": sd["norm.weight"],
        "vit.layernorm.bias": sd["norm.bias"],
        "classifier.weight": sd["head.weight"],
        "classifier.bias": sd["head.bias"],
    }
    for i in range(depth):
        t, h = f"blocks.{i}.", f"vit.encoder.layer.{i}."
        for ours, theirs in [("layernorm_before", "norm1"), ("layernorm_after", "norm2"),
                             ("attention.output.dense", "attn.proj"),
                             ("intermediate.dense", "mlp.fc1"), ("output.dense", "mlp.fc2")]:
            for p in ("weight", "bias"):
                out[f"{h}{ours}.{p}"] = sd[f"{t}{theirs}.{p}"]
        for p in ("weight", "bias"):
            q, k, v = sd[f"{t}attn.qkv.{p}"].chunk(3, dim=0)
            for name, x in (("query", q), ("key", k), ("value", v)):
                out[f"{h}attention.attention.{name}.{p}"] = x
    return {k: v.contiguous() for k, v in out.items()}


def main():
    out = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    os.makedirs(os.path.join(out, "vit-s16"), exist_ok=True)
    labels = {i: str(i) for i in range(CLASSES)}

    torch.manual_seed(seed)
    vit = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=SIDE,
                            num_classes=CLASSES).eval()
    sd = vit.state_dict()
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(out, "vit-s16-timm.safetensors"))
    config = ViTConfig(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                       intermediate_size=1536, image_size=SIDE, patch_size=16,
                       layer_norm_eps=1e-6, qkv_bias=True, hidden_act="gelu",
                       id2label=labels, label2id={v: k for k, v in labels.items()},
                       architectures=["ViTForImageClassification"])
    # The Hub's names (transformers 5 renames ViT's modules but still reads these, as every
    # published ViT checkpoint has them): written directly, then read back by from_pretrained.
    folder = os.path.join(out, "vit-s16")
    config.save_pretrained(folder)
    save_file(vit_to_transformers(sd, 12), os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    hf = ViTForImageClassification.from_pretrained(folder).eval()
    with open(os.path.join(out, "vit-s16", "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "ViTImageProcessor", "do_resize": True,
                   "size": {"height": SIDE, "width": SIDE}, "resample": 2, "do_rescale": True,
                   "rescale_factor": 1 / 255, "do_normalize": True,
                   "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}, f, indent=2)
    x = torch.randn(2, 3, SIDE, SIDE)
    with torch.no_grad():
        diff = (hf(pixel_values=x).logits - vit(x)).abs().max().item()
    assert diff < 1e-4, f"transformers' ViT differs from timm's by {diff}"
    print(f"vit-s16: {sum(p.numel() for p in vit.parameters())} parameters, "
          f"transformers' logits within {diff:.1e} of timm's")

    torch.manual_seed(seed)
    resnet = timm.create_model("resnet18", pretrained=False, num_classes=CLASSES)
    weights = {k: v.contiguous() for k, v in resnet.state_dict().items()}
    save_file(weights, os.path.join(out, "resnet18.safetensors"))
    print(f"resnet18: {sum(p.numel() for p in resnet.parameters())} parameters")


main()
