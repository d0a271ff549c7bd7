"""Nsight Compute reports (`.ncu-rep`, and `.nsight-cuprof-report` from before 2020.1), read through NVIDIA's own CLI:
`ncu --import F --csv --page raw --print-units base --metrics ...` for the figures (picked by metric name, stable
since 2020.x), then `ncu --import F --csv --page details` for the rule results the report stores.

The binary layout's messages are defined by NVIDIA's proprietary .proto files: no decoder of our own
(shared/notes/ncu_format.md, 0 and 1). Without ncu, a report is unknown, with the command that decides.
ncu is looked for on PATH, then in the folder or file `GPU_TRIAGE_NCU` names, then where NVIDIA installs it and in
this checkout's .cache (scripts/test.sh unpacks Debian's nsight-compute-target there). Its stock-file deployment
into $HOME/Documents is turned off (NV_COMPUTE_PROFILER_DISABLE_STOCK_FILE_DEPLOYMENT): it only reads the report.
The session page (host name, IP addresses, command line) is never asked for.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from tools.core.errors import Unavailable, UnreadableInput
from tools.core.files import require_regular
from tools.core.proc import find_program, run_program
from tools.kernels.launches import FIGURE_BY_METRIC, Launch
from tools.kernels.ncu_csv import read_details_csv, read_raw_csv

__all__ = ["REPORT_SUFFIXES", "ReportUnread", "import_command", "ncu_folders", "read_report"]

REPORT_SUFFIXES = (".ncu-rep", ".nsight-cuprof-report")
NCU_ENV = "GPU_TRIAGE_NCU"
_CHECKOUT = Path(__file__).resolve().parents[2]
_DEBIAN_TARGET = "usr/lib/x86_64-linux-gnu/nsight-compute/target/linux-desktop-glibc_2_11_3-x64"
_STALLS = r"regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$"
_METRICS = ",".join([*FIGURE_BY_METRIC, _STALLS])
_QUIET = {"NV_COMPUTE_PROFILER_DISABLE_STOCK_FILE_DEPLOYMENT": "1"}


class ReportUnread(Exception):
    """A report ncu could not read here (no ncu, or ncu refused it): `why`, and `decides`, the command that would."""

    def __init__(self, why: str, decides: str) -> None:
        super().__init__(why)
        self.why = why
        self.decides = decides


def import_command(name: str) -> str:
    return f"ncu --import {name} --csv --page raw --print-units base > {name.rsplit('.', 1)[0]}.csv"


def ncu_folders() -> tuple[list[str], list[str]]:
    """Where ncu is looked for: the configured one alone (GPU_TRIAGE_NCU, an ncu binary or its folder: an explicit
    choice wins over PATH and is never silently replaced), else PATH then these folders, in order."""
    configured = os.environ.get(NCU_ENV, "").strip()
    if configured:
        return [str(Path(configured).parent) if Path(configured).name == "ncu" else configured], []
    folders = sorted(glob.glob("/opt/nvidia/nsight-compute/*"), reverse=True)
    folders += ["/usr/local/cuda/bin", str(_CHECKOUT / ".cache" / "ncu" / _DEBIAN_TARGET)]
    return [], folders


def _said(output: bytes) -> str:
    """ncu's last ==ERROR== line (or last line): what it refused, without the report's contents."""
    lines = [line.strip() for line in output.decode("utf-8", "replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("==ERROR==")]
    return (errors or lines or ["no output"])[-1][:300]


async def read_report(path: Path, name: str, timeout_s: float) -> tuple[list[Launch], str]:
    """The launches of a report, with the rule results; and which ncu read it. ReportUnread when none here can."""
    try:  # ncu opens the path itself: a FIFO or a device is refused here, by what it is, before any program waits
        require_regular(path, name)
    except UnreadableInput as exc:
        raise ReportUnread(exc.message.rstrip("."), import_command(name)) from exc
    configured, folders = ncu_folders()
    try:
        if configured and shutil.which("ncu", path=configured[0]) is None:
            raise Unavailable(f"{NCU_ENV} names {configured[0]}, which holds no ncu")
        ncu = find_program("ncu", folders, first_in=configured)
    except Unavailable as exc:
        where = (f"{NCU_ENV}={os.environ.get(NCU_ENV, '').strip()} is not an ncu executable" if configured else
                 f"no ncu is on this host (PATH, {NCU_ENV} or an Nsight Compute install)")
        raise ReportUnread(f"{name} is an Nsight Compute report and {where} to read it", import_command(name)) from exc
    raw = await run_program("ncu", ["--import", str(path), "--csv", "--page", "raw", "--print-units", "base",
                                    "--metrics", _METRICS], timeout_s=timeout_s, also_in=folders,
                                    first_in=configured, env=_QUIET)
    if raw.returncode != 0:
        raise ReportUnread(f"ncu could not read {name}: {_said(raw.stdout + raw.stderr)} (a report newer than "
                           "this ncu needs a newer ncu)", import_command(name))
    launches = read_raw_csv(raw.stdout.decode("utf-8", "replace"))
    details = await run_program("ncu", ["--import", str(path), "--csv", "--page", "details", "--print-units",
                                        "base"], timeout_s=timeout_s, also_in=folders,
                                    first_in=configured, env=_QUIET)
    if details.returncode == 0:
        with_rules = read_details_csv(details.stdout.decode("utf-8", "replace"))
        if len(with_rules) == len(launches):  # the same launches in the same order
            for launch, described in zip(launches, with_rules, strict=True):
                if launch.name == described.name:
                    launch.rules = described.rules
    return launches, ncu
