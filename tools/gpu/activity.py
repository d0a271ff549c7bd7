"""gpu_activity: what the SMs really do, beside utilization.gpu.

utilization.gpu is the share of time in which any kernel runs: one tiny kernel running all the time reads 100 %,
and so does a rank spinning in an NCCL wait. The counters that tell busy from busy-doing-little are SM activity and
occupancy, tensor / FP pipe activity, DRAM bandwidth and PCIe / NVLink throughput. They come live from NVML's GPU
Performance Monitoring (Hopper and newer: two samples `interval_s` apart), from dcgm-exporter (a saved page, or
scraped like inference_metrics), or from saved `dcgmi dmon` and `nvidia-smi dmon --gpm-metrics` captures
(tools/gpu/activity_formats.py). A metric the source does not have is listed as unavailable, never shown as 0.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Literal

import anyio
import anyio.to_thread
from pydantic import BaseModel, Field

from tools.cluster import collect_from_nodes, job_backend, node_name
from tools.core.context import ToolContext
from tools.core.errors import BadInput
from tools.core.files import expand_inputs, read_whole_text
from tools.core.limits import (
    ACTIVITY_DEFAULT_INTERVAL_S,
    ACTIVITY_DEFAULT_SAMPLES,
    ACTIVITY_MAX_FILE_BYTES,
    ACTIVITY_MAX_FILES,
    ACTIVITY_MAX_INTERVAL_S,
    ACTIVITY_MAX_SAMPLES,
    ACTIVITY_MIN_INTERVAL_S,
    INFER_MAX_ALLOWED_HOSTS,
    MAX_PATH_CHARS,
)
from tools.core.models import (
    Coverage,
    CoverageStatus,
    NameArg,
    NextStep,
    NodesInput,
    PathArg,
    Severity,
    Table,
    ToolResult,
    worst,
)
from tools.core.thresholds import (
    ACTIVITY_BUSY_UTIL_PCT,
    DRAM_BOUND,
    GPU_BELOW_NODE_ABS,
    GPU_BELOW_NODE_MIN_GPUS,
    GPU_BELOW_NODE_SHARE,
    NVLINK_IDLE_BYTES_PER_S,
    PCIE_BUSY_BYTES_PER_S,
    SM_ACTIVE_NEEDED,
    SM_ACTIVE_POOR,
    TENSOR_IDLE,
    TENSOR_LOW,
    UNDER_LOAD_PCT,
)
from tools.gpu import nvml as _nvml
from tools.gpu.activity_formats import ActivitySeries, Source, read_activity

__all__ = ["ActivityFinding", "GpuActivity", "GpuActivityInput", "GpuActivityResult", "MetricStats",
           "activity_findings", "gpu_activity", "live_activity", "summarise"]

FindingKind = Literal["low_sm_activity", "no_tensor_cores", "memory_bound", "nvlink_idle", "gpu_below_node"]
METRICS: tuple[str, ...] = (
    "utilization_gpu_pct", "gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "tensor_hmma_active",
    "tensor_imma_active", "tensor_dfma_active", "integer_active", "fp16_active", "fp32_active", "fp64_active",
    "dram_active", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
)
# The metrics a verdict reads: the ones `unavailable` must name when a source lacks them.
_CORE = ("utilization_gpu_pct", "sm_active", "sm_occupancy", "tensor_active", "dram_active", "fp16_active",
         "fp32_active", "fp64_active", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s",
         "nvlink_rx_bytes_per_s")
# What gpu_activity reads, for an input it did not understand.
FORMATS_KNOWN = ("dcgm-exporter /metrics page with DCGM_FI_PROF_* (or DCGM_FI_DEV_GPU_UTIL) samples",
                 "dcgmi dmon -e 203,1002,1003,1004,1005 capture", "nvidia-smi dmon --gpm-metrics capture",
                 "live NVML GPM (Hopper or newer)")
_COLLECTOR = ("the node's collector answer (gpu-triage gpu-activity --local --json)",)
_DECIDES = ("SM activity of the job's GPUs: DCGM field 1002 (DCGM_FI_PROF_SM_ACTIVE) from dcgm-exporter or "
            "`dcgmi dmon -e 203,1002,1003,1004,1005`, `nvidia-smi dmon --gpm-metrics 2,3,5,10`, or live GPM on "
            "Hopper or newer.")
_NO_GPM = ("NVML GPM is not supported on this GPU: it needs Hopper or newer (and not every MIG or vGPU setup "
           "has it); use dcgm-exporter or dcgmi dmon there.")


class GpuActivityInput(NodesInput):
    files: list[PathArg] = Field(default_factory=list, max_length=ACTIVITY_MAX_FILES,
                                 description="Saved dcgm-exporter /metrics pages (several pages of one exporter make "
                                 "a series), `dcgmi dmon -e ...` or `nvidia-smi dmon --gpm-metrics ...` captures; "
                                 "globs allowed. Without files or url: live NVML GPM samples of this host's GPUs.")
    url: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS,
                            description="A dcgm-exporter page to scrape, http://HOST:9400/metrics (loopback, or a "
                            "host in allow_host), `samples` times `interval_s` apart.")
    allow_host: list[NameArg] = Field(default_factory=list, max_length=INFER_MAX_ALLOWED_HOSTS,
                                      description="Hosts besides loopback that url may name.")
    interval_s: float = Field(default=ACTIVITY_DEFAULT_INTERVAL_S, ge=ACTIVITY_MIN_INTERVAL_S,
                              le=ACTIVITY_MAX_INTERVAL_S,
                              description="Live and url: seconds between two samples (GPM needs two).")
    samples: int = Field(default=ACTIVITY_DEFAULT_SAMPLES, ge=1, le=ACTIVITY_MAX_SAMPLES,
                         description="Live and url: how many intervals (or scrapes) to take.")

    cli_positional = "files"


class MetricStats(BaseModel):
    min: float
    median: float
    max: float
    last: float
    samples: int


class GpuActivity(BaseModel):
    gpu: str = Field(description="The GPU's index (or UUID where the source names no index).")
    instance: str | None = Field(default=None, description="The MIG GPU instance, where the source has one.")
    source: Source
    host: str | None = None
    model: str | None = None
    capture: str | None = Field(default=None, description="The saved dmon capture it comes from.")
    utilization_gpu_pct: MetricStats | None = Field(default=None,
                                                    description="utilization.gpu: share of time any kernel ran, %.")
    gr_engine_active: MetricStats | None = None
    sm_active: MetricStats | None = Field(default=None, description="Fraction of time an SM had a warp, averaged "
                                          "over all SMs (DCGM SM_ACTIVE, GPM SM utilisation).")
    sm_occupancy: MetricStats | None = Field(default=None, description="Resident warps / the SMs' maximum.")
    tensor_active: MetricStats | None = None
    tensor_hmma_active: MetricStats | None = None
    tensor_imma_active: MetricStats | None = None
    tensor_dfma_active: MetricStats | None = None
    integer_active: MetricStats | None = None
    fp16_active: MetricStats | None = None
    fp32_active: MetricStats | None = None
    fp64_active: MetricStats | None = None
    dram_active: MetricStats | None = Field(default=None, description="Fraction of peak DRAM bandwidth in use.")
    pcie_tx_bytes_per_s: MetricStats | None = None
    pcie_rx_bytes_per_s: MetricStats | None = None
    nvlink_tx_bytes_per_s: MetricStats | None = None
    nvlink_rx_bytes_per_s: MetricStats | None = None
    unavailable: list[str] = Field(default_factory=list,
                                   description="Metrics this source does not give for this GPU (never shown as 0).")
    support: str | None = Field(default=None, description="Why this GPU has no activity metrics at all.")

    def median(self, name: str) -> float | None:
        stats: MetricStats | None = getattr(self, name)
        return None if stats is None else stats.median

    def cell(self, name: str) -> str:
        """The median as a table shows it: percent whole, rates in GB/s, fractions to two places; n/a for a metric
        the source lacks, - for one it has no value of."""
        value = self.median(name)
        if value is None:
            return "n/a" if name in self.unavailable else "-"
        if name.endswith("_bytes_per_s"):
            return f"{value / 1e9:.2f}"
        return f"{value:.0f}" if name.endswith("_pct") else f"{value:.2f}"

    @property
    def label(self) -> str:
        where = f"{self.host} " if self.host else f"{self.capture}: " if self.capture else ""
        return f"{where}GPU {self.gpu}" + (f" ({self.instance})" if self.instance else "")


class ActivityFinding(BaseModel):
    kind: FindingKind
    severity: Severity
    gpu: str = Field(description="Which GPU (and MIG instance, host) it is about.")
    evidence: str
    threshold: str = Field(description="The limit the evidence crossed.")
    fix: str
    sop_branch: str


class GpuActivityResult(ToolResult):
    gpus: list[GpuActivity]
    findings: list[ActivityFinding]
    sources: list[str] = Field(description="What was read: files, the url, or 'NVML GPM'.")
    node: str | None = Field(default=None, description="Collector mode: the node this answer is from.")

    def tables(self) -> list[Table]:
        rows = [[r.label, r.source, *(r.cell(n) for n in ("utilization_gpu_pct", "sm_active", "sm_occupancy",
                                                          "tensor_active", "dram_active")),
                 "/".join(r.cell(f"fp{b}_active") for b in (16, 32, 64)),
                 f"{r.cell('pcie_tx_bytes_per_s')}/{r.cell('pcie_rx_bytes_per_s')}",
                 f"{r.cell('nvlink_tx_bytes_per_s')}/{r.cell('nvlink_rx_bytes_per_s')}"]
                for r in self.gpus]
        tables = [Table("What the SMs do (medians; activities 0-1)",
                        ["gpu", "source", "util %", "SM active", "SM occ", "tensor", "DRAM", "FP16/32/64",
                         "PCIe tx/rx GB/s", "NVLink tx/rx GB/s"], rows, "gpus",
                        note="n/a: the source has no such metric.")]
        if self.findings:
            tables.append(Table("Findings", ["kind", "severity", "gpu", "evidence", "fix"],
                                [[f.kind, f.severity.value, f.gpu, f.evidence, f.fix] for f in self.findings],
                                "findings"))
        return tables


# ------------------------------------------------------------------------------------------------- series


def _stats(values: list[float]) -> MetricStats | None:
    if not values:
        return None
    return MetricStats(min=min(values), median=statistics.median(values), max=max(values), last=values[-1],
                       samples=len(values))


def summarise(series: ActivitySeries) -> GpuActivity:
    record = GpuActivity(gpu=series.gpu, instance=series.instance, source=series.source, host=series.host,
                         model=series.model, capture=series.capture)
    for name in METRICS:
        setattr(record, name, _stats(series.values.get(name, [])))
    record.unavailable = [name for name in _CORE if getattr(record, name) is None]
    return record


# ----------------------------------------------------------------------------------------------- verdicts


def _fraction(value: float) -> str:
    return f"{value:.2f}"


def _one_gpu(record: GpuActivity) -> list[ActivityFinding]:
    found: list[ActivityFinding] = []
    util, sm = record.median("utilization_gpu_pct"), record.median("sm_active")
    busy_by = (f"utilization.gpu {util:.0f} %" if util is not None else None)
    if util is None and (gr := record.median("gr_engine_active")) is not None:
        util, busy_by = gr * 100, f"graphics engine active {gr:.2f}"
    samples = (record.sm_active.samples if record.sm_active else 0)
    of = f" (median of {samples} samples)" if samples > 1 else ""
    if util is not None and util >= ACTIVITY_BUSY_UTIL_PCT and sm is not None and sm < SM_ACTIVE_NEEDED:
        found.append(ActivityFinding(
            kind="low_sm_activity", severity=Severity.crit if sm < SM_ACTIVE_POOR else Severity.warn,
            gpu=record.label, threshold=f"SM active >= {SM_ACTIVE_NEEDED} (< {SM_ACTIVE_POOR} poor) when "
                                        f"utilization >= {ACTIVITY_BUSY_UTIL_PCT:.0f} %",
            evidence=f"{busy_by} but SM active {_fraction(sm)}{of}: a kernel runs nearly all the time, yet on average "
                     f"{sm * 100:.0f} % of the SMs hold a warp (NVIDIA wants >= {SM_ACTIVE_NEEDED}).",
            fix="Small kernels or launch-bound (summarize_trace: kernel sizes and gaps; CUDA graphs, torch.compile, "
                "larger batches, fused ops), or a rank spinning in an NCCL wait (dump_stacks, find_stragglers).",
            sop_branch="gpu_utilization_low"))
    tensor, dram = record.median("tensor_active"), record.median("dram_active")
    memory_bound = dram is not None and dram >= DRAM_BOUND and (tensor is None or tensor < TENSOR_LOW)
    # Memory-bound kernels leave the tensor pipes idle whatever the dtype: that finding says it, not this one.
    if (sm is not None and sm >= SM_ACTIVE_POOR and tensor is not None and tensor < TENSOR_IDLE
            and not memory_bound):
        fp = {b: record.median(f"fp{b}_active") for b in (16, 32)}
        pipes = ", ".join(f"FP{b} pipe {v:.2f}" for b, v in fp.items() if v is not None)
        found.append(ActivityFinding(
            kind="no_tensor_cores", severity=Severity.warn, gpu=record.label,
            threshold=f"tensor active >= {TENSOR_IDLE} when SM active >= {SM_ACTIVE_POOR}",
            evidence=f"SM active {_fraction(sm)} but tensor pipes {tensor:.3f}" + (f" ({pipes})" if pipes else "")
                     + ": the SMs work, the tensor cores do not.",
            fix="If this job should run bf16/fp16 matmuls: torch.autocast(dtype=torch.bfloat16), or TF32 for fp32 "
                "(torch.set_float32_matmul_precision('high')); keep GEMM dimensions multiples of 8 (16 for int8).",
            sop_branch="gpu_utilization_low"))
    if memory_bound and dram is not None:
        found.append(ActivityFinding(
            kind="memory_bound", severity=Severity.warn, gpu=record.label,
            threshold=f"DRAM active < {DRAM_BOUND} (with tensor active < {TENSOR_LOW})",
            evidence=f"DRAM bandwidth {_fraction(dram)} of its peak"
                     + (f", tensor pipes {tensor:.2f}" if tensor is not None else "") + ": the kernels wait on memory.",
            fix="Raise arithmetic intensity: fuse elementwise and normalisation ops (torch.compile), larger batches, "
                "fewer dtype copies; summarize_trace names the top kernels.",
            sop_branch="gpu_utilization_low"))
    pcie = _sum(record, "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s")
    nvlink = _sum(record, "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")
    if pcie is not None and nvlink is not None and pcie >= PCIE_BUSY_BYTES_PER_S and nvlink < NVLINK_IDLE_BYTES_PER_S:
        found.append(ActivityFinding(
            kind="nvlink_idle", severity=Severity.warn, gpu=record.label,
            threshold=f"NVLink >= {NVLINK_IDLE_BYTES_PER_S / 1e9:g} GB/s when PCIe >= {PCIE_BUSY_BYTES_PER_S / 1e9:g} "
                      "GB/s",
            evidence=f"PCIe carries {pcie / 1e9:.1f} GB/s while NVLink carries {nvlink / 1e9:.2f} GB/s: if these "
                     "GPUs have NVLink, the traffic (an all-reduce?) does not use it.",
            fix="check_interconnect: NCCL's transport per peer (P2P/NVLink vs SHM or NET), NCCL_P2P_DISABLE / "
                "NCCL_P2P_LEVEL, `nvidia-smi topo -m` and `nvidia-smi nvlink -s`.",
            sop_branch="nccl_hang_or_slow"))
    return found


def _sum(record: GpuActivity, *names: str) -> float | None:
    values = [record.median(n) for n in names]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _below_node(records: list[GpuActivity]) -> list[ActivityFinding]:
    """A whole GPU far below its node's median SM activity: a straggler candidate (its peers wait for it)."""
    nodes: dict[tuple[str, str | None, str | None], list[GpuActivity]] = defaultdict(list)
    for record in records:
        if record.instance is None and record.median("sm_active") is not None:
            nodes[(record.source, record.host, record.capture)].append(record)
    found: list[ActivityFinding] = []
    for peers in nodes.values():
        if len(peers) < GPU_BELOW_NODE_MIN_GPUS:
            continue
        node = statistics.median(r.median("sm_active") or 0.0 for r in peers)
        for record in peers:
            sm = record.median("sm_active") or 0.0
            if sm < node - GPU_BELOW_NODE_ABS and sm < node * GPU_BELOW_NODE_SHARE:
                found.append(ActivityFinding(
                    kind="gpu_below_node", severity=Severity.warn, gpu=record.label,
                    threshold=f"within {GPU_BELOW_NODE_ABS} and {GPU_BELOW_NODE_SHARE:.0%} of the node's median",
                    evidence=f"SM active {_fraction(sm)} against its node's median {_fraction(node)} over "
                             f"{len(peers)} GPUs.",
                    fix="A straggler candidate: find_stragglers on the step logs or traces; health_check for this "
                        "GPU's clocks, temperature and power.",
                    sop_branch="straggler"))
    return found


def activity_findings(records: list[GpuActivity]) -> list[ActivityFinding]:
    found = [f for record in records for f in _one_gpu(record)] + _below_node(records)
    return sorted(found, key=lambda f: -f.severity.rank)


# ------------------------------------------------------------------------------------------------- inputs


def live_activity(interval_s: float, samples: int, deadline: float) -> list[GpuActivity]:
    """NVML GPM of every GPU here: `samples` intervals of `interval_s`, with utilization.gpu read at each."""
    records: list[GpuActivity] = []
    with _nvml.open_session() as session:
        count = session.device_count()
        series = {i: ActivitySeries(str(i), "nvml_gpm") for i in range(count)}
        supported = {i: session.gpm_supported(i) is True for i in range(count)}
        previous = {i: session.gpm_take(i) for i in range(count) if supported[i]}
        try:
            for _ in range(samples):
                if time.monotonic() + interval_s > deadline:
                    break
                time.sleep(interval_s)
                for index in range(count):
                    util = session.utilization_gpu_pct(index)
                    series[index].add("utilization_gpu_pct", None if isinstance(util, _nvml.Missing) else util)
                    if index not in previous or isinstance(previous[index], _nvml.Missing):
                        continue
                    current = session.gpm_take(index)
                    if isinstance(current, _nvml.Missing):
                        continue
                    metrics = session.gpm_metrics(previous[index], current)
                    previous[index] = current
                    if isinstance(metrics, _nvml.Missing):
                        continue
                    for name, value in metrics.items():
                        series[index].add(name, None if isinstance(value, _nvml.Missing) else value)
        finally:
            for sample in previous.values():
                if not isinstance(sample, _nvml.Missing):
                    session.gpm_free(sample)
        for index in range(count):
            record = summarise(series[index])
            if not supported[index]:
                record.support = _NO_GPM
                record.unavailable = [n for n in _CORE if n != "utilization_gpu_pct"]
            records.append(record)
    return records


def _counts(into: dict[tuple[str, ...], ActivitySeries]) -> dict[tuple[tuple[str, ...], str], int]:
    return {(key, name): len(values) for key, series in into.items() for name, values in series.values.items()}


def _source_coverage(name: str, before: dict[tuple[tuple[str, ...], str], int],
                     into: dict[tuple[str, ...], ActivitySeries]) -> Coverage:
    """What one input added: the GPUs and metrics it gave values of. SM activity is what the verdicts rest on;
    an input without it is read in part, one without any activity value is not understood."""
    added = {(key, metric) for (key, metric), count in _counts(into).items() if count > before.get((key, metric), 0)}
    gpus = {key for key, _ in added}
    metrics = {metric for _, metric in added}
    if not added:
        return Coverage.not_understood(name, "no activity value of any GPU (DCGM_FI_PROF_* / DCGM_FI_DEV_GPU_UTIL, "
                                       "dcgmi SMACT / TENSO / DRAMA, dmon gract / smutil)", FORMATS_KNOWN)
    detail = f"{len(gpus)} GPU(s) or instance(s), {len(metrics)} metric(s)"
    if "sm_active" not in metrics:
        return Coverage.partial(name, f"{detail}, but no SM activity ({', '.join(sorted(metrics)[:5])}): busy "
                                "cannot be told from busy doing little")
    return Coverage.read(name, detail)


def _read_files(params: GpuActivityInput, ctx: ToolContext
                ) -> tuple[list[GpuActivity], list[str], list[str], list[Coverage]]:
    into: dict[tuple[str, ...], ActivitySeries] = {}
    notes: list[str] = []
    coverage: list[Coverage] = []
    files = expand_inputs(params.files, ctx.roots, max_files=ACTIVITY_MAX_FILES)
    for file in files:
        text = read_whole_text(file, ACTIVITY_MAX_FILE_BYTES, "Pass a saved dcgm-exporter page or dmon capture.")
        before = _counts(into)
        notes += read_activity(text, into, file.name)
        coverage.append(_source_coverage(file.name, before, into))
    return [summarise(s) for s in into.values()], [f.name for f in files], notes, coverage


async def _scrape(params: GpuActivityInput, ctx: ToolContext, url: str
                  ) -> tuple[list[GpuActivity], list[str], Coverage]:
    from tools.serving import fetch_exposition

    into: dict[tuple[str, ...], ActivitySeries] = {}
    notes: list[str] = []
    for taken in range(params.samples):
        if taken:
            await anyio.sleep(params.interval_s)
        notes += read_activity(await fetch_exposition(url, ctx, params.allow_host), into, url)
        ctx.progress.update(taken + 1, params.samples, f"scraped {taken + 1} of {params.samples}")
    coverage = _source_coverage(url, {}, into)
    if coverage.status is not CoverageStatus.not_understood:
        coverage = coverage.model_copy(update={"detail": f"{params.samples} scrape(s): {coverage.detail}"})
    return [summarise(s) for s in into.values()], sorted(set(notes)), coverage


def _live_coverage(records: list[GpuActivity]) -> Coverage:
    """NVML GPM: read where every GPU has the counters; partial naming the GPUs without; not understood if none."""
    without = [r.gpu for r in records if r.support]
    if not records:
        return Coverage.not_understood("NVML GPM", "NVML lists no GPU here", FORMATS_KNOWN)
    if len(without) == len(records):
        return Coverage.not_understood("NVML GPM", _NO_GPM, FORMATS_KNOWN)
    samples = max((r.sm_active.samples for r in records if r.sm_active), default=0)
    if without:
        return Coverage.partial("NVML GPM", f"{len(records) - len(without)} of {len(records)} GPUs, {samples} "
                                f"sample(s); no GPM on GPU {', '.join(without)}")
    return Coverage.read("NVML GPM", f"{len(records)} GPU(s), {samples} sample(s)")


def _judgeable(record: GpuActivity) -> list[str]:
    """The verdicts this GPU's metrics can give (see _one_gpu and _below_node for what each reads)."""
    has = {name for name in METRICS if getattr(record, name) is not None}
    busy = bool(has & {"utilization_gpu_pct", "gr_engine_active"})
    verdicts = {"low_sm_activity": busy and "sm_active" in has,
                "no_tensor_cores": {"sm_active", "tensor_active"} <= has,
                "memory_bound": "dram_active" in has,
                "nvlink_idle": bool(has & {"pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"})
                and bool(has & {"nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"})}
    return [name for name, possible in verdicts.items() if possible]


def _judged(records: list[GpuActivity], findings: list[ActivityFinding], coverage: list[Coverage]
            ) -> tuple[Severity, str | None]:
    """ok only where some verdict could have been given: metrics that no verdict reads (NVLink without PCIe,
    utilisation alone) show no problem because they cannot, not because there is none."""
    severity = worst(f.severity for f in findings)
    if severity is Severity.ok and (not any(_judgeable(r) for r in records)
                                    or any(c.status is CoverageStatus.not_understood for c in coverage)):
        return Severity.unknown, _DECIDES
    return severity, None


def _merge_nodes(label: str, answers: dict[str, GpuActivityResult | str]) -> GpuActivityResult:
    """Every node's GPUs, named by their node, and the verdicts over all of them (gpu_below_node within a node)."""
    records: list[GpuActivity] = []
    notes: list[str] = []
    coverage: list[Coverage] = []
    for node, answer in answers.items():
        if isinstance(answer, str):
            notes.append(f"{node}: no answer ({answer}).")
            coverage.append(Coverage.not_understood(node, f"no answer: {answer}", _COLLECTOR))
            continue
        records += [g.model_copy(update={"host": g.host or node}) for g in answer.gpus]
        notes += [f"{node}: {n}" for n in answer.notes]
        missed = [c for c in answer.coverage if c.status is not CoverageStatus.read]
        coverage.append(Coverage.partial(node, "; ".join(f"{c.input}: {c.detail}" for c in missed)) if missed
                        else Coverage.read(node, "; ".join(c.detail for c in answer.coverage)))
    findings = activity_findings(records)
    answered = sum(1 for a in answers.values() if not isinstance(a, str))
    severity, decides = _judged(records, findings, coverage)
    conclusion = [f"{label}: {answered} of {len(answers)} nodes answered.", *_conclusion(records, findings)][:3]
    if severity is Severity.unknown and answered < len(answers) and records:
        silent = [c.input for c in coverage if c.status is CoverageStatus.not_understood]
        conclusion = [conclusion[0], f"No activity finding on the nodes that answered, but {', '.join(silent[:4])} "
                      "gave no answer: a GPU there may be the one that is not working."]
        decides = f"gpu_activity on {', '.join(silent[:4])} (or the job again once they answer)."
    return GpuActivityResult(severity=severity, conclusion=conclusion, decides=decides, coverage=coverage,
                             next_steps=_next_steps(findings), gpus=records, findings=findings,
                             sources=[f"{label}: NVML GPM on every node"], notes=notes)


def _conclusion(records: list[GpuActivity], findings: list[ActivityFinding]) -> list[str]:
    if not records:
        return ["The input holds no activity metric of any GPU (DCGM_FI_PROF_* or DCGM_FI_DEV_GPU_UTIL, dcgmi's "
                "SMACT / TENSO / DRAMA..., dmon's gract / smutil...).",
                "Add the profiling fields to dcgm-exporter's counters CSV, or record `dcgmi dmon -e 203,1002,1003,"
                "1004,1005`."]
    if all(r.support for r in records):
        return [f"No GPU here has activity counters: {records[0].support}"]
    if not findings:
        measured = [r for r in records if r.sm_active is not None]
        if not measured:
            has = sorted({n for r in records for n in METRICS if getattr(r, n) is not None})
            return ["The input has no SM activity (DCGM SM_ACTIVE, dcgmi SMACT, dmon smutil), so busy cannot be told "
                    "from busy doing little" + (f"; it has {', '.join(has)}." if has else "."),
                    "Record DCGM field 1002 (DCGM_FI_PROF_SM_ACTIVE) or `nvidia-smi dmon --gpm-metrics 2,3,5,10`."]
        low = min(measured, key=lambda r: r.median("sm_active") or 0.0)
        sentence = (f"No activity finding over {len(records)} GPU(s): the lowest SM activity is {low.label}'s "
                    f"{_fraction(low.median('sm_active') or 0.0)}")
        if all((r.median("utilization_gpu_pct") or 0.0) < UNDER_LOAD_PCT for r in measured):
            return [sentence + f", and utilization.gpu stays under {UNDER_LOAD_PCT} %: the GPUs are idle, so there is "
                    "nothing for the SM counters to explain.", "Find what the GPU waits for (host, data, a hang)."]
        return [sentence + "."]
    first = findings[0]
    sentences = [f"{first.gpu}: {first.kind.replace('_', ' ')}: {first.evidence}"]
    others = {f.kind for f in findings[1:]}
    if others:
        sentences.append(f"Also: {', '.join(sorted(k.replace('_', ' ') for k in others))} "
                         f"({len(findings) - 1} more finding(s)).")
    sentences.append(first.fix)
    return sentences[:3]


def _next_steps(findings: list[ActivityFinding]) -> list[NextStep]:
    kinds = {f.kind for f in findings}
    steps: list[NextStep] = []
    if kinds & {"low_sm_activity", "memory_bound", "no_tensor_cores"}:
        steps.append(NextStep(branch="gpu_utilization_low", step="trace", action="summarize_trace on one rank's trace",
                              why="Which kernels run and how far apart: launch-bound, small kernels, memory-bound."))
    if "low_sm_activity" in kinds:
        steps.append(NextStep(branch="nccl_hang_or_slow", action="dump_stacks on the job's ranks",
                              why="Whether the 'busy' GPU is a rank waiting in a collective."))
    if "nvlink_idle" in kinds:
        steps.append(NextStep(branch="nccl_hang_or_slow", action="check_interconnect",
                              why="Which transport NCCL chose between these GPUs."))
    if "gpu_below_node" in kinds:
        steps.append(NextStep(branch="straggler", action="find_stragglers on the step logs",
                              why="Whether the GPU below its node slows every step."))
    if not steps:
        steps.append(NextStep(branch="gpu_utilization_low", step="trace", action="summarize_trace",
                              why="No SM-level cause: look for idle gaps between kernels and their causes."))
    return steps


async def gpu_activity(params: GpuActivityInput, ctx: ToolContext) -> GpuActivityResult:
    """What the SMs really do, beside utilization.gpu (which reads 100 % for one tiny kernel running all the time,
    or a rank spinning in an NCCL wait): SM activity and occupancy, tensor / FP16 / FP32 / FP64 pipe activity, DRAM
    bandwidth, PCIe and NVLink throughput per GPU (and MIG instance). Live from NVML GPM (Hopper+, two samples
    interval_s apart; slurm_job / hosts: every node of the job), from dcgm-exporter (a saved /metrics page, or url
    scraped on loopback / allow_host), or from saved `dcgmi dmon` / `nvidia-smi dmon --gpm-metrics` captures.
    Verdicts: low_sm_activity (small kernels, launch-bound or an NCCL wait), no_tensor_cores, memory_bound,
    nvlink_idle, gpu_below_node (straggler candidate). A metric the source lacks is listed as unavailable, never 0.
    """
    if params.files and params.url:
        raise BadInput("give files or url, not both.", "Read the saved pages, or scrape the exporter.")
    backend = job_backend(params, ctx)
    if backend is not None:
        if params.files or params.url:
            raise BadInput("a job-level call samples every node live; files and url are this host's.",
                           "Drop files / url, or drop slurm_job / hosts.")
        extra = ["--samples", str(params.samples), "--interval-s", f"{params.interval_s:g}"]
        answers = await collect_from_nodes(backend, "gpu-activity", GpuActivityResult, ctx, params.node_timeout_s,
                                           extra)
        return _merge_nodes(backend.label, answers)
    deadline = ctx.started + ctx.timeout_s - 1.0
    notes: list[str] = []
    wanted = params.samples * params.interval_s
    if not params.files and wanted > ctx.remaining_s() - 1:
        raise BadInput(f"samples x interval_s = {wanted:g} s does not fit the call's {ctx.timeout_s:g} s.",
                       "Take fewer samples or a shorter interval, or raise --timeout.")
    if params.url:
        records, notes, one = await _scrape(params, ctx, params.url)
        sources, coverage = [params.url], [one]
    elif params.files:
        records, sources, notes, coverage = await anyio.to_thread.run_sync(_read_files, params, ctx,
                                                                           abandon_on_cancel=True)
    else:
        ctx.progress.update(0, wanted, f"sampling GPM for {wanted:g} s")
        records = await anyio.to_thread.run_sync(live_activity, params.interval_s, params.samples, deadline,
                                                 abandon_on_cancel=True)
        sources, coverage = ["NVML GPM"], [_live_coverage(records)]
    if any((r.median("sm_active") or 0.0) > 1.0 for r in records):
        notes.append("An SM activity above 1.0 is DCGM's known overcount on MIG (NVIDIA/DCGM#152), not real.")
    findings = activity_findings(records)
    severity, decides = _judged(records, findings, coverage)
    conclusion = _conclusion(records, findings)
    not_read = [c.input for c in coverage if c.status is CoverageStatus.not_understood]
    if severity is Severity.unknown and not_read and any(_judgeable(r) for r in records):
        conclusion = [f"Cannot judge every input: {', '.join(not_read[:3])} held no activity value.",
                      f"Of what was read: {conclusion[0][:1].lower()}{conclusion[0][1:]}"]
        decides = (f"{not_read[0]} as one of: {'; '.join(FORMATS_KNOWN[:3])} (or the call without it, for the "
                   "GPUs the other inputs cover).")
    return GpuActivityResult(
        severity=severity, conclusion=conclusion, decides=decides, coverage=coverage,
        next_steps=_next_steps(findings), gpus=records, findings=findings, sources=sources, notes=notes,
        node=node_name() if params.local else None)
