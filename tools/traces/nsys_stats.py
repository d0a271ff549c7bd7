"""`nsys stats --format csv` output (a file of one or several summary tables, as printed or as `-o` wrote them):
the partial view a summary table allows. Kernel totals, CUDA API time and its synchronising share, memory
operations; never steps, idle time, overlap or ranks, which only the events show (the SQLite export has them).

Tables are told apart by their columns, whatever the nsys generation (shared/notes/nsys_format.md, 2.2): headers
are matched by prefix ("Total Time (ns)", "Total Time (us)", 2020.4's "Time(%)" and "Average"), the unit comes
from the header, and the lines nsys prints around tables ("Processing [...]", "SKIPPED: ...", "NOTICE: ...",
blank lines) are skipped.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from pydantic import BaseModel, Field

from tools.core.errors import UnreadableInput
from tools.core.files import read_regular
from tools.core.limits import NSYS_STATS_MAX_BYTES
from tools.traces.names import api_name, is_sync_call

__all__ = ["NsysStats", "StatsRow", "is_nsys_stats", "read_nsys_stats"]

_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "μs": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}
_TIME_HEADER = re.compile(r"^Total Time(?: \((\w+)\))?$")
_NOISE = ("Processing [", "SKIPPED:", "NOTICE:", "Generating SQLite", "Using ", "Exporting ", "** ", "WARNING")


class StatsRow(BaseModel):
    name: str
    count: int
    total_ms: float
    share_pct: float | None = Field(default=None, description="nsys's Time (%): a share of the table's rows only.")


class NsysStats(BaseModel):
    """What nsys stats tables say: the biggest rows of each, and the API time spent synchronising."""

    kernels: list[StatsRow] = Field(default_factory=list)
    api: list[StatsRow] = Field(default_factory=list)
    memory_ops: list[StatsRow] = Field(default_factory=list)
    kernel_ms: float = 0.0
    api_ms: float = 0.0
    sync_api_ms: float = 0.0
    tables: list[str] = Field(default_factory=list, description="Which reports the file held.")


def is_nsys_stats(head: bytes) -> bool:
    """Whether a file's first bytes look like nsys stats CSV output."""
    text = head.decode("utf-8", "replace")
    return bool(re.search(r"^(?:\ufeff)?Time ?\(%\),Total Time", text, re.MULTILINE))


def _tables(text: str) -> list[list[list[str]]]:
    """The CSV tables in the text: runs of lines that start with a header 'Time (%)...'."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        stripped = line.strip().lstrip("\ufeff")
        if not stripped or stripped.startswith(_NOISE):
            current = None
            continue
        if re.match(r"^Time ?\(%\),", stripped):
            current = []
            tables.append(current)
        if current is not None:
            current.extend(csv.reader(io.StringIO(stripped)))
    return [t for t in tables if len(t) >= 1]


def _number(value: str) -> float | None:
    try:
        return float(value.replace(",", "").strip())
    except ValueError:
        return None


def _rows(table: list[list[str]], label: str) -> list[StatsRow] | None:
    header = [h.strip() for h in table[0]]
    times = [(i, _TIME_HEADER.match(h)) for i, h in enumerate(header)]
    found = next(((i, m) for i, m in times if m), None)
    count_at = next((i for i, h in enumerate(header) if h in ("Instances", "Num Calls", "Count", "Operations")), None)
    name_at = next((i for i, h in enumerate(header) if h == label), None)
    if found is None or count_at is None or name_at is None:
        return None
    time_at, match = found
    scale = _UNIT_MS.get(match.group(1) or "ns", 1e-6)
    share_at = next((i for i, h in enumerate(header) if h.replace(" ", "") == "Time(%)"), None)
    rows = []
    for cells in table[1:]:
        if len(cells) <= max(time_at, count_at, name_at):
            continue
        total, count = _number(cells[time_at]), _number(cells[count_at])
        if total is None or count is None:
            continue
        share = _number(cells[share_at]) if share_at is not None else None
        rows.append(StatsRow(name=cells[name_at], count=int(count), total_ms=round(total * scale, 6),
                             share_pct=share))
    return rows


def read_nsys_stats(path: Path, display: str, keep: int) -> NsysStats:
    """The tables of an nsys stats CSV file, each cut to its `keep` largest rows (totals over all rows)."""
    if path.stat().st_size > NSYS_STATS_MAX_BYTES:
        raise UnreadableInput(f"{display} is larger than {NSYS_STATS_MAX_BYTES // 2**20} MiB: not a stats table.",
                              "Pass the CSV that nsys stats --format csv wrote.")
    text = read_regular(path, NSYS_STATS_MAX_BYTES, display).decode("utf-8", errors="replace")
    view = NsysStats()
    for table in _tables(text):
        header = [h.strip() for h in table[0]]
        if "Operation" in header:
            rows = _rows(table, "Operation") or []
            view.memory_ops = rows[:keep]
            view.tables.append("cuda_gpu_mem_time_sum")
        elif "Instances" in header and "Name" in header:
            rows = _rows(table, "Name") or []
            view.kernels = rows[:keep]
            view.kernel_ms = round(sum(r.total_ms for r in rows), 3)
            view.tables.append("cuda_gpu_kern_sum")
        elif "Num Calls" in header and "Name" in header:
            rows = _rows(table, "Name") or []
            if not rows or sum(r.name.startswith("cu") for r in rows) * 2 < len(rows):
                continue  # osrt_sum: the OS runtime (poll, pthread_*), not the CUDA API
            view.api = rows[:keep]
            view.api_ms = round(sum(r.total_ms for r in rows), 3)
            view.sync_api_ms = round(sum(r.total_ms for r in rows if is_sync_call(api_name(r.name))), 3)
            view.tables.append("cuda_api_sum")
    if not view.tables:
        raise UnreadableInput(f"{display}: no kernel, CUDA API or memory-operation summary table in it.",
                              "Pass the output of nsys stats --format csv --report cuda_gpu_kern_sum,cuda_api_sum "
                              "(or the .sqlite export itself, for the full breakdown).")
    return view
