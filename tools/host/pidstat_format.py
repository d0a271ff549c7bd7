"""The reader of `pidstat` text: -u (%usr %system [%wait] %CPU CPU), -r (minflt/s majflt/s VSZ RSS %MEM), -d (kB_rd/s
kB_wr/s [iodelay]) and -t (TGID and TID columns: a process's row, then one row a thread, `|__name`), with -h's `#
Time` header and epoch stamps, any locale's clock, and `Average:` rows. Columns are read by the header's names.

Without an interval pidstat prints one report per activity whose rows carry the header's own time stamp (or, with
-h, a single stamp): the averages since each process started, not a sample of the present.
"""

from __future__ import annotations

import re

from tools.host.host_formats import HostCapture, ProcessSample

__all__ = ["is_pidstat_text", "read_pidstat"]

_HEADER = re.compile(r"(?:^|[ \t])(?:PID|TGID)[ \t][^\n]*Command[ \t]*$", re.M)
_BANNER_CPUS = re.compile(r"\((\d+) CPU\)")
_NUMBER = re.compile(r"^-?\d+(?:[.,]\d+)?$")


def is_pidstat_text(text: str) -> bool:
    return _HEADER.search(text[:65536]) is not None


def _value(text: str) -> float | None:
    return float(text.replace(",", ".")) if _NUMBER.match(text) else None


def read_pidstat(text: str) -> HostCapture:
    capture = HostCapture("pidstat")
    columns: list[str] | None = None
    header_time: str | None = None
    sections: list[tuple[str | None, list[str], dict[str, list[ProcessSample]]]] = []  # header time, columns, rows
    averages: dict[int, ProcessSample] = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        names = [t for t in tokens if not t.startswith("#")]
        if ("PID" in names or "TGID" in names) and names[-1] == "Command":
            at = next(i for i, t in enumerate(names) if t in ("UID", "USER", "PID", "TGID"))
            columns, header_time = names[at:], " ".join(names[:at]) if names[0] != "Time" else None
            sections.append((header_time, columns, {}))
            continue
        if columns is None or len(tokens) < len(columns):
            continue
        stamp = " ".join(tokens[:len(tokens) - len(columns)])
        cells = dict(zip(columns, tokens[len(tokens) - len(columns):], strict=True))
        row = _row(cells)
        if row is None:
            continue
        if stamp and not re.search(r"\d", stamp):  # "Average:", "平均时间:"
            averages[row.pid if not row.thread else -row.pid] = row
            continue
        sections[-1][2].setdefault(stamp, []).append(row)
    stamps = [stamp for _, _, reports in sections for stamp in reports]
    capture.reports = len(stamps) or (1 if averages else 0)
    # Since start: every section holds one report stamped with its header's time (or -h with a single stamp).
    capture.since_boot = bool(sections) and all(
        len(reports) == 1 and (header is None or next(iter(reports)) == header)
        for header, _, reports in sections if reports) and len(set(stamps)) <= len(sections) and (
        all(header is not None for header, _, _ in sections) or len(set(stamps)) == 1)
    merged: dict[int, ProcessSample] = {}
    for _, _, reports in sections:
        if not reports:
            continue
        last = list(reports.values())[-1]
        for row in last:
            key = -row.pid if row.thread else row.pid
            known = merged.setdefault(key, row)
            for name in ("cpu_pct", "core", "major_faults_s", "io_kbs"):
                if getattr(row, name) is not None:
                    setattr(known, name, getattr(row, name))
    capture.processes = list(merged.values()) or list(averages.values())
    # The host's busy share as the processes' own: the sum of the last -u report's %CPU (threads not counted twice).
    for _, columns_of, reports in sections:
        if reports and "%CPU" in columns_of:
            for rows in reports.values():
                total = sum(r.cpu_pct or 0.0 for r in rows if not r.thread)
                capture.processes_cpu_sum.append(total)
    banner = _BANNER_CPUS.search(text[:4096])
    capture.cores = int(banner.group(1)) if banner else None
    kinds = sorted({("-u" if "%CPU" in c else "-r" if "RSS" in c else "-d" if "kB_rd/s" in c else "?")
                    + (" -t" if "TID" in c else "") for _, c, _ in sections})
    capture.what = f"pidstat {' '.join(kinds)}: {len(capture.processes)} process(es)/thread(s)"
    return capture


def _row(cells: dict[str, str]) -> ProcessSample | None:
    tid, pid = cells.get("TID"), cells.get("PID", cells.get("TGID"))
    thread = tid is not None and tid != "-"
    ident = tid if thread else pid
    if ident is None or not ident.isdigit():
        return None
    cpu, core = cells.get("%CPU"), cells.get("CPU")
    read, written = _value(cells.get("kB_rd/s", "")), _value(cells.get("kB_wr/s", ""))
    return ProcessSample(pid=int(ident), command=cells.get("Command", "").lstrip("|_"),
                         cpu_pct=_value(cpu) if cpu is not None else None,
                         core=int(core) if core is not None and core.isdigit() else None, thread=thread,
                         major_faults_s=_value(cells.get("majflt/s", "")),
                         io_kbs=(read or 0.0) + (written or 0.0) if read is not None or written is not None else None)
