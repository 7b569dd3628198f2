#!/usr/bin/env bash
# One call on the GPU machine: `lm_bench train` beside benches/torch_lm_bench.py (eager and
# torch.compile) for the 124M and 1.1B LLaMA shapes, runs alternating, ROUNDS of each (default
# 1; the issue's comparison takes 3 and the median; SKIP_EAGER / SKIP_COMPILE leave a reference
# out; GRAPH=1 adds our steps replayed from a CUDA graph). Everything goes to $OUT/log.txt as it runs;
# each run has its own time limit, so a call that runs out still reports.
#   carry [".devpack"]; command: bash benches/lm_speed.sh   (after device_check.sh unpacked it)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for round in $(seq "${ROUNDS:-1}"); do
  for shape in ${SHAPES:-124m 1.1b}; do
    echo "=== $(date +%T) round $round, $shape"
    # A binary built before a change (packed as lm_bench_before) runs beside it, alternating.
    if [ -x .device/bin/lm_bench_before ]; then
      echo "--- before"
      timeout ${OURS_LIMIT:-180} .device/bin/lm_bench_before train --shape "$shape" 2>&1 | tail -2
      echo "--- after"
    fi
    timeout ${OURS_LIMIT:-180} .device/bin/lm_bench train --shape "$shape" 2>&1 | tail -2
    # GRAPH=1: the same binary again with every step replayed from a CUDA graph (TrainGraph).
    if [ -n "${GRAPH:-}" ]; then
      echo "--- graph"
      timeout ${OURS_LIMIT:-180} .device/bin/lm_bench train --shape "$shape" --graph 2>&1 | tail -2
    fi
    [ -n "${SKIP_EAGER:-}" ] || timeout ${TORCH_LIMIT:-240} python3 benches/torch_lm_bench.py --shape "$shape" 2>&1 | tail -1
    [ -n "${SKIP_COMPILE:-}" ] || timeout ${COMPILE_LIMIT:-420} python3 benches/torch_lm_bench.py --shape "$shape" --compile 2>&1 | tail -1
  done
done
# PROFILE=1: one step of ours under ncu, kernels grouped (benches/ncu_by_kernel.py), for the
# kernel table in docs/baseline.md.
if [ -n "${PROFILE:-}" ]; then
  echo "=== $(date +%T) ncu, one step of lm_bench profile"
  for bin in lm_bench_before lm_bench; do
    [ -x .device/bin/$bin ] || continue
    echo "--- $bin"
    timeout ${PROFILE_LIMIT:-240} ncu --profile-from-start off --clock-control none --csv --page raw \
      --metrics gpu__time_duration.sum .device/bin/$bin profile > "$out/$bin.profile.csv" 2>/dev/null
    python3 benches/ncu_by_kernel.py "$out/$bin.profile.csv" 40
  done
fi
