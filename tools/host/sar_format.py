"""The reader of `sar` text (any mix of -u, -P, -r, -S, -B, -W, -d, -n DEV, -q sections, 12 h or 24 h or a locale's
time stamps, `Average:` rows) and of `sadf` output that holds values (-d: `# hostname;interval;timestamp;...`
headers and `;` rows; -p: `host  interval  timestamp  device  field  value` lines). A section is told by its columns,
never by its place: every sar header line names them. Interval rows are read; the `Average:` rows stand in only
where a section has no interval row (an excerpt that kept the averages).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tools.host.host_formats import HostCapture, MemorySnapshot, _cpu_row, _disk, clock_span

__all__ = ["is_sadf", "is_sar", "read_sadf", "read_sar"]

Row = tuple[str | None, dict[str, float]]  # a row's label (CPU, DEV, IFACE) or None, and its columns
_BANNER_CPUS = re.compile(r"\((\d+) CPU\)")
_LABELS = ("CPU", "DEV", "IFACE", "INTR", "TTY", "FILESYSTEM", "BUS", "TEMP")
_NUMBER = re.compile(r"^-?\d+(?:[.,]\d+)?$")
# The columns that make a section one of those judged: sar -r, -S, -B, -W, -d, -n DEV, -q (and -u, -P by CPU).
_SECTION_WORDS = {"kbmemfree": "memory", "kbswpfree": "swap", "pgscand/s": "paging", "majflt/s": "paging",
                  "pswpin/s": "swapping", "rxkB/s": "network", "runq-sz": "queue", "tps": "disk"}
_SADF_P = re.compile(r"^\S+\t-?\d+\t[^\t]+\t(\S+)\t(\S+)\t(-?[\d.]+)$")


def is_sar(text: str) -> bool:
    """A sar header line: a time stamp (any locale's, see clock_span), or an `Average:` word, then a section's
    columns. iostat's `Device: tps` line has the same words but no stamp."""
    for line in text[:65536].splitlines():
        tokens = line.split()
        at = clock_span(tokens)
        if not at and not (tokens and tokens[0].endswith(":") and tokens[0] != "Device:" and len(tokens) > 2
                           and tokens[1] in _LABELS):
            continue
        rest = tokens[at:] if at else tokens[1:]
        if rest[:2] == ["CPU", "%user"] or any(word in _SECTION_WORDS for word in rest[:2]):
            return True
        # A labelled section's header names its section further on (IFACE rxpck/s txpck/s rxkB/s: sar -n DEV); a
        # header of words only, not pidstat's (PID ... Command), whose -r columns share sar -B's majflt/s.
        if (at and rest and rest[0] in _LABELS and all(_value(t) is None for t in rest)
                and any(word in _SECTION_WORDS for word in rest[1:])):
            return True
    return False


def is_sadf(text: str) -> bool:
    head = text[:65536]
    return (re.search(r"^[ \t]*# hostname;interval;timestamp;", head, re.M) is not None
            or re.search(r"^File created by sar/sadc", head, re.M) is not None
            or sum(1 for line in head.splitlines()[:50] if _SADF_P.match(line)) >= 3)


def _value(text: str) -> float | None:
    return float(text.replace(",", ".")) if _NUMBER.match(text) else None


def read_sar(text: str) -> HostCapture:
    """Each header line (a time stamp, then column names) opens a section; rows under it carry a time stamp (an
    interval) or `Average:` (any locale's word ending in a colon)."""
    sections: list[tuple[list[str], list[list[Row]], list[Row]]] = []  # columns, intervals, averages
    columns: list[str] | None = None
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        at = clock_span(tokens)
        timed = at > 0
        averaged = not timed and tokens[0].endswith(":") and not tokens[0][:-1].isdigit()
        if not (timed or averaged):
            continue
        rest = tokens[at:] if timed else tokens[1:]
        if timed and rest and all(_value(t) is None for t in rest[1:]) and _value(rest[0]) is None and \
                (len(rest) > 1 or rest[0] in _LABELS):
            columns = rest
            sections.append((columns, [], []))
            continue
        if columns is None or len(rest) != len(columns):
            continue
        labelled = columns[0] in _LABELS
        cells = [_value(t) for t in (rest[1:] if labelled else rest)]
        if any(c is None for c in cells):
            continue
        row: Row = (rest[0] if labelled else None,
                    dict(zip(columns[1:] if labelled else columns, (c or 0.0 for c in cells), strict=True)))
        _, intervals, averages = sections[-1]
        if averaged:
            averages.append(row)
        elif not intervals or row[0] is None or any(r[0] == row[0] for r in intervals[-1]):
            intervals.append([row])
        else:
            intervals[-1].append(row)
    capture = HostCapture("sar")
    banner = _BANNER_CPUS.search(text[:4096])
    capture.cores = int(banner.group(1)) if banner else None
    counted: dict[tuple[str, ...], int] = {}
    for columns, intervals, averages in sections:
        _section(capture, columns, intervals or ([averages] if averages else []))
        # sar repeats a labelled section's header before each interval (sar -d 1 3): those are one section's reports.
        counted[tuple(columns)] = counted.get(tuple(columns), 0) + len(intervals)
    capture.reports = max([capture.reports, *counted.values()])
    if capture.memory is not None:  # sar -S's swap, read into the lowest reading, holds for each of them
        for reading in capture.memory_series:
            if reading.swap_total_kb is None:
                reading.swap_total_kb, reading.swap_used_kb = capture.memory.swap_total_kb, capture.memory.swap_used_kb
    return capture


def _section(capture: HostCapture, columns: list[str], reports: list[list[Row]]) -> None:
    if not reports:
        return
    names = set(columns)
    kind = "cpu" if columns[0] == "CPU" and "%idle" in names else next(
        (section for word, section in _SECTION_WORDS.items() if word in names), None)
    if kind is None:
        return
    capture.reports = max(capture.reports, len(reports))
    if kind not in capture.what:
        capture.what = f"{capture.what}, {kind}" if capture.what else f"sar: {kind}"
    for report in reports:
        _report(capture, kind, report)


def _report(capture: HostCapture, kind: str, report: list[Row]) -> None:
    if kind == "cpu":
        rows = {("all" if label in ("all", "-1") else str(label)): {k.lstrip("%"): v for k, v in values.items()}
                for label, values in report}
        if "all" not in rows and capture.cores and len(rows) == capture.cores:
            # sar -P 0 (or a list of every CPU) prints no `all` row: when the rows are every CPU the banner counts,
            # their mean is the host's.
            rows["all"] = {key: sum(r.get(key, 0.0) for r in rows.values()) / len(rows)
                           for key in next(iter(rows.values()))}
        _cpu_row(capture, rows)
        return
    for label, values in report:
        if kind == "memory":
            _memory(capture, values)
        elif kind == "swap":
            memory = capture.memory or MemorySnapshot()
            memory.swap_used_kb = values.get("kbswpused")
            memory.swap_total_kb = (values.get("kbswpfree") or 0.0) + (values.get("kbswpused") or 0.0)
            capture.memory = memory
        elif kind == "paging":
            if "majflt/s" in values:
                capture.major_faults_s.append(values["majflt/s"])
            if "pgscand/s" in values:
                capture.direct_scans_s.append(values["pgscand/s"])
        elif kind == "swapping":
            capture.swap_in.append(values.get("pswpin/s", 0.0))
            capture.swap_out.append(values.get("pswpout/s", 0.0))
        elif kind == "disk" and label is not None:
            disk = _disk(label, {k.lstrip("%"): v for k, v in values.items()})
            disk.iops = values.get("tps")
            capture.disks.append(disk)
        elif kind == "network" and label is not None and label != "lo":
            util = values.get("%ifutil")
            previous = capture.interfaces.get(label)
            capture.interfaces[label] = util if previous is None else max(previous, util or 0.0)
        elif kind == "queue":
            capture.run_queue.append(values.get("runq-sz", 0.0))
            if "blocked" in values:
                capture.blocked.append(values["blocked"])
            capture.load_1m = values.get("ldavg-1", capture.load_1m)


def _memory(capture: HostCapture, values: Mapping[str, float]) -> None:
    """sar -r: the total from used and its share (%memused); available is kbavail (sysstat 11.5+), else free +
    buffers + cached. Of the intervals, the one with the least available counts."""
    memory = MemorySnapshot()
    used, share = values.get("kbmemused"), values.get("%memused")
    if used is not None and share:
        memory.total_kb = used * 100 / share
    memory.free_kb = values.get("kbmemfree")
    if "kbbuffers" in values or "kbcached" in values:
        memory.cache_kb = values.get("kbbuffers", 0.0) + values.get("kbcached", 0.0)
    capture.memory_series.append(memory)
    if "kbavail" in values:
        memory.available_kb = values["kbavail"]
    elif memory.free_kb is not None:
        memory.available_kb = memory.free_kb + values.get("kbbuffers", 0.0) + values.get("kbcached", 0.0)
        memory.available_estimated = True
    before = capture.memory
    if before is not None:
        memory.swap_total_kb, memory.swap_used_kb = before.swap_total_kb, before.swap_used_kb
        if before.available_pct is not None and (memory.available_pct is None
                                                 or before.available_pct <= memory.available_pct):
            return
    capture.memory = memory


def read_sadf(text: str) -> HostCapture:
    """sadf -d and -p, turned into sar's rows and read by the same sections; -H (the file's header: its activities,
    no values) and -j JSON of CPU load are told apart by the caller."""
    lines: list[str] = []
    header: list[str] | None = None
    pairs: dict[tuple[str, str], dict[str, float]] = {}
    for line in text.splitlines():
        line = line.strip()  # a pasted block may indent the lines
        if line.startswith("# hostname;interval;timestamp;"):
            header = line[2:].split(";")[3:]
            lines.append("00:00:00 " + " ".join(header))
            continue
        if header is not None and line.count(";") >= 3 and not line.startswith("#"):
            cells = line.split(";")[3:]
            if cells and cells[0] == "-1":
                cells[0] = "all"
            lines.append("00:00:01 " + " ".join(cells))
            continue
        match = _SADF_P.match(line)
        if match is not None:
            at = line.split("\t")[2]
            pairs.setdefault((at, match.group(1)), {})[match.group(2)] = float(match.group(3))
    capture = read_sar("\n".join(lines)) if lines else HostCapture("sar")
    if pairs:
        groups: dict[frozenset[str], list[list[Row]]] = {}
        last: dict[frozenset[str], str] = {}
        for (at, device), values in pairs.items():
            key = frozenset(values)
            reports = groups.setdefault(key, [])
            if last.get(key) != at:
                reports.append([])
                last[key] = at
            reports[-1].append((None if device == "-" else device, values))
        for key, reports in groups.items():
            columns = ["CPU", *sorted(key)] if any(label is not None for label, _ in reports[0]) else sorted(key)
            if "%idle" not in key and columns[0] == "CPU":
                columns[0] = "DEV" if "tps" in key else "IFACE" if "rxkB/s" in key else "CPU"
            _section(capture, columns, reports)
    capture.kind = "sadf"
    capture.what = capture.what.replace("sar:", "sadf:")
    return capture
