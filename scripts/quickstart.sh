#!/usr/bin/env bash
# Installs gpu-triage-mcp into .venv, triages this host and a bundled real nvidia-smi capture, and shows
# how to start the MCP server.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || {
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv .venv
  }
fi
.venv/bin/python -m pip install -q -e .

# Exit codes 0/1/2 mean ok/warning/critical (a verdict); only 3 is a failure of the tool itself.
run() { "$@" || { rc=$?; [ "$rc" -le 2 ] || exit "$rc"; }; }

echo "### 1. This host: GPUs through NVML (if a driver is present) and the host through psutil"
run .venv/bin/gpu-triage health-check --top-processes 5
echo
echo "### 2. A bundled real capture: nvidia-smi --query-gpu on an idle H200 (tests/data/nvidia_smi/PROVENANCE.md)"
run .venv/bin/gpu-triage nvidia-smi-query \
  --csv-path tests/data/nvidia_smi/query_gpu_h200_allfields_idle_header_units.csv \
  --fields index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,enforced.power.limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active
echo
echo "### 3. Bundled real logs of a 4-rank job where rank 3 never joined an all_reduce (tests/data/logs/lab)"
run .venv/bin/gpu-triage diagnose-logs --paths 'tests/data/logs/lab/gloo_timeout_rank3_absent/torchrun_log_dir/**/*.log'
echo
echo "### 4. A bundled real profiler trace: ResNet50 training with num_workers=0 (tests/data/traces/PROVENANCE.md)"
run .venv/bin/gpu-triage summarize-trace tests/data/traces/resnet50_num_workers_0
echo
cat <<TXT
### 5. Start the MCP server
  stdio (what Claude Code / Codex launch):  $PWD/.venv/bin/gpu-triage-mcp --root /path/to/job/artifacts
  streamable HTTP on loopback:              $PWD/.venv/bin/gpu-triage-mcp --http 127.0.0.1:8765
  register in Claude Code:                  claude mcp add gpu-triage -- $PWD/.venv/bin/gpu-triage-mcp --root \$PWD
TXT
