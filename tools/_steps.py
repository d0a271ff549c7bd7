"""The one reader of per-step timings in training logs.

Each known format is a bytes regex applied with `findall` to whole blocks of the file (C speed: no Python
loop per line), chosen per file by sniffing its first block. A match yields the step number, the step time
in milliseconds (or the inverse of a throughput, for frameworks that log only tokens/s), and a compute-only
time where the line carries one. The rank comes from the file name or, in combined logs, from the line
prefix (`[rank3]:`, `[default3]:`, `3: `) or an inline `rank 3`.

Formats (sources in tests/data/logs/steps/PROVENANCE.md):
- plain: `rank 2 step 15 time 37.7 ms (compute 12.9 ms, ...)`, `step=15 step_time_ms=37.7`, `step 15 ... time: 0.12s`
- megatron: `iteration      100/   10000 | ... | elapsed time per iteration (ms): 1234.5 | ...`
- torchtitan: `step: 10  loss:  9.8  memory: ...  tps: 6,145  ...` (tokens/s per device; older `wps:`; ANSI colours)
- DeepSpeed: `epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=25.0, CurrSamplesPerSec=25.7, ...`
  (every rank prints it)
- tqdm (HF Trainer, Lightning): `450/1000 [00:30<00:37, 14.80it/s` or `2.51s/it` (tqdm's smoothed rate)
- a caller's RE2 regex with named groups `step_ms` or `step_s`, optional `step`, `compute_ms`, `rank`.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools._logfiles import _blocks, _open, rank_of_path
from tools.errors import BadInput

__all__ = ["FORMATS", "RankSteps", "StepFormat", "compile_user_format", "read_steps"]

_RANK_PREFIX = rb"(?:\[(?:rank|default)(\d+)\]:\s*|(\d+): )?"


@dataclass(frozen=True)
class StepFormat:
    name: str
    pattern: re.Pattern[bytes] | Any  # Any: an RE2 pattern for a caller's regex
    unit: str  # what `value` is: "ms" per step, or "ms per 1k tokens" for throughput formats
    # match tuple -> (line rank or None, step or None, step value in ms, compute ms or None)
    decode: Callable[[tuple[bytes, ...]], tuple[int | None, int | None, float, float | None]]


def _num(raw: bytes) -> float:
    return float(raw.replace(b",", b""))


def _to_ms(value: bytes, unit: bytes) -> float:
    number = _num(value)
    return number * 1000.0 if unit in (b"s", b"sec", b"_s") else number


def _prefix_rank(a: bytes, b: bytes, inline: bytes = b"") -> int | None:
    raw = a or b or inline
    return int(raw) if raw else None


def _plain(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    pa, pb, inline, step, key_unit, value, unit, compute, compute_unit = m
    ms = _to_ms(value, key_unit or unit)
    return (_prefix_rank(pa, pb, inline), int(step), ms,
            _to_ms(compute, compute_unit) if compute else None)


def _megatron(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    pa, pb, step, value = m
    return _prefix_rank(pa, pb), int(step), _num(value), None


def _torchtitan(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    pa, pb, step, tps = m
    rate = _num(tps)
    return _prefix_rank(pa, pb), int(step), (1e6 / rate if rate > 0 else float("inf")), None


def _deepspeed(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    pa, pb, step, rate = m
    value = _num(rate)
    return _prefix_rank(pa, pb), int(step), (1e6 / value if value > 0 else float("inf")), None


def _tqdm(m: tuple[bytes, ...]) -> tuple[int | None, int | None, float, float | None]:
    pa, pb, step, value, unit = m
    number = _num(value)
    ms = 1000.0 / number if unit == b"it/s" and number > 0 else number * 1000.0
    return _prefix_rank(pa, pb), int(step), ms, None


FORMATS: tuple[StepFormat, ...] = (
    StepFormat("plain", re.compile(
        rb"(?m)^" + _RANK_PREFIX + rb"[^\n]*?(?:\brank[ =:]*(\d+)\b[^\n]*?)?\b(?:step|iter(?:ation)?)[ =:#]*(\d+)\b"
        rb"[^\n]*?\b(?:step_?time|iter_?time|time)(_ms|_s)?[ =:]+([\d.]+) ?(ms|s|sec)?\b"
        rb"(?:[^\n]*?\bcompute(?:_time)?(?:_ms)?[ =:]+([\d.]+) ?(ms|s)?\b)?"), "ms", _plain),
    StepFormat("megatron", re.compile(
        rb"(?m)^" + _RANK_PREFIX + rb"[^\n]*?iteration\s+(\d+)/\s*\d+ \|[^\n]*?elapsed time per iteration \(ms\): "
        rb"([\d.]+)"), "ms", _megatron),
    # Colour codes (on by default) sit right before the field names: "\x1b[31mstep: 14  ...\x1b[34mtps: 7,282".
    StepFormat("torchtitan", re.compile(
        rb"(?m)^" + _RANK_PREFIX + rb"[^\n]*?(?:\x1b\[[0-9;]*m|\b)step:\s*(\d+)\s[^\n]*?(?:\x1b\[[0-9;]*m|\b)"
        rb"[tw]ps:\s*([\d,]+(?:\.\d+)?)"), "ms per 1k tokens", _torchtitan),
    StepFormat("deepspeed", re.compile(
        rb"(?m)^" + _RANK_PREFIX + rb"[^\n]*?global_step=(\d+), RunningAvgSamplesPerSec=[\d.e+-]+, "
        rb"CurrSamplesPerSec=([\d.e+-]+)"), "ms per 1k samples", _deepspeed),
    StepFormat("tqdm", re.compile(
        _RANK_PREFIX + rb"[^\r\n]*?\b(\d+)/\d+ \[[\d:]+<[\d:?]+,\s*([\d.]+)(it/s|s/it)"), "ms (tqdm rate)", _tqdm),
)
_SNIFF_BYTES = 256 * 1024


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
        return (int(get("rank")) if get("rank") else None, int(get("step")) if get("step") else None, value,
                _num(get("compute_ms")) if get("compute_ms") else None)

    class _Named:
        """findall over named groups only, in a fixed order."""

        def findall(self, block: bytes) -> list[tuple[bytes, ...]]:
            return [tuple(match.group(group_of[n]) or b"" for n in present) for match in pattern.finditer(block)]

    return StepFormat("step_regex", _Named(), "ms", decode)


@dataclass
class RankSteps:
    rank: int
    source: str
    format: str
    unit: str
    steps: array[float] = field(default_factory=lambda: array("d"))
    step_numbers: array[int] = field(default_factory=lambda: array("q"))
    compute: array[float] = field(default_factory=lambda: array("d"))


def _choose(sample: bytes, formats: tuple[StepFormat, ...]) -> StepFormat | None:
    best, count = None, 0
    for fmt in formats:
        found = len(fmt.pattern.findall(sample))
        if found > count:
            best, count = fmt, found
    return best


def read_steps(path: Path, display: str, deadline: float, user: StepFormat | None) -> list[RankSteps]:
    """Per rank, the step times found in one file (a per-rank log, or a combined one with rank prefixes)."""
    stream, _ = _open(path)
    file_rank = rank_of_path(display)
    by_rank: dict[int, RankSteps] = {}
    fmt: StepFormat | None = user
    with stream:
        for block in _blocks(stream, deadline):
            if fmt is None:
                fmt = _choose(block[:_SNIFF_BYTES], FORMATS)
                if fmt is None:
                    return []
            matches = fmt.pattern.findall(block)
            if not matches:
                continue
            decoded = list(map(fmt.decode, matches))
            if file_rank is not None and all(d[0] is None for d in decoded[:1]):
                _append(by_rank, file_rank, display, fmt, decoded)
                continue
            per_rank: dict[int, list[tuple[int | None, int | None, float, float | None]]] = {}
            for item in decoded:
                rank = item[0] if item[0] is not None else (file_rank if file_rank is not None else 0)
                per_rank.setdefault(rank, []).append(item)
            for rank, items in per_rank.items():
                _append(by_rank, rank, display, fmt, items)
    return list(by_rank.values())


def _append(by_rank: dict[int, RankSteps], rank: int, display: str, fmt: StepFormat,
            items: list[tuple[int | None, int | None, float, float | None]]) -> None:
    steps = by_rank.get(rank)
    if steps is None:
        steps = by_rank[rank] = RankSteps(rank, display, fmt.name, fmt.unit)
    _, numbers, values, computes = zip(*items, strict=True)
    steps.steps.extend(values)
    steps.step_numbers.extend(n if n is not None else -1 for n in numbers)
    if any(c is not None for c in computes):
        steps.compute.extend(c if c is not None else float("nan") for c in computes)
