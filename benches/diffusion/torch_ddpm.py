"""The recipe of scripts/train_diffusion.rhai in diffusers and PyTorch, for a side-by-side run:
the same UNet2DModel config, DDPM noise-prediction loss, AdamW (no weight decay, grad norm 1),
warm-up + cosine to 0.1x, diffusers' EMAModel, BF16 autocast on CUDA; images in [-1, 1] from a
folder, centre-cropped. Saves a DDPMPipeline folder and prints the steps per second.

    python torch_ddpm.py DATA OUT STEPS BATCH WIDTH [IMGSZ]   (torch, diffusers, pillow)
"""
import glob, math, os, sys, time
import numpy as np
import torch
from PIL import Image
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel
from diffusers.training_utils import EMAModel

data, out = sys.argv[1], sys.argv[2]
steps, batch, width = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
imgsz = int(sys.argv[6]) if len(sys.argv) > 6 else 16
dev = "cuda" if torch.cuda.is_available() else "cpu"
paths = sorted(glob.glob(os.path.join(data, "*", "*.png")) + glob.glob(os.path.join(data, "*", "*.jpg")))
images = np.stack([np.asarray(Image.open(p).convert("RGB").resize((imgsz, imgsz))) for p in paths])
x_all = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1).to(dev)
groups = 32 if width % 32 == 0 else width // 4
unet = UNet2DModel(sample_size=imgsz, in_channels=3, out_channels=3, layers_per_block=2,
                   block_out_channels=(width, 2 * width, 2 * width), norm_num_groups=groups,
                   down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
                   up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
                   attention_head_dim=8).to(dev)
sched = DDPMScheduler(num_train_timesteps=1000, beta_schedule="linear")
lr = 2e-4
opt = torch.optim.AdamW(unet.parameters(), lr=lr, weight_decay=0.0)
warm = min(500, steps // 10)
def rate(s):
    if s < warm:
        return (s + 1) / warm
    p = (s - warm) / max(1, steps - warm)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))
lr_sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
ema = EMAModel(unet.parameters(), decay=0.9995)
g = torch.Generator(device="cpu").manual_seed(0)
losses = []
start = time.time()
for step in range(steps):
    idx = torch.randint(0, len(x_all), (batch,), generator=g)
    x0 = x_all[idx.to(dev)]
    noise = torch.randn_like(x0)
    t = torch.randint(0, 1000, (batch,), device=dev)
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
        pred = unet(sched.add_noise(x0, noise, t), t).sample
    loss = torch.nn.functional.mse_loss(pred.float(), noise)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
    opt.step()
    lr_sched.step()
    ema.step(unet.parameters())
    losses.append(loss.item())
if dev == "cuda":
    torch.cuda.synchronize()
seconds = time.time() - start
ema.copy_to(unet.parameters())
DDPMPipeline(unet=unet, scheduler=sched).save_pretrained(os.path.join(out, "ddpm"))
print(f"diffusers: {steps} steps in {seconds:.1f} s ({steps / seconds:.1f} steps/s), "
      f"final loss {np.mean(losses[-50:]):.4f}")
