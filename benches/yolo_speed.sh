#!/usr/bin/env bash
# One call on the GPU machine: YOLO11n and YOLO11s validation speed, ours beside ultralytics',
# imgsz 640, batch 32, half, over 2,000 generated images; the forward alone beside PyTorch's
# (benches/yolo_bench.rs, yolo_torch_bench.py); ncu's per-kernel times of one of our forwards.
#   carry [".devpack", ".whl", ".assets"]; command: bash benches/yolo_speed.sh
# .devpack/pack.tar.xz holds .device/bin/{brain,yolo_bench} (and test binaries under
# .device/tests, run first with CUDA required); .whl the ultralytics and
# ultralytics-thop wheels. Trained weights are reused from .assets/yolo/shapes_yolo11{n,s}.pt
# when carried; otherwise they are trained here and returned under $OUT in parts to keep.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
# Everything to $OUT/log.txt as it runs, so a call that runs out of time still reports.
exec > >(tee -a "$out/log.txt") 2>&1
[ -x .device/bin/brain ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} YOLO_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit 1
brain=.device/bin/brain bench=.device/bin/yolo_bench
log() { echo "=== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
# Tests compiled here find their fixtures under this machine's build path: link it to the tree.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
for t in ${SKIP_TESTS:+/nonexistent}.device/tests/*; do
  [ -x "$t" ] || continue
  log "$t"; RB_REQUIRE_CUDA=1 timeout 300 "$t" --test-threads=4 --nocapture 2>&1 \
    | grep -E "^test result|FAILED|panicked|relative error|failed" | head -20
done
log datasets
$brain run scripts/make_shapes.rhai dir=/tmp/shapes train=400 val=100 imgsz=320 seed=0 | tail -1
$brain run scripts/make_shapes.rhai dir=/tmp/speed train=1 val=${SPEED_VAL:-2000} imgsz=640 seed=1 | tail -1
for scale in ${SCALES:-n s}; do
  w=.assets/yolo/shapes_yolo11$scale.pt
  if [ ! -f $w ]; then
    log "train yolo11$scale"; w=/tmp/shapes_yolo11$scale.pt
    python3 benches/yolo_train_shapes.py /tmp/shapes $w $scale ${EPOCHS:-40} 2>&1 | tail -1
    # Files come back at most 16 MiB each: cat the parts back together.
    split -b 15M -d $w $out/shapes_yolo11$scale.pt.part
  fi
  log "ultralytics yolo11$scale"
  python3 - "$w" /tmp/speed/data.yaml ${SPEED_VAL:-2000} <<'PY' 2>&1 | grep -E "all |Speed|images/s"
import sys, time
sys.path.insert(0, "tests/fixtures/yolo")
import polars_stand_in  # noqa: F401
from ultralytics import YOLO
m = YOLO(sys.argv[1])
m.val(data=sys.argv[2], imgsz=640, batch=32, half=True, plots=False, verbose=False)  # warm-up run
t = time.perf_counter()
m.val(data=sys.argv[2], imgsz=640, batch=32, half=True, plots=False, verbose=False)
dt = time.perf_counter() - t
print(f"ultralytics end to end: {int(sys.argv[3]) / dt:.1f} images/s ({dt:.2f} s, model load and warm-up included)")
PY
  log "ours yolo11$scale"
  $brain run scripts/yolo_val.rhai weights=$w data=/tmp/speed/data.yaml imgsz=640 batch=32 half=true --device cuda 2>&1 \
    | grep -E "all |Speed|images/s|search"
  [ "$scale" = n ] && RB_CHANNELS_LAST=1 $brain run scripts/yolo_val.rhai weights=$w data=/tmp/speed/data.yaml imgsz=640 \
    batch=32 half=true --device cuda 2>&1 | grep -E "all |Speed|images/s" | sed 's/^/NHWC: /'
  log "forward alone, ours then torch"
  $bench forward --scale $scale --batch 32 --imgsz 640 --iters 30
  RB_CHANNELS_LAST=1 $bench forward --scale $scale --batch 32 --imgsz 640 --iters 30 | sed 's/^/NHWC: /' 
  [ "$scale" = n ] && $bench forward --scale n --batch 1 --imgsz 640 --iters 100
  python3 benches/yolo_torch_bench.py $scale 32 640 30 2>&1 | grep '"name"'
done
[ -n "${SKIP_NCU:-}" ] && { log done; exit 0; }
log "ncu: one forward of ours, per kernel"
ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \
  $bench profile --scale n --batch 32 --imgsz 640 > /tmp/ncu.csv 2>/tmp/ncu.err
tail -2 /tmp/ncu.err
python3 benches/ncu_by_kernel.py /tmp/ncu.csv
log done
