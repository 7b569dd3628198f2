#!/usr/bin/env bash
# Packs the CUDA suite for the GPU machine into .devpack/pack.tar.xz, small enough for the device
# tool's 64 MiB: the test executables that run kernels (every engine `cuda_*` test, the engine's
# and the backend's unit tests, and the script, REPL, LM and YOLO tests that drive the GPU),
# `brain`, `lm_bench` and `yolo_bench`, built in release and stripped. The executables share
# most of their code, so one xz stream with a dictionary larger than any of them packs the lot
# into about 35 MiB (the whole workspace's 80 test executables are 955 MiB unpacked).
#
#   bash benches/pack_cuda_suite.sh [DIR]   (DIR: binaries of an earlier build to carry beside
#                                            these as brain_before, lm_bench_before, ...)
# Then, on the GPU machine: carry [".devpack"], command `bash benches/suite_on_device.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
engine_tests=$(cd engine/tests && ls cuda_*.rs | sed 's/\.rs$//')
declare -A crate_tests=(
  [rusting_brain]="$engine_tests llama_parity yolo_one_step lm_families lm_generation"
  [brain]="runner scripts launch"
  [rusting_brain_rhai]="lm_api lm_lora lm_qlora"
  [rb_integration_tests]="graph_memory hf_sharded_parity qlora_memory yolo_parity onnx_graph_models torchvision_resnet"
)
args=(--lib -p rusting_brain_backend)
for crate in "${!crate_tests[@]}"; do
  args+=(-p "$crate")
  for t in ${crate_tests[$crate]}; do args+=(--test "$t"); done
done
rm -rf .devpack/stage && mkdir -p .devpack/stage/.device/tests .devpack/stage/.device/bin
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.devpack/' "$exclude" 2>/dev/null || echo '/.devpack/' >> "$exclude"
cargo test --release --no-run --message-format=json "${args[@]}" \
  | python3 -c '
import sys, json
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["target"]["name"] + "\t" + m["executable"])' \
  | sort -u | while IFS=$'\t' read -r name exe; do
      cp "$exe" ".devpack/stage/.device/tests/$name" && strip ".devpack/stage/.device/tests/$name"
    done
# BINS picks the binaries (the suite alone needs only brain; the benches push the pack and the
# tree past the carry limit).
bins=${BINS:-brain lm_bench yolo_bench cnn_bench}
cargo build --release -p brain -p rb_benches $(printf -- '--bin %s ' $bins)
for b in $bins; do
  cp "${CARGO_TARGET_DIR:-target}/release/$b" .devpack/stage/.device/bin/ && strip ".devpack/stage/.device/bin/$b"
  if [ -n "${1:-}" ] && [ -f "$1/$b" ]; then cp "$1/$b" ".devpack/stage/.device/bin/${b}_before"; fi
done
printf '%s\n' "$root" > .devpack/stage/.device/build-root
(cd .devpack/stage && tar -cf - .device | xz -9e -T2 --lzma2=dict=192MiB > ../pack.tar.xz)
rm -rf .devpack/stage
echo "packed $(du -m .devpack/pack.tar.xz | cut -f1) MiB into .devpack/pack.tar.xz"
