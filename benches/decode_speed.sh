#!/usr/bin/env bash
# One call on the GPU machine: `lm_bench decode` (the 1.1B LLaMA shape, BF16, greedy) at each
# batch and context, with the CUDA graph and op by op, beside benches/torch_decode_bench.py
# (transformers eager, and with a static cache). Everything goes to $OUT/log.txt as it runs;
# each run has its own time limit, so a call that runs out still reports.
#   carry [".devpack"]; command: bash benches/decode_speed.sh
# Quantized weights: QUANTS="q4_k q8_0" adds batch-1 runs; RB_DECODE_BLOCKS=1 sends Q4_K through
# the fused block-format products (kernels/decode_qgemv.cu), off by default until verified.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rb-out}; mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
[ -d .device ] || tar -xJf .devpack/pack.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# A run that fails or times out says so, with the end of what it printed.
ours() {
  echo "--- lm_bench decode $*"
  timeout ${OURS_LIMIT:-120} .device/bin/lm_bench decode "$@" > /tmp/ours.log 2>&1
  local rc=$?
  grep -E '^\{' /tmp/ours.log | tail -1
  [ $rc = 0 ] || { echo "exit status $rc"; tail -5 /tmp/ours.log; }
}
for ctx in ${CONTEXTS:-384 512 4096}; do
  for b in ${BATCHES:-1 16 64}; do
    ours --batch "$b" --context "$ctx"
  done
done
for b in ${NOGRAPH_BATCHES:-1 16}; do ours --batch "$b" --no-graph; done
for q in ${QUANTS:-}; do ours --batch 1 --quant "$q"; done
[ -n "${SKIP_TORCH:-}" ] || timeout ${TORCH_LIMIT:-300} python3 benches/torch_decode_bench.py \
  --batch ${TORCH_BATCHES:-1 16} --context ${TORCH_CONTEXTS:-384} --mode ${TORCH_MODES:-eager static} 2>&1 | grep -E '^\{|rror' | tail -12
