#!/usr/bin/env bash
# kvxfer's GPU path in one run on a GPU machine: the GPU pull tests (CUDA IPC pools, device copies, UCX from
# device memory), the host pull tests beside them, then bench-xfer with the pools on the GPU.
# Here first: `python3 scripts/gpu_wheels.py` (wheels the image lacks, into .whl/). There, with .whl carried:
# `bash scripts/gpu_check.sh`. Logs and the bench's JSON go to $OUT (the device tool's folder), else ./gpu-check.
set -uo pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
{
  nvidia-smi -L
  python3 -c "import sys, torch, cupy, ucxx, libucx
print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())
print('cupy', cupy.__version__, 'ucxx', ucxx.__version__, 'libucx', libucx.__version__)"
} 2>&1 | tee "$out/env.txt"
timeout 420 python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/integration/kvxfer/test_gpu_pulls.py \
  tests/integration/kvxfer/test_pulls.py tests/unit/kvxfer 2>&1 | tee "$out/tests.log"
tests=${PIPESTATUS[0]}
timeout 240 python3 -m services bench-xfer --quick --json --device cuda:0 >"$out/bench-xfer-cuda.json" \
  2>"$out/bench-xfer-cuda.log"
bench=$?
tail -n 30 "$out/bench-xfer-cuda.log"
echo "tests rc=$tests bench rc=$bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
