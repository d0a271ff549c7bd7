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
# The multi-node tests start a real Slurm cluster (munged, slurmctld, slurmd) and a real sshd on loopback;
# check_interconnect's live mode runs the real ibstat (infiniband-diags: its "no IB device" path) and ethtool;
# tests/test_stalled_fs.py mounts a FUSE file system that stalls (fuse3: libfuse3 and fusermount3).
# telemetry_history's tests backfill and serve GPU history with a real Prometheus (Debian's prometheus: promtool too).
# analyze_kernels demangles kernel names with binutils' c++filt.
need=()
for program in munged mungekey slurmctld slurmd srun scontrol sbatch sshd ssh ssh-keygen ibstat ethtool fusermount3 \
    prometheus promtool c++filt; do
  command -v "$program" >/dev/null 2>&1 || [ -x "/usr/sbin/$program" ] || need+=("$program")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing Debian's Slurm, munge, OpenSSH, infiniband-diags, ethtool, fuse3, prometheus and binutils (missing: ${need[*]})" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge openssh-server openssh-client infiniband-diags ethtool fuse3 prometheus \
    binutils >/dev/null
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

# fetch_nonfree PACKAGE DEST: download one package of Debian's non-free component and unpack it into DEST, not
# installed (NVIDIA's proprietary CLIs: fetched at test time, never committed).
fetch_nonfree() {
  echo "fetching Debian's $1 (non-free) for the tests that use it" >&2
  local apt_dir
  apt_dir=$(mktemp -d)
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie non-free" \
    > "$apt_dir/sources.list"
  local apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
                  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq
  (cd "$apt_dir" && apt-get "${apt_opts[@]}" download -qq "$1")
  mkdir -p "$2"
  dpkg -x "$apt_dir/$1"_*.deb "$2"
  rm -rf "$apt_dir"
}

# NVIDIA's own nsys CLI, the reference the nsys tests check our totals and rules against (nsys stats, nsys analyze):
# Debian's nsight-systems-target 2023.4 (it needs no GPU or driver to export and report).
NSYS=.cache/nsys/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
[ -x "$NSYS" ] || fetch_nonfree nsight-systems-target .cache/nsys

# NVIDIA's own ncu CLI, which reads Nsight Compute reports for analyze_kernels (ncu --import F --csv --page raw) and
# is the reference its tests check against: Debian's nsight-compute-target 2024.1 (it needs no GPU to import a
# report). With the target package alone, --import wants a sections/ folder beside target/
# (shared/notes/ncu_format.md, 2.1): an empty one is enough.
NCU_ROOT=.cache/ncu/usr/lib/x86_64-linux-gnu/nsight-compute
[ -x "$NCU_ROOT/target/linux-desktop-glibc_2_11_3-x64/ncu" ] || fetch_nonfree nsight-compute-target .cache/ncu
mkdir -p "$NCU_ROOT/sections"

.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
