"""Shared test helpers: paths, environments with the NVML / nvidia-smi stand-ins, process runners.

The only stand-ins are for GPU hardware this CI lacks (tests/fakes: a pynvml module and an
nvidia-smi executable replaying real recorded output). Everything else is real: the server runs as a
subprocess driven by the SDK's real client over stdio, the CLI as a real process.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parents[1]
FAKES = REPO / "tests" / "fakes"
DATA = REPO / "tests" / "data"
H200 = "query_gpu_h200_allfields_idle_header_units.csv"
RTX2080S = "query_gpu_rtx2080super_allfields_idle_header_units.csv"


def base_env(**extra: str) -> dict[str, str]:
    """A minimal environment like an MCP client gives its server, plus `extra`."""
    env = {k: os.environ[k] for k in ("HOME", "LANG", "TMPDIR") if k in os.environ}
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def with_fake_smi(env: dict[str, str], mode: str, argv_log: Path | None = None) -> dict[str, str]:
    env = dict(env, PATH=f"{FAKES / 'bin'}{os.pathsep}{env['PATH']}", FAKE_SMI_MODE=mode)
    if argv_log is not None:
        env["FAKE_SMI_ARGV_LOG"] = str(argv_log)
    return env


def with_fake_nvml(env: dict[str, str], scenario_path: Path | None) -> dict[str, str]:
    env = dict(env, PYTHONPATH=f"{FAKES / 'nvml'}{os.pathsep}{env['PYTHONPATH']}")
    if scenario_path is not None:
        env["GPU_TRIAGE_FAKE_NVML"] = str(scenario_path)
    return env


def h100(**overrides: Any) -> dict[str, Any]:
    """One busy, healthy H100 SXM as NVML reports it (values as nvidia-smi -q shows for this model)."""
    gpu: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0d6b5c1e-0000-0000-0000-000000000000",
        "bus_id": "00000000:18:00.0", "util_gpu": 97, "util_mem": 61, "mem_used_mib": 61234,
        "mem_total_mib": 81559, "sm_clock": 1980, "sm_clock_max": 1980, "temperature": 62,
        "power_w": 612.4, "power_limit_w": 700.0, "throttle_mask": 0, "pcie_gen": 5, "pcie_gen_max": 5,
        "pcie_width": 16, "pcie_width_max": 16, "ecc_uncorrected": 0, "retired_sbe": 0, "retired_dbe": 0,
        "retired_pending": False, "remapped": [0, 0, 0, 0], "processes": [],
    }
    gpu.update(overrides)
    return gpu


def write_scenario(path: Path, gpus: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"driver": "550.54.15", "cuda": 12040, "gpus": gpus}))
    return path


def run_cli(
    args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The CLI as a shell user runs it: from the folder they name with --root (their relative paths mean the
    working directory), else from the checkout."""
    if cwd is None:
        cwd = Path(args[args.index("--root") + 1]) if "--root" in args[:-1] else REPO
    return subprocess.run([sys.executable, "-m", "mcp_server.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@contextlib.asynccontextmanager
async def stdio_client(env: dict[str, str], *server_args: str, cwd: Path = REPO) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server", *server_args], env=env,
                                   cwd=str(cwd))
    with open(os.devnull, "w") as errlog:
        from mcp.client.stdio import stdio_client as transport

        async with Client(transport(params, errlog=errlog)) as client:
            yield client


# The tools that can reach other machines (a /metrics URL; a job's nodes through Slurm or SSH): openWorldHint true.
OPEN_WORLD_TOOLS = {"inference_metrics", "health_check", "dump_stacks", "triage_report", "profile_cpu",
                    "gpu_activity", "telemetry_history", "find_stragglers", "check_interconnect", "sample_host"}

HANG_LAB = REPO / "tests" / "lab" / "rank_conditional_allgather.py"


def line_of(path: Path, text: str) -> int:
    """The number of the first line of `path` that holds `text` (tests assert on file:line locations)."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def structured(result: Any) -> dict[str, Any]:
    """A tool call's structured result, after checking that the call succeeded."""
    assert result.is_error is False, result.content[0].text
    data: dict[str, Any] = result.structured_content
    return data


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (only its parent has not reaped it).
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True
