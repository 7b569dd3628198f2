#!/usr/bin/env bash
# Issue 16 on a machine with two GPUs (the nvidia-h200-x2 kind), from the repository root with
# .device/ unpacked (../shared/tools/device-pack): the topology, one GPU beside two for ours and
# for PyTorch DDP (runs alternating), our 2-rank losses beside one GPU accumulating the same two
# micro-batches, ZeRO-1's memory beside plain data parallelism, and a rank killed mid-run.
#   bash benches/ddp_scaling.sh [rounds]
set -u
. .device/env.sh
rounds=${1:-3}
brain=.device/bin/brain
nvidia-smi topo -m
for r in $(seq "$rounds"); do
  echo "--- round $r"
  $brain run benches/lm_ddp.rhai steps=0 --device cuda | grep tokens_per_s
  $brain launch --gpus 2 benches/lm_ddp.rhai steps=0 --device cuda | grep tokens_per_s
  python3 benches/torch_lm_bench.py --shape 124m --compile | grep tokens_per_s
  torchrun --nproc_per_node 2 benches/torch_lm_bench.py --shape 124m --compile 2>/dev/null | grep tokens_per_s
done
echo "--- losses: 2 ranks beside 1 GPU accumulating 2 micro-batches (50 steps)"
$brain launch --gpus 2 benches/lm_ddp.rhai timed=0 --device cuda > /tmp/ddp_two.txt
$brain run benches/lm_ddp.rhai timed=0 accumulate=2 --device cuda > /tmp/ddp_one.txt
python3 - <<'PY'
import re
read = lambda f: [float(m.group(1)) for m in re.finditer(r"loss (\S+)", open(f).read())]
two, one = read("/tmp/ddp_two.txt"), read("/tmp/ddp_one.txt")
worst = max(abs(a - b) / abs(b) for a, b in zip(two, one))
print(f"{len(two)} steps; worst relative difference {worst:.2e}; first {two[0]:.4f}/{one[0]:.4f}, last {two[-1]:.4f}/{one[-1]:.4f}")
PY
echo "--- memory: plain data parallel, then ZeRO-1"
$brain launch --gpus 2 benches/lm_ddp.rhai steps=0 timed=5 --device cuda | grep peak_mem
$brain launch --gpus 2 benches/lm_ddp.rhai steps=0 timed=5 zero=true --device cuda | grep peak_mem
echo "--- a rank killed mid-run"
$brain launch --gpus 2 benches/lm_ddp.rhai steps=0 timed=400 --device cuda > /tmp/ddp_kill.txt 2>&1 &
launcher=$!
sleep 40
victim=$(pgrep -f -- 'lm_ddp.rhai.*--device cuda:1' | head -1)
kill -9 "$victim"; t=$(date +%s)
wait "$launcher"; echo "launcher exit $? after $(( $(date +%s) - t )) s"; tail -3 /tmp/ddp_kill.txt
pgrep -fl lm_ddp.rhai || echo "no rank left"
