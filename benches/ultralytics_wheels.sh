#!/usr/bin/env bash
# Fetches into .whl/ (repo root, git-ignored through .git/info/exclude: `/.whl/`) the wheels that
# benches/ultralytics_train_speed.py needs on the GPU machine beyond what its image already has
# (KINDS.md, "Python packages already there": torch, torchvision, numpy, opencv-python-headless,
# matplotlib, pillow, pyyaml, requests, psutil, nvidia-ml-py are there).
#   ultralytics 8.4.190    the trainer itself (pure python)
#   ultralytics-thop 2.2.3 its FLOPs count in the model summary (pure python, a few KB)
# Left out on purpose, though ultralytics' METADATA requires them:
#   polars               ~40 MB wheel; training imports it only in BaseTrainer.read_results_csv
#                        (the checkpoint's copy of results.csv) and in plots; the bench script
#                        reads that CSV with the standard library instead and trains with plots=False
#   ultralytics-platform imported only with a Platform API key (none on the machine)
#   opencv-python        the machine's opencv-python-headless provides the same cv2
# Run here (needs the network), from anywhere: bash benches/ultralytics_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
git check-ignore -q .whl/x || { echo "add /.whl/ to .git/info/exclude first" >&2; exit 1; }
py=python3
$py -m pip --version >/dev/null 2>&1 || py=/work/venv-ul/bin/python
mkdir -p .whl
for spec in ultralytics==8.4.190 ultralytics-thop==2.2.3; do
  $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl "$spec"
done
ls -l .whl
du -ch .whl/*.whl | tail -1
