#!/usr/bin/env bash
# One call on the GPU machine: every convolution of YOLO11n's forward at 640, batch 32, alone,
# BF16, forward and backward, ours through cuDNN (NHWC and NCHW) beside PyTorch's F.conv2d
# (channels_last, cudnn.benchmark on), joined into one table by conv_compare.py.
#   carry [".devpack"]; command: bash benches/conv_speed.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
[ -x .device/bin/yolo_bench ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
.device/bin/yolo_bench convs --scale ${SCALE:-n} --batch 32 --imgsz 640 --iters 20 \
  --shapes /tmp/conv_shapes.json > $out/conv_ours.jsonl
python3 benches/conv_torch_bench.py /tmp/conv_shapes.json 20 > $out/conv_torch.jsonl
python3 benches/conv_compare.py $out/conv_ours.jsonl $out/conv_torch.jsonl
