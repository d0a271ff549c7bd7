"""Step lines with the wall-clock time each was logged: the same formats as tools/steps/reader.py (its FORMATS and its
sniffing, not another parser), plus the timestamp the line carries, so that a step-time change can be placed in time
and matched with other evidence of that moment (telemetry_history's step_change).

Timestamps read (the line's first): ISO 8601 / Python logging `2026-01-10 03:10:00,123` or `2026-01-10T03:10:00.5Z`
with an optional zone (`Z`, `+08:00`, `+0800`), as DeepSpeed (`[2023-11-07 01:55:23,711]`), Megatron-LM
(`[2024-04-06 02:59:36] iteration`) and torchtitan (`[titan] 2026-05-18 16:04:46,338 - root - INFO - step:`) print
them. A time without a zone is the writer's local time: read with the offset the caller gives, else this machine's.
A line with no timestamp has NaN for its time: the caller says so rather than guessing one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tools.core.files import open_input, read_blocks
from tools.core.ranks import rank_of_line, rank_of_path
from tools.steps.reader import _SNIFF_BYTES, FORMATS, StepFormat, _choose, _Fast, _floats, _specialise

__all__ = ["StampedSteps", "read_stamped_steps"]

_STAMP_TEXT = rb"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\s?(?:Z|[+-]\d\d:?\d\d)?\b"
_STAMP = re.compile(_STAMP_TEXT)
_REST = re.compile(rb"(?:[.,](\d{1,9}))?\s?(Z|[+-]\d\d:?\d\d)?")  # after the seconds: fraction, zone
_LINE_HEAD = 160  # how far into a line its timestamp is looked for (prefixes: rank, launcher, logger name)


@dataclass
class StampedSteps:
    """One rank's step lines in file order: unix time (NaN where the line has none), step number (-1 unknown) and the
    step figure in `unit` (ms per step, or per 1k tokens / samples for throughput formats)."""

    rank: int
    source: str
    format: str
    unit: str
    times: np.ndarray
    numbers: np.ndarray
    values: np.ndarray
    zoned: int  # lines whose timestamp named its zone
    naive: int  # lines whose timestamp did not (read with the offset given, or this machine's local time)


def _unix(stamps: list[bytes], utc_offset_s: float | None) -> tuple[np.ndarray, int, int]:
    """Unix seconds of the timestamps `_STAMP_TEXT` matched (b'' for a line with none: NaN), and how many named their
    zone and how many did not. Lines of one minute share its date arithmetic (a log holds thousands a minute)."""
    out: list[float] = []
    minutes: dict[bytes, float | None] = {}
    local: dict[float, float] = {}
    zoned = naive = 0
    nan = float("nan")
    rest_of = _REST.match
    for stamp in stamps:
        head = stamp[:16]  # YYYY-MM-DD?HH:MM, the layout _STAMP_TEXT matched
        base = minutes.get(head, -1.0) if stamp else None
        if base == -1.0:
            base = minutes[head] = _minute(head)  # None for 2026-13-45: digits in a date's shape, not a date
        if base is None:
            out.append(nan)
            continue
        fraction, zone = rest_of(stamp, 19).groups()  # type: ignore[union-attr]  # _REST matches the empty string
        if zone:
            offset = _zone_s(zone)
            zoned += 1
        else:
            naive += 1
            if utc_offset_s is not None:
                offset = utc_offset_s
            else:  # this machine's offset at that wall-clock time (daylight saving moves it): once an hour
                hour = base - base % 3600
                if hour not in local:
                    local[hour] = _local_offset(hour)
                offset = local[hour]
        out.append(base + int(stamp[17:19]) + (float(b"0." + fraction) if fraction else 0.0) - offset)
    return np.array(out, dtype=np.float64), zoned, naive


def _minute(head: bytes) -> float | None:
    try:
        moment = datetime(int(head[0:4]), int(head[5:7]), int(head[8:10]), int(head[11:13]), int(head[14:16]),
                          tzinfo=UTC)
    except ValueError:
        return None
    return moment.timestamp()


def _zone_s(zone: bytes) -> float:
    if zone == b"Z":
        return 0.0
    digits = zone[1:].replace(b":", b"")
    offset = int(digits[:2]) * 3600 + int(digits[2:]) * 60
    return float(offset if zone[:1] == b"+" else -offset)


def _local_offset(naive_as_utc: float) -> float:
    """The local zone's offset (seconds east of UTC) at a wall-clock time given as if it were UTC."""
    wall = datetime.fromtimestamp(naive_as_utc, UTC).replace(tzinfo=None)
    offset = wall.astimezone().utcoffset()
    return offset.total_seconds() if offset is not None else 0.0


def _tight_block(block: bytes, tight: re.Pattern[bytes], fast: _Fast,
                 row: tuple[list[bytes], list[int], list[float]]) -> None:
    """One block of a per-rank log in the file's own spelling: the line's time, step number and figure, all lines of
    the block in one findall (C speed; numbers through the reader's own parser)."""
    stamps, numbers, values = row
    found = tight.findall(block)
    if not found:
        return
    times, steps, figures = zip(*found, strict=True)
    stamps.extend(times)
    numbers.extend(_floats(b" ".join(steps), b" ", len(steps)).astype(np.int64).tolist())
    firsts = [raw.split(fast.middle, 1)[0] for raw in figures] if fast.middle else list(figures)
    values.extend((_floats(b" ".join(firsts), b" ", len(firsts)) * fast.factor).tolist())


def _stamped_pattern(fast: _Fast) -> re.Pattern[bytes]:
    """A whole step line: its timestamp if it has one near its start, then the reader's tight pattern of this file
    with the step number kept."""
    step_line = fast.pattern.pattern.replace(rb"\d+", rb"(\d+)", 1)
    return re.compile(rb"(?m)^(?:[^\n]{0,%d}?(%s))?[^\n]*?%s" % (_LINE_HEAD, _STAMP_TEXT, step_line))


def read_stamped_steps(path: Path, display: str, deadline: float, user: StepFormat | None = None,
                       utc_offset_s: float | None = None) -> list[StampedSteps]:
    """Per rank, the step lines of one file (a per-rank log, or a combined one whose lines say their rank) with the
    time each line was written; [] when no step format is recognised."""
    stream, _ = open_input(path)
    file_rank = rank_of_path(display)
    fmt: StepFormat | None = user
    tight: re.Pattern[bytes] | None = None
    fast: _Fast | None = None
    rows: dict[int, tuple[list[bytes], list[int], list[float]]] = {}
    with stream:
        for block in read_blocks(stream, deadline):
            if fmt is None:
                fmt = _choose(block[:_SNIFF_BYTES], FORMATS) or _choose(block, FORMATS)
                if fmt is None:
                    return []
                if file_rank is not None:
                    # The reader's own spelling of this file's lines (its fast path), with the step number kept.
                    first = fmt.pattern.search(block)
                    start = block.rfind(b"\n", 0, first.start()) + 1 if first else 0
                    fast = _specialise(block[start:start + _SNIFF_BYTES], fmt)
                    tight = None if fast is None else _stamped_pattern(fast)
            search = _STAMP.search
            if tight is not None and fast is not None and file_rank is not None:
                _tight_block(block, tight, fast, rows.setdefault(file_rank, ([], [], [])))
                continue
            for match in fmt.pattern.finditer(block):
                rank_given, number, value, _ = fmt.decode(match.groups())
                start = block.rfind(b"\n", 0, match.start()) + 1
                stamp = search(block, start, min(match.start() + 1, start + _LINE_HEAD))
                rank = file_rank
                if rank is None:
                    rank = rank_of_line(block[start:start + 32])
                if rank is None:
                    rank = rank_given if rank_given is not None else 0
                stamps, numbers, values = rows.setdefault(rank, ([], [], []))
                stamps.append(stamp.group(0) if stamp is not None else b"")
                numbers.append(number if number is not None else -1)
                values.append(value)
    if fmt is None:
        return []
    out = []
    rows = {rank: row for rank, row in rows.items() if row[0]}
    for rank, (stamps, numbers, values) in sorted(rows.items()):
        times, zoned, naive = _unix(stamps, utc_offset_s)
        out.append(StampedSteps(rank, display, fmt.name, fmt.unit, times, np.array(numbers, dtype=np.int64),
                                np.array(values, dtype=np.float64), zoned, naive))
    return out
