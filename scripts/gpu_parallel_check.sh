#!/usr/bin/env bash
# The NCCL path of TP/PP instances in one run on a machine with 2 or more GPUs: greedy tokens of
# `generate --local` on cuda with TP 2 and with PP 2 equal TP 1, and a TP 2 instance's rank pools register with a
# kvxfer by CUDA IPC and pull (scripts/gpu_rank_pools_check.py; needs cupy, as scripts/gpu_check.sh installs it).
# With fewer GPUs it says so and exits 0 (NCCL takes one GPU per rank). Logs go to $OUT (the device tool's folder), else ./gpu-parallel-check.
set -uo pipefail
out=${OUT:-gpu-parallel-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
echo "GPUs: $gpus" | tee "$out/env.txt"
if [ "$gpus" -lt 2 ]; then
  echo "skipped: TP/PP over NCCL needs 2 GPUs, this machine has $gpus" | tee -a "$out/env.txt"
  exit 0
fi
model=$(python3 -c "from services.engine.presets import resolve_model; print(resolve_model('tiny-llama'))")
rc=0
ref=$(timeout 300 python3 -m services generate --local --model "$model" --device cuda:0 --max-tokens 16 \
  --ignore-eos --json "The GPU path" 2>"$out/tp1.log" | python3 -c "import json,sys; print(json.load(sys.stdin)['token_ids'])")
for layout in "--tp 2" "--pp 2"; do
  got=$(timeout 300 python3 -m services generate --local --model "$model" --device cuda:0 --max-tokens 16 \
    --ignore-eos --json $layout "The GPU path" 2>"$out/${layout// /}.log" \
    | python3 -c "import json,sys; print(json.load(sys.stdin)['token_ids'])")
  if [ "$got" = "$ref" ]; then echo "$layout: equal to TP 1 ($ref)"; else echo "$layout: $got != TP 1 $ref"; rc=1; fi
done | tee "$out/result.txt"
grep -q "!=" "$out/result.txt" && rc=1
if timeout 300 python3 scripts/gpu_rank_pools_check.py >"$out/rank-pools.txt" 2>"$out/rank-pools.log"; then
  echo "GPU rank pools: registered and pulled" | tee -a "$out/result.txt"
else
  echo "GPU rank pools: FAILED (rank-pools.txt, rank-pools.log)" | tee -a "$out/result.txt"; rc=1
fi
cat "$out/rank-pools.txt"
exit $rc
