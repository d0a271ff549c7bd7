"""analyze_kernels: inside the hot kernels, from Nsight Compute results: reports (`.ncu-rep`, `.nsight-cuprof-report`,
read through ncu itself), `ncu --csv` exports of the details or raw page, and `ncu` text output (pasted or saved).

Per kernel (launches of the same name and launch shape together): duration, launches, Compute (SM) and Memory
throughput, DRAM, achieved and theoretical occupancy, waves per SM, what limits occupancy, the top stall reasons and
the rule results the report stores; failed launches (grid 0, all nan) are skipped and counted. The verdict per kernel
follows NVIDIA's own bottleneck rule (tools/kernels/verdict.py); the overall answer weighs the kernels by their GPU
time and gives the fix for the class that holds it. Nothing of a report's session page (host names, IP addresses,
the command line) and no Host Name / Process Name column is read. Mangled names (`_Z...`) are shown demangled by
c++filt when it is on PATH (tools/kernels/names.py).

With a trace of the same job beside them (`trace`: a Kineto trace, a folder of them, an Nsight Systems export or
report), the kernels are joined by name (tools/kernels/trace_join.py): each gains its share of the trace's GPU time,
the overall answer is weighed by it, and the trace's kernels with no ncu data are listed with the ncu command that
profiles them. SOP: gpu_utilization_low.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import anyio
from pydantic import BaseModel, Field

from tools.core.context import ToolContext
from tools.core.errors import UnreadableInput
from tools.core.files import InputFile, expand_inputs, read_regular, read_whole_text
from tools.core.kernel_names import bare_function, is_mangled, ncu_profile_command, qualified_function
from tools.core.limits import (
    KERNELS_DEFAULT_TOP,
    KERNELS_MAX_FILES,
    KERNELS_MAX_TEXT_BYTES,
    KERNELS_MAX_TOP,
    KERNELS_MAX_UNPROFILED,
)
from tools.core.models import Coverage, CoverageStatus, InputModel, NextStep, PathArg, Severity, Table, ToolResult, cell
from tools.core.thresholds import KERNEL_LATENCY_WARN_SHARE, KERNEL_TRACE_COVERED_SHARE
from tools.kernels.launches import WARP_CYCLES, Launch
from tools.kernels.names import Demangled, demangle
from tools.kernels.ncu_csv import csv_kind, read_details_csv, read_raw_csv
from tools.kernels.ncu_report import REPORT_SUFFIXES, ReportUnread, read_report
from tools.kernels.ncu_text import looks_like_ncu_text, read_ncu_text
from tools.kernels.trace_join import Match, TraceKernel, TraceKernels, join, read_trace_kernels
from tools.kernels.verdict import KernelVerdict, judge, occupancy_limiter

__all__ = ["AnalyzeKernelsInput", "AnalyzeKernelsResult", "analyze_kernels"]

FORMATS_KNOWN = ("Nsight Compute report (.ncu-rep, .nsight-cuprof-report; read with ncu --import)",
                 "ncu --csv export of the details page (any generation) or of the raw page (--page raw)",
                 "ncu text output (profile time or ncu --import F), pasted or saved")
_BRANCH = "gpu_utilization_low"
_FIX = {
    "compute_bound": "the SM pipes are at their limit: do less work per result (a better algorithm, tensor cores "
                     "with TF32/BF16/FP8, fewer instructions: fuse, avoid recomputation)",
    "memory_bound:dram": "DRAM bandwidth is at its limit: move fewer bytes (fuse kernels, keep tiles in shared "
                         "memory for reuse, narrower data types)",
    "memory_bound:cache": "a cache level (L1/TEX, shared memory or L2) is at its limit while DRAM is not: fix the "
                          "access pattern (coalesced and vectorised loads, no shared-memory bank conflicts, fewer "
                          "redundant loads)",
    "latency_bound:small_grid": "the grid is too small to fill the GPU: launch at least one full wave of blocks "
                                "(split the work finer, batch several problems in one launch, or run independent "
                                "kernels concurrently on streams / in a CUDA graph)",
    "latency_bound:low_occupancy": "too few warps are resident to hide latency: raise occupancy (fewer registers "
                                   "with __launch_bounds__ or -maxrregcount, less shared memory per block, another "
                                   "block size)",
    "latency_bound:stalls": "warps stall on dependencies: give each thread more independent work (ILP, unrolling), "
                            "prefetch or copy asynchronously ahead of use",
    "latency_bound:low_throughput": "neither unit is busy: find the stall reason (collect --section "
                                    "WarpStateStats --section SchedulerStats) and the launch shape",
    "balanced": "both units are busy together: only a better algorithm, or fewer bytes and instructions, helps",
}
_NCU_DOCS = "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html"


class AnalyzeKernelsInput(InputModel):
    files: list[PathArg] = Field(min_length=1, max_length=KERNELS_MAX_FILES, description="Nsight Compute results "
                                 "(files or globs inside the roots): .ncu-rep / .nsight-cuprof-report reports, "
                                 "ncu --csv exports (details or raw page), or saved / pasted ncu text output.")
    top: int = Field(default=KERNELS_DEFAULT_TOP, ge=1, le=KERNELS_MAX_TOP,
                     description="How many kernels to list, the most GPU time first.")
    trace: PathArg | None = Field(default=None, description="A trace of the same job (a Kineto / torch.profiler "
                                  "trace, a folder of per-rank traces, or an Nsight Systems .sqlite / .nsys-rep): "
                                  "the kernels are joined with it by name, each gains its share of the trace's GPU "
                                  "time, and the trace's kernels with no ncu data are listed with the ncu command "
                                  "that profiles them.")

    cli_positional = "files"


class KernelStall(BaseModel):
    reason: str = Field(description="Warp stall reason (Warp State Statistics), e.g. long_scoreboard.")
    pct: float = Field(description="Its share of the cycles a warp spends between two issued instructions, in %: "
                       "from the stall breakdown (raw page, reports, --print-details all), or as the Warp State "
                       "Statistics rule states it for its top reason (text and details output).")


class KernelRule(BaseModel):
    type: str = Field(description="OPT, WRN (what reports up to 2023.1 store for OPT), INF or ERR.")
    name: str = Field(description="The rule's name (CSV and reports) or, for text output, its section.")
    speedup_pct: float | None = Field(description="The estimated speedup ncu gives (2023.2+), in %.")
    message: str = Field(default="", description="The rule's first sentence, as ncu wrote it.")


class KernelRow(BaseModel):
    name: str = Field(description="The kernel's name as ncu printed it (demangled by ncu, or by c++filt when ncu "
                      "printed it mangled).")
    grid: str | None = Field(description="Grid dimensions '(x, y, z)', or the block count when only that is known.")
    block: str | None = Field(description="Block dimensions '(x, y, z)', or the thread count.")
    duration_ns: float | None = Field(description="GPU time of all its profiled launches together, ns.")
    launches: int = Field(description="Profiled launches of this kernel with this launch shape.")
    share_pct: float | None = Field(description="Its share of the GPU time of all judged kernels, %.")
    sm_throughput_pct: float | None = Field(description="Compute (SM) Throughput, % of peak (mean of launches).")
    memory_throughput_pct: float | None = Field(description="Memory Throughput, % of peak: the busiest of DRAM, L2, "
                                                "L1/TEX and the other memory units, not DRAM alone.")
    dram_throughput_pct: float | None = Field(description="DRAM Throughput, % of peak (reported, never decides).")
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    waves_per_sm: float | None
    occupancy_limiter: str | None = Field(description="What limits theoretical occupancy below 100 %: registers, "
                                          "shared memory, block size (warps per block) or blocks per SM.")
    stalls: list[KernelStall] = Field(description="The top warp-stall reasons: from the breakdown (raw page, reports, "
                                      "--print-details all) or the Warp State Statistics rule (text, details page).")
    rules: list[KernelRule] = Field(description="Rule results the report stores (OPT/WRN first).")
    verdict: KernelVerdict = Field(description="compute_bound, memory_bound, latency_bound or balanced by NVIDIA's "
                                   "rule; unknown without Speed Of Light figures.")
    borderline: bool = Field(description="Near a threshold (60 % or the 10-point gap): either neighbour verdict is "
                             "defensible.")
    why: str
    source: str = Field(description="The input it was read from.")
    trace_share_pct: float | None = Field(default=None, description="With a trace: its share of the trace's GPU "
                                          "time, %; launch shapes of one name split their name's time by profiled "
                                          "time. None: not in the trace, or no trace given.")
    trace_match: str | None = Field(default=None, description="How it was found in the trace (the same name, the "
                                    "same function with other template arguments, the function name alone, or the "
                                    "beginning of a name ncu cut short).")


class UnprofiledKernel(BaseModel):
    name: str = Field(description="A kernel of the trace that no ncu result covers (its instance with the most time, "
                      "when several instances of one function template are in the trace).")
    instances: int = Field(description="Instances of that function in the trace (template arguments aside), counted "
                           "together here: the ncu filter names the function, so it profiles whichever runs first.")
    launches: int
    total_ms: float = Field(description="Its GPU time in the trace, ms.")
    share_pct: float = Field(description="Its share of the trace's GPU time, %.")
    ncu_command: str = Field(description="The ncu command line that profiles one launch of it.")


class AnalyzeKernelsResult(ToolResult):
    kernels: list[KernelRow] = Field(description="Kernels, the most GPU time first.")
    skipped_launches: int = Field(description="Failed launches (grid 0, every value nan) left out.")
    time_by_verdict: dict[str, float] = Field(description="Share of the judged kernels' GPU time per verdict, %.")
    fixes: list[str] = Field(description="The fix per verdict class that holds the time, largest first.")
    trace_profiled_pct: float | None = Field(default=None, description="With a trace: the share of its GPU time "
                                             "that the judged kernels found in it hold, %.")
    unprofiled: list[UnprofiledKernel] = Field(default_factory=list, description="With a trace: its kernels with "
                                               "no ncu data, the most GPU time first, each with the ncu command "
                                               "that profiles it.")

    narrow_hint = "lower top, or pass fewer files"

    def tables(self) -> list[Table]:
        traced = self.trace_profiled_pct is not None
        basis = "share of the trace's GPU time" if traced and any(k.trace_share_pct for k in self.kernels) \
            else "share of GPU time"
        return [
            Table("Time by verdict", ["verdict", basis],
                  [[verdict, f"{share:.1f} %"] for verdict, share in self.time_by_verdict.items()]),
            Table("Kernels", ["kernel", "grid", "block", "launches", "time us", "share",
                              *(["trace share"] if traced else []), "SM %", "Mem %", "DRAM %",
                              "occupancy", "waves", "limiter", "verdict", "why"],
                  [[_short(k.name), k.grid or "-", k.block or "-", str(k.launches),
                    cell(None if k.duration_ns is None else k.duration_ns / 1000), _pct(k.share_pct),
                    *([_pct(k.trace_share_pct)] if traced else []),
                    cell(k.sm_throughput_pct), cell(k.memory_throughput_pct), cell(k.dram_throughput_pct),
                    f"{cell(k.achieved_occupancy_pct)} / {cell(k.theoretical_occupancy_pct)}", cell(k.waves_per_sm),
                    k.occupancy_limiter or "-", k.verdict + (" (borderline)" if k.borderline else ""), k.why]
                   for k in self.kernels], "kernels"),
            Table("Trace kernels not profiled", ["kernel", "instances", "launches", "time ms", "share of the trace",
                                                 "ncu command"],
                  [[_short(u.name), str(u.instances), str(u.launches), cell(u.total_ms), _pct(u.share_pct),
                    u.ncu_command] for u in self.unprofiled], "unprofiled"),
            Table("Rules of the top kernels", ["kernel", "type", "rule", "est. speedup", "says"],
                  [[_short(k.name), r.type, r.name, _pct(r.speedup_pct), r.message]
                   for k in self.kernels[:3] for r in k.rules[:4]]),
            Table("Fixes", ["fix"], [[f] for f in self.fixes]),
        ]


def _short(name: str, limit: int = 80) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


# ----------------------------------------------------------------------------------------------- reading


@dataclass
class _Read:
    launches: list[tuple[str, Launch]] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    decides: list[str] = field(default_factory=list)


def _read_text_file(file: InputFile) -> tuple[str, list[Launch]] | None:
    text = read_whole_text(file, KERNELS_MAX_TEXT_BYTES, "Pass ncu's text or --csv output, or the .ncu-rep report.")
    kind = csv_kind(text)
    if kind == "details":
        return "ncu --csv details page", read_details_csv(text)
    if kind == "raw":
        return "ncu --csv raw page", read_raw_csv(text)
    if looks_like_ncu_text(text):
        return "ncu text output", read_ncu_text(text)
    return None


async def _read(files: list[InputFile], ctx: ToolContext) -> _Read:
    read = _Read()
    for done, file in enumerate(files):
        ctx.progress.update(done, len(files), file.name)
        is_report = file.name.endswith(REPORT_SUFFIXES) or read_regular(file.path, 4, file.name) == b"NVR\x00"
        if is_report:
            try:
                launches, ncu = await read_report(file.path, file.name, ctx.remaining_s())
            except ReportUnread as exc:
                read.coverage.append(Coverage.not_understood(file.name, exc.why, FORMATS_KNOWN))
                read.decides.append(exc.decides)
                continue
            fmt = f"Nsight Compute report, read with {ncu.rsplit('/', 1)[-1]} --import"
        else:
            found = await anyio.to_thread.run_sync(_read_text_file, file, abandon_on_cancel=True)
            if found is None:
                read.coverage.append(Coverage.not_understood(
                    file.name, "no ncu kernel section, CSV header or report magic in it", FORMATS_KNOWN))
                continue
            fmt, launches = found
        if not launches:
            read.coverage.append(Coverage.not_understood(file.name, f"{fmt} with no kernel launch in it",
                                                         FORMATS_KNOWN))
            continue
        read.coverage.append(Coverage.read(file.name, f"{fmt}: {sum(x.invocations for x in launches)} launch(es)"))
        read.launches += [(file.name, launch) for launch in launches]
    return read


# ----------------------------------------------------------------------------------------------- kernels


def _mean(values: list[tuple[float, int]]) -> float | None:
    weight = sum(w for _, w in values)
    return None if not values or weight == 0 else round(sum(v * w for v, w in values) / weight, 2)


def _shape_text(shape: str | None, count: float | None) -> str | None:
    return shape if shape else (None if count is None else f"{count:.0f}")


def _stalls(group: list[Launch], figures: dict[str, float]) -> list[tuple[str, float]]:
    """The top three stall reasons with their share of the cycles between two issued instructions: from the
    breakdown when the launches have it, else as the Warp State Statistics rule states its top reason (its own %,
    or its cycles over Warp Cycles Per Issued Instruction)."""
    breakdown: dict[str, float] = defaultdict(float)
    with_breakdown = [x for x in group if x.stalls]
    for launch in with_breakdown:
        for reason, value in launch.stalls.items():
            if reason != "selected":  # issuing, not a stall
                breakdown[reason] += value / len(with_breakdown)
    total = sum(breakdown.values())
    if total > 0:
        return sorted(((r, 100 * v / total) for r, v in breakdown.items() if v > 0), key=lambda s: -s[1])[:3]
    stated: dict[str, list[float]] = defaultdict(list)
    for launch in group:
        for reason, (cycles, pct) in launch.stated_stalls.items():
            cycles_per_issue = launch.figures.get(WARP_CYCLES) or figures.get(WARP_CYCLES)
            share = pct if pct is not None else (100 * cycles / cycles_per_issue if cycles_per_issue else None)
            if share is not None:
                stated[reason].append(share)
    return sorted(((r, sum(v) / len(v)) for r, v in stated.items()), key=lambda s: -s[1])[:3]


def _kernel(source: str, group: list[Launch]) -> KernelRow:
    first = group[0]
    keys = {key for launch in group for key in launch.figures}
    figures = {key: value for key in keys
               if (value := _mean([(x.figures[key], x.invocations) for x in group if key in x.figures])) is not None}
    durations = [x.figures["duration_ns"] * x.invocations for x in group if "duration_ns" in x.figures]
    stalls = _stalls(group, figures)
    rules: dict[tuple[str, str], KernelRule] = {}
    for launch in group:
        for rule in launch.rules:
            key = (rule.type, rule.name)
            if key not in rules or (rule.speedup_pct or 0) > (rules[key].speedup_pct or 0):
                rules[key] = KernelRule(type=rule.type, name=rule.name, speedup_pct=rule.speedup_pct,
                                        message=rule.message)
    order = {"ERR": 0, "OPT": 1, "WRN": 1, "INF": 2}
    judgement = judge(figures, stalls)
    return KernelRow(
        name=first.name, grid=_shape_text(first.grid, figures.get("grid_blocks")),
        block=_shape_text(first.block, figures.get("block_threads")),
        duration_ns=round(sum(durations), 1) if durations else None, launches=sum(x.invocations for x in group),
        share_pct=None, sm_throughput_pct=figures.get("sm_pct"), memory_throughput_pct=figures.get("memory_pct"),
        dram_throughput_pct=figures.get("dram_pct"), achieved_occupancy_pct=figures.get("achieved_occupancy_pct"),
        theoretical_occupancy_pct=figures.get("theoretical_occupancy_pct"), waves_per_sm=figures.get("waves_per_sm"),
        occupancy_limiter=occupancy_limiter(figures), stalls=[KernelStall(reason=r, pct=round(p, 1))
                                                            for r, p in stalls],
        rules=sorted(rules.values(), key=lambda r: (order.get(r.type, 3), -(r.speedup_pct or 0)))[:8],
        verdict=judgement.verdict, borderline=judgement.borderline, why=judgement.why, source=source)


def _fix_key(row: KernelRow) -> str:
    if row.verdict == "memory_bound":
        return "memory_bound:dram" if "bandwidth-bound" in row.why else "memory_bound:cache"
    if row.verdict == "latency_bound":
        for cause in ("small_grid", "low_occupancy", "stalls"):
            if _CAUSE_TEXT[cause] in row.why:
                return f"latency_bound:{cause}"
        return "latency_bound:low_throughput"
    return row.verdict


_CAUSE_TEXT = {"small_grid": "waves per SM", "low_occupancy": "achieved occupancy", "stalls": "top stall"}


def _profile_command(names: list[str], output: str) -> str:
    return ncu_profile_command(names, output) or f"ncu --set full -k regex:'KERNEL' -c 1 -o {output} <the application>"


# ----------------------------------------------------------------------------------------------- the tool


async def analyze_kernels(params: AnalyzeKernelsInput, ctx: ToolContext) -> AnalyzeKernelsResult:
    """Inside the hot kernels, from Nsight Compute results: .ncu-rep / .nsight-cuprof-report reports (read through
    ncu --import; without ncu, unknown with the command that decides), ncu --csv exports (details or raw page, every
    generation) or ncu text output (pasted or saved). Per kernel: duration, launches, Compute (SM) / Memory / DRAM
    throughput, achieved and theoretical occupancy, waves per SM, the occupancy limiter, top stall reasons and the
    report's rule results (failed launches skipped and counted). Verdict per kernel by NVIDIA's bottleneck rule:
    compute_bound, memory_bound (L1/L2 vs DRAM), latency_bound (small grid, low occupancy, stalls) or balanced,
    borderline near a threshold; the overall answer weighs kernels by GPU time and gives the fix per class. With
    `trace` (a Kineto trace or folder, an Nsight Systems export) the kernels are joined with it by name: each gains
    its share of the trace's GPU time, and the trace's kernels without ncu data are listed with the ncu command
    that profiles them. Mangled names are shown demangled (c++filt). Never echoes the report's session page (host
    names, IP addresses, command line).
    """
    files = expand_inputs(params.files, ctx.roots, max_files=KERNELS_MAX_FILES)
    read = await _read(files, ctx)
    trace = await _read_trace(params.trace, ctx, read) if params.trace else None
    names = {launch.name for _, launch in read.launches} | {k.name for k in (trace.kernels if trace else [])}
    demangled = await demangle(names, ctx.remaining_s())
    for _, launch in read.launches:
        launch.name = demangled.of(launch.name)
    if trace is not None:
        for kernel in trace.kernels:
            kernel.name = demangled.of(kernel.name)
    _note_mangled(read, demangled, params.trace)
    skipped = sum(launch.invocations for _, launch in read.launches if launch.failed)
    groups: dict[tuple[str, int, str, str | None, str | None], list[Launch]] = {}
    for source, launch in read.launches:
        if not launch.failed:
            groups.setdefault((source, launch.run, launch.name, launch.grid, launch.block), []).append(launch)
    runs: dict[str, list[int]] = defaultdict(list)
    for source, run, *_ in groups:
        if run not in runs[source]:
            runs[source].append(run)
    # A paste of several profiling runs: the same kernel name in two runs is two results, named by the run.
    rows = [_kernel(f"{key[0]} (run {runs[key[0]].index(key[1]) + 1} of {len(runs[key[0]])})"
                    if len(runs[key[0]]) > 1 else key[0], group) for key, group in groups.items()]
    return _result(rows, skipped, read, params.top, trace)


async def _read_trace(path: str, ctx: ToolContext, read: _Read) -> TraceKernels | None:
    """The trace's kernels, its coverage added to the call's; None (said in its coverage) when it cannot be read."""
    try:
        trace = await read_trace_kernels(ctx.path(path), ctx.roots, ctx.remaining_s())
    except UnreadableInput as exc:
        read.coverage.append(Coverage.not_understood(path, f"--trace: {exc.message}", _TRACE_FORMATS))
        return None
    if not trace.kernels:
        read.coverage.append(Coverage.not_understood(path, "--trace: no GPU kernel in it", _TRACE_FORMATS))
        return None
    read.coverage += [c.model_copy(update={"detail": f"--trace: {c.detail}"}) for c in trace.coverage]
    return trace


_TRACE_FORMATS = ("Kineto / torch.profiler Chrome trace (.json, .json.gz) or a folder of them",
                  "Nsight Systems SQLite export (.sqlite) or report (.nsys-rep, exported with the nsys on PATH)")


def _note_mangled(read: _Read, demangled: Demangled, trace: str | None) -> None:
    """Each input with names left mangled (no c++filt, or one it could not demangle) is read only in part."""
    if not demangled.kept:
        return
    left: dict[str, int] = defaultdict(int)
    for source, launch in read.launches:
        left[source] += is_mangled(launch.name)
    for index, entry in enumerate(read.coverage):
        count = left.get(entry.input, 0)
        if count and entry.status is CoverageStatus.read:
            read.coverage[index] = Coverage.partial(entry.input, f"{entry.detail}; {count} launch(es) with a mangled "
                                                    f"kernel name, shown as it is: {demangled.why_kept}")
    if trace and not any(left.values()):
        read.notes.append(f"{demangled.kept} mangled kernel name(s) of the trace shown as they are: "
                          f"{demangled.why_kept}.")


@dataclass
class _Joined:
    """The trace's side of the answer: each row's share, the unprofiled kernels, what the profiled ones cover."""

    trace: TraceKernels
    matches: dict[str, Match]
    unprofiled: list[TraceKernel]

    @property
    def matched(self) -> bool:
        return bool(self.matches)


def _join(rows: list[KernelRow], trace: TraceKernels) -> _Joined:
    matches, unprofiled = join([r.name for r in rows], trace)
    # Launch shapes of one name (and names that met the same trace kernels) split that time by profiled time.
    sharing: dict[int, list[KernelRow]] = defaultdict(list)
    for row in rows:
        if row.name in matches:
            sharing[id(matches[row.name].trace_kernels)].append(row)
    for group in sharing.values():
        match = matches[group[0].name]
        profiled = [(r.duration_ns or 0.0) for r in group]
        whole = sum(profiled)
        for row, own in zip(group, profiled, strict=True):
            part = own / whole if whole > 0 else 1 / len(group)
            row.trace_share_pct = trace.share_pct(match.total_us * part)
            shared = f"; shares it with {len(group) - 1} other profiled row(s), split by profiled time" \
                if len(group) > 1 else ""
            row.trace_match = f"{match.how}{shared}"
    return _Joined(trace, matches, unprofiled)


def _result(rows: list[KernelRow], skipped: int, read: _Read, top: int,
            trace: TraceKernels | None) -> AnalyzeKernelsResult:
    notes = list(read.notes)
    if skipped:
        notes.append(f"{skipped} failed launch(es) skipped (grid (0, 0, 0) or every value nan: ncu could not "
                     "collect them).")
    judged = [r for r in rows if r.verdict != "unknown"]
    joined = _join(rows, trace) if trace is not None else None
    by_trace = joined is not None and any(r.trace_share_pct for r in judged)
    timed = all(r.duration_ns is not None for r in judged)
    weight = {id(r): (r.duration_ns or 0.0) if timed else 1.0 for r in judged}
    total = sum(weight.values())
    if judged and not timed and not by_trace:
        notes.append("Some kernels have no duration: each judged kernel counts once in the shares.")
    for row in judged:
        row.share_pct = round(100 * weight[id(row)] / total, 1) if total > 0 else None
    rows.sort(key=lambda r: (r.verdict == "unknown", -(r.trace_share_pct or 0), -(r.share_pct or 0),
                             -(r.duration_ns or 0)))
    by_verdict: dict[str, float] = defaultdict(float)
    by_fix: dict[str, float] = defaultdict(float)
    for row in judged:
        share = (row.trace_share_pct or 0) if by_trace else (row.share_pct or 0)
        by_verdict[row.verdict] += share
        by_fix[_fix_key(row)] += share
    time_by_verdict = {v: round(s, 1) for v, s in sorted(by_verdict.items(), key=lambda item: -item[1])
                       if s > 0 or not by_trace}
    basis_text = "of the trace's GPU time" if by_trace else "of the time"
    fixes = [f"{key.replace(':', ' (').rstrip()}{')' if ':' in key else ''} - {share:.0f} % {basis_text}: {_FIX[key]}"
             for key, share in sorted(by_fix.items(), key=lambda item: -item[1]) if share > 0][:4]
    unknown_rows = [r for r in rows if r.verdict == "unknown"]
    if unknown_rows:
        notes.append(f"{len(unknown_rows)} kernel(s) have no Speed Of Light figures and are not judged: collect "
                     "them with --set basic (or --section SpeedOfLight).")
    kept = rows[:top]
    if len(rows) > top:
        notes.append(f"{len(rows) - top} more kernel(s) not listed (top={top}).")
    unprofiled, covered, trace_says = _trace_side(joined, judged, notes)
    decides = None
    next_steps: list[NextStep] = []
    if not judged:
        severity = Severity.unknown
        if read.decides:
            decides = "; ".join(dict.fromkeys(read.decides))[:600]
            conclusion = [f"Cannot judge the kernels: {read.coverage[0].detail if read.coverage else 'no input'}.",
                          f"Run {read.decides[0]} where ncu is installed (no GPU needed) and pass the CSV."]
        else:
            decides = _profile_command([unknown_rows[0].name] if unknown_rows else [], "kernels")
            decides = decides.replace("--set full", "--set basic") + ", then this call on it"
            conclusion = ["Cannot judge the kernels: " + ("none of them has Speed Of Light figures (Compute (SM) "
                          "and Memory Throughput)." if unknown_rows else "no kernel launch was read."),
                          f"Profile with the SpeedOfLight section: {decides}."]
        next_steps.append(NextStep(branch=_BRANCH, action=decides, why="Collects Compute (SM) and Memory "
                                   "Throughput, which decide whether a kernel is compute-, memory- or latency-bound."))
        conclusion += trace_says[:1]
    else:
        dominant = next(iter(time_by_verdict))
        holders = [r for r in rows if r.verdict == dominant and (not by_trace or r.trace_share_pct)]
        share = time_by_verdict[dominant]
        lead = holders[0]
        what = "kernel that takes" if len(holders) == 1 else f"{len(holders)} kernels that take"
        basis = "of the trace's GPU time" if by_trace else "of the profiled GPU time" if timed \
            else "of the judged kernels"
        conclusion = [f"The {what} {share:.0f} % {basis} {'is' if len(holders) == 1 else 'are'} "
                      f"{dominant.replace('_', '-')}: {_short(lead.name, 60)}: {lead.why}.",
                      f"Fix: {_FIX[_fix_key(lead)]} ({_NCU_DOCS}).".replace(" - ", " ")]
        judged_share = sum(by_verdict.values())
        latency_share = by_verdict.get("latency_bound", 0.0) / judged_share if judged_share > 0 else 0.0
        severity = Severity.warn if latency_share >= KERNEL_LATENCY_WARN_SHARE else Severity.ok
        if trace_says:
            conclusion.append(trace_says[0])
        elif severity is Severity.warn:
            conclusion.append(f"Latency-bound kernels hold {latency_share * 100:.0f} % of the judged time: the GPU "
                              "is far from both its compute and memory limits there.")
        elif lead.borderline:
            conclusion.append("That kernel is borderline: near a threshold of NVIDIA's rule, either neighbouring "
                              "verdict is defensible.")
        if severity is Severity.ok and covered is not None and covered < KERNEL_TRACE_COVERED_SHARE and unprofiled:
            # Most of the trace's kernel time was not profiled: ok would speak for the minority of the work.
            severity = Severity.unknown
            decides = _profile_command([u.name for u in unprofiled[:3]], "top_kernels") + ", then this call on it"
        next_steps.append(NextStep(branch=_BRANCH, action=f"{_profile_command([lead.name], bare_function(lead.name))}"
                                   ", then analyze_kernels on it", why="The full set adds the stall reasons, memory "
                                   "workload and source counters behind the verdict."))
        next_steps.append(NextStep(branch=_BRANCH, action="After the fix: compare_runs(before=<trace before>, "
                                   "after=<trace after>)", why="Whether the kernel's time really went down."))
    if unprofiled:
        next_steps.insert(0 if decides and "top_kernels" in decides else len(next_steps), NextStep(
            branch=_BRANCH, action=_profile_command([u.name for u in unprofiled[:3]], "top_kernels")
            + ", then analyze_kernels on it with the same trace",
            why="These trace kernels hold GPU time and have no ncu data."))
    return AnalyzeKernelsResult(severity=severity, conclusion=conclusion[:3], next_steps=next_steps[:3],
                                coverage=read.coverage, decides=decides, notes=notes[:20], kernels=kept,
                                skipped_launches=skipped, time_by_verdict=time_by_verdict, fixes=fixes,
                                trace_profiled_pct=None if joined is None else round(
                                    sum(r.trace_share_pct or 0 for r in judged), 1),
                                unprofiled=unprofiled)


def _function(kernel: UnprofiledKernel) -> str:
    return _short(qualified_function(kernel.name) or kernel.name, 60) + (
        f" ({kernel.instances} instances)" if kernel.instances > 1 else "")


def _trace_side(joined: _Joined | None, judged: list[KernelRow],
                notes: list[str]) -> tuple[list[UnprofiledKernel], float | None, list[str]]:
    """The trace's unprofiled kernels, the share of its profilable kernel time the judged kernels cover (None
    without a trace), and the sentence the conclusion gives it (none when the profiled kernels hold the time)."""
    if joined is None:
        return [], None, []
    trace = joined.trace
    by_function: dict[str, list[TraceKernel]] = defaultdict(list)
    for kernel in joined.unprofiled:  # the most time first: each function's first is its largest instance
        by_function[qualified_function(kernel.name) or kernel.name].append(kernel)
    unprofiled = sorted((UnprofiledKernel(
        name=group[0].name, instances=len(group), launches=sum(k.launches for k in group),
        total_ms=round(sum(k.total_us for k in group) / 1000, 3),
        share_pct=trace.share_pct(sum(k.total_us for k in group)),
        ncu_command=_profile_command([group[0].name], bare_function(group[0].name) or "kernel"))
        for group in by_function.values()), key=lambda u: -u.total_ms)[:KERNELS_MAX_UNPROFILED]
    matched_us = sum(m.total_us for name, m in joined.matches.items() if any(r.name == name for r in judged))
    # None: the trace holds no kernel ncu could profile (copies, memsets, collectives only), so nothing is missed.
    covered = matched_us / trace.profilable_us if trace.profilable_us > 0 else None
    said: list[str] = []
    missing = sum(k.total_us for k in joined.unprofiled)
    if not joined.matched:
        notes.append("None of the profiled kernels appears in the trace (names compared demangled, template "
                     "arguments and parameters aside, cut names by their beginning): it is of another run or "
                     "program, or the kernels were renamed; shares are of the profiled time.")
        said.append(f"None of the profiled kernels is in the trace, whose kernels ({trace.share_pct(missing):.0f} % of "
                    f"its GPU time) have no ncu data: profile them, {_function(unprofiled[0])} first."
                    if unprofiled else "None of the profiled kernels is in the trace.")
    elif covered is not None and covered < KERNEL_TRACE_COVERED_SHARE and unprofiled:
        found_us = sum(m.total_us for m in joined.matches.values())
        unjudged = f" ({trace.share_pct(found_us):.0f} % with the unjudged ones found in it)" \
            if found_us > matched_us else ""
        said.append(f"The judged kernels hold only {trace.share_pct(matched_us):.0f} % of the trace's GPU time"
                    f"{unjudged}; {len(joined.unprofiled)} kernel(s) with {trace.share_pct(missing):.0f} % have no ncu "
                    f"data, the largest {_function(unprofiled[0])} ({unprofiled[0].share_pct:.1f} %).")
    return unprofiled, covered, said
