#!/usr/bin/env bash
# One call on the GPU machine: a change's speed beside the build before it, alternating, in the
# same call (the machines are noisy; compare within one run). `benches/pack_cuda_suite.sh DIR`
# packs the earlier build's binaries from DIR as brain_before, lm_bench_before and
# yolo_bench_before. Each line printed is `<which> <json>`; everything goes to $OUT/speed.txt.
#   carry [".devpack"]; command: bash benches/before_after.sh
# WHAT picks the runs (default "train decode yolo"); ROUNDS (default 2) alternating rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/speed.txt") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export RB_KERNEL_CACHE="$PWD/.kcache"
mkdir -p "$RB_KERNEL_CACHE"
[ -f .devpack/kcache.tar.xz ] && tar -xJf .devpack/kcache.tar.xz -C "$RB_KERNEL_CACHE"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
bin=.device/bin
# One run: its JSON result line, or the end of what it printed when it failed.
run() {
  local label=$1; shift
  timeout "${LIMIT:-240}" "$@" > /tmp/run.log 2>&1
  local rc=$?
  echo "$label $(grep -E '^\{' /tmp/run.log | tail -1)"
  [ $rc = 0 ] || { echo "$label exit $rc"; tail -4 /tmp/run.log; }
}
for round in $(seq "${ROUNDS:-2}"); do
  echo "=== $(date +%T) round $round"
  for which in before after; do
    suffix=$([ $which = before ] && echo _before || echo "")
    [ -x "$bin/lm_bench$suffix" ] || continue
    for what in ${WHAT:-train decode yolo}; do
      case $what in
        train)
          run "$which train 124m" "$bin/lm_bench$suffix" train --shape 124m
          run "$which train 1.1b" "$bin/lm_bench$suffix" train --shape 1.1b ;;
        decode)
          run "$which decode b1" "$bin/lm_bench$suffix" decode --batch 1
          run "$which decode b16" "$bin/lm_bench$suffix" decode --batch 16 ;;
        yolo)
          [ -f /tmp/shapes/data.yaml ] || "$bin/brain" run scripts/make_shapes.rhai dir=/tmp/shapes \
            train="${TRAIN:-512}" val=64 imgsz=640 > /dev/null
          timeout "${LIMIT:-240}" "$bin/brain$suffix" run scripts/yolo_train.rhai model=yolo11n.yaml \
            data=/tmp/shapes/data.yaml epochs="${EPOCHS:-2}" batch=32 imgsz=640 close_mosaic=0 \
            workers=16 out="/tmp/runs-$which" timings=true --device cuda 2>&1 \
            | grep -E "^epoch [0-9]+/[0-9]+ |images/s|Error|error|panick" | sed "s/^/$which yolo /" ;;
      esac
    done
  done
done
