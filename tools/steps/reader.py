"""The one reader of per-step timings in training logs.

Each known format is a bytes regex applied with `findall` to whole blocks of the file (C speed: no Python
loop per line), chosen per file by sniffing its first block. A match yields the step number, the step time
in milliseconds (or the inverse of a throughput, for frameworks that log only tokens/s), and a compute-only
time where the line carries one. The rank comes from the file name or, in combined logs, from the line
prefix (`[rank3]:`, `[default3]:`, `3: `) or an inline `rank 3`.

Formats (sources in tests/data/logs/steps/PROVENANCE.md):
- plain: `rank 2 step 15 time 37.7 ms (compute 12.9 ms, ...)`, `step=15 step_time_ms=37.7`, `step 15 ... time: 0.12s`
- openmmlab: detectron2's `iter: 1259 ... time: 0.3322  data_time: 0.0334`, maskrcnn-benchmark's `iter: 26000 ...
  time: 0.9628 (0.9792)  data: 0.0123 (0.0197)` and mmcv / mmengine's `Epoch [1][25/612] ... time: 1.515, data_time:
  0.671` or `Iter(train) [50/80000] ... time: ...` (seconds; the step counted across epochs)
- json_metrics: detectron2 / Detectron / DINOv2 JSON rows, `{"iteration": 120, "iter_time": 3.607, ...}` (seconds)
- megatron: `iteration      100/   10000 | ... | elapsed time per iteration (ms): 1234.5 | ...`
- torchtitan: `step: 10  loss:  9.8  memory: ...  tps: 6,145  ...` (tokens/s per device; older `wps:`; ANSI colours)
- DeepSpeed: `epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=25.0, CurrSamplesPerSec=25.7, ...`
  (every rank prints it)
- tqdm (HF Trainer, Lightning): `450/1000 [00:30<00:37, 14.80it/s` or `2.51s/it` (tqdm's smoothed rate)
- a caller's RE2 regex with named groups `step_ms` or `step_s`, optional `step`, `compute_ms`, `rank`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.core.errors import BadInput
from tools.core.files import open_input, read_blocks
from tools.core.ranks import rank_of_line, rank_of_path

__all__ = ["FORMATS", "RankSteps", "StepFormat", "StepReader", "compile_user_format", "read_steps"]

@dataclass(frozen=True)
class StepFormat:
    name: str
    pattern: re.Pattern[bytes] | Any  # Any: an RE2 pattern for a caller's regex
    unit: str  # what `value` is: "ms" per step, or "ms per 1k tokens" for throughput formats
    # match groups -> (rank written in the line or None, step or None, step value in ms, compute ms or None)
    decode: Callable[[tuple[bytes, ...]], tuple[int | None, int | None, float, float | None]]
    # Index of the group holding the step number (the plain format's spelling is learnt from it).
    step_group: int = 1


def _num(raw: bytes) -> float:
    """A logged number; NaN where the text only looks like one ("0.05.", "1.2-3"): that step is left out."""
    try:
        return float(raw.replace(b",", b""))
    except ValueError:
        return float("nan")


def _int(raw: bytes) -> int | None:
    """A step or rank number; None for a run of digits no counter reaches (and int() refuses past 4300)."""
    return int(raw) if len(raw) <= 18 else None


def _to_ms(value: bytes, unit: bytes) -> float:
    number = _num(value)
    return number * 1000.0 if unit in (b"s", b"sec", b"_s") else number


def _plain(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    inline, step, key_unit, value, unit, compute, compute_unit = m
    return (_int(inline) if inline else None, _int(step), _to_ms(value, key_unit or unit),
            _to_ms(compute, compute_unit) if compute else None)


def _openmmlab(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    d2_iter, epoch, inner, per_epoch, seconds = m
    if d2_iter:
        step = _int(d2_iter)
    elif epoch and per_epoch:  # the counter restarts each epoch: the run's own step is epochs done x their length
        step = (int(epoch) - 1) * int(per_epoch) + int(inner)
    else:
        step = _int(inner)
    return None, step, _num(seconds) * 1000.0, None


def _json_metrics(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    step, seconds = m
    value = _num(seconds)
    if value > 1e6:  # a wall-clock "time" (unix seconds) in a row of another writer, not the iteration's duration
        value = float("nan")
    return None, _int(step), value * 1000.0, None


def _megatron(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    step, value = m
    return None, _int(step), _num(value), None


def _per_rate(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    step, rate = m
    value = _num(rate)
    return None, _int(step), (1e6 / value if value > 0 else float("inf")), None


def _tqdm(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    step, value, unit = m
    number = _num(value)
    ms = 1000.0 / number if unit == b"it/s" and number > 0 else number * 1000.0
    return None, _int(step), ms, None


# No pattern starts with a lazy scan from the line start (quadratic in the line length): each starts at its
# own keyword; the rank prefix of a combined log is read from the line start of each match instead.
FORMATS: tuple[StepFormat, ...] = (
    # detectron2 (`iter: 1259 ... time: 0.3322  data_time: 0.0334`) and OpenMMLab's mmcv / mmengine (`Epoch [1][25/612]
    # ... time: 1.515, data_time: 0.671`, `Epoch(train) [1][10/90]`, `Iter(train) [50/80000]`): `time` is seconds per
    # iteration with no unit written, told by its `data_time` sibling (the plain format would read it as ms: this one is
    # tried first, and wins the sniffing's ties).
    # Validation lines (`Epoch(val)`) are not steps.
    StepFormat("openmmlab", re.compile(
        rb"(?:\biter:\s*(\d+)|\b(?:Epoch|Iter)(?:\(train\))?\s*(?:\[\s*(\d+)\])?\s*\[\s*(\d+)/\s*(\d+)\])"
        rb"[^\n]{0,400}?\btime: ([\d.]+)(?: \([\d.]+\))?,?\s+data(?:_time)?: [\d.]+"), "ms", _openmmlab),
    # The same frameworks' JSON metric rows (detectron2's metrics.json, Detectron's json_stats, DINOv2's
    # training_metrics.json): `"iteration": 120, "iter_time": 3.607`, `"iter": 55080, ... "time": 0.266505`, seconds.
    StepFormat("json_metrics", re.compile(
        rb'"(?:iteration|iter)": (\d+),[^\n]{0,2000}?"(?:iter_)?time": ([\d.]+(?:[eE][-+]?\d+)?)[,}]'), "ms",
        _json_metrics),
    StepFormat("plain", re.compile(
        rb"(?:\brank[ =:]*(\d+)\b[^\n]{0,40}?)?\b(?:step|iter(?:ation)?)[ =:#]*(\d+)\b"
        rb"[^\n]{0,200}?\b(?:step_?time|iter_?time|time)(_ms|_s)?[ =:]+([\d.]+) ?(ms|s|sec)?\b"
        rb"(?:[^\n]{0,100}?\bcompute(?:_time)?(?:_ms)?[ =:]+([\d.]+) ?(ms|s)?\b)?"), "ms", _plain, step_group=2),
    StepFormat("megatron", re.compile(
        rb"iteration\s+(\d+)/\s*\d+ \|[^\n]{0,300}?elapsed time per iteration \(ms\): ([\d.]+)"), "ms", _megatron),
    # Colour codes (on by default) sit right before the field names: "\x1b[31mstep: 14  ...\x1b[34mtps: 7,282".
    StepFormat("torchtitan", re.compile(
        rb"(?:\x1b\[[0-9;]*m|\b)step:\s*(\d+)\s[^\n]{0,200}?(?:\x1b\[[0-9;]*m|\b)[tw]ps:\s*([\d,]+(?:\.\d+)?)"),
        "ms per 1k tokens", _per_rate),
    StepFormat("deepspeed", re.compile(
        rb"global_step=(\d+), RunningAvgSamplesPerSec=[\d.e+-]+, CurrSamplesPerSec=([\d.e+-]+)"),
        "ms per 1k samples", _per_rate),
    StepFormat("tqdm", re.compile(rb"(\d+)/\d+ \[[\d:]+<[\d:?]+,\s*([\d.]+)(it/s|s/it)"), "ms (tqdm rate)", _tqdm),
)
_SNIFF_BYTES = 8 * 1024


def compile_user_format(regex: str) -> StepFormat:
    """A caller's RE2 regex with named groups: step_ms or step_s, and optionally step, compute_ms, rank."""
    import re2  # type: ignore[import-untyped]

    try:
        pattern = re2.compile(regex.encode())
    except re2.error as exc:
        raise BadInput(f"step_regex is not a valid RE2 regular expression: {exc}.",
                       "Example: 'step (?P<step>\\d+) took (?P<step_ms>[\\d.]+)ms'.") from exc
    # RE2 names the groups of a bytes pattern with bytes.
    group_of = {(k.decode() if isinstance(k, bytes) else k): v for k, v in pattern.groupindex.items()}
    names = set(group_of)
    if not names & {"step_ms", "step_s"}:
        raise BadInput("step_regex needs a named group step_ms or step_s.",
                       "Example: 'step (?P<step>\\d+) took (?P<step_ms>[\\d.]+)ms'.")
    order = ("rank", "step", "step_ms", "step_s", "compute_ms")
    present = [n for n in order if n in names]
    index = {n: i for i, n in enumerate(present)}

    def decode(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
        def get(name: str) -> bytes:
            return m[index[name]] if name in index else b""

        value = _num(get("step_ms")) if get("step_ms") else _num(get("step_s")) * 1000.0
        return (_int(get("rank")) if get("rank") else None, _int(get("step")) if get("step") else None, value,
                _num(get("compute_ms")) if get("compute_ms") else None)

    class _Match:
        def __init__(self, match: Any) -> None:
            self._groups = tuple(match.group(group_of[n]) or b"" for n in present)
            self._start: int = match.start()

        def groups(self) -> tuple[bytes, ...]:
            return self._groups

        def start(self) -> int:
            return self._start

    class _Named:
        """findall / finditer over the named groups only, in a fixed order."""

        def findall(self, block: bytes) -> list[tuple[bytes, ...]]:
            return [_Match(match).groups() for match in pattern.finditer(block)]

        def finditer(self, block: bytes) -> list[_Match]:
            return [_Match(match) for match in pattern.finditer(block)]

    return StepFormat("step_regex", _Named(), "ms", decode)


@dataclass
class RankSteps:
    """One rank's step lines: float64 arrays (compute empty when the lines carry none; step_numbers empty when
    the fast path did not read them: then step i is first_step + i * interval)."""

    rank: int
    source: str
    format: str
    unit: str
    interval: int = 1
    first_step: int = 0
    steps: np.ndarray = field(default_factory=lambda: np.empty(0))
    compute: np.ndarray = field(default_factory=lambda: np.empty(0))
    step_numbers: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    _chunks: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None]] = field(default_factory=list, repr=False)

    def add(self, steps: np.ndarray, compute: np.ndarray | None = None, numbers: np.ndarray | None = None) -> None:
        self._chunks.append((steps, compute, numbers))

    def finish(self) -> RankSteps:
        chunks, self._chunks = self._chunks, []
        if not chunks:
            return self
        self.steps = np.concatenate([c[0] for c in chunks])
        if all(c[1] is not None for c in chunks):
            self.compute = np.concatenate([c[1] for c in chunks if c[1] is not None])
        if all(c[2] is not None for c in chunks):
            self.step_numbers = np.concatenate([c[2] for c in chunks if c[2] is not None])
        return self


def _floats(joined: bytes, separator: bytes, expected: int) -> np.ndarray:
    """Numbers separated by `separator` -> float64, in numpy's C parser (the cost of reading big logs is here:
    about 0.25 us a number, against 0.3 for float() each); a token it cannot read ("1.2.3") makes it fall back to
    float() per token, with NaN for the unreadable ones."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = np.fromstring(joined, dtype=np.float64, sep=separator.decode("latin-1"))  # text mode
    if values.size == expected:
        return values
    tokens = joined.replace(separator, b" ").split() if separator.strip() else joined.split()
    return np.array([_float_or_nan(token) for token in tokens], dtype=np.float64)


def _float_or_nan(token: bytes) -> float:
    try:
        return float(token)
    except ValueError:
        return float("nan")


def _choose(sample: bytes, formats: tuple[StepFormat, ...]) -> StepFormat | None:
    best, count = None, 0
    for fmt in formats:
        found = len(fmt.pattern.findall(sample))
        if found > count:
            best, count = fmt, found
    return best


@dataclass(frozen=True)
class _Fast:
    """This file's own spelling of the plain format: one regex group holding "value<middle>compute"."""

    pattern: re.Pattern[bytes]
    middle: bytes  # the text between the step value and the compute value (replaced by a space)
    factor: float
    compute_factor: float
    interval: int
    first_step: int
    keyword: bytes

    def fits(self, sample: bytes) -> bool:
        """Whether every step line of `sample` has this spelling (so another rank's file can skip the sniffing)."""
        found = len(self.pattern.findall(sample))
        return found >= 3 and found == sample.count(self.keyword)


def _specialise(sample: bytes, fmt: StepFormat) -> _Fast | None:
    """A tight regex for this file's spelling of the plain format, learnt from its first step line.

    The general pattern tries many spellings at every position (about 15 MB/s); the literal text of one file's
    lines with only the numbers left open runs at about 400 MB/s. None when the file's lines do not all share
    one spelling, or the text between the numbers holds digits."""
    if fmt.name != "plain":
        return None
    generic = list(fmt.pattern.finditer(sample))
    if len(generic) < 3:
        return None
    m = generic[0]
    head = re.search(rb"(?:step|iter(?:ation)?)[ =:#]*$", sample[m.start():m.start(2)])
    if head is None:
        return None
    keyword = sample[m.start() + head.start():m.start(2)]
    middle = sample[m.end(4):m.start(6)] if m.group(6) is not None else b""
    if re.search(rb"[\d.]", middle):
        return None
    value = rb"[\d.]+" + (re.escape(middle) + rb"[\d.]+" if middle else b"")
    pattern = re.compile(re.escape(keyword) + rb"\d+" + re.escape(sample[m.end(2):m.start(4)]) + b"(" + value + b")")
    if len(pattern.findall(sample)) < 0.95 * len(generic):
        return None
    numbers = [int(g.group(2)) for g in generic[:50] if len(g.group(2)) <= 18]
    if not numbers:
        return None
    gaps = sorted(b - a for a, b in zip(numbers, numbers[1:], strict=False))
    interval = gaps[len(gaps) // 2] if gaps and gaps[len(gaps) // 2] > 0 else 1
    return _Fast(pattern, middle, 1000.0 if (m.group(3) or m.group(5) or b"") in (b"_s", b"s", b"sec") else 1.0,
                 1000.0 if m.group(7) == b"s" else 1.0, interval, numbers[0], keyword.rstrip(b" =:#"))


class StepReader:
    """Reads the step lines of many files; the spelling learnt from one rank's log is tried first on the next
    (per-rank logs of one job share it), which skips the sniffing of every format."""

    def __init__(self, user: StepFormat | None = None) -> None:
        self.user = user
        self.last: tuple[StepFormat, _Fast] | None = None

    def read(self, path: Path, display: str, deadline: float) -> list[RankSteps]:
        found, fast = read_steps(path, display, deadline, self.user, self.last)
        if fast is not None:
            self.last = fast
        return found


def read_steps(path: Path, display: str, deadline: float, user: StepFormat | None,
               hint: tuple[StepFormat, _Fast] | None = None) -> tuple[list[RankSteps], tuple[StepFormat, _Fast] | None]:
    """Per rank, the step times found in one file (a per-rank log, or a combined one with rank prefixes), and
    the spelling used when the fast path applied."""
    stream, _ = open_input(path)
    file_rank = rank_of_path(display)
    by_rank: dict[int, RankSteps] = {}
    fmt: StepFormat | None = user
    fast: _Fast | None = None
    with stream:
        for block in read_blocks(stream, deadline):
            if fmt is None and hint is not None and file_rank is not None and hint[1].fits(block[:_SNIFF_BYTES]):
                fmt, fast = hint
            if fmt is None:
                # The first lines usually tell; a long preamble (banner, config dump) needs the whole block.
                fmt = _choose(block[:_SNIFF_BYTES], FORMATS) or _choose(block, FORMATS)
                if fmt is None:
                    return [], None
                if file_rank is not None:
                    first = fmt.pattern.search(block)
                    start = block.rfind(b"\n", 0, first.start()) + 1 if first else 0
                    fast = _specialise(block[start:start + _SNIFF_BYTES], fmt)
            if fast is not None and file_rank is not None:
                _append_fast(by_rank, file_rank, display, fmt, fast, block)
                continue
            if file_rank is not None:
                matches = fmt.pattern.findall(block)
                if matches:
                    decoded = list(map(fmt.decode, matches))
                    _append(by_rank, file_rank, display, fmt, decoded)
                continue
            # A combined log: each line says its rank (a torchrun prefix, or "rank R" in the text).
            per_rank: dict[int, list[tuple[int | None, int | None, float, float | None]]] = {}
            for match in fmt.pattern.finditer(block):
                item = fmt.decode(match.groups())
                start = block.rfind(b"\n", 0, match.start()) + 1
                rank = rank_of_line(block[start:start + 32])
                if rank is None:
                    rank = item[0] if item[0] is not None else 0
                per_rank.setdefault(rank, []).append(item)
            for rank, items in per_rank.items():
                _append(by_rank, rank, display, fmt, items)
    return [steps.finish() for steps in by_rank.values()], ((fmt, fast) if fmt is not None and fast is not None
                                                            else None)


def _append_fast(by_rank: dict[int, RankSteps], rank: int, display: str, fmt: StepFormat, fast: _Fast,
                 block: bytes) -> None:
    steps = by_rank.get(rank)
    if steps is None:
        steps = by_rank[rank] = RankSteps(rank, display, fmt.name, fmt.unit, fast.interval, fast.first_step)
    matches = fast.pattern.findall(block)
    if not matches:
        return
    # Joined with the text that stands between the two numbers of a line, all numbers are separated alike.
    separator = fast.middle or b" "
    numbers = _floats(separator.join(matches), separator, len(matches) * (2 if fast.middle else 1))
    if fast.middle and numbers.size == 2 * len(matches):
        pairs = numbers.reshape(-1, 2)
        steps.add(pairs[:, 0] * fast.factor, pairs[:, 1] * fast.compute_factor)
    else:
        steps.add(numbers * fast.factor)


def _append(by_rank: dict[int, RankSteps], rank: int, display: str, fmt: StepFormat,
            items: list[tuple[int | None, int | None, float, float | None]]) -> None:
    steps = by_rank.get(rank)
    if steps is None:
        steps = by_rank[rank] = RankSteps(rank, display, fmt.name, fmt.unit)
    _, numbers, values, computes = zip(*items, strict=True)
    compute = (np.array([c if c is not None else np.nan for c in computes])
               if any(c is not None for c in computes) else None)
    steps.add(np.array(values, dtype=np.float64), compute,
              np.array([n if n is not None else -1 for n in numbers], dtype=np.int64))
