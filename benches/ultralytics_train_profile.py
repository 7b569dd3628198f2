#!/usr/bin/env python3
"""Where one ultralytics (8.4.190) training period's GPU time goes, beside ours
(benches/yolo_train_profile.sh): torch.profiler over two consecutive training batches of the
second epoch (one optimizer step at batch 32 and the nominal batch 64), kernels summed by name.

    python3 benches/ultralytics_train_profile.py data=/tmp/shapes/data.yaml [key=value ...] [rows=45]

The arguments are benches/ultralytics_train_speed.py's (same defaults and offline patches);
epochs defaults to 2 here. Prints the window's host seconds, its kernel count and GPU time,
then the largest kernels: launches, milliseconds, share.
"""

import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ultralytics_train_speed as speed  # noqa: E402  (patches ultralytics for offline use)

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


class Window:
    """Profiles batches [first, first + count) of epoch `epoch` (0-based)."""

    def __init__(self, epoch=1, first=4, count=2):
        self.epoch, self.first, self.count = epoch, first, count
        self.batch = 0
        self.prof = None
        self.start = 0.0
        self.report = None

    def on_train_epoch_start(self, trainer):
        self.batch = 0

    def on_train_batch_start(self, trainer):
        if trainer.epoch == self.epoch and self.batch == self.first:
            torch.cuda.synchronize()
            self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            self.prof.__enter__()
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer):
        self.batch += 1
        if self.prof is not None and self.batch == self.first + self.count:
            torch.cuda.synchronize()
            seconds = time.perf_counter() - self.start
            self.prof.__exit__(None, None, None)
            self.report = (seconds, self.prof)
            self.prof = None


def kernel_table(prof, rows):
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("Memcpy"):
            entry = by_name[e.name[:90]]
            entry[0] += 1
            entry[1] += e.device_time_total / 1000.0  # us -> ms
    total = sum(ms for _, ms in by_name.values())
    launches = sum(n for n, _ in by_name.values())
    print(f"{launches} kernels, {total:.1f} ms of GPU time")
    print(f"{'launches':>8} {'ms':>8} {'share':>6}  kernel")
    for name, (n, ms) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:rows]:
        print(f"{n:8d} {ms:8.2f} {100 * ms / total:5.1f}%  {name}")


def main():
    argv = [a for a in sys.argv[1:] if not a.startswith("rows=")]
    rows = next((int(a[5:]) for a in sys.argv[1:] if a.startswith("rows=")), 45)
    args = speed.parse_args(argv + ([] if any(a.startswith("epochs=") for a in argv) else ["epochs=2"]))
    speed.SETTINGS.update({"sync": False})
    model = speed.YOLO(args.pop("model"))
    window = Window()
    for event in ("on_train_epoch_start", "on_train_batch_start", "on_train_batch_end"):
        model.add_callback(event, getattr(window, event))
    model.train(**args)
    if window.report is None:
        sys.exit("the profiled window was not reached (fewer than 6 batches in epoch 2?)")
    seconds, prof = window.report
    print(f"ultralytics profile: batches {window.first + 1}-{window.first + window.count} of epoch "
          f"{window.epoch + 1}, {seconds * 1000:.1f} ms of host time")
    kernel_table(prof, rows)


if __name__ == "__main__":
    main()
