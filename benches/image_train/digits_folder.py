"""scikit-learn's handwritten digits (the 1,797 8x8 images its wheel ships in
sklearn/datasets/data/digits.csv.gz, UCI's optical digits test set) as an image folder in the
ImageNet layout, for benches/image_train/compare.sh.

    python digits_folder.py OUT [SIDE]        (scikit-learn, pillow, numpy)

Writes OUT/train/<digit>/<n>.png and OUT/val/<digit>/<n>.png: each digit's images in file order,
every fifth one held out (1,442 training and 355 held-out images), grey on black, 16 levels
stretched to 0..255 and enlarged to SIDE x SIDE (default 64) with Pillow's bicubic filter.
"""
import os
import sys

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits


def main():
    out = sys.argv[1]
    side = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    digits = load_digits()
    seen = {}
    for pixels, label in zip(digits.images, digits.target):
        n = seen.get(label, 0)
        seen[label] = n + 1
        part = "val" if n % 5 == 4 else "train"
        folder = os.path.join(out, part, str(label))
        os.makedirs(folder, exist_ok=True)
        grey = np.round(pixels * (255.0 / 16.0)).astype(np.uint8)
        img = Image.fromarray(grey, "L").resize((side, side), Image.BICUBIC).convert("RGB")
        img.save(os.path.join(folder, f"{n:03d}.png"))
    counts = {p: sum(len(f) for _, _, f in os.walk(os.path.join(out, p))) for p in ("train", "val")}
    print(f"{out}: {counts['train']} training and {counts['val']} held-out images, {len(seen)} classes")


main()
