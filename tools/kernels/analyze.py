"""analyze_kernels: inside the hot kernels, from Nsight Compute results: reports (`.ncu-rep`, `.nsight-cuprof-report`,
read through ncu itself), `ncu --csv` exports of the details or raw page, and `ncu` text output (pasted or saved).

Per kernel (launches of the same name and launch shape together): duration, launches, Compute (SM) and Memory
throughput, DRAM, achieved and theoretical occupancy, waves per SM, what limits occupancy, the top stall reasons and
the rule results the report stores; failed launches (grid 0, all nan) are skipped and counted. The verdict per kernel
follows NVIDIA's own bottleneck rule (tools/kernels/verdict.py); the overall answer weighs the kernels by their GPU
time and gives the fix for the class that holds it. Nothing of a report's session page (host names, IP addresses,
the command line) and no Host Name / Process Name column is read. SOP: gpu_utilization_low.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import anyio
from pydantic import BaseModel, Field

from tools.core.context import ToolContext
from tools.core.files import InputFile, expand_inputs, read_regular, read_whole_text
from tools.core.limits import KERNELS_DEFAULT_TOP, KERNELS_MAX_FILES, KERNELS_MAX_TEXT_BYTES, KERNELS_MAX_TOP
from tools.core.models import Coverage, InputModel, NextStep, PathArg, Severity, Table, ToolResult, cell
from tools.core.thresholds import KERNEL_LATENCY_WARN_SHARE
from tools.kernels.launches import Launch
from tools.kernels.ncu_csv import csv_kind, read_details_csv, read_raw_csv
from tools.kernels.ncu_report import REPORT_SUFFIXES, ReportUnread, read_report
from tools.kernels.ncu_text import looks_like_ncu_text, read_ncu_text
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

    cli_positional = "files"


class KernelStall(BaseModel):
    reason: str = Field(description="Warp stall reason (Warp State Statistics), e.g. long_scoreboard.")
    pct: float = Field(description="Its share of the stall cycles per issued instruction, in %.")


class KernelRule(BaseModel):
    type: str = Field(description="OPT, WRN (what reports up to 2023.1 store for OPT), INF or ERR.")
    name: str = Field(description="The rule's name (CSV and reports) or, for text output, its section.")
    speedup_pct: float | None = Field(description="The estimated speedup ncu gives (2023.2+), in %.")
    message: str = Field(default="", description="The rule's first sentence, as ncu wrote it.")


class KernelRow(BaseModel):
    name: str = Field(description="The kernel's name as ncu printed it (demangled by ncu).")
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
    stalls: list[KernelStall] = Field(description="The top warp-stall reasons (raw page or reports only).")
    rules: list[KernelRule] = Field(description="Rule results the report stores (OPT/WRN first).")
    verdict: KernelVerdict = Field(description="compute_bound, memory_bound, latency_bound or balanced by NVIDIA's "
                                   "rule; unknown without Speed Of Light figures.")
    borderline: bool = Field(description="Near a threshold (60 % or the 10-point gap): either neighbour verdict is "
                             "defensible.")
    why: str
    source: str = Field(description="The input it was read from.")


class AnalyzeKernelsResult(ToolResult):
    kernels: list[KernelRow] = Field(description="Kernels, the most GPU time first.")
    skipped_launches: int = Field(description="Failed launches (grid 0, every value nan) left out.")
    time_by_verdict: dict[str, float] = Field(description="Share of the judged kernels' GPU time per verdict, %.")
    fixes: list[str] = Field(description="The fix per verdict class that holds the time, largest first.")

    narrow_hint = "lower top, or pass fewer files"

    def tables(self) -> list[Table]:
        return [
            Table("Time by verdict", ["verdict", "share of GPU time"],
                  [[verdict, f"{share:.1f} %"] for verdict, share in self.time_by_verdict.items()]),
            Table("Kernels", ["kernel", "grid", "block", "launches", "time us", "share", "SM %", "Mem %", "DRAM %",
                              "occupancy", "waves", "limiter", "verdict", "why"],
                  [[_short(k.name), k.grid or "-", k.block or "-", str(k.launches),
                    cell(None if k.duration_ns is None else k.duration_ns / 1000), _pct(k.share_pct),
                    cell(k.sm_throughput_pct), cell(k.memory_throughput_pct), cell(k.dram_throughput_pct),
                    f"{cell(k.achieved_occupancy_pct)} / {cell(k.theoretical_occupancy_pct)}", cell(k.waves_per_sm),
                    k.occupancy_limiter or "-", k.verdict + (" (borderline)" if k.borderline else ""), k.why]
                   for k in self.kernels], "kernels"),
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


def _kernel(source: str, group: list[Launch]) -> KernelRow:
    first = group[0]
    keys = {key for launch in group for key in launch.figures}
    figures = {key: value for key in keys
               if (value := _mean([(x.figures[key], x.invocations) for x in group if key in x.figures])) is not None}
    durations = [x.figures["duration_ns"] * x.invocations for x in group if "duration_ns" in x.figures]
    stall_sum: dict[str, float] = defaultdict(float)
    stall_launches = [x for x in group if x.stalls]
    for launch in stall_launches:
        for reason, value in launch.stalls.items():
            if reason != "selected":  # issuing, not a stall
                stall_sum[reason] += value / len(stall_launches)
    total = sum(stall_sum.values())
    stalls = sorted(((r, 100 * v / total) for r, v in stall_sum.items() if v > 0), key=lambda s: -s[1])[:3] \
        if total > 0 else []
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


def _kernel_filter(name: str) -> str:
    """A -k regex for the kernel: its bare function name, without template arguments or parameters."""
    bare = name
    while re.search(r"<[^<>]*>", bare):  # template arguments, innermost first
        bare = re.sub(r"<[^<>]*>", "", bare)
    words = re.findall(r"\w+", bare.split("(", 1)[0].split("::")[-1])
    return words[-1] if words else "KERNEL"


# ----------------------------------------------------------------------------------------------- the tool


async def analyze_kernels(params: AnalyzeKernelsInput, ctx: ToolContext) -> AnalyzeKernelsResult:
    """Inside the hot kernels, from Nsight Compute results: .ncu-rep / .nsight-cuprof-report reports (read through
    ncu --import; without ncu, unknown with the command that decides), ncu --csv exports (details or raw page, every
    generation) or ncu text output (pasted or saved). Per kernel: duration, launches, Compute (SM) / Memory / DRAM
    throughput, achieved and theoretical occupancy, waves per SM, the occupancy limiter, top stall reasons and the
    report's rule results (failed launches skipped and counted). Verdict per kernel by NVIDIA's bottleneck rule:
    compute_bound, memory_bound (L1/L2 vs DRAM), latency_bound (small grid, low occupancy, stalls) or balanced,
    borderline near a threshold; the overall answer weighs kernels by GPU time and gives the fix per class. Never
    echoes the report's session page (host names, IP addresses, command line).
    """
    files = expand_inputs(params.files, ctx.roots, max_files=KERNELS_MAX_FILES)
    read = await _read(files, ctx)
    skipped = sum(launch.invocations for _, launch in read.launches if launch.failed)
    groups: dict[tuple[str, str, str | None, str | None], list[Launch]] = {}
    for source, launch in read.launches:
        if not launch.failed:
            groups.setdefault((source, launch.name, launch.grid, launch.block), []).append(launch)
    rows = [_kernel(key[0], group) for key, group in groups.items()]
    return _result(rows, skipped, read, params.top)


def _result(rows: list[KernelRow], skipped: int, read: _Read, top: int) -> AnalyzeKernelsResult:
    notes = list(read.notes)
    if skipped:
        notes.append(f"{skipped} failed launch(es) skipped (grid (0, 0, 0) or every value nan: ncu could not "
                     "collect them).")
    judged = [r for r in rows if r.verdict != "unknown"]
    timed = all(r.duration_ns is not None for r in judged)
    weight = {id(r): (r.duration_ns or 0.0) if timed else 1.0 for r in judged}
    total = sum(weight.values())
    if judged and not timed:
        notes.append("Some kernels have no duration: each judged kernel counts once in the shares.")
    for row in judged:
        row.share_pct = round(100 * weight[id(row)] / total, 1) if total > 0 else None
    rows.sort(key=lambda r: (r.verdict == "unknown", -(r.share_pct or 0), -(r.duration_ns or 0)))
    by_verdict: dict[str, float] = defaultdict(float)
    by_fix: dict[str, float] = defaultdict(float)
    for row in judged:
        by_verdict[row.verdict] += row.share_pct or 0
        by_fix[_fix_key(row)] += row.share_pct or 0
    time_by_verdict = {v: round(s, 1) for v, s in sorted(by_verdict.items(), key=lambda item: -item[1])}
    fixes = [f"{key.replace(':', ' (').rstrip()}{')' if ':' in key else ''} - {share:.0f} % of the time: {_FIX[key]}"
             for key, share in sorted(by_fix.items(), key=lambda item: -item[1]) if share > 0][:4]
    unknown_rows = [r for r in rows if r.verdict == "unknown"]
    if unknown_rows:
        notes.append(f"{len(unknown_rows)} kernel(s) have no Speed Of Light figures and are not judged: collect "
                     "them with --set basic (or --section SpeedOfLight).")
    kept = rows[:top]
    if len(rows) > top:
        notes.append(f"{len(rows) - top} more kernel(s) not listed (top={top}).")
    decides = None
    next_steps: list[NextStep] = []
    if not judged:
        severity = Severity.unknown
        if read.decides:
            decides = "; ".join(dict.fromkeys(read.decides))[:600]
            conclusion = [f"Cannot judge the kernels: {read.coverage[0].detail if read.coverage else 'no input'}.",
                          f"Run {read.decides[0]} where ncu is installed (no GPU needed) and pass the CSV."]
        else:
            target = _kernel_filter(unknown_rows[0].name) if unknown_rows else "NAME"
            decides = f"ncu --set basic -k regex:{target} -c 1 -o {target} <the application>, then this call on it"
            conclusion = ["Cannot judge the kernels: " + ("none of them has Speed Of Light figures (Compute (SM) "
                          "and Memory Throughput)." if unknown_rows else "no kernel launch was read."),
                          f"Profile with the SpeedOfLight section: {decides}."]
        next_steps.append(NextStep(branch=_BRANCH, action=decides, why="Collects Compute (SM) and Memory "
                                   "Throughput, which decide whether a kernel is compute-, memory- or latency-bound."))
    else:
        dominant = next(iter(time_by_verdict))
        holders = [r for r in rows if r.verdict == dominant]
        share = time_by_verdict[dominant]
        lead = holders[0]
        what = "kernel that takes" if len(holders) == 1 else f"{len(holders)} kernels that take"
        basis = "of the profiled GPU time" if timed else "of the judged kernels"
        conclusion = [f"The {what} {share:.0f} % {basis} {'is' if len(holders) == 1 else 'are'} "
                      f"{dominant.replace('_', '-')}: {_short(lead.name, 60)}: {lead.why}.",
                      f"Fix: {_FIX[_fix_key(lead)]} ({_NCU_DOCS}).".replace(" - ", " ")]
        latency_share = by_verdict.get("latency_bound", 0.0) / 100
        severity = Severity.warn if latency_share >= KERNEL_LATENCY_WARN_SHARE else Severity.ok
        if severity is Severity.warn:
            conclusion.append(f"Latency-bound kernels hold {latency_share * 100:.0f} % of the time: the GPU is far "
                              "from both its compute and memory limits there.")
        elif lead.borderline:
            conclusion.append("That kernel is borderline: near a threshold of NVIDIA's rule, either neighbouring "
                              "verdict is defensible.")
        target = _kernel_filter(lead.name)
        next_steps.append(NextStep(branch=_BRANCH, action=f"ncu --set full -k regex:{target} -c 1 -o {target} <the "
                                   "application>, then analyze_kernels on it", why="The full set adds the stall "
                                   "reasons, memory workload and source counters behind the verdict."))
        next_steps.append(NextStep(branch=_BRANCH, action="After the fix: compare_runs(before=<trace before>, "
                                   "after=<trace after>)", why="Whether the kernel's time really went down."))
    return AnalyzeKernelsResult(severity=severity, conclusion=conclusion[:3], next_steps=next_steps,
                                coverage=read.coverage, decides=decides, notes=notes[:20], kernels=kept,
                                skipped_launches=skipped, time_by_verdict=time_by_verdict, fixes=fixes)
