"""The readers of memory captures: `free` (any unit flag: -k, -m, -g, -b, -h with its suffixes; procps-ng 3.3's
`buff/cache  available` layout, -w's `buffers  cache`, and the old `-/+ buffers/cache` row), `/proc/pressure/*`
(PSI: `some` / `full` lines with avg10, avg60, avg300) and `numastat` (the sysfs node file, the default table, -n and
-m per-node tables).

free's plain numbers are in whatever unit it was asked for, which the output does not say: only ratios (available
of total, swap used of swap total) are judged, and they need no unit.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from tools.host.host_formats import HostCapture, MemorySnapshot, NumaNode, Pressure

__all__ = ["is_free", "is_numastat", "is_pressure", "read_free", "read_numastat", "read_pressure"]

_FREE_HEADER = re.compile(r"^[ \t]*total[ \t]+used[ \t]+free[ \t]", re.M)
_SIZE = re.compile(r"^(\d+(?:[.,]\d+)?)([BKMGTPE]?)(i?)B?$", re.I)
_UNIT_KB = {"b": 1 / 1024, "": 1.0, "k": 1.0, "m": 1024.0, "g": 1024.0**2, "t": 1024.0**3, "p": 1024.0**4,
            "e": 1024.0**5}
_PSI_LINE = re.compile(r"^(?:(.*?)[ \t:]+)?(some|full)[ \t]+avg10=([\d.]+)[ \t]+avg60=([\d.]+)[ \t]+avg300=([\d.]+)"
                       r"(?:[ \t]+total=\d+)?[ \t]*$")
_RESOURCE = re.compile(r"(?:pressure/|\b)(cpu|io|memory|mem)(?:\.pressure\b|\b)", re.I)
_NUMA_KEYS = {"numa_hit": "hit", "numa_miss": "miss", "other_node": "other_node", "memtotal": "mem_total_mb",
              "memfree": "mem_free_mb"}


def is_free(text: str) -> bool:
    head = text[:16384]
    return _FREE_HEADER.search(head) is not None and re.search(r"^[ \t]*Mem:", head, re.M) is not None


def _size(cell: str, plain_scale: float) -> float | None:
    match = _SIZE.match(cell.strip())
    if match is None:
        return None
    value = float(match.group(1).replace(",", "."))
    suffix = match.group(2).lower()
    return value * (_UNIT_KB[suffix] if suffix else plain_scale)


def read_free(text: str) -> HostCapture:
    """Each `Mem:` row after a header names its columns; the last reading counts (free -s prints one per interval)."""
    capture = HostCapture("free")
    header: list[str] = []
    memory: MemorySnapshot | None = None
    readings = 0
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
            readings += 1
            memory = MemorySnapshot(total_kb=cells.get("total"), free_kb=cells.get("free"))
            if cells.get("available") is not None:
                memory.available_kb = cells["available"]
            elif memory.free_kb is not None:
                cache = sum(cells.get(k) or 0.0 for k in ("buffers", "cached", "cache", "buff/cache"))
                memory.available_kb, memory.available_estimated = memory.free_kb + cache, True
        elif label == "-/+" and memory is not None and len(tokens) >= 4:
            # "-/+ buffers/cache:  used  free": the free column here already counts buffers and cache.
            memory.available_kb, memory.available_estimated = _size(tokens[-1], 1.0), True
        elif label == "swap" and memory is not None:
            memory.swap_total_kb, memory.swap_used_kb = cells.get("total"), cells.get("used")
    capture.memory = memory
    capture.reports = readings
    capture.what = "free" + (f", {readings} readings (the last read)" if readings > 1 else "")
    return capture


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
