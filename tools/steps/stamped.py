"""Step lines with the wall-clock time each was logged: the same formats as tools/steps/reader.py (its FORMATS and its
sniffing, not another parser), plus the timestamp the line carries, so that a step-time change can be placed in time
and matched with other evidence of that moment (telemetry_history's step_change).

Timestamps read, each seen in a real log (tests/data/telemetry/PROVENANCE.md names the excerpts the tests read):
- ISO 8601 / Python logging `2026-01-10 03:10:00,123` or `2026-01-10T03:10:00.5Z` with an optional zone (`Z`,
  `+08:00`, `+0800`), as DeepSpeed (`[2023-11-07 01:55:23,711]`), Megatron-LM (`[2024-04-06 02:59:36] iteration`) and
  torchtitan (`[titan] 2026-05-18 16:04:46,338 - root - INFO - step:`) print them; with slashes, `[2019/06/24
  16:19:46 __main__ INFO]` (ishtos/mpII-face-gaze#3) and glog's `Log file created at: 2024/12/01 03:09:59` header;
- glog / absl: `I0912 11:40:27.956218 139735407601536 model_lib_v2.py:652] Step 100 per-step time 0.813s`
  (TF Object Detection API, armaanpriyadarshan/Training-a-Custom-TensorFlow-2.X-Object-Detector#6) and glog 0.7's
  `I20241201 03:10:00.123456`. The short form has no year: it comes from the caller's window (`window`), else from
  a date written earlier in the file (glog's header), else the line has no time;
- syslog / journalctl: `Dec  2 11:38:47 worker4 kernel: ...` (NVIDIA/gpu-operator#1146), the year as for glog;
- detectron2 / mmengine's `%m/%d %H:%M:%S`: `[11/01 11:27:04 d2.utils.events]` (facebookresearch/detectron2#195),
  `04/21 21:03:53 - mmengine - INFO` (open-mmlab/mmengine#155), the year as for glog;
- a time of day alone at the start of a line, `16:35:16 INFO     iteration=858 loss=0.004551` (Zielon/INSTA#17) or
  rich's `[15:58:29] WARNING` (huggingface/accelerate#1192): the date is the last one written earlier in the file
  (a run's banner, glog's header), a day later when the clock goes back past midnight; none earlier: no time;
- unix epoch seconds or milliseconds in a field, anywhere on the line: `timestamp=1720645907` (llama.cpp server,
  ggml-org/llama.cpp), `"_timestamp": 1705312200.0` (W&B history rows), `"timestamp": 1733022600123` (MLflow metric
  history, milliseconds). Only 10 digits (seconds, 2001-2286) or 13 (milliseconds) inside 2000-2100 count.
Elapsed times are not wall clock and are never read as one: tqdm / Lightning's `[00:30<00:37, 14.80it/s]` and
`[1:03:43<4:06:33`, OpenPCDet's `Time cost: 00:04/21:46`, fairseq's `wall=407`, LLaMA-Factory's `"elapsed_time":
"0:00:30"` (a time of day counts only at the very start of a line, two-digit hours, not followed by `<`).
A time without a zone is the writer's local time: read with the offset the caller gives, else this machine's.
A line with no timestamp, or one that cannot be placed (no year, no date), has NaN for its time: the caller counts
those lines and says so rather than guessing one.
"""

from __future__ import annotations

import bisect
import calendar
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tools.core.files import open_input, read_blocks
from tools.core.ranks import rank_of_line, rank_of_path
from tools.steps.reader import _SNIFF_BYTES, FORMATS, StepFormat, _choose, _Fast, _floats, _specialise

__all__ = ["StampedSteps", "line_times", "read_stamped_steps"]

_ISO_TEXT = rb"\d{4}[-/]\d\d[-/]\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\s?(?:Z|[+-]\d\d:?\d\d)?\b"
# glog / absl: severity letter, [YYYY]MMDD, time to the microsecond (glog always writes six digits: what tells it
# from a word that happens to start with I, W, E or F).
_GLOG_TEXT = rb"(?<![\w])[IWEF](?:\d{4})?[01]\d[0-3]\d [0-2]\d:[0-5]\d:[0-5]\d\.\d{6}\b"
_MONTHS = (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec")
_SYSLOG_TEXT = rb"\b(?:" + b"|".join(_MONTHS) + rb") [ 0-3]\d [0-2]\d:[0-5]\d:[0-5]\d\b"
# detectron2 and mmengine: `[11/01 11:27:04 d2.utils.events]`, `04/21 21:03:53 - mmengine - INFO` (%m/%d, no year).
_MONTH_DAY_TEXT = rb"(?<![\d/])[01]\d/[0-3]\d [0-2]\d:[0-5]\d:[0-5]\d\b"
_STAMP_TEXT = rb"(?:" + _ISO_TEXT + rb"|" + _GLOG_TEXT + rb"|" + _SYSLOG_TEXT + rb"|" + _MONTH_DAY_TEXT + rb")"
_STAMP = re.compile(_STAMP_TEXT)
_REST = re.compile(rb"(?:[.,](\d{1,9}))?\s?(Z|[+-]\d\d:?\d\d)?")  # after the seconds: fraction, zone
# A time of day alone, only at the very start of a line: elsewhere HH:MM:SS is an elapsed time (tqdm, ETA).
_CLOCK = re.compile(rb"[ \t]*\[?([0-2]\d):([0-5]\d):([0-5]\d)(?:[.,](\d{1,6}))?\]?(?=[ \t])")
# Epoch seconds (10 digits) or milliseconds (13) in a named field: `timestamp=`, `"_timestamp": `, `"time": `.
_EPOCH = re.compile(rb"""\b_?(?:timestamp|time|ts|wall_?time|created(?:_at)?)["']?\s?[:=]\s?["']?(\d{13}|\d{10})"""
                    rb"""(\.\d{1,9})?(?![\d.])""", re.IGNORECASE)
# A calendar date anywhere in a line (a banner, glog's header): what dates a time of day or gives a year.
_DATE = re.compile(rb"(?<!\d)(20\d\d)[-/]([01]\d)[-/]([0-3]\d)(?!\d)")
_LINE_HEAD = 160  # how far into a line its timestamp is looked for (prefixes: rank, launcher, logger name)
_LINE_MAX = 8192  # how far along a line an epoch field is looked for (a JSON row's `_timestamp` comes last)
_EPOCH_RANGE = (946684800.0, 4102444800.0)  # 2000-01-01 to 2100-01-01: a 10-digit number outside is not a time
_DAY = 86400.0


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
    zoned: int  # lines whose timestamp named its zone (or is an epoch: UTC)
    naive: int  # lines whose timestamp did not (read with the offset given, or this machine's local time)
    undated: int = 0  # lines with a time of day that could not be placed: no year or date for it (NaN)
    forms: dict[str, int] = field(default_factory=dict)  # timestamp form -> lines read in it


@dataclass
class _Clock:
    """What turns the stamps of one file into unix seconds: the caller's zone and window, and what the file said
    before (its dates, the last time of day, for the midnight roll-over)."""

    utc_offset_s: float | None
    window: tuple[float, float] | None
    local: dict[float, float] = field(default_factory=dict)
    minutes: dict[bytes, float | None] = field(default_factory=dict)
    last_clock: tuple[float, float] = (math.nan, -1.0)  # (date, seconds of day) of the previous time of day
    shift: float = 0.0  # days added since that date (midnight roll-overs)
    zoned: int = 0
    naive: int = 0
    undated: int = 0
    forms: dict[str, int] = field(default_factory=dict)

    def offset(self, wall: float) -> float:
        if self.utc_offset_s is not None:
            return self.utc_offset_s
        hour = wall - wall % 3600  # this machine's offset at that wall-clock time (daylight saving moves it)
        if hour not in self.local:
            self.local[hour] = _local_offset(hour)
        return self.local[hour]

    def unix(self, stamp: bytes, date: float) -> float:
        """The unix time of one stamp (b'' for none), `date` the naive midnight of the last date written before the
        line (NaN: none)."""
        if not stamp:
            return math.nan
        lead = stamp[:1]
        if lead == b"#":
            return self._epoch(stamp[1:])
        if lead == b"@":
            return self._time_of_day(stamp[1:], date)
        if stamp[2:3] == b"/":
            return self._month_day(None, int(stamp[0:2]), int(stamp[3:5]), stamp[6:], date, "MM/DD (detectron2)")
        if lead.isdigit():
            return self._iso(stamp)
        if stamp[1:2].isdigit():
            return self._glog(stamp, date)
        return self._syslog(stamp, date)

    def _count(self, form: str) -> None:
        self.forms[form] = self.forms.get(form, 0) + 1

    def _epoch(self, digits: bytes) -> float:
        value = float(digits)
        if len(digits.split(b".")[0]) == 13:  # milliseconds (MLflow, JavaScript's Date.now())
            value /= 1000.0
        if not _EPOCH_RANGE[0] <= value < _EPOCH_RANGE[1]:
            return math.nan
        self.zoned += 1
        self._count("unix epoch field")
        return value

    def _iso(self, stamp: bytes) -> float:
        head = stamp[:16].replace(b"/", b"-")  # YYYY-MM-DD?HH:MM
        base = self.minutes.get(head, -1.0)
        if base == -1.0:
            base = self.minutes[head] = _minute(head)  # None for 2026-13-45: digits in a date's shape, not a date
        if base is None:
            return math.nan
        fraction, zone = _REST.match(stamp, 19).groups()  # type: ignore[union-attr]  # _REST matches the empty string
        self._count("ISO 8601 / logging" if stamp[4:5] == b"-" else "YYYY/MM/DD")
        wall = base + int(stamp[17:19]) + (float(b"0." + fraction) if fraction else 0.0)
        if zone:
            self.zoned += 1
            return wall - _zone_s(zone)
        self.naive += 1
        return wall - self.offset(base)

    def _glog(self, stamp: bytes, date: float) -> float:
        if stamp[9:10] == b" ":  # glog 0.7: I20241201 03:10:00.123456, a full date
            year: int | None = int(stamp[1:5])
            month, day, clock = int(stamp[5:7]), int(stamp[7:9]), stamp[10:]
        else:
            month, day, clock = int(stamp[1:3]), int(stamp[3:5]), stamp[6:]
            year = None
        return self._month_day(year, month, day, clock, date, "glog / absl")

    def _syslog(self, stamp: bytes, date: float) -> float:
        month = _MONTHS.index(stamp[:3]) + 1
        return self._month_day(None, month, int(stamp[4:6]), stamp[7:], date, "syslog")

    def _month_day(self, year: int | None, month: int, day: int, clock: bytes, date: float, form: str) -> float:
        hh, mm, ss = int(clock[0:2]), int(clock[3:5]), int(clock[6:8])
        fraction = float(b"0" + clock[8:]) if clock[8:9] == b"." else 0.0
        if year is None:
            year = self._year(month, day, hh, mm, ss, date)
        if year is None:
            self.undated += 1
            return math.nan
        try:
            wall = float(calendar.timegm((year, month, day, hh, mm, ss, 0, 0, 0)))
            datetime(year, month, day)  # timegm does not refuse 31 February
        except ValueError:
            return math.nan
        self.naive += 1
        self._count(form)
        return wall + fraction - self.offset(wall)

    def _year(self, month: int, day: int, hh: int, mm: int, ss: int, date: float) -> int | None:
        """The year of a month-day time: the one that puts it inside the caller's window (two days' slack for the
        zone), else the year of the last date the file wrote before it."""
        if self.window is not None:
            start, end = self.window
            for year in sorted({_year_of(start), _year_of(end)}):
                try:
                    wall = calendar.timegm((year, month, day, hh, mm, ss, 0, 0, 0))
                    datetime(year, month, day)
                except ValueError:
                    continue
                if start - 2 * _DAY <= wall <= end + 2 * _DAY:
                    return year
        return None if math.isnan(date) else _year_of(date)

    def _time_of_day(self, clock: bytes, date: float) -> float:
        if math.isnan(date):
            self.undated += 1
            return math.nan
        seconds = int(clock[0:2]) * 3600 + int(clock[3:5]) * 60 + int(clock[6:8])
        fraction = float(b"0." + clock[9:]) if len(clock) > 9 else 0.0
        last_date, last_seconds = self.last_clock
        if date != last_date:
            self.shift = 0.0
        elif seconds + 12 * 3600 < last_seconds:  # the clock went back past midnight: the next day
            self.shift += _DAY
        self.last_clock = (date, seconds)
        wall = date + self.shift + seconds
        self.naive += 1
        self._count("time of day, date from the file")
        return wall + fraction - self.offset(wall)


def _year_of(t: float) -> int:
    return datetime.fromtimestamp(t, UTC).year


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


class _Dates:
    """The calendar dates a file writes, in order: the naive midnight of the last one before a position."""

    def __init__(self) -> None:
        self.carried = math.nan  # the last date of the blocks before
        self.block: bytes | None = None
        self.positions: list[int] = []
        self.midnights: list[float] = []

    def before(self, block: bytes, position: int) -> float:
        if block is not self.block:
            self._scan(block)
        i = bisect.bisect_right(self.positions, position)
        return self.midnights[i - 1] if i else self.carried

    def _scan(self, block: bytes) -> None:
        if self.midnights:
            self.carried = self.midnights[-1]
        self.block, self.positions, self.midnights = block, [], []
        for match in _DATE.finditer(block):
            try:
                midnight = datetime(int(match[1]), int(match[2]), int(match[3]), tzinfo=UTC).timestamp()
            except ValueError:
                continue
            self.positions.append(match.start())
            self.midnights.append(midnight)

    def finish(self, block: bytes) -> None:
        """The block is done: its last date dates the next blocks' lines."""
        if block is not self.block:
            self._scan(block)
        if self.midnights:
            self.carried = self.midnights[-1]
        self.block, self.positions, self.midnights = None, [], []


def _line_stamp(block: bytes, start: int, head_end: int, line_end: int) -> bytes:
    """The timestamp of the line at `start`, marked with its form: ISO text as written, glog and syslog text as
    written, b'@' + a time of day alone, b'#' + epoch digits; b'' for none. Looked for in the line's head (up to
    `head_end`, where the step text begins), the epoch field anywhere up to `line_end`."""
    stamp = _STAMP.search(block, start, head_end)
    if stamp is not None:
        return stamp.group(0)
    clock = _CLOCK.match(block, start, head_end + 1)  # `[01:03:43<` (tqdm) fails its look-ahead: elapsed, not a time
    if clock is not None:
        return b"@" + block[clock.start(1):clock.end()].rstrip(b"]")
    epoch = _EPOCH.search(block, start, min(line_end, start + _LINE_MAX))
    if epoch is not None:
        return b"#" + epoch.group(1) + (epoch.group(2) or b"")
    return b""


def _needs_date(stamp: bytes) -> bool:
    return stamp[:1] == b"@" or stamp[2:3] == b"/" or (bool(stamp) and not stamp[:1].isdigit() and stamp[:1] != b"#"
                                                      and not stamp[5:9].isdigit())


def line_times(data: bytes, utc_offset_s: float | None = None,
               window: tuple[float, float] | None = None) -> tuple[np.ndarray, _Clock]:
    """The time of every line of `data` as read_stamped_steps reads a step line's (NaN where it has none or cannot
    be placed), and the clock that read them (its counts: zoned, naive, undated, forms)."""
    clock = _Clock(utc_offset_s, window)
    dates = _Dates()
    out: list[float] = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        stamp = _line_stamp(data, start, min(end, start + _LINE_HEAD), end)
        out.append(clock.unix(stamp, dates.before(data, start) if _needs_date(stamp) else math.nan))
        start = end + 1
    return np.array(out, dtype=np.float64), clock


def _tight_block(block: bytes, tight: re.Pattern[bytes], fast: _Fast,
                 row: tuple[list[bytes], list[float], list[int], list[float]]) -> None:
    """One block of a per-rank log in the file's own spelling: the line's time, step number and figure, all lines of
    the block in one findall (C speed; numbers through the reader's own parser). Only for files whose lines carry
    ISO times, which need no date from elsewhere."""
    stamps, dates, numbers, values = row
    found = tight.findall(block)
    if not found:
        return
    times, steps, figures = zip(*found, strict=True)
    stamps.extend(times)
    dates.extend([math.nan] * len(times))
    numbers.extend(_floats(b" ".join(steps), b" ", len(steps)).astype(np.int64).tolist())
    firsts = [raw.split(fast.middle, 1)[0] for raw in figures] if fast.middle else list(figures)
    values.extend((_floats(b" ".join(firsts), b" ", len(firsts)) * fast.factor).tolist())


def _stamped_pattern(fast: _Fast) -> re.Pattern[bytes]:
    """A whole step line: its ISO timestamp if it has one near its start, then the reader's tight pattern of this
    file with the step number kept."""
    step_line = fast.pattern.pattern.replace(rb"\d+", rb"(\d+)", 1)
    return re.compile(rb"(?m)^(?:[^\n]{0,%d}?(%s))?[^\n]*?%s" % (_LINE_HEAD, _ISO_TEXT, step_line))


def _first_stamp_is_iso(block: bytes, fmt: StepFormat) -> bool:
    first = fmt.pattern.search(block)
    if first is None:
        return False
    start = block.rfind(b"\n", 0, first.start()) + 1
    end = block.find(b"\n", first.start())
    stamp = _line_stamp(block, start, min(first.start() + 1, start + _LINE_HEAD), len(block) if end < 0 else end)
    return stamp[:4].isdigit()  # YYYY-MM-DD (MM/DD, no year, needs the file's dates: not the tight path)


def read_stamped_steps(path: Path, display: str, deadline: float, user: StepFormat | None = None,
                       utc_offset_s: float | None = None,
                       window: tuple[float, float] | None = None) -> list[StampedSteps]:
    """Per rank, the step lines of one file (a per-rank log, or a combined one whose lines say their rank) with the
    time each line was written; [] when no step format is recognised. `window` (unix start, end) is the caller's:
    it gives the year of times written without one (glog, syslog)."""
    stream, _ = open_input(path)
    file_rank = rank_of_path(display)
    fmt: StepFormat | None = user
    tight: re.Pattern[bytes] | None = None
    fast: _Fast | None = None
    sniffed = False
    dates = _Dates()
    rows: dict[int, tuple[list[bytes], list[float], list[int], list[float]]] = {}
    with stream:
        for block in read_blocks(stream, deadline):
            if fmt is None:
                fmt = _choose(block[:_SNIFF_BYTES], FORMATS) or _choose(block, FORMATS)
                if fmt is None:
                    return []
            if not sniffed:
                sniffed = True
                if file_rank is not None and _first_stamp_is_iso(block, fmt):
                    # The reader's own spelling of this file's lines (its fast path), with the step number kept.
                    first = fmt.pattern.search(block)
                    start = block.rfind(b"\n", 0, first.start()) + 1 if first else 0
                    fast = _specialise(block[start:start + _SNIFF_BYTES], fmt)
                    tight = None if fast is None else _stamped_pattern(fast)
            if tight is not None and fast is not None and file_rank is not None:
                _tight_block(block, tight, fast, rows.setdefault(file_rank, ([], [], [], [])))
                continue
            for match in fmt.pattern.finditer(block):
                rank_given, number, value, _ = fmt.decode(match.groups())
                start = block.rfind(b"\n", 0, match.start()) + 1
                end = block.find(b"\n", match.start())
                stamp = _line_stamp(block, start, min(match.start() + 1, start + _LINE_HEAD),
                                    len(block) if end < 0 else end)
                rank = file_rank
                if rank is None:
                    rank = rank_of_line(block[start:start + 32])
                if rank is None:
                    rank = rank_given if rank_given is not None else 0
                stamps, line_dates, numbers, values = rows.setdefault(rank, ([], [], [], []))
                stamps.append(stamp)
                line_dates.append(dates.before(block, start) if _needs_date(stamp) else math.nan)
                numbers.append(number if number is not None else -1)
                values.append(value)
            dates.finish(block)
    if fmt is None:
        return []
    out = []
    rows = {rank: row for rank, row in rows.items() if row[0]}
    for rank, (stamps, line_dates, numbers, values) in sorted(rows.items()):
        clock = _Clock(utc_offset_s, window)
        times = np.array([clock.unix(s, d) for s, d in zip(stamps, line_dates, strict=True)], dtype=np.float64)
        out.append(StampedSteps(rank, display, fmt.name, fmt.unit, times, np.array(numbers, dtype=np.int64),
                                np.array(values, dtype=np.float64), clock.zoned, clock.naive, clock.undated,
                                clock.forms))
    return out
