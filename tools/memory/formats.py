"""Readers of the CUDA caching allocator's outputs, for analyze_memory.

- Snapshots (`torch.cuda.memory._dump_snapshot`): a pickle of plain containers, loaded with the restricted
  unpickler of tools/core/unpickle.py. Every generation is normalised to one shape:
  2.0 (blocks carry `history: [{addr, real_size, frames}]` and no address), 2.1-2.4 (blocks with `address`,
  `requested_size`, `frames`; segments with `is_expandable`; trace entries with `time_us`), 2.5+ (adds
  `allocator_settings` and `external_annotations`), and the bare segment list of `torch.cuda.memory_snapshot()`.
  The block state written as `active_pending_free` by the C++ side is documented as `active_awaiting_free`: both
  are read.
- `memory_summary()` text and CUDA OOM messages: streamed through the log reader (tools/logs/reader.py); the OOM
  facts come from diagnose_logs' `cuda_oom` rule, so both tools read the message the same way.
- `memory_stats()` dumps: JSON, or the `OrderedDict([...])` / dict repr people paste.

Stack frames become "site" strings (the first user frame, home folders redacted) interned once, so a trace of
millions of entries is held as a few arrays.
"""

from __future__ import annotations

import json
import re
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.core.errors import LimitExceeded, UnreadableInput
from tools.core.files import InputFile, read_regular
from tools.core.frames import Frame, is_library
from tools.core.limits import (
    MEM_FRAMES_READ,
    MEM_MAX_BLOCKS,
    MEM_MAX_FILE_BYTES,
    MEM_MAX_OOM_LINES,
    MEM_MAX_SEGMENTS,
    MEM_MAX_TEXT_BYTES,
    MEM_MAX_TRACE_ENTRIES,
)
from tools.core.ranks import rank_of_line, rank_of_path
from tools.core.unpickle import load_plain_pickle
from tools.logs import ScanStats, compile_pattern, scan_file

__all__ = [
    "ACTIONS", "MemoryInput", "OomLine", "Segment", "Snapshot", "StatsDevice", "Trace", "read_memory_input",
    "redact_home",
]

# Trace actions as small codes (array storage); expandable segments map and unmap instead of malloc and free.
ACTIONS = {"alloc": 1, "free_requested": 2, "free_completed": 3, "segment_alloc": 4, "segment_free": 5,
           "segment_map": 4, "segment_unmap": 5, "oom": 6, "snapshot": 7}
NO_SITE = "(no stack recorded)"
_HOME = re.compile(r"^(?:/home/[^/]+|/Users/[^/]+|/root)(?=/)|^[A-Za-z]:\\Users\\[^\\]+(?=\\)")
_STAT_PAIR = re.compile(r"""['"]((?:[a-z_]+\.)+[a-z_0-9]+|num_alloc_retries|num_ooms|max_split_size)['"]\s*[,:]\s*"""
                        r"""(-?\d+)""")
_SUMMARY_TITLE = re.compile(r"PyTorch CUDA memory summary, device ID (\d+)")
_SUMMARY_OOMS = re.compile(r"CUDA OOMs: (\d+)\s*\|\s*cudaMalloc retries: (\d+)")
_SUMMARY_ROW = re.compile(r"\|\s*(Allocated memory|Active memory|Requested memory|GPU reserved memory|"
                          r"Non-releasable memory|"
                          r"Allocations|Active allocs|GPU reserved segments|Non-releasable allocs)"
                          r"\s*\|([^|]*)\|([^|]*)\|")
_SIZE_CELL = re.compile(r"^\s*(\d+)\s*([KMGTP]?)(i?)B\s*$")
_COUNT_CELL = re.compile(r"^\s*(\d+)\s*([KM]?)\s*$")
_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_TEXT_PATTERN = r"PyTorch CUDA memory summary|\|[^|]*\|[^|]*\||CUDA out of memory|OutOfMemoryError: CUDA"


def redact_home(path: str) -> str:
    """`/home/alice/x.py` -> `~/x.py` (also /Users/<name>, /root and C:\\Users\\<name>): frames name their user."""
    return _HOME.sub("~", path)


class Sites:
    """Stack -> site string ("file:line function" of the first user frame), interned as a small number."""

    def __init__(self) -> None:
        self.names: list[str] = [NO_SITE]
        self._index: dict[str, int] = {NO_SITE: 0}
        self._by_list: dict[int, int] = {}
        self._keep: list[Any] = []  # the frame lists cached by id() stay alive while cached

    def of(self, frames: Any) -> int:
        if not isinstance(frames, list) or not frames:
            return 0
        cached = self._by_list.get(id(frames))
        if cached is not None:
            return cached
        name = _site_name(frames)
        site = self._index.get(name)
        if site is None:
            site = self._index[name] = len(self.names)
            self.names.append(name)
        self._by_list[id(frames)] = site
        self._keep.append(frames)
        return site


def _site_name(raw: list[Any]) -> str:
    frames: list[Frame] = []
    for item in raw[:MEM_FRAMES_READ]:
        if not isinstance(item, dict):
            continue
        file = str(item.get("filename", "") or "")
        line = item.get("line")
        # C++ frames (stacks="all") have no Python file: "??", "" or "Foo.cpp" with line 0; FX code is "<eval...>".
        native = not file.endswith(".py") or file.startswith("<")
        frames.append(Frame(str(item.get("name", "?")), redact_home(file), line if isinstance(line, int) else None,
                            native=native))
    chosen = next((f for f in frames if not is_library(f)), None) or next((f for f in frames if not f.native), None)
    return chosen.display() if chosen else NO_SITE


@dataclass
class Segment:
    device: int
    total_size: int
    is_expandable: bool | None
    pool: tuple[int, int]
    stream: int
    # (address, size, state, site) per block, address order; state: "allocated", "pending_free", "inactive".
    blocks: list[tuple[int, int, str, int]]


@dataclass
class Trace:
    """One device's trace, as parallel arrays (a ring buffer of up to millions of entries)."""

    actions: array[int] = field(default_factory=lambda: array("b"))
    addrs: array[int] = field(default_factory=lambda: array("q"))
    sizes: array[int] = field(default_factory=lambda: array("q"))
    sites: array[int] = field(default_factory=lambda: array("l"))
    device_free: dict[int, int] = field(default_factory=dict)  # entry index -> bytes CUDA reported free (oom)


@dataclass
class Snapshot:
    generation: str
    segments: list[Segment]
    traces: dict[int, Trace]
    settings: dict[str, str]
    expandable_setting: bool | None
    sites: Sites
    notes: list[str]


@dataclass
class StatsDevice:
    device: int
    source: str
    reserved: int | None = None
    allocated: int | None = None
    active: int | None = None
    non_releasable: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    segments: int | None = None
    ooms: int | None = None
    retries: int | None = None


@dataclass
class OomLine:
    where: str
    rank: int | None
    device: int | None
    requested: int
    free: int | None
    total: int | None
    allocated: int | None
    reserved: int | None
    private_pools: bool


@dataclass
class MemoryInput:
    kind: str
    snapshot: Snapshot | None = None
    stats: list[StatsDevice] = field(default_factory=list)
    ooms: list[OomLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_memory_input(path: Path, name: str, deadline: float) -> MemoryInput:
    """The memory data in `path`: a snapshot pickle, memory_stats JSON / repr, or text (summary, OOM messages)."""
    try:
        size = path.stat().st_size
        if size > MEM_MAX_FILE_BYTES:
            raise LimitExceeded(f"{name} is {size // 2**20} MiB, over the {MEM_MAX_FILE_BYTES // 2**20} MiB limit.",
                                "Record the snapshot with a smaller max_entries in _record_memory_history().")
        head = read_regular(path, 64 * 1024, name)
    except OSError as exc:
        raise UnreadableInput(f"cannot read {name}: {exc.strerror or exc}.") from exc
    if not head.strip():
        raise UnreadableInput(f"{name} is empty.", "Pass the snapshot pickle, memory_summary() text, memory_stats() "
                              "JSON or the log that holds the OOM message.")
    if head[:1] == b"\x80":
        data = load_plain_pickle(read_regular(path, MEM_MAX_FILE_BYTES + 1, name), name, deadline)
        return MemoryInput("snapshot", snapshot=_snapshot(data, name, deadline))
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"[") and size <= MEM_MAX_TEXT_BYTES:
        parsed = _json_input(path, name, deadline)
        if parsed is not None:
            return parsed
    if b"OrderedDict(" in head or re.search(rb"['\"]allocated_bytes\.all\.current['\"]", head):
        return _stats_repr(path, name)
    return _text_input(path, name, deadline)


# ------------------------------------------------------------------------------------------- snapshots


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


_STATES = {"active_allocated": "allocated", "active_pending_free": "pending_free",
           "active_awaiting_free": "pending_free", "inactive": "inactive"}


def _snapshot(data: Any, name: str, deadline: float) -> Snapshot:
    raw_segments: Any
    raw_traces: Any
    settings_raw: Any = None
    if isinstance(data, list):
        generation, raw_segments, raw_traces = "segment list (torch.cuda.memory_snapshot())", data, []
    elif isinstance(data, dict) and ("segments" in data or "device_traces" in data):
        raw_segments = data.get("segments") or []
        raw_traces = data.get("device_traces") or []
        settings_raw = data.get("allocator_settings")
        generation = "2.5+" if isinstance(settings_raw, dict) else "2.1-2.4"
    else:
        keys = ", ".join(sorted(map(str, data))[:8]) if isinstance(data, dict) else type(data).__name__
        raise UnreadableInput(f"{name} is a pickle but not an allocator snapshot (found: {keys}).",
                              "Pass the file written by torch.cuda.memory._dump_snapshot().")
    if not isinstance(raw_segments, list) or not isinstance(raw_traces, list):
        raise UnreadableInput(f"{name}: 'segments' / 'device_traces' are not lists.", "The snapshot is damaged.")
    if len(raw_segments) > MEM_MAX_SEGMENTS:
        raise LimitExceeded(f"{name} holds {len(raw_segments)} segments; the limit is {MEM_MAX_SEGMENTS}.",
                            "This is not a snapshot of one process.")
    sites = Sites()
    notes: list[str] = []
    segments: list[Segment] = []
    blocks_read = 0
    legacy = False
    unknown_states = 0
    for raw in raw_segments:
        if not isinstance(raw, dict):
            continue
        blocks: list[tuple[int, int, str, int]] = []
        address = _int(raw.get("address"))
        offset = address
        raw_blocks = raw.get("blocks")
        if not isinstance(raw_blocks, list):
            raw_blocks = []
        blocks_read += len(raw_blocks)
        if blocks_read > MEM_MAX_BLOCKS:
            raise LimitExceeded(f"{name} holds more than {MEM_MAX_BLOCKS} blocks.", "This is not a real snapshot.")
        for block in raw_blocks:
            if not isinstance(block, dict):
                continue
            size = _int(block.get("size"))
            state = _STATES.get(str(block.get("state")))
            if state is None:
                unknown_states += 1
                state = "inactive"
            frames = block.get("frames")
            history = block.get("history")
            if "address" not in block:
                legacy = True
            if frames is None and isinstance(history, list) and history and isinstance(history[0], dict):
                frames = history[0].get("frames")  # 2.0: the block's allocation history, as _memory_viz reads it
            block_address = _int(block.get("address"), offset)
            blocks.append((block_address, size, state, sites.of(frames) if state != "inactive" else 0))
            offset = block_address + size
        total = _int(raw.get("total_size"), sum(b[1] for b in blocks))
        pool = raw.get("segment_pool_id")
        pool_id = (_int(pool[0]), _int(pool[1])) if isinstance(pool, list | tuple) and len(pool) == 2 else (0, 0)
        expandable = raw.get("is_expandable")
        segments.append(Segment(device=_int(raw.get("device")), total_size=total,
                                is_expandable=expandable if isinstance(expandable, bool) else None, pool=pool_id,
                                stream=_int(raw.get("stream")), blocks=blocks))
        if time.monotonic() > deadline:
            raise LimitExceeded("reading the snapshot took longer than the call's limit.", "Raise --timeout.")
    if legacy and isinstance(data, dict):
        generation = "2.0 (block history)"
    if unknown_states:
        notes.append(f"{unknown_states} blocks had an unknown state and were counted as inactive.")
    traces = _traces(raw_traces, sites, name, deadline)
    settings, expandable_setting = _settings(settings_raw)
    return Snapshot(generation=generation, segments=segments, traces=traces, settings=settings,
                    expandable_setting=expandable_setting, sites=sites, notes=notes)


def _traces(raw_traces: list[Any], sites: Sites, name: str, deadline: float) -> dict[int, Trace]:
    traces: dict[int, Trace] = {}
    total = 0
    for device, entries in enumerate(raw_traces):
        if not isinstance(entries, list) or not entries:
            continue
        total += len(entries)
        if total > MEM_MAX_TRACE_ENTRIES:
            raise LimitExceeded(f"{name} holds more than {MEM_MAX_TRACE_ENTRIES} trace entries.",
                                "Record with a smaller max_entries in _record_memory_history().")
        trace = traces[device] = Trace()
        for count, entry in enumerate(entries):
            if type(entry) is not dict:
                continue
            action = ACTIONS.get(entry.get("action"))  # type: ignore[arg-type]
            if action is None:
                continue
            if action == 6:
                trace.device_free[len(trace.actions)] = _int(entry.get("device_free"))
            trace.actions.append(action)
            trace.addrs.append(_int(entry.get("addr")))
            trace.sizes.append(_int(entry.get("size")))
            trace.sites.append(sites.of(entry.get("frames")) if action in (1, 6) else 0)
            if count % 65536 == 0 and time.monotonic() > deadline:
                raise LimitExceeded("reading the trace took longer than the call's limit.", "Raise --timeout.")
    return traces


def _settings(raw: Any) -> tuple[dict[str, str], bool | None]:
    if not isinstance(raw, dict):
        return {}, None
    settings: dict[str, str] = {}
    for key, value in list(raw.items())[:32]:
        if isinstance(value, dict):
            continue  # roundup_power2_divisions: a table per size class, not a setting to quote
        settings[str(key)[:64]] = str(value)[:200]
    expandable = raw.get("expandable_segments")
    return settings, expandable if isinstance(expandable, bool) else None


# ----------------------------------------------------------------------------------------- memory_stats


def _stats_from_flat(values: dict[str, int], device: int, source: str) -> StatsDevice:
    def get(key: str) -> int | None:
        value = values.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return StatsDevice(device=device, source=source, reserved=get("reserved_bytes.all.current"),
                       allocated=get("allocated_bytes.all.current"), active=get("active_bytes.all.current"),
                       non_releasable=get("inactive_split_bytes.all.current"),
                       peak_allocated=get("allocated_bytes.all.peak"), peak_reserved=get("reserved_bytes.all.peak"),
                       segments=get("segment.all.current"), ooms=get("num_ooms"), retries=get("num_alloc_retries"))


def _is_stats(value: Any) -> bool:
    return isinstance(value, dict) and "allocated_bytes.all.current" in value


def _json_input(path: Path, name: str, deadline: float) -> MemoryInput | None:
    try:
        data = json.loads(read_regular(path, MEM_MAX_FILE_BYTES + 1, name))
    except (ValueError, RecursionError):
        return None  # not JSON after all: read as text
    if _is_stats(data):
        return MemoryInput("memory_stats", stats=[_stats_from_flat(data, 0, "memory_stats")])
    if isinstance(data, dict) and data and all(_is_stats(v) for v in data.values()):
        devices = []
        for index, (key, value) in enumerate(data.items()):
            label = str(key).removeprefix("cuda:")
            devices.append(_stats_from_flat(value, int(label) if label.isdigit() else index, "memory_stats"))
        return MemoryInput("memory_stats", stats=devices)
    if isinstance(data, list) and data and all(_is_stats(v) for v in data):
        return MemoryInput("memory_stats", stats=[_stats_from_flat(v, i, "memory_stats") for i, v in enumerate(data)])
    if isinstance(data, dict) and ("segments" in data or "device_traces" in data) or (
            isinstance(data, list) and data and all(isinstance(v, dict) and "total_size" in v for v in data)):
        return MemoryInput("snapshot", snapshot=_snapshot(data, name, deadline))
    raise UnreadableInput(f"{name} is JSON but neither memory_stats() nor an allocator snapshot.",
                          "Dump torch.cuda.memory_stats() with json.dump, or the snapshot with _dump_snapshot().")


def _stats_repr(path: Path, name: str) -> MemoryInput:
    if path.stat().st_size > MEM_MAX_TEXT_BYTES:
        raise LimitExceeded(f"{name} is over {MEM_MAX_TEXT_BYTES // 2**20} MiB: not a memory_stats() dump.")
    text = read_regular(path, MEM_MAX_TEXT_BYTES + 1, name).decode("utf-8", "replace")
    values = {key: int(value) for key, value in _STAT_PAIR.findall(text)}
    if "allocated_bytes.all.current" not in values:
        raise UnreadableInput(f"{name} looks like a memory_stats() dump but has no 'allocated_bytes.all.current'.",
                              "Paste the whole dict, or dump it with json.dump(torch.cuda.memory_stats(), f).")
    return MemoryInput("memory_stats", stats=[_stats_from_flat(values, 0, "memory_stats")])


# -------------------------------------------------------------------------- memory_summary text, OOM logs


def _size_cell(text: str) -> int | None:
    match = _SIZE_CELL.match(text)
    return int(match.group(1)) * 1024 ** _UNITS[match.group(2)] if match else None


def _count_cell(text: str) -> int | None:
    match = _COUNT_CELL.match(text)
    return int(match.group(1)) * 1000 ** {"": 0, "K": 1, "M": 2}[match.group(2)] if match else None


def _summary_line(line: str, current: StatsDevice | None, summaries: list[StatsDevice]) -> StatsDevice | None:
    title = _SUMMARY_TITLE.search(line)
    if title:
        current = StatsDevice(device=int(title.group(1)), source="memory_summary")
        summaries.append(current)
        return current
    if current is None:
        return None
    ooms = _SUMMARY_OOMS.search(line)
    if ooms:
        current.ooms, current.retries = int(ooms.group(1)), int(ooms.group(2))
        return current
    row = _SUMMARY_ROW.search(line)
    if row:
        metric, cur, peak = row.group(1), row.group(2), row.group(3)
        if metric == "Allocated memory":
            current.allocated, current.peak_allocated = _size_cell(cur), _size_cell(peak)
        elif metric == "Active memory":
            current.active = _size_cell(cur)
        elif metric == "GPU reserved memory":
            current.reserved, current.peak_reserved = _size_cell(cur), _size_cell(peak)
        elif metric == "Non-releasable memory":
            current.non_releasable = _size_cell(cur)
        elif metric == "GPU reserved segments":
            current.segments = _count_cell(cur)
    return current


def _oom_line(text: bytes, where: str, rank: int | None) -> OomLine | None:
    from tools.logs import extract_facts, load_rules  # the one reader of the OOM message

    rule = next(r for r in load_rules()[0] if r.id == "cuda_oom")
    if rule.match.search(text) is None:
        return None
    facts = extract_facts(rule, text)

    def number(key: str) -> int | None:
        value = facts.get(key)
        return value if isinstance(value, int) else None

    requested = number("requested_bytes")
    if requested is None:
        return None
    allocated, reserved = number("allocated_bytes"), number("reserved_bytes")
    unallocated = number("reserved_unallocated_bytes")
    if reserved is None and allocated is not None and unallocated is not None:
        reserved = allocated + unallocated
    fact_rank = facts.get("rank")
    return OomLine(where=where, rank=fact_rank if isinstance(fact_rank, int) else rank, device=number("gpu"),
                   requested=requested, free=number("free_bytes"), total=number("total_bytes"), allocated=allocated,
                   reserved=reserved, private_pools=b"private pools" in text)


def _rank(line: bytes, file: InputFile) -> int | None:
    rank = rank_of_line(line)
    return rank if rank is not None else file.rank


def _text_input(path: Path, name: str, deadline: float) -> MemoryInput:
    matcher = compile_pattern(_TEXT_PATTERN)
    file = InputFile(path, name, rank_of_path(name))
    stats = ScanStats()
    summaries: list[StatsDevice] = []
    ooms: list[OomLine] = []
    current: StatsDevice | None = None
    last_line = 0
    for match in scan_file(file, matcher, context=0, deadline=deadline, stats=stats):
        text = match.text.decode("utf-8", "replace")
        if current is not None and match.number != last_line + 1:
            current = None  # a summary is one run of consecutive table lines
        current = _summary_line(text, current, summaries)
        last_line = match.number
        if current is None and ("out of memory" in text.lower() or "OutOfMemoryError" in text):
            oom = _oom_line(match.text, f"{name}:{match.number}", _rank(match.text, file))
            if oom is not None and len(ooms) < MEM_MAX_OOM_LINES:
                ooms.append(oom)
    if stats.binary:
        raise UnreadableInput(f"{name} is binary but not a pickle.",
                              "Pass the snapshot written by torch.cuda.memory._dump_snapshot() as it is.")
    summaries = [s for s in summaries if s.allocated is not None or s.reserved is not None]
    if not summaries and not ooms:
        raise UnreadableInput(f"{name} holds no allocator snapshot, memory_summary() table, memory_stats() dump or "
                              "CUDA out-of-memory message.",
                              "Pass torch.cuda.memory._dump_snapshot()'s pickle, print(torch.cuda.memory_summary()) "
                              "output, json.dump(torch.cuda.memory_stats()) or the log with the OOM.")
    notes: list[str] = []
    by_device: dict[int, StatsDevice] = {}
    for summary in summaries:
        by_device[summary.device] = summary  # the last summary of each device
    if len(summaries) > len(by_device):
        notes.append(f"{len(summaries)} memory summaries in the file; the last one of each device is used.")
    kind = "memory_summary" if by_device and not ooms else "oom_log" if not by_device else "memory_summary + oom_log"
    return MemoryInput(kind, stats=sorted(by_device.values(), key=lambda s: s.device), ooms=ooms, notes=notes)
