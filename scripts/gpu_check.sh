#!/usr/bin/env bash
# The GPU check (issue 17): record real CUDA torch.profiler traces of known bottlenecks, summarise them, and run
# health_check / nvidia_smi_query on the real NVML and nvidia-smi. One prepared run of a few minutes on a CUDA
# machine; never in CI (CI runs `scripts/gpu_check.py --cpu`, a toy run that checks the script itself).
#
#   scripts/gpu_wheels.sh              # here, with network: our dependencies as wheels in .whl/ (ignored by git)
#   scripts/gpu_check.sh "$OUT"        # there, the device call carrying .whl: traces and outputs land in $OUT
#
# Such a machine has CUDA torch but not our dependencies, and no network: they are installed from .whl/.
set -euo pipefail
out=${1:?usage: scripts/gpu_check.sh OUT_DIR}
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/nvidia-smi.csv" || true
timeout 420 python3 scripts/gpu_check.py "$out" 2>&1 | tee "$out/gpu_check.log"
