#!/usr/bin/env bash
# One call on the GPU machine: the kernels of one steady decode step (1.1B LLaMA shape, BF16,
# greedy, op by op so ncu sees each kernel) under ncu, summed by kernel from one argmax to the
# next (benches/ncu_by_kernel.py). BATCHES="1 16" by default; SKIP kernels are passed over
# first so the window lies in the steady part of the 256 new tokens.
#   carry [".devpack"]; command: bash benches/decode_profile.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for b in ${BATCHES:-1 16}; do
  echo "=== $(date +%T) ncu, one decode step at batch $b"
  timeout ${LIMIT:-180} ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum \
    --launch-skip ${SKIP:-30000} --launch-count ${COUNT:-500} \
    .device/bin/lm_bench decode --batch "$b" --no-graph > "$out/decode_b$b.csv" 2>/dev/null
  MARKER=extreme python3 benches/ncu_by_kernel.py "$out/decode_b$b.csv" 30
done
