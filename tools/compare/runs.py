"""compare_runs: did the fix work? The same measurements on the run before and the run after a change.

The SOP ends every branch the same way: fix the cause, measure again, compare like with like. BEFORE and AFTER
are the same kind of input, told from the files themselves: two profiler traces (files or folders of per-rank
traces, measured by summarize_trace's own breakdown) or two sets of step-time logs (read by the one step-line
reader, tools/stragglers/steps.py; the straggler verdict is find_stragglers' own) or two inference-server /metrics pages
(the one Prometheus reader, tools/serving/prometheus.py, and inference_metrics' own verdict on each).

Honest statistics: the steps compared are steady-state steps (warm-up left out; for traces also the last
ProfilerStep, as HTA does), per step the median over ranks; each side says how many it has. A change counts only
when the two sets of step times differ beyond their step-to-step noise (two-sided Mann-Whitney U test, exact for
small samples; for /metrics, on the end-to-end latency histogram with each bucket a group of ties) AND by at least
COMPARE_MIN_CHANGE_PCT; otherwise the answer is "no significant change", not a factor. Causes are compared in
milliseconds per step (a share of a shorter step grows even when nothing changed) and labelled resolved / reduced /
unchanged / increased / new. SOP: the last step (verification) of a branch.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import numpy as np
from pydantic import BaseModel, Field

from sop import branches, tool_call
from tools.core.context import ToolContext
from tools.core.errors import BadInput
from tools.core.files import expand_inputs, open_input
from tools.core.limits import (
    COMPARE_EXACT_MAX_STEPS,
    COMPARE_MAX_LOG_FILES,
    COMPARE_MAX_SIDE_INPUTS,
    COMPARE_MAX_WARMUP_STEPS,
    COMPARE_MIN_STEPS,
    COMPARE_SNIFF_BYTES,
    COMPARE_TOP_KERNELS,
    LOG_MAX_PATTERN_CHARS,
)
from tools.core.models import Coverage, InputModel, NextStep, PathArg, Severity, Table, ToolResult, cell
from tools.core.thresholds import (
    COMPARE_CAUSE_ABS_PCT,
    COMPARE_CAUSE_REL,
    COMPARE_MIN_CHANGE_PCT,
    COMPARE_P_VALUE,
    COMPARE_RESOLVED_FRACTION,
)
from tools.stragglers import FindStragglersResult, RankSteps, StepReader, compile_user_format, stragglers_in_steps
from tools.traces import (
    TraceBreakdown,
    branch_of_cause,
    breakdown,
    is_nsys_export,
    short_name,
    trace_files,
)

__all__ = ["CompareRunsInput", "CompareRunsResult", "compare_runs", "mann_whitney_binned_p", "mann_whitney_p"]

InputKind = Literal["traces", "logs", "inference"]
# cannot_tell: a side has no (or too few) steps to test; not_comparable: the two sides are different kinds of input
# or measure different things. Neither is "no significant change": nothing was shown either way.
Verdict = Literal["improved", "regressed", "no_significant_change", "cannot_tell", "not_comparable"]
Status = Literal["resolved", "reduced", "unchanged", "increased", "new"]
Side = Literal["before", "after"]

_GLOB_CHARS = frozenset("*?[")
# A folder holding one of these is a folder of traces (not ".gz" alone: rotated logs are gzipped too).
_TRACE_NAMES = (".json", ".json.gz", ".sqlite")
_METRICS_LINE = re.compile(rb"^(?:# (?:HELP|TYPE) \S+|(?:vllm|sglang)[:_][A-Za-z_:]+[{ ])", re.MULTILINE)
# What a log's step value is per unit (tools/stragglers/steps.py StepFormat.unit) -> (throughput unit, value per ms^-1).
_THROUGHPUT = {"ms": ("steps/s", 1e3), "ms (tqdm rate)": ("steps/s", 1e3), "ms per 1k tokens": ("tokens/s", 1e6),
               "ms per 1k samples": ("samples/s", 1e6)}
_NO_CAUSE_FIX = ("The GPU is busy: make the kernels faster (mixed precision and tensor cores, torch.compile, a larger "
                 "batch) or look at the top kernels.")


class CompareRunsInput(InputModel):
    before: list[PathArg] = Field(min_length=1, max_length=COMPARE_MAX_SIDE_INPUTS, description="The baseline run, "
                                  "as a list like the other tools' paths (one string is taken as a list of one): "
                                  "profiler traces (files, or a folder of per-rank traces) or its step-time logs "
                                  "(files, globs such as 'before/rank*.log', or a folder), or one /metrics page.")
    after: list[PathArg] = Field(min_length=1, max_length=COMPARE_MAX_SIDE_INPUTS, description="The run after the "
                                 "change: the same kind of input as before.")
    warmup_steps: int | None = Field(default=None, ge=0, le=COMPARE_MAX_WARMUP_STEPS, description="Leading steps of "
                                     "each rank left out as warm-up (default: 10%, at least 1 when a rank has 3 or "
                                     "more, at most 50).")
    step_regex: str | None = Field(default=None, max_length=LOG_MAX_PATTERN_CHARS, description="Logs only: your own "
                                   "RE2 regex for the step lines, with named groups step_ms or step_s (and optionally "
                                   "step, rank), as find_stragglers takes it.")

    cli_positional = ("before", "after")


class StepTimes(BaseModel):
    before: float | None = Field(description="Median steady-state step time of the baseline, ms (per 1k tokens or "
                                 "samples for throughput logs).")
    after: float | None
    before_p90: float | None
    after_p90: float | None


class RunSide(BaseModel):
    run: Side
    source: str
    ranks: int
    steps: int = Field(description="Steady-state steps compared (per step the median over ranks).")
    warmup_dropped: int = Field(description="Leading steps of each rank left out.")
    median_ms: float | None
    p90_ms: float | None
    throughput: float | None
    throughput_unit: str


class MetricChange(BaseModel):
    metric: str
    unit: str
    before: float | None
    after: float | None


class CauseChange(BaseModel):
    kind: str
    before_pct: float = Field(description="Share of the baseline's step time.")
    after_pct: float
    before_ms: float = Field(description="Time per step it takes (share x mean step).")
    after_ms: float
    status: Status
    evidence: str


class KernelChange(BaseModel):
    name: str
    kind: str
    before_ms: float = Field(description="Total time per profiled step, all ranks averaged.")
    after_ms: float
    change_ms: float


class RankSpread(BaseModel):
    run: Side
    ranks: int
    spread_pct: float | None = Field(description="(slowest - fastest rank median) / median rank, in %.")
    basis: Literal["compute", "step"] = Field(description="Which per-rank median the spread is of: compute time where "
                                              "the logs carry it (step times of synchronous ranks are all alike).")
    slowest_rank: int | None
    straggler: str = Field(description="find_stragglers' verdict: straggler, none or inconclusive.")
    flagged: list[int]


class LatencyChange(BaseModel):
    metric: Literal["ttft", "itl", "e2e"]
    quantile: Literal["p50", "p90", "p99"]
    before_s: float | None
    after_s: float | None
    at_least: bool = Field(description="A side's quantile fell past the last bucket: it is at least the value shown.")


class NowDominant(BaseModel):
    kind: str = Field(description="The cause that takes most of the step now (or compute when none stands out).")
    share_pct: float | None
    evidence: str
    fix: str
    branch: str


class CompareRunsResult(ToolResult):
    kind: Literal["traces", "logs", "inference"]
    verdict: Verdict
    speedup: float | None = Field(description="after/before throughput factor (before step / after step); null when "
                                  "the difference is within the run-to-run spread.")
    measured_ratio: float | None = Field(description="before / after median step, significant or not.")
    p_value: float | None = Field(description="Two-sided Mann-Whitney U test of the two sets of steps.")
    step_time_ms: StepTimes
    runs: list[RunSide]
    breakdown: list[MetricChange] = Field(description="Traces: the breakdown side by side (median over ranks).")
    causes: list[CauseChange] = Field(description="Traces: each cause of GPU idle before and after.")
    rank_spread: list[RankSpread] = Field(description="Logs: per-rank spread and straggler, before and after.")
    kernels: list[KernelChange] = Field(description="Traces: the kernels whose time changed most.")
    latency: list[LatencyChange] = Field(default_factory=list, description="Inference: TTFT / ITL / e2e quantiles "
                                         "before and after, seconds.")
    inference_verdicts: list[str] = Field(default_factory=list, description="Inference: inference_metrics' verdict "
                                          "before and after.")
    now_dominant: NowDominant | None

    narrow_hint = "compare one rank's traces or logs"

    def tables(self) -> list[Table]:
        return [
            Table("Runs (steady-state steps)", ["run", "ranks", "steps", "warm-up left out", "median ms", "p90 ms",
                                                "throughput", "source"],
                  [[r.run, str(r.ranks), str(r.steps), str(r.warmup_dropped), cell(r.median_ms), cell(r.p90_ms),
                    f"{_fmt(r.throughput)} {r.throughput_unit}", r.source] for r in self.runs], "runs"),
            Table("Breakdown", ["metric", "unit", "before", "after"],
                  [[m.metric, m.unit, cell(m.before), cell(m.after)] for m in self.breakdown], "breakdown"),
            Table("Causes (ms per step)", ["cause", "status", "before %", "after %", "before ms", "after ms"],
                  [[c.kind, c.status, cell(c.before_pct), cell(c.after_pct), cell(c.before_ms), cell(c.after_ms)]
                   for c in self.causes], "causes"),
            Table("Per-rank spread", ["run", "ranks", "spread %", "of", "slowest rank", "straggler", "flagged"],
                  [[s.run, str(s.ranks), cell(s.spread_pct), s.basis, cell(s.slowest_rank), s.straggler,
                    ",".join(map(str, s.flagged)) or "-"] for s in self.rank_spread], "rank_spread"),
            Table("Latency (s)", ["metric", "quantile", "before", "after"],
                  [[q.metric, q.quantile, _seconds(q.before_s, q.at_least), _seconds(q.after_s, q.at_least)]
                   for q in self.latency], "latency"),
            Table("Kernels that changed most (ms per step)", ["kernel", "kind", "before", "after", "change"],
                  [[k.name, k.kind, f"{k.before_ms:.2f}", f"{k.after_ms:.2f}", f"{k.change_ms:+.2f}"]
                   for k in self.kernels], "kernels"),
        ]


def _seconds(value: float | None, at_least: bool) -> str:
    return "-" if value is None else (">= " if at_least else "") + f"{value:.3g}"


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


# ------------------------------------------------------------------------------------------------- statistics


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks (ties get their average rank), and the size of each group of ties."""
    order = np.argsort(values, kind="mergesort")
    _, first, counts = np.unique(values[order], return_index=True, return_counts=True)
    ranks = np.empty(values.size)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    return ranks, counts


def _u_counts(n1: int, n2: int) -> list[int]:
    """How many of the C(n1+n2, n1) orderings give each value of U: the coefficients of the Gaussian binomial
    [n1+n2 choose n1]_q, built as prod_i (1 - q^(n2+i)) / (1 - q^i) in exact integers."""
    n, k = n1 + n2, min(n1, n2)
    poly = [1]
    for i in range(1, k + 1):
        shift = n - k + i
        grown = poly + [0] * shift
        for j, coefficient in enumerate(poly):
            grown[j + shift] -= coefficient
        for j in range(i, len(grown)):  # division by (1 - q^i): r[j] = g[j] + r[j - i]
            grown[j] += grown[j - i]
        poly = grown[: len(grown) - i]
    return poly


def mann_whitney_p(before: np.ndarray, after: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test: exact without ties up to COMPARE_EXACT_MAX_STEPS a side, else
    the normal approximation with tie and continuity corrections."""
    n1, n2 = int(before.size), int(after.size)
    ranks, ties = _average_ranks(np.concatenate([before, after]))
    u1 = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2.0
    if int(ties.max()) == 1 and max(n1, n2) <= COMPARE_EXACT_MAX_STEPS:
        u = int(round(min(u1, n1 * n2 - u1)))
        tail = sum(_u_counts(n1, n2)[: u + 1])
        return min(1.0, 2.0 * tail / math.comb(n1 + n2, n1))
    return _normal_p(u1, n1, n2, float((ties**3 - ties).sum()))


def _normal_p(u1: float, n1: float, n2: float, tie_term: float) -> float:
    """Two-sided p of U under the normal approximation, with tie and continuity corrections."""
    n = n1 + n2
    if n1 <= 0 or n2 <= 0 or n < 2:
        return 1.0
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = max(abs(u1 - n1 * n2 / 2.0) - 0.5, 0.0) / math.sqrt(variance)
    return min(1.0, math.erfc(z / math.sqrt(2.0)))


def mann_whitney_binned_p(before: np.ndarray, after: np.ndarray) -> float:
    """The same test on two histograms with the same buckets (counts per bucket): the observations of a bucket are
    ties, which makes the test conservative (it cannot see differences inside a bucket)."""
    pooled = before + after
    below = np.concatenate([[0.0], np.cumsum(pooled)[:-1]])
    n1, n2 = float(before.sum()), float(after.sum())
    u1 = float((before * (below + (pooled + 1) / 2.0)).sum()) - n1 * (n1 + 1) / 2.0
    return _normal_p(u1, n1, n2, float((pooled**3 - pooled).sum()))


def _warmup(count: int, given: int | None) -> int:
    """find_stragglers' rule (10%, at least 1, at most 50), but never below COMPARE_MIN_STEPS left."""
    if given is not None:
        return min(given, count)
    return min(COMPARE_MAX_WARMUP_STEPS, max(1, count // 10)) if count >= COMPARE_MIN_STEPS else 0


@dataclass
class _Run:
    """One side, reduced to what is compared: the job's step time per steady-state step."""

    source: str
    ranks: int
    series: np.ndarray
    warmup: int
    unit: str = "ms"
    trace: TraceBreakdown | None = None
    stragglers: FindStragglersResult | None = None
    notes: list[str] = field(default_factory=list)
    files: int = 0  # input files of this side
    unread: list[str] = field(default_factory=list)  # of them, those that held nothing this side measures

    def median(self) -> float | None:
        return float(np.median(self.series)) if self.series.size else None

    def p90(self) -> float | None:
        return float(np.percentile(self.series, 90)) if self.series.size else None


def _job_series(per_rank: list[np.ndarray], warmup: int | None) -> tuple[np.ndarray, int]:
    """Per steady-state step, the median over ranks of its time (ranks aligned by position, cut to the shortest)."""
    clean = [a[np.isfinite(a)] for a in per_rank if a.size]
    if not clean:
        return np.empty(0), 0
    skip = _warmup(min(a.size for a in clean), warmup)
    kept = [a[skip:] for a in clean]
    length = min(a.size for a in kept)
    if length == 0:
        return np.empty(0), skip
    return np.median(np.stack([a[:length] for a in kept]), axis=0), skip


@dataclass
class _Outcome:
    verdict: Verdict
    ratio: float | None
    p_value: float | None
    change: str  # the sentence that says it


def _significance(before: _Run, after: _Run, unit: str, per: float) -> _Outcome:
    b, a = before.median(), after.median()
    if b is None or a is None or a <= 0:
        return _Outcome("cannot_tell", None, None, "No step time on one side: nothing to compare.")
    ratio = b / a
    counts = f"{before.series.size} vs {after.series.size} steady-state steps"
    throughput = f"{_fmt(per / b)} -> {_fmt(per / a)} {unit}"
    if min(before.series.size, after.series.size) < COMPARE_MIN_STEPS:
        return _Outcome("cannot_tell", ratio, None,
                        f"Cannot tell whether it changed: {counts} (at least {COMPARE_MIN_STEPS} a side are "
                        f"needed for a test; median step {b:.1f} -> {a:.1f} ms).")
    p = mann_whitney_p(before.series, after.series)
    change_pct = abs(ratio - 1.0) * 100.0
    if p < COMPARE_P_VALUE and change_pct >= COMPARE_MIN_CHANGE_PCT:
        verdict: Verdict = "improved" if ratio > 1 else "regressed"
        return _Outcome(verdict, ratio, p, f"{verdict.capitalize()}: throughput x{ratio:.2f} ({throughput}; median "
                        f"step {b:.1f} -> {a:.1f} ms over {counts}, Mann-Whitney {_p_text(p)}).")
    why = (_p_text(p) if p >= COMPARE_P_VALUE else f"a {change_pct:.1f}% shift, below {COMPARE_MIN_CHANGE_PCT:g}%")
    return _Outcome("no_significant_change", ratio, p, f"No significant change: median step {b:.1f} -> {a:.1f} ms is "
                    f"within the run-to-run spread ({why}; {counts}).")


# -------------------------------------------------------------------------------------------- input detection


def _sniff(path: Path) -> InputKind:
    if is_nsys_export(path):
        return "traces"  # an Nsight Systems SQLite export
    stream, _ = open_input(path)
    with stream:
        head = stream.read(COMPARE_SNIFF_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] in (b"{", b"["):
        return "traces"
    if _METRICS_LINE.search(head):
        return "inference"
    return "logs"


@dataclass
class _Input:
    kind: InputKind
    files: list[Path]
    names: list[str]


def _text(side: list[str]) -> str:
    """One side's inputs as the caller named them, for sources and messages."""
    return ", ".join(side)


def _resolve(side: list[str], ctx: ToolContext) -> _Input:
    """The files of one side (each of its paths, globs or folders) and what they are, told from their content; the
    inputs of one side are one run, so they must all be of one kind."""
    parts = [_resolve_one(raw, ctx) for raw in side]
    kinds = sorted({part.kind for part in parts})
    if len(kinds) > 1:
        raise BadInput(f"the inputs {_text(side)!r} of one side are of different kinds ({', '.join(kinds)}).",
                       "Give each side inputs of one kind: traces, step-time logs or one /metrics page.")
    if parts[0].kind == "inference" and len(side) > 1:
        raise BadInput(f"{_text(side)!r}: a side of an inference comparison is one /metrics page.",
                       "Pass one saved page (or URL) per side.")
    named = dict(pair for part in parts for pair in zip(part.files, part.names, strict=True))
    return _Input(parts[0].kind, list(named), list(named.values()))


def _resolve_one(raw: str, ctx: ToolContext) -> _Input:
    """The files of one input and what they are, told from their content (not their names)."""
    if any(ch in _GLOB_CHARS for ch in raw):
        found = expand_inputs([raw], ctx.roots, COMPARE_MAX_LOG_FILES)
        files, names = [f.path for f in found], [f.name for f in found]
    else:
        path = ctx.path(raw)
        if path.is_dir():
            if any(p.is_file() and p.name.endswith(_TRACE_NAMES) for p in path.iterdir()):
                files = trace_files(path, ctx.roots)
                names = [f.name for f in files]
            else:
                found = expand_inputs([str(path / "*")], ctx.roots, COMPARE_MAX_LOG_FILES)
                files, names = [f.path for f in found], [f.name for f in found]
        else:
            files, names = [path], [raw]
    if not files:
        raise BadInput(f"no file in {raw!r}.", "Pass a trace, a folder of traces, or step-time logs.")
    return _Input(_sniff(files[0]), files, names)


# ----------------------------------------------------------------------------------------------------- traces


def _trace_run(files: list[Path], source: str, roots: tuple[Path, ...], warmup: int | None, deadline: float) -> _Run:
    found = breakdown(files, roots, False, deadline)
    per_rank: dict[int, list[float]] = {}
    for step in found.steps:
        per_rank.setdefault(step.rank, []).append(step.step_time_ms)
    series, skip = _job_series([np.array(v) for v in per_rank.values()], warmup)
    return _Run(source, len(found.ranks), series, skip, trace=found, files=len(files))


def _median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def _breakdown_rows(before: TraceBreakdown, after: TraceBreakdown) -> list[MetricChange]:
    def row(metric: str, unit: str, pick: str) -> MetricChange:
        return MetricChange(metric=metric, unit=unit, before=_median_of([getattr(r, pick) for r in before.ranks]),
                            after=_median_of([getattr(r, pick) for r in after.ranks]))

    busy = row("GPU busy", "% of step", "gpu_busy_pct")
    idle = MetricChange(metric="GPU idle", unit="% of step", before=None if busy.before is None else
                        round(100 - busy.before, 2), after=None if busy.after is None else round(100 - busy.after, 2))
    return [busy, row("compute (HTA)", "% of GPU-active time", "compute_pct"),
            row("communication", "% of step", "comm_pct"),
            row("exposed communication", "% of step", "exposed_comm_pct"), idle,
            row("data wait", "% of step", "data_wait_pct")]


def _mean_step_ms(found: TraceBreakdown) -> float:
    times = [s.step_time_ms for s in found.steps]
    return statistics.fmean(times) if times else 0.0


def _status(before_ms: float, after_ms: float, base_step_ms: float) -> Status:
    floor = COMPARE_CAUSE_ABS_PCT / 100.0 * base_step_ms
    tolerance = max(COMPARE_CAUSE_REL * max(before_ms, after_ms), floor)
    change = after_ms - before_ms
    if abs(change) <= tolerance:
        return "unchanged"
    if change < 0:
        return "resolved" if after_ms <= COMPARE_RESOLVED_FRACTION * before_ms or after_ms < floor else "reduced"
    return "new" if before_ms < floor else "increased"


def _cause_rows(before: TraceBreakdown, after: TraceBreakdown, base_step_ms: float) -> list[CauseChange]:
    first = {c.kind: c for c in before.causes}
    second = {c.kind: c for c in after.causes}
    mean_before, mean_after = _mean_step_ms(before), _mean_step_ms(after)
    rows = []
    for kind in dict.fromkeys([*first, *second]):
        b, a = first.get(kind), second.get(kind)
        before_pct, after_pct = (b.share_pct if b else 0.0), (a.share_pct if a else 0.0)
        before_ms, after_ms = before_pct / 100 * mean_before, after_pct / 100 * mean_after
        evidence = a.evidence if a else b.evidence if b else ""
        rows.append(CauseChange(kind=kind, before_pct=before_pct, after_pct=after_pct, before_ms=round(before_ms, 2),
                                after_ms=round(after_ms, 2), status=_status(before_ms, after_ms, base_step_ms),
                                evidence=evidence))
    order = {"resolved": 0, "new": 1, "increased": 2, "reduced": 3, "unchanged": 4}
    return sorted(rows, key=lambda r: (order[r.status], -abs(r.after_ms - r.before_ms)))


def _kernel_rows(before: TraceBreakdown, after: TraceBreakdown) -> list[KernelChange]:
    per_before, per_after = max(before.profiled_steps, 1), max(after.profiled_steps, 1)
    rows = []
    for name in set(before.kernels) | set(after.kernels):
        b, a = before.kernels.get(name), after.kernels.get(name)
        before_ms = (b[1] / 1000 / per_before) if b else 0.0
        after_ms = (a[1] / 1000 / per_after) if a else 0.0
        kind = a[2] if a else b[2] if b else ""
        if before_ms != after_ms:
            rows.append(KernelChange(name=short_name(name), kind=kind,
                                     before_ms=round(before_ms, 3), after_ms=round(after_ms, 3),
                                     change_ms=round(after_ms - before_ms, 3)))
    rows.sort(key=lambda k: -abs(k.change_ms))
    return rows[:COMPARE_TOP_KERNELS]


def _dominant(after: TraceBreakdown) -> NowDominant:
    if after.causes:
        lead = after.causes[0]
        where = "" if lead.rank is None else f" (worst on rank {lead.rank})"
        return NowDominant(kind=lead.kind, share_pct=lead.share_pct, evidence=lead.evidence + where, fix=lead.fix,
                           branch=branch_of_cause(lead.kind))
    busy = _median_of([r.gpu_busy_pct for r in after.ranks])
    top = max(after.kernels.items(), key=lambda item: item[1][1], default=None)
    evidence = f"GPU busy {cell(busy)}% of the step" + (f"; top kernel {short_name(top[0])}" if top else "")
    return NowDominant(kind="compute", share_pct=busy, evidence=evidence, fix=_NO_CAUSE_FIX,
                       branch="gpu_utilization_low")


def _step_of(branch: str, tools: tuple[str, ...]) -> str | None:
    """The id of the branch's first step that calls one of `tools`."""
    return next((s.id for s in branches()[branch].steps if s.tool in tools), None)


# ------------------------------------------------------------------------------------------------------- logs


def _log_run(files: list[Path], names: list[str], source: str, step_regex: str | None, warmup: int | None,
             deadline: float) -> _Run:
    reader = StepReader(compile_user_format(step_regex) if step_regex else None)
    by_rank: dict[int, RankSteps] = {}
    unread: list[str] = []
    for path, name in zip(files, names, strict=True):
        found = reader.read(path, name, deadline)
        if not found:
            unread.append(name)
        for steps in found:
            by_rank.setdefault(steps.rank, steps)  # a rank met twice: the first file wins, as in find_stragglers
    if not by_rank:  # read, and no step line in it: this side cannot be measured (the caller says so)
        return _Run(source, 0, np.empty(0), 0, files=len(files), unread=unread)
    units = {s.unit for s in by_rank.values()}
    if len(units) > 1:
        raise BadInput(f"{source} mixes step-time formats ({', '.join(sorted(units))}).",
                       "Pass the logs of one job, written alike.")
    series, skip = _job_series([s.steps for s in by_rank.values()], warmup)
    return _Run(source, len(by_rank), series, skip, unit=units.pop(),
                stragglers=stragglers_in_steps(list(by_rank.values()), warmup), files=len(files), unread=unread)


def _spread(run: Side, result: FindStragglersResult) -> RankSpread:
    computed = [r for r in result.ranks if r.compute_ms is not None]
    if len(computed) > 1:
        slowest = max(computed, key=lambda r: r.compute_ms or 0.0)
        values = [r.compute_ms or 0.0 for r in computed]
        median = statistics.median(values)
        spread = 100.0 * (max(values) - min(values)) / median if median > 0 else None
        return RankSpread(run=run, ranks=result.ranks_summary.count, spread_pct=_round(spread), basis="compute",
                          slowest_rank=slowest.rank, straggler=result.verdict, flagged=[f.rank for f in result.flagged])
    timed = [r for r in result.ranks if r.median_step_ms is not None]
    slowest_rank = max(timed, key=lambda r: r.median_step_ms or 0.0).rank if len(timed) > 1 else None
    return RankSpread(run=run, ranks=result.ranks_summary.count, spread_pct=_round(result.ranks_summary.spread_pct),
                      basis="step", slowest_rank=slowest_rank, straggler=result.verdict,
                      flagged=[f.rank for f in result.flagged])


def _straggler_sentence(before: RankSpread, after: RankSpread) -> str | None:
    if before.ranks < 2 and after.ranks < 2:
        return None
    spread = f"per-rank {after.basis} spread {cell(before.spread_pct)}% -> {cell(after.spread_pct)}%"
    if before.flagged and not after.flagged:
        return f"The straggler is gone: rank(s) {', '.join(map(str, before.flagged))} no longer flagged ({spread})."
    if after.flagged:
        still = set(after.flagged) & set(before.flagged)
        who = ", ".join(map(str, after.flagged))
        return (f"Still a straggler: rank(s) {who} ({spread})." if still else
                f"A new straggler: rank(s) {who} ({spread}).")
    return f"No straggler before or after ({spread})."


# ----------------------------------------------------------------------------------------------------- the tool


async def compare_runs(params: CompareRunsInput, ctx: ToolContext) -> CompareRunsResult:
    """Verify a fix: compare a run before and after a change, like with like. BEFORE and AFTER are two profiler
    traces (files or folders of per-rank traces) or two sets of step-time logs (files, globs or folders); the kind is
    told from the files. Gives the median and p90 step time of the steady-state steps on each side (warm-up left
    out, step counts shown) and the throughput factor, but only when the difference is beyond the run-to-run
    spread (Mann-Whitney U, p < 0.05, and >= 2%): otherwise verdict no_significant_change. Traces: the breakdown
    side by side (busy, compute, communication, exposed communication, idle), each cause of GPU idle before/after
    in ms per step labelled resolved / reduced / unchanged / increased / new, the kernels whose time changed most,
    and what dominates now (the next thing to fix). Logs: steps/s or tokens/s and the per-rank spread (did the
    straggler go?). The last, verification, step of the SOP branches.
    """
    if params.step_regex:
        compile_user_format(params.step_regex)  # a bad regex is the caller's error, before any file is read
    before_in, after_in = _resolve(params.before, ctx), _resolve(params.after, ctx)
    before_src, after_src = _text(params.before), _text(params.after)
    if before_in.kind != after_in.kind:
        return _undecided(before_in.kind, "not_comparable", [
            f"Not comparable: before is {before_in.kind} and after is {after_in.kind}; a change can only be measured "
            "like with like."], "Two profiler traces, two sets of step-time logs or two /metrics pages of the same "
            "job, one before and one after the change.",
            [Coverage.read(before_src, f"before: {_KIND_TEXT[before_in.kind]}, {len(before_in.files)} file(s)"),
             Coverage.read(after_src, f"after: {_KIND_TEXT[after_in.kind]}, {len(after_in.files)} file(s)")])
    if before_in.kind == "inference":
        result = await _inference_result(params, ctx)
        result.coverage = [Coverage.read(raw, f"{side}: a /metrics page, {r.steps} requests" if r else
                                         f"{side}: a /metrics page") for side, raw, r in
                           (("before", before_src, result.runs[0] if result.runs else None),
                            ("after", after_src, result.runs[1] if result.runs else None))]
        return result
    deadline = time.monotonic() + ctx.remaining_s()
    if before_in.kind == "traces":
        before = await anyio.to_thread.run_sync(_trace_run, before_in.files, before_src, ctx.roots,
                                                params.warmup_steps, deadline, abandon_on_cancel=True)
        after = await anyio.to_thread.run_sync(_trace_run, after_in.files, after_src, ctx.roots,
                                               params.warmup_steps, deadline, abandon_on_cancel=True)
        result = _traces_result(before, after, params)
        result.coverage = [_coverage("before", before_src, before), _coverage("after", after_src, after)]
        return result
    before = await anyio.to_thread.run_sync(_log_run, before_in.files, before_in.names, before_src,
                                            params.step_regex, params.warmup_steps, deadline, abandon_on_cancel=True)
    after = await anyio.to_thread.run_sync(_log_run, after_in.files, after_in.names, after_src,
                                           params.step_regex, params.warmup_steps, deadline, abandon_on_cancel=True)
    coverage = [_coverage("before", before_src, before), _coverage("after", after_src, after)]
    empty = [side for side, run in (("before", before), ("after", after)) if run.ranks == 0]
    if empty:
        return _undecided("logs", "cannot_tell", [
            f"Cannot tell: no step-time line recognised in the {' and the '.join(empty)} logs "
            f"({', '.join(before_src if side == 'before' else after_src for side in empty)}), so that side "
            "has no step time to compare."], "Step-time logs on both sides (see find_stragglers' formats), or "
            "step_regex for a format of your own.", coverage)
    if before.unit != after.unit:
        return _undecided("logs", "not_comparable", [
            f"Not comparable: the before logs give {before.unit} and the after logs {after.unit}."],
            "Logs that report the same figure (step time, or tokens/s) on both sides.", coverage)
    result = _logs_result(before, after)
    result.coverage = coverage
    return result


_KIND_TEXT = {"traces": "profiler traces", "logs": "step-time logs", "inference": "an inference /metrics page"}


def _coverage(side: Side, raw: str, run: _Run) -> Coverage:
    """What one side gave: read whole, partly (some files held no step), or nothing this tool measures."""
    what = "trace" if run.trace is not None else "log"
    if run.ranks == 0 or (run.trace is not None and run.series.size == 0):
        return Coverage.not_understood(raw, f"{side}: no step in its {run.files} {what} file(s)",
                                       ["torch.profiler traces with ProfilerStep ranges", "step-time logs",
                                        "inference /metrics pages"])
    detail = (f"{side}: {run.files} {what} file(s), {run.ranks} rank(s), {run.series.size} steady-state steps "
              f"(the first {run.warmup} left out)")
    if run.unread:
        return Coverage.partial(raw, f"{detail}; no step line in {len(run.unread)} file(s), e.g. {run.unread[0]}")
    return Coverage.read(raw, detail)


def _undecided(kind: InputKind, verdict: Verdict, conclusion: list[str], decides: str, coverage: list[Coverage]
               ) -> CompareRunsResult:
    """A comparison that could not be made: unknown, saying why and what would decide."""
    return CompareRunsResult(
        severity=Severity.unknown, conclusion=conclusion, decides=decides, coverage=coverage, kind=kind,
        verdict=verdict, speedup=None, measured_ratio=None, p_value=None,
        step_time_ms=StepTimes(before=None, after=None, before_p90=None, after_p90=None), runs=[], breakdown=[],
        causes=[], rank_spread=[], kernels=[], now_dominant=None,
        next_steps=[NextStep(branch="triage", action="compare_runs with the same kind of input on both sides",
                             why="A fix is verified only by the same measurement before and after.")])


_CANNOT_TELL = (f"At least {COMPARE_MIN_STEPS} steady-state steps on each side (profile or log more steps of each "
                "run).")


def _sides(before: _Run, after: _Run, unit: str, per: float) -> list[RunSide]:
    sides: tuple[tuple[Side, _Run], ...] = (("before", before), ("after", after))
    return [RunSide(run=side, source=run.source, ranks=run.ranks, steps=int(run.series.size),
                    warmup_dropped=run.warmup, median_ms=_round(run.median()), p90_ms=_round(run.p90()),
                    throughput=_round(per / m if (m := run.median()) else None), throughput_unit=unit)
            for side, run in sides]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _p_text(value: float) -> str:
    return f"p={value:.2g}" if value >= 1e-15 else "p<1e-15"


def _p(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.3g}")


def _times(before: _Run, after: _Run) -> StepTimes:
    return StepTimes(before=_round(before.median()), after=_round(after.median()), before_p90=_round(before.p90()),
                     after_p90=_round(after.p90()))


def _traces_result(before: _Run, after: _Run, params: CompareRunsInput) -> CompareRunsResult:
    assert before.trace is not None and after.trace is not None
    outcome = _significance(before, after, "steps/s", 1e3)
    causes = _cause_rows(before.trace, after.trace, before.median() or _mean_step_ms(before.trace))
    dominant = _dominant(after.trace)
    gone = [c for c in causes if c.status == "resolved"]
    grown = [c for c in causes if c.status in ("new", "increased")]
    text = [outcome.change]
    if gone or grown:
        text.append("Causes: " + "; ".join(f"{c.kind} {c.status} ({c.before_ms:.1f} -> {c.after_ms:.1f} ms per step)"
                                           for c in [*gone, *grown]) + ".")
    share = (f" at {dominant.share_pct:.1f}% of step time" if dominant.share_pct is not None
             and dominant.kind != "compute" else "")
    text.append(f"Now dominant: {dominant.kind}{share}: {dominant.evidence.rstrip('.')}.")
    step = _step_of(dominant.branch, ("summarize_trace", "find_stragglers"))
    again = tool_call("compare_runs", {"before": params.after[0] if len(params.after) == 1 else params.after,
                                       "after": "<trace after that fix>"})
    next_steps = [NextStep(branch=dominant.branch, step=step,
                           action=f"Fix {dominant.kind}: {dominant.fix.split(';')[0].rstrip('.')}; then profile again "
                           f"and {again}", why="It takes the largest share of the step now.")]
    if outcome.verdict == "regressed":
        next_steps.insert(0, NextStep(branch="gpu_utilization_low", step=_step_of("gpu_utilization_low",
                                                                                ("summarize_trace",)),
                                      action=tool_call("summarize_trace", {"path": params.after[0]}),
                                      why="The run got slower: see which share of the step grew."))
    notes = [f"Step times: ProfilerSteps but the last (as HTA), the first {before.warmup} / {after.warmup} left out as "
             "warm-up; per step the median over ranks. The breakdown and causes cover all analysed ProfilerSteps.",
             *before.trace.notes[:3], *after.trace.notes[:3]]
    return CompareRunsResult(
        severity=Severity.warn if outcome.verdict == "regressed" else Severity.unknown
        if outcome.verdict == "cannot_tell" else Severity.ok, conclusion=text[:3],
        decides=_CANNOT_TELL if outcome.verdict == "cannot_tell" else None,
        next_steps=next_steps[:3], kind="traces", verdict=outcome.verdict,
        speedup=round(outcome.ratio, 3) if outcome.ratio and outcome.verdict != "no_significant_change" else None,
        measured_ratio=_round(outcome.ratio), p_value=_p(outcome.p_value), step_time_ms=_times(before, after),
        runs=_sides(before, after, "steps/s", 1e3), breakdown=_breakdown_rows(before.trace, after.trace),
        causes=causes, rank_spread=[], kernels=_kernel_rows(before.trace, after.trace), now_dominant=dominant,
        notes=notes)


def _logs_result(before: _Run, after: _Run) -> CompareRunsResult:
    assert before.stragglers is not None and after.stragglers is not None
    unit, per = _THROUGHPUT.get(before.unit, ("steps/s", 1e3))
    outcome = _significance(before, after, unit, per)
    spreads = [_spread("before", before.stragglers), _spread("after", after.stragglers)]
    text = [outcome.change]
    sentence = _straggler_sentence(*spreads)
    if sentence:
        text.append(sentence)
    dominant: NowDominant | None = None
    next_steps: list[NextStep] = []
    if spreads[1].flagged:
        flagged = after.stragglers.flagged[0]
        dominant = NowDominant(kind="straggler", share_pct=flagged.deviation_pct, evidence=flagged.evidence,
                               fix="Follow the straggler branch: that rank's GPU, data input and network.",
                               branch="straggler")
        next_steps.append(NextStep.from_sop("straggler", logs=[after.source]))
    else:
        text.append("What takes the step time now is not in step logs: profile a few steps of the new run.")
        next_steps.append(NextStep(branch="gpu_utilization_low", step=_step_of("gpu_utilization_low",
                                                                               ("summarize_trace",)),
                                   action="summarize_trace on a torch.profiler trace of a few steps of the new run",
                                   why="It names what dominates the step now (the next thing to fix)."))
    notes = [f"Step values are {before.unit}; per step the median over ranks, the first {before.warmup} / "
             f"{after.warmup} steps of each rank left out as warm-up."]
    severity = (Severity.warn if outcome.verdict == "regressed" or spreads[1].flagged else Severity.unknown
                if outcome.verdict == "cannot_tell" else Severity.ok)
    return CompareRunsResult(
        severity=severity, conclusion=text[:3], next_steps=next_steps, kind="logs", verdict=outcome.verdict,
        decides=_CANNOT_TELL if outcome.verdict == "cannot_tell" else None,
        speedup=round(outcome.ratio, 3) if outcome.ratio and outcome.verdict != "no_significant_change" else None,
        measured_ratio=_round(outcome.ratio), p_value=_p(outcome.p_value), step_time_ms=_times(before, after),
        runs=_sides(before, after, unit, per), breakdown=[], causes=[], rank_spread=spreads, kernels=[],
        now_dominant=dominant, notes=notes)


# -------------------------------------------------------------------------------------------------- inference

_LATENCIES: tuple[Literal["ttft", "itl", "e2e"], ...] = ("ttft", "itl", "e2e")
_QUANTILES: tuple[tuple[Literal["p50", "p90", "p99"], float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


async def _inference_result(params: CompareRunsInput, ctx: ToolContext) -> CompareRunsResult:
    from tools.serving import InferenceMetricsInput, fetch_exposition, inference_metrics, parse_exposition

    expositions = [parse_exposition(await fetch_exposition(raw, ctx)) for raw in (params.before[0], params.after[0])]
    # inference_metrics' own verdict on each page (what the SOP branch acts on): did it change?
    verdicts = [await inference_metrics(InferenceMetricsInput(source=raw), ctx)
                for raw in (params.before[0], params.after[0])]
    before, after = expositions
    rows = []
    for metric in _LATENCIES:
        first, second = before.histograms.get(metric), after.histograms.get(metric)
        if first is None and second is None:
            continue
        for name, q in _QUANTILES:
            b = first.quantile(q) if first else None
            a = second.quantile(q) if second else None
            rows.append(LatencyChange(metric=metric, quantile=name, before_s=_round(b.value if b else None),
                                      after_s=_round(a.value if a else None),
                                      at_least=bool(b and b.lower_bound) or bool(a and a.lower_bound)))
    # The request latency is compared: end to end where both pages have it, else the time to first token.
    compared: str = next((m for m in ("e2e", "ttft") if m in before.histograms and m in after.histograms), "")
    notes = ["Single pages: each quantile covers the server's whole life up to the scrape; save two pages per run "
             "and compare the intervals for a cleaner comparison."]
    outcome = _Outcome("cannot_tell", None, None, "Cannot tell: the two pages have no end-to-end or TTFT "
                       "histogram in common, nothing to compare.")
    sides: list[RunSide] = []
    if compared:
        hb, ha = before.histograms[compared], after.histograms[compared]
        b50, a50 = hb.quantile(0.5), ha.quantile(0.5)
        label = {"e2e": "end-to-end latency", "ttft": "time to first token"}[compared]
        pages: tuple[tuple[Side, str, Any, Any], ...] = (("before", params.before[0], hb, b50),
                                                          ("after", params.after[0], ha, a50))
        sides = [RunSide(run=side, source=raw, ranks=1, steps=int(h.count), warmup_dropped=0,
                         median_ms=_round(m.value * 1000 if m else None),
                         p90_ms=_round(q90.value * 1000 if (q90 := h.quantile(0.9)) else None), throughput=None,
                         throughput_unit="")
                 for side, raw, h, m in pages]
        if hb.bounds != ha.bounds:
            notes.append(f"The two {compared} histograms have different buckets: no test is made.")
            p = None
        else:
            p = mann_whitney_binned_p(np.diff(np.array(hb.cumulative), prepend=0.0),
                                      np.diff(np.array(ha.cumulative), prepend=0.0))
        ratio = b50.value / a50.value if b50 and a50 and a50.value > 0 else None
        counts = f"{hb.count:.0f} vs {ha.count:.0f} requests"
        median = f"{label} p50 {b50.value if b50 else 0:.3g} -> {a50.value if a50 else 0:.3g} s"
        if (ratio is not None and p is not None and p < COMPARE_P_VALUE
                and abs(ratio - 1) * 100 >= COMPARE_MIN_CHANGE_PCT):
            verdict: Verdict = "improved" if ratio > 1 else "regressed"
            outcome = _Outcome(verdict, ratio, p, f"{verdict.capitalize()}: {median} (x{ratio:.2f} faster; "
                               f"{counts}, Mann-Whitney {_p_text(p)})." if ratio > 1 else
                               f"Regressed: {median} (x{ratio:.2f}; {counts}, Mann-Whitney {_p_text(p)}).")
        elif p is None:
            outcome = _Outcome("cannot_tell", ratio, p, f"Cannot tell whether it changed: {median}, but the two "
                               f"histograms have different buckets, so no test is made ({counts}).")
        else:
            outcome = _Outcome("no_significant_change", ratio, p, f"No significant change: {median} is within the "
                               f"spread of the two histograms ({_p_text(p)}; {counts}).")
    first_verdict, second_verdict = verdicts[0].verdict, verdicts[1].verdict
    text = [outcome.change, f"inference_metrics' verdict: {first_verdict} -> {second_verdict}."]
    dominant: NowDominant | None = None
    if verdicts[1].findings:
        lead = verdicts[1].findings[0]
        dominant = NowDominant(kind=lead.kind, share_pct=None, evidence=lead.evidence, fix=lead.fix,
                               branch=lead.sop_branch)
        text.append(f"Now dominant: {lead.kind}: {lead.evidence.rstrip('.')}.")
    next_steps = [NextStep.from_sop("inference_latency", done={"compare_runs"}, source=params.after[0])]
    return CompareRunsResult(
        severity=Severity.warn if outcome.verdict == "regressed" else Severity.unknown
        if outcome.verdict == "cannot_tell" else Severity.ok, conclusion=text[:3],
        decides="Two /metrics pages with the same latency histograms (the same server, its buckets unchanged)."
        if outcome.verdict == "cannot_tell" else None,
        next_steps=next_steps, kind="inference", verdict=outcome.verdict,
        speedup=round(outcome.ratio, 3) if outcome.ratio and outcome.verdict != "no_significant_change" else None,
        measured_ratio=_round(outcome.ratio), p_value=_p(outcome.p_value),
        step_time_ms=StepTimes(before=None, after=None, before_p90=None, after_p90=None), runs=sides, breakdown=[],
        causes=[], rank_spread=[], kernels=[], latency=rows, inference_verdicts=[first_verdict, second_verdict],
        now_dominant=dominant, notes=notes)
