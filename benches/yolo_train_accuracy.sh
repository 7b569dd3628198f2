#!/usr/bin/env bash
# One call on the GPU machine: final mAP of our trainer beside ultralytics 8.4.190's, from the
# same initial weights, over three seeds each (issue 12, "Accuracy").
#   carry [".devpack", ".whl"]; command: bash benches/yolo_train_accuracy.sh
# A generated shapes set (TRAIN=1024 train and VAL=256 validation images), one YOLO11n
# checkpoint with its classes (benches/yolo_initial_weights.rhai, seed 0), then six runs at
# once on the one GPU: scripts/yolo_train.rhai weights=init.pt and ultralytics model=init.pt,
# seeds 0, 1 and 2, EPOCHS=30 at IMGSZ=320, batch 32, the default close_mosaic (10), BF16 on
# both sides (ours: its autocast; ultralytics: amp=bf16, its autocast(torch.bfloat16) without a
# grad scaler), optimizer=auto on both (AdamW at these iterations). Each run's results.csv
# lands in $OUT/acc/{ours,ultralytics}-seed{0,1,2}/ (a copy of the 2026-12-03 run is in
# docs/measurements/yolo_accuracy); read them here with
#   brain run benches/yolo_train_accuracy.rhai dir=<files_at>/acc
# WORKERS loader threads per run (default 2: six runs share the machine's 16 cores).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}/acc; mkdir -p "$out"
exec > >(tee -a "$out/accuracy.log") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} \
  || { echo "installing .whl/*.whl failed (carry .whl)"; exit 1; }
epochs=${EPOCHS:-30}; imgsz=${IMGSZ:-320}; workers=${WORKERS:-2}
data=/tmp/acc-shapes
[ -f "$data/data.yaml" ] || .device/bin/brain run scripts/make_shapes.rhai dir="$data" \
  train="${TRAIN:-1024}" val="${VAL:-256}" imgsz="$imgsz" >/dev/null || exit 1
init=/tmp/acc-init/yolo11n-init.pt; mkdir -p /tmp/acc-init
.device/bin/brain run benches/yolo_initial_weights.rhai model=yolo11n.yaml data="$data/data.yaml" \
  imgsz="$imgsz" seed=0 out="$init" || exit 1
echo "=== $(date +%T) six runs: $epochs epochs at $imgsz from $init"
pids=()
for seed in 0 1 2; do
  run=/tmp/acc-ours/seed$seed; mkdir -p "$run"
  timeout "${LIMIT:-480}" .device/bin/brain run scripts/yolo_train.rhai weights="$init" \
    data="$data/data.yaml" epochs="$epochs" batch=32 imgsz="$imgsz" workers="$workers" \
    seed="$seed" out="$run" --device cuda >"$run/train.log" 2>&1 &
  pids+=($!)
  PYTHONUNBUFFERED=1 timeout "${LIMIT:-480}" python3 benches/ultralytics_train_speed.py \
    model="$init" data="$data/data.yaml" epochs="$epochs" batch=32 imgsz="$imgsz" \
    close_mosaic=10 workers="$workers" device=0 amp=bf16 seed="$seed" plots=False val=True \
    project=/tmp/acc-ul name="seed$seed" >"/tmp/acc-ul-seed$seed.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || echo "a run exited with $?"; done
echo "=== $(date +%T) done"
# Seven files come back (the device tool returns a limited number): the log and the six
# results.csv; the runs' checkpoints, plots and full logs stay in /tmp there.
for seed in 0 1 2; do
  mkdir -p "$out/ultralytics-seed$seed" "$out/ours-seed$seed"
  cp "/tmp/acc-ul/seed$seed/results.csv" "$out/ultralytics-seed$seed/" \
    || tail -n 30 "/tmp/acc-ul-seed$seed.log"
  cp "/tmp/acc-ours/seed$seed/results.csv" "$out/ours-seed$seed/" \
    || tail -n 30 "/tmp/acc-ours/seed$seed/train.log"
  echo "--- seed $seed"
  grep -E "^ultralytics epoch" "/tmp/acc-ul-seed$seed.log" | tail -n 3
  grep -E "^epoch |^best" "/tmp/acc-ours/seed$seed/train.log" | tail -n 3
done
