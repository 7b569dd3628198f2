"""Sample quality of DDPMPipeline folders on their training images: each pipeline draws N
samples (DDIM, 50 steps, the same seeds) through diffusers, and the figure is the mean L2
distance in pixels (0-255 scale, per pixel RMS) from each sample to its nearest training image,
beside the same for N noise images and for N held training images (the floor).

    python eval_ddpm.py DATA N PIPELINE_DIR [PIPELINE_DIR ...]   (torch, diffusers, pillow)
"""
import glob, os, sys
import numpy as np
import torch
from PIL import Image
from diffusers import DDIMScheduler, DDPMPipeline

data, n = sys.argv[1], int(sys.argv[2])
paths = sorted(glob.glob(os.path.join(data, "*", "*.png")))
train = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in paths]).astype(np.float32)
flat = train.reshape(len(train), -1)

def nn_rms(samples):
    s = samples.reshape(len(samples), -1).astype(np.float32)
    d = ((s[:, None, :] - flat[None, :, :]) ** 2).mean(-1)
    return float(np.sqrt(d.min(1)).mean())

rng = np.random.default_rng(0)
print(f"noise images: {nn_rms(rng.integers(0, 256, (n,) + train.shape[1:])):.1f}")
for d in sys.argv[3:]:
    pipe = DDPMPipeline.from_pretrained(d)
    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    if torch.cuda.is_available():
        pipe.to("cuda")
    imgs = pipe(batch_size=n, num_inference_steps=50, generator=torch.Generator().manual_seed(0),
                output_type="np").images
    print(f"{d}: nearest-training-image RMS {nn_rms((imgs * 255).round()):.1f}")
