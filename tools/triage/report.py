"""triage_report: every tool that has inputs, run once, merged into the SOP's answer.

The health check always runs; the log diagnosis, straggler analysis, trace summary, stack grouping and
flight-recorder analysis run when their inputs are given. Each tool's problems become rows of the SOP's table
(symptom | root cause | evidence | fix | verification), worst first; the conclusion is three sentences; the
references are those of the SOP branches the rows belong to. A tool that cannot run is a row saying why, and the
others still report. This is what `gpu-triage report` prints for CI and for a newcomer (`--demo`).
A memory file (snapshot, summary, stats or OOM log) adds analyze_memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from sop import branches
from tools.core.context import ToolContext
from tools.core.errors import TriageError
from tools.core.limits import INFER_MAX_ALLOWED_HOSTS, MAX_PATH_CHARS, PLAN_MAX_SYMPTOM_CHARS
from tools.core.models import (
    Coverage,
    CoverageStatus,
    InputModel,
    NameArg,
    NextStep,
    PathArg,
    Severity,
    Table,
    ToolResult,
    worst,
)
from tools.core.verdict import judged

__all__ = ["BaselineRow", "ReportRow", "TriageReportInput", "TriageReportResult", "triage_report"]

_RANK = {Severity.crit: 0, Severity.warn: 1, Severity.unknown: 2, Severity.ok: 3}
_SOURCE_ORDER = {"health_check": 0, "telemetry_history": 0, "dump_stacks": 1, "analyze_flight_recorder": 2,
                 "find_stragglers": 3, "check_interconnect": 3, "profile_cpu": 3, "sample_host": 3,
                 "summarize_trace": 4, "analyze_memory": 4, "inference_metrics": 4, "diagnose_compile": 4,
                 "diagnose_logs": 5, "compare_runs": 6}


class TriageReportInput(InputModel):
    symptom: str | None = Field(default=None, max_length=PLAN_MAX_SYMPTOM_CHARS,
                                description="What the user reported, for the plan (optional).")
    logs: list[PathArg] = Field(default_factory=list, max_length=64, description="The job's logs (paths or globs).")
    traces: list[PathArg] = Field(default_factory=list, max_length=64,
                                  description="Profiler traces (a file or a folder).")
    stacks: list[PathArg] = Field(default_factory=list, max_length=64, description="Stack dumps saved earlier.")
    fr_dir: PathArg | None = Field(default=None, description="Flight-recorder dump folder.")
    memory: PathArg | None = Field(default=None, description="An allocator snapshot, memory_summary() text, "
                                   "memory_stats() dump or OOM log (analyze_memory).")
    pids: list[int] = Field(default_factory=list, max_length=1024, description="Live worker pids to dump stacks of.")
    job: bool = Field(default=False, description="Dump the stacks of the torchrun job found on this host.")
    slurm_job: str | None = Field(default=None, pattern=r"^[0-9]{1,12}$", max_length=12,
                                  description="A running Slurm job: health_check and dump_stacks on every node of it, "
                                  "and diagnose_logs on its stdout/stderr (from scontrol) when no logs are given.")
    health: bool = Field(default=True, description="Run the GPU/host health check.")
    metrics: PathArg | None = Field(default=None, description="An inference server's /metrics URL or saved page "
                                    "(inference_metrics).")
    allow_host: list[NameArg] = Field(default_factory=list, max_length=INFER_MAX_ALLOWED_HOSTS,
                                      description="Hosts besides loopback whose /metrics may be scraped, or whose "
                                      "Prometheus may be asked (prometheus).")
    prometheus: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS,
                                   description="The cluster's Prometheus-compatible API root holding dcgm-exporter "
                                   "series, e.g. http://127.0.0.1:9090: telemetry_history over the job's window (the "
                                   "Slurm job's, else the logs' times) says what changed on which GPU. A host besides "
                                   "loopback must be in allow_host.")
    compile_logs: list[PathArg] = Field(default_factory=list, max_length=64,
                                        description="Logs written with TORCH_LOGS=graph_breaks,recompiles "
                                        "(diagnose_compile).")
    baseline: PathArg | None = Field(default=None, description="The run before the fix (a trace, or step-time logs): "
                                     "compared with the traces (else the logs) by compare_runs.")
    profile_cpu: bool = Field(default=False, description="Also record the pids' CPU time for 5 s with py-spy "
                              "(profile_cpu): the hot function of the trainer and its DataLoader workers.")
    sample_host: bool = Field(default=False, description="Also sample this host for 5 s (sample_host): disks, CPUs, "
                              "memory, and the pids' workers.")
    nccl_logs: list[PathArg] = Field(default_factory=list, max_length=64, description="Logs with NCCL_DEBUG=INFO "
                                     "lines (check_interconnect; the job's logs are read for them too).")
    nccl_tests: list[PathArg] = Field(default_factory=list, max_length=64, description="nccl-tests outputs "
                                      "(check_interconnect).")
    net_captures: list[PathArg] = Field(default_factory=list, max_length=64, description="Saved topo -m, nvlink, "
                                        "ibstat, ibv_devinfo, ethtool outputs (check_interconnect).")


class ReportRow(BaseModel):
    severity: Severity
    symptom: str
    root_cause: str
    evidence: str
    fix: str
    verification: str
    source: str = Field(description="The tool that found it.")
    branch: str | None = None
    other_run: str | None = Field(default=None, description="Set when the row is of inputs of another run than the "
                                  "rest of the report (why): it is listed apart and not part of the job's story.")


class ToolRun(BaseModel):
    tool: str
    severity: Severity | None = Field(description="None when it could not run; unknown when it ran but its inputs do "
                                      "not decide (or it read nothing it understood).")
    conclusion: str
    decides: str | None = Field(default=None, description="When unknown: what would decide.")


class BaselineRow(BaseModel):
    measure: str
    before: str
    after: str
    change: str


class TriageReportResult(ToolResult):
    rows: list[ReportRow] = Field(description="The SOP's answer table, worst first.")
    baseline: list[BaselineRow] = Field(default_factory=list, description="With a baseline: the run compared with "
                                        "it (compare_runs): step time, throughput, each cause, what dominates now.")
    runs: list[ToolRun] = Field(description="Each tool run and its own first sentence.")
    references: list[str] = Field(description="Official documentation for the branches involved: 'title: url'.")

    narrow_hint = "pass fewer inputs"

    def tables(self) -> list[Table]:
        return [
            Table("Report", ["severity", "symptom", "root cause", "evidence", "fix", "verification"],
                  # The category first in every cell that may be cut; another run's mark beside the severity.
                  [[r.severity.value + (" [another run]" if r.other_run else ""), r.symptom, r.root_cause,
                    r.evidence, r.fix, r.verification] for r in self.rows], "rows"),
            Table("Compared with the baseline", ["measure", "before", "after", "change"],
                  [[b.measure, b.before, b.after, b.change] for b in self.baseline], "baseline"),
            Table("Tools run", ["tool", "severity", "first sentence"],
                  [[t.tool, t.severity.value if t.severity else "could not run", t.conclusion] for t in self.runs],
                  "runs"),
            Table("References", ["reference"], [[r] for r in self.references], "references"),
        ]


def _verify(branch: str | None, fallback: str) -> str:
    table = branches().get(branch or "", None)
    return table.table[0]["verify"] if table and table.table else fallback


def _health_rows(result: Any) -> list[ReportRow]:
    return [ReportRow(severity=f.severity, symptom=f.check, root_cause=f.meaning,
                      evidence=f"{f.value} (limit {f.threshold})", fix=f"See sop://{f.sop_branch or 'gpu_hardware'}",
                      verification="health_check: the check is ok", source="health_check", branch=f.sop_branch)
            for f in result.findings if f.severity is not Severity.ok]


def _log_rows(result: Any) -> list[ReportRow]:
    rows = []
    for f in result.findings:
        if f.severity == "info":
            continue
        ranks = ",".join(map(str, f.ranks[:8])) or "-"
        rows.append(ReportRow(severity=Severity.crit if f.severity == "crit" else Severity.warn,
                              symptom=f"{f.category} ({f.rule})", root_cause=f.cause,
                              evidence=f"x{f.count} on rank(s) {ranks}, first at {f.first.file}:{f.first.line}",
                              fix=f.fix, verification="diagnose_logs on the next run: no such finding",
                              source="diagnose_logs", branch=f.sop_branch))
    return rows


def _trace_rows(result: Any) -> list[ReportRow]:
    return [ReportRow(severity=Severity.warn if c.share_pct >= 10 else Severity.ok,
                      symptom=f"{c.kind}: GPU idle", root_cause=c.kind.replace("_", " "),
                      evidence=f"{c.share_pct:.1f}% of step time; {c.evidence}", fix=c.fix,
                      verification="summarize_trace on a new trace: this share near 0",
                      source="summarize_trace", branch="gpu_utilization_low")
            for c in result.causes if c.share_pct >= 10]


def _straggler_rows(result: Any) -> list[ReportRow]:
    return [ReportRow(severity=f.severity, symptom=f"{f.kind}: rank {f.rank} slower than the median rank",
                      root_cause=f.kind.replace("_", " "), evidence=f.evidence,
                      fix=("check that rank's GPU (clocks, throttling, power, links) and its data"
                           if f.kind != "wait_slow" else "check its network and data input (nccl-tests, ibstat)"),
                      verification="find_stragglers: nothing flagged", source="find_stragglers", branch="straggler")
            for f in result.flagged]


async def _slurm_job_logs(job_id: str, runs: list[ToolRun]) -> list[str]:
    """The job's stdout/stderr paths from scontrol (diagnose_logs reads them when they are inside the roots)."""
    from tools.cluster import SlurmJob
    from tools.core.errors import TriageError

    job = SlurmJob(job_id)
    try:
        await job.nodes()
    except TriageError as exc:
        runs.append(ToolRun(tool="scontrol", severity=None, conclusion=str(exc)))
        return []
    return sorted(set(job.log_paths()))


def _meaning_first(reason: str) -> str:
    """dump_stacks' reason, written 'where the rank is: what that means', turned round so that a cell cut short
    still says what it means: 'a collective only some ranks call (...): in all_gather while ranks 1-3 wait ...'."""
    where, colon, meaning = reason.rstrip(".").rpartition(": ")
    return f"{meaning}: {where}." if colon and where and meaning else reason


def _stack_rows(result: Any) -> list[ReportRow]:
    severity = result.severity if result.severity in (Severity.warn, Severity.crit) else Severity.crit
    return [ReportRow(severity=severity,
                      symptom=f"{s.kind}: rank {s.rank}{f' on {s.node}' if s.node else ''} not where the others are",
                      root_cause=_meaning_first(s.reason), evidence=f"rank {s.rank} in {s.function} at {s.location}",
                      fix="make every rank make the same collectives in the same order",
                      verification="the job passes that step; dump_stacks shows one group", source="dump_stacks",
                      branch="nccl_hang_or_slow")
            for s in result.suspects[:8]]


def _flight_rows(result: Any) -> list[ReportRow]:
    return [ReportRow(severity=Severity.crit if s.reason != "no_dump" else Severity.warn,
                      symptom=f"{s.reason}: rank {s.rank} at collective seq {s.seq} (pg {s.pg})",
                      root_cause=s.detail, evidence=s.location or f"op {s.op}",
                      fix="make every rank issue the same collective at that point",
                      verification="analyze_flight_recorder on new dumps: no suspect",
                      source="analyze_flight_recorder", branch="nccl_hang_or_slow")
            for s in result.suspects[:8]]


def _memory_rows(result: Any) -> list[ReportRow]:
    if result.verdict == "none":
        return []
    return [ReportRow(severity=result.severity, symptom=f"{result.verdict}: GPU memory"
                      + (", CUDA OOM" if result.oom else ""), root_cause=result.evidence[-1] if len(
                          result.evidence) > 1 else result.evidence[0],
                      evidence=result.evidence[0], fix="; ".join(result.fix[:2]),
                      verification=_verify("oom", "analyze_memory on a new snapshot: verdict none"),
                      source="analyze_memory", branch="oom")]


def _inference_rows(result: Any) -> list[ReportRow]:
    return [ReportRow(severity=f.severity, symptom=f"{f.kind}: inference server", root_cause=f.cause,
                      evidence=f.evidence, fix=f.fix, verification=f.verify, source="inference_metrics",
                      branch=f.sop_branch)
            for f in result.findings]


def _kind_rows(findings: Any, source: str, area: str, verification: str, limit: int,
               root_cause: Callable[[Any], str]) -> list[ReportRow]:
    """Report rows for the findings of a tool whose findings carry kind, severity, evidence, fix and sop_branch."""
    return [ReportRow(severity=f.severity, symptom=f"{f.kind}: {area}", root_cause=root_cause(f),
                      evidence=f.evidence, fix=f.fix, verification=verification, source=source, branch=f.sop_branch)
            for f in findings[:limit]]


def _kind(finding: Any) -> str:
    return str(finding.kind).replace("_", " ")


def _telemetry_rows(result: Any) -> list[ReportRow]:
    return [ReportRow(severity=f.severity, symptom=f"{f.kind}: {f.node} GPU {f.gpu}" + (f" ({f.mig})" if f.mig else ""),
                      root_cause=f.meaning or ", ".join(f.reasons) or _kind(f),
                      evidence=f.evidence + (f" (from {f.began})" if f.began else ""), fix=f"See sop://{f.sop_branch}",
                      verification="telemetry_history over the next run's window: no such finding",
                      source="telemetry_history", branch=f.sop_branch)
            for f in result.findings[:8]]


def _compile_rows(result: Any) -> list[ReportRow]:
    return _kind_rows(result.findings, "diagnose_compile", "torch.compile",
                      "diagnose_compile on the next run's logs: no such finding", 8,
                      lambda f: f.evidence.split(" x", 1)[0] if f.kind == "graph_break" else _kind(f))


def _interconnect_rows(result: Any) -> list[ReportRow]:
    return _kind_rows(result.findings, "check_interconnect", "interconnect",
                      "check_interconnect after the fix (and nccl-tests per node pair): no such finding", 8,
                      lambda f: " ".join(x for x in (f.node, f"rank {f.rank}" if f.rank else "") if x) or f.kind)


def _cpu_rows(result: Any) -> list[ReportRow]:
    return _kind_rows(result.findings, "profile_cpu", "host CPU",
                      "profile_cpu after the fix: the share falls; summarize_trace: GPU busy up", 4,
                      lambda f: _kind(f) + (f" (pid {f.pid})" if f.pid else ""))


def _host_rows(result: Any) -> list[ReportRow]:
    return _kind_rows(result.findings, "sample_host", "host",
                      "sample_host after the fix: no such finding; GPU utilisation up", 3, _kind)


def _compare_rows(result: Any) -> list[ReportRow]:
    if result.severity is Severity.unknown:
        return []  # not compared: the report's row for a tool that cannot tell says why
    dominant = result.now_dominant
    regressed = result.verdict == "regressed"
    return [ReportRow(severity=Severity.warn if regressed else Severity.ok,
                      symptom=f"{result.verdict}: compared with the baseline",
                      root_cause=f"now dominant: {dominant.kind}" if dominant else "not in step logs (profile the run)",
                      evidence=result.conclusion[0], fix=dominant.fix if dominant else "summarize_trace on a new trace",
                      verification="compare_runs: verdict improved, the cause resolved", source="compare_runs",
                      branch=dominant.branch if dominant else None)]


def _baseline_rows(result: Any) -> list[BaselineRow]:
    times = result.step_time_ms
    factor = f"x{result.speedup:.2f}" if result.speedup else "no significant change"
    rows = [BaselineRow(measure="median step ms (steady state)", before=_num(times.before), after=_num(times.after),
                        change=factor)]
    rows += [BaselineRow(measure=f"throughput ({r.throughput_unit})", before=_num(result.runs[0].throughput),
                         after=_num(r.throughput), change=f"{result.runs[0].steps} vs {r.steps} steps")
             for r in result.runs[1:]]
    rows += [BaselineRow(measure=f"cause {c.kind} (% of step)", before=_num(c.before_pct), after=_num(c.after_pct),
                         change=c.status) for c in result.causes]
    rows += [BaselineRow(measure="per-rank spread %", before=_num(result.rank_spread[0].spread_pct),
                         after=_num(result.rank_spread[1].spread_pct),
                         change=f"straggler: {result.rank_spread[0].straggler} -> {result.rank_spread[1].straggler}")
             ] if len(result.rank_spread) == 2 else []
    if result.now_dominant:
        rows.append(BaselineRow(measure="now dominant", before="-", after=result.now_dominant.kind,
                                change=f"sop://{result.now_dominant.branch}"))
    return rows


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _unknown_row(name: str, result: ToolResult) -> ReportRow:
    """A tool that ran and cannot tell: a row of its own, so that `unknown` is never read as ok."""
    counts: dict[str, int] = {}
    for entry in result.coverage:
        counts[entry.status.value] = counts.get(entry.status.value, 0) + 1
    odd = next((c for c in result.coverage if c.status is not CoverageStatus.read), None)
    evidence = ("; ".join(f"{n} {status.replace('_', ' ')}" for status, n in counts.items()) or "no input read"
                ) + (f" ({odd.input}: {odd.detail})" if odd is not None and odd.detail else "")
    return ReportRow(severity=Severity.unknown, symptom=f"unknown: {name} cannot tell",
                     root_cause=result.conclusion[0] if result.conclusion else "its inputs do not decide",
                     evidence=evidence, fix=result.decides or "the same call on the job's own inputs of that kind",
                     verification=f"{name}: a verdict (ok, warn or crit)", source=name)


async def _run(name: str, call: Callable[[], Awaitable[Any]], rows_of: Callable[[Any], list[ReportRow]],
               rows: list[ReportRow], runs: list[ToolRun], ctx: ToolContext, coverage: list[Coverage]) -> Any:
    ctx.progress.update(len(runs), None, f"{name} (tool {len(runs) + 1} of the report)")
    try:
        result = judged(await call())  # the contract's rule, as if the tool had been called on its own
    except TriageError as exc:
        runs.append(ToolRun(tool=name, severity=None, conclusion=str(exc)))
        return None
    severity = result.severity
    runs.append(ToolRun(tool=name, severity=severity, conclusion=result.conclusion[0] if result.conclusion else "",
                        decides=result.decides if severity is Severity.unknown else None))
    own = rows_of(result)
    rows.extend(own)
    if severity is Severity.unknown and not any(row.severity is Severity.unknown for row in own):
        rows.append(_unknown_row(name, result))  # once: a tool whose own rows say unknown has said it
    coverage.extend(entry.model_copy(update={"detail": f"{name}: {entry.detail}" if entry.detail else name})
                    for entry in result.coverage)
    return result


def _keep_apart(rows: list[ReportRow], stragglers: Any) -> str | None:
    """Rows of inputs find_stragglers found to be of another run than the rest (recorded days apart, another world
    size, another workload): marked, so that the report does not tell two jobs as one story. Returns why."""
    if stragglers is None or not getattr(stragglers, "set_apart", None):
        return None
    kind = stragglers.set_apart_kind
    why = next((c.detail.split(": ", 1)[-1] for c in stragglers.coverage if c.input in stragglers.set_apart
                and c.status is CoverageStatus.not_understood), "")
    tool = "summarize_trace" if kind == "traces" else "diagnose_logs"
    label = f"the {kind} {', '.join(stragglers.set_apart[:2])}{' ...' if len(stragglers.set_apart) > 2 else ''}"
    for row in rows:
        if row.source == tool:
            row.other_run = why or f"{label} are of another run"
    return f"{label} are another run's ({why})" if why else f"{label} are another run's"


async def triage_report(params: TriageReportInput, ctx: ToolContext) -> TriageReportResult:
    """Run the health check and every tool that has inputs (logs -> diagnose_logs and find_stragglers, traces ->
    summarize_trace, stacks / pids / job -> dump_stacks, slurm_job -> health_check and dump_stacks on every node
    and diagnose_logs on the job's output, fr_dir -> analyze_flight_recorder, metrics ->
    inference_metrics, compile_logs -> diagnose_compile, nccl_logs / nccl_tests / net_captures ->
    check_interconnect, profile_cpu with pids -> profile_cpu, sample_host -> sample_host, prometheus ->
    telemetry_history over the job's window) and merge what they
    found into the SOP's answer: one table (symptom | root cause | evidence | fix | verification), worst first,
    three sentences, and the official references of the branches involved. A tool that cannot run is reported,
    the others still are; memory -> analyze_memory. With a baseline (the run before the fix), compare_runs
    compares it with the traces (else the logs): a section with step time, throughput, each cause
    before/after and what dominates now. The CLI `gpu-triage report` prints it (`--demo` on bundled sample
    artifacts).
    """
    from tools.compare import CompareRunsInput, compare_runs
    from tools.gpu import HealthCheckInput, health_check
    from tools.hangs import AnalyzeFlightRecorderInput, DumpStacksInput, analyze_flight_recorder, dump_stacks
    from tools.logs import DiagnoseLogsInput, diagnose_logs
    from tools.memory import AnalyzeMemoryInput, analyze_memory
    from tools.stragglers import FindStragglersInput, find_stragglers
    from tools.traces import SummarizeTraceInput, summarize_trace

    rows: list[ReportRow] = []
    runs: list[ToolRun] = []
    coverage: list[Coverage] = []
    job_logs = await _slurm_job_logs(params.slurm_job, runs) if params.slurm_job and not params.logs else []
    if params.health:
        health_input = HealthCheckInput(slurm_job=params.slurm_job)
        await _run("health_check", lambda: health_check(health_input, ctx), _health_rows, rows, runs, ctx, coverage)
    if params.prometheus:
        from tools.telemetry import TelemetryHistoryInput, telemetry_history

        # The job's window: the Slurm job's (scontrol), else the times of the job's step logs; else the last hour.
        telemetry_input = TelemetryHistoryInput(url=params.prometheus, allow_host=params.allow_host,
                                                job=params.slurm_job, step_logs=params.logs or job_logs)
        await _run("telemetry_history", lambda: telemetry_history(telemetry_input, ctx), _telemetry_rows, rows, runs,
                   ctx, coverage)
    if params.logs or job_logs:
        log_input = DiagnoseLogsInput(paths=params.logs or job_logs)
        await _run("diagnose_logs", lambda: diagnose_logs(log_input, ctx), _log_rows, rows, runs, ctx, coverage)
    stragglers = None
    if params.logs or params.traces:
        stragglers = await _run("find_stragglers", lambda: find_stragglers(FindStragglersInput(logs=params.logs,
                                                                                  traces=params.traces), ctx),
                   _straggler_rows, rows, runs, ctx, coverage)
    if params.traces:
        first_trace = params.traces[0]
        await _run("summarize_trace", lambda: summarize_trace(SummarizeTraceInput(path=first_trace), ctx),
                   _trace_rows, rows, runs, ctx, coverage)
    if params.stacks or params.pids or params.job or params.slurm_job:
        stack_input = (DumpStacksInput(from_files=params.stacks) if params.stacks else
                       DumpStacksInput(slurm_job=params.slurm_job) if params.slurm_job else
                       DumpStacksInput(pid=params.pids))
        await _run("dump_stacks", lambda: dump_stacks(stack_input, ctx), _stack_rows, rows, runs, ctx, coverage)
    if params.fr_dir:
        fr_dir = params.fr_dir
        await _run("analyze_flight_recorder",
                   lambda: analyze_flight_recorder(AnalyzeFlightRecorderInput(path=fr_dir), ctx), _flight_rows,
                   rows, runs, ctx, coverage)
    if params.memory:
        memory_path = params.memory
        await _run("analyze_memory", lambda: analyze_memory(AnalyzeMemoryInput(path=memory_path), ctx), _memory_rows,
                   rows, runs, ctx, coverage)
    if params.metrics:
        from tools.serving import InferenceMetricsInput, inference_metrics

        metrics_input = InferenceMetricsInput(source=params.metrics, allow_host=params.allow_host)
        await _run("inference_metrics", lambda: inference_metrics(metrics_input, ctx), _inference_rows, rows, runs, ctx,
                   coverage)
    if params.compile_logs:
        from tools.compile import DiagnoseCompileInput, diagnose_compile

        compile_input = DiagnoseCompileInput(paths=params.compile_logs)
        await _run("diagnose_compile", lambda: diagnose_compile(compile_input, ctx), _compile_rows, rows, runs, ctx,
                   coverage)
    if params.sample_host:
        from tools.host import SampleHostInput, sample_host

        host_input = SampleHostInput(pid=params.pids[:64])
        await _run("sample_host", lambda: sample_host(host_input, ctx), _host_rows, rows, runs, ctx, coverage)
    if params.profile_cpu:
        from tools.host import ProfileCpuInput, profile_cpu

        if not params.pids:
            runs.append(ToolRun(tool="profile_cpu", severity=None, conclusion="profile_cpu needs the trainer's pids "
                                "(pids)."))
        else:
            cpu_input = ProfileCpuInput(pid=params.pids[:16])
            await _run("profile_cpu", lambda: profile_cpu(cpu_input, ctx), _cpu_rows, rows, runs, ctx, coverage)
    if params.nccl_logs or params.nccl_tests or params.net_captures:
        from tools.interconnect import CheckInterconnectInput, check_interconnect

        net_input = CheckInterconnectInput(nccl_logs=params.nccl_logs, nccl_tests=params.nccl_tests,
                                           captures=params.net_captures)
        await _run("check_interconnect", lambda: check_interconnect(net_input, ctx), _interconnect_rows, rows, runs,
                   ctx, coverage)
    baseline: list[BaselineRow] = []
    if params.baseline:
        newer = params.traces or params.logs
        if not newer:
            runs.append(ToolRun(tool="compare_runs", severity=None, conclusion="a baseline needs the new run: pass "
                                "traces (or logs) of the run after the fix."))
        else:
            before, after = [params.baseline], newer
            compared = await _run("compare_runs", lambda: compare_runs(CompareRunsInput(before=before, after=after),
                                                                       ctx), _compare_rows, rows, runs, ctx, coverage)
            baseline = _baseline_rows(compared) if compared is not None else []
    apart = _keep_apart(rows, stragglers)
    # Worst first; within a severity, hardware first (nothing else can be trusted until it is fixed), then the
    # tools that name a culprit, then the generic symptoms; another run's rows after this one's.
    rows.sort(key=lambda r: (r.other_run is not None, _RANK[r.severity], _SOURCE_ORDER.get(r.source, 9)))
    involved = list(dict.fromkeys(r.branch for r in rows if r.branch and r.other_run is None))
    references = list(dict.fromkeys(f"{ref['title']}: {ref['url']}" for b in involved for ref in
                                    (branches()[b].references if b in branches() else ())))
    severity = worst([*(r.severity for r in rows), *(run.severity for run in runs if run.severity is not None)])
    decides = None
    notes = []
    if apart:
        notes.append(f"{apart[0].upper()}{apart[1:]}: their rows are marked [another run] and left out of the "
                     "conclusion; pass the artifacts of one run to have them judged together.")
    if all(run.severity is None for run in runs):
        severity = Severity.unknown
        decides = "The same report with inputs the tools can read (see why each could not run)."
    elif severity is Severity.unknown:
        decides = "; ".join(f"{run.tool}: {run.decides}" for run in runs if run.decides) or None
    return TriageReportResult(severity=severity, conclusion=_conclude(rows, runs, involved, apart),
                              next_steps=[NextStep.from_sop(b, done={r.tool for r in runs}) for b in involved[:3]] or
                              [NextStep(branch="triage", action="triage_plan with the user's words",
                                        why="No tool found a problem in these inputs.")],
                              coverage=coverage, decides=decides, notes=notes,
                              rows=rows, baseline=baseline, runs=runs, references=references[:12])


def _conclude(rows: list[ReportRow], runs: list[ToolRun], involved: list[str], apart: str | None) -> list[str]:
    """Three sentences at most: the worst problem of this job, the fix, and the caveat that changes the verdict
    (inputs of another run, tools that cannot tell, tools that could not run)."""
    failed = [r.tool for r in runs if r.severity is None]
    unsure = [r for r in runs if r.severity is Severity.unknown]
    caveats = []
    if apart:
        caveats.append(f"{apart}: their findings are listed apart")
    if unsure:
        decides = unsure[0].decides
        caveats.append(f"{', '.join(r.tool for r in unsure)} cannot tell"
                       + (f" (needed: {decides[:1].lower()}{decides[1:].rstrip('.')})" if decides else ""))
    if failed:
        caveats.append(f"{len(failed)} tool(s) could not run: {', '.join(failed)}")
    tail = ("Caveat: " + "; ".join(caveats) + ".") if caveats else ""
    problems = [r for r in rows if r.severity in (Severity.warn, Severity.crit) and r.other_run is None]
    if not problems:
        if len(failed) == len(runs):
            return [f"No tool could run ({', '.join(failed)}): nothing was looked at.", "Fix the inputs each row "
                    "names and run the report again."]
        not_clear = ", but that is not an all-clear" if unsure else ""
        opening = f"No problem found by {len(runs) - len(failed)} tool(s){not_clear}."
        return [opening, tail or "Give more inputs (logs, traces, flight-recorder dumps) for a deeper look."]
    first = problems[0]
    text = [f"{len(problems)} problem(s); worst: {first.symptom} ({first.source}): {first.root_cause.rstrip('.')}.",
            f"Fix first: {first.fix.rstrip('.')}; then follow sop://{involved[0]}." if involved
            else f"Fix first: {first.fix.rstrip('.')}."]
    if tail:
        text.append(tail)
    return text[:3]
