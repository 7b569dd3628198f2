#!/usr/bin/env bash
# One call on the GPU machine for the YOLO work: ultralytics' reference numbers and fixtures
# (tests/fixtures/yolo/make_*.py, from carried wheels), then our validator on the same data,
# CUDA and CPU, in the same call so the speeds compare.
#   carry [".devpack", ".whl", ".assets"]; command: bash benches/yolo_device.sh
# .devpack/pack.tar.xz holds .device/bin/brain (and test binaries); .assets holds the fetched
# nudenet ONNX and ultralytics images (scripts/fetch_test_assets.sh with RB_ASSETS=.assets).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit 1
brain=.device/bin/brain
shapes=/tmp/shapes
log() { echo "=== $(date +%T) $*"; }
log dataset; $brain run scripts/make_shapes.rhai dir=$shapes train=${TRAIN:-400} val=${VAL:-100} imgsz=320 seed=0
log fixtures
nudenet_args=".assets/nudenet/320n.onnx .assets/ultralytics/assets"; [ "${ONLY_N:-0}" = 1 ] && nudenet_args=""
python3 tests/fixtures/yolo/make_yolo_fixtures.py $shapes "$out/yolo" $nudenet_args 2>&1 \
  | grep -vE "^\s+[0-9]+/[0-9]+ .*it/s|Class .*Images|^\s*$" | tail -${FIXTURE_LOG_LINES:-150}
if [ "${ONLY_N:-0}" != 1 ]; then
  python3 tests/fixtures/yolo/make_nms_fixture.py "$out/post" 2>&1 | tail -3
  python3 tests/fixtures/yolo/make_metrics_fixture.py "$out/post" 2>&1 | tail -3
fi
best="$out/yolo/train_n/weights/best.pt"
for b in 1 32; do
  log "ours cuda batch $b"; $brain run scripts/yolo_val.rhai weights=$best data=$shapes/data.yaml imgsz=320 batch=$b --device cuda 2>&1 | tail -12
done
log "ours cuda 640 batch 32"; $brain run scripts/yolo_val.rhai weights=$best data=$shapes/data.yaml imgsz=640 batch=32 --device cuda 2>&1 | tail -12
log "ours cuda 640 batch 32 half"; $brain run scripts/yolo_val.rhai weights=$best data=$shapes/data.yaml imgsz=640 batch=32 half=true --device cuda 2>&1 | tail -4
log "ours cpu batch 32"; $brain run scripts/yolo_val.rhai weights=$best data=$shapes/data.yaml imgsz=320 batch=32 --device cpu 2>&1 | tail -4
# Speed runs beside ultralytics are benches/yolo_speed.sh.
for t in .device/tests/*; do
  case "$t" in *yolo_parity*) continue;; esac
  log "$t"; RB_REQUIRE_CUDA=1 timeout 300 "$t" --test-threads=4 2>&1 | grep -E "^test result|FAILED|panicked" | head -20
done
if [ -x .device/tests/yolo_parity ]; then
  for dev in cpu cuda; do
    log "yolo_parity on $dev"
    RB_YOLO_FIXTURES="$out/yolo" RB_YOLO_SHAPES=$shapes RB_ASSETS=.assets RB_REQUIRE_ASSETS=1 RB_YOLO_DEVICE=$dev \
      timeout 300 .device/tests/yolo_parity --test-threads=1 --nocapture 2>&1 | grep -vE "^\s*$|running [0-9]+ test" | tail -40
  done
fi
# The small fixtures the repository keeps (tests/fixtures/yolo/parity), and the reference JSONs.
keep=/tmp/keep; rm -rf $keep; mkdir -p $keep/parity
cp -r "$out"/yolo/raw_tiny_160 "$out"/yolo/nudenet_*_320 $keep/parity/ 2>/dev/null
cp "$out"/yolo/train_tiny/weights/best.pt $keep/parity/tiny_best.pt 2>/dev/null
cp "$out"/yolo/val_*.json "$out"/yolo/raw_n_320/meta.json "$out"/yolo/raw_n_640/meta.json $keep/ 2>/dev/null
cp "$out"/post/*.json $keep/ 2>/dev/null
tar -czf "$out/keep.tar.gz" -C $keep . && ls -la "$out/keep.tar.gz"
# Only the archive comes back: the tool returns a limited number of files.
find "$out" -mindepth 1 -maxdepth 1 ! -name keep.tar.gz -exec rm -rf {} +
log done
