#!/usr/bin/env python3
"""Trains a YOLO with ultralytics (8.4.190) and prints, per epoch, its training images/s measured
as scripts/yolo_train.rhai measures ours: from the start of the epoch's first training batch
(its data loading included) to the end of its last, validation left out, images = the epoch's
batches times the batch size (the last, partial batch counted as what it holds). Also prints the
epoch's mean training losses and the validation mAP50 / mAP50-95.

    python3 benches/ultralytics_train_speed.py data=/tmp/shapes/data.yaml [key=value ...]

Any ultralytics train argument can be given as key=value (values read as YAML: 3, true, 0.01).
Defaults: model=yolo11n.yaml epochs=3 batch=32 imgsz=640 close_mosaic=0 workers=16 device=0
amp=True seed=0 plots=False val=True project=/tmp/ul-runs name=train exist_ok=True.

It runs offline (the GPU machine reaches nothing): see the three patches below, none of which
touches what happens between an epoch's first and last training batch.
"""

import csv
import os
import sys
import time

# Before ultralytics is imported: no network checks, no analytics, and a settings file of our
# own, so a developer's settings (W&B, Comet, a Platform key...) do not add callbacks.
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_CONFIG_DIR", "/tmp/ul-config")

import torch  # noqa: E402
import yaml  # noqa: E402

import ultralytics  # noqa: E402
import ultralytics.data.utils  # noqa: E402
import ultralytics.engine.trainer  # noqa: E402
from ultralytics import YOLO  # noqa: E402
from ultralytics.utils import SETTINGS  # noqa: E402

DEFAULTS = {
    "model": "yolo11n.yaml",
    "epochs": 3,
    "batch": 32,
    "imgsz": 640,
    "close_mosaic": 0,
    "workers": 16,
    "device": 0,
    "amp": True,
    "seed": 0,
    "plots": False,
    "val": True,
    "project": "/tmp/ul-runs",
    "name": "train",
    "exist_ok": True,
}


# --- Offline patches -------------------------------------------------------------------------

_check_amp = ultralytics.engine.trainer.check_amp


def check_amp_offline(model):
    """ultralytics' AMP check downloads yolo26n.pt and compares its FP32 and AMP boxes on one
    image. Offline the download cannot happen; the check itself then keeps AMP on (its
    ConnectionError branch returns True), but only after a download attempt whose failure mode
    depends on the network. The H200 is not on its list of GPUs with broken AMP, so on CUDA we
    answer as that branch does, without the attempt. CPU and MPS keep the real answer (False,
    decided before any download). The per-epoch losses and mAP printed below show whether AMP
    misbehaved."""
    if next(model.parameters()).device.type == "cuda":
        print("ultralytics AMP: on (check_amp's download skipped offline)", flush=True)
        return True
    return _check_amp(model)


def read_results_csv(self):
    """BaseTrainer.read_results_csv (the copy of results.csv stored in each checkpoint, written
    after validation) with the standard library instead of polars, which the GPU machine lacks
    and whose wheel alone is ~40 MB: the same dict of column -> list of values."""
    try:
        with open(self.csv, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {}
    columns = {}
    for row in rows:
        for key, value in row.items():
            try:
                value = float(value)
            except (TypeError, ValueError):
                pass
            columns.setdefault(key.strip(), []).append(value)
    return columns


def check_font_offline(font="Arial.ttf"):
    """check_det_dataset asks for Arial.ttf (downloaded when missing) for plot labels; plots are
    off, so no font is needed."""
    return None


ultralytics.engine.trainer.check_amp = check_amp_offline
ultralytics.engine.trainer.BaseTrainer.read_results_csv = read_results_csv
ultralytics.data.utils.check_font = check_font_offline


# --- Timing -----------------------------------------------------------------------------------


class EpochClock:
    """ultralytics callbacks that time each epoch's training batches and print its line."""

    def __init__(self):
        self.start = 0.0
        self.batches = 0
        self.line = None

    def on_train_epoch_start(self, trainer):
        self.batches = 0
        self.line = None
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer):
        self.batches += 1

    def on_train_epoch_end(self, trainer):
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)  # the last step's kernels belong to the epoch
        seconds = time.perf_counter() - self.start
        images = min(self.batches * trainer.batch_size, len(trainer.train_loader.dataset))
        losses = "  ".join(f"{k.removesuffix('_loss')} {float(v):.4f}" for k, v in trainer.tloss.items())
        self.line = (
            f"epoch {trainer.epoch + 1}/{trainer.epochs}  {losses}",
            f"({images / seconds:.0f} images/s: {images} images, {self.batches} batches in {seconds:.2f} s)",
        )

    def on_fit_epoch_end(self, trainer):
        # Also called once more by final_eval (best.pt), with no training epoch behind it.
        if self.line is None:
            return
        head, rate = self.line
        m = trainer.metrics
        print(
            f"ultralytics {head}  mAP50 {m.get('metrics/mAP50(B)', float('nan')):.4f}"
            f"  mAP50-95 {m.get('metrics/mAP50-95(B)', float('nan')):.4f}  {rate}",
            flush=True,
        )
        self.line = None


def parse_args(argv):
    args = dict(DEFAULTS)
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep or not key:
            sys.exit(f"expected key=value, got {item!r}")
        args[key] = yaml.safe_load(value) if value else value
    if "data" not in args:
        sys.exit("data=PATH/data.yaml is required")
    return args


def main():
    args = parse_args(sys.argv[1:])
    SETTINGS.update({"sync": False})
    print(
        f"ultralytics {ultralytics.__version__}, torch {torch.__version__}, "
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA'}; "
        + " ".join(f"{k}={v}" for k, v in args.items()),
        flush=True,
    )
    model = YOLO(args.pop("model"))
    clock = EpochClock()
    for event in ("on_train_epoch_start", "on_train_batch_end", "on_train_epoch_end", "on_fit_epoch_end"):
        model.add_callback(event, getattr(clock, event))
    model.train(**args)


if __name__ == "__main__":
    main()
