"""The reference side of the training comparison (benches/image_train/compare.sh): the recipe of
benches/image_train/train.rhai in timm and torchvision, from the same initial weights.

    python timm_train.py model=vit|resnet weights=FILE train=DIR val=DIR seed=0 [epochs=30]
        [batch=64] [lr=1e-3] [weight_decay=0.05] [warmup=2] [min_scale=0.35] [flip=0.0]
        [workers=2]                                  (torch, torchvision, timm, safetensors)

timm's ViT-S/16 at 64x64 or ResNet-18 with 10 classes, the state dict from `weights` (timm's
names); AdamW from timm's optimizer factory with weight decay on every parameter (as
optim::adamw applies it); the learning rate per step as RustingBrain's warmup-cosine schedule
(linear warmup over `warmup` epochs, a half cosine to 0); training images through
RandomResizedCrop(64, scale=(min_scale, 1), bilinear) and RandomHorizontalFlip(flip); held-out
images through the evaluation transform data::image_folder uses (the ViT's
preprocessor_config.json: 64x64 bilinear, mean and std 0.5; the ResNet's: shortest edge 73,
centre 64, ImageNet's mean and std). F32. Prints each epoch's mean loss and held-out accuracy,
and `final accuracy A` at the end.
"""
import math
import sys

import timm
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from timm.optim import create_optimizer_v2
from torchvision import datasets, transforms as T

args = dict(a.split("=", 1) for a in sys.argv[1:])
model_kind = args["model"]
seed = int(args.get("seed", 0))
epochs, batch = int(args.get("epochs", 30)), int(args.get("batch", 64))
lr, wd = float(args.get("lr", 1e-3)), float(args.get("weight_decay", 0.05))
warmup_epochs = float(args.get("warmup", 2))
min_scale, flip = float(args.get("min_scale", 0.35)), float(args.get("flip", 0.0))
workers = int(args.get("workers", 2))
SIDE = 64

torch.manual_seed(seed)
if model_kind == "vit":
    model = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=SIDE, num_classes=10)
    mean, std = (0.5,) * 3, (0.5,) * 3
    evaluate = T.Compose([T.Resize((SIDE, SIDE), T.InterpolationMode.BILINEAR)])
else:
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    evaluate = T.Compose([T.Resize(73, T.InterpolationMode.BILINEAR), T.CenterCrop(SIDE)])
missing, unexpected = model.load_state_dict(load_file(args["weights"]), strict=False)
assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)
model = model.cuda()

normalise = [T.ToTensor(), T.Normalize(mean, std)]
train_tf = T.Compose([T.RandomResizedCrop(SIDE, scale=(min_scale, 1.0), interpolation=T.InterpolationMode.BILINEAR),
                      T.RandomHorizontalFlip(flip)] + normalise)
train_set = datasets.ImageFolder(args["train"], train_tf)
val_set = datasets.ImageFolder(args["val"], T.Compose([evaluate] + normalise))
train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch, shuffle=True, num_workers=workers,
                                           persistent_workers=True)
val_loader = torch.utils.data.DataLoader(val_set, batch_size=batch, num_workers=workers)

optimizer = create_optimizer_v2(model, "adamw", lr=lr, weight_decay=wd, filter_bias_and_bn=False)
total = epochs * len(train_loader)
warmup = int(warmup_epochs * len(train_loader))


def rate(step):  # RustingBrain's WarmupCosine at optimizer step `step` (from 1), over the peak
    if step <= warmup and warmup > 0:
        return step / warmup
    p = min(max(step - warmup, 0) / max(total - warmup, 1), 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * p))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: rate(i + 1))
accuracy = 0.0
for epoch in range(epochs):
    model.train()
    losses = []
    for x, y in train_loader:
        loss = F.cross_entropy(model(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    model.eval()
    right = seen = 0
    with torch.no_grad():
        for x, y in val_loader:
            right += (model(x.cuda()).argmax(-1).cpu() == y).sum().item()
            seen += len(y)
    accuracy = right / seen
    print(f"epoch {epoch + 1}: loss {sum(losses) / len(losses):.4f}, held-out accuracy {accuracy:.4f}", flush=True)
print(f"final accuracy {accuracy:.4f}")
