#!/usr/bin/env bash
# Installs everything the tests need (a venv with the package and its test tools, the MCP Inspector CLI
# from npm) and runs lint, type checks and the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || {
    echo "python3 -m venv failed; installing Debian's python3-venv" >&2
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv .venv
  }
fi
# The multi-node tests start a real Slurm cluster (munged, slurmctld, slurmd) and a real sshd on loopback.
need=()
for program in munged mungekey slurmctld slurmd srun scontrol sbatch sshd ssh ssh-keygen; do
  command -v "$program" >/dev/null 2>&1 || [ -x "/usr/sbin/$program" ] || need+=("$program")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing Debian's Slurm, munge and OpenSSH (missing: ${need[*]})" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge openssh-server openssh-client >/dev/null
fi
export PATH="$PATH:/usr/sbin"

.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"

# The independent MCP client used by tests/test_inspector.py (Node >= 20; no browser is involved).
if [ ! -x .cache/inspector/node_modules/.bin/mcp-inspector ]; then
  mkdir -p .cache/inspector
  (cd .cache/inspector && { [ -f package.json ] || npm init -y >/dev/null; } &&
    npm install --no-audit --no-fund --loglevel=error @modelcontextprotocol/inspector@2.12.0 >/dev/null)
fi

.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
