"""Which job an artifact is of: the world size a log states, the wall-clock span of its lines, the time a trace
was recorded. Logs and traces handed over together are joined per rank (find_stragglers) and told as one story
(triage_report) only when nothing says they are of different runs; this is the evidence for saying so.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tools.core.errors import TriageError
from tools.core.files import open_input
from tools.core.limits import STRAGGLER_IDENTITY_BYTES

__all__ = ["LogIdentity", "log_identity", "trace_epoch_us", "trace_world_size"]

# An ISO-like wall-clock time at a line's start or in its prefix (`2026-11-29 13:31:44,188`, `[2026-11-29T13:31:44]`).
_STAMP = re.compile(rb"(?<![\d-])(20\d\d)-([01]\d)-([0-3]\d)[ T]([0-2]\d):([0-5]\d):([0-5]\d)")
# The world size as trainers print it: `rank 0/4`, `world_size=4`, `WORLD_SIZE: 4`, `world size 4`.
_WORLD = re.compile(rb"\brank\s*\d{1,6}\s*/\s*(\d{1,6})\b|\bworld[_ ]size\b\W{0,3}(\d{1,6})\b", re.IGNORECASE)
# Below this, a trace's `ts` is not microseconds since the epoch (it is a monotonic clock: baseTimeNanoseconds
# then gives the offset); 1e15 us is September 2001.
_EPOCH_US_MIN = 1e15
_LAST_LINES_BYTES = 2048


@dataclass(frozen=True)
class LogIdentity:
    """What a log says about its job: the first and last wall-clock time in it (no time zone: the log's local
    time, read as UTC) and the world size it states."""

    first: datetime | None
    last: datetime | None
    world_size: int | None


def _stamp(match: re.Match[bytes] | None) -> datetime | None:
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups())
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:  # 2026-13-45: not a time
        return None


def log_identity(path: Path) -> LogIdentity:
    """The start and end of `path` (STRAGGLER_IDENTITY_BYTES each; the start only for a compressed log), read for
    times and a world size; nothing when the file cannot be read (the step reader says why)."""
    try:
        stream, compressed = open_input(path)
    except TriageError:
        return LogIdentity(None, None, None)
    try:
        with stream:
            head = stream.read(STRAGGLER_IDENTITY_BYTES)
            tail = b""
            if not compressed:
                size = stream.seek(0, os.SEEK_END)
                if size > 2 * STRAGGLER_IDENTITY_BYTES:
                    stream.seek(size - STRAGGLER_IDENTITY_BYTES)
                    tail = stream.read(STRAGGLER_IDENTITY_BYTES)
    except (OSError, EOFError):
        return LogIdentity(None, None, None)
    # The first time of the file and its last (a few lines from the end are enough, and far cheaper to scan).
    end = tail or head
    last = _stamp(next(reversed(list(_STAMP.finditer(end, max(0, len(end) - _LAST_LINES_BYTES)))), None))
    first = _stamp(_STAMP.search(head))
    stamps = [moment for moment in (first, last) if moment is not None]
    world = next((int(m.group(1) or m.group(2)) for m in _WORLD.finditer(head)), None)
    return LogIdentity(min(stamps, default=None), max(stamps, default=None), world if world and world > 0 else None)


def trace_epoch_us(first_ts: float | None, metadata: dict[str, Any]) -> float | None:
    """When a Kineto trace was recorded, in microseconds since the epoch: its first event's `ts` when that is an
    epoch time, else `ts` plus baseTimeNanoseconds (newer Kineto writes a monotonic `ts` and that offset); None
    when neither says."""
    if first_ts is None:
        return None
    if first_ts >= _EPOCH_US_MIN:
        return first_ts
    base = metadata.get("baseTimeNanoseconds")
    if isinstance(base, int | float) and not isinstance(base, bool) and base > 0:
        epoch = first_ts + base / 1000.0
        return epoch if epoch >= _EPOCH_US_MIN else None
    return None


def trace_world_size(metadata: dict[str, Any]) -> int | None:
    """The world size a trace's distributedInfo states (torch.profiler writes it for a distributed job)."""
    info = metadata.get("distributedInfo")
    if isinstance(info, dict):
        size = info.get("world_size")
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
    return None
