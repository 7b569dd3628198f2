#!/usr/bin/env bash
# One call on the GPU machine: the whole packed test suite with CUDA required, then the GPU
# benchmark beside PyTorch's in the same call (the machines are noisy; compare within one run).
#   bash benches/run_on_device.sh [tests|bench|all]   (from the repository root, after device-pack)
# The packed suite is larger than the device tool carries; compress it into an ignored folder here,
#   XZ_OPT=-6 tar -cJf .devpack/pack.tar.xz .device
# carry [".devpack"], and start the command there with `tar -xJf .devpack/pack.tar.xz && `.
set -uo pipefail
cd "$(dirname "$0")/.." && . .device/env.sh
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
what=${1:-all}
status=0
if [ "$what" != bench ]; then
  for t in .device/tests/*; do
    name=$(basename "$t")
    log=/tmp/rb-test-$name.log
    if ! timeout 300 "$t" --test-threads=${RB_TEST_THREADS:-4} >"$log" 2>&1; then
      status=1
      echo "=== FAILED: $name"; grep -E "^test .*FAILED|panicked" "$log" | head -12
    fi
    grep -E "^test result" "$log" | sed "s/^/$name: /"
    { echo "===== $name"; cat "$log"; } >> "$out/tests.log"
  done
fi
if [ "$what" != tests ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
  [ -x .device/bin/gpu_bench ] && .device/bin/gpu_bench | tee "$out/gpu_bench.json"
  [ -f benches/torch_gpu_bench.py ] && python3 benches/torch_gpu_bench.py | tee "$out/torch_gpu_bench.json"
fi
exit $status
