"""telemetry_history: what changed on which GPU over a job's window, from the cluster's Prometheus (dcgm-exporter
series), with a verdict per GPU.

The call first asks the server which metric names it holds and resolves them through tools/telemetry/names.py (so
the legacy, 4.9 and lowercase generations all work, and a mixed fleet too). Then, bounded:
1. one instant query per measure and statistic over the whole window (median, min, max, last, samples, last sample
   time, the OR of the clock-event reason bits, the XID codes seen, the counters' increase): one point per series;
2. range queries only for the GPUs a verdict may concern, at the step (series x points <= TELEMETRY_QUERY_POINTS a
   query), to find when the change began, to the step.

Verdicts: throttled (SM clock below the GPU's own busy level or its peers', with the reason bits), xid (a code seen
in the window, the gauge's changes; a GPU that then falls silent), held_idle (a held GPU at zero utilisation, graphics
engine activity on MIG, for TELEMETRY_HELD_IDLE_MIN_S while memory is held), below_peers (a GPU or node whose
utilisation sits below the selection's median at the same times), hardware_errors (ECC, row remap, PCIe replay and
NVLink counters rising: by how much and from which sample), step_change (tools/telemetry/step_change.py: each time
the job's step logs slowed, up to TELEMETRY_MAX_SLOWDOWNS, its recovery, and the GPU series that changed within
minutes of it). `unknown`, naming what would decide,
when the server has no matching series, or when step logs were given but cannot place the slowdown in time.

A Slurm job: scontrol gives its window and nodes; its series are those labelled hpc_job=<id> where the exporter sets
that label, else those of its nodes.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Literal

import anyio
from pydantic import BaseModel, Field

from tools.core.context import ToolContext
from tools.core.errors import BadInput, TriageError, Unavailable
from tools.core.limits import (
    MAX_PATH_CHARS,
    TELEMETRY_DEFAULT_STEP_S,
    TELEMETRY_DEFAULT_WINDOW_S,
    TELEMETRY_MAX_DETAIL_GPUS,
    TELEMETRY_MAX_EVENTS,
    TELEMETRY_MAX_FILTERS,
    TELEMETRY_MAX_POINTS_PER_SERIES,
    TELEMETRY_MAX_SLOWDOWNS,
    TELEMETRY_MAX_STEP_S,
    TELEMETRY_MAX_WINDOW_S,
    TELEMETRY_MIN_STEP_S,
    TELEMETRY_QUERY_POINTS,
)
from tools.core.models import (
    Coverage,
    InputModel,
    NameArg,
    NextStep,
    PathArg,
    Severity,
    Table,
    ToolResult,
    cell,
    worst,
)
from tools.core.proc import run_program
from tools.core.thresholds import (
    CRIT_THROTTLE,
    TELEMETRY_BELOW_PEERS_SHARE,
    TELEMETRY_CLOCK_DROP_SHARE,
    TELEMETRY_HELD_IDLE_MIN_S,
    TELEMETRY_IDLE_PCT,
    TELEMETRY_MIN_PEERS,
    TELEMETRY_MIN_RUN_SAMPLES,
    TELEMETRY_SILENT_MIN_S,
    TELEMETRY_SILENT_STEPS,
    TELEMETRY_STEP_BASELINE_S,
    TELEMETRY_STEP_CHANGE_WINDOW_S,
    TELEMETRY_STEP_RISE_MIN_LINES,
    TELEMETRY_STEP_RISE_SHARE,
    UNDER_LOAD_PCT,
)
from tools.core.urls import checked_url
from tools.core.xid import xid_meaning
from tools.telemetry.client import ENV_URL, PromClient
from tools.telemetry.names import CONCEPTS, LABELS, REASON_BITS, RELEVANT_REASONS, label_of
from tools.telemetry.step_change import (
    STEP_SERIES,
    JobSlowdown,
    JobSteps,
    SeriesChange,
    Slowdown,
    StepChange,
    mark_job_wide,
    read_job_steps,
    series_change,
    slowdowns,
)

__all__ = ["TelemetryHistoryInput", "TelemetryHistoryResult", "telemetry_history"]

Kind = Literal["throttled", "xid", "held_idle", "below_peers", "hardware_errors", "step_change"]
Verdict = Literal["throttled", "xid", "held_idle", "below_peers", "hardware_errors", "step_change", "none", "unknown"]
_BRANCH: dict[str, str] = {"throttled": "straggler", "xid": "gpu_hardware", "held_idle": "gpu_utilization_low",
                           "below_peers": "straggler", "hardware_errors": "gpu_hardware", "step_change": "straggler"}
_ORDER: tuple[Kind, ...] = ("xid", "hardware_errors", "throttled", "step_change", "below_peers", "held_idle")
_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_FILTER = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
_NodeName = Annotated[str, Field(min_length=1, max_length=128, pattern=_FILTER)]
_GpuName = Annotated[str, Field(min_length=1, max_length=64, pattern=_FILTER)]
_HARDWARE_CRIT = {"ecc_dbe", "remapped_uncorrectable", "row_remap_failure"}
_UTC_OFFSET = re.compile(r"^(?:Z|UTC|[+-]\d\d:?\d\d)$")


class TelemetryHistoryInput(InputModel):
    url: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS,
                            description=f"The Prometheus-compatible API root, e.g. http://127.0.0.1:9090 (a prefix "
                            f"such as /prometheus is kept): loopback, or a host in allow_host. Default: ${ENV_URL}.")
    allow_host: list[NameArg] = Field(default_factory=list, max_length=16,
                                      description="Hosts besides loopback that may be contacted (as written in url).")
    start: str | None = Field(default=None, max_length=40, description="Window start: RFC3339 "
                              "(2026-01-10T03:00:00Z), unix seconds, or relative to now (-2h, -30m). Default: end "
                              "minus one hour, or the Slurm job's start.")
    end: str | None = Field(default=None, max_length=40, description="Window end, as start; default now (or the "
                            "job's end).")
    job: str | None = Field(default=None, pattern=r"^[0-9]{1,12}(_[0-9]{1,8})?$", max_length=21,
                            description="A Slurm job id: its series by dcgm-exporter's hpc_job label, and "
                            "(where scontrol answers) its window and nodes.")
    nodes: list[_NodeName] = Field(
        default_factory=list, max_length=TELEMETRY_MAX_FILTERS,
        description="Only these nodes (the exporter's Hostname/hostname label; a short name matches its FQDN). "
        "Their GPUs count as the job's.")
    gpus: list[_GpuName] = Field(
        default_factory=list, max_length=TELEMETRY_MAX_FILTERS,
        description="Only these GPUs: indices (0, 1) or UUIDs (GPU-...).")
    step_s: float | None = Field(default=None, ge=TELEMETRY_MIN_STEP_S, le=TELEMETRY_MAX_STEP_S,
                                 description=f"Resolution of the range queries, seconds. Default "
                                 f"{TELEMETRY_DEFAULT_STEP_S:g} (the exporter's interval), coarser on long windows.")
    step_logs: list[PathArg] = Field(default_factory=list, max_length=64, description="The job's step-time logs "
                                     "(paths or globs inside the roots, as find_stragglers reads them) with a "
                                     "timestamp on each line: when the job slowed, and which GPU series changed "
                                     "with it (step_change). Without start/end or job they set the window.")
    step_regex: str | None = Field(default=None, max_length=512, description="Your own RE2 regex for the step "
                                   "lines, with named groups step_ms or step_s (and optionally step, rank).")
    step_log_utc_offset: str | None = Field(default=None, max_length=6, pattern=_UTC_OFFSET.pattern,
                                            description="The zone of step-log times written without one (Python "
                                            "logging's default), e.g. +08:00 or Z. Default: this machine's.")

    cli_positional = "url"


class Stat(BaseModel):
    median: float | None = None
    min: float | None = None
    max: float | None = None
    last: float | None = None


class GpuHistory(BaseModel):
    node: str
    gpu: str = Field(description="The GPU index (dcgm-exporter's gpu label).")
    uuid: str
    mig: str | None = Field(default=None, description="MIG instance as PROFILE/GPU_I_ID, e.g. 1g.10gb/7.")
    model: str = ""
    held_by: list[str] = Field(default_factory=list, description="hpc_job=<id> and pod=<ns/name> labels seen.")
    sm_clock_mhz: Stat = Field(default_factory=Stat)
    activity_pct: Stat = Field(default_factory=Stat, description="GPU utilisation, or graphics engine activity on "
                               "MIG instances.")
    temperature_max_c: float | None = None
    power_median_w: float | None = None
    memory_used_max: float | None = Field(default=None, description="MiB (legacy) or % (4.9's FB_USED_PERCENT).")
    samples: int = 0
    last_sample: str | None = None
    changed_at: str | None = Field(default=None, description="When the first verdict on it began.")


class TelemetryFinding(BaseModel):
    kind: Kind
    severity: Severity
    node: str
    gpu: str = Field(description="GPU index, or several ('0-3') for a node-level finding.")
    uuid: str = ""
    mig: str | None = None
    began: str | None = Field(description="RFC3339, to the step; None when the window holds no start (a counter).")
    began_unix: float | None = None
    evidence: str
    reasons: list[str] = Field(default_factory=list, description="Clock-event reasons seen (throttled).")
    xid_code: int | None = None
    metric: str = Field(default="", description="hardware_errors: the counter or flag that rose.")
    rise: float | None = Field(default=None, description="hardware_errors: how much the counter rose in the window "
                               "(1 for a flag newly set).")
    changes: list[SeriesChange] = Field(default_factory=list, description="step_change: this GPU's series that "
                                        "changed with the job's step time, and the job-wide ones.")
    slowdown: int | None = Field(default=None, description="step_change: which of step_change.slowdowns this "
                                 "finding belongs to (0: the first).")
    meaning: str = ""
    sop_branch: str


class TimelineEvent(BaseModel):
    time: str
    time_unix: float
    node: str
    gpu: str
    event: str


class ResolvedName(BaseModel):
    measure: str
    metric: str
    unit: str
    generation: str


class TelemetryHistoryResult(ToolResult):
    url: str
    server: str | None = Field(description="The server's version (/api/v1/status/buildinfo), when it says.")
    window_start: str
    window_end: str
    step_s: float
    verdict: Verdict
    findings: list[TelemetryFinding]
    timeline: list[TimelineEvent]
    gpus: list[GpuHistory]
    metrics: list[ResolvedName] = Field(description="The names this server holds, per measure.")
    host_label: str | None
    job: str | None = Field(default=None, description="The Slurm job asked about.")
    nodes: list[str] = Field(default_factory=list, description="The nodes the selection was narrowed to (given, or "
                             "the job's NodeList from scontrol).")
    window_source: str = Field(description="Where the window came from: start/end, the Slurm job (scontrol), the "
                               "step logs' times, or the default last hour.")
    step_change: StepChange | None = Field(default=None, description="When the job slowed, from step_logs; None "
                                           "when none were given.")
    queries: int
    points_read: int

    narrow_hint = "pass nodes, gpus or job to narrow the GPUs shown"

    def tables(self) -> list[Table]:
        def stat(s: Stat) -> str:
            return f"{cell(s.median)} / {cell(s.min)} / {cell(s.last)}" if s.median is not None else "-"

        return [
            Table("Findings", ["kind", "severity", "node", "GPU", "began", "evidence"],
                  [[f.kind, f.severity.value, f.node, f.gpu + (f" ({f.mig})" if f.mig else ""), f.began or "-",
                    f.evidence] for f in self.findings], "findings"),
            Table("Timeline", ["time", "node", "GPU", "event"],
                  [[e.time, e.node, e.gpu, e.event] for e in self.timeline], "timeline"),
            Table("GPUs", ["node", "GPU", "held by", "SM clock MHz (median / min / last)",
                           "activity % (median / min / last)", "temp max C", "power median W", "samples",
                           "changed at"],
                  [[g.node, g.gpu + (f" ({g.mig})" if g.mig else ""), ", ".join(g.held_by) or "-",
                    stat(g.sm_clock_mhz), stat(g.activity_pct), cell(g.temperature_max_c), cell(g.power_median_w),
                    str(g.samples), g.changed_at or "-"] for g in self.gpus], "gpus"),
            Table("Metric names", ["measure", "metric", "unit", "generation"],
                  [[m.measure, m.metric, m.unit, m.generation] for m in self.metrics]),
            *self._slowdown_tables(),
        ]

    def _slowdown_tables(self) -> list[Table]:
        step = self.step_change
        if step is None or not step.slowdowns:
            return []
        unit = step.unit
        rows = [[str(i + 1), s.began, "-" if s.step is None else str(s.step),
                 f"{cell(s.before)} -> {cell(s.after)} {unit}", f"+{100 * s.share:.0f} %" + (" (on top)" if s.on_top
                                                                                              else ""),
                 s.recovered or "-", ", ".join(s.gpus) or "-"] for i, s in enumerate(step.slowdowns)]
        if step.more_slowdowns:
            rows.append(["...", f"{step.more_slowdowns} more", "", "", "", "", "GPUs not read"])
        return [Table("Step-time slowdowns", ["#", "began", "step", "step time", "slower by", "recovered",
                                              "GPUs that changed"], rows)]


# ------------------------------------------------------------------------------------------------ window


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(raw: str, now: float, what: str) -> float:
    text = raw.strip()
    if text == "now":
        return now
    if match := _RELATIVE.match(text):
        return now - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise BadInput(f"{what}={raw!r} is not a time.", "Use RFC3339 (2026-01-10T03:00:00Z), unix seconds or "
                       "a relative time (-2h, -30m).") from exc
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


@dataclass
class _Window:
    start: float
    end: float
    step: float
    nodes: list[str]
    notes: list[str]
    source: str
    coverage: list[Coverage] = field(default_factory=list)
    job_nodes: bool = False  # the nodes are the Slurm job's, from scontrol


@dataclass
class _SlurmJob:
    start: float | None = None
    end: float | None = None  # None while it runs with no end known
    nodes: list[str] = field(default_factory=list)
    note: str = ""
    coverage: Coverage | None = None


async def _slurm_job(job: str, ctx: ToolContext) -> _SlurmJob:
    """The job's start, end and nodes from `scontrol show job`, or a note saying why not."""
    what = f"scontrol show job {job}"
    try:
        shown = await run_program("scontrol", ["show", "job", "-o", job], timeout_s=min(10.0, ctx.remaining_s()))
    except (Unavailable, TriageError) as exc:
        note = f"scontrol could not give job {job}'s window ({exc.message}); using the hpc_job label."
        return _SlurmJob(note=note, coverage=Coverage.partial(what, note))
    text = shown.stdout.decode("utf-8", "replace")
    fields = dict(re.findall(r"(\w+)=(\S+)", text))
    if shown.returncode != 0 or "StartTime" not in fields:
        note = f"scontrol does not know job {job}; using the hpc_job label only."
        return _SlurmJob(note=note, coverage=Coverage.partial(what, note))

    def local(value: str) -> float | None:
        try:
            return datetime.fromisoformat(value).astimezone().timestamp()  # Slurm writes local time, no zone
        except ValueError:
            return None

    nodes: list[str] = []
    node_list = fields.get("NodeList", "")
    if node_list and node_list != "(null)":
        expanded = await run_program("scontrol", ["show", "hostnames", node_list],
                                     timeout_s=min(10.0, ctx.remaining_s()))
        nodes = expanded.stdout.decode("utf-8", "replace").split()[:TELEMETRY_MAX_FILTERS]
    start, end = local(fields["StartTime"]), local(fields.get("EndTime", ""))
    detail = (f"JobState={fields.get('JobState', '?')} StartTime={fields['StartTime']} "
              f"EndTime={fields.get('EndTime', '?')} NodeList={node_list or '?'} ({len(nodes)} nodes)")
    return _SlurmJob(start, end, nodes, coverage=Coverage.read(what, detail))


async def _window(params: TelemetryHistoryInput, ctx: ToolContext, logs: JobSteps | None) -> _Window:
    now = time.time()
    notes: list[str] = []
    coverage: list[Coverage] = []
    slurm = _SlurmJob()
    nodes = list(params.nodes)
    if params.job is not None and (params.start is None or not nodes):
        slurm = await _slurm_job(params.job, ctx)
        if slurm.note:
            notes.append(slurm.note)
        if slurm.coverage is not None:
            coverage.append(slurm.coverage)
    job_nodes = not nodes and bool(slurm.nodes)
    nodes = nodes or slurm.nodes
    # The step logs' own times bound the window when nothing else does, with room for the change's minutes.
    margin = TELEMETRY_STEP_CHANGE_WINDOW_S + TELEMETRY_STEP_BASELINE_S
    span_of_logs = logs.span if logs is not None and params.start is None and slurm.start is None else None
    if params.end:
        end = _parse_time(params.end, now, "end")
    elif slurm.start is not None:
        end = min(slurm.end or now, now)
    elif span_of_logs is not None and params.start is None:
        end = min(span_of_logs[1] + TELEMETRY_STEP_CHANGE_WINDOW_S, now)
    else:
        end = now
    if params.start:
        start, source = _parse_time(params.start, now, "start"), "start/end"
    elif slurm.start is not None:
        start, source = slurm.start, f"Slurm job {params.job} (scontrol)"
    elif span_of_logs is not None:
        start, source = span_of_logs[0] - margin, "the step logs' times"
    else:
        start, source = end - TELEMETRY_DEFAULT_WINDOW_S, "the last hour (default)"
    if end <= start:
        raise BadInput(f"the window ends ({_iso(end)}) before it starts ({_iso(start)}).", "Check start and end.")
    if end - start > TELEMETRY_MAX_WINDOW_S:
        raise BadInput(f"the window is {(end - start) / 86400:.1f} days; at most "
                       f"{TELEMETRY_MAX_WINDOW_S / 86400:g} are read.", "Narrow start and end to the job's run.")
    span = end - start
    step = params.step_s or max(TELEMETRY_DEFAULT_STEP_S, math.ceil(span / TELEMETRY_MAX_POINTS_PER_SERIES))
    if span / step > 11_000:
        step = math.ceil(span / 11_000)
        notes.append(f"step_s raised to {step:g} s: Prometheus answers at most 11,000 points per series.")
    # Aligned to the step: the same window gives the same points (and Mimir caches only aligned queries).
    start = math.floor(start / step) * step
    return _Window(start=start, end=end, step=float(step), nodes=nodes, notes=notes, source=source,
                   coverage=coverage, job_nodes=job_nodes)


# ------------------------------------------------------------------------------------------------ selection


def _regex(values: Iterable[str]) -> str:
    """A PromQL string literal's regex alternation of `values`, matched literally."""
    return "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\\\1", v) for v in values)


@dataclass(frozen=True)
class _Key:
    node: str
    gpu: str  # index, or the UUID when the series has no gpu label
    mig: str  # GPU_I_ID, '' on a whole GPU


def _key(labels: dict[str, str]) -> _Key:
    return _Key(label_of(labels, "host") or "?", label_of(labels, "gpu") or label_of(labels, "uuid") or "?",
                label_of(labels, "mig"))


@dataclass
class _Row:
    key: _Key
    uuid: str = ""
    model: str = ""
    mig_profile: str = ""
    held_by: set[str] = field(default_factory=set)
    stats: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    samples: int = 0
    last_sample: float | None = None
    reasons_mask: int = 0
    changed_at: float | None = None

    def get(self, concept: str, stat: str) -> float | None:
        return self.stats.get(concept, {}).get(stat)

    def activity(self) -> str:
        return "gr_engine_active" if self.key.mig or "gpu_util" not in self.stats else "gpu_util"


@dataclass
class _Reader:
    client: PromClient
    window: _Window
    selector: str
    names: dict[str, list[tuple[str, float]]]  # concept -> [(metric, scale)] present on the server
    rows: dict[_Key, _Row] = field(default_factory=dict)

    @property
    def range_s(self) -> str:
        return f"{max(1, round(self.window.end - self.window.start))}s"

    def _select(self, name: str, extra: str = "") -> str:
        inner = ",".join(p for p in (self.selector, extra) if p)
        return f"{name}{{{inner}}}" if inner else name

    def row(self, labels: dict[str, str]) -> _Row:
        key = _key(labels)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = _Row(key)
        row.uuid = row.uuid or label_of(labels, "uuid")
        row.model = row.model or label_of(labels, "model")
        row.mig_profile = row.mig_profile or label_of(labels, "mig_profile")
        if job := label_of(labels, "job"):
            row.held_by.add(f"hpc_job={job}")
        if pod := label_of(labels, "pod"):
            namespace = label_of(labels, "namespace")
            row.held_by.add(f"pod={namespace + '/' if namespace else ''}{pod}")
        return row

    def instant(self, concept: str, function: str, stat: str) -> None:
        """One statistic of one measure over the window, for every selected series, into the rows."""
        for name, scale in self.names.get(concept, []):
            query = (f"quantile_over_time(0.5, {self._select(name)}[{self.range_s}])" if function == "median"
                     else f"{function}_over_time({self._select(name)}[{self.range_s}])")
            for series in self.client.instant(query, self.window.end):
                if series.points and not math.isnan(series.points[0][1]):
                    self.row(series.labels).stats[concept][stat] = series.points[0][1] * scale

    def detail(self, concept: str, keys: list[_Key], names: list[str] | None = None,
               span: tuple[float, float] | None = None) -> dict[_Key, list[tuple[float, float]]]:
        """The points of one measure (of its metric `names` only, when given) for the GPUs `keys`, at the step, over
        the window or `span` within it, in queries of at most TELEMETRY_QUERY_POINTS points (series x points)
        each."""
        out: dict[_Key, list[tuple[float, float]]] = {}
        window = self.window
        start, end = span or (window.start, window.end)
        points_each = int((end - start) / window.step) + 1
        per_query = max(1, TELEMETRY_QUERY_POINTS // points_each)
        step = window.step if points_each <= TELEMETRY_QUERY_POINTS else math.ceil(
            (end - start) / (TELEMETRY_QUERY_POINTS - 1))
        by_uuid: dict[str, list[_Key]] = defaultdict(list)
        for key in keys:
            by_uuid[self.rows[key].uuid or key.gpu].append(key)
        # A query selects whole GPUs by UUID (its MIG instances and job copies come with it): chunked by the series
        # each UUID brings, so that what is asked stays within the budget.
        chunks: list[list[str]] = [[]]
        count = 0
        for uuid, members in by_uuid.items():
            if chunks[-1] and count + len(members) > per_query:
                chunks.append([])
                count = 0
            chunks[-1].append(uuid)
            count += len(members)
        wanted = set(keys)
        for name, scale in self.names.get(concept, []):
            if names is not None and name not in names:
                continue
            for chunk in chunks:
                if not chunk:
                    continue
                uuid_label = self._uuid_label()
                query = self._select(name, f'{uuid_label}=~"{_regex(chunk)}"')
                for series in self.client.range(query, start, end, step):
                    key = _key(series.labels)
                    if key in wanted:
                        merged = out.setdefault(key, [])
                        merged.extend((t, v * scale) for t, v in series.points if not math.isnan(v))
        for points in out.values():
            points.sort()
        return out

    def _uuid_label(self) -> str:
        return next((name for name in LABELS["uuid"] if any(r.uuid for r in self.rows.values())), "UUID")


# ------------------------------------------------------------------------------------------------ verdicts


def _runs(points: list[tuple[float, float]], low: list[bool], step: float) -> list[tuple[float, float, int]]:
    """(first time, last time, samples) of each run of consecutive flagged points (a gap of more than two steps
    ends a run)."""
    runs: list[tuple[float, float, int]] = []
    begin: float | None = None
    last = 0.0
    n = 0
    for (t, _), flag in zip(points, low, strict=True):
        if flag and begin is not None and t - last <= 2 * step:
            last, n = t, n + 1
            continue
        if begin is not None:
            runs.append((begin, last, n))
            begin = None
        if flag:
            begin, last, n = t, t, 1
    if begin is not None:
        runs.append((begin, last, n))
    return runs


def _first_run(points: list[tuple[float, float]], low: list[bool], step: float, min_samples: int) -> float | None:
    return next((b for b, _, n in _runs(points, low, step) if n >= min_samples), None)


def _at(points: list[tuple[float, float]], t: float) -> float | None:
    """The value at time t (the last point at or before it)."""
    value = None
    for pt, v in points:
        if pt > t:
            break
        value = v
    return value


def _median(values: Iterable[float]) -> float | None:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else None


def _gpu_label(row: _Row) -> tuple[str, str | None]:
    mig = f"{row.mig_profile or 'mig'}/{row.key.mig}" if row.key.mig else None
    return row.key.gpu, mig


def _finding(kind: Kind, severity: Severity, row: _Row, began: float | None, evidence: str,
             **extra: object) -> TelemetryFinding:
    gpu, mig = _gpu_label(row)
    return TelemetryFinding(kind=kind, severity=severity, node=row.key.node, gpu=gpu, uuid=row.uuid, mig=mig,
                            began=None if began is None else _iso(began), began_unix=began, evidence=evidence,
                            sop_branch=_BRANCH[kind], **extra)  # type: ignore[arg-type]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


def _reason_names(mask: int) -> list[str]:
    return [REASON_BITS[bit] for bit in RELEVANT_REASONS if mask & bit]


def _busy(mask: float | None, util: float | None) -> bool:
    """Working at that moment: not flagged idle by the reasons, and utilisation (when known) at UNDER_LOAD_PCT."""
    if mask is not None and int(mask) & 0x1:
        return False
    return util is None or util >= UNDER_LOAD_PCT


def _throttled(reader: _Reader, busy_rows: list[_Row]) -> list[TelemetryFinding]:
    rows = list(reader.rows.values())
    peer_clock = _median(r.get("sm_clock", "median") or math.nan for r in busy_rows)
    candidates = []
    for row in rows:
        clock_max, clock_min = row.get("sm_clock", "max"), row.get("sm_clock", "min")
        reference = max(x for x in (clock_max, peer_clock, 0.0) if x is not None)
        dropped = clock_min is not None and clock_min < (1 - TELEMETRY_CLOCK_DROP_SHARE) * reference
        busy_ever = (row.get(row.activity(), "max") or 0) >= UNDER_LOAD_PCT
        if row.reasons_mask or (dropped and busy_ever):
            candidates.append(row)
    candidates.sort(key=lambda r: (-bool(r.reasons_mask), r.get("sm_clock", "min") or 0))
    candidates = candidates[:TELEMETRY_MAX_DETAIL_GPUS]
    if not candidates:
        return []
    keys = [r.key for r in candidates]
    detail = {c: reader.detail(c, keys) for c in ("sm_clock", "clock_reasons", "gpu_temp", "power")}
    activity = {**reader.detail("gpu_util", keys), **reader.detail("gr_engine_active", [k for k in keys if k.mig])}
    step = reader.window.step
    found = []
    for row in candidates:
        clocks = detail["sm_clock"].get(row.key, [])
        reasons = detail["clock_reasons"].get(row.key, [])
        util = activity.get(row.key, [])

        busy_at = {t: _busy(_at(reasons, t), _at(util, t)) for t, _ in clocks}
        busy_clocks = sorted(v for t, v in clocks if busy_at[t])
        own = busy_clocks[int(0.9 * (len(busy_clocks) - 1))] if busy_clocks else None
        reference = max(x for x in (own, peer_clock, 0.0) if x is not None)
        low = [busy_at[t] and v < (1 - TELEMETRY_CLOCK_DROP_SHARE) * reference for t, v in clocks]
        clock_began = _first_run(clocks, low, step, TELEMETRY_MIN_RUN_SAMPLES) if reference else None
        flagged = [int(v) & sum(RELEVANT_REASONS) != 0 for _, v in reasons]
        reason_began = _first_run(reasons, flagged, step, TELEMETRY_MIN_RUN_SAMPLES)
        mask = 0
        for _, v in reasons:
            mask |= int(v) & sum(RELEVANT_REASONS)
        began = min((t for t in (clock_began, reason_began) if t is not None), default=None)
        if began is None:
            continue
        names = _reason_names(mask) if reason_began is not None else []
        before = _median(v for t, v in clocks if t < began)
        after = _median(v for t, v in clocks if t >= began)
        parts = [f"SM clock {_num(before)} -> {_num(after)} MHz (median before / after) from {_iso(began)}",
                 f"its usual busy level {_num(own)} MHz, its peers' median {_num(peer_clock)} MHz"]
        parts.append(f"reasons {', '.join(names)}" if names else
                     "no clock-event reason set" if reasons else
                     "reasons not collected (DCGM_FI_DEV_CLOCKS_EVENT_REASONS is not in the default CSV)")
        for concept, unit in (("gpu_temp", "C"), ("power", "W")):
            points = detail[concept].get(row.key, [])
            b, a = _median(v for t, v in points if t < began), _median(v for t, v in points if t >= began)
            if a is not None:
                parts.append(f"{CONCEPTS[concept].title} {_num(b)} -> {_num(a)} {unit}")
        severity = Severity.crit if CRIT_THROTTLE & set(names) else Severity.warn
        found.append(_finding("throttled", severity, row, began, "; ".join(parts), reasons=names,
                              meaning="The GPU runs slower than it can: every synchronous step waits for it."))
    return found


def _xid(reader: _Reader, codes: dict[_Key, set[int]], fleet_last: float | None) -> list[TelemetryFinding]:
    keys = list(codes)[:TELEMETRY_MAX_DETAIL_GPUS]
    if not keys:
        return []
    points = _xid_points(reader, keys)
    step = reader.window.step
    found = []
    for key in keys:
        row = reader.rows[key]
        for code in sorted(codes[key]):
            series = points.get((key, code), [])
            began = series[0][0] if series else None
            severity, meaning = xid_meaning(code)
            parts = [f"XID {code} ({meaning})" + (f" first seen {_iso(began)}" if began is not None else "")]
            if began is not None and began <= reader.window.start + step:
                parts.append("already set when the window began: the gauge keeps the last code, so it may "
                             "predate the window")
            silent = _silent_since(row, fleet_last, step)
            if silent is not None:
                parts.append(f"then silent: no sample of this GPU after {_iso(silent)} while the others go on "
                             "(fallen off the bus, or its exporter stopped)")
            found.append(_finding("xid", severity, row, began, "; ".join(parts), xid_code=code, meaning=meaning))
    return found


def _xid_points(reader: _Reader, keys: list[_Key]) -> dict[tuple[_Key, int], list[tuple[float, float]]]:
    """Per GPU and code, the points where the gauge held that code (a new code is a new series: err_code)."""
    out: dict[tuple[_Key, int], list[tuple[float, float]]] = {}
    uuid_label = reader._uuid_label()
    uuids = sorted({reader.rows[k].uuid or k.gpu for k in keys})
    for name, _ in reader.names.get("xid", []):
        matcher = f'{uuid_label}=~"{_regex(uuids)}"'
        query = f"{reader._select(name, matcher)} > 0"
        for series in reader.client.range(query, reader.window.start, reader.window.end, reader.window.step):
            key = _key(series.labels)
            for t, v in series.points:
                out.setdefault((key, int(v)), []).append((t, v))
    return {k: sorted(v) for k, v in out.items()}


def _silent_since(row: _Row, fleet_last: float | None, step: float) -> float | None:
    if row.last_sample is None or fleet_last is None:
        return None
    gap = max(TELEMETRY_SILENT_STEPS * step, TELEMETRY_SILENT_MIN_S)
    return row.last_sample if fleet_last - row.last_sample >= gap else None


def _held(row: _Row, nodes: list[str]) -> bool:
    return bool(row.held_by) or any(row.key.node == n or row.key.node.startswith(n + ".") for n in nodes)


def _held_idle(reader: _Reader) -> list[TelemetryFinding]:
    candidates = [r for r in reader.rows.values()
                  if _held(r, reader.window.nodes) and _lowest(r) <= TELEMETRY_IDLE_PCT]
    candidates = candidates[:TELEMETRY_MAX_DETAIL_GPUS]
    if not candidates:
        return []
    keys = [r.key for r in candidates]
    util = reader.detail("gpu_util", [k for k in keys if not k.mig])
    engine = reader.detail("gr_engine_active", keys)
    memory = reader.detail("fb_used", keys)
    step = reader.window.step
    found = []
    for row in candidates:
        points = (engine if row.activity() == "gr_engine_active" else util).get(row.key, [])
        runs = _runs(points, [v <= TELEMETRY_IDLE_PCT for _, v in points], step)
        if not runs:
            continue
        begin, last, _ = max(runs, key=lambda r: r[1] - r[0])
        seconds = last - begin + step
        if seconds < TELEMETRY_HELD_IDLE_MIN_S:
            continue
        held_memory = [v for t, v in memory.get(row.key, []) if begin <= t <= last]
        if held_memory and max(held_memory) <= 0:
            continue  # allocated but empty: nothing of the job is on it
        measure = CONCEPTS[row.activity()].title
        unit = "%" if "DCGM_FI_DEV_FB_USED_PERCENT" in _names(reader, "fb_used") else "MiB"
        memory_text = f"holding {max(held_memory):.0f} {unit}" if held_memory else "memory use not exported for it"
        evidence = (f"{measure} <= {TELEMETRY_IDLE_PCT:g} % from {_iso(begin)} for {seconds / 60:.0f} min "
                    f"(>= {TELEMETRY_HELD_IDLE_MIN_S / 60:g} min), {memory_text}; held by "
                    f"{', '.join(sorted(row.held_by)) or 'the job (on its node list)'}")
        found.append(_finding("held_idle", Severity.warn, row, begin, evidence,
                              meaning="The job holds a GPU it does not use: a stuck rank, a wrong device "
                              "mapping, or an allocation larger than the work."))
    return found


def _lowest(row: _Row) -> float:
    value = row.get(row.activity(), "min")
    return math.inf if value is None else value


def _names(reader: _Reader, concept: str) -> list[str]:
    return [name for name, _ in reader.names.get(concept, [])]


def _below_peers(reader: _Reader, exclude: set[_Key]) -> tuple[list[TelemetryFinding], list[str]]:
    peers = [r for r in reader.rows.values() if not r.key.mig and r.key not in exclude
             and r.get("gpu_util", "median") is not None]
    if len(peers) < TELEMETRY_MIN_PEERS:
        return [], ([f"below_peers needs >= {TELEMETRY_MIN_PEERS} GPUs with utilisation to compare; "
                     f"{len(peers)} here."] if peers else [])
    fleet = _median(r.get("gpu_util", "median") or math.nan for r in peers) or 0.0
    bar = (1 - TELEMETRY_BELOW_PEERS_SHARE) * fleet
    candidates = sorted((r for r in peers if (r.get("gpu_util", "min") or 0) < bar),
                        key=lambda r: r.get("gpu_util", "median") or 0)[:TELEMETRY_MAX_DETAIL_GPUS]
    if not candidates or fleet < UNDER_LOAD_PCT:
        return [], []
    fleet_points = _fleet_median(reader)
    util = reader.detail("gpu_util", [r.key for r in candidates])
    step = reader.window.step
    below: list[tuple[_Row, float, float, float]] = []
    for row in candidates:
        points = util.get(row.key, [])
        low = [v < (1 - TELEMETRY_BELOW_PEERS_SHARE) * (_at(fleet_points, t) or fleet) for t, v in points]
        for begin, last, n in _runs(points, low, step):
            if last - begin + step >= TELEMETRY_HELD_IDLE_MIN_S and n >= TELEMETRY_MIN_RUN_SAMPLES:
                mine = _median(v for t, v in points if begin <= t <= last) or 0.0
                theirs = _median(v for t, v in fleet_points if begin <= t <= last) or fleet
                below.append((row, begin, mine, theirs))
                break
    by_node: dict[str, list[tuple[_Row, float, float, float]]] = defaultdict(list)
    for item in below:
        by_node[item[0].key.node].append(item)
    gpus_of = defaultdict(list)
    for r in peers:
        gpus_of[r.key.node].append(r)
    found = []
    meaning = "In synchronous training the whole job runs at the pace of its slowest GPU."
    for node, items in by_node.items():
        power = _median(r.get("power", "median") or math.nan for r, *_ in items)
        fleet_power = _median(r.get("power", "median") or math.nan for r in peers)
        power_text = f"; power median {_num(power)} W vs {_num(fleet_power)} W" if power is not None else ""
        if len(items) >= max(2, (len(gpus_of[node]) + 1) // 2):
            began = min(b for _, b, _, _ in items)
            gpus = sorted((r.key.gpu for r, *_ in items), key=lambda g: (len(g), g))
            mine = _median(m for _, _, m, _ in items) or 0.0
            theirs = _median(t for *_, t in items) or fleet
            row = items[0][0]
            share = 100 - 100 * TELEMETRY_BELOW_PEERS_SHARE
            evidence = (f"node {node}: {len(items)} of {len(gpus_of[node])} GPUs at {mine:.0f} % utilisation from "
                        f"{_iso(began)} vs the others' median {theirs:.0f} % (< {share:.0f} % of it){power_text}")
            finding = _finding("below_peers", Severity.warn, row, began, evidence, meaning=meaning)
            found.append(finding.model_copy(update={"gpu": ",".join(gpus), "uuid": "", "mig": None}))
            continue
        for row, begin, mine, theirs in items:
            evidence = (f"utilisation {mine:.0f} % from {_iso(begin)} vs the others' median {theirs:.0f} %"
                        f"{power_text}")
            found.append(_finding("below_peers", Severity.warn, row, begin, evidence, meaning=meaning))
    return found, []


def _fleet_median(reader: _Reader) -> list[tuple[float, float]]:
    """The selection's median utilisation at each step: one series, computed by the server."""
    names = reader.names.get("gpu_util", [])
    if not names:
        return []
    name, scale = names[0]
    query = f"quantile(0.5, {reader._select(name)})"
    out = [(t, v * scale) for s in reader.client.range(query, reader.window.start, reader.window.end,
                                                       reader.window.step) for t, v in s.points]
    return sorted(out)


def _hardware(reader: _Reader) -> list[TelemetryFinding]:
    """Counters that rose and flags set in the window: the GPUs come from one instant query per metric, then their
    points say by how much and from when (the first sample above the one before it, to the step)."""
    found = []
    for concept in ("ecc_dbe", "remapped_uncorrectable", "row_remap_failure", "pcie_replay", "nvlink_crc"):
        spec = CONCEPTS[concept]
        for name, _ in reader.names.get(concept, []):
            function = "increase" if spec.counter else "max_over_time"
            query = f"{function}({reader._select(name)}[{reader.range_s}]) > 0"
            rows = [reader.row(s.labels) for s in reader.client.instant(query, reader.window.end) if s.points]
            rows = list({r.key: r for r in rows}.values())[:TELEMETRY_MAX_DETAIL_GPUS]
            if not rows:
                continue
            points = reader.detail(concept, [r.key for r in rows], names=[name])
            for row in rows:
                rise, began, already = _rise(points.get(row.key, []), counter=spec.counter)
                if rise <= 0 and not already:
                    continue  # increase() extrapolates: a counter that did not move between samples did not rise
                if spec.counter:
                    what = f"rose by {rise:.0f}" + (f" from {_iso(began)}" if began is not None else "")
                else:
                    what = (f"set from {_iso(began)}" if began is not None else
                            "set (already when the window began)")
                severity = Severity.crit if concept in _HARDWARE_CRIT else Severity.warn
                found.append(_finding("hardware_errors", severity, row, began, f"{spec.title} ({name}) {what}",
                                      metric=name, rise=rise if spec.counter else 1.0 if began is not None else 0.0,
                                      meaning="The GPU or its link reports hardware errors: drain and check it "
                                      "before tuning anything."))
    return found


def _rise(points: list[tuple[float, float]], *, counter: bool) -> tuple[float, float | None, bool]:
    """(how much a counter rose: the sum of its increases, a reset not counted; the time of the first sample of
    a rise, or of a flag's setting; whether a flag was already set at the first sample)."""
    if not points:
        return 0.0, None, False
    if not counter:
        if points[0][1] > 0:
            return 0.0, None, True
        began = next((t for t, v in points if v > 0), None)
        return (1.0 if began is not None else 0.0), began, False
    rise = 0.0
    began = None
    for (_, before), (t, value) in zip(points, points[1:], strict=False):
        if value > before:
            rise += value - before
            began = t if began is None else began
    return rise, began, False


def _step_change(reader: _Reader, logs: JobSteps) -> tuple[list[TelemetryFinding], StepChange]:
    """When the job slowed (its step logs: every sustained rise, at most TELEMETRY_MAX_SLOWDOWNS) and, for each,
    which GPU series changed within TELEMETRY_STEP_CHANGE_WINDOW_S of it: every selected GPU's series over the
    minutes around that moment, against their level before. The top-level fields of the result are the first
    slowdown's."""
    window = reader.window
    base = StepChange(status="unknown", ranks=logs.ranks, lines=int(logs.times.size), unit=logs.unit,
                      unstamped=logs.unstamped)
    if logs.times.size == 0:
        return [], base.model_copy(update={
            "evidence": "no step line with a readable time"
            + (f" ({logs.unstamped} step lines without one)" if logs.unstamped else ""),
            "decides": "The job's step logs with a time on each line (e.g. Python logging's %(asctime)s; glog and "
            "syslog times with start/end for their year), or a step_regex for their format."})
    found_all = slowdowns(logs, TELEMETRY_MAX_SLOWDOWNS + 1)
    first, last = _iso(float(logs.times[0])), _iso(float(logs.times[-1]))
    if not found_all:
        return [], base.model_copy(update={"status": "steady", "evidence": (
            f"no sustained step-time rise (>= {100 * TELEMETRY_STEP_RISE_SHARE:.0f} % over the steps before, for "
            f"{TELEMETRY_STEP_RISE_MIN_LINES} steps) in {logs.times.size} step lines from {first} to {last}; median "
            f"{_num(logs.median())} {logs.unit}")})
    more = max(0, len(found_all) - TELEMETRY_MAX_SLOWDOWNS)
    found: list[TelemetryFinding] = []
    facts: list[JobSlowdown] = []
    for index, slow in enumerate(found_all[:TELEMETRY_MAX_SLOWDOWNS]):
        mine, one = _one_slowdown(reader, logs, slow, index)
        found += mine
        facts.append(one)
    head = facts[0]
    evidence = head.evidence
    if len(facts) > 1:
        evidence += (f"; the job slowed {len(facts) + more} times in all: "
                     + "; ".join(f"{f.when()} {_num(f.before)} -> {_num(f.after)} {logs.unit}"
                                 + (f" ({', '.join(f.gpus[:3])})" if f.gpus else "")
                                 + (f", back at {f.recovered[11:19]}" if f.recovered else "")
                                 for f in facts[1:]))
    outside = all(not window.start <= f.began_unix <= window.end for f in facts)
    summary = base.model_copy(update={
        "status": "unknown" if outside else "slowed", "began": head.began, "began_unix": head.began_unix,
        "step": head.step, "before": head.before, "after": head.after, "recovered": head.recovered,
        "gpus": head.gpus, "evidence": evidence, "slowdowns": facts, "more_slowdowns": more,
        "decides": (f"A window holding {head.began} (start / end), so that the GPUs' series at that time are read."
                    if outside else None)})
    return found, summary


def _one_slowdown(reader: _Reader, logs: JobSteps, slow: Slowdown,
                  index: int) -> tuple[list[TelemetryFinding], JobSlowdown]:
    window = reader.window
    where = f" (step {slow.step})" if slow.step is not None else ""
    step_text = (f"step time {_num(slow.before)} -> {_num(slow.after)} {logs.unit} from {_iso(slow.at)}{where}"
                 + (" (on top of the slowdown before)" if slow.worse else "")
                 + (f", back at {_iso(slow.recovered_at)}" if slow.recovered_at is not None else ""))
    facts = JobSlowdown(began=_iso(slow.at), began_unix=slow.at, step=slow.step, before=slow.before,
                        after=slow.after, share=round(slow.after / slow.before - 1, 3) if slow.before else 0.0,
                        recovered=None if slow.recovered_at is None else _iso(slow.recovered_at),
                        recovered_unix=slow.recovered_at, on_top=slow.worse)
    near, spread = slow.at, TELEMETRY_STEP_CHANGE_WINDOW_S
    before_end = near - spread
    if not window.start <= near <= window.end:
        return [], facts.model_copy(update={
            "evidence": f"{step_text}: outside the telemetry window ({_iso(window.start)} to {_iso(window.end)})"})
    # On the window's step grid, so that a change is timed to the same step as the other verdicts.
    earliest = max(window.start, before_end - TELEMETRY_STEP_BASELINE_S)
    span = (window.start + math.floor((earliest - window.start) / window.step) * window.step,
            min(window.end, near + spread + (TELEMETRY_MIN_RUN_SAMPLES + 1) * window.step))
    rows = sorted(reader.rows.values(), key=lambda r: (not _held(r, window.nodes), r.key.node, len(r.key.gpu),
                                                       r.key.gpu, r.key.mig))[:TELEMETRY_MAX_FILTERS]
    changes: dict[_Key, list[SeriesChange]] = defaultdict(list)
    gpus_with: dict[str, int] = defaultdict(int)
    judged = 0
    for concept in STEP_SERIES:
        keys = [r.key for r in rows if (concept != "gpu_util" or not r.key.mig)
                and (concept != "gr_engine_active" or r.key.mig or "gpu_util" not in reader.names)]
        for name in _names(reader, concept):
            points = reader.detail(concept, keys, names=[name], span=span)
            gpus_with[CONCEPTS[concept].title] += len(points)
            for key, series in points.items():
                judged += sum(1 for t, _ in series if t < before_end) >= TELEMETRY_MIN_RUN_SAMPLES
                change = series_change(concept, name, series, before_end, near, spread, reader.window.step)
                if change is not None:
                    changes[key].append(change)
    mark_job_wide({f"{k.node}/{k.gpu}/{k.mig}": v for k, v in changes.items()}, gpus_with)
    shared: dict[tuple[str, str], list[SeriesChange]] = defaultdict(list)
    for per_gpu in changes.values():
        for change in per_gpu:
            if change.job_wide:
                shared[(change.measure, change.direction)].append(change)
    job_wide = [f"{measure} {direction} on {len(items)} of {gpus_with[measure]} GPUs from "
                f"{min(items, key=lambda c: c.began_unix).began} (the job as a whole)"
                for (measure, direction), items in shared.items()]
    own = sorted(((k, [c for c in v if not c.job_wide]) for k, v in changes.items() if any(not c.job_wide for c in v)),
                 key=lambda item: min(c.began_unix for c in item[1]))[:TELEMETRY_MAX_DETAIL_GPUS]
    found: list[TelemetryFinding] = []
    for key, mine in own:
        row = reader.rows[key]
        gpu, mig = _gpu_label(row)
        text = "; ".join([step_text, f"{key.node} GPU {gpu}{f' ({mig})' if mig else ''}: "
                          + ", ".join(c.text() for c in mine), *job_wide])
        found.append(_finding("step_change", Severity.warn, row, near, text, changes=changes[key],
                              reasons=sorted({r for c in mine for r in c.reasons}), slowdown=index,
                              meaning="This GPU changed when the job slowed: in synchronous training every step "
                              "waits for it."))
    gpus = [f"{f.node}/{f.gpu}" + (f" ({f.mig})" if f.mig else "") for f in found]
    if found:
        evidence = f"{step_text}; with it: " + "; ".join(f.evidence.split("; ")[1] for f in found[:4])
    elif not judged:
        evidence = (f"{step_text}; the GPUs' series hold too few samples before {_iso(before_end)} to tell what "
                    "changed (the window begins too late)")
    else:
        evidence = (f"{step_text}; no GPU's own clocks, clock-event reasons, power, temperature, activity or "
                    f"NVLink / PCIe throughput changed within {spread / 60:g} min of it ({len(rows)} GPUs)"
                    + (f"; only job-wide: {', '.join(job_wide)}" if job_wide else ""))
    if not found:
        found.append(TelemetryFinding(
            kind="step_change", severity=Severity.warn, node="", gpu="", began=_iso(near), began_unix=near,
            evidence=evidence, sop_branch="gpu_utilization_low", changes=[c for v in shared.values() for c in v][:8],
            slowdown=index,
            meaning="The job slowed while its GPUs did not change: look at the input pipeline, the network, the "
            "host and the code (find_stragglers, summarize_trace)." if judged else
            "The job slowed; which GPU changed is not known: widen the window to start earlier."))
    return found, facts.model_copy(update={"gpus": gpus, "evidence": evidence})


# ------------------------------------------------------------------------------------------------ the call


def _resolve(available: set[str]) -> dict[str, list[tuple[str, float]]]:
    return {key: [(c.name, c.scale) for c in concept.candidates if c.name in available]
            for key, concept in CONCEPTS.items() if any(c.name in available for c in concept.candidates)}


def _selector(host_label: str | None, window: _Window, params: TelemetryHistoryInput, uuid_label: str,
              by_job: bool) -> str:
    parts = []
    if window.nodes and host_label:
        parts.append(f'{host_label}=~"({_regex(window.nodes)})([.:].*)?"')
    indices = [g for g in params.gpus if g.isdigit()]
    uuids = [g for g in params.gpus if not g.isdigit()]
    if indices:
        parts.append(f'gpu=~"{_regex(indices)}"')
    if uuids:
        parts.append(f'{uuid_label}=~"{_regex(uuids)}"')
    if params.job is not None and by_job:
        parts.append(f'hpc_job="{params.job}"')
    return ",".join(parts)


@dataclass
class _Outcome:
    reader: _Reader | None
    findings: list[TelemetryFinding]
    timeline: list[TimelineEvent]
    notes: list[str]
    server: str | None
    host_label: str | None
    undecided: str | None  # why nothing can be judged, or None
    decides: str | None
    step_change: StepChange | None = None


def _analyse(client: PromClient, window: _Window, params: TelemetryHistoryInput, ctx: ToolContext,
             logs: JobSteps | None) -> _Outcome:
    notes = list(window.notes)
    build = client.optional("/api/v1/status/buildinfo")
    server = str(build.get("version")) if isinstance(build, dict) and build.get("version") else None
    available = set(client.label_values("__name__", window.start, window.end))
    names = _resolve(available)
    primary = next((c for c in ("sm_clock", "gpu_util", "gr_engine_active") if c in names), None)
    known = ", ".join(c.name for c in CONCEPTS["sm_clock"].candidates + CONCEPTS["gpu_util"].candidates)
    if primary is None and _resolve(set(client.label_values("__name__", None, None))):
        return _Outcome(None, [], [], notes, server, None, *_retention(client, window))
    if primary is None:
        return _Outcome(None, [], [], notes, server, None,
                        f"the server holds none of dcgm-exporter's GPU metrics ({len(available)} metric names, "
                        "none of them a clock or utilisation)",
                        f"A Prometheus that scrapes dcgm-exporter (metric names such as {known}).")
    primary_name = names[primary][0][0]
    label_names = set(client.labels(primary_name, window.start, window.end))
    host_label = next((n for n in LABELS["host"] if n in label_names), None)
    uuid_label = next((n for n in LABELS["uuid"] if n in label_names), "UUID")
    by_job = params.job is not None
    if params.job is not None and window.nodes and host_label:
        # Few clusters label series with the job (dcgm-exporter's --hpc-job-mapping-dir; soperator dropped it for
        # its cardinality): where none carries it, the job is its nodes.
        jobs = client.label_values(LABELS["job"][0], window.start, window.end, match=primary_name)
        if params.job not in jobs:
            by_job = False
            whose = "the job's nodes from scontrol" if window.job_nodes else "the nodes given"
            notes.append(f"no series carries hpc_job={params.job} (dcgm-exporter's --hpc-job-mapping-dir does not "
                         f"map it): the selection is {whose} ({', '.join(window.nodes[:8])}"
                         f"{' ...' if len(window.nodes) > 8 else ''}).")
    reader = _Reader(client, window, _selector(host_label, window, params, uuid_label, by_job), names)
    ctx.progress.update(1, 4, "summaries")
    for concept, stats in (("sm_clock", ("median", "min", "max", "last")), ("gpu_util", ("median", "min", "max",
                           "last")), ("gr_engine_active", ("median", "min", "max", "last")), ("gpu_temp", ("max",)),
                           ("power", ("median",)), ("fb_used", ("max",))):
        for stat in stats:
            reader.instant(concept, stat, stat)
    if not reader.rows:
        return _Outcome(reader, [], [], notes, server, host_label, *_nothing(client, reader, host_label, params))
    primary_sel = reader._select(primary_name)
    for series in client.instant(f"count_over_time({primary_sel}[{reader.range_s}])", window.end):
        if series.points:
            row = reader.row(series.labels)
            row.samples = max(row.samples, int(series.points[0][1]))
    _last_samples(reader, primary_name)
    for name, _ in names.get("clock_reasons", []):
        # Which GPUs had a slowing bit: the window's largest value carries the highest bit set, which is enough to
        # pick the GPUs to read point by point (the bits themselves come from their points). Subqueries that test
        # each bit over the window cost seconds on a large fleet.
        for series in client.instant(f"max_over_time({reader._select(name)}[{reader.range_s}]) > 1", window.end):
            if series.points:
                reader.row(series.labels).reasons_mask |= int(series.points[0][1]) & sum(RELEVANT_REASONS) or 0x2
    codes: dict[_Key, set[int]] = defaultdict(set)
    for name, _ in names.get("xid", []):
        for series in client.instant(f"max_over_time({reader._select(name)}[{reader.range_s}]) > 0", window.end):
            if series.points:
                codes[reader.row(series.labels).key].add(int(series.points[0][1]))
    ctx.progress.update(2, 4, "changes")
    fleet_last = max((r.last_sample for r in reader.rows.values() if r.last_sample), default=None)
    busy_rows = [r for r in reader.rows.values() if (r.get(r.activity(), "median") or 0) >= UNDER_LOAD_PCT]
    findings = _xid(reader, codes, fleet_last) + _hardware(reader) + _throttled(reader, busy_rows)
    idle = _held_idle(reader)
    ctx.progress.update(3, 4, "peers")
    silent = {r.key for r in reader.rows.values() if _silent_since(r, fleet_last, window.step) is not None}
    below, below_notes = _below_peers(reader, {f_key(f) for f in idle} | silent)
    findings += below + idle
    notes += below_notes
    step: StepChange | None = None
    if logs is not None:
        ctx.progress.update(3, 4, "step change")
        step_findings, step = _step_change(reader, logs)
        findings += step_findings
    if "clock_reasons" not in names:
        notes.append("The server has no DCGM_FI_DEV_CLOCKS_EVENT_REASONS (not in dcgm-exporter's default CSV): "
                     "clock drops are judged without their reasons.")
    timeline = _timeline(reader, findings, fleet_last, step)
    return _Outcome(reader, findings, timeline, notes, server, host_label, None, None, step)


def _last_samples(reader: _Reader, name: str) -> None:
    """Each GPU's last sample time. `timestamp()` of an instant selector is the time of the sample it found (within
    the server's lookback, 5 min by default); the few GPUs with none near the end get theirs from a range query of
    their own samples' timestamps, not a subquery over the whole fleet."""
    window = reader.window
    for series in reader.client.instant(f"timestamp({reader._select(name)})", window.end):
        if series.points:
            row = reader.row(series.labels)
            row.last_sample = max(row.last_sample or 0.0, series.points[0][1])
    quiet = [r for r in reader.rows.values() if r.last_sample is None][:TELEMETRY_MAX_DETAIL_GPUS]
    if not quiet:
        return
    uuids = sorted({r.uuid or r.key.gpu for r in quiet})
    matcher = f'{reader._uuid_label()}=~"{_regex(uuids)}"'
    for series in reader.client.range(f"timestamp({reader._select(name, matcher)})", window.start, window.end,
                                      window.step):
        quiet_row = reader.rows.get(_key(series.labels))
        if quiet_row is not None and series.points:
            quiet_row.last_sample = max(quiet_row.last_sample or 0.0, max(v for _, v in series.points))


def f_key(finding: TelemetryFinding) -> _Key:
    mig = finding.mig.rsplit("/", 1)[-1] if finding.mig else ""
    return _Key(finding.node, finding.gpu, mig)


def _nothing(client: PromClient, reader: _Reader, host_label: str | None,
             params: TelemetryHistoryInput) -> tuple[str, str]:
    """Why no series matched, and what would decide."""
    window = reader.window
    span = f"{_iso(window.start)} to {_iso(window.end)}"
    if reader.selector:
        hosts = client.label_values(host_label, window.start, window.end) if host_label else []
        shown = ", ".join(hosts[:10]) + (" ..." if len(hosts) > 10 else "")
        return (f"no GPU series match the selection ({reader.selector}) from {span}",
                f"nodes, gpus or job as the exporter labels them (hosts seen: {shown or 'none'}).")
    return _retention(client, window)


def _retention(client: PromClient, window: _Window) -> tuple[str, str]:
    span = f"{_iso(window.start)} to {_iso(window.end)}"
    flags = client.optional("/api/v1/status/flags")
    retention = flags.get("storage.tsdb.retention.time") if isinstance(flags, dict) else None
    kept = f" (its retention: {retention})" if retention else ""
    return (f"the server holds dcgm-exporter's metrics but no sample of them from {span}: the window is past its "
            f"retention or before the exporter was scraped{kept}",
            "A window inside the server's retention in which dcgm-exporter was scraped (start / end, or job).")


def _event(finding: TelemetryFinding) -> str:
    if finding.kind == "hardware_errors":
        return f"hardware_errors: {finding.metric}" + (f" +{finding.rise:.0f}" if finding.rise else "")
    if finding.kind == "step_change":
        return "step_change: " + finding.evidence.split(" from ", 1)[0]  # "step time 800 -> 1200 ms"
    return (finding.kind + (f" XID {finding.xid_code}" if finding.xid_code is not None else "")
            + (f": {', '.join(finding.reasons)}" if finding.reasons else ""))


def _timeline(reader: _Reader, findings: list[TelemetryFinding], fleet_last: float | None,
              step: StepChange | None = None) -> list[TimelineEvent]:
    events = [TimelineEvent(time=f.began, time_unix=f.began_unix, node=f.node,
                            gpu=f.gpu + (f" ({f.mig})" if f.mig else ""),
                            event=_event(f))
              for f in findings if f.began is not None and f.began_unix is not None]
    # What changed on a GPU when the job slowed, each at its own time (the job-wide changes once per slowdown, from
    # its first finding).
    shared_done: set[int | None] = set()
    for f in (f for f in findings if f.kind == "step_change"):
        gpu = f.gpu + (f" ({f.mig})" if f.mig else "")
        for change in f.changes:
            if change.job_wide and f.slowdown in shared_done:
                continue
            events.append(TimelineEvent(time=change.began, time_unix=change.began_unix,
                                        node="(job)" if change.job_wide else f.node,
                                        gpu="" if change.job_wide else gpu, event=change.text()))
        if any(c.job_wide for c in f.changes):
            shared_done.add(f.slowdown)
    # When the job's step time came back: the end of each slowdown that recovered.
    for slow in step.slowdowns if step is not None else []:
        if slow.recovered is not None and slow.recovered_unix is not None:
            events.append(TimelineEvent(time=slow.recovered, time_unix=slow.recovered_unix, node="(job)", gpu="",
                                        event=f"step time back to {_num(slow.before)} {step.unit if step else ''} "
                                        f"(slowed from {slow.when()})"))
    for row in reader.rows.values():
        silent = _silent_since(row, fleet_last, reader.window.step)
        if silent is not None:
            gpu, mig = _gpu_label(row)
            events.append(TimelineEvent(time=_iso(silent), time_unix=silent, node=row.key.node,
                                        gpu=gpu + (f" ({mig})" if mig else ""), event="last sample: silent after"))
    return sorted(events, key=lambda e: (e.time_unix, e.node, e.gpu))[:TELEMETRY_MAX_EVENTS]


def _rows(reader: _Reader | None, findings: list[TelemetryFinding]) -> list[GpuHistory]:
    if reader is None:
        return []
    first: dict[tuple[str, str, str | None], float] = {}
    for f in findings:
        if f.began_unix is not None:
            for gpu in f.gpu.split(","):
                k = (f.node, gpu, f.mig)
                first[k] = min(first.get(k, f.began_unix), f.began_unix)
    flagged = {(f.node, g, f.mig) for f in findings for g in f.gpu.split(",")}
    out = []
    for row in reader.rows.values():
        gpu, mig = _gpu_label(row)
        activity = row.activity()
        began = first.get((row.key.node, gpu, mig))
        out.append(GpuHistory(
            node=row.key.node, gpu=gpu, uuid=row.uuid, mig=mig, model=row.model, held_by=sorted(row.held_by),
            sm_clock_mhz=Stat(**row.stats.get("sm_clock", {})), activity_pct=Stat(**row.stats.get(activity, {})),
            temperature_max_c=row.get("gpu_temp", "max"), power_median_w=row.get("power", "median"),
            memory_used_max=row.get("fb_used", "max"), samples=row.samples,
            last_sample=None if row.last_sample is None else _iso(row.last_sample),
            changed_at=None if began is None else _iso(began)))
    out.sort(key=lambda g: ((g.node, g.gpu, g.mig) not in flagged, g.node, len(g.gpu), g.gpu, g.mig or ""))
    return out


def _conclusion(findings: list[TelemetryFinding], gpus: int, window: _Window,
                step: StepChange | None = None) -> list[str]:
    span = f"{_iso(window.start)} to {_iso(window.end)}"
    if not findings:
        return [f"{gpus} GPU series read from {span}: no throttling, XID, idle held GPU, GPU below its peers or "
                "rising hardware counter.", "If the job is still slow, look at its own steps (find_stragglers) and "
                "traces (summarize_trace): the GPUs' history does not explain it."]
    top = findings[0]
    where = f"{top.node} GPU {top.gpu}" + (f" ({top.mig})" if top.mig else "") if top.node else "the job"
    text = [f"{top.kind.replace('_', ' ')} on {where}" + (f" from {top.began}" if top.began else "") +
            f": {top.evidence.split('; ')[0]}.", top.meaning or "See the findings."]
    if len(findings) > 1:
        others = sorted({f.kind.replace("_", " ") for f in findings[1:]})
        text.append(f"Also {len(findings) - 1} more finding(s): {', '.join(others)}.")
    if step is not None and len(step.slowdowns) > 1:
        each = "; ".join(f"{s.when()}" + (f" ({', '.join(s.gpus[:2])})" if s.gpus else "")
                         + (f", back {s.recovered[11:19]}" if s.recovered else "") for s in step.slowdowns)
        sentence = (f"The job's steps slowed {len(step.slowdowns) + step.more_slowdowns} times: {each}"
                    + (f" and {step.more_slowdowns} more" if step.more_slowdowns else "") + ".")
        text = text[:2] + [(text[2][:-1] + "; " + sentence[0].lower() + sentence[1:]) if len(text) > 2 else sentence]
    return text


def _year_window(params: TelemetryHistoryInput) -> tuple[float, float] | None:
    """The caller's window, where start or end is given: what dates step-log times written without a year (glog,
    syslog). The Slurm job's window is not known yet when the logs are read."""
    if not params.start and not params.end:
        return None
    now = time.time()
    end = _parse_time(params.end, now, "end") if params.end else now
    start = _parse_time(params.start, now, "start") if params.start else end - TELEMETRY_DEFAULT_WINDOW_S
    return (min(start, end), max(start, end))


def _utc_offset_s(text: str | None) -> float | None:
    if text is None:
        return None
    if text in ("Z", "UTC"):
        return 0.0
    digits = text[1:].replace(":", "")
    seconds = int(digits[:2]) * 3600 + int(digits[2:]) * 60
    return float(seconds if text[0] == "+" else -seconds)


async def telemetry_history(params: TelemetryHistoryInput, ctx: ToolContext) -> TelemetryHistoryResult:
    """What changed on which GPU over a job's window, from the cluster's Prometheus (dcgm-exporter series, any
    exporter generation: names resolved from the server). Verdicts, each with node, GPU (index, UUID, MIG instance),
    the time it began (to the step) and the evidence: throttled (SM clock below its own or its peers' level, with the
    clock-event reasons: thermal, power cap, HW slowdown, power brake), xid (the codes seen and their meaning; a GPU
    that then falls silent), held_idle (a GPU the job holds at zero utilisation while holding memory), below_peers (a
    GPU or node below the selection's median utilisation), hardware_errors (ECC, row remap, PCIe replay, NVLink
    counters rising, by how much and from when), step_change (with step_logs: each time the job's steps slowed and
    when they recovered, and the GPU whose clocks, clock-event reasons, power, temperature, activity or NVLink/PCIe
    throughput changed within minutes of each; job-wide changes told apart). Window: start/end (RFC3339, unix or
    -2h), a Slurm job (scontrol for its window and nodes; its hpc_job label where the exporter sets one), or the
    step logs' times. Loopback by default, other hosts via allow_host; credentials only from the environment.
    Bounded: instant summaries for every GPU, point-by-point reads only for the GPUs a verdict concerns.
    """
    raw_url = params.url or os.environ.get(ENV_URL, "")
    if not raw_url:
        raise BadInput("no Prometheus URL: pass url, or set " + ENV_URL + " in the server's environment.",
                       "For example url='http://127.0.0.1:9090'.")
    url = checked_url(raw_url, params.allow_host, "http://HOST:9090 (the Prometheus API root)")
    logs: JobSteps | None = None
    if params.step_logs:
        offset = _utc_offset_s(params.step_log_utc_offset)
        logs = await anyio.to_thread.run_sync(read_job_steps, list(params.step_logs), ctx.roots, params.step_regex,
                                              offset, time.monotonic() + max(0.5, ctx.remaining_s() / 2),
                                              _year_window(params))
    window = await _window(params, ctx, logs)
    deadline = time.monotonic() + max(0.5, ctx.remaining_s() - 0.5)
    client = PromClient(url, deadline)
    with anyio.fail_after(max(1.0, ctx.remaining_s())):
        outcome = await anyio.to_thread.run_sync(_analyse, client, window, params, ctx, logs,
                                                 abandon_on_cancel=True)
    findings = sorted(outcome.findings, key=lambda f: (-f.severity.rank, _ORDER.index(f.kind),
                                                       f.began_unix if f.began_unix is not None else math.inf))
    reader = outcome.reader
    gpus = _rows(reader, findings)
    metrics = [ResolvedName(measure=CONCEPTS[c].title, metric=n, unit=CONCEPTS[c].unit,
                            generation=next(x.generation for x in CONCEPTS[c].candidates if x.name == n))
               for c, pairs in (reader.names.items() if reader else ()) for n, _ in pairs]
    detail = (f"{outcome.server or 'Prometheus API'}: {len(gpus)} GPU series, {client.queries} queries, "
              f"{client.points} points")
    notes = outcome.notes + (logs.notes if logs is not None else [])
    short = [g for g in gpus if g.samples and g.samples < 0.5 * (window.end - window.start) / window.step]
    if short:
        notes.append(f"{len(short)} GPU series have fewer than half the samples the window should hold "
                     "(scrape gaps, or the series began or ended inside it).")
    verdict: Verdict
    step_decides: str | None = None  # set where the step logs alone leave the call undecided
    if outcome.undecided is not None:
        severity, verdict = Severity.unknown, "unknown"
        conclusion = [f"Cannot judge: {outcome.undecided}.", "Nothing here says the GPUs are fine."]
        coverage = [Coverage.partial(url, f"{detail}; {outcome.undecided}"), *window.coverage]
        next_steps: list[NextStep] = []
    else:
        severity = worst(f.severity for f in findings)
        verdict = findings[0].kind if findings else "none"
        conclusion = _conclusion(findings, len(gpus), window, outcome.step_change)
        missing = [CONCEPTS[c].title for c in ("sm_clock", "gpu_util") if reader is None or c not in reader.names]
        coverage = [Coverage.partial(url, f"{detail}; no {' or '.join(missing)} series") if missing
                    else Coverage.read(url, detail), *window.coverage]
        if not findings and missing:
            severity, verdict = Severity.unknown, "unknown"
            conclusion = [f"No finding, but the server has no {' or '.join(missing)} series, so throttling and idle "
                          "GPUs cannot be judged.", "Collect them in dcgm-exporter's CSV."]
        step = outcome.step_change
        if step is not None and step.status == "unknown" and severity is Severity.ok:
            severity, verdict, step_decides = Severity.unknown, "unknown", step.decides
            conclusion = [f"No GPU finding in {len(gpus)} GPU series, but when the job slowed cannot be told: "
                          f"{step.evidence}.", "Nothing here says what changed when it slowed."]
        elif step is not None and step.status == "unknown":
            notes.append(f"step_change unknown: {step.evidence}; {step.decides}")
        branch = findings[0].sop_branch if findings else "straggler"
        next_steps = [NextStep.from_sop(branch, done={"telemetry_history"})]
    decides = outcome.decides if severity is Severity.unknown else None
    decides = decides or step_decides
    if logs is not None:
        coverage += logs.coverage
    elif outcome.undecided is None:
        coverage.append(Coverage.partial("step_logs", "not given: the job's step-time logs (with a time on each "
                                         "line) would decide what changed on which GPU when it slowed (step_change)"))
    if severity is Severity.unknown and decides is None:
        decides = "dcgm-exporter's SM clock and utilisation series for these GPUs over the window."
    return TelemetryHistoryResult(
        severity=severity, conclusion=conclusion[:3], coverage=coverage, decides=decides, notes=notes[:8],
        next_steps=next_steps, url=url, server=outcome.server, window_start=_iso(window.start),
        window_end=_iso(window.end), step_s=window.step, verdict=verdict, findings=findings,
        timeline=outcome.timeline, gpus=gpus, metrics=metrics, host_label=outcome.host_label, job=params.job,
        nodes=window.nodes, window_source=window.source, step_change=outcome.step_change, queries=client.queries,
        points_read=client.points)
