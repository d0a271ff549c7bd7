"""The readers of memory captures: `free` (any unit flag: -k, -m, -g, -b, -h with its suffixes; procps-ng 3.3's
`buff/cache  available` layout, -w's `buffers  cache`, and the old `-/+ buffers/cache` row), `/proc/meminfo` (one
reading or several pasted in turn), `/proc/pressure/*` (PSI: `some` / `full` lines with avg10, avg60, avg300) and
`numastat` (the sysfs node file, the default table, -n and -m per-node tables).

free's plain numbers are in whatever unit it was asked for, which the output does not say: only ratios (available
of total, swap used of swap total) are judged, and they need no unit.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from tools.host.host_formats import HostCapture, MemorySnapshot, NumaNode, Pressure

__all__ = ["is_free", "is_meminfo", "is_numastat", "is_pressure", "read_free", "read_meminfo", "read_numastat",
           "read_pressure"]

_FREE_HEADER = re.compile(r"^[ \t]*total[ \t]+used[ \t]+free[ \t]", re.M)
_SIZE = re.compile(r"^(\d+(?:[.,]\d+)?)([BKMGTPE]?)(i?)B?$", re.I)
_UNIT_KB = {"b": 1 / 1024, "": 1.0, "k": 1.0, "m": 1024.0, "g": 1024.0**2, "t": 1024.0**3, "p": 1024.0**4,
            "e": 1024.0**5}
_PSI_LINE = re.compile(r"^(?:(.*?)[ \t:]+)?(some|full)[ \t]+avg10=([\d.]+)[ \t]+avg60=([\d.]+)[ \t]+avg300=([\d.]+)"
                       r"(?:[ \t]+total=\d+)?[ \t]*$")
_RESOURCE = re.compile(r"(?:pressure/|\b)(cpu|io|memory|mem)(?:\.pressure\b|\b)", re.I)
_NUMA_KEYS = {"numa_hit": "hit", "numa_miss": "miss", "other_node": "other_node", "memtotal": "mem_total_mb",
              "memfree": "mem_free_mb"}


# A memory row read without free's English header: free in another locale (procps-ng translates the header and the
# row labels: "Speicher:", "内存：", "Pamięć:", "스  왑:"), or `free -m | grep Mem` logged with a date before it. free.c
# prints the columns in one fixed order whatever the language, so six or seven numbers after a label ending in a
# colon are that order; the swap row (three numbers) follows its memory row.
_NUMBERS = r"((?:[ \t]+\d+(?:[.,]\d+)?[BKMGTPE]?i?B?){%s})[ \t]*$"
_LABELLED_ROW = re.compile(r"^(.*?)[:：]" + _NUMBERS % "6,7", re.M)
_SWAP_ROW = re.compile(r"^(.*?)[:：]" + _NUMBERS % "3")
# The layouts such a row may have, each with the identity its numbers keep (procps-ng's free.c): before 3.3.10
# used = total - free (buffers and cached after shared); 3.3.10 to 3.3.17 used = total - free - buff/cache; 4.0 on
# used = total - available. -w splits buff/cache into buffers and cache (seven numbers).
_BARE_LAYOUTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("total", "used", "free", "shared", "buff/cache", "available"), "used+free+buff/cache"),
    (("total", "used", "free", "shared", "buff/cache", "available"), "used+available"),
    (("total", "used", "free", "shared", "buffers", "cached"), "used+free"),
    (("total", "used", "free", "shared", "buffers", "cache", "available"), "used+free+buffers+cache"),
    (("total", "used", "free", "shared", "buffers", "cache", "available"), "used+available"),
)


def is_free(text: str) -> bool:
    head = text[:16384]
    return ((_FREE_HEADER.search(head) is not None and re.search(r"^[ \t]*Mem:", head, re.M) is not None)
            or _bare_header(head) is not None)


def _bare_header(text: str) -> list[str] | None:
    """The column names of memory rows read without the English header: the one layout whose identity every row
    keeps, to within the rounding of the printed digits; None when there are no such rows, or none or more than one
    distinct layout fits (then they cannot be read without their header)."""
    rows = [match.group(2).split() for match in _LABELLED_ROW.finditer(text[:1_000_000])]
    fitting = []
    for names, identity in _BARE_LAYOUTS:
        if rows and all(_keeps(row, names, identity) for row in rows):
            fitting.append(names)
    return list(fitting[0]) if fitting and all(f == fitting[0] for f in fitting) else None


def _keeps(row: list[str], names: tuple[str, ...], identity: str) -> bool:
    """Whether one row's numbers keep a layout's identity; each printed value may be off by one unit of its last
    digit (free truncates kB to the unit asked for)."""
    if len(row) != len(names):
        return False
    values = [_size(t, 1.0) for t in row]
    if any(v is None for v in values):
        return False
    cells = dict(zip(names, (v or 0.0 for v in values), strict=True))
    slack = dict(zip(names, (_unit_of_last_digit(t) for t in row), strict=True))
    parts = identity.split("+")
    return abs(sum(cells[n] for n in parts) - cells["total"]) <= sum(slack[n] for n in [*parts, "total"])


def _unit_of_last_digit(cell: str) -> float:
    match = _SIZE.match(cell.strip())
    if match is None:
        return 0.0
    digits = match.group(1).replace(",", ".")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    suffix = match.group(2).lower()
    return 10.0**-decimals * (_UNIT_KB[suffix] if suffix else 1.0)


def _size(cell: str, plain_scale: float) -> float | None:
    match = _SIZE.match(cell.strip())
    if match is None:
        return None
    value = float(match.group(1).replace(",", "."))
    suffix = match.group(2).lower()
    return value * (_UNIT_KB[suffix] if suffix else plain_scale)


def read_free(text: str) -> HostCapture:
    """Each `Mem:` row after a header names its columns; the last reading counts (free -s prints one per interval),
    and every reading is kept in order. Without the English header (another locale, or logged rows), the rows are
    read in free's fixed column order, by the one layout their numbers fit; else none is read."""
    capture = HostCapture("free")
    if _FREE_HEADER.search(text[:16384]) is None:
        return _read_bare(capture, text)
    header: list[str] = []
    memory: MemorySnapshot | None = None
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if tokens[:3] == ["total", "used", "free"]:
            header = tokens
            continue
        if not header:
            continue
        label = tokens[0].rstrip(":").lower()
        cells = dict(zip(header, (_size(t, 1.0) for t in tokens[1:]), strict=False))
        if label == "mem":
            memory = _snapshot(cells)
            capture.memory_series.append(memory)
        elif label == "-/+" and memory is not None and len(tokens) >= 4:
            # "-/+ buffers/cache:  used  free": the free column here already counts buffers and cache.
            memory.available_kb, memory.available_estimated = _size(tokens[-1], 1.0), True
        elif label == "swap" and memory is not None:
            memory.swap_total_kb, memory.swap_used_kb = cells.get("total"), cells.get("used")
    return _finish(capture, "free")


def _read_bare(capture: HostCapture, text: str) -> HostCapture:
    header = _bare_header(text)
    if header is None:
        return capture  # no rows, or rows that fit no single layout: the caller refuses it
    memory: MemorySnapshot | None = None
    for line in text.splitlines():
        row = _LABELLED_ROW.match(line)
        if row is not None:
            memory = _snapshot(dict(zip(header, (_size(t, 1.0) for t in row.group(2).split()), strict=False)))
            capture.memory_series.append(memory)
            continue
        swap = _SWAP_ROW.match(line)
        if swap is not None and memory is not None and memory.swap_total_kb is None:
            total, used, _ = (_size(t, 1.0) for t in swap.group(2).split())
            memory.swap_total_kb, memory.swap_used_kb = total, used
    return _finish(capture, "free (rows read in free's column order, without the English header: "
                   + " ".join(header) + ")")


def _snapshot(cells: dict[str, float | None]) -> MemorySnapshot:
    memory = MemorySnapshot(total_kb=cells.get("total"), free_kb=cells.get("free"))
    caches = [k for k in ("buffers", "cached", "cache", "buff/cache") if k in cells]
    cache = sum(cells.get(k) or 0.0 for k in caches)
    memory.cache_kb = cache if caches else None
    if cells.get("available") is not None:
        memory.available_kb = cells["available"]
    elif memory.free_kb is not None:
        memory.available_kb, memory.available_estimated = memory.free_kb + cache, True
    return memory


def _finish(capture: HostCapture, what: str) -> HostCapture:
    readings = len(capture.memory_series)
    capture.memory = capture.memory_series[-1] if capture.memory_series else None
    capture.reports = readings
    capture.what = what + (f", {readings} readings" if readings > 1 else "")
    return capture


# ---------------------------------------------------------------- /proc/meminfo


_MEMINFO_LINE = re.compile(r"^[ \t]*(MemTotal|MemFree|MemAvailable|Buffers|Cached|SwapCached|SwapTotal|SwapFree):"
                           r"[ \t]*(\d+)[ \t]*kB[ \t]*$", re.M)


def is_meminfo(text: str) -> bool:
    head = text[:16384]
    return re.search(r"^[ \t]*MemTotal:[ \t]*\d+[ \t]*kB", head, re.M) is not None and len(
        _MEMINFO_LINE.findall(head)) >= 3


def read_meminfo(text: str) -> HostCapture:
    """Each MemTotal line starts a reading (`cat /proc/meminfo` pasted more than once, or in a loop); the kernel's
    own figures in kB: MemAvailable as the available memory (else free + buffers + cache, said), Buffers + Cached as
    the page cache, SwapCached (pages written to swap and read back: swap traffic has happened)."""
    capture = HostCapture("meminfo")
    readings: list[dict[str, float]] = []
    for key, value in _MEMINFO_LINE.findall(text):
        if key == "MemTotal" or not readings:
            readings.append({})
        readings[-1][key] = float(value)
    for values in readings:
        memory = _snapshot({"total": values.get("MemTotal"), "free": values.get("MemFree"),
                            **({"available": values["MemAvailable"]} if "MemAvailable" in values else {}),
                            **{k.lower(): values[k] for k in ("Buffers", "Cached") if k in values}})
        if "SwapTotal" in values:
            memory.swap_total_kb = values["SwapTotal"]
            if "SwapFree" in values:
                memory.swap_used_kb = values["SwapTotal"] - values["SwapFree"]
        memory.swap_cached_kb = values.get("SwapCached")
        capture.memory_series.append(memory)
    return _finish(capture, "/proc/meminfo")


# ---------------------------------------------------------------- PSI


def is_pressure(text: str) -> bool:
    lines = [line.strip() for line in text[:16384].splitlines() if line.strip()]
    matched = sum(1 for line in lines if _PSI_LINE.match(line))
    return matched >= 1 and matched * 2 >= len(lines)


def read_pressure(text: str, name: str = "") -> HostCapture:
    """PSI lines grouped into files: a `some` line starts one, its `full` line follows (memory and io always print
    both; cpu printed `some` only before Linux 5.13). The file is named by a prefix (`grep . /proc/pressure/*` writes
    `/proc/pressure/io:some ...`), a heading line before it, or the capture's file name; unnamed, `cat
    /proc/pressure/*` prints cpu, io, memory in that order, and a lone some+full pair is taken as memory's (said)."""
    blocks: list[tuple[str | None, dict[str, tuple[float, float, float]]]] = []
    heading: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        match = _PSI_LINE.match(stripped)
        if match is None:
            said = _RESOURCE.search(stripped)
            heading = _resource(said.group(1)) if said and stripped else heading
            continue
        prefix, kind = match.group(1), match.group(2)
        said = _RESOURCE.search(prefix or "")
        resource = _resource(said.group(1)) if said else heading
        values = (float(match.group(3)), float(match.group(4)), float(match.group(5)))
        if kind == "some" or not blocks or "full" in blocks[-1][1] or (resource and resource != blocks[-1][0]):
            blocks.append((resource, {}))
            heading = None
        blocks[-1][1][kind] = values
    from_name = _RESOURCE.search(PurePath(name).stem.replace("_", " ").replace("-", " ")) if name else None
    capture = HostCapture("psi")
    unnamed = [i for i, (resource, _) in enumerate(blocks) if resource is None]
    order = ["cpu", "io", "memory"][-len(blocks):] if len(blocks) <= 3 else []
    for at, (resource, lines) in enumerate(blocks):
        if "some" not in lines:
            continue
        named = resource is not None
        if resource is None and len(blocks) == 1 and from_name is not None:
            resource, named = _resource(from_name.group(1)), True
        if resource is None:
            if len(blocks) == 3 and len(unnamed) == 3:
                resource = order[at]
                named = True  # cat /proc/pressure/* prints the three files in this order
            else:
                resource = "cpu" if "full" not in lines else "memory"
        capture.pressure.append(Pressure(resource=resource, some=lines["some"], full=lines.get("full"),
                                         named=named))
    capture.reports = len(capture.pressure)
    capture.what = "PSI: " + ", ".join(p.resource + ("" if p.named else " (assumed)") for p in capture.pressure)
    return capture


def _resource(word: str) -> str:
    word = word.lower()
    return "memory" if word.startswith("mem") else word


# ---------------------------------------------------------------- numastat


def is_numastat(text: str) -> bool:
    head = text[:16384]
    return (re.search(r"^[ \t]*numa_hit[ \t]", head, re.M | re.I) is not None
            or re.search(r"^Per-node (?:system memory usage|numastat info|process memory usage)", head, re.M)
            is not None)


def read_numastat(text: str) -> HostCapture:
    """The node columns from the header (`node0 node1`, `Node 0 Node 1 ... Total`), then one row a counter; the
    sysfs file (`numa_hit 31409426`) is one node's counters, a key and a value a line."""
    capture = HostCapture("numastat")
    nodes: list[str] = []
    by_node: dict[str, NumaNode] = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if all(re.fullmatch(r"node\d+", t) for t in tokens):
            nodes = tokens
            continue
        if tokens[0] == "Node" and len(tokens) >= 2 and tokens[1].isdigit():
            nodes = [f"node{n}" for n in re.findall(r"Node[ \t]+(\d+)", line)]
            continue
        key = _NUMA_KEYS.get(tokens[0].lower())
        values = [float(t) for t in tokens[1:] if re.fullmatch(r"\d+(?:\.\d+)?", t)]
        if key is None or not values:
            continue
        columns = nodes or ["node0"]
        for node, value in zip(columns, values, strict=False):
            setattr(by_node.setdefault(node, NumaNode(node)), key, value)
    capture.numa = list(by_node.values())
    capture.reports = 1 if capture.numa else 0
    capture.what = f"numastat: {len(capture.numa)} node(s)"
    return capture
