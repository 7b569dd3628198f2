#!/usr/bin/env bash
# One call on the GPU machine: a generated shapes set, then scripts/yolo_train.rhai on CUDA
# (imgsz 640, batch 32, mosaic on), printing each epoch's line with its training images/s.
# Everything goes to $OUT/yolo_train.log as it runs.
#   carry [".devpack"]; command: bash benches/yolo_train_speed.sh
#   MODELS="yolo11n.yaml yolo11s.yaml" EPOCHS=3 TRAIN=1024 VAL=128 LIMIT=300
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/yolo_train.log") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
data=/tmp/shapes
[ -f "$data/data.yaml" ] || .device/bin/brain run scripts/make_shapes.rhai dir="$data" \
  train="${TRAIN:-1024}" val="${VAL:-128}" imgsz=640
for model in ${MODELS:-yolo11n.yaml}; do
  echo "=== $(date +%T) $model"
  timeout "${LIMIT:-300}" .device/bin/brain run scripts/yolo_train.rhai model="$model" \
    data="$data/data.yaml" epochs="${EPOCHS:-3}" batch=32 imgsz=640 close_mosaic=0 workers=16 \
    out="$out/run-${model%.yaml}" --device cuda 2>&1 | grep -E "^(epoch|training|best|wrote|Error|error)|panick" 
done
