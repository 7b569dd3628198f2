#!/usr/bin/env bash
# One call on the GPU machine: every packed test executable with CUDA required, several at once
# (the machine has 16 cores and one GPU with room for them), each with its own time limit and
# log; then the NVRTC kernel cache goes back under $OUT, so the next call can carry it and skip
# the minute of compiling a fresh machine pays.
#   ../shared/tools/device-pack && XZ_OPT=-6 tar -cJf .devpack/pack.tar.xz .device
#   carry [".devpack"] (with .devpack/kcache.tar.xz when a call brought one back: cat the parts)
#   command: bash benches/suite_on_device.sh [name-filter for the executables]
# JOBS (default 4) executables at once; TEST_LIMIT (default 300) seconds each.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export RB_KERNEL_CACHE="$PWD/.kcache" RB_REQUIRE_CUDA=1 BRAIN_BIN="$PWD/.device/bin/brain"
mkdir -p "$RB_KERNEL_CACHE"
# A cache an earlier call brought back (benches/suite_on_device.sh writes it under $OUT):
# compiled kernels are keyed by their source, so a stale one is only unused.
[ -f .devpack/kcache.tar.xz ] && tar -xJf .devpack/kcache.tar.xz -C "$RB_KERNEL_CACHE"
# Tests compiled elsewhere find their fixtures under the build machine's path: link it here.
root=$(cat .device/build-root 2>/dev/null || echo /work/main)
[ -e "$root" ] || { mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
logs=/tmp/rb-tests; mkdir -p "$logs"
started=$(date +%s)
ls .device/tests | grep -E "${1:-.}" | xargs -P "${JOBS:-4}" -I{} sh -c \
  "timeout ${TEST_LIMIT:-300} .device/tests/{} --test-threads=4 > $logs/{}.log 2>&1; echo \$? > $logs/{}.rc"
echo "=== suite took $(( $(date +%s) - started )) s"
fail=0
for rc in "$logs"/*.rc; do
  name=$(basename "$rc" .rc)
  summary=$(grep -E "^test result" "$logs/$name.log" | tail -1)
  if [ "$(cat "$rc")" != 0 ]; then
    fail=1
    echo "FAILED $name (exit $(cat "$rc")): $summary"
    grep -E "^test .* FAILED|panicked|^---- " "$logs/$name.log" | head -20
  else
    echo "ok $name: $summary"
  fi
done
# Kernels compile one at a time as they are first launched; the slow ones are named.
echo "kernels compiled: $(ls "$RB_KERNEL_CACHE" | wc -l)"
grep -h "^compiled .* (kernels/" "$logs"/*.log | sort | uniq | head -40
tar -cf - -C "$RB_KERNEL_CACHE" . | xz -1 > /tmp/kcache.tar.xz
split -b 15M -d /tmp/kcache.tar.xz "$out/kcache.tar.xz.part"
tar -czf "$out/test-logs.tar.gz" -C "$logs" .
exit $fail
