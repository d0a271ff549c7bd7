"""analyze_memory: why a job ran out of GPU memory, from what the CUDA caching allocator recorded.

Inputs (tools/memory/formats.py reads them): an allocator snapshot (`torch.cuda.memory._dump_snapshot`, every
generation, loaded with the restricted unpickler), `memory_summary()` text, a `memory_stats()` dump, or logs with
CUDA OOM messages.

Per device it gives reserved, allocated, active, inactive and non-releasable bytes, the largest free block, the
segment count and whether segments are expandable; the allocator settings; the top live allocation sites (the
first user frame, taken from the trace when blocks carry no frames); the peak from replaying the trace; and the
OOM event (requested, free, live at the OOM, the site).

A snapshot is usually dumped in an `except` handler, after the OOM unwound and freed the step's tensors: its
segments then show a large reserved and little allocated, which reads as fragmentation. So the state at the OOM
is always replayed from the trace (live bytes = the bytes allocated before the trace began + the trace's allocs
- its completed frees up to the `oom` entry), never read from the segments. Verdict:
- growth: the troughs of the live bytes rise cycle after cycle (tensors kept alive);
- fragmentation: the cache held at least the request free at the OOM, but not in one piece (or, without an OOM,
  a large non-releasable share);
- transient_peak: the OOM step needed much more than the earlier steps' peaks;
- capacity: the memory was really in use; none otherwise.
SOP: oom.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass
from statistics import median
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from tools.core.context import ToolContext
from tools.core.files import size_text
from tools.core.limits import MEM_DEFAULT_SITES, MEM_MAX_SITES
from tools.core.models import Coverage, InputModel, NextStep, PathArg, Severity, Table, ToolResult, cell
from tools.core.thresholds import (
    MEM_FRAGMENTED_MIN_BYTES,
    MEM_FRAGMENTED_PCT,
    MEM_GROWTH_PCT,
    MEM_TRANSIENT_RATIO,
    MEM_UNBALANCED_MIN_BYTES,
    MEM_UNBALANCED_RATIO,
)
from tools.memory.formats import (
    NO_SITE,
    MemoryInput,
    OomLine,
    Segment,
    Snapshot,
    StatsDevice,
    Trace,
    read_memory_input,
)

__all__ = ["AnalyzeMemoryInput", "AnalyzeMemoryResult", "analyze_memory"]

Verdict = Literal["capacity", "fragmentation", "transient_peak", "growth", "none"]
# What analyze_memory reads, for an input it does not understand.
FORMATS_KNOWN = ("torch.cuda.memory._dump_snapshot() pickle (any torch version) or memory_snapshot() list",
                 "print(torch.cuda.memory_summary()) text", "torch.cuda.memory_stats() dump (JSON or its printed dict)",
                 "a log with CUDA out-of-memory messages")
BEFORE_TRACE = "(allocated before the trace began: weights, optimizer state)"
_ALLOC, _FREE, _SEG_ALLOC, _SEG_FREE, _OOM = 1, 3, 4, 5, 6


class AnalyzeMemoryInput(InputModel):
    path: PathArg = Field(description="One file inside the roots: a torch.cuda.memory._dump_snapshot() pickle (any "
                          "torch version, or the memory_snapshot() segment list), memory_summary() text, a "
                          "memory_stats() dump (JSON or its printed dict), or a log holding CUDA OOM messages.")
    top_sites: int = Field(default=MEM_DEFAULT_SITES, ge=1, le=MEM_MAX_SITES,
                           description="How many allocation sites to list.")

    cli_positional = "path"


class MemoryDevice(BaseModel):
    device: int
    reserved_bytes: int | None = Field(description="Bytes the allocator holds from CUDA (its segments).")
    allocated_bytes: int | None = Field(description="Bytes in live tensors.")
    active_bytes: int | None = Field(default=None, description="Allocated plus freed-but-awaiting-another-stream.")
    inactive_bytes: int | None = Field(description="Reserved but not active: cached free memory.")
    non_releasable_bytes: int | None = Field(description="Inactive bytes inside segments that still hold a live "
                                             "block: empty_cache() cannot return them (fragmentation).")
    largest_free_block_bytes: int | None = Field(description="The largest cached free block (None when unknown).")
    peak_live_bytes: int | None = Field(description="The peak of live bytes (trace replay, or the allocator's peak).")
    segments: int | None = None
    expandable: bool | None = Field(default=None, description="Whether its segments are expandable.")
    source: str = Field(description="snapshot, memory_summary, memory_stats or oom message (state at that moment).")


class MemoryOom(BaseModel):
    device: int | None
    requested_bytes: int
    free_bytes: int | None = Field(description="Bytes CUDA still reported free on the device.")
    live_bytes: int | None = Field(description="Live (allocated) bytes at the OOM; replayed from a snapshot's trace.")
    reserved_bytes: int | None = Field(default=None, description="Reserved bytes at the OOM.")
    site: str | None = Field(description="The user frame that made the failed request (snapshot traces).")
    source: str = Field(description="'trace replay' or the log's file:line.")


class MemorySite(BaseModel):
    site: str = Field(description="The first user frame ('file:line function'), home folders shown as ~.")
    bytes: int
    blocks: int


class AnalyzeMemoryResult(ToolResult):
    format: str = Field(description="What was read (snapshot generation, memory_summary, memory_stats, oom_log).")
    verdict: Verdict
    evidence: list[str]
    fix: list[str]
    devices: list[MemoryDevice]
    oom: MemoryOom | None
    top_sites: list[MemorySite] = Field(description="Live bytes by allocation site at top_sites_at.")
    top_sites_at: str = Field(description="The moment top_sites describe: the OOM (replayed), or the snapshot.")
    peak_sites: list[MemorySite] = Field(description="Live bytes by site at the replayed peak.")
    allocator_settings: dict[str, str] = Field(description="The snapshot's allocator settings (2.5+).")

    narrow_hint = "lower top_sites"

    def tables(self) -> list[Table]:
        return [
            Table(f"Verdict: {self.verdict}", ["", "what"],
                  [["evidence", e] for e in self.evidence] + [["fix", f] for f in self.fix]),
            Table("OOM", ["device", "requested", "free on device", "live at OOM", "reserved at OOM", "site", "from"],
                  [[cell(self.oom.device), _size(self.oom.requested_bytes), _size(self.oom.free_bytes),
                    _size(self.oom.live_bytes), _size(self.oom.reserved_bytes), self.oom.site or "-",
                    self.oom.source]] if self.oom else []),
            Table("Devices", ["device", "reserved", "allocated", "inactive", "non-releasable", "largest free block",
                              "peak live", "segments", "expandable", "state at"],
                  [[str(d.device), _size(d.reserved_bytes), _size(d.allocated_bytes), _size(d.inactive_bytes),
                    _size(d.non_releasable_bytes), _size(d.largest_free_block_bytes), _size(d.peak_live_bytes),
                    cell(d.segments), "-" if d.expandable is None else str(d.expandable).lower(), d.source]
                   for d in self.devices], "devices"),
            Table(f"Top allocation sites at {self.top_sites_at}", ["site", "bytes", "blocks"],
                  [[s.site, _size(s.bytes), str(s.blocks)] for s in self.top_sites], "top_sites"),
            Table("Sites at the peak", ["site", "bytes", "blocks"],
                  [[s.site, _size(s.bytes), str(s.blocks)] for s in self.peak_sites], "peak_sites"),
            Table("Allocator settings", ["setting", "value"],
                  [[k, v or "(empty)"] for k, v in self.allocator_settings.items()]),
        ]


def _size(value: int | None) -> str:
    return "-" if value is None else size_text(value)


# ----------------------------------------------------------------------------------------------- replay


@dataclass
class _Replay:
    device: int
    baseline: int
    peak: int
    peak_index: int
    oom_index: int | None
    oom_count: int
    live_at_oom: int | None
    reserved_at_oom: int | None
    highs: list[int]
    troughs: list[int]


def _swings(live: list[int], end: int) -> tuple[list[int], list[int]]:
    """The highs and the troughs after them of the swings of the live bytes by at least a quarter of their range:
    one swing per step of a training loop (activations built, then freed)."""
    if end <= 1:
        return [], []
    window = live[:end]
    amplitude = max(1, (max(window) - min(window)) // 4)
    highs: list[int] = []
    troughs: list[int] = []
    high = low = window[0]
    falling = False
    for value in window:
        if not falling:
            if value > high:
                high = value
            elif high - value >= amplitude:
                falling, low = True, value
        elif value < low:
            low = value
        elif value - low >= amplitude:
            highs.append(high)
            troughs.append(low)
            falling, high = False, value
    if falling:
        highs.append(high)
        troughs.append(low)
    return highs, troughs


def _replay(device: int, trace: Trace, allocated_now: int, reserved_now: int, deadline: float) -> tuple[_Replay,
                                                                                                         list[int]]:
    net = seg_net = 0
    for action, size in zip(trace.actions, trace.sizes, strict=True):
        if action == _ALLOC:
            net += size
        elif action == _FREE:
            net -= size
        elif action == _SEG_ALLOC:
            seg_net += size
        elif action == _SEG_FREE:
            seg_net -= size
    # What the ring buffer never saw allocated (weights, optimizer state) is still counted: the snapshot's
    # allocated bytes minus what the trace added.
    baseline = max(0, allocated_now - net)
    live_now = baseline
    reserved = max(0, reserved_now - seg_net)
    peak, peak_index = baseline, -1
    oom_index: int | None = None
    oom_count = 0
    live_at_oom = reserved_at_oom = None
    live: list[int] = []
    for index, (action, size) in enumerate(zip(trace.actions, trace.sizes, strict=True)):
        if action == _ALLOC:
            live_now += size
        elif action == _FREE:
            live_now -= size
        elif action == _SEG_ALLOC:
            reserved += size
        elif action == _SEG_FREE:
            reserved -= size
        elif action == _OOM:
            oom_index, live_at_oom, reserved_at_oom = index, live_now, reserved
            oom_count += 1
        live.append(live_now)
        if live_now > peak:
            peak, peak_index = live_now, index
        if index % 262144 == 0 and time.monotonic() > deadline:
            from tools.core.errors import LimitExceeded

            raise LimitExceeded("replaying the trace took longer than the call's limit.", "Raise --timeout.")
    highs, troughs = _swings(live, oom_index if oom_index is not None else len(live))
    return _Replay(device, baseline, peak, peak_index, oom_index, oom_count, live_at_oom, reserved_at_oom, highs,
                   troughs), live


def _sites_at(trace: Trace, until: int, names: list[str], live_total: int | None, top: int) -> list[MemorySite]:
    """Live bytes by site after entry `until` (the untraced rest as one row when live_total is given)."""
    live: dict[int, tuple[int, int]] = {}
    for action, addr, size, site in itertools.islice(zip(trace.actions, trace.addrs, trace.sizes, trace.sites,
                                                         strict=True), until + 1):
        if action == _ALLOC:
            live[addr] = (size, site)
        elif action == _FREE:
            live.pop(addr, None)
    by_site: Counter[int] = Counter()
    blocks: Counter[int] = Counter()
    for size, site in live.values():
        by_site[site] += size
        blocks[site] += 1
    rows = [MemorySite(site=names[s], bytes=b, blocks=blocks[s]) for s, b in by_site.most_common(top)]
    if live_total is not None:
        untraced = live_total - sum(by_site.values())
        if untraced > 0:
            rows.append(MemorySite(site=BEFORE_TRACE, bytes=untraced, blocks=0))
            rows.sort(key=lambda r: -r.bytes)
    return rows[:top]


def _last_sites(trace: Trace | None) -> dict[int, int]:
    """Address -> site of the last traced alloc there: the stack of a block dumped without frames."""
    if trace is None:
        return {}
    return {addr: site for action, addr, site in zip(trace.actions, trace.addrs, trace.sites, strict=True)
            if action == _ALLOC}


# ------------------------------------------------------------------------------------------- snapshot


@dataclass
class _SegmentState:
    reserved: int = 0
    allocated: int = 0
    active: int = 0
    non_releasable: int = 0
    largest_free: int = 0
    segments: int = 0
    expandable: bool | None = None


def _segment_state(segments: list[Segment]) -> _SegmentState:
    state = _SegmentState()
    for segment in segments:
        state.segments += 1
        state.reserved += segment.total_size
        allocated = sum(b[1] for b in segment.blocks if b[2] == "allocated")
        active = allocated + sum(b[1] for b in segment.blocks if b[2] == "pending_free")
        free = [b[1] for b in segment.blocks if b[2] == "inactive"]
        state.allocated += allocated
        state.active += active
        if active:
            state.non_releasable += sum(free)
        state.largest_free = max([state.largest_free, *free])
        if segment.is_expandable is not None:
            state.expandable = bool(state.expandable) or segment.is_expandable
    return state


def _snapshot_sites(segments: list[Segment], trace: Trace | None, names: list[str], top: int) -> list[MemorySite]:
    fallback = _last_sites(trace)
    by_site: Counter[int] = Counter()
    blocks: Counter[int] = Counter()
    for segment in segments:
        for address, size, state, site in segment.blocks:
            if state != "allocated":
                continue
            chosen = site or fallback.get(address, 0)
            by_site[chosen] += size
            blocks[chosen] += 1
    return [MemorySite(site=names[s], bytes=b, blocks=blocks[s]) for s, b in by_site.most_common(top)]


@dataclass
class _Judgement:
    verdict: Verdict
    evidence: list[str]
    fix: list[str]


def _fragmentation_fix(expandable: bool | None) -> list[str]:
    if expandable:
        return ["expandable_segments is already on: set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:<a bit above the "
                "largest request in MiB>,garbage_collection_threshold:0.8",
                "allocate the large long-lived buffers first and keep tensor shapes stable between steps"]
    return ["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow in place instead of splitting)",
            "or max_split_size_mb:<a bit above the largest request in MiB> to stop large blocks being split"]


def _capacity_fix(site: str | None) -> list[str]:
    fixes = ["smaller batch or sequence length (gradient accumulation keeps the effective batch)",
             "activation checkpointing (torch.utils.checkpoint) on the largest blocks",
             "shard parameters, gradients and optimizer state (FSDP / ZeRO) or use mixed precision"]
    if site and site not in (NO_SITE, BEFORE_TRACE):
        fixes.append(f"start with the largest site: {site}")
    return fixes


def _judge_oom(live: int, requested: int, reserved: int | None, free: int | None, replay: _Replay | None,
               expandable: bool | None, site: str | None, device: int | None) -> _Judgement:
    cached_free = None if reserved is None else max(0, reserved - live)
    where = f"device {device}" if device is not None else "the device"
    head = (f"At the OOM on {where}: {_size(live)} live, {_size(requested)} requested, {_size(free)} free on the "
            f"device, {_size(cached_free)} cached free.")
    if replay is not None and _growing(replay):
        return _Judgement("growth", [head, _growth_text(replay)], _growth_fix(site))
    if cached_free is not None and cached_free >= requested:
        return _Judgement("fragmentation", [head, f"The cache held {_size(cached_free)} free, more than the request, "
                                            "but in pieces smaller than it."], _fragmentation_fix(expandable))
    demand = live + requested
    prior = max(replay.highs, default=0) if replay else 0
    if replay is not None and prior > replay.baseline and demand >= MEM_TRANSIENT_RATIO * prior:
        return _Judgement("transient_peak", [head, f"That step needed {_size(demand)}, {demand / prior:.1f}x the "
                                             f"{_size(prior)} peak of the earlier steps."],
                          [f"bound that step ({site or 'the OOM site'}): chunk it, no_grad for eval, free tensors "
                           "before saving; or pad/bucket inputs so no step is much larger", *_capacity_fix(None)[:1]])
    text = [head, "The memory was really in use: the cache had too little free to serve the request."]
    return _Judgement("capacity", text, _capacity_fix(site))


def _growing(replay: _Replay) -> bool:
    troughs = replay.troughs
    if len(troughs) < 3 or replay.peak <= 0:
        return False
    noise = replay.peak // 100
    rising = all(b >= a - noise for a, b in itertools.pairwise(troughs))
    return rising and troughs[-1] - troughs[0] >= MEM_GROWTH_PCT / 100 * replay.peak


def _growth_text(replay: _Replay) -> str:
    return (f"Live bytes after each of {len(replay.troughs)} steps rose from {_size(replay.troughs[0])} to "
            f"{_size(replay.troughs[-1])}: something keeps tensors alive across steps.")


def _growth_fix(site: str | None) -> list[str]:
    return ["keep loss.item() / tensor.detach() values, not tensors with their graph, in lists and metrics",
            "clear caches and hooks that hold activations; check the site that grows" + (f": {site}" if site else "")]


def _analyse_snapshot(snapshot: Snapshot, top: int, deadline: float) -> AnalyzeMemoryResult:
    names = snapshot.sites.names
    devices_ids = sorted({s.device for s in snapshot.segments} | set(snapshot.traces))
    rows: list[MemoryDevice] = []
    replays: dict[int, _Replay] = {}
    lives: dict[int, list[int]] = {}
    states: dict[int, _SegmentState] = {}
    for device in devices_ids:
        state = states[device] = _segment_state([s for s in snapshot.segments if s.device == device])
        trace = snapshot.traces.get(device)
        if trace is not None and len(trace.actions):
            replays[device], lives[device] = _replay(device, trace, state.allocated, state.reserved, deadline)
        has_segments = state.segments > 0
        replay = replays.get(device)
        rows.append(MemoryDevice(
            device=device, reserved_bytes=state.reserved if has_segments else None,
            allocated_bytes=state.allocated if has_segments else None,
            active_bytes=state.active if has_segments else None,
            inactive_bytes=state.reserved - state.active if has_segments else None,
            non_releasable_bytes=state.non_releasable if has_segments else None,
            largest_free_block_bytes=state.largest_free if has_segments else None,
            peak_live_bytes=replay.peak if replay else None, segments=state.segments if has_segments else None,
            expandable=state.expandable if state.expandable is not None else snapshot.expandable_setting,
            source="snapshot"))
    notes = list(snapshot.notes)
    oom_device = next((d for d, r in replays.items() if r.oom_index is not None), None)
    oom: MemoryOom | None = None
    peak_device = max(replays, key=lambda d: replays[d].peak, default=None)
    peak_sites: list[MemorySite] = []
    if peak_device is not None and replays[peak_device].peak_index >= 0:
        peak = replays[peak_device]
        peak_sites = _sites_at(snapshot.traces[peak_device], peak.peak_index, names, peak.peak, top)
    expandable = snapshot.expandable_setting if snapshot.expandable_setting is not None else next(
        (r.expandable for r in rows if r.expandable is not None), None)
    if oom_device is not None:
        replay = replays[oom_device]
        trace = snapshot.traces[oom_device]
        assert replay.oom_index is not None and replay.live_at_oom is not None
        index = replay.oom_index
        requested = trace.sizes[index]
        site = names[trace.sites[index]]
        oom = MemoryOom(device=oom_device, requested_bytes=requested, free_bytes=trace.device_free.get(index),
                        live_bytes=replay.live_at_oom, reserved_bytes=replay.reserved_at_oom,
                        site=None if site == NO_SITE else site, source="trace replay")
        top_sites = _sites_at(trace, index, names, replay.live_at_oom, top)
        top_at = "the OOM (replayed)"
        biggest = next((s.site for s in top_sites if s.site != BEFORE_TRACE), None)
        judgement = _judge_oom(replay.live_at_oom, requested, replay.reserved_at_oom, oom.free_bytes, replay,
                               expandable, biggest or oom.site, oom_device)
        after = index < len(trace.actions) - 1
        state = states[oom_device]
        if after and state.segments:
            notes.append(f"The snapshot was taken after the OOM: its segments (reserved {_size(state.reserved)}, "
                         f"allocated {_size(state.allocated)}) are not the state at the OOM, which was replayed.")
        if replay.oom_count > 1:
            notes.append(f"{replay.oom_count} OOM events in the trace of device {oom_device}; the last one is shown.")
    else:
        top_sites = []
        for device in devices_ids:
            top_sites += _snapshot_sites([s for s in snapshot.segments if s.device == device],
                                         snapshot.traces.get(device), names, top)
        top_sites = sorted(top_sites, key=lambda s: -s.bytes)[:top]
        top_at = "the snapshot"
        judgement = _judge_no_oom(rows, replays, expandable, top_sites)
    unbalanced = _unbalanced(rows)
    if unbalanced:
        judgement.evidence.append(unbalanced)
    if not snapshot.traces:
        notes.append("No trace in the snapshot (recorded without _record_memory_history()): no peak, no OOM replay.")
    severity = Severity.crit if oom else Severity.ok if judgement.verdict == "none" else Severity.warn
    return _result(f"snapshot {snapshot.generation}", severity, judgement, rows, oom, top_sites, top_at, peak_sites,
                   snapshot.settings, notes)


def _judge_no_oom(rows: list[MemoryDevice], replays: dict[int, _Replay], expandable: bool | None,
                  sites: list[MemorySite]) -> _Judgement:
    site = sites[0].site if sites else None
    growing = next((r for r in replays.values() if _growing(r)), None)
    if growing is not None:
        return _Judgement("growth", [f"Device {growing.device}: {_growth_text(growing)}"], _growth_fix(site))
    for row in rows:
        if _fragmented(row.reserved_bytes, row.non_releasable_bytes):
            assert row.reserved_bytes is not None and row.non_releasable_bytes is not None
            return _Judgement("fragmentation", [
                f"Device {row.device}: {_size(row.non_releasable_bytes)} of {_size(row.reserved_bytes)} reserved is "
                f"free but inside segments that still hold live blocks; the largest free block is "
                f"{_size(row.largest_free_block_bytes)}."], _fragmentation_fix(expandable))
    for replay in replays.values():
        others = replay.highs[:-1] if replay.peak_index >= 0 else []
        if len(others) >= 2 and replay.peak >= MEM_TRANSIENT_RATIO * median(others):
            return _Judgement("transient_peak", [
                f"Device {replay.device}: the peak of {_size(replay.peak)} is {replay.peak / median(others):.1f}x the "
                f"usual step peak of {_size(int(median(others)))}."],
                ["bound the step that makes the peak (see the sites at the peak): chunk it, no_grad for eval"])
    peak = max((r.peak_live_bytes or 0 for r in rows), default=0)
    return _Judgement("none", [f"No OOM recorded; peak live {_size(peak or None)}; no sign of fragmentation or "
                               "growth."], ["nothing to change for memory; if an OOM happens, dump the snapshot in the "
                                            "except handler with the trace recording"])


def _fragmented(reserved: int | None, free_in_use: int | None) -> bool:
    return (reserved is not None and free_in_use is not None and free_in_use >= MEM_FRAGMENTED_MIN_BYTES
            and free_in_use >= MEM_FRAGMENTED_PCT / 100 * reserved)


def _unbalanced(rows: list[MemoryDevice]) -> str | None:
    values = {r.device: v for r in rows if (v := r.peak_live_bytes or r.reserved_bytes or r.allocated_bytes)}
    if len(values) < 2:
        return None
    high = max(values, key=lambda d: values[d])
    low = min(values, key=lambda d: values[d])
    if values[high] >= MEM_UNBALANCED_RATIO * values[low] and values[high] - values[low] >= MEM_UNBALANCED_MIN_BYTES:
        return (f"Devices are unbalanced: device {high} holds {_size(values[high])}, device {low} "
                f"{_size(values[low])}; spread the model or data more evenly (pipeline stages, tensor-parallel split).")
    return None


# ----------------------------------------------------------------------------------- summary, stats, logs


def _stats_row(stats: StatsDevice) -> MemoryDevice:
    inactive = None if stats.reserved is None or stats.active is None and stats.allocated is None else \
        stats.reserved - (stats.active if stats.active is not None else stats.allocated or 0)
    return MemoryDevice(device=stats.device, reserved_bytes=stats.reserved, allocated_bytes=stats.allocated,
                        active_bytes=stats.active, inactive_bytes=inactive, non_releasable_bytes=stats.non_releasable,
                        largest_free_block_bytes=None, peak_live_bytes=stats.peak_allocated, segments=stats.segments,
                        source=stats.source)


def _oom_row(line: OomLine) -> MemoryDevice:
    inactive = None if line.reserved is None or line.allocated is None else line.reserved - line.allocated
    return MemoryDevice(device=line.device if line.device is not None else line.rank or 0,
                        reserved_bytes=line.reserved, allocated_bytes=line.allocated, inactive_bytes=inactive,
                        non_releasable_bytes=None, largest_free_block_bytes=None, peak_live_bytes=None,
                        source=f"oom message ({line.where})")


def _analyse_text(data: MemoryInput, top: int) -> AnalyzeMemoryResult:
    del top  # no stacks in text inputs
    rows = [_stats_row(s) for s in data.stats]
    notes = list(data.notes)
    oom: MemoryOom | None = None
    if data.ooms:
        line = data.ooms[-1]
        if not rows:
            last: dict[int, OomLine] = {}
            for each in data.ooms:
                last[each.device if each.device is not None else each.rank or 0] = each
            rows = [_oom_row(each) for _, each in sorted(last.items())]
        oom = MemoryOom(device=line.device, requested_bytes=line.requested, free_bytes=line.free,
                        live_bytes=line.allocated, reserved_bytes=line.reserved, site=None, source=line.where)
        judgement = _judge_oom(line.allocated or 0, line.requested, line.reserved, line.free, None, None, None,
                               line.device)
        if line.total is not None and line.free is not None and line.reserved is not None:
            other = line.total - line.free - line.reserved
            if other >= 2**30:
                judgement.evidence.append(f"{_size(other)} of the {_size(line.total)} GPU is held outside this "
                                          "process's PyTorch cache (other processes, NCCL, CUDA context).")
        if line.free is not None and line.free >= line.requested and judgement.verdict == "capacity":
            judgement.evidence.append(f"CUDA still reported {_size(line.free)} free, more than the request: a "
                                      "memory-fraction limit, a MIG slice or another process took it at that moment.")
        if len(data.ooms) > 1:
            notes.append(f"{len(data.ooms)} OOM messages; the last ({line.where}) is shown.")
        if line.private_pools:
            notes.append("Part of the memory is in private pools (CUDA graphs): it is not reusable by other code.")
        notes.append("An OOM message has no stack of the allocation: record a snapshot for the sites "
                     "(torch.cuda.memory._record_memory_history(), then _dump_snapshot() in the except handler).")
    else:
        judgement = _judge_stats(data.stats)
    unbalanced = _unbalanced(rows)
    if unbalanced:
        judgement.evidence.append(unbalanced)
    if data.kind.startswith("memory_summary"):
        notes.append("memory_summary() rounds each value down to the unit it prints.")
    ooms_in_stats = any((s.ooms or 0) > 0 for s in data.stats)
    severity = Severity.crit if oom or ooms_in_stats else Severity.ok if judgement.verdict == "none" else Severity.warn
    return _result(data.kind, severity, judgement, rows, oom, [], "-", [], {}, notes)


def _judge_stats(stats: list[StatsDevice]) -> _Judgement:
    for device in stats:
        free_in_use = device.non_releasable
        if free_in_use is None and device.reserved is not None and device.allocated is not None:
            free_in_use = device.reserved - device.allocated
        retries = f", {device.retries} cudaMalloc retries" if device.retries else ""
        if _fragmented(device.reserved, free_in_use) or (device.retries and device.reserved is not None and
                                                          device.allocated is not None and
                                                          device.reserved - device.allocated
                                                          >= MEM_FRAGMENTED_MIN_BYTES):
            return _Judgement("fragmentation", [
                f"Device {device.device}: reserved {_size(device.reserved)} but allocated {_size(device.allocated)}; "
                f"non-releasable {_size(device.non_releasable)}{retries}: the cache is split into pieces."],
                _fragmentation_fix(None))
    ooms = [d for d in stats if (d.ooms or 0) > 0]
    if ooms:
        device = ooms[0]
        return _Judgement("capacity", [
            f"Device {device.device}: {device.ooms} OOMs with allocated {_size(device.allocated)} close to reserved "
            f"{_size(device.reserved)} (peak {_size(device.peak_allocated)}): the memory was really in use."],
            _capacity_fix(None))
    return _Judgement("none", ["No OOM counted and the cache is not fragmented."],
                      ["nothing to change for memory"])


def _result(fmt: str, severity: Severity, judgement: _Judgement, rows: list[MemoryDevice], oom: MemoryOom | None,
            top_sites: list[MemorySite], top_at: str, peak_sites: list[MemorySite], settings: dict[str, str],
            notes: list[str]) -> AnalyzeMemoryResult:
    verdict = judgement.verdict
    if verdict == "none":
        conclusion = [judgement.evidence[0]]
    else:
        conclusion = [f"Verdict: {verdict.replace('_', ' ')}. {judgement.evidence[0]}",
                      f"Fix: {judgement.fix[0]}."]
        if len(judgement.evidence) > 1:
            conclusion.append(judgement.evidence[1])
    return AnalyzeMemoryResult(
        severity=severity, conclusion=conclusion[:3], next_steps=_next_steps(verdict), format=fmt, verdict=verdict,
        evidence=judgement.evidence, fix=judgement.fix, devices=rows, oom=oom, top_sites=top_sites,
        top_sites_at=top_at, peak_sites=peak_sites, allocator_settings=settings, notes=notes[:20])


def _next_steps(verdict: Verdict) -> list[NextStep]:
    steps = [NextStep.from_sop("oom", done={"analyze_memory", "diagnose_logs"})]
    if verdict != "none":
        steps.append(NextStep(branch="oom", action="Read sop://oom: the triage table row for " + verdict,
                              why="The fix and how to verify it (no OOM at the same batch, peak below the total)."))
    return steps


async def analyze_memory(params: AnalyzeMemoryInput, ctx: ToolContext) -> AnalyzeMemoryResult:
    """Why a job ran out of GPU memory, from what PyTorch's CUDA caching allocator recorded: a snapshot pickle
    (torch.cuda.memory._dump_snapshot, every torch version; loaded with a restricted unpickler), memory_summary()
    text, a memory_stats() dump, or a log with "CUDA out of memory" messages. Per device: reserved, allocated,
    inactive, non-releasable, largest free block, peak (trace replay); the OOM (requested, free, live at the OOM,
    the site; replayed from the trace even when the snapshot was dumped after it); the top allocation sites; the
    allocator settings. Verdict: capacity, fragmentation, transient_peak, growth or none, with evidence and fix.
    """
    path = ctx.path(params.path)
    deadline = time.monotonic() + ctx.remaining_s()
    data = await anyio.to_thread.run_sync(read_memory_input, path, params.path, deadline, abandon_on_cancel=True)
    if data.snapshot is not None:
        snapshot = data.snapshot
        result = await anyio.to_thread.run_sync(_analyse_snapshot, snapshot, params.top_sites, deadline,
                                                abandon_on_cancel=True)
    else:
        result = _analyse_text(data, params.top_sites)
    coverage = _coverage(params.path, data)
    result.coverage = [coverage]
    if coverage.status.value == "not_understood" and result.severity is Severity.ok:
        # An empty snapshot: dumped from a process that never allocated on the GPU (the wrong rank or process, or
        # before the model moved to the GPU). "No OOM and no fragmentation" would be a verdict on nothing.
        result.severity = Severity.unknown
        result.conclusion = [f"{params.path} is an allocator snapshot with no segment and no trace: {coverage.detail}.",
                             "Dump it from the process that ran out of memory, with the trace recording."]
        result.decides = ("A snapshot from the job's own process: torch.cuda.memory._record_memory_history() at start, "
                          "torch.cuda.memory._dump_snapshot() in the except handler of the OOM.")
    elif coverage.status.value == "partial" and result.verdict == "none":
        result.conclusion = [*result.conclusion[:2], "Judged from the moment of the dump only (no trace): growth "
                             "and transient peaks cannot show; record the trace to rule them out."]
    return result


def _coverage(name: str, data: MemoryInput) -> Coverage:
    """What the file held: a snapshot with its trace (read), one without (partial: no peak, growth or OOM replay),
    an empty one (not understood); text and stats dumps are read whole."""
    snapshot = data.snapshot
    if snapshot is None:
        parts = ([f"{len(data.stats)} device(s)"] if data.stats else []) + (
            [f"{len(data.ooms)} OOM message(s)"] if data.ooms else [])
        return Coverage.read(name, f"{data.kind}: " + ", ".join(parts))
    traced = sorted(d for d, t in snapshot.traces.items() if len(t.actions))
    if not snapshot.segments and not traced:
        return Coverage.not_understood(name, "the allocator held no memory when it was dumped", FORMATS_KNOWN)
    detail = f"snapshot {snapshot.generation}: {len(snapshot.segments)} segment(s)"
    if not traced:
        return Coverage.partial(name, f"{detail}, no trace (recorded without _record_memory_history()): the "
                                "moment of the dump only; no peak, growth or OOM replay")
    return Coverage.read(name, f"{detail}, trace of device(s) {', '.join(str(d) for d in traced)}")
