"""summarize_trace: where the step time goes and why the GPU is idle, from PyTorch profiler traces.

Reads a Kineto Chrome trace (.json / .json.gz, object or bare-array form, 2021 to current category
spellings), an Nsight Systems SQLite export (one rank per process with GPU work; tools/traces/nsys.py), or a
folder of per-rank traces, streamed (tools/traces/kineto.py). Per rank it reports step time,
GPU busy as the union of GPU intervals, compute / communication / memory time, exposed communication,
and HTA's temporal breakdown (idle / compute / non-compute) computed HTA's way on HTA's window (all
ProfilerSteps but the last, GPU work matched to CPU launches by correlation), so the two compare number
for number. Then it attributes the GPU-idle time of the analysed steps to causes: data loading (idle
while DataLoader.__next__ runs), implicit sync (idle while a synchronising runtime call waits, with the
Python op that made it); the rest gap by gap, from the kernel that ends the gap and its launch call: a
kernel launched only after the GPU ran dry means the GPU waited for the host, in a short gap op-by-op
dispatch overhead (launch-bound), at the start of a step host preprocessing, else other host work; a
kernel queued before the gap means a wait on another stream or event (gpu_wait; a CUDA graph's kernels
count as queued). Plus exposed communication and, across ranks, the straggler. SOP: gpu_utilization_low,
straggler.

What cannot be judged is said, not guessed (issue 30): a file cut short (a copy of a trace still being written) is
judged only on the steps whose host and GPU events are all in it, or not at all; a CPU-only profile, an nsys export
without its kernel table and nsys stats totals give figures but no verdict (`unknown`, with what would decide);
claims across ranks say how many of the job's ranks were traced; an empty or eventless trace is refused.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import numpy as np
from pydantic import BaseModel, Field, field_validator

from tools.core.context import ToolContext
from tools.core.errors import UnreadableInput
from tools.core.files import read_regular, size_text
from tools.core.intervals import Spans, merge
from tools.core.kernel_names import ncu_profile_command
from tools.core.limits import TRACE_MAX_RANK_ROWS, TRACE_NCU_TOP_KERNELS, TRACE_TOP_KERNELS
from tools.core.models import Coverage, InputModel, NextStep, PathArg, Severity, Table, ToolResult
from tools.core.ranks import compact_ranges
from tools.core.thresholds import (
    BOTTLENECK_BUSY_PCT,
    BOTTLENECK_CAUSE_PCT,
    DISPATCH_GAP_US,
    LAUNCH_AHEAD_US,
    MIN_CAUSE_PCT,
    SMALL_GAP_US,
    TRACE_NCU_COMPUTE_SHARE,
)
from tools.traces.collect import (
    COMM_NAME,
    KIND_CODE,
    LAUNCH_SAMPLE,
    Collected,
    HostOps,
    collect_events,
    collect_file,
    gpu_columns,
    gpu_union,
    hta_kind,
    step_pattern,
)
from tools.traces.compute import achieved
from tools.traces.kineto import TraceHeader, rank_of_trace, trace_files
from tools.traces.nsys import (
    NsysRule,
    exported_reports,
    is_nsys_export,
    nsys_has_kernels,
    nsys_processes,
    nsys_ranks,
    nsys_rules,
    read_nsys_batches,
)
from tools.traces.nsys_stats import NsysStats, is_nsys_stats, read_nsys_stats

__all__ = ["Cause", "CauseKind", "KernelStat", "SummarizeTraceInput", "SummarizeTraceResult", "TraceBreakdown",
           "bottleneck", "branch_of_cause", "breakdown", "short_name", "summarize_trace", "top_kernels"]

CauseKind = Literal["data_loading", "input_preprocessing", "launch_bound", "implicit_sync", "exposed_comm",
                    "gpu_wait", "straggler", "host_other"]

_MIN_ITERATIONS = 3  # DataLoader calls that make a loop's iterations when a trace has no ProfilerStep
_NESTING_LOOKBACK = 16  # ops started before a sync call that are checked for enclosing it

_FIX = {
    "data_loading": "More DataLoader workers (num_workers), pin_memory=True, prefetch_factor, faster storage or "
                    "pre-decoded data.",
    "input_preprocessing": "Move decoding/transforms/tokenisation off the step: into DataLoader workers "
                           "(num_workers > 0, prefetch), onto the GPU, or precompute them.",
    "launch_bound": "Fewer, larger kernels: CUDA graphs (torch.compile mode='reduce-overhead'), torch.compile / "
                    "fusion, a larger batch.",
    "implicit_sync": "Remove the host sync from the step: no .item()/.cpu()/printing of GPU values per step; "
                     "accumulate on the GPU and read every N steps.",
    "exposed_comm": "Overlap communication with compute (DDP bucket_cap_mb, FSDP prefetch), fewer/larger "
                    "collectives, check the interconnect (NCCL_DEBUG=INFO, nccl-tests).",
    "gpu_wait": "Read the stream dependencies before those kernels (cudaStreamWaitEvent, event records, the "
                "stream a copy waits behind): overlap or reorder the work it waits for.",
    "straggler": "Look at that rank's GPU (clocks, temperature, power cap, PCIe/NVLink) and its data loading; "
                 "run find_stragglers / health_check on its node.",
    "host_other": "Profile the CPU side of the step (py-spy record, or with_stack=True) to see what Python "
                  "does while the GPU waits.",
}


class SummarizeTraceInput(InputModel):
    path: PathArg = Field(description="A Kineto/PyTorch-profiler trace (.json or .json.gz), an Nsight Systems SQLite "
                      "export (.sqlite: nsys export --type sqlite) or report (.nsys-rep/.qdrep, exported with the "
                      "nsys on PATH), nsys stats --format csv output (a partial view), or a folder of per-rank "
                      "traces, inside the roots.")
    include_last_step: bool = Field(default=False, description="Analyse the last ProfilerStep too (HTA leaves it "
                                    "out by default, since it is often cut short).")
    step_range: str | None = Field(default=None, max_length=200, description="Annotation ranges (NVTX, "
                                   "record_function) that are the steps, as a name or RE2 pattern, e.g. "
                                   "'train_step' or '^iteration \\d+$', for jobs that mark steps their own way; "
                                   "ProfilerStep#N always is.")

    cli_positional = "path"

    @field_validator("step_range")
    @classmethod
    def _linear_pattern(cls, value: str | None) -> str | None:
        if value is not None:
            step_pattern(value)  # a clear error now for a pattern RE2 cannot take
        return value


class RankSummary(BaseModel):
    rank: int
    file: str
    steps: int = Field(description="ProfilerSteps analysed.")
    step_time_ms: float | None = Field(description="Median step time of the analysed steps.")
    window: str = Field(description="What the figures cover.")
    gpu_busy_pct: float | None
    idle_pct: float | None = Field(description="HTA temporal breakdown: % of the GPU-active span in HTA's window.")
    compute_pct: float | None
    non_compute_pct: float | None
    comm_pct: float | None = Field(description="% of step time with a communication kernel running.")
    memory_pct: float | None = Field(description="% of step time with a memcpy/memset running.")
    exposed_comm_pct: float | None = Field(description="% of step time with communication but no compute: collective "
                                           "kernels alone on the GPU, or the GPU idle while the host waits in MPI.")
    comm_overlap_pct: float | None = Field(description="% of communication time overlapped by compute.")
    data_wait_pct: float | None = Field(description="% of step time the GPU idles while the DataLoader runs.")
    achieved_tflops: float | None = Field(default=None, description="FLOPs the trace records over the analysed "
                                          "window, per second (with_flops counts, else matmul shapes).")
    mfu_pct: float | None = Field(default=None, description="achieved_tflops as % of the device's dense peak for "
                                  "the matmuls' precision.")
    flops_from: str | None = Field(default=None, description="Where the FLOP counts come from.")
    precision: str | None = Field(default=None, description="The matmuls' precision (inputs, else GEMM names).")
    peak_tflops: float | None = None
    device: str | None = Field(default=None, description="The GPU (deviceProperties), as the peak table names it.")
    bottleneck: str = Field(default="gpu_busy", description="The one thing to fix first on this rank: 'gpu_busy' "
                            "(>= 85 % busy, no cause of 10 %), else the kind of its largest cause.")
    gpu_events: int
    events: int


class StepSummary(BaseModel):
    rank: int
    step: int = Field(description="Position of the step in the trace (0-based).")
    step_time_ms: float
    gpu_busy_pct: float | None
    data_wait_pct: float | None


class Cause(BaseModel):
    kind: CauseKind
    share_pct: float = Field(description="Share of step time.")
    evidence: str
    fix: str
    rank: int | None = Field(default=None, description="The rank it concerns (the worst one), when several.")


class IdleOp(BaseModel):
    name: str
    rank: int
    idle_overlap_ms: float = Field(description="GPU-idle time during which this CPU op was running.")
    calls: int


class KernelStat(BaseModel):
    name: str
    kind: str
    count: int
    total_ms: float
    mean_us: float
    share_pct: float


class SummarizeTraceResult(ToolResult):
    bottleneck: str = Field(default="gpu_busy", description="The one thing to fix first: 'gpu_busy' (the GPUs are "
                            ">= 85 % busy and no cause reaches 10 %), else the kind of the largest cause; 'unknown' "
                            "when no rank can be judged (nsys stats tables, which have no timeline; a CPU-only "
                            "profile; a file cut before its first complete step).")
    ranks: list[RankSummary]
    causes: list[Cause]
    top_kernels: list[KernelStat]
    idle_cpu_ops: list[IdleOp] = Field(description="CPU ops (>= 100 us) running while the GPU idled, most "
                                       "overlap first; nested ops each count.")
    steps: list[StepSummary] = Field(description="Each analysed step of each rank (cut first by the budget).")
    kernel_histogram: dict[str, int] = Field(description="Kernel count by duration: <10us, 10-100us, 100us-1ms, >=1ms.")
    nsys_rules: list[NsysRule] = Field(default_factory=list, description="Nsight Systems exports only: NVIDIA's own "
                                       "expert-system rules (nsys analyze), with its names and thresholds.")
    nsys_stats: NsysStats | None = Field(default=None, description="nsys stats CSV tables only: the partial view "
                                         "they allow (kernel and CUDA API totals, the synchronising share).")

    narrow_hint = "pass one rank's file instead of the folder"

    def tables(self) -> list[Table]:
        return [
            Table("Causes of GPU idle and slow steps (share of step time)", ["cause", "share %", "rank", "evidence",
                                                                              "fix"],
                  [[c.kind, f"{c.share_pct:.1f}", "-" if c.rank is None else str(c.rank), c.evidence, c.fix]
                   for c in self.causes], "causes"),
            Table("Per rank", ["rank", "steps", "step ms", "busy %", "idle %", "compute %", "non-compute %", "comm %",
                               "exposed comm %", "data wait %", "TFLOP/s", "MFU %", "window"],
                  [[str(r.rank), str(r.steps), _f(r.step_time_ms), _f(r.gpu_busy_pct), _f(r.idle_pct),
                    _f(r.compute_pct), _f(r.non_compute_pct), _f(r.comm_pct), _f(r.exposed_comm_pct),
                    _f(r.data_wait_pct), _f(r.achieved_tflops), _f(r.mfu_pct), r.window] for r in self.ranks],
                  "ranks"),
            Table("Top kernels", ["kernel", "kind", "count", "total ms", "mean us", "share %"],
                  [[k.name, k.kind, str(k.count), f"{k.total_ms:.2f}", f"{k.mean_us:.1f}", f"{k.share_pct:.1f}"]
                   for k in self.top_kernels], "top_kernels"),
            Table("CPU ops running while the GPU idled", ["op", "rank", "idle overlap ms", "calls"],
                  [[o.name, str(o.rank), f"{o.idle_overlap_ms:.2f}", str(o.calls)] for o in self.idle_cpu_ops],
                  "idle_cpu_ops"),
            Table("Nsight Systems rules (nsys analyze)", ["rule", "file", "count", "ms", "evidence"],
                  [[r.rule, r.file, str(r.count), f"{r.time_ms:.1f}", r.evidence] for r in self.nsys_rules],
                  "nsys_rules"),
            Table("CUDA API (nsys stats)", ["api", "calls", "total ms", "share %"],
                  [[r.name, str(r.count), f"{r.total_ms:.2f}", _f(r.share_pct)]
                   for r in (self.nsys_stats.api if self.nsys_stats else [])]),  # bounded where it is read
            Table("Per step", ["rank", "step", "ms", "busy %", "data wait %"],
                  [[str(p.rank), str(p.step), f"{p.step_time_ms:.1f}", _f(p.gpu_busy_pct), _f(p.data_wait_pct)]
                   for p in self.steps], "steps"),
        ]


def _f(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


# ---------------------------------------------------------------- analysis of one rank


@dataclass
class _RankResult:
    summary: RankSummary
    causes: list[Cause]
    kernels: dict[str, list[Any]]
    histogram: Counter[str]
    notes: list[str]
    steps: list[StepSummary] = field(default_factory=list)
    idle_ops: list[IdleOp] = field(default_factory=list)
    profiled_steps: int = 0  # ProfilerSteps in the file, the last one too (the kernels cover them all)
    # Why this rank's trace cannot say why its GPU idles (no GPU events, no complete step of a cut file): its
    # figures are shown, its causes are not counted and no verdict is drawn from it.
    undecided: str | None = None
    decides: str | None = None  # for an undecided rank: the evidence that would decide
    caveat: str | None = None  # what limits the verdict drawn from it (a cut file: the window judged)
    world_size: int | None = None  # as its distributedInfo says


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 2) if whole > 0 else None



def _hta_breakdown(data: Collected, until: float | None) -> tuple[float | None, ...]:
    """HTA's get_temporal_breakdown: GPU events launched before `until` (the last step's start), span of their
    activity; every GPU event when `until` is None."""
    gpu = gpu_columns(data)
    if until is not None:
        kept = (gpu.launch > -np.inf) & (gpu.launch < until)
    else:
        kept = np.ones(len(gpu.ts), dtype=bool)
    merged = gpu_union(data, kept, data.float_ts)
    if not merged:
        return None, None, None
    span = float(merged.ends[-1] - merged.starts[0])
    idle = span - merged.total()
    del merged
    compute = gpu_union(data, kept & (gpu.kind == KIND_CODE["compute"]), data.float_ts).total()
    return _pct(idle, span), _pct(compute, span), _pct(span - compute - idle, span)


def _undecided(rank: int, display: str, data: Collected, steps: int, window: str, why: str, decides: str,
               data_wait_pct: float | None = None) -> _RankResult:
    """A rank whose trace cannot tell why the GPU idles: its counts, no figures it cannot back, no causes."""
    summary = RankSummary(rank=rank, file=display, steps=0, step_time_ms=None, window=window, gpu_busy_pct=None,
                          idle_pct=None, compute_pct=None, non_compute_pct=None, comm_pct=None, memory_pct=None,
                          exposed_comm_pct=None, comm_overlap_pct=None, data_wait_pct=data_wait_pct,
                          bottleneck="unknown", gpu_events=len(gpu_columns(data).ts), events=data.events)
    return _RankResult(summary, [], data.kernels, data.kernel_durations, [], profiled_steps=steps,
                       undecided=why, decides=decides)


def _analyse(rank: int, display: str, data: Collected, include_last: bool,
             horizon: float | None = None) -> _RankResult:
    """One rank's breakdown and causes. `horizon`: the file ends early and its host and GPU events are complete
    only up to this time; only the steps (or iterations) that end before it are judged."""
    notes: list[str] = []
    data.sync_ops = data.sync_ops.around(data.syncs)  # before the large sets are made: memory bounds the size
    steps = sorted(data.steps)
    analysed = steps if include_last or len(steps) < 2 else steps[:-1]
    hta_until = steps[-1][0] if not include_last and len(steps) >= 2 else None
    gpu_all = gpu_union(data)
    loads = sorted(merge(data.dataloader))
    if horizon is not None:
        # A cut file: each step that ends before the horizon has all its events; the ones after it lack GPU work
        # (or host work) that was never written, and would read as idle GPU. Those are all left out.
        analysed = [s for s in steps if s[1] <= horizon]
        loads = [s for s in loads if s[1] <= horizon]
        if steps and not analysed:
            return _undecided(rank, display, data, len(steps), f"none of {len(steps)} ProfilerSteps complete",
                              f"{display} ends early and none of its {len(steps)} ProfilerSteps has all its host "
                              f"and GPU events: its GPU or launch events stop {(horizon - steps[0][0]) / 1000:.1f} "
                              "ms into the first step", _DECIDES_CUT)
        hta_until = analysed[-1][1] if analysed else horizon
    if not steps and len(loads) >= _MIN_ITERATIONS:
        # No ProfilerStep (the autograd-profiler API, a bare profile() block): a training loop's iterations run
        # from one DataLoader call to the next. The first is left out: it holds the warm-up (cuDNN autotuning,
        # the allocator's first growth), often seconds long.
        iterations = [(a, b) for (a, _), (b, _) in zip(loads, loads[1:], strict=False)]
        analysed = iterations[1:]
        start, end = analysed[0][0], analysed[-1][1]
        window = (f"DataLoader iterations {len(analysed)} of {len(iterations)} (no ProfilerStep; the first, with "
                  "the warm-up, left out" + ("; the file ends early: only the iterations with all their host and "
                                             "GPU events)" if horizon is not None else ")"))
        step_ms: float | None = statistics.median(e - s for s, e in analysed) / 1000.0
    elif analysed:
        start, end = analysed[0][0], analysed[-1][1]
        window = f"ProfilerSteps {len(analysed)} of {len(steps)}" + (
            " (the file ends early: only the steps with all their host and GPU events)" if horizon is not None
            else "" if include_last or len(steps) < 2 else " (last left out, as HTA)")
        step_ms = statistics.median(e - s for s, e in analysed) / 1000.0
    elif gpu_all:
        start, end = float(gpu_all.starts[0]), float(gpu_all.ends[-1])
        window = "first to last GPU activity (no ProfilerStep)"
        if horizon is not None and horizon < end:
            end = max(start, horizon)
            window = "first GPU activity to where the file's GPU or host events stop (no ProfilerStep; it ends early)"
        notes.append(f"rank {rank}: no ProfilerStep annotation; the first-to-last GPU activity window is analysed.")
        step_ms = None
    else:
        start, end = data.cpu_span
        window = "first to last CPU event (no ProfilerStep, no GPU)"
        step_ms = None
    length = max(end - start, 0.0)
    step_window = Spans([start], [end]) if length > 0 else Spans([], [])
    dataloader = Spans.of(merge(data.dataloader))
    causes: list[Cause] = []
    if not len(gpu_columns(data).ts):
        # A CPU-only profile (no ProfilerActivity.CUDA, or a job on the CPU): the host's step and DataLoader time
        # are real, but whether the GPU waited on them (or worked ahead, asynchronously) the trace cannot say.
        data_ms = step_window.intersect(dataloader).total()
        notes.append(f"rank {rank}: no GPU events (a CPU-only trace): only CPU step and data-loading time"
                     + (f" (DataLoader.__next__ {data_ms / 1000:.1f} ms of {length / 1000:.1f} ms)" if data_ms > 0
                        else "") + ".")
        summary = RankSummary(rank=rank, file=display, steps=len(analysed), step_time_ms=step_ms, window=window,
                              gpu_busy_pct=None, idle_pct=None, compute_pct=None, non_compute_pct=None,
                              comm_pct=None, memory_pct=None, exposed_comm_pct=None, comm_overlap_pct=None,
                              data_wait_pct=_pct(data_ms, length), bottleneck="unknown", gpu_events=0,
                              events=data.events)
        return _RankResult(summary, causes, data.kernels, data.kernel_durations, notes, profiled_steps=len(steps),
                           undecided=f"{display} holds host events only, no GPU event: a profile without "
                           "ProfilerActivity.CUDA cannot show when the GPU idled", decides=_DECIDES_GPU)

    busy = gpu_all.clip(start, end)
    del gpu_all  # the large sets are dropped as soon as they are used up: memory bounds the trace size
    # HTA's split first, while no other large set is alive (each of these sets is the size of the GPU events).
    hta_idle, hta_compute, hta_non_compute = _hta_breakdown(data, hta_until)
    gpu = gpu_columns(data)
    compute = gpu_union(data, (gpu.kind == KIND_CODE["compute"]) & ~gpu.comm).clip(start, end)
    comm = gpu_union(data, gpu.comm).clip(start, end)
    memory = gpu_union(data, gpu.kind == KIND_CODE["memory"]).clip(start, end).total()
    exposed = comm.subtract(compute).total()
    comm_ms = comm.total()
    del compute, comm
    idle = step_window.subtract(busy)

    # Attribute idle time: data loading first, then host syncs, then communication the host waits in (MPI); then
    # host work that opens a step before its first GPU work (input preprocessing); then each remaining gap by the GPU
    # work that ends it.
    data_wait = idle.intersect(dataloader)
    rest = idle.subtract(data_wait)
    sync_wait = rest.intersect(data.syncs.spans())
    rest = rest.subtract(sync_wait)
    host_comm_wait = rest.intersect(data.host_comm.spans())
    rest = rest.subtract(host_comm_wait)
    gaps = _IdleGaps()
    _sample_kernels(data, gaps, start, end)
    gaps.preprocess, gaps.preprocess_steps = _preprocessing(data, busy, rest, analysed)
    rest = rest.subtract(gaps.preprocess)
    _classify_gaps(data, rest, gaps)

    def share(value: float) -> float:
        return _pct(value, length) or 0.0

    if data_wait:
        in_window = sum(1 for s, e in dataloader if e > start and s < end)
        causes.append(Cause(kind="data_loading", share_pct=share(data_wait.total()),
                            evidence=f"GPU idle {data_wait.total() / 1000:.1f} ms while DataLoader.__next__ ran "
                            f"({in_window} call(s) in the window)", fix=_FIX["data_loading"]))
    if sync_wait:
        sync_ts, sync_end, _, sync_name = data.syncs.columns()
        met = np.flatnonzero(sync_wait.within_each(sync_ts, sync_end) > 0)  # the calls the GPU idled during
        ops = _sync_ops(data, met)
        calls = Counter(data.syncs.names[i] for i in sync_name[met].tolist())
        causes.append(Cause(kind="implicit_sync", share_pct=share(sync_wait.total()),
                            evidence=f"GPU idle {sync_wait.total() / 1000:.1f} ms during "
                            + ", ".join(f"{n} x{c}" for n, c in calls.most_common(3))
                            + (f"; called from {', '.join(f'{n} x{c}' for n, c in ops.most_common(3))}" if ops else ""),
                            fix=_FIX["implicit_sync"]))
    if gaps.preprocess:
        ops_run = _ops_during(data, gaps.preprocess)
        causes.append(Cause(kind="input_preprocessing", share_pct=share(gaps.preprocess.total()),
                            evidence=f"GPU idle {gaps.preprocess.total() / 1000:.1f} ms at the start of "
                            f"{gaps.preprocess_steps} step(s) while the host worked before launching "
                            "the step's first GPU work (no DataLoader marker)"
                            + (f"; host ops: {', '.join(f'{n} {ms:.1f} ms' for n, ms in ops_run)}" if ops_run else ""),
                            fix=_FIX["input_preprocessing"]))
    launch_gaps, other = gaps.dispatch, gaps.host.total()
    kernel_count = sum(v[0] for v in data.kernels.values())
    short = data.kernel_durations.get("<10us", 0)
    unlinked_small = gaps.unlinked.where(gaps.unlinked.ends - gaps.unlinked.starts < SMALL_GAP_US)
    if kernel_count and short / kernel_count >= 0.5:
        launch_gaps = Spans.join(launch_gaps, unlinked_small)  # no launch call to tell: short kernels, short gaps
        other += gaps.unlinked.total() - unlinked_small.total()
    else:
        other += gaps.unlinked.total()  # short gaps without short kernels are host work, not launch overhead
    if launch_gaps:
        causes.append(Cause(kind="launch_bound", share_pct=share(launch_gaps.total()),
                            evidence=_launch_evidence(data, gaps, launch_gaps), fix=_FIX["launch_bound"]))
    if exposed > 0 or host_comm_wait:
        causes.append(Cause(kind="exposed_comm", share_pct=share(exposed + host_comm_wait.total()),
                            evidence=_exposed_evidence(data, exposed, comm_ms, host_comm_wait),
                            fix=_FIX["exposed_comm"]))
    if gaps.queued:
        causes.append(Cause(kind="gpu_wait", share_pct=share(gaps.queued.total()),
                            evidence=f"GPU idle {gaps.queued.total() / 1000:.1f} ms in {len(gaps.queued)} gaps with "
                            "the next kernel or copy already queued: it waited on another stream or an event (or a "
                            "CUDA graph's own order), not on the host", fix=_FIX["gpu_wait"]))
    if other > 0:
        causes.append(Cause(kind="host_other", share_pct=share(other),
                            evidence=f"GPU idle {other / 1000:.1f} ms waiting for the host with no DataLoader or sync "
                            "call running (Python/CPU work between launches)", fix=_FIX["host_other"]))
    per_step = [
        StepSummary(rank=rank, step=i, step_time_ms=round((e - s) / 1000, 3),
                    gpu_busy_pct=_pct(busy.within(s, e), e - s),
                    data_wait_pct=_pct(data_wait.within(s, e), e - s))
        for i, (s, e) in enumerate(analysed)
    ]
    compute_rate = achieved(data.flops, start, end, data.device_name)
    if compute_rate.note:
        notes.append(f"rank {rank}: {compute_rate.note}.")
    summary = RankSummary(
        rank=rank, file=display, steps=len(analysed), step_time_ms=step_ms, window=window,
        achieved_tflops=compute_rate.tflops, mfu_pct=compute_rate.mfu_pct, flops_from=compute_rate.source,
        precision=compute_rate.precision, peak_tflops=compute_rate.peak_tflops, device=compute_rate.device,
        gpu_busy_pct=_pct(busy.total(), length), idle_pct=hta_idle, compute_pct=hta_compute,
        non_compute_pct=hta_non_compute, comm_pct=_pct(comm_ms, length), memory_pct=_pct(memory, length),
        exposed_comm_pct=_pct(exposed + host_comm_wait.total(), length),
        comm_overlap_pct=_pct(comm_ms - exposed, comm_ms), data_wait_pct=_pct(data_wait.total(), length),
        gpu_events=len(gpu_columns(data).ts), events=data.events,
    )
    summary.bottleneck = bottleneck(summary.gpu_busy_pct, causes)
    return _RankResult(summary, causes, data.kernels, data.kernel_durations, notes, per_step,
                       _idle_ops(rank, data, idle), len(steps))


def bottleneck(busy_pct: float | None, causes: list[Cause]) -> str:
    """The one verdict a reader of the timeline gives: the GPU is busy (nothing worth fixing first), or the kind of
    the largest cause of GPU idle or slow steps."""
    top = max(causes, key=lambda c: c.share_pct, default=None)
    if top is None or (busy_pct is not None and busy_pct >= BOTTLENECK_BUSY_PCT
                       and top.share_pct < BOTTLENECK_CAUSE_PCT):
        return "gpu_busy"
    return top.kind


def _idle_ops(rank: int, data: Collected, idle: Spans) -> list[IdleOp]:
    overlap, calls = _overlap_by_name(data.long_ops, idle)
    top = [i for i in np.argsort(-overlap, kind="stable")[:TRACE_TOP_KERNELS].tolist() if overlap[i] > 0]
    return [IdleOp(name=short_name(data.long_ops.names[i]), rank=rank, idle_overlap_ms=round(float(overlap[i]) / 1000,
                   3), calls=int(calls[i])) for i in top]


def _overlap_by_name(ops: HostOps, spans: Spans) -> tuple[np.ndarray[Any, np.dtype[np.float64]],
                                                          np.ndarray[Any, np.dtype[np.int64]]]:
    """Per op name: how much of `spans` its ops cover (nested ones each count), and how many of them meet it."""
    ts, end, _, name = ops.columns()
    shared = spans.within_each(ts, end)
    hit = shared > 0
    return (np.asarray(np.bincount(name[hit], weights=shared[hit], minlength=len(ops.names)), dtype=np.float64),
            np.asarray(np.bincount(name[hit], minlength=len(ops.names)), dtype=np.int64))


def _sync_ops(data: Collected, met: np.ndarray[Any, np.dtype[np.int64]]) -> Counter[str]:
    """The Python-level ops (aten::item, .cpu(), ...) that issued the sync calls `met` (indices into data.syncs)."""
    found: Counter[str] = Counter()
    ops = data.sync_ops
    if not len(ops) or not len(met):
        return found
    ts, end, thread, name = ops.columns()
    order = np.lexsort((end, ts, thread))  # by thread, then start (then end, as tuples sort)
    ts, end, thread, name = ts[order], end[order], thread[order], name[order]
    thread_of = {key: index for index, key in enumerate(ops.threads)}
    sync_ts, sync_end, sync_thread, _ = data.syncs.columns()
    for k in met.tolist():
        index = thread_of.get(data.syncs.threads[sync_thread[k]])
        if index is None:
            continue
        low, high = np.searchsorted(thread, [index, index + 1], side="left").tolist()
        i = low + int(np.searchsorted(ts[low:high], sync_ts[k], side="right"))
        # The latest-starting op that still contains the call is the innermost: it names the cause best.
        for j in range(i - 1, max(i - _NESTING_LOOKBACK, low) - 1, -1):
            if end[j] >= sync_end[k]:
                found[ops.names[name[j]]] += 1
                break
    return found


def _empty() -> Spans:
    return Spans([], [])


@dataclass
class _IdleGaps:
    """The GPU-idle intervals left after data loading and syncs, by what the GPU waited for: the kernel that
    ends a gap and its launch call say whether the GPU's queue was empty (it waited for the host)."""

    dispatch: Spans = field(default_factory=_empty)  # host-bound and short: op-by-op launch overhead
    preprocess: Spans = field(default_factory=_empty)  # host work from a step's start to its first GPU work
    preprocess_steps: int = 0
    host: Spans = field(default_factory=_empty)  # other host-bound gaps
    queued: Spans = field(default_factory=_empty)  # the next kernel was queued already (streams, CUDA graphs)
    unlinked: Spans = field(default_factory=_empty)  # no launch call for the next kernel, or no next kernel
    launch_to_start: list[float] = field(default_factory=list)  # of the kernels that end host-bound gaps
    kernel_us: list[float] = field(default_factory=list)  # durations of the kernels in the window (sampled)


def _sample_kernels(data: Collected, found: _IdleGaps, start: float, end: float) -> None:
    gpu = gpu_columns(data)
    window = (gpu.ts >= start) & (gpu.ts < end) & (gpu.kind == KIND_CODE["compute"])
    found.kernel_us = (gpu.end[window] - gpu.ts[window])[:LAUNCH_SAMPLE].tolist()


def _launch_at(data: Collected, times: np.ndarray[Any, np.dtype[np.float64]]) -> tuple[
        np.ndarray[Any, np.dtype[np.bool_]], np.ndarray[Any, np.dtype[np.float64]]]:
    """For each time: whether GPU work starts exactly then, and the latest launch call behind it (-inf when it
    has none in the trace, e.g. a CUDA graph's kernels)."""
    gpu = gpu_columns(data)
    if not len(gpu.ts):
        return np.zeros(len(times), dtype=bool), np.full(len(times), -np.inf)
    if data.launch_by_start is None:
        first = np.flatnonzero(np.append(True, gpu.ts[1:] != gpu.ts[:-1]))
        data.launch_by_start = (gpu.ts[first], np.maximum.reduceat(gpu.launch, first))
    unique, latest = data.launch_by_start
    at = np.minimum(np.searchsorted(unique, times), len(unique) - 1)
    found = unique[at] == times
    return found, np.where(found, latest[at], -np.inf)


def _preprocessing(data: Collected, busy: Spans, rest: Spans, steps: list[tuple[float, float]]) -> tuple[Spans, int]:
    """Host work that opens a step before its first GPU work: the GPU idles from the step's start, the first work
    is launched only after the step began, and the idle time before it (DataLoader and syncs taken out) is longer
    than op-by-op dispatch."""
    starts, ends, count = [], [], 0
    for step_start, step_end in steps:
        i = int(np.searchsorted(busy.starts, step_start, side="left"))
        if (i > 0 and busy.ends[i - 1] > step_start) or i >= len(busy) or busy.starts[i] >= step_end:
            continue  # work from before the step is still running, or the step has none
        first = float(busy.starts[i])
        found, launch = _launch_at(data, np.array([first]))
        pieces = rest.clip(step_start, first)
        if found[0] and launch[0] >= step_start - LAUNCH_AHEAD_US and pieces.total() >= DISPATCH_GAP_US:
            starts.append(pieces.starts)
            ends.append(pieces.ends)
            count += 1
    if not count:
        return _empty(), 0
    return Spans(np.concatenate(starts), np.concatenate(ends)), count


def _classify_gaps(data: Collected, gaps: Spans, found: _IdleGaps) -> None:
    """Each gap by the GPU work that ends it: launched only after the gap began (the GPU waited for the host:
    dispatch overhead when short, other host work when long), queued before it (a wait on the GPU side; a CUDA
    graph's kernels count here), or unknown (no work at its end in the window, or none of it with a launch call
    and no CUDA graph to explain)."""
    work, launch = _launch_at(data, gaps.ends)
    linked = launch > -np.inf
    host_bound = work & linked & (launch >= gaps.starts - LAUNCH_AHEAD_US)
    queued = work & ~host_bound & (linked | bool(data.graph_launches))
    short = gaps.ends - gaps.starts < DISPATCH_GAP_US
    found.dispatch = gaps.where(host_bound & short)
    found.host = gaps.where(host_bound & ~short)
    found.queued = gaps.where(queued)
    found.unlinked = gaps.where(~host_bound & ~queued)
    found.launch_to_start = (gaps.ends[host_bound] - launch[host_bound]).tolist()


def _exposed_evidence(data: Collected, on_gpu: float, comm_ms: float, host_wait: Spans) -> str:
    """What the exposed communication is: collective kernels with no compute beside them, the GPU idle while the
    host waits in MPI calls, or both."""
    parts = []
    if on_gpu > 0:
        overlap = _pct(comm_ms - on_gpu, comm_ms)
        parts.append(f"{on_gpu / 1000:.1f} ms of communication with no compute beside it ({overlap:.0f}% of "
                     f"{comm_ms / 1000:.1f} ms overlapped)")
    if host_wait:
        ts, end, _, name = data.host_comm.columns()
        met = host_wait.within_each(ts, end) > 0
        calls = Counter(data.host_comm.names[i] for i in name[met].tolist())
        parts.append(f"GPU idle {host_wait.total() / 1000:.1f} ms while the host waited in MPI ("
                     + ", ".join(f"{n} x{c}" for n, c in calls.most_common(3)) + "): communication nothing overlaps")
    return "; ".join(parts)


def _median(values: np.ndarray[Any, np.dtype[np.float64]]) -> float:
    """np.median's figure without np.median, whose first call imports numpy.ma (tens of ms of a CLI call)."""
    ordered = np.sort(values)
    mid = len(ordered) // 2
    if not len(ordered):
        return float("nan")
    return float(ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2)


def _launch_evidence(data: Collected, gaps: _IdleGaps, launch_gaps: Spans) -> str:
    parts = [f"CPU overhead: GPU idle {launch_gaps.total() / 1000:.1f} ms in {len(launch_gaps)} gaps between "
             f"kernels, median gap {_median(launch_gaps.ends - launch_gaps.starts):.1f} us"]
    if gaps.launch_to_start:
        parts.append("the next kernel is launched only after the GPU ran dry and starts a median "
                     f"{statistics.median(gaps.launch_to_start):.1f} us after its launch call (it waits for the host)")
    if gaps.kernel_us:
        parts.append(f"median kernel {statistics.median(gaps.kernel_us):.1f} us")
    if data.launch_durations:
        parts.append(f"median launch call {statistics.median(data.launch_durations):.1f} us")
    return "; ".join(parts)


def _ops_during(data: Collected, spans: Spans) -> list[tuple[str, float]]:
    """The longest CPU ops (>= LONG_OP_US) running during `spans`, by overlap in ms, innermost ones included."""
    by_name, _ = _overlap_by_name(data.long_ops, spans)
    overlap: dict[str, float] = defaultdict(float)
    for i in np.flatnonzero(by_name > 0).tolist():
        overlap[short_name(data.long_ops.names[i])] += float(by_name[i])
    return [(n, v / 1000) for n, v in sorted(overlap.items(), key=lambda kv: kv[1], reverse=True)[:3]]


# ---------------------------------------------------------------- files, ranks, the tool


def _collapse_notes(notes: list[str]) -> list[str]:
    """'rank N: same words' notes of many ranks as one ('ranks 0-7: ...'), in first-seen order."""
    by_text: dict[str, list[int]] = {}
    kept: list[str] = []
    for note in notes:
        found = re.match(r"rank (\d+): (.*)", note)
        if found is None:
            kept.append(note)
            continue
        ranks = by_text.setdefault(found.group(2), [])
        if not ranks:
            kept.append(found.group(2))
        ranks.append(int(found.group(1)))
    return [f"rank{'s' if len(by_text[n]) > 1 else ''} {compact_ranges(by_text[n])}: {n}" if n in by_text else n
            for n in kept]


def _device_name(header: TraceHeader, device: int | None) -> str | None:
    """The name deviceProperties gives the GPU the kernels ran on (entry 0 when they do not say which)."""
    listed = header.metadata.get("deviceProperties")
    if not isinstance(listed, list):
        return None
    entries = [e for e in listed if isinstance(e, dict) and isinstance(e.get("name"), str)]
    chosen = next((e for e in entries if e.get("id") == device), entries[0] if entries else None)
    return str(chosen["name"]) if chosen else None


# What would decide a rank that cannot be judged, by why.
_DECIDES_CUT = ("The whole trace: copy it again once the profiler has finished writing it (the file ends with "
                "']}'), or profile more steps so that at least one is complete.")
_DECIDES_GPU = ("A trace with the GPU's own events: torch.profiler with activities=[ProfilerActivity.CPU, "
                "ProfilerActivity.CUDA], or nsys profile -t cuda,nvtx.")
_DECIDES_KERNELS = ("An export with the kernel table: nsys profile -t cuda (kernels traced), then nsys export "
                    "--type sqlite with all tables.")
_DECIDES_RANKS = "The traces of every rank (one file each, in one folder); a rank that hung or died writes none."

# What summarize_trace reads: said with every input it could not read.
FORMATS_KNOWN = ("Kineto / torch.profiler Chrome trace (.json, .json.gz)", "Nsight Systems SQLite export (.sqlite)",
                 "Nsight Systems report (.nsys-rep, .qdrep; exported with the nsys on PATH)",
                 "nsys stats --format csv tables (.csv; totals only, no timeline)")


def _eventless(display: str, header: TraceHeader) -> UnreadableInput:
    """A trace with nothing to place on a timeline: refused, saying what it held."""
    hint = ("Profile at least one step with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] "
            "(schedule active >= 1) and export the trace after it.")
    if header.events + header.skipped == 0:
        return UnreadableInput(f"{display}: its traceEvents list is empty: the profiler recorded nothing.", hint)
    return UnreadableInput(f"{display}: none of its {header.events + header.skipped:,} trace entries is a complete "
                           "event with a time and a duration (only metadata, instant or malformed events).", hint)


def _complete_until(data: Collected) -> tuple[float | None, str | None]:
    """Where a file cut short stops being whole, or why it cannot be judged at all. Kineto writes each kind of event
    (host ops, runtime calls, GPU work) in time order, one kind after another, and the GPU work last: a cut leaves
    one kind cut at its latest start and every kind written before it whole. So the events of every kind are all
    there up to the earliest of the kinds' latest starts; past it the GPU looks idle only because its work was never
    written. A kind not there at all may be one the file never reached."""
    if "gpu" not in data.last_start:
        return None, ("it ends before any GPU event was written (Kineto writes them after the host's), so when the "
                      "GPU idled cannot be told")
    if "host" not in data.last_start:
        return None, "it ends before any host event was written, so what the GPU waited for cannot be told"
    return min(data.last_start.values()), None


def _world_size(header: TraceHeader) -> int | None:
    info = header.metadata.get("distributedInfo")
    size = info.get("world_size") if isinstance(info, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _kineto_coverage(display: str, header: TraceHeader, data: Collected, result: _RankResult) -> Coverage:
    """What was made of one Kineto trace: read whole, or which part (cut short, entries skipped, host events only)."""
    entries = header.events + header.skipped
    skipped = header.skipped + data.skipped
    parts = [f"{data.events:,} timed events ({result.summary.gpu_events:,} on the GPU); judged: "
             f"{result.summary.window}"]
    if header.ends_early_at is not None:
        parts.insert(0, f"ends early, at character {header.ends_early_at:,} (cut short, or still being written)")
    if skipped:
        parts.append(f"{skipped:,} of {entries:,} entries skipped ({100 * skipped / max(entries, 1):.1f}%: not an "
                     "event object, or no number for ts or dur, or no category)")
    if result.undecided:
        parts.append(f"cannot judge: {result.undecided}")
    detail = "; ".join(parts)
    if header.ends_early_at is not None or skipped or result.undecided:
        return Coverage.partial(display, detail)
    return Coverage.read(display, detail)


@dataclass
class _Read:
    results: list[_RankResult]
    coverage: list[Coverage]


def _summarise(files: list[Path], roots: tuple[Path, ...], include_last: bool, deadline: float,
               steps_named: Any = None) -> _Read:
    """Each file's ranks analysed, with what was made of each file. One file that cannot be read is an error; in a
    folder it is said (not understood) and the others are read, unless none can be."""
    results: list[_RankResult] = []
    coverage: list[Coverage] = []
    failures: list[UnreadableInput] = []
    for position, path in enumerate(files):
        display = next((str(path.relative_to(r)) for r in roots if path.is_relative_to(r)), path.name)
        try:
            if is_nsys_export(path):
                found = _nsys_file(path, display, position, include_last, deadline, steps_named)
                results.extend(found.results)
                coverage.extend(found.coverage)
                continue
            data, header = collect_file(path, display, deadline, steps_named)
            if not data.events:
                raise _eventless(display, header)
        except UnreadableInput as exc:
            if len(files) == 1:
                raise
            failures.append(exc)
            coverage.append(Coverage.not_understood(display, exc.message, FORMATS_KNOWN))
            continue
        data.device_name = _device_name(header, data.device)
        rank = rank_of_trace(header, display, position)
        if header.ends_early_at is None:
            result = _analyse(rank, display, data, include_last)
        else:
            horizon, why = _complete_until(data)
            result = (_undecided(rank, display, data, len(data.steps), "none (the file ends early)",
                                 f"{display} ends early, at character {header.ends_early_at:,}: {why}", _DECIDES_CUT)
                      if horizon is None else _analyse(rank, display, data, include_last, horizon))
            if horizon is not None and result.undecided is None:
                judged = result.summary.window.split(" (")[0]
                result.caveat = (f"only {judged}, where the host and GPU events are all present, are judged: "
                                 f"{display} ends early (cut short, or still being written)")
                result.notes.insert(0, f"rank {rank}: {display} ends early, at character {header.ends_early_at:,} "
                                    f"(a trace still being written, or cut short): its events of every kind are "
                                    f"present up to {(horizon - data.cpu_span[0]) / 1000:.1f} ms after its first "
                                    f"host event, so only {judged} (those that end before) are judged; the GPU work "
                                    "after it was never written, and would read as idle GPU.")
        result.world_size = _world_size(header)
        results.append(result)
        coverage.append(_kineto_coverage(display, header, data, result))
    if not results and failures:
        raise failures[0]
    return _Read(results, coverage)


def _nsys_file(path: Path, display: str, position: int, include_last: bool, deadline: float,
               steps_named: Any) -> _Read:
    """One Nsight Systems export: each process with GPU work is a rank."""
    processes = nsys_processes(path, display, deadline)
    said = nsys_ranks(path, display, deadline)
    kernels_exported = nsys_has_kernels(path, display, deadline)
    # The ranks the processes name themselves (MPI), when each says one of its own; else their order.
    named = said if all(p in said for p in processes) and len({said[p] for p in processes}) == len(processes) \
        else {}
    results = []
    for index, process in enumerate(processes):
        header = TraceHeader()
        data = collect_events(read_nsys_batches(path, process, display, deadline, header), steps_named)
        data.device_name = _device_name(header, data.device)
        # One process per GPU: torchrun under one nsys puts every rank in one export.
        rank = named[process] if named else index if len(processes) > 1 else rank_of_trace(header, display,
                                                                                          position)
        label = f"{display} (process {(process >> 24) & 0xFFFFFF})" if len(processes) > 1 else display
        if kernels_exported:
            results.append(_analyse(rank, label, data, include_last))
        else:
            # Copies and memsets alone are not the GPU's work: counted as all of it, the GPU would look idle.
            results.append(_undecided(rank, label, data, len(data.steps), "none (no kernel table)",
                                      f"{label} has no CUPTI_ACTIVITY_KIND_KERNEL table, only copies or memsets: "
                                      "how busy the GPU was cannot be told", _DECIDES_KERNELS))
    what = f"Nsight Systems export: {len(processes)} process(es) with GPU work"
    undecided = [r.undecided for r in results if r.undecided]
    cover = (Coverage.partial(display, f"{what}; {undecided[0]}") if undecided
             else Coverage.read(display, f"{what}, {sum(r.summary.events for r in results):,} events"))
    return _Read(results, [cover])


def _straggler(ranks: list[RankSummary], world: int | None = None) -> Cause | None:
    """Across ranks, the one that waits least in collectives is the one the others wait for. `world`: the job has
    this many ranks and some have no trace here, so the one named is the latest of those seen, and the one all
    wait for may be among the others."""
    comm = {r.rank: r.comm_pct for r in ranks if r.comm_pct is not None}
    if len(comm) < 2:
        return None
    least = min(comm, key=lambda k: comm[k])
    others = statistics.median(v for k, v in comm.items() if k != least)
    if others <= 0 or comm[least] > 0.7 * others:
        return None
    evidence = (f"rank {least} spends {comm[least]:.1f}% of step time in collectives, the others "
                f"{others:.1f}% (median): they wait for rank {least}")
    if world is not None:
        evidence += (f", the latest of the {len(ranks)} of {world} ranks traced here (the one every rank waits for "
                     "may be one without a trace)")
    return Cause(kind="straggler", share_pct=round(others - comm[least], 2), rank=least, evidence=evidence,
                 fix=_FIX["straggler"])


def short_name(name: str) -> str:
    name = re.sub(r"^void ", "", name)
    return name if len(name) <= 80 else name[:79] + "…"


@dataclass
class TraceBreakdown:
    """Everything the summary computes from a set of traces, before it is shaped into a result: what
    compare_runs reads for each of its two runs, so both tools measure alike."""

    ranks: list[RankSummary]
    causes: list[Cause]  # merged across ranks, noise (< MIN_CAUSE_PCT) left out, largest first
    kernels: dict[str, tuple[int, float, str]]  # every kernel, all ranks summed: name -> (count, total us, kind)
    profiled_steps: int  # ProfilerSteps of all ranks, the last ones too: the span the kernel totals cover
    histogram: dict[str, int]
    idle_ops: list[IdleOp]
    steps: list[StepSummary]
    notes: list[str]
    coverage: list[Coverage] = field(default_factory=list)  # per file read (or not understood)
    undecided: list[str] = field(default_factory=list)  # per rank that cannot be judged: why
    decides: str | None = None  # what would decide the first of them
    caveats: list[str] = field(default_factory=list)  # what limits the verdict (cut files: the window judged)
    world_size: int = 0  # the ranks the job has, as far as the traces tell (distributedInfo, rank numbers)
    missing_ranks: list[int] = field(default_factory=list)  # ranks of the job with no trace here


def _missing_ranks(results: list[_RankResult]) -> tuple[int, list[int]]:
    """The job's size as the traces say it (distributedInfo's world_size, else the highest rank + 1), and the ranks
    of it with no trace here."""
    seen = {r.summary.rank for r in results}
    if not seen:
        return 0, []
    world = max([r.world_size for r in results if r.world_size] + [max(seen) + 1])
    return world, sorted(set(range(world)) - seen)


def breakdown(files: list[Path], roots: tuple[Path, ...], include_last: bool, deadline: float,
              step_range: str | None = None) -> TraceBreakdown:
    """Per rank and merged: step times, busy / compute / communication / idle, the causes of GPU idle, kernels.
    Synchronous (run it in a worker thread)."""
    read = _summarise(files, roots, include_last, deadline, step_pattern(step_range) if step_range else None)
    results = read.results
    ranks = sorted((r.summary for r in results), key=lambda s: s.rank)
    judged = [r for r in results if r.undecided is None]
    causes = _merge_causes(judged)
    world, missing = _missing_ranks(results)
    straggler = _straggler([r.summary for r in judged], world if missing else None)
    if straggler:
        causes.append(straggler)
    # Below half a percent of step time a cause is noise, not a lead.
    causes = sorted((c for c in causes if c.share_pct >= MIN_CAUSE_PCT), key=lambda c: c.share_pct, reverse=True)
    kernels, histogram = _kernel_totals(results)
    return TraceBreakdown(
        ranks=ranks, causes=causes, kernels=kernels, profiled_steps=sum(r.profiled_steps for r in results),
        histogram=histogram,
        idle_ops=sorted((o for r in results for o in r.idle_ops), key=lambda o: o.idle_overlap_ms,
                        reverse=True)[:TRACE_TOP_KERNELS],
        steps=[step for r in sorted(results, key=lambda r: r.summary.rank) for step in r.steps],
        notes=_collapse_notes([n for r in results for n in r.notes])[:10], coverage=read.coverage,
        undecided=[r.undecided for r in results if r.undecided],
        decides=next((r.decides for r in results if r.decides), None), caveats=[r.caveat for r in results if r.caveat],
        world_size=world, missing_ranks=missing)


async def summarize_trace(params: SummarizeTraceInput, ctx: ToolContext) -> SummarizeTraceResult:
    """Summarise PyTorch profiler traces (one file, or a folder of per-rank traces; .json or .json.gz) without
    loading them whole: per rank the step time, GPU busy (union of kernels), HTA's idle/compute/non-compute
    split on HTA's window, communication and exposed communication, data-loading wait; then the causes of
    GPU idle with their share of step time and evidence (data loading, implicit sync with the op that
    caused it, launch-bound, exposed communication, straggler rank, other host work), top kernels and a
    kernel-size histogram. Never cat a trace: use this.
    """
    path = ctx.path(params.path)
    if path.is_file() and path.name.endswith((".csv", ".txt")):
        head = read_regular(path, 4096)
        if is_nsys_stats(head):
            return _from_stats(read_nsys_stats(path, path.name, TRACE_TOP_KERNELS), params.path)
    files = trace_files(path, ctx.roots)
    total = sum(f.stat().st_size for f in files)
    ctx.progress.update(0, None, f"reading {len(files)} trace(s), {size_text(total)}")
    deadline = time.monotonic() + ctx.remaining_s()
    async with exported_reports(files, ctx.remaining_s()) as readable:
        found = await anyio.to_thread.run_sync(breakdown, readable, ctx.roots, params.include_last_step, deadline,
                                               params.step_range, abandon_on_cancel=True)
        rules = await anyio.to_thread.run_sync(_nsys_rules, readable, ctx.roots, deadline, abandon_on_cancel=True)
    ranks, causes = found.ranks, found.causes
    busy = [r.gpu_busy_pct for r in ranks if r.gpu_busy_pct is not None]
    notes = list(found.notes)
    coverage = list(found.coverage)
    if len(ranks) > TRACE_MAX_RANK_ROWS:
        notes.insert(0, _distribution(ranks))
    caveats = list(found.caveats)
    decides = found.decides
    if found.missing_ranks and len(ranks) > 1:
        # Claims across ranks (the straggler, the slowest) hold for the ranks traced, not for the job.
        missing = compact_ranges(found.missing_ranks)
        coverage.append(Coverage.partial(params.path, f"traces of {len(ranks)} of the job's {found.world_size} "
                                         f"ranks; rank(s) {missing} have none here"))
        caveats.append(f"only {len(ranks)} of the job's {found.world_size} ranks have a trace here (missing: "
                       f"{missing}), so what is said across ranks holds for those traced")
        decides = decides or _DECIDES_RANKS
    elif found.missing_ranks:
        notes.append(f"rank {ranks[0].rank} of {found.world_size}: the other ranks' traces are not here; the one "
                     "the others wait for (a straggler) can only be named from all of them.")
    severity = Severity.warn if causes and causes[0].share_pct >= 10 else Severity.ok
    if found.undecided:
        # A rank the traces cannot judge may be the one with the problem: ok is not a verdict its silence allows.
        judged = len(ranks) - len(found.undecided)
        more = f" (and {len(found.undecided) - 1} more)" if len(found.undecided) > 1 else ""
        caveats.insert(0, f"not judged: {found.undecided[0]}{more}"
                       + (f"; {judged} of {len(ranks)} ranks are judged" if judged else ""))
        if severity is Severity.ok or not judged:
            severity = Severity.unknown
    elif found.missing_ranks and len(ranks) > 1 and severity is Severity.ok:
        severity = Severity.unknown  # a rank with no trace may be the one that hung or lagged
    verdict = "unknown" if len(found.undecided) == len(ranks) else bottleneck(statistics.median(busy) if busy
                                                                              else None, causes)
    return SummarizeTraceResult(
        severity=severity,
        bottleneck=verdict,
        conclusion=_conclude(ranks, causes, caveats, found, severity),
        next_steps=_next_steps(causes, verdict, found.kernels),
        coverage=coverage,
        decides=decides if severity is Severity.unknown else None,
        ranks=_bounded_ranks(ranks),
        causes=causes,
        top_kernels=top_kernels(found.kernels),
        idle_cpu_ops=found.idle_ops,
        steps=found.steps,
        kernel_histogram=found.histogram,
        nsys_rules=rules,
        notes=notes,
    )


def _from_stats(stats: NsysStats, display: str) -> SummarizeTraceResult:
    """The partial result nsys stats tables allow: totals, no timeline."""
    kernels = [KernelStat(name=short_name(r.name), kind="comm" if COMM_NAME.search(r.name) else hta_kind(r.name),
                          count=r.count, total_ms=round(r.total_ms, 3),
                          mean_us=round(1000 * r.total_ms / r.count, 3) if r.count else 0.0,
                          share_pct=r.share_pct or 0.0) for r in stats.kernels]
    said = [f"{display}: nsys stats tables ({', '.join(stats.tables)}), a partial view without a timeline."]
    if kernels:
        said.append(f"GPU kernels total {stats.kernel_ms:.1f} ms; the largest, {kernels[0].name}, takes "
                    f"{kernels[0].share_pct:.1f}% of it.")
    if stats.api_ms:
        sync_pct = 100 * stats.sync_api_ms / stats.api_ms
        said.append(f"CUDA API calls total {stats.api_ms:.1f} ms, {sync_pct:.0f}% of it in synchronising calls "
                    "(stream/device syncs, blocking copies).")
    # Totals cannot show when the GPU idled, nor why: the figures are given, the verdict is not.
    return SummarizeTraceResult(
        severity=Severity.unknown, bottleneck="unknown", conclusion=said[:3], ranks=[], causes=[],
        top_kernels=kernels,
        coverage=[Coverage.partial(display, f"nsys stats tables ({', '.join(stats.tables)}): totals, no timeline")],
        decides=("The report's events: nsys export --type sqlite REPORT.nsys-rep, then summarize_trace on the "
                 ".sqlite (steps, GPU idle and its causes)."),
        idle_cpu_ops=[],
        steps=[], kernel_histogram={}, nsys_stats=stats,
        notes=["A summary table cannot show steps, GPU idle time, its causes, overlap or ranks: export the report "
               "(nsys export --type sqlite) and pass the .sqlite for the full breakdown."],
        next_steps=[NextStep(branch="gpu_utilization_low", step="trace",
                             action="nsys export --type sqlite --output REPORT.sqlite REPORT.nsys-rep, then "
                                    "summarize_trace on REPORT.sqlite",
                             why="Only the events show where the step time goes.")])


def _nsys_rules(files: list[Path], roots: tuple[Path, ...], deadline: float) -> list[NsysRule]:
    found = []
    for path in files:
        if is_nsys_export(path):
            display = next((str(path.relative_to(r)) for r in roots if path.is_relative_to(r)), path.name)
            try:
                found.extend(nsys_rules(path, display, deadline))
            except UnreadableInput:
                if len(files) == 1:
                    raise
                # One of a folder: its coverage says it was not understood; the others' rules still count.
    return found


def _merge_causes(results: list[_RankResult]) -> list[Cause]:
    """One row per cause kind: the mean share across ranks, naming the rank where it is largest."""
    by_kind: dict[str, list[tuple[Cause, int]]] = defaultdict(list)
    for result in results:
        for cause in result.causes:
            by_kind[cause.kind].append((cause, result.summary.rank))
    merged = []
    for items in by_kind.values():
        worst, rank = max(items, key=lambda item: item[0].share_pct)
        mean = sum(c.share_pct for c, _ in items) / len(results)
        merged.append(Cause(kind=worst.kind, share_pct=round(mean, 2), evidence=worst.evidence, fix=worst.fix,
                            rank=rank if len(results) > 1 else None))
    return merged


def _kernel_totals(results: list[_RankResult]) -> tuple[dict[str, tuple[int, float, str]], dict[str, int]]:
    combined: dict[str, list[Any]] = {}
    histogram: Counter[str] = Counter()
    for result in results:
        histogram.update(result.histogram)
        for name, (count, dur, kind) in result.kernels.items():
            stat = combined.setdefault(name, [0, 0.0, kind])
            stat[0] += count
            stat[1] += dur
    order = ["<10us", "10-100us", "100us-1ms", ">=1ms"]
    return ({name: (count, dur, kind) for name, (count, dur, kind) in combined.items()},
            {bucket: histogram.get(bucket, 0) for bucket in order})


def top_kernels(kernels: dict[str, tuple[int, float, str]]) -> list[KernelStat]:
    """The kernels with the most total time, with their share of all kernel time."""
    grand = sum(v[1] for v in kernels.values()) or 1.0
    top = sorted(kernels.items(), key=lambda item: item[1][1], reverse=True)[:TRACE_TOP_KERNELS]
    return [KernelStat(name=short_name(name), kind=kind, count=count, total_ms=round(dur / 1000, 3),
                       mean_us=round(dur / count, 2), share_pct=round(100 * dur / grand, 2))
            for name, (count, dur, kind) in top]


def _distribution(ranks: list[RankSummary]) -> str:
    """One line for many ranks: min / median / max of step time and communication share."""
    def spread(values: list[float], unit: str) -> str:
        if not values:
            return "n/a"
        return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}{unit}"

    times = [r.step_time_ms for r in ranks if r.step_time_ms is not None]
    comm = [r.comm_pct for r in ranks if r.comm_pct is not None]
    return (f"{len(ranks)} ranks (table shows the outliers): step time min/median/max {spread(times, ' ms')}; "
            f"communication {spread(comm, '%')} of step time.")


def _bounded_ranks(ranks: list[RankSummary]) -> list[RankSummary]:
    """All ranks up to a bound; beyond it the slowest, the fastest and the ones that stand out."""
    if len(ranks) <= TRACE_MAX_RANK_ROWS:
        return ranks
    timed = [r for r in ranks if r.step_time_ms is not None]
    by_time = sorted(timed, key=lambda r: r.step_time_ms or 0.0)
    by_comm = sorted((r for r in ranks if r.comm_pct is not None), key=lambda r: r.comm_pct or 0.0)
    picked: dict[int, RankSummary] = {}
    for group in (by_time[-4:], by_time[:2], by_comm[:4], by_comm[-2:]):
        for r in group:
            picked[r.rank] = r
    return sorted(picked.values(), key=lambda r: r.rank)[:TRACE_MAX_RANK_ROWS]


def _conclude(ranks: list[RankSummary], causes: list[Cause], caveats: list[str], found: TraceBreakdown,
              severity: Severity) -> list[str]:
    """Three sentences at most: what was measured, the main cause (or why none can be told), and the caveat that
    limits it (a cut file, ranks missing or not judged), else the fix."""
    judged = [r for r in ranks if r.bottleneck != "unknown"]
    times = [r.step_time_ms for r in judged if r.step_time_ms is not None]
    busy = [r.gpu_busy_pct for r in judged if r.gpu_busy_pct is not None]
    timed = [r for r in judged if r.step_time_ms is not None]
    slowest = max(timed, key=lambda r: r.step_time_ms or 0.0) if len(timed) > 1 else None
    counted = f"{len(ranks)} rank(s)" + (f" of {found.world_size}" if found.missing_ranks and len(ranks) > 1 else "")
    first = counted + (f", median step {statistics.median(times):.1f} ms" if times else "") + (
        f", GPU busy {statistics.median(busy):.0f}% of it" if busy else ", no GPU time judged" if not judged
        else ", no GPU events") + (
        f", slowest {'traced ' if found.missing_ranks else ''}rank {slowest.rank} ({slowest.step_time_ms:.1f} ms)"
        if slowest else "") + "."
    caveat = f"{_capital(caveats[0])}." if caveats else None
    if not judged:
        why = found.undecided[0] if found.undecided else "no rank can be judged"
        more = f" (and {len(found.undecided) - 1} more rank(s) alike)" if len(found.undecided) > 1 else ""
        return [first, f"Cannot judge why the GPU idles: {why}{more}."]
    if not causes:
        said = "No idle cause stands out" + (" in what could be judged" if severity is Severity.unknown else "") + "."
        return [first, said] + ([caveat] if caveat else [])
    lead = causes[0]
    where = "" if lead.rank is None else f" (worst on rank {lead.rank})"
    return [first, f"Main cause: {lead.kind} at {lead.share_pct:.1f}% of step time{where}: {lead.evidence}.",
            caveat or f"Fix: {lead.fix}"]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


_BRANCH = {"straggler": "straggler", "exposed_comm": "nccl_hang_or_slow"}


def branch_of_cause(kind: str) -> str:
    """The SOP branch that handles a cause of GPU idle."""
    return _BRANCH.get(kind, "gpu_utilization_low")


def _ncu_step(verdict: str, kernels: dict[str, tuple[int, float, str]]) -> NextStep | None:
    """For a busy GPU whose time its compute kernels hold: Nsight Compute on the top ones, then analyze_kernels."""
    if verdict != "gpu_busy":
        return None
    total = sum(us for _, us, _ in kernels.values())
    compute = sorted(((name, us) for name, (_, us, kind) in kernels.items()
                      if kind == "compute" and not name.startswith("CUDA graph ")), key=lambda item: -item[1])
    if total <= 0 or sum(us for _, us in compute) / total < TRACE_NCU_COMPUTE_SHARE:
        return None  # copies, memsets or collectives hold the time: not a kernel's inside
    top = compute[:TRACE_NCU_TOP_KERNELS]
    command = ncu_profile_command([name for name, _ in top], "top_kernels", "<the user's command>")
    if command is None:
        return None
    held = 100 * sum(us for _, us in top) / total
    return NextStep(branch="gpu_utilization_low", step="kernels",
                    action=f"{command}, then analyze_kernels(files=['top_kernels.ncu-rep'], trace=<this trace>)",
                    why=f"The GPU is busy and its compute kernels hold the time; the top {len(top)} take {held:.0f}% "
                        "of it: Nsight Compute says whether they are compute-, memory- or latency-bound.")


def _next_steps(causes: list[Cause], verdict: str, kernels: dict[str, tuple[int, float, str]]) -> list[NextStep]:
    ncu = _ncu_step(verdict, kernels)
    first = [ncu] if ncu is not None else []
    if not causes:
        return first or [NextStep(branch="gpu_utilization_low", step="sample",
                                  action="Sample utilisation with nvidia_smi_query count=20",
                                  why="A busy GPU in the trace points at the model itself (kernel efficiency, "
                                      "batch size).")]
    lead = causes[0]
    branch = branch_of_cause(lead.kind)
    return [*first, NextStep(branch=branch, step={"gpu_utilization_low": "trace", "straggler": "find"}.get(branch),
                             action=f"Fix {lead.kind} ({lead.fix.split(':')[0].split(',')[0]}), then profile again "
                                    "and compare", why="The trace shows it is the largest share of step time.")]
