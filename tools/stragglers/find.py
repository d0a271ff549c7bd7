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
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
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
from tools.core.models import Coverage, Finding, JobInput, NextStep, PathArg, Severity, Table, ToolResult, cell
from tools.core.ranks import compact_ranges
from tools.core.thresholds import (
    JOB_STEP_RATIO,
    JOB_TIME_GAP_H,
    STRAGGLER_CRIT_PCT,
    STRAGGLER_MIN_STEPS,
    STRAGGLER_SIGNIFICANCE,
    STRAGGLER_WARN_PCT,
)
from tools.core.workers import run_in_shares, worker_count
from tools.gpu import gpu_findings
from tools.steps import FORMATS, RankSteps, StepReader, compile_user_format
from tools.stragglers.identity import LogIdentity, log_identity, trace_epoch_us, trace_world_size
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

_LOG_FORMATS = [*(f.name for f in FORMATS), "a step_regex of your own"]
_TRACE_FORMATS = ["torch.profiler (Kineto) JSON with ProfilerStep#N ranges", "Nsight Systems SQLite export with "
                  "ProfilerStep NVTX ranges"]
_COMM_EVENT = re.compile(r"^(?:gloo|nccl|ucc|mpi|xccl|hccl|rccl):|^nccl(?:Dev)?Kernel|^ncclKernel|AllReduce_Sum|"
                         r"^c10d::(?:allreduce|allgather|reduce_scatter|broadcast|alltoall)")


class FindStragglersInput(JobInput):
    cli_positional = "logs"  # `gpu-triage find-stragglers 'logs/rank*.log'`, as the other readers of files

    logs: list[PathArg] = Field(default_factory=list, max_length=64, description="Per-rank training logs (paths or "
                            "globs inside the roots) with per-step times: plain `step S time T ms`, step_time_ms=, "
                            "Megatron-LM, torchtitan, DeepSpeed, detectron2 / mmcv / mmengine, tqdm (HF Trainer, "
                            "Lightning).")
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
    world_size: int | None = Field(default=None, description="The job's world size where its logs or traces state "
                                   "it: ranks not read are the ones a straggler may hide among.")


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
    set_apart: list[str] = Field(default_factory=list, description="Inputs left out of the per-rank join because "
                                 "they are of another run than the rest (why: in coverage and notes).")
    set_apart_kind: Literal["logs", "traces"] | None = Field(default=None, description="Which of the inputs "
                                                              "set_apart are.")

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
    epoch_us: float | None = None  # traces: when it was recorded (microseconds since the epoch), where it says
    world_size: int | None = None  # traces: the world size its distributedInfo states
    files: list[str] = field(default_factory=list)  # the inputs it was read from


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
                    ) -> list[tuple[str, list[_Figures], LogIdentity]]:
    """Per log file of one share: its name, the figures of each rank it holds (none: no step line) and what it says
    about its job."""
    reader = StepReader(compile_user_format(step_regex) if step_regex else None)
    out: list[tuple[str, list[_Figures], LogIdentity]] = []
    for path, name in files:
        figures = [_log_figures(steps, warmup) for steps in reader.read(path, name, deadline)]
        for item in figures:
            item.files = [name]
        out.append((name, figures, log_identity(path)))
    return out


@dataclass
class _Logs:
    ranks: dict[int, _Figures]
    notes: list[str]
    coverage: list[Coverage]
    identities: list[LogIdentity]


def _read_logs(patterns: list[str], params: FindStragglersInput, ctx: ToolContext, deadline: float) -> _Logs:
    files = [(f.path, f.name) for f in expand_inputs(patterns, ctx.roots, STRAGGLER_MAX_LOG_FILES)]
    total = sum(path.stat().st_size for path, _ in files)
    workers = worker_count(len(files), total, STRAGGLER_PARALLEL_BYTES, STRAGGLER_MAX_WORKERS)
    logs = _Logs({}, [], [], [])
    empty: list[str] = []
    for share in run_in_shares(_read_log_share, files, workers, params.step_regex, params.warmup_steps, deadline):
        for name, figures, identity in share:
            logs.identities.append(identity)
            if not figures:
                empty.append(name)
                logs.coverage.append(Coverage.not_understood(name, "no step-time line recognised", _LOG_FORMATS))
                continue
            used = []
            for item in figures:
                if item.rank in logs.ranks:
                    logs.notes.append(f"rank {item.rank} has step lines in {logs.ranks[item.rank].source} and "
                                      f"{item.source}: the first is used.")
                    continue
                logs.ranks[item.rank] = item
                used.append(item)
            detail = "; ".join(f"rank {f.rank}: {f.steps} steady-state steps ({f.source.rsplit('(', 1)[-1].rstrip(')')}"
                               f"{', with compute time' if f.compute else ''})" for f in used[:4])
            if len(used) > 4:
                detail += f"; {len(used) - 4} more ranks"
            if len(used) < len(figures):
                logs.coverage.append(Coverage.partial(name, (detail + "; " if detail else "") + "its other ranks' "
                                                      "lines are in an earlier file (that one is used)"))
            else:
                logs.coverage.append(Coverage.read(name, detail))
    if empty:
        logs.notes.append(f"no step-time line recognised in {len(empty)} file(s) (e.g. {empty[0]}); pass step_regex "
                          "for a custom format.")
    return logs


def _trace_rank(events: Iterable[TraceEvent], rank: int, display: str) -> _Figures:
    """Step times and collective wait per step from one rank's trace events; compute = step - wait."""
    steps: list[tuple[float, float]] = []
    comm: list[tuple[float, float]] = []
    first_ts: float | None = None
    for event in events:
        name, ts, dur = event.name, event.ts, event.dur
        if event.ph != "X" or not isinstance(name, str) or not isinstance(ts, int | float) or not isinstance(
                dur, int | float):
            continue
        first_ts = float(ts) if first_ts is None else min(first_ts, float(ts))
        if name.startswith("ProfilerStep#"):
            steps.append((float(ts), float(ts) + float(dur)))
        elif _COMM_EVENT.search(name):
            comm.append((float(ts), float(ts) + float(dur)))
    merged = merge(comm)
    steps.sort()
    step_ms = np.array([(end - start) / 1000.0 for start, end in steps])
    wait_ms = np.array([total(clip(merged, start, end)) / 1000.0 for start, end in steps])
    figures = _figures(rank, display, "ms", step_ms, np.arange(step_ms.size), step_ms - wait_ms, wait_ms, 0)
    figures.epoch_us = first_ts  # made an epoch time (or None) once the header is read
    return figures


def _trace_coverage(figures: _Figures, display: str) -> Coverage:
    if figures.steps == 0:
        return Coverage.not_understood(display, "no ProfilerStep range: no step to time", _TRACE_FORMATS)
    return Coverage.read(display, f"rank {figures.rank}: {figures.steps} ProfilerSteps, compute and collective wait "
                         "per step")


def _read_traces(paths: list[str], ctx: ToolContext, deadline: float) -> tuple[dict[int, _Figures], list[Coverage]]:
    files: list[Path] = []
    for raw in paths:
        files += trace_files(ctx.path(raw), ctx.roots)
    found: dict[int, _Figures] = {}
    coverage: list[Coverage] = []
    for position, path in enumerate(files):
        display = next((str(path.relative_to(r)) for r in ctx.roots if path.is_relative_to(r)), path.name)
        if is_nsys_export(path):  # an Nsight Systems export: each process with GPU work is a rank
            for index, process in enumerate(nsys_processes(path, display, deadline)):
                events = itertools.chain.from_iterable(read_nsys_batches(path, process, display, deadline,
                                                                         TraceHeader()))
                label = f"{display} (process {(process >> 24) & 0xFFFFFF})"
                figures = _trace_rank(events, index, label)
                figures.epoch_us, figures.files = None, [display]  # nsys times are the session's own clock
                coverage.append(_trace_coverage(figures, label))
                found[index] = figures
            continue
        header = TraceHeader()
        figures = _trace_rank(read_trace(path, display, deadline, header), -1, display)
        figures.rank = rank_of_trace(header, display, position)  # the header is complete once read
        figures.epoch_us = trace_epoch_us(figures.epoch_us, header.metadata)
        figures.world_size, figures.files = trace_world_size(header.metadata), [display]
        coverage.append(_trace_coverage(figures, display))
        if header.ends_early_at is not None and figures.steps:
            coverage[-1] = Coverage.partial(display, f"cut short: the {figures.steps} complete ProfilerSteps before "
                                            "its end are used")
        found[figures.rank] = figures
    return found, coverage


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
    logged.files = [*logged.files, *traced.files]
    return logged


def _day(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M}"


def _other_run(logged: dict[int, _Figures], traced: dict[int, _Figures], identities: list[LogIdentity]
               ) -> str | None:
    """Why the traces are not of the run the logs are of (None when nothing says so): recorded days apart, a world
    size that disagrees, or the same rank's step an order of magnitude apart in the two."""
    firsts = [i.first for i in identities if i.first is not None]
    lasts = [i.last for i in identities if i.last is not None]
    gap = timedelta(hours=JOB_TIME_GAP_H)
    if firsts and lasts:
        start, end = min(firsts), max(lasts)
        for figures in traced.values():
            if figures.epoch_us is None:
                continue
            recorded = datetime.fromtimestamp(figures.epoch_us / 1e6, UTC)
            if recorded < start - gap or recorded > end + gap:
                return f"recorded {_day(recorded)} UTC, while the logs span {_day(start)} to {_day(end)}"
    stated = {i.world_size for i in identities if i.world_size}
    for figures in traced.values():
        if figures.world_size and stated and figures.world_size not in stated:
            return (f"{figures.files[0]} states a world size of {figures.world_size}, the logs "
                    f"{', '.join(map(str, sorted(stated)))}")
    for rank in sorted(set(logged) & set(traced)):
        log_step, trace_step = logged[rank].step, traced[rank].step
        if logged[rank].unit != "ms" or log_step is None or trace_step is None or min(log_step.median,
                                                                                      trace_step.median) <= 0:
            continue
        ratio = max(log_step.median, trace_step.median) / min(log_step.median, trace_step.median)
        if ratio > JOB_STEP_RATIO:
            return (f"rank {rank}'s median step is {log_step.median:.1f} ms in its log and {trace_step.median:.1f} ms "
                    f"in its trace (x{ratio:.1f}): not the same workload")
    return None


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


def _analyse(ranks: dict[int, _Figures], notes: list[str], world_size: int | None = None) -> FindStragglersResult:
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
        if rank in slow_compute:
            kind = "compute_slow"
        elif rank in compute.by_rank and len(compute.by_rank) > 1:
            kind = "wait_slow"  # its own compute was read, next to others', and is not slow
        flagged.append(FlaggedRank(
            rank=rank, median_step_ms=step_stats[rank].median if rank in step_stats else None,
            deviation_pct=_deviation(step_stats[rank].median, step.median) if rank in step_stats else None,
            compute_ms=compute_stats[rank].median if rank in compute_stats else None,
            compute_deviation_pct=_deviation(compute_stats[rank].median, compute.median)
            if rank in compute_stats else None,
            wait_ms=wait_stats[rank].median if rank in wait_stats else None,
            severity=_severity(pct), kind=kind, evidence=_evidence(rank, kind, step, compute, wait)))
    waited_on = _waited_on(flagged, wait)
    world = world_size if world_size and world_size > len(ranks) else None  # ranks the job has and were not read
    # "No straggler" is a claim about every rank: it needs compute-only times (step times of synchronous ranks are
    # alike whoever is slow) of every rank the job has.
    verdict: Verdict = "straggler" if flagged else "none"
    if not flagged and (len(step.by_rank) < 2 or world is not None or set(compute.by_rank) != set(step.by_rank)
                        or len(compute.by_rank) < 2):
        verdict = "inconclusive"
    summary = RanksSummary(count=len(ranks), median_step_ms=step.median, spread_pct=step.spread_pct(),
                           unit=next((f.unit for f in ranks.values() if f.step), "ms"),
                           median_compute_ms=compute.median, median_wait_ms=wait.median,
                           source=_sources(ranks), world_size=world_size)
    distribution = [d for d in (_distribution("step ms", step), _distribution("compute ms", compute),
                                _distribution("collective wait ms", wait)) if d is not None]
    conclusion, decides = _conclude(verdict, flagged, waited_on, step, compute, sorted(ranks), world_size)
    severity = (max((f.severity for f in flagged), key=lambda s: s.rank) if flagged else
                Severity.unknown if verdict == "inconclusive" else Severity.ok)
    return FindStragglersResult(
        severity=severity, conclusion=conclusion, decides=decides, next_steps=_next_steps(verdict, flagged),
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


def _ranks(numbers: Iterable[int]) -> str:
    listed = sorted(numbers)
    return f"rank {listed[0]}" if len(listed) == 1 else f"ranks {compact_ranges(listed)}"


def _noise_pct(metric: _Metric) -> float:
    """The typical step-to-step noise of a rank, in % of its median (1.4826 x MAD: one standard deviation)."""
    values = [100.0 * 1.4826 * s.mad / s.median for s in metric.by_rank.values() if s.median > 0]
    return statistics.median(values) if values else 0.0


def _conclude(verdict: Verdict, flagged: list[FlaggedRank], waited_on: int | None, step: _Metric,
              compute: _Metric, seen: list[int], world: int | None) -> tuple[list[str], str | None]:
    """The conclusion, and what would decide when it cannot."""
    spread = step.spread_pct()
    count = len(seen)
    unseen = sorted(set(range(world)) - set(seen)) if world and world > count else []
    of_world = f" of the {world} the job has (not read: {_ranks(unseen)})" if unseen else ""
    every = f"all {world} ranks" if world and world > 1 else "every rank"
    if verdict == "straggler":
        first = flagged[0]
        what = {"compute_slow": "computes slowly", "wait_slow": "waits (its compute is normal)",
                "unknown": "is slow (no compute timing to tell whether it computes slowly or waits)"}[first.kind]
        text = [f"Rank {first.rank} {what}: {first.evidence}."]
        if waited_on is not None:
            text.append(f"The other ranks wait for rank {waited_on} at each collective, so they look idle while it "
                        "works; fix that rank, not the idle ones.")
        if unseen:
            text.append(f"Only {count} ranks were read{of_world}: a slower one may be among them.")
        elif len(flagged) > 1:
            text.append(f"{len(flagged)} ranks flagged: {compact_ranges([f.rank for f in flagged])}.")
        return text[:3], None
    if not step.by_rank:
        return [f"No step found on any of the {count} ranks (no ProfilerStep range in the traces, no step-time line "
                "in the logs): nothing to compare.",
                "Pass traces of a few steps (torch.profiler with a schedule, or NVTX ranges named ProfilerStep#N) or "
                "logs that print a step time."], ("Traces with ProfilerStep ranges, or logs with a step time, of "
                                                   f"{every}.")
    if len(step.by_rank) < 2:
        return [f"Only {_ranks(step.by_rank)}'s step times were read{of_world}: a straggler is a rank slower than "
                "the others, so this cannot tell whether there is one.",
                f"Collect the step-time logs (or profiler traces) of {every} and run this again."], (
                    f"Step-time logs or traces of {every}, not of one.")
    if verdict == "none":
        return [f"No straggler: the {count} ranks' compute times agree within the run's noise (step spread "
                f"{spread or 0:.1f}%; a rank is flagged at >= {STRAGGLER_WARN_PCT:g}% and beyond its step-to-step "
                "noise)."], None
    steps_each = statistics.median(s.n for s in step.by_rank.values())
    if spread is not None and spread >= STRAGGLER_WARN_PCT:
        agree = (f"spread {spread:.1f}%, but no rank differs beyond its own step-to-step noise ({steps_each:.0f} "
                 f"steady-state steps a rank, typical noise {_noise_pct(step):.0f}%)")
    else:
        agree = f"agree within {spread or 0:.1f}%"
    if unseen and set(compute.by_rank) == set(step.by_rank) and len(compute.by_rank) > 1:
        opening = (f"No rank stands out among the {count} read, but they are {count}{of_world}: the straggler, if "
                 "there is one, may be among those not read.")
    else:
        opening = (f"Step times of the {count} ranks {agree}: in synchronous data parallelism every rank waits for "
                 "the slowest at the gradient all-reduce, so step times cannot show a straggler.")
    if compute.by_rank and set(compute.by_rank) != set(step.by_rank):
        second = (f"Compute-only times were read for {_ranks(compute.by_rank)} only, of the {count} ranks: collect "
                  f"them (or torch.profiler traces of a few steps) on {every} and run this again.")
    elif unseen:
        second = f"Collect the logs of {every} (with compute-only times, or traces) and run this again."
    else:
        second = ("Collect compute-only timings per rank (forward/backward time without the collective) or "
                  f"torch.profiler traces of a few steps on {every}, and run this again with them.")
    missing = sorted(set(step.by_rank) - set(compute.by_rank))
    decides = (f"Compute-only times (or traces) of {every}"
               + (f"; missing for {_ranks(unseen + missing)}." if unseen or (missing and compute.by_rank) else "."))
    return [opening, second], decides


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
    (plain, step_time_ms=, Megatron-LM, torchtitan, DeepSpeed, detectron2 / mmcv / mmengine, tqdm of HF Trainer /
    Lightning, or your step_regex), compute-only times where logged, and per-step compute vs collective wait from
    torch.profiler traces. Flags ranks >= 5% (warn)
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
    logs = _Logs({}, [], [], [])
    traced: dict[int, _Figures] = {}
    trace_coverage: list[Coverage] = []
    if params.logs:
        logs = await anyio.to_thread.run_sync(_read_logs, params.logs, params, ctx, deadline, abandon_on_cancel=True)
    if params.traces:
        traced, trace_coverage = await anyio.to_thread.run_sync(_read_traces, params.traces, ctx, deadline,
                                                                abandon_on_cancel=True)
    notes, logged = logs.notes, logs.ranks
    if not logged and not any(f.steps for f in traced.values()):
        raise BadInput("no step time found in the given logs or traces.",
                       "Check the format (see the tool's description) or pass step_regex; traces need ProfilerStep "
                       "events (torch.profiler with a schedule and prof.step()).")
    set_apart: list[str] = []
    other_run = _other_run(logged, traced, logs.identities) if logged and traced else None
    if other_run is not None:
        # Joining another run's ranks to these would make a story of two jobs: the side with fewer ranks is left
        # out (the logs on a tie: they are the job's own record), and said so.
        keep_logs = len(logged) >= len(traced)
        left = traced if keep_logs else logged
        set_apart = sorted({name for f in left.values() for name in f.files})
        for index, entry in enumerate(trace_coverage if keep_logs else logs.coverage):
            if entry.input.split(" (process ")[0] in set_apart:
                (trace_coverage if keep_logs else logs.coverage)[index] = Coverage.not_understood(
                    entry.input, f"another run's, left out of the join: {other_run}")
        notes.append(f"{'traces' if keep_logs else 'logs'} left out as another run's ({other_run}): "
                     f"{', '.join(set_apart[:4])}{' ...' if len(set_apart) > 4 else ''}.")
        traced, logged = ({}, logged) if keep_logs else (traced, {})
    ranks = {rank: _combine(logged.get(rank), traced.get(rank)) for rank in sorted(set(logged) | set(traced))}
    stated = {i.world_size for i in logs.identities if i.world_size} | {f.world_size for f in traced.values()
                                                                       if f.world_size}
    if len(stated) > 1:
        notes.append(f"the inputs state different world sizes ({', '.join(map(str, sorted(stated)))}): the largest "
                     "is taken.")
    backend = job_backend(params, ctx)
    if backend is not None and (params.gpu_csv or params.sample_gpus):
        raise BadInput("with slurm_job or hosts, each flagged rank's own GPU is read on its node; gpu_csv and "
                       "sample_gpus are for one node.", "Drop them, or call without slurm_job/hosts.")
    result = _analyse(ranks, notes, max(stated, default=None))
    result.coverage = [*logs.coverage, *trace_coverage]
    if set_apart:
        result.set_apart, result.set_apart_kind = set_apart, "traces" if keep_logs else "logs"
        more = " ..." if len(set_apart) > 2 else ""
        why = f"Left out as another run's: {', '.join(set_apart[:2])}{more} ({other_run})."
        result.conclusion = [*result.conclusion[:2], why]
        if result.severity is Severity.ok:
            result.severity = Severity.unknown
            result.decides = "Logs and traces of the same run, or either alone."
    if backend is not None and result.flagged:
        await _hardware_on_nodes(result, backend, params, ctx)
    elif params.gpu_csv or params.sample_gpus:
        await _hardware(result, params, ctx)
    return result
