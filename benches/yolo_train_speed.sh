#!/usr/bin/env bash
# One call on the GPU machine: a generated shapes set, then scripts/yolo_train.rhai on CUDA
# (imgsz 640, batch 32, mosaic on), printing each epoch's line with its training images/s.
# Everything goes to $OUT/yolo_train.log as it runs.
#   carry [".devpack"]; command: bash benches/yolo_train_speed.sh
# With ULTRALYTICS=1, each model then trains with ultralytics 8.4.190 on the same data and
# arguments (benches/ultralytics_train_speed.py, its lines start "ultralytics epoch"), from the
# wheels benches/ultralytics_wheels.sh put in .whl/ here:
#   carry [".devpack", ".whl"]; command: ULTRALYTICS=1 bash benches/yolo_train_speed.sh
#   MODELS="yolo11n.yaml yolo11s.yaml" EPOCHS=3 TRAIN=1024 VAL=128 LIMIT=300
#   UL_ARGS="key=value ..." (more ultralytics train arguments, after and over the ones above)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/yolo_train.log") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
data=/tmp/shapes
[ -f "$data/data.yaml" ] || .device/bin/brain run scripts/make_shapes.rhai dir="$data" \
  train="${TRAIN:-1024}" val="${VAL:-128}" imgsz=640
if [ "${ULTRALYTICS:-}" = 1 ]; then
  # The device README's way to bring packages the machine lacks: install the carried wheels
  # into a folder of their own, without the network or the dependency resolver.
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} \
    || { echo "ULTRALYTICS=1: installing .whl/*.whl failed (carry .whl?)"; ULTRALYTICS=; }
fi
for model in ${MODELS:-yolo11n.yaml}; do
  echo "=== $(date +%T) $model"
  timeout "${LIMIT:-300}" .device/bin/brain run scripts/yolo_train.rhai model="$model" \
    data="$data/data.yaml" epochs="${EPOCHS:-3}" batch=32 imgsz=640 close_mosaic=0 workers=16 \
    out="/tmp/speed-runs/${model%.yaml}" timings=true --device cuda 2>&1 | grep -E "^(epoch [0-9]+/[0-9]+  box|training|best|wrote|Error|error)|host seconds|panick"
  [ "${ULTRALYTICS:-}" = 1 ] || continue
  # Its full output (progress bars, tables) stays in /tmp; only the epoch lines come here, and
  # the output's end when it fails.
  echo "=== $(date +%T) ultralytics $model"
  ul_log=/tmp/ul-runs/${model%.yaml}.log; mkdir -p /tmp/ul-runs
  PYTHONUNBUFFERED=1 timeout "${LIMIT:-300}" python3 benches/ultralytics_train_speed.py \
    model="$model" data="$data/data.yaml" epochs="${EPOCHS:-3}" batch=32 imgsz=640 close_mosaic=0 \
    workers=16 device=0 amp=True seed=0 plots=False val=True project=/tmp/ul-runs \
    name="${model%.yaml}" ${UL_ARGS:-} >"$ul_log" 2>&1
  rc=$?
  grep -E "^ultralytics " "$ul_log"
  [ $rc = 0 ] || { echo "ultralytics exited with $rc; its output ends:"; tail -n 40 "$ul_log"; }
done
