#!/usr/bin/env bash
# Installs gpu-triage-mcp into .venv, runs the triage report on the bundled sample artifacts, triages this host
# and a bundled real nvidia-smi capture, and shows how to start the MCP server.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || {
    echo "python3 -m venv failed; installing Debian's python3-venv" >&2
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"   # as scripts/test.sh: apt needs root
    $sudo apt-get update -qq && $sudo apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv .venv
  }
fi
.venv/bin/python -m pip install -q -e .

# Exit codes 0/1/2/4 mean ok/warning/critical/unknown (a verdict; 4: e.g. no NVML here, so the GPUs cannot be
# judged); only 3 is a failure of the tool itself.
run() { "$@" || { rc=$?; [ "$rc" -le 2 ] || [ "$rc" -eq 4 ] || exit "$rc"; }; }

echo "### 1. The report on the bundled sample artifacts (mcp_server/samples/PROVENANCE.md): a real hung 4-rank"
echo "###    job (logs, py-spy stacks, flight-recorder dumps) and a real input-bound ResNet50 profiler trace"
run .venv/bin/gpu-triage report --demo
echo
echo "### 2. This host: GPUs through NVML (if a driver is present) and the host through psutil"
run .venv/bin/gpu-triage health-check --top-processes 5
echo
echo "### 3. A bundled real capture: nvidia-smi --query-gpu on an idle H200 (tests/data/nvidia_smi/PROVENANCE.md)"
run .venv/bin/gpu-triage nvidia-smi-query \
  --csv-path tests/data/nvidia_smi/query_gpu_h200_allfields_idle_header_units.csv \
  --fields index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,enforced.power.limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active
echo
cat <<TXT
### 4. Start the MCP server
  stdio (what Claude Code / Codex launch):  $PWD/.venv/bin/gpu-triage-mcp --root /path/to/job/artifacts
  streamable HTTP on loopback:              $PWD/.venv/bin/gpu-triage-mcp --http 127.0.0.1:8765
  register in Claude Code:                  claude mcp add gpu-triage -- $PWD/.venv/bin/gpu-triage-mcp --root \$PWD
  the registration for Codex or Claude Desktop: $PWD/.venv/bin/gpu-triage-mcp --print-config codex --root DIR
TXT
