#!/usr/bin/env bash
# One call on the GPU machine: where a YOLO training step's GPU time goes. Runs
# scripts/yolo_train.rhai (imgsz 640, batch 32, BF16) under ncu for a window of kernels in the
# first epoch, and sums one optimizer period (2 batches at the nominal batch 64) by kernel.
#   carry [".devpack"]; command: bash benches/yolo_train_profile.sh
#   MODEL=yolo11n.yaml SKIP=14000 COUNT=8000 (a 320-image set: 10 batches an epoch)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/yolo_profile.log") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
data=/tmp/shapes-profile
[ -f "$data/data.yaml" ] || .device/bin/brain run scripts/make_shapes.rhai dir="$data" \
  train=320 val=32 imgsz=640 > /dev/null
echo "=== $(date +%T) ncu over ${MODEL:-yolo11n.yaml} training"
timeout "${LIMIT:-300}" ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum \
  --launch-skip "${SKIP:-14000}" --launch-count "${COUNT:-8000}" \
  .device/bin/brain run scripts/yolo_train.rhai model="${MODEL:-yolo11n.yaml}" data="$data/data.yaml" \
  epochs=1 batch=32 imgsz=640 close_mosaic=0 workers=16 out=/tmp/prof-run --device cuda \
  > "$out/yolo_train.ncu.csv" 2> /tmp/ncu.err
tail -3 /tmp/ncu.err
BY_COUNT=1 MARKER=grad_norm_finish MARKER_EVERY=3 python3 benches/ncu_by_kernel.py "$out/yolo_train.ncu.csv" 45
