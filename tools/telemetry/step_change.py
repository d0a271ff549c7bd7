"""step_change: when the job slowed, from its own step logs (tools/steps reads them, with the time of each line), and
which of a GPU's series changed within a few minutes of that moment, from the points telemetry_history read.

Both halves are pure over what was read: history.py asks the server for the points. numpy and the step reader are
imported where the logs are read, not with the models.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from tools.core.files import expand_inputs
from tools.core.limits import STRAGGLER_MAX_LOG_FILES, TELEMETRY_MAX_SLOWDOWNS
from tools.core.models import Coverage
from tools.core.thresholds import (
    TELEMETRY_CLOCK_DROP_SHARE,
    TELEMETRY_MIN_RUN_SAMPLES,
    TELEMETRY_SERIES_CHANGE_SHARE,
    TELEMETRY_STEP_BASELINE_LINES,
    TELEMETRY_STEP_RISE_MIN_LINES,
    TELEMETRY_STEP_RISE_SHARE,
    TELEMETRY_TEMP_CHANGE_C,
)
from tools.telemetry.names import CONCEPTS, REASON_BITS, RELEVANT_REASONS

if TYPE_CHECKING:
    import numpy as np

    from tools.steps import StampedSteps

__all__ = ["JobSlowdown", "JobSteps", "SeriesChange", "Slowdown", "StepChange", "read_job_steps", "series_change",
           "slowdown", "slowdowns"]

# The series a step-time change is matched with, in the order a cause is told: the GPU's own speed first, then what
# follows from it (power, heat), then what it does (activity) and moves (links).
STEP_SERIES = ("sm_clock", "clock_reasons", "power", "gpu_temp", "gpu_util", "gr_engine_active", "nvlink_tx",
               "nvlink_rx", "nvlink_total", "pcie_tx", "pcie_rx")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SeriesChange(BaseModel):
    measure: str = Field(description="The measure, e.g. 'SM clock', 'clock event reasons', 'NVLink TX'.")
    metric: str = Field(description="The exporter's metric name it was read from.")
    direction: Literal["fell", "rose", "set"]
    before: float | None = Field(description="Median over the minutes before, in `unit` (a bitmask for reasons).")
    after: float | None = Field(description="Median from the change on.")
    unit: str
    began: str = Field(description="RFC3339, to the step: the first sample of the change.")
    began_unix: float
    reasons: list[str] = Field(default_factory=list, description="Clock-event reasons newly set.")
    job_wide: bool = Field(default=False, description="Changed alike on most of the selection's GPUs: what the job "
                           "as a whole did (a consequence of the slowdown), not one GPU's own change.")

    def text(self) -> str:
        if self.direction == "set":
            return f"{self.measure} {', '.join(self.reasons)} set from {self.began}"
        return (f"{self.measure} {self.direction} {_value(self.before, self.unit)} -> {_value(self.after, self.unit)}"
                f" from {self.began}")


class JobSlowdown(BaseModel):
    """One sustained step-time rise of the job, and the GPUs whose own series changed within minutes of it."""

    began: str = Field(description="RFC3339: the time of its first slow step line.")
    began_unix: float
    step: int | None = Field(default=None, description="Its step number, when the lines carry one.")
    before: float = Field(description="Median step figure before it, in the unit of step_change.")
    after: float = Field(description="Median from it until it recovered, rose again, or the end.")
    share: float = Field(description="after / before - 1: 0.5 is 50 % slower.")
    recovered: str | None = Field(default=None, description="When the step time came back to its level before.")
    recovered_unix: float | None = None
    on_top: bool = Field(default=False, description="It began while the job was already slow (from the one before, "
                         "which did not recover first): a second cause on top of the first.")
    gpus: list[str] = Field(default_factory=list, description="node/GPU whose own series changed with it.")
    evidence: str = ""

    def when(self) -> str:
        return self.began[11:19] if len(self.began) >= 19 else self.began


class StepChange(BaseModel):
    """What the job's step logs say about when it slowed. The top-level fields describe the first slowdown;
    `slowdowns` lists every one (the first again), at most TELEMETRY_MAX_SLOWDOWNS."""

    status: Literal["slowed", "steady", "unknown"] = Field(description="slowed: a sustained step-time rise was found; "
                                                           "steady: none in the lines read; unknown: see decides.")
    began: str | None = Field(default=None, description="RFC3339: the time of the first slow step line.")
    began_unix: float | None = None
    step: int | None = Field(default=None, description="Its step number, when the lines carry one.")
    before: float | None = Field(default=None, description="Median step figure before it, in `unit`.")
    after: float | None = Field(default=None, description="Median from it until it recovered (or the end).")
    unit: str = ""
    recovered: str | None = Field(default=None, description="When the step time came back, if it did.")
    ranks: int = 0
    lines: int = Field(default=0, description="Step lines with a timestamp, all ranks.")
    gpus: list[str] = Field(default_factory=list, description="node/GPU whose own series changed with it.")
    evidence: str = ""
    decides: str | None = Field(default=None, description="For unknown: what would decide.")
    slowdowns: list[JobSlowdown] = Field(default_factory=list, description="Every slowdown in time order, each with "
                                         "its recovery and GPUs (the first is the one above).")
    more_slowdowns: int = Field(default=0, description="Slowdowns found past the first TELEMETRY_MAX_SLOWDOWNS: "
                                "counted, their GPUs not read.")
    unstamped: int = Field(default=0, description="Step lines whose time could not be read (none on the line, or a "
                           "time of day with no date or year to place it): left out, never guessed.")


@dataclass
class JobSteps:
    """The job's step lines, all ranks merged in time (by step number where every line has one: the earliest time
    a rank logged the step and the median figure over ranks)."""

    times: np.ndarray
    values: np.ndarray
    numbers: np.ndarray
    unit: str
    ranks: int
    lines: int  # step lines read, stamped or not
    coverage: list[Coverage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unstamped: int = 0  # step lines read whose time could not be read

    @property
    def span(self) -> tuple[float, float] | None:
        return (float(self.times[0]), float(self.times[-1])) if self.times.size else None

    def median(self) -> float:
        return float(statistics.median(self.values.tolist()))


def _offset_text(seconds: float) -> str:
    sign = "+" if seconds >= 0 else "-"
    minutes = round(abs(seconds) / 60)
    return f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def read_job_steps(patterns: list[str], roots: tuple[Path, ...], step_regex: str | None, utc_offset_s: float | None,
                   deadline: float, window: tuple[float, float] | None = None) -> JobSteps:
    """Every rank's stamped step lines, merged; `window` (the caller's start and end, unix) gives the year of times
    written without one (glog, syslog)."""
    import numpy as np

    from tools.steps import FORMATS, compile_user_format, read_stamped_steps

    user = compile_user_format(step_regex) if step_regex else None
    files = expand_inputs(patterns, roots, STRAGGLER_MAX_LOG_FILES)
    per_rank: dict[int, StampedSteps] = {}
    coverage: list[Coverage] = []
    notes: list[str] = []
    lines = unstamped = 0
    for item in files:
        found = read_stamped_steps(item.path, item.name, deadline, user, utc_offset_s, window)
        if not found:
            coverage.append(Coverage.not_understood(item.name, "no step-time line recognised",
                                                    [*(f.name for f in FORMATS), "a step_regex of your own"]))
            continue
        count = sum(s.values.size for s in found)
        stamped = sum(int(np.count_nonzero(~np.isnan(s.times))) for s in found)
        undated = sum(s.undated for s in found)
        lines += count
        unstamped += count - stamped
        ranks = ", ".join(str(s.rank) for s in found[:8]) + (" ..." if len(found) > 8 else "")
        what = f"{count} step lines ({found[0].format}) of rank {ranks}"
        if not stamped:
            why = (f"{undated} carry a time of day but no date or year to place it (give start/end: the window's "
                   "year dates glog and syslog times; a time of day alone needs a date written earlier in the "
                   "file)" if undated else "none with a timestamp")
            coverage.append(Coverage.partial(item.name, f"{what}, {why}: when the job slowed cannot be placed in "
                                             "time (log with a time on each line, e.g. Python logging's "
                                             "%(asctime)s)"))
            continue
        naive = sum(s.naive for s in found)
        forms: dict[str, int] = defaultdict(int)
        for steps in found:
            for form, n in steps.forms.items():
                forms[form] += n
        stamped_times = np.concatenate([s.times[~np.isnan(s.times)] for s in found])
        detail = (f"{what}, logged {_iso(float(stamped_times.min()))} to {_iso(float(stamped_times.max()))} "
                  f"({', '.join(sorted(forms))})")
        if naive:
            zone = (_offset_text(utc_offset_s) if utc_offset_s is not None
                    else f"this machine's local time ({_offset_text(_local_offset(float(stamped_times[0])))})")
            detail += f"; times without a zone read as {zone}"
        if stamped < count:
            left = f"{count - stamped} lines without a readable time left out"
            if undated:
                left += f" ({undated} with a time of day but no date or year for it)"
            coverage.append(Coverage.partial(item.name, f"{detail}; {left}"))
        else:
            coverage.append(Coverage.read(item.name, detail))
        for steps in found:
            if steps.rank in per_rank:
                notes.append(f"rank {steps.rank} has step lines in {per_rank[steps.rank].source} and {steps.source}: "
                             "the first is used.")
                continue
            per_rank[steps.rank] = steps
    job = _merge(list(per_rank.values()), lines, coverage, notes)
    job.unstamped = unstamped
    return job


def _local_offset(t: float) -> float:
    offset = datetime.fromtimestamp(t).astimezone().utcoffset()
    return offset.total_seconds() if offset is not None else 0.0


def _merge(ranks: list[StampedSteps], lines: int, coverage: list[Coverage], notes: list[str]) -> JobSteps:
    import numpy as np

    units: dict[str, int] = defaultdict(int)
    for steps in ranks:
        units[steps.unit] += int(np.count_nonzero(~np.isnan(steps.times)))
    if not any(units.values()):
        empty = np.empty(0)
        return JobSteps(empty, empty, np.empty(0, dtype=np.int64), "", 0, lines, coverage, notes)
    unit = max(units, key=lambda u: units[u])
    kept = [s for s in ranks if s.unit == unit]
    if len(kept) < len(ranks):
        notes.append(f"{len(ranks) - len(kept)} rank(s) log another step figure than '{unit}': left out.")
    stamped = [(s.times[ok], s.values[ok], s.numbers[ok]) for s in kept if (ok := ~np.isnan(s.times)).any()]
    times = np.concatenate([t for t, _, _ in stamped])
    values = np.concatenate([v for _, v, _ in stamped])
    numbers = np.concatenate([n for _, _, n in stamped])
    if len(stamped) > 1 and numbers.size and (numbers >= 0).all():
        # One point per step: the earliest time a rank logged it, the median figure over the ranks (sorted by step,
        # then figure, the middle of each group).
        order = np.lexsort((values, numbers))
        numbers, values, times = numbers[order], values[order], times[order]
        first = np.flatnonzero(np.r_[True, numbers[1:] != numbers[:-1]])
        counts = np.diff(np.r_[first, numbers.size])
        earliest = np.minimum.reduceat(times, first)
        middle = (values[first + (counts - 1) // 2] + values[first + counts // 2]) / 2
        by_time = np.argsort(earliest, kind="stable")
        times, values, numbers = earliest[by_time], middle[by_time], numbers[first][by_time]
    else:
        order = np.argsort(times, kind="stable")
        times, values, numbers = times[order], values[order], numbers[order]
    finite = np.isfinite(values)
    return JobSteps(times[finite], values[finite], numbers[finite], unit, len(stamped), lines, coverage, notes)


@dataclass(frozen=True)
class Slowdown:
    at: float
    step: int | None
    before: float
    after: float
    recovered_at: float | None
    index: int = 0  # the line it begins at (in JobSteps order)
    worse: bool = False  # it began while the job was already slow (a further rise), not from the baseline


def slowdown(steps: JobSteps) -> Slowdown | None:
    """The first sustained step-time rise (see slowdowns)."""
    found = slowdowns(steps, 1)
    return found[0] if found else None


def slowdowns(steps: JobSteps, most: int = TELEMETRY_MAX_SLOWDOWNS + 1) -> list[Slowdown]:
    """Every sustained step-time rise, in time order, at most `most`: a line TELEMETRY_STEP_RISE_SHARE above the
    median of the (up to) TELEMETRY_STEP_BASELINE_LINES lines before it, with the median of it and the next lines
    above that too. A rise lasts until the step time comes back to within that share of the level before it (the
    recovery; the next rise is measured against the lines from there) or rises again by the same share while slow
    (a second cause on top of the first: it is a slowdown of its own, measured against the slow level)."""
    import numpy as np

    values = steps.values
    k, base, share = TELEMETRY_STEP_RISE_MIN_LINES, TELEMETRY_STEP_BASELINE_LINES, TELEMETRY_STEP_RISE_SHARE
    n = values.size
    if n < 2 * k:
        return []
    ahead = np.median(np.lib.stride_tricks.sliding_window_view(values, k), axis=1)  # ahead[i] = median(v[i:i+k])
    behind = np.full(n, np.nan)  # behind[i] = median(v[i-base:i]), where a whole baseline fits
    if n > base:
        behind[base:] = np.median(np.lib.stride_tricks.sliding_window_view(values, base), axis=1)[:n - base]

    def level(i: int, since: int) -> float:
        return float(behind[i]) if i - base >= since else float(np.median(values[max(since, i - base):i]))

    # Where a whole baseline fits, the test of every line at once (a log holds 10^4-10^5 step lines).
    padded = np.full(n, np.nan)
    padded[:n - k + 1] = ahead
    with np.errstate(invalid="ignore"):
        risen = (values > (1 + share) * behind) & (padded > (1 + share) * behind)

    def rise_from(first: int, since: int, until: int) -> int | None:
        """The first line in [first, until) that rises above the level of the lines since `since` before it."""
        until = min(until, n - k + 1)
        for i in range(first, min(until, since + base)):  # a baseline shorter than base lines: one by one
            bar = (1 + share) * level(i, since)
            if values[i] > bar and ahead[i] > bar:
                return i
        rest = max(first, since + base)
        hits = np.flatnonzero(risen[rest:until]) if rest < until else np.empty(0, dtype=np.int64)
        return int(hits[0]) + rest if hits.size else None

    out: list[Slowdown] = []
    since, i, worse = 0, k, False
    while len(out) < most:
        start = rise_from(i, since, n)
        if start is None:
            break
        before = level(start, since)
        bar = (1 + share) * before
        back = next((j for j in range(start + 1, n - k + 1) if values[j] <= bar and ahead[j] <= bar), None)
        # A further rise while slow: measured against the slow lines only, once k of them are there.
        further = rise_from(start + k, start, back if back is not None else n)
        end = further if further is not None else back
        after = float(np.median(values[start:end if end is not None else n]))
        number = int(steps.numbers[start])
        out.append(Slowdown(float(steps.times[start]), number if number >= 0 else None, before, after,
                            None if further is not None or back is None else float(steps.times[back]), start, worse))
        if further is not None:
            since, i, worse = start, further, True
        elif back is not None:
            since, i, worse = back, back + k, False
        else:
            break
    return out


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "B/s":
        return f"{value / 1e9:.3g} GB/s"
    if unit == "bitmask":
        return hex(int(value))
    return (f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}") + (f" {unit}" if unit not in ("%",) else " %")


def series_change(concept: str, metric: str, points: list[tuple[float, float]], before_end: float, near: float,
                  window_s: float, step: float) -> SeriesChange | None:
    """The change of one GPU's series that begins within window_s of `near`, against its median before
    `before_end`; None when it did not change (or there is too little before to tell)."""
    before = [v for t, v in points if t < before_end]
    if len(before) < TELEMETRY_MIN_RUN_SAMPLES:
        return None
    spec = CONCEPTS[concept]
    if concept == "clock_reasons":
        earlier = 0
        for v in before:
            earlier |= int(v) & sum(RELEVANT_REASONS)
        flags = [(int(v) & sum(RELEVANT_REASONS) & ~earlier) != 0 for _, v in points]
        began = _first_run(points, flags, [1] * len(points), near, window_s, step)
        if began is None:
            return None
        mask = 0
        for t, v in points:
            if t >= began:
                mask |= int(v) & sum(RELEVANT_REASONS) & ~earlier
        return SeriesChange(measure=spec.title, metric=metric, direction="set", before=float(earlier),
                            after=float(mask), unit="bitmask", began=_iso(began), began_unix=began,
                            reasons=[REASON_BITS[bit] for bit in RELEVANT_REASONS if mask & bit])
    level = statistics.median(before)
    if concept == "gpu_temp":
        margin = TELEMETRY_TEMP_CHANGE_C
    elif concept == "sm_clock":
        margin = TELEMETRY_CLOCK_DROP_SHARE * level
    else:
        margin = TELEMETRY_SERIES_CHANGE_SHARE * level
    if margin <= 0:
        return None  # a series at zero before: a change from nothing is not a change of speed
    signs = [(1 if v > level + margin else -1 if v < level - margin else 0) for _, v in points]
    began = _first_run(points, [s != 0 for s in signs], signs, near, window_s, step)
    if began is None:
        return None
    sign = signs[next(i for i, (t, _) in enumerate(points) if t == began)]
    after = statistics.median(v for (t, v), s in zip(points, signs, strict=True) if t >= began and s == sign)
    return SeriesChange(measure=spec.title, metric=metric, direction="rose" if sign > 0 else "fell", before=level,
                        after=after, unit=spec.unit, began=_iso(began), began_unix=began)


def _first_run(points: list[tuple[float, float]], flags: list[bool], signs: list[int], near: float, window_s: float,
               step: float) -> float | None:
    """The start of the first run of TELEMETRY_MIN_RUN_SAMPLES or more flagged points of one sign (a gap of more than
    two steps ends a run) that begins within window_s of `near`."""
    runs: list[tuple[int, int]] = []  # (first index, length)
    for i, ((t, _), flag) in enumerate(zip(points, flags, strict=True)):
        if flag and runs and runs[-1][0] + runs[-1][1] == i and signs[i] == signs[runs[-1][0]] \
                and t - points[i - 1][0] <= 2 * step:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        elif flag:
            runs.append((i, 1))
    return next((points[first][0] for first, length in runs
                 if length >= TELEMETRY_MIN_RUN_SAMPLES and abs(points[first][0] - near) <= window_s), None)


def mark_job_wide(changes: dict[str, list[SeriesChange]], gpus_with: dict[str, int]) -> None:
    """A change seen alike (same measure, same direction) on at least half the GPUs that have the series, and on two
    or more, is the job's: every GPU of a synchronous job moves less over its links once one of them is slow."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for found in changes.values():
        for change in found:
            counts[(change.measure, change.direction)] += 1
    for found in changes.values():
        for change in found:
            count = counts[(change.measure, change.direction)]
            change.job_wide = count >= 2 and count >= math.ceil(0.5 * gpus_with.get(change.measure, 0))
