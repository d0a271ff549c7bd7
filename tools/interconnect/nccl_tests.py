"""The one reader of nccl-tests output (all_reduce_perf, all_gather_perf, ... of every version), text or `-J` JSON.

Text (NVIDIA/nccl-tests src/common.cu and util.cu, as ../shared/notes/interconnect.md §1 lists): header lines
`# nThread 1 nGpus 1 minBytes ...`, one `#  Rank  N [Group G] Pid P on HOST device D [bus] GPU-NAME` line per rank,
a column header (`size count type redop root time algbw busbw #wrong ...` from v2.13; per collective before, with
an `error` column and no root or redop), rows, then `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth
: X`. Rows are read by the header, aligned from the right where a row leaves a column empty (all_gather's redop
before 2.13); launcher prefixes (`0: `, `[1,0]<stdout>:`, a `[0]` inside the row) are dropped; numbers may be in
scientific notation. The footer's average depends on the size range and is never the verdict: the peak busbw is.
A binary built without MPI but started by mpirun prints one header per process, each with its own `Rank 0`:
every process tested alone, nothing crossed the network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NcclTestRun", "RankLine", "is_nccl_tests", "read_nccl_tests"]

_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\[\d+\]\s*:?|\d+:\s|\w[\w.\-]*:\s(?=\s*#|\s*\d))\s*")
_INNER_TAG = re.compile(r"\s\[\d+\]\s")  # a launcher's tag in the middle of a row
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[[^\]]*\]\s*(.*)$")
_THREADS = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_COLLECTIVE = re.compile(r"(?:Collective test starting: |^# Using devices.*?|\b)(\w+?)_perf\b")
# Footers, with or without the '#' (pasted copies lose it).
_FOOTER_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*([0-9.eE+\-]+)")
_FOOTER_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)")
# A data row (size, count, type, ...) and, for a pasted table whose header was cut, the columns v2.13+ print.
_DATA_ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z]\w*\s+(?:\S+\s+){3,}\S+")
_DEFAULT_COLUMNS = "size count type redop root time algbw busbw #wrong time algbw busbw #wrong".split()
_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+\-]?\d+)?$")


@dataclass
class RankLine:
    rank: int
    pid: int
    host: str
    device: int
    gpu: str


@dataclass
class NcclTestRun:
    """One nccl-tests run: its ranks, its rows' peak, its correctness."""

    file: str
    collective: str | None = None
    ranks: list[RankLine] = field(default_factory=list)
    headers: int = 0  # '# nThread' header lines: more than one in a file means one per process
    gpus_per_process: int | None = None
    rows: list[tuple[int, float]] = field(default_factory=list)  # (size bytes, best busbw of the row)
    peak_algbw: float | None = None  # the best algbw of any row: data moved, whatever busbw says
    wrong: int | None = None  # wrong elements summed over #wrong columns (None: not checked, or pre-2.13 error)
    max_error: float | None = None  # pre-2.13 `error` column: the largest absolute delta
    out_of_bounds: int | None = None
    failed: bool = False
    avg_busbw_footer: float | None = None
    errors: list[str] = field(default_factory=list)  # `Test NCCL failure ...` and the like

    @property
    def peak(self) -> tuple[int, float] | None:
        return max(self.rows, key=lambda r: (r[1], r[0])) if self.rows else None

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.ranks})

    separate_processes: bool = False  # set by the reader when the file holds one such run per process

    @property
    def one_rank(self) -> bool:
        """A communicator of one rank: busbw is algbw x 2(n-1)/n, 0.00 at every size for n = 1 while data moved
        (algbw above 0), or the test listed a single rank."""
        zero_busbw = bool(self.rows) and all(busbw == 0 for _, busbw in self.rows) and (self.peak_algbw or 0) > 0
        return zero_busbw or (len(self.ranks) == 1 and self.headers <= 1)

    @property
    def single_process_runs(self) -> bool:
        """mpirun of a binary built without MPI: several headers, each process printing its own Rank 0."""
        zeros = {(r.host, r.pid) for r in self.ranks if r.rank == 0}
        return self.separate_processes or (self.headers > 1 and len(zeros) > 1)


def is_nccl_tests(text: str) -> bool:
    return re.search(r"#\s*nThread\s+\d+|#\s*Avg bus bandwidth|#\s+size\s+count\s+type.*busbw", text) is not None


def _clean(line: str) -> str:
    line = _PREFIX.sub("", line.rstrip("\r\n"), count=1)
    return _INNER_TAG.sub(" ", line)


def read_nccl_tests(text: str, name: str) -> list[NcclTestRun]:
    """The runs in an nccl-tests output (several when one file holds several collectives), or in its JSON."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return _from_json(json.loads(stripped), name)
        except json.JSONDecodeError:
            pass  # not JSON after all: read as text
    runs: list[NcclTestRun] = []
    run = NcclTestRun(name)
    columns: list[str] | None = None
    # Signs that several processes each printed a whole test of their own (a binary built without MPI): a header
    # right after a header, rows or a footer right after a footer, a size row printed twice in a row.
    after_header = after_footer = False
    for raw in text.splitlines():
        line = _clean(raw)
        if not line.strip():
            continue
        if (threads := _THREADS.match(line)) is not None:
            if after_header:
                run.separate_processes = True
            if run.rows:  # a new run after a finished one: the next collective, or the next process
                runs.append(run)
                previous, run = run, NcclTestRun(name)
                run.collective = previous.collective if previous.collective and not columns else None
            run.headers += 1
            run.gpus_per_process = int(threads.group(2))
            after_header, after_footer = True, False
            continue
        if (avg := _FOOTER_AVG.match(line)) is not None:
            run.separate_processes = run.separate_processes or after_footer
            run.avg_busbw_footer = _float(avg.group(1))
            after_footer = True
            continue
        if (oob := _FOOTER_OOB.match(line)) is not None:
            run.out_of_bounds, run.failed = int(oob.group(1)), run.failed or oob.group(2) == "FAILED"
            continue
        if line.startswith("#"):
            if (rank := _RANK.match(line)) is not None:
                run.ranks.append(RankLine(int(rank.group(1)), int(rank.group(2)), rank.group(3), int(rank.group(4)),
                                          rank.group(5).strip()))
            elif "busbw" in line and "size" in line:
                columns = line.lstrip("#").split()
                after_footer = False
            elif "Collective test starting" in line and (found := _COLLECTIVE.search(line)) is not None:
                run.collective = found.group(1)
            continue
        if "failure" in line and "Test" in line:
            run.errors.append(line.strip()[:300])
            continue
        if run.collective is None and (found := re.search(r"\b(\w+)_perf\b", line)) is not None:
            run.collective = found.group(1)
        if columns is not None or _DATA_ROW.match(line):
            rows = len(run.rows)
            _row(run, columns or _DEFAULT_COLUMNS, line.split())
            if len(run.rows) > rows:
                if after_footer or (rows and run.rows[-1][0] == run.rows[-2][0] and run.rows[-1][0] > 0):
                    run.separate_processes = True
                after_header = False
    if run.rows or run.ranks or run.errors or run.avg_busbw_footer is not None:
        runs.append(run)
    # One process after the other, each with its own header and a Rank 0 of its own: not one job.
    zeros = [{(r.host, r.pid) for r in run.ranks if r.rank == 0} for run in runs]
    if len(runs) > 1 and all(len(z) == 1 for z in zeros) and len(set().union(*zeros)) == len(runs) \
            and len({run.collective for run in runs}) == 1:
        for run in runs:
            run.separate_processes = True
    return runs


def _float(text: str) -> float | None:
    return float(text) if _NUMBER.match(text) else None


def _row(run: NcclTestRun, columns: list[str], tokens: list[str]) -> None:
    if len(tokens) < 6 or not tokens[0].isdigit():
        return
    size = int(tokens[0])
    # Columns from the right: a row may leave a text column empty (all_gather's redop before 2.13).
    by_name: list[tuple[str, str]] = [(columns[-i], tokens[-i]) for i in range(1, min(len(columns), len(tokens)) + 1)]
    best = None
    for column, value in by_name:
        number = _float(value)
        if column == "busbw" and number is not None:
            best = number if best is None else max(best, number)
        elif column == "algbw" and number is not None:
            run.peak_algbw = number if run.peak_algbw is None else max(run.peak_algbw, number)
        elif column == "#wrong" and number is not None:
            run.wrong = int((run.wrong or 0) + number)
        elif column == "error" and number is not None:
            run.max_error = number if run.max_error is None else max(run.max_error, number)
    if best is not None:
        run.rows.append((size, best))


def _from_json(document: Any, name: str) -> list[NcclTestRun]:
    """nccl-tests `-J` output (v2.17.3+, src/util.cu): `devices` (rank, pid, hostname, device, device_info), `results`
    (per size: out_of_place / in_place with bus_bw and nwrong), `out_of_bounds` {count, okay} and
    `average_bus_bandwidth` {bandwidth}. Its `env` and `args` hold the process's whole environment and command line:
    never read."""
    run = NcclTestRun(name)
    if not isinstance(document, dict):
        return []
    for device in document.get("devices") or []:
        if isinstance(device, dict) and isinstance(device.get("rank"), int):
            run.ranks.append(RankLine(device["rank"], int(device.get("pid") or 0), str(device.get("hostname", "?")),
                                      int(device.get("device") or 0), str(device.get("device_info", ""))))
    for record in (document.get("results") or [])[:100_000]:
        if not isinstance(record, dict) or not isinstance(record.get("size"), int):
            continue
        if run.collective is None and isinstance(record.get("experiment_name"), str):
            run.collective = record["experiment_name"].removesuffix("_perf")
        parts = [p for p in (record.get("out_of_place"), record.get("in_place")) if isinstance(p, dict)]
        numbers = [float(p["bus_bw"]) for p in parts if isinstance(p.get("bus_bw"), int | float)]
        if numbers:
            run.rows.append((record["size"], max(numbers)))
        for part in parts:
            if isinstance(part.get("nwrong"), int | float):
                run.wrong = int((run.wrong or 0) + part["nwrong"])
    bounds = document.get("out_of_bounds")
    if isinstance(bounds, dict) and isinstance(bounds.get("count"), int):
        run.out_of_bounds, run.failed = bounds["count"], bounds.get("okay") is False
    average = document.get("average_bus_bandwidth")
    if isinstance(average, dict) and isinstance(average.get("bandwidth"), int | float):
        run.avg_busbw_footer = float(average["bandwidth"])
    return [run] if run.rows or run.ranks else []
