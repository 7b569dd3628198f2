"""Writes the 1,797 handwritten digits of scikit-learn's digits set (UCI's optdigits, 8x8,
16 grey levels) as 16x16 RGB PNGs (nearest-neighbour x2, white on black) in OUT/digits/, a
folder of real images for scripts/train_diffusion.rhai.

    pip download scikit-learn --no-deps -d wheels   # the data ships inside the wheel
    python make_digits.py wheels/scikit_learn-*.whl OUT   (numpy, pillow)
"""
import gzip, io, os, sys, zipfile
import numpy as np
from PIL import Image

wheel, out = sys.argv[1], sys.argv[2]
raw = zipfile.ZipFile(wheel).read("sklearn/datasets/data/digits.csv.gz")
rows = np.loadtxt(io.BytesIO(gzip.decompress(raw)), delimiter=",")
os.makedirs(os.path.join(out, "digits"), exist_ok=True)
for i, row in enumerate(rows):
    grey = (row[:64].reshape(8, 8) * (255 / 16)).round().astype(np.uint8)
    grey = grey.repeat(2, axis=0).repeat(2, axis=1)
    Image.fromarray(np.stack([grey] * 3, axis=-1)).save(os.path.join(out, "digits", f"{i:04d}_{int(row[64])}.png"))
print(len(rows), "digits")
