#!/usr/bin/env bash
# What the data-parallel path costs on one GPU (the only kind lent so far), from the repository
# root with .device/ unpacked: lm_bench train on the 124M shape alone, as rank 0 of a launch of
# one (gradients summed through NCCL in buckets during the backward), and that with the
# optimizer state sharded (ZeRO-1: every parameter broadcast from its owner after the step),
# rounds alternating. Then benches/lm_ddp.rhai alone and under `brain launch --gpus 1`.
#   bash benches/launch_overhead.sh [rounds]
set -u
. .device/env.sh
rounds=${1:-3}
dist_dir=$(mktemp -d)
summary() { python3 -c 'import json,sys
s = sys.stdin.read(); j, _ = json.JSONDecoder().raw_decode(s[s.index("{"):])
print("tokens/s", j["tokens_per_s"], "loss", j["loss"], "peak GiB", j["peak_mem_gib"], "reduces", j["reduces"], "shard_state", j["shard_state"])'; }
for r in $(seq "$rounds"); do
  echo "--- round $r: alone / launch of one / launch of one, shard_state"
  .device/bin/lm_bench train --shape 124m | summary
  RB_RANK=0 RB_WORLD_SIZE=1 RB_DIST_DIR=$dist_dir/$r-a .device/bin/lm_bench train --shape 124m | summary
  RB_RANK=0 RB_WORLD_SIZE=1 RB_DIST_DIR=$dist_dir/$r-b .device/bin/lm_bench train --shape 124m --shard-state | summary
done
echo "--- lm_ddp.rhai: alone, then brain launch --gpus 1 with zero=true"
.device/bin/brain run benches/lm_ddp.rhai steps=0 --device cuda | grep -E "tokens_per_s|peak_mem"
.device/bin/brain launch --gpus 1 benches/lm_ddp.rhai steps=0 zero=true --device cuda | grep -E "tokens_per_s|peak_mem"
