"""find_stragglers: which rank is slow, whether it computes slowly or waits, and what its GPU says.

The trap this tool is built around: in synchronous data parallelism every rank waits for the slowest one at the
gradient all-reduce, so per-rank step times come out nearly equal and the waiting ranks look idle. The straggler
is the rank whose compute is longest and who waits LEAST inside the collective. So: step times per rank first
(tools/stragglers/steps.py reads the logs); then compute-only times where the logs carry them, and per-step collective
wait vs the rest of the step from profiler traces (tools/traces/kineto.py); then, for a flagged rank, its GPU's clocks,
throttle reasons, temperature, power and links from an nvidia-smi sample or capture. Statistics are robust (median,
MAD, warm-up dropped); a difference within the run's own noise is not flagged. SOP: straggler.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import anyio.to_thread
import numpy as np
from pydantic import BaseModel, Field

from tools.cluster import NodeBackend, collect_from_nodes, job_backend
from tools.core.context import ToolContext
from tools.core.errors import BadInput, TriageError
from tools.core.files import expand_inputs
from tools.core.intervals import clip, merge, total
from tools.core.limits import (
    STRAGGLER_MAX_LOG_FILES,
    STRAGGLER_MAX_TRACE_PATHS,
    STRAGGLER_MAX_WORKERS,
    STRAGGLER_PARALLEL_BYTES,
)
from tools.core.models import Finding, JobInput, NextStep, PathArg, Severity, Table, ToolResult, cell
from tools.core.ranks import compact_ranges
from tools.core.thresholds import STRAGGLER_CRIT_PCT, STRAGGLER_MIN_STEPS, STRAGGLER_SIGNIFICANCE, STRAGGLER_WARN_PCT
from tools.core.workers import run_in_shares, worker_count
from tools.gpu import gpu_findings
from tools.steps import RankSteps, StepReader, compile_user_format
from tools.traces import (
    TraceEvent,
    TraceHeader,
    is_nsys_export,
    nsys_processes,
    rank_of_trace,
    read_nsys_batches,
    read_trace,
    trace_files,
)

__all__ = ["FindStragglersInput", "FindStragglersResult", "find_stragglers", "stragglers_in_steps"]

Kind = Literal["compute_slow", "wait_slow", "unknown"]
Verdict = Literal["straggler", "none", "inconclusive"]

_COMM_EVENT = re.compile(r"^(?:gloo|nccl|ucc|mpi|xccl|hccl|rccl):|^nccl(?:Dev)?Kernel|^ncclKernel|AllReduce_Sum|"
                         r"^c10d::(?:allreduce|allgather|reduce_scatter|broadcast|alltoall)")


class FindStragglersInput(JobInput):
    logs: list[PathArg] = Field(default_factory=list, max_length=64, description="Per-rank training logs (paths or "
                            "globs inside the roots) with per-step times: plain `step S time T ms`, step_time_ms=, "
                            "Megatron-LM, torchtitan, tqdm (HF Trainer, Lightning).")
    traces: list[PathArg] = Field(default_factory=list, max_length=STRAGGLER_MAX_TRACE_PATHS,
                              description="Per-rank torch.profiler traces: files or a folder of them.")
    step_regex: str | None = Field(default=None, max_length=512, description="Your own RE2 regex for the step lines, "
                                   "with named groups step_ms or step_s (and optionally step, compute_ms, rank).")
    warmup_steps: int | None = Field(default=None, ge=0, le=100_000, description="Leading steps of each rank left "
                                     "out (default: 10%, at least 1 and at most 50).")
    gpu_csv: PathArg | None = Field(default=None, description="An nvidia-smi --query-gpu CSV capture from the flagged "
                                "rank's node, to check its GPU (clocks, throttling, temperature, power, PCIe).")
    sample_gpus: bool = Field(default=False, description="Sample this host's GPUs now (nvidia-smi or NVML, 3 samples) "
                              "for the same checks.")


class RanksSummary(BaseModel):
    count: int
    median_step_ms: float | None = Field(description="Median over ranks of each rank's median step time.")
    spread_pct: float | None = Field(description="(slowest - fastest rank median) / median, in %.")
    unit: str = Field(description="What the step figures are: ms per step, or ms per 1k tokens (throughput logs).")
    median_compute_ms: float | None = None
    median_wait_ms: float | None = Field(default=None, description="Median collective wait per step (traces).")
    source: str = Field(description="logs, traces or both.")


class FlaggedRank(BaseModel):
    rank: int
    median_step_ms: float | None
    deviation_pct: float | None = Field(description="Step time vs the median rank, in %.")
    compute_ms: float | None = None
    compute_deviation_pct: float | None = None
    wait_ms: float | None = Field(default=None, description="Median collective wait per step, from traces.")
    severity: Severity
    kind: Kind
    evidence: str
    node: str | None = Field(default=None, description="With slurm_job or hosts: the node the rank runs on.")
    gpu: int | None = Field(default=None, description="With slurm_job or hosts: the GPU it computes on.")


class Distribution(BaseModel):
    metric: str
    ranks: int
    min: float
    p10: float
    median: float
    p90: float
    max: float


class RankRow(BaseModel):
    rank: int
    steps: int
    median_step_ms: float | None
    p90_step_ms: float | None
    deviation_pct: float | None
    trend_pct: float | None = Field(description="Last third vs first third of the steps, in %.")
    spikes: int = Field(description="Steps far above the rank's median.")
    spike_period: int | None = Field(description="Every N steps, when the spikes are periodic.")
    compute_ms: float | None
    wait_ms: float | None
    source: str


class FindStragglersResult(ToolResult):
    verdict: Verdict
    ranks_summary: RanksSummary
    flagged: list[FlaggedRank]
    waited_on_rank: int | None = Field(description="The rank the others wait for, when one can be named.")
    hardware: list[Finding] = Field(description="Checks of the flagged ranks' GPUs (when a sample was given).")
    distribution: list[Distribution] = Field(description="Per-rank medians over all ranks: min, p10, median, p90, "
                                             "max (the summary of the ranks not listed one by one).")
    ranks: list[RankRow] = Field(description="Per rank, most deviating first (cut by the budget for big jobs).")

    narrow_hint = "pass fewer ranks' logs"

    def tables(self) -> list[Table]:
        return [
            Table("Flagged ranks", ["rank", "kind", "severity", "step ms", "step dev %", "compute ms", "compute dev %",
                                    "wait ms", "evidence", "node / GPU"],
                  [[str(f.rank), f.kind, f.severity.value, cell(f.median_step_ms), cell(f.deviation_pct),
                    cell(f.compute_ms), cell(f.compute_deviation_pct), cell(f.wait_ms), f.evidence,
                    f"{f.node} / GPU {cell(f.gpu)}" if f.node else "-"]
                   for f in self.flagged],
                  "flagged"),
            Table("GPU of the flagged ranks", ["check", "value", "threshold", "severity", "meaning"],
                  [[h.check, h.value, h.threshold, h.severity.value, h.meaning] for h in self.hardware], "hardware"),
            Table("All ranks: distribution of the per-rank medians", ["metric", "ranks", "min", "p10", "median", "p90",
                                                                       "max"],
                  [[d.metric, str(d.ranks), cell(d.min), cell(d.p10), cell(d.median), cell(d.p90), cell(d.max)]
                   for d in self.distribution], "distribution"),
            Table("Ranks (most deviating first)", ["rank", "steps", "median ms", "p90 ms", "dev %", "trend %",
                                                   "spikes", "every", "compute ms", "wait ms", "source"],
                  [[str(r.rank), str(r.steps), cell(r.median_step_ms), cell(r.p90_step_ms), cell(r.deviation_pct),
                    cell(r.trend_pct), str(r.spikes), cell(r.spike_period), cell(r.compute_ms), cell(r.wait_ms),
                    r.source]
                   for r in self.ranks], "ranks"),
        ]


# ------------------------------------------------------------------------------------------------- statistics


@dataclass
class _Stats:
    n: int
    median: float
    p90: float
    mad: float
    se: float  # standard error of the median (normal approximation from the MAD)


def _stats(values: np.ndarray) -> _Stats | None:
    clean = values[np.isfinite(values)]
    if clean.size < STRAGGLER_MIN_STEPS:
        return None
    median = float(np.median(clean))
    mad = float(np.median(np.abs(clean - median)))
    return _Stats(int(clean.size), median, float(np.percentile(clean, 90)), mad,
                  1.2533 * 1.4826 * mad / math.sqrt(clean.size))


def _warmup(count: int, given: int | None) -> int:
    return given if given is not None else min(50, max(1, count // 10))


def _trend_pct(values: np.ndarray) -> float | None:
    third = values.size // 3
    if third < STRAGGLER_MIN_STEPS:
        return None
    first, last = float(np.median(values[:third])), float(np.median(values[-third:]))
    return 100.0 * (last - first) / first if first > 0 else None


def _spikes(values: np.ndarray, numbers: np.ndarray, stats: _Stats) -> tuple[int, int | None]:
    limit = stats.median + max(6 * 1.4826 * stats.mad, 0.5 * stats.median)
    at = numbers[np.flatnonzero(values > limit)]
    if at.size < 3:
        return int(at.size), None
    gaps = np.diff(at)
    gaps = gaps[gaps > 0]
    if gaps.size == 0:
        return int(at.size), None
    kinds, counts = np.unique(gaps, return_counts=True)
    best = int(np.argmax(counts))
    period = int(kinds[best])
    return int(at.size), period if counts[best] >= 0.6 * gaps.size and period > 1 else None


@dataclass
class _Figures:
    """One rank's statistics, computed where its steps were read (a worker process, for big jobs)."""

    rank: int
    source: str
    unit: str = "ms"
    steps: int = 0
    step: _Stats | None = None
    compute: _Stats | None = None
    wait: _Stats | None = None
    trend_pct: float | None = None
    spikes: int = 0
    spike_period: int | None = None


def _figures(rank: int, source: str, unit: str, steps: np.ndarray, numbers: np.ndarray, compute: np.ndarray | None,
             wait: np.ndarray | None, skip: int) -> _Figures:
    kept, numbers = steps[skip:], numbers[skip:]
    figures = _Figures(rank, source, unit, int(kept.size), _stats(kept))
    if compute is not None and compute.size == steps.size:
        figures.compute = _stats(compute[skip:])
    if wait is not None and wait.size == steps.size:
        figures.wait = _stats(wait[skip:])
    figures.trend_pct = _trend_pct(kept)
    if figures.step is not None:
        figures.spikes, figures.spike_period = _spikes(kept, numbers, figures.step)
    return figures


# ------------------------------------------------------------------------------------------------ collection


def _log_figures(steps: RankSteps, warmup: int | None) -> _Figures:
    numbers = steps.step_numbers if steps.step_numbers.size == steps.steps.size else (
        steps.first_step + steps.interval * np.arange(steps.steps.size))
    compute = steps.compute if steps.compute.size == steps.steps.size else None
    return _figures(steps.rank, f"{steps.source} ({steps.format})", steps.unit, steps.steps, numbers, compute, None,
                    _warmup(steps.steps.size, warmup))


def stragglers_in_steps(steps: list[RankSteps], warmup: int | None) -> FindStragglersResult:
    """This tool's verdict on step lines already read (compare_runs reads each run's logs once for both uses)."""
    ranks: dict[int, _Figures] = {}
    for rank_steps in steps:
        ranks.setdefault(rank_steps.rank, _log_figures(rank_steps, warmup))
    return _analyse(ranks, [])


def _read_log_share(files: list[tuple[Path, str]], step_regex: str | None, warmup: int | None, deadline: float
                    ) -> tuple[list[_Figures], list[str], list[str]]:
    """Figures per rank for one share of the log files: ([figures], notes, files with no step line)."""
    reader = StepReader(compile_user_format(step_regex) if step_regex else None)
    figures: list[_Figures] = []
    notes: list[str] = []
    empty: list[str] = []
    for path, name in files:
        per_file = reader.read(path, name, deadline)
        if not per_file:
            empty.append(name)
        figures += [_log_figures(steps, warmup) for steps in per_file]
    return figures, notes, empty


def _read_logs(patterns: list[str], params: FindStragglersInput, ctx: ToolContext, deadline: float
               ) -> tuple[dict[int, _Figures], list[str]]:
    files = [(f.path, f.name) for f in expand_inputs(patterns, ctx.roots, STRAGGLER_MAX_LOG_FILES)]
    total = sum(path.stat().st_size for path, _ in files)
    workers = worker_count(len(files), total, STRAGGLER_PARALLEL_BYTES, STRAGGLER_MAX_WORKERS)
    found: dict[int, _Figures] = {}
    notes: list[str] = []
    empty: list[str] = []
    for figures, share_notes, share_empty in run_in_shares(_read_log_share, files, workers, params.step_regex,
                                                            params.warmup_steps, deadline):
        notes += share_notes
        empty += share_empty
        for item in figures:
            if item.rank in found:
                notes.append(f"rank {item.rank} has step lines in {found[item.rank].source} and {item.source}: the "
                             "first is used.")
                continue
            found[item.rank] = item
    if empty:
        notes.append(f"no step-time line recognised in {len(empty)} file(s) (e.g. {empty[0]}); pass step_regex for "
                     "a custom format.")
    return found, notes


def _trace_rank(events: Iterable[TraceEvent], rank: int, display: str) -> _Figures:
    """Step times and collective wait per step from one rank's trace events; compute = step - wait."""
    steps: list[tuple[float, float]] = []
    comm: list[tuple[float, float]] = []
    for event in events:
        name, ts, dur = event.name, event.ts, event.dur
        if event.ph != "X" or not isinstance(name, str) or not isinstance(ts, int | float) or not isinstance(
                dur, int | float):
            continue
        if name.startswith("ProfilerStep#"):
            steps.append((float(ts), float(ts) + float(dur)))
        elif _COMM_EVENT.search(name):
            comm.append((float(ts), float(ts) + float(dur)))
    merged = merge(comm)
    steps.sort()
    step_ms = np.array([(end - start) / 1000.0 for start, end in steps])
    wait_ms = np.array([total(clip(merged, start, end)) / 1000.0 for start, end in steps])
    return _figures(rank, display, "ms", step_ms, np.arange(step_ms.size), step_ms - wait_ms, wait_ms, 0)


def _read_traces(paths: list[str], ctx: ToolContext, deadline: float) -> dict[int, _Figures]:
    files: list[Path] = []
    for raw in paths:
        files += trace_files(ctx.path(raw), ctx.roots)
    found: dict[int, _Figures] = {}
    for position, path in enumerate(files):
        display = next((str(path.relative_to(r)) for r in ctx.roots if path.is_relative_to(r)), path.name)
        if is_nsys_export(path):  # an Nsight Systems export: each process with GPU work is a rank
            for index, process in enumerate(nsys_processes(path, display, deadline)):
                events = itertools.chain.from_iterable(read_nsys_batches(path, process, display, deadline,
                                                                         TraceHeader()))
                found[index] = _trace_rank(events, index, f"{display} (process {(process >> 24) & 0xFFFFFF})")
            continue
        header = TraceHeader()
        figures = _trace_rank(read_trace(path, display, deadline, header), -1, display)
        figures.rank = rank_of_trace(header, display, position)  # the header is complete once read
        found[figures.rank] = figures
    return found


def _combine(logged: _Figures | None, traced: _Figures | None) -> _Figures:
    """Step times from the log, compute from the log where it has one, else from the trace; wait from the trace."""
    if logged is None:
        assert traced is not None
        traced.source = f"{traced.source} (trace)"
        return traced
    if traced is None:
        return logged
    logged.compute = logged.compute or traced.compute
    logged.wait = traced.wait
    logged.source += f" + {traced.source} (trace)"
    return logged


# ---------------------------------------------------------------------------------------------------- analysis


def _deviation(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference <= 0:
        return None
    return 100.0 * (value - reference) / reference


def _severity(pct: float) -> Severity:
    return Severity.crit if pct >= STRAGGLER_CRIT_PCT else Severity.warn


def _significant(stats: _Stats, reference: float, others_se: float) -> bool:
    return abs(stats.median - reference) > STRAGGLER_SIGNIFICANCE * math.hypot(stats.se, others_se)


@dataclass
class _Metric:
    """One per-rank figure (step, compute or wait): each rank's stats and the cross-rank median."""

    by_rank: dict[int, _Stats]

    @cached_property
    def median(self) -> float | None:
        return statistics.median(s.median for s in self.by_rank.values()) if self.by_rank else None

    @cached_property
    def typical_se(self) -> float:
        return statistics.median(s.se for s in self.by_rank.values()) if self.by_rank else 0.0

    def slow(self) -> dict[int, float]:
        """Ranks significantly >= warn % above the median rank: rank -> deviation %."""
        median = self.median
        if median is None or len(self.by_rank) < 2:
            return {}
        out = {}
        for rank, stats in self.by_rank.items():
            pct = _deviation(stats.median, median)
            if pct is not None and pct >= STRAGGLER_WARN_PCT and _significant(stats, median, self.typical_se):
                out[rank] = pct
        return out

    def spread_pct(self) -> float | None:
        median = self.median
        if median is None or median <= 0 or not self.by_rank:
            return None
        values = [s.median for s in self.by_rank.values()]
        return 100.0 * (max(values) - min(values)) / median


def _analyse(ranks: dict[int, _Figures], notes: list[str]) -> FindStragglersResult:
    step_stats = {r: f.step for r, f in ranks.items() if f.step is not None}
    compute_stats = {r: f.compute for r, f in ranks.items() if f.compute is not None}
    wait_stats = {r: f.wait for r, f in ranks.items() if f.wait is not None}
    rows = [RankRow(rank=r, steps=f.steps, median_step_ms=f.step.median if f.step else None,
                    p90_step_ms=f.step.p90 if f.step else None, deviation_pct=None, trend_pct=f.trend_pct,
                    spikes=f.spikes, spike_period=f.spike_period, compute_ms=f.compute.median if f.compute else None,
                    wait_ms=f.wait.median if f.wait else None, source=f.source) for r, f in sorted(ranks.items())]
    step, compute, wait = _Metric(step_stats), _Metric(compute_stats), _Metric(wait_stats)
    for row in rows:
        row.deviation_pct = _deviation(row.median_step_ms, step.median)
    rows.sort(key=lambda r: -abs(r.deviation_pct or 0.0) - abs(_deviation(r.compute_ms, compute.median) or 0.0))
    slow_steps, slow_compute = step.slow(), compute.slow()
    flagged: list[FlaggedRank] = []
    for rank in sorted(set(slow_steps) | set(slow_compute), key=lambda r: -max(slow_steps.get(r, 0.0),
                                                                                 slow_compute.get(r, 0.0))):
        pct = max(slow_steps.get(rank, 0.0), slow_compute.get(rank, 0.0))
        kind: Kind = "unknown"
        if compute.by_rank:
            kind = "compute_slow" if rank in slow_compute else "wait_slow"
        flagged.append(FlaggedRank(
            rank=rank, median_step_ms=step_stats[rank].median if rank in step_stats else None,
            deviation_pct=_deviation(step_stats[rank].median, step.median) if rank in step_stats else None,
            compute_ms=compute_stats[rank].median if rank in compute_stats else None,
            compute_deviation_pct=_deviation(compute_stats[rank].median, compute.median)
            if rank in compute_stats else None,
            wait_ms=wait_stats[rank].median if rank in wait_stats else None,
            severity=_severity(pct), kind=kind, evidence=_evidence(rank, kind, step, compute, wait)))
    waited_on = _waited_on(flagged, wait)
    verdict: Verdict = "straggler" if flagged else "none"
    if not flagged and not compute.by_rank and len(step.by_rank) > 1:
        verdict = "inconclusive"
    summary = RanksSummary(count=len(ranks), median_step_ms=step.median, spread_pct=step.spread_pct(),
                           unit=next((f.unit for f in ranks.values() if f.step), "ms"),
                           median_compute_ms=compute.median, median_wait_ms=wait.median,
                           source=_sources(ranks))
    distribution = [d for d in (_distribution("step ms", step), _distribution("compute ms", compute),
                                _distribution("collective wait ms", wait)) if d is not None]
    return FindStragglersResult(
        severity=max((f.severity for f in flagged), key=lambda s: s.rank, default=Severity.ok),
        conclusion=_conclude(verdict, flagged, waited_on, step, compute, len(ranks)),
        next_steps=_next_steps(verdict, flagged),
        verdict=verdict, ranks_summary=summary, flagged=flagged, waited_on_rank=waited_on, hardware=[],
        distribution=distribution, ranks=rows, notes=notes)


def _sources(ranks: dict[int, _Figures]) -> str:
    logs = any("(trace)" not in f.source or " + " in f.source for f in ranks.values())
    traces = any("(trace)" in f.source for f in ranks.values())
    return "+".join(name for name, on in (("logs", logs), ("traces", traces)) if on)


def _evidence(rank: int, kind: Kind, step: _Metric, compute: _Metric, wait: _Metric) -> str:
    parts = []
    if rank in compute.by_rank and compute.median:
        parts.append(f"compute {compute.by_rank[rank].median:.1f} ms vs {compute.median:.1f} ms median rank")
    if rank in wait.by_rank and wait.median is not None:
        least = min(wait.by_rank, key=lambda r: wait.by_rank[r].median)
        tail = " (the least of all ranks: the others wait for it)" if least == rank else ""
        parts.append(f"collective wait {wait.by_rank[rank].median:.1f} ms vs {wait.median:.1f} ms median{tail}")
    if rank in step.by_rank and step.median:
        parts.append(f"step {step.by_rank[rank].median:.1f} ms vs {step.median:.1f} ms median")
    if kind == "wait_slow":
        parts.append("its compute is normal: it waits (network, data loading, or another rank)")
    return "; ".join(parts)


def _waited_on(flagged: list[FlaggedRank], wait: _Metric) -> int | None:
    compute_slow = [f for f in flagged if f.kind == "compute_slow"]
    if compute_slow:
        return compute_slow[0].rank
    if len(wait.by_rank) > 1 and wait.median:
        least = min(wait.by_rank, key=lambda r: wait.by_rank[r].median)
        if wait.by_rank[least].median < 0.5 * wait.median:
            return least
    return None


def _distribution(name: str, metric: _Metric) -> Distribution | None:
    """The spread of the per-rank medians: how the ranks that are not listed one by one compare."""
    values = np.array(sorted(s.median for s in metric.by_rank.values()))
    if values.size == 0:
        return None
    p10, median, p90 = (float(v) for v in np.percentile(values, [10, 50, 90]))
    return Distribution(metric=name, ranks=int(values.size), min=float(values[0]), p10=p10, median=median, p90=p90,
                        max=float(values[-1]))


def _conclude(verdict: Verdict, flagged: list[FlaggedRank], waited_on: int | None, step: _Metric,
              compute: _Metric, count: int) -> list[str]:
    spread = step.spread_pct()
    if verdict == "straggler":
        first = flagged[0]
        what = {"compute_slow": "computes slowly", "wait_slow": "waits (its compute is normal)",
                "unknown": "is slow (no compute timing to tell whether it computes slowly or waits)"}[first.kind]
        text = [f"Rank {first.rank} {what}: {first.evidence}."]
        if waited_on is not None:
            text.append(f"The other ranks wait for rank {waited_on} at each collective, so they look idle while it "
                        "works; fix that rank, not the idle ones.")
        if len(flagged) > 1:
            text.append(f"{len(flagged)} ranks flagged: {compact_ranges([f.rank for f in flagged])}.")
        return text[:3]
    if verdict == "inconclusive":
        return [f"Step times of the {count} ranks agree within {spread or 0:.1f}%: in synchronous data parallelism "
                "every rank waits for the slowest at the gradient all-reduce, so step times cannot show a straggler.",
                "Collect compute-only timings per rank (forward/backward time without the collective) or "
                "torch.profiler traces of a few steps on every rank, and run this again with them."]
    if count < 2:
        return ["Only one rank's timings were found: a straggler needs at least two ranks to compare."]
    if not step.by_rank:
        return [f"No step found on any of the {count} ranks (no ProfilerStep range in the traces, no step-time line "
                "in the logs): nothing to compare.",
                "Pass traces of a few steps (torch.profiler with a schedule, or NVTX ranges named ProfilerStep#N) or "
                "logs that print a step time."]
    basis = "compute times" if compute.by_rank else "step times"
    return [f"No straggler: the {count} ranks' {basis} agree within the run's noise (step spread "
            f"{spread or 0:.1f}%; a rank is flagged at >= {STRAGGLER_WARN_PCT:g}% and beyond its step-to-step noise)."]


def _next_steps(verdict: Verdict, flagged: list[FlaggedRank]) -> list[NextStep]:
    if verdict == "straggler":
        rank = flagged[0].rank
        if flagged[0].kind == "wait_slow":
            return [NextStep(branch="straggler", step="network", action=f"check_interconnect on the job's NCCL_DEBUG="
                             f"INFO logs and nccl-tests all_reduce_perf between rank {rank}'s node and a healthy one "
                             "(with ibstat / ethtool captures of its NICs)",
                             why="A rank that waits with normal compute points at its network or its data input.")]
        gpu = NextStep(branch="straggler", step="gpu", action=f"find_stragglers again with slurm_job=<job id> (or "
                       f"hosts): rank {rank}'s own GPU is read on its node; on that node alone, sample_gpus=true or "
                       "gpu_csv with a capture from it", why="Clocks, throttle reasons, "
                       "temperature, power cap and PCIe link of its GPU explain slow compute.")
        return [gpu, NextStep(branch="straggler", step="health", action=f"health_check on rank {rank}'s node",
                              why="Xid/ECC events or a degraded link make one GPU slow.")]
    if verdict == "inconclusive":
        return [NextStep(branch="straggler", step="find", action="find_stragglers with traces=<folder of per-rank "
                         "torch.profiler traces>", why="The trace splits each step into compute and collective wait "
                         "per rank.")]
    return [NextStep(branch="gpu_utilization_low", step="trace", action="summarize_trace on one rank's trace",
                     why="With no straggler, the time goes elsewhere: data loading, sync, launch overhead.")]


async def _hardware(result: FindStragglersResult, params: FindStragglersInput, ctx: ToolContext) -> None:
    from tools.gpu import NvidiaSmiQueryInput, nvidia_smi_query

    query = NvidiaSmiQueryInput(csv_path=params.gpu_csv) if params.gpu_csv else NvidiaSmiQueryInput(count=3,
                                                                                                     interval_s=0.5)
    try:
        sample = await nvidia_smi_query(query, ctx)
    except TriageError as exc:
        result.notes.append(f"no GPU sample: {exc}")
        return
    gpus = sorted({int(row.values.get("index") or 0) if str(row.values.get("index", "")).isdigit() else 0
                   for row in sample.rows})
    count = len(gpus) or 1
    wanted = {f.rank % count for f in result.flagged} if result.flagged else set()
    for finding in sample.findings:
        match = re.match(r"GPU (\d+) ", finding.check)
        if finding.severity is not Severity.ok and match and int(match.group(1)) in wanted:
            result.hardware.append(finding)
    if result.flagged:
        result.notes.append(f"GPU of rank R taken as R mod {count} (the local rank on a node of {count} GPUs).")
    _conclude_hardware(result)


async def _hardware_on_nodes(result: FindStragglersResult, backend: NodeBackend, params: FindStragglersInput,
                             ctx: ToolContext) -> None:
    """Each flagged rank's own GPU on its own node: the health collector of every node says which ranks run there
    and on which GPU (RANK, LOCAL_RANK, CUDA_VISIBLE_DEVICES), and that GPU's readings are checked."""
    from tools.gpu import HealthCheckResult, gpu_values

    answers = await collect_from_nodes(backend, "health-check", HealthCheckResult, ctx, params.node_timeout_s,
                                       ["--sample-s", "0.2", "--top-processes", "0", "--no-include-kernel-log"])
    placed: dict[int, tuple[str, int | None, HealthCheckResult]] = {}
    silent: list[str] = []
    for node, answer in answers.items():
        if isinstance(answer, str):
            silent.append(f"{node} ({answer})")
            continue
        for rank in answer.ranks_here:
            placed[rank.rank] = (node, rank.gpu, answer)
    if silent:
        result.notes.append(f"{backend.label}: no answer from {len(silent)} node(s): {'; '.join(silent[:4])}.")
    result.next_steps = [s for s in result.next_steps if s.step != "gpu"]  # this call did that step
    for flagged in result.flagged:
        where = placed.get(flagged.rank)
        if where is None:
            result.notes.append(f"rank {flagged.rank} was found on none of the nodes that answered: its GPU is not "
                                "checked.")
            continue
        node, gpu, document = where
        flagged.node, flagged.gpu = node, gpu
        shown = [g for g in document.gpus if gpu is None or g.index == gpu]
        for finding in gpu_findings([gpu_values(g, []) for g in shown]):
            if finding.severity is not Severity.ok:
                result.hardware.append(finding.model_copy(update={"check": f"rank {flagged.rank} on {node}: "
                                                                           f"{finding.check}"}))
        if document.nvml != "ok":
            result.notes.append(f"{node}: NVML {document.nvml}; rank {flagged.rank}'s GPU could not be read.")
    _conclude_hardware(result)


def _conclude_hardware(result: FindStragglersResult) -> None:
    if not result.flagged:
        return
    if not result.hardware:
        result.notes.append("the flagged ranks' GPUs pass every hardware check in the sample.")
        return
    worst = result.hardware[0]
    result.conclusion = (result.conclusion[:2] + [f"Its GPU: {worst.check} = {worst.value} "
                                                  f"({worst.threshold}): {worst.meaning}"])[:3]
    result.severity = max(result.severity, worst.severity, key=lambda s: s.rank)


async def find_stragglers(params: FindStragglersInput, ctx: ToolContext) -> FindStragglersResult:
    """Find the straggler rank of a distributed job and say why it is slow: per-rank step times from training logs
    (plain, step_time_ms=, Megatron-LM, torchtitan, tqdm of HF Trainer / Lightning, or your step_regex), compute-only
    times where logged, and per-step compute vs collective wait from torch.profiler traces. Flags ranks >= 5% (warn)
    or >= 15% (crit) slower than the median rank, beyond the run's own noise (median/MAD, warm-up dropped); classifies
    compute_slow (the others wait for it: it waits least in the collective) vs wait_slow; says when step times alone
    cannot show the straggler (synchronous data parallel). With gpu_csv / sample_gpus, checks the flagged rank's GPU.
    """
    if not params.logs and not params.traces:
        raise BadInput("give logs (per-rank step-time logs) or traces (per-rank profiler traces), or both.",
                       "Example: logs=['logs/rank*.log'], traces=['traces/'].")
    if params.step_regex:
        compile_user_format(params.step_regex)  # a bad regex is the caller's error, before any file is read
    deadline = time.monotonic() + ctx.remaining_s()
    notes: list[str] = []
    logged: dict[int, _Figures] = {}
    traced: dict[int, _Figures] = {}
    if params.logs:
        logged, log_notes = await anyio.to_thread.run_sync(_read_logs, params.logs, params, ctx, deadline,
                                                           abandon_on_cancel=True)
        notes += log_notes
    if params.traces:
        traced = await anyio.to_thread.run_sync(_read_traces, params.traces, ctx, deadline, abandon_on_cancel=True)
    ranks = {rank: _combine(logged.get(rank), traced.get(rank)) for rank in sorted(set(logged) | set(traced))}
    if not ranks:
        raise BadInput("no step time found in the given logs or traces.",
                       "Check the format (see the tool's description) or pass step_regex; traces need ProfilerStep "
                       "events (torch.profiler with a schedule and prof.step()).")
    backend = job_backend(params, ctx)
    if backend is not None and (params.gpu_csv or params.sample_gpus):
        raise BadInput("with slurm_job or hosts, each flagged rank's own GPU is read on its node; gpu_csv and "
                       "sample_gpus are for one node.", "Drop them, or call without slurm_job/hosts.")
    result = _analyse(ranks, notes)
    if backend is not None and result.flagged:
        await _hardware_on_nodes(result, backend, params, ctx)
    elif params.gpu_csv or params.sample_gpus:
        await _hardware(result, params, ctx)
    return result
