"""Sums ncu's per-kernel durations (`ncu --csv --page raw --metrics gpu__time_duration.sum`)
by kernel name: where one profiled step's GPU time goes.

python3 benches/ncu_by_kernel.py ncu.csv [rows]

With MARKER=name (a kernel launched once a step, e.g. grad_norm_finish) only the kernels from
one marker up to the next are summed: one whole period of a window that starts and ends
mid-step. A marker launched several times a step (grad_norm_finish once per parameter group)
takes MARKER_EVERY=k: the period then runs from a marker to the k-th after it.
"""
import collections
import csv
import os
import re
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]
name_col, time_col = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
kernels = []
for r in rows[head + 2:]:
    try:
        ns = float(r[time_col].replace(",", ""))
    except (ValueError, IndexError):
        continue
    kernels.append((re.sub(r"\(.*", "", r[name_col])[:80], ns))
marker = os.environ.get("MARKER")
if marker:
    at = [i for i, (n, _) in enumerate(kernels) if n.startswith(marker)]
    if len(at) < 2:
        sys.exit(f"fewer than two {marker} launches in the window ({len(at)})")
    print(f"{len(at)} {marker} launches; periods of {[b - a for a, b in zip(at, at[1:])]} kernels")
    # A step may launch the marker once per parameter group (MARKER_EVERY of them a
    # period): any MARKER_EVERY consecutive stretches make one whole period.
    every = int(os.environ.get("MARKER_EVERY", "1"))
    if len(at) <= every:
        sys.exit(f"fewer than {every + 1} {marker} launches in the window ({len(at)})")
    kernels = kernels[at[0]:at[every]]
by = collections.defaultdict(lambda: [0, 0.0])
for name, ns in kernels:
    by[name][0] += 1
    by[name][1] += ns
total = sum(v[1] for v in by.values())
print(f"kernels: {sum(v[0] for v in by.values())}, total {total / 1e6:.2f} ms")
for name, (n, ns) in sorted(by.items(), key=lambda x: -x[1][1])[: int(sys.argv[2]) if len(sys.argv) > 2 else 40]:
    print(f"{ns / 1e6:8.3f} ms {100 * ns / total:5.1f}% {n:4d}x  {name}")
if os.environ.get("BY_COUNT"):
    print("by launches:")
    for name, (n, ns) in sorted(by.items(), key=lambda x: -x[1][0])[:40]:
        print(f"{n:5d}x {ns / 1e6:8.3f} ms  {name}")
