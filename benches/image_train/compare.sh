#!/usr/bin/env bash
# One call on the GPU machine: held-out accuracy of ViT-S/16 and ResNet-18 trained by us and by
# timm from the same initial weights, three seeds each (issue 43, "Training").
#   carry the packed brain binary and the digits folder; command:
#     bash benches/image_train/compare.sh BRAIN DIGITS_DIR
# DIGITS_DIR is benches/image_train/digits_folder.py's output (scikit-learn's digits at 64x64);
# init_weights.py makes the shared weights (timm's initialisation, seed 0); then the runs
# (ours and timm's for each model:seed in RUNS, by default ViT and ResNet with seeds 0, 1 and
# 2: twelve runs) share the GPU at once, EPOCHS each (30) in one recipe (train.rhai's header).
# Each run's log lands in $OUT/image_train/.
set -uo pipefail
cd "$(dirname "$0")/../.."
brain=$1; data=$2
out=${OUT:-/tmp/rb-out}/image_train; mkdir -p "$out"
epochs=${EPOCHS:-30}
init=/tmp/image-train-init
python3 benches/image_train/init_weights.py "$init" 0 2>&1 | tee "$out/init.log" || exit 1
runs=${RUNS:-vit:0 resnet:0 vit:1 resnet:1 vit:2 resnet:2}
echo "=== $(date +%T) ours and timm's for $runs, $epochs epochs"
pids=()
for run in $runs; do
  model=${run%:*}; seed=${run#*:}
  if [ "$model" = vit ]; then ours="$init/vit-s16"; theirs="$init/vit-s16-timm.safetensors"
  else ours="$init/resnet18.safetensors"; theirs="$ours"; fi
  common="model=$model train=$data/train val=$data/val seed=$seed epochs=$epochs"
  timeout "${LIMIT:-400}" "$brain" run benches/image_train/train.rhai $common weights="$ours" \
    --device cuda >"$out/ours-$model-seed$seed.log" 2>&1 &
  pids+=($!)
  PYTHONUNBUFFERED=1 timeout "${LIMIT:-400}" python3 benches/image_train/timm_train.py $common \
    weights="$theirs" >"$out/timm-$model-seed$seed.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || echo "a run exited with $?"; done
echo "=== $(date +%T) done"
for log in "$out"/*-seed*.log; do
  printf '%-24s %s\n' "$(basename "$log" .log)" "$(grep -E '^final accuracy' "$log" || tail -n 3 "$log")"
done
