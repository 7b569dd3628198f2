#!/usr/bin/env bash
# One call on the GPU machine: the packed CUDA test binaries with CUDA required, then the
# convolution benchmark beside PyTorch (conv_speed.sh). Everything goes to $OUT/log.txt as it
# runs, and each phase has its own time limit, so a call that runs out still reports.
#   carry [".devpack"]; command: bash benches/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# Tests compiled here find their fixtures under this machine's build path: link it to the tree.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
for t in .device/tests/*; do
  [ -x "$t" ] || continue
  echo "=== $(date +%T) $t"
  RB_REQUIRE_CUDA=1 timeout ${TEST_LIMIT:-200} "$t" --test-threads=4 2>&1 \
    | grep -E "^test result|FAILED|panicked|relative error|failed|differs|rows|note:" | head -30
done
[ -n "${SKIP_CONVS:-}" ] || { echo "=== $(date +%T) convolutions"; timeout ${CONV_LIMIT:-300} bash benches/conv_speed.sh; }
