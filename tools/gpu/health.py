"""health_check: one bounded snapshot (<= 3 s) of the GPUs (NVML) and the host (psutil), with findings.

SOP: the entry step ("run the health checks at once"); findings point to straggler (thermal, power,
clocks), gpu_hardware (ECC, Xid, memory repair, PCIe width), gpu_utilization_low (CPU, swap, iowait,
shared GPU) and oom (GPU memory nearly full).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread
from pydantic import BaseModel, Field

from tools.cluster import collect_from_nodes, discover_job, job_backend, node_name, slurm_pids_on_this_node
from tools.core.context import ToolContext
from tools.core.errors import BadInput, TriageError, Unavailable
from tools.core.limits import (
    CMDLINE_MAX_CHARS,
    HEALTH_DEFAULT_SAMPLE_S,
    HEALTH_DEFAULT_TOP_PROCESSES,
    HEALTH_MAX_JOB_PIDS,
    HEALTH_MAX_KERNEL_LOG_LINES,
    HEALTH_MAX_SAMPLE_S,
    HEALTH_MAX_TOP_PROCESSES,
    HEALTH_MAX_TOTAL_S,
    HEALTH_MIN_SAMPLE_S,
    STACK_MAX_PROCESSES,
)
from tools.core.models import (
    Coverage,
    CoverageStatus,
    Finding,
    NextStep,
    NodesInput,
    Severity,
    Table,
    ToolResult,
    worst,
)
from tools.core.proc import run_program
from tools.core.thresholds import CORE_SATURATED_PCT
from tools.core.xid import xid_meaning
from tools.gpu import nvml as _nvml
from tools.gpu.activity import ActivityFinding, GpuActivity, activity_findings, live_activity
from tools.gpu.checks import (
    GpuValues,
    HostValues,
    by_severity,
    gpu_findings,
    host_findings,
)
from tools.gpu.health_nodes import NodeHealthRow, NodeSpreadRow, merge_health_findings, node_measures

__all__ = [
    "GpuHealth", "GpuProcess", "HealthCheckInput", "HealthCheckResult", "HostHealth", "RankPlacement", "gpu_values",
    "health_check",
    "kernel_findings", "parse_kernel_log",
]

MIB = 1024 * 1024
# NVML and the kernel log get this long; a lost GPU can make NVML calls hang.
_NVML_TIMEOUT_S = 2.5
_DMESG_TIMEOUT_S = 1.5

# What health_check reads, named on a source it could not use.
_SOURCES = ("NVML (libnvidia-ml from the NVIDIA driver)", "the kernel log (dmesg) for NVRM: Xid lines",
            "/proc through psutil")
_COLLECTOR = ("the node's collector answer (gpu-triage health-check --local --json)",)
_XID_LINE = re.compile(r"NVRM: Xid \((?P<where>[^)]*)\): (?P<code>\d+)")


class HealthCheckInput(NodesInput):
    sample_s: float = Field(
        default=HEALTH_DEFAULT_SAMPLE_S, ge=HEALTH_MIN_SAMPLE_S, le=HEALTH_MAX_SAMPLE_S,
        description="Seconds over which CPU, disk and process rates are sampled.",
    )
    top_processes: int = Field(
        default=HEALTH_DEFAULT_TOP_PROCESSES, ge=0, le=HEALTH_MAX_TOP_PROCESSES,
        description="How many processes to list, busiest CPU first.",
    )
    job_pids: list[int] = Field(
        default_factory=list, max_length=HEALTH_MAX_JOB_PIDS,
        description="PIDs of the job (e.g. the torchrun launcher). GPU processes outside these process "
        "trees are flagged as foreign. Empty: a GPU shared by two unrelated process trees is flagged.",
    )
    include_kernel_log: bool = Field(default=True, description="Scan the kernel log for NVRM/Xid lines.")


class GpuHealth(BaseModel):
    index: int
    name: str | None = None
    bus_id: str | None = None
    utilization_gpu_pct: int | None = Field(None, description="nvidia-smi utilization.gpu")
    memory_used_mib: float | None = Field(None, description="nvidia-smi memory.used")
    memory_total_mib: float | None = Field(None, description="nvidia-smi memory.total")
    sm_clock_mhz: int | None = Field(None, description="nvidia-smi clocks.sm")
    sm_clock_max_mhz: int | None = Field(None, description="nvidia-smi clocks.max.sm")
    temperature_c: int | None = Field(None, description="nvidia-smi temperature.gpu")
    power_draw_w: float | None = Field(None, description="nvidia-smi power.draw")
    power_limit_w: float | None = Field(None, description="nvidia-smi enforced.power.limit")
    throttle_reasons: list[str] | None = Field(None, description="active clocks_event_reasons.*")
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    ecc_uncorrected_volatile: int | None = Field(None, description="ecc.errors.uncorrected.volatile.total")
    retired_pages: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    unavailable: dict[str, str] = Field(default_factory=dict, description="Fields NVML could not give, and why.")


class GpuProcess(BaseModel):
    gpu_index: int
    pid: int
    name: str = Field(description="Process name, or why it is unknown.")
    used_memory_mib: float | None = None
    foreign: bool = Field(description="Not part of the job (see job_pids).")


class ProcessRow(BaseModel):
    pid: int
    name: str
    cpu_pct: float
    rss_mib: float
    status: str
    cmdline: str = Field(description=f"Command line cut to {CMDLINE_MAX_CHARS} characters, secrets masked.")


class HostHealth(BaseModel):
    cpu_count: int
    load_avg: list[float] | None = Field(None, description="1, 5 and 15 minute load averages.")
    cpu_per_core_pct: list[float]
    iowait_pct: float | None = None
    memory_total_mib: float
    memory_available_mib: float
    swap_total_mib: float
    swap_used_mib: float
    swapping_mib_s: float = Field(description="Swap-in plus swap-out during the sample.")
    disk_read_mib_s: float | None = None
    disk_write_mib_s: float | None = None


class KernelEvent(BaseModel):
    line: str
    xid: int | None = None
    severity: Severity


class RankPlacement(BaseModel):
    """A rank of the job on this node and the GPU it computes on (collector mode; what find_stragglers needs to
    check a flagged rank's own GPU on a multi-node job)."""

    rank: int
    pid: int
    local_rank: int | None = None
    gpu: int | None = Field(default=None, description="From CUDA_VISIBLE_DEVICES and LOCAL_RANK; None if unknown.")


class HealthCheckResult(ToolResult):
    sampled_at: str = Field(description="UTC time of the snapshot.")
    nvml: str = Field(description="'ok', or 'unavailable: <reason>'.")
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    findings: list[Finding]
    gpus: list[GpuHealth]
    gpu_processes: list[GpuProcess]
    kernel_log: str = Field(description="'scanned', 'skipped', or why it could not be read.")
    kernel_events: list[KernelEvent]
    host: HostHealth | None = Field(description="This host (none for a job-level call: see nodes).")
    top_processes: list[ProcessRow]
    node: str | None = Field(default=None, description="Collector mode: the node this answer is from.")
    ranks_here: list[RankPlacement] = Field(default_factory=list, description="Collector mode: the job's ranks on "
                                            "this node and their GPUs.")
    nodes: list[NodeHealthRow] = Field(default_factory=list, description="Job-level calls: the nodes that failed "
                                       "a check, stand out from the others or gave no answer; the rest in one row.")
    node_spread: list[NodeSpreadRow] = Field(default_factory=list, description="Job-level calls: each measure's "
                                             "min/median/max over the nodes, with the worst node.")
    activity: list[GpuActivity] = Field(default_factory=list, description="What the SMs do (NVML GPM, Hopper+), "
                                        "over the sample window: see gpu_activity.")
    activity_note: str | None = Field(default=None, description="Why some GPUs have no activity counters.")

    narrow_hint = "lower top_processes, or pass job_pids so only the job's GPUs' processes matter"

    def tables(self) -> list[Table]:
        return [
            Table("Findings", ["check", "value", "threshold", "severity", "meaning", "SOP branch"],
                  [[f.check, f.value, f.threshold, f.severity.value, f.meaning, f.sop_branch or ""]
                   for f in self.findings], "findings"),
            Table("GPUs", ["gpu", "name", "util %", "memory MiB", "SM MHz", "temp C", "power W", "PCIe",
                           "throttle"],
                  [[str(g.index), _s(g.name), _s(g.utilization_gpu_pct), _pair(g.memory_used_mib, g.memory_total_mib),
                    _pair(g.sm_clock_mhz, g.sm_clock_max_mhz), _s(g.temperature_c),
                    _pair(g.power_draw_w, g.power_limit_w),
                    f"Gen{_s(g.pcie_gen_current)} x{_s(g.pcie_width_current)}",
                    ",".join(g.throttle_reasons) if g.throttle_reasons else _s(g.throttle_reasons and "none")]
                   for g in self.gpus], "gpus"),
            Table("What the SMs do (GPM)", ["gpu", "util %", "SM active", "SM occupancy", "tensor", "DRAM"],
                  [[a.label, *(a.cell(n) for n in ("utilization_gpu_pct", "sm_active", "sm_occupancy",
                                                   "tensor_active", "dram_active"))] for a in self.activity],
                  "activity", note=self.activity_note or ""),
            Table("Nodes", ["node", "status", "GPUs", "why"],
                  [[n.node, n.status, _s(n.gpus), n.why] for n in self.nodes], "nodes"),
            Table("Across nodes", ["measure", "nodes", "min", "median", "max", "worst node"],
                  [[r.measure, str(r.nodes), f"{r.min:g}", f"{r.median:g}", f"{r.max:g}", r.worst_node]
                   for r in self.node_spread], "node_spread"),
            Table("Host", ["cores", "load 1/5/15 min", "per-core busy % (min/median/max)", "iowait %",
                           "memory available MiB", "swap used MiB", "disk read/write MiB/s"],
                  [_host_row(self.host)] if self.host else []),
            Table("GPU processes", ["gpu", "pid", "name", "memory MiB", "foreign"],
                  [[str(p.gpu_index), str(p.pid), p.name, _s(p.used_memory_mib), "yes" if p.foreign else "no"]
                   for p in self.gpu_processes], "gpu_processes"),
            Table("Kernel log (NVRM/Xid)", ["severity", "xid", "line"],
                  [[e.severity.value, _s(e.xid), e.line] for e in self.kernel_events], "kernel_events"),
            Table("Top processes by CPU", ["pid", "name", "cpu %", "rss MiB", "state", "command"],
                  [[str(p.pid), p.name, f"{p.cpu_pct:.0f}", f"{p.rss_mib:.0f}", p.status, p.cmdline]
                   for p in self.top_processes], "top_processes"),
        ]


def _host_row(host: HostHealth) -> list[str]:
    cores = sorted(host.cpu_per_core_pct)
    busy = f"{cores[0]:.0f}/{statistics.median(cores):.0f}/{cores[-1]:.0f}" if cores else "n/a"
    load = "/".join(f"{v:.2f}" for v in host.load_avg) if host.load_avg else "n/a"
    disk = (f"{host.disk_read_mib_s:.1f}/{host.disk_write_mib_s:.1f}"
            if host.disk_read_mib_s is not None and host.disk_write_mib_s is not None else "n/a")
    iowait = "n/a" if host.iowait_pct is None else f"{host.iowait_pct:.1f}"
    return [str(host.cpu_count), load, busy, iowait,
            f"{host.memory_available_mib:.0f} of {host.memory_total_mib:.0f}",
            f"{host.swap_used_mib:.0f} of {host.swap_total_mib:.0f}", disk]


def _s(value: object) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if isinstance(value, float) else str(value)


def _pair(value: object, limit: object) -> str:
    return f"{_s(value)}/{_s(limit)}"


# ---------------------------------------------------------------- NVML


def _known(value: Any) -> Any:
    return None if isinstance(value, _nvml.Missing) else value


def _gpu_from_nvml(device: _nvml.NvmlDevice) -> GpuHealth:
    unavailable = {
        name: value.reason for name, value in vars(device).items() if isinstance(value, _nvml.Missing)
    }
    mask = _known(device.throttle_reasons_mask)
    reasons = None if mask is None else [n for bit, n in _nvml.THROTTLE_REASON_BITS.items() if mask & bit]
    return GpuHealth(
        index=device.index,
        name=_known(device.name),
        bus_id=_known(device.bus_id),
        utilization_gpu_pct=_known(device.utilization_gpu_pct),
        memory_used_mib=_known(device.memory_used_mib),
        memory_total_mib=_known(device.memory_total_mib),
        sm_clock_mhz=_known(device.sm_clock_mhz),
        sm_clock_max_mhz=_known(device.sm_clock_max_mhz),
        temperature_c=_known(device.temperature_c),
        power_draw_w=_known(device.power_draw_w),
        power_limit_w=_known(device.power_limit_w),
        throttle_reasons=reasons,
        pcie_gen_current=_known(device.pcie_gen_current),
        pcie_gen_max=_known(device.pcie_gen_max),
        pcie_width_current=_known(device.pcie_width_current),
        pcie_width_max=_known(device.pcie_width_max),
        ecc_uncorrected_volatile=_known(device.ecc_uncorrected_volatile),
        retired_pages=_known(device.retired_pages),
        retired_pages_pending=_known(device.retired_pages_pending),
        remapped_rows_uncorrectable=_known(device.remapped_rows_uncorrectable),
        remapped_rows_pending=_known(device.remapped_rows_pending),
        remapped_rows_failure=_known(device.remapped_rows_failure),
        unavailable=unavailable,
    )


class _NvmlSnapshot:
    def __init__(self) -> None:
        self.status = "ok"
        self.driver: str | None = None
        self.cuda: str | None = None
        self.devices: list[_nvml.NvmlDevice] = []


def _read_nvml() -> _NvmlSnapshot:
    snapshot = _NvmlSnapshot()
    try:
        with _nvml.open_session() as session:
            snapshot.driver = _known(session.driver_version())
            snapshot.cuda = _known(session.cuda_driver_version())
            snapshot.devices = [session.device(i) for i in range(session.device_count())]
    except TriageError as exc:
        snapshot.status = "unavailable: " + exc.message.removeprefix("NVML unavailable: ").rstrip(".")
    return snapshot


# ---------------------------------------------------------------- processes


def _process_tree_root(pid: int, job_pids: set[int]) -> tuple[str, bool]:
    """(tree id, belongs to job) for a GPU process: its top-most ancestor below init."""
    import psutil

    try:
        proc = psutil.Process(pid)
        chain = [proc, *proc.parents()]
    except psutil.Error:
        return f"pid {pid}", False
    chain_pids = {p.pid for p in chain}
    in_job = bool(chain_pids & job_pids)
    roots = [p for p in chain if p.pid > 1]
    return f"tree {roots[-1].pid if roots else pid}", in_job


def _process_name(pid: int) -> str:
    import psutil

    try:
        return psutil.Process(pid).name()
    except psutil.NoSuchProcess:
        return "not visible (other PID namespace or exited)"
    except psutil.AccessDenied:
        return "access denied"


def _gpu_processes(devices: list[_nvml.NvmlDevice], job_pids: set[int]) -> list[GpuProcess]:
    rows: list[GpuProcess] = []
    for device in devices:
        procs = device.processes if isinstance(device.processes, list) else []
        trees = {p.pid: _process_tree_root(p.pid, job_pids) for p in procs}
        if job_pids:
            foreign = {pid for pid, (_, in_job) in trees.items() if not in_job}
        else:
            # No job given: the tree holding the most GPU memory is the job, other trees are foreign.
            memory_by_tree: dict[str, float] = {}
            for p in procs:
                tree = trees[p.pid][0]
                memory_by_tree[tree] = memory_by_tree.get(tree, 0.0) + (p.used_memory_mib or 0.0)
            main = max(memory_by_tree, key=lambda t: memory_by_tree[t]) if memory_by_tree else None
            foreign = {pid for pid, (tree, _) in trees.items() if tree != main}
        for p in procs:
            rows.append(GpuProcess(gpu_index=device.index, pid=p.pid, name=_process_name(p.pid),
                                   used_memory_mib=p.used_memory_mib, foreign=p.pid in foreign))
    return rows


# ---------------------------------------------------------------- host


class _HostSample:
    def __init__(self) -> None:
        self.host: HostHealth | None = None
        self.top: list[ProcessRow] = []
        self.blocked: list[str] = []


async def _sample_host(sample_s: float, top_n: int, sample: _HostSample) -> None:
    import psutil

    from tools.core.redact import redact_text

    attrs = ["pid", "name", "cmdline", "status", "memory_info"]
    own = os.getpid()  # the checker itself is busy while it samples; leave it out
    procs = [p for p in psutil.process_iter(attrs) if p.pid != own]
    for proc in procs:
        try:
            proc.cpu_percent(None)
        except psutil.Error:
            pass
    psutil.cpu_percent(percpu=True)
    times_before = psutil.cpu_times()
    disk_before = psutil.disk_io_counters()
    swap_before = psutil.swap_memory()
    started = time.monotonic()
    await anyio.sleep(sample_s)
    elapsed = max(time.monotonic() - started, 1e-3)
    per_core = psutil.cpu_percent(percpu=True)
    times_after = psutil.cpu_times()
    disk_after = psutil.disk_io_counters()
    memory = psutil.virtual_memory()
    swap = psutil.swap_memory()

    total_delta = sum(times_after) - sum(times_before)
    iowait = None
    if hasattr(times_after, "iowait") and total_delta > 0:
        iowait = 100.0 * (times_after.iowait - times_before.iowait) / total_delta
    swapped = (swap.sin - swap_before.sin) + (swap.sout - swap_before.sout)
    disk_read = disk_write = None
    if disk_before is not None and disk_after is not None:
        disk_read = (disk_after.read_bytes - disk_before.read_bytes) / MIB / elapsed
        disk_write = (disk_after.write_bytes - disk_before.write_bytes) / MIB / elapsed
    try:
        load: list[float] | None = list(psutil.getloadavg())
    except (OSError, AttributeError):
        load = None
    sample.host = HostHealth(
        cpu_count=psutil.cpu_count() or len(per_core),
        load_avg=load,
        cpu_per_core_pct=per_core,
        iowait_pct=iowait,
        memory_total_mib=memory.total / MIB,
        memory_available_mib=memory.available / MIB,
        swap_total_mib=swap.total / MIB,
        swap_used_mib=swap.used / MIB,
        swapping_mib_s=swapped / MIB / elapsed,
        disk_read_mib_s=disk_read,
        disk_write_mib_s=disk_write,
    )
    rows: list[ProcessRow] = []
    for proc in procs:
        try:
            cpu = proc.cpu_percent(None)
            info = proc.info
            status = str(info.get("status") or "?")
            name = str(info.get("name") or "?")
            if status == psutil.STATUS_DISK_SLEEP:
                sample.blocked.append(f"{name}[{proc.pid}]")
            cmdline = " ".join(info.get("cmdline") or []) or name
            rss = info["memory_info"].rss / MIB if info.get("memory_info") else 0.0
        except psutil.Error:
            continue
        rows.append(ProcessRow(pid=proc.pid, name=name, cpu_pct=cpu, rss_mib=rss, status=status,
                               cmdline=redact_text(cmdline)[:CMDLINE_MAX_CHARS]))
    rows.sort(key=lambda r: r.cpu_pct, reverse=True)
    sample.top = rows[:top_n]


# ---------------------------------------------------------------- kernel log


_FALLEN_OFF = re.compile(r"fallen off the bus", re.IGNORECASE)


def parse_kernel_log(text: str) -> list[KernelEvent]:
    """NVRM / Xid lines of a kernel log, most severe first, newest first within a severity, bounded.

    Newer drivers report a lost GPU as a multi-line NVRM message without an Xid; it is read as Xid 79.
    """
    events: list[KernelEvent] = []
    for raw in text.splitlines():
        if "NVRM" not in raw and "Xid" not in raw:
            continue
        match = _XID_LINE.search(raw)
        code = int(match.group("code")) if match else 79 if _FALLEN_OFF.search(raw) else None
        severity = xid_meaning(code)[0] if code is not None else Severity.ok
        events.append(KernelEvent(line=" ".join(raw.split())[:200], xid=code, severity=severity))
    events.reverse()
    events.sort(key=lambda e: e.severity.rank, reverse=True)
    return events[:HEALTH_MAX_KERNEL_LOG_LINES]


async def _read_kernel_log(timeout_s: float) -> tuple[str, list[KernelEvent]]:
    try:
        output = await run_program("dmesg", [], timeout_s=timeout_s)
    except TriageError as exc:
        return f"unreadable: {exc.message}", []
    if output.returncode != 0:
        reason = output.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"unreadable: {reason[-1] if reason else f'dmesg exit {output.returncode}'}", []
    return "scanned", parse_kernel_log(output.stdout.decode("utf-8", "replace"))


def kernel_findings(events: list[KernelEvent]) -> list[Finding]:
    codes: dict[int, int] = {}
    for e in events:
        if e.xid is not None:
            codes[e.xid] = codes.get(e.xid, 0) + 1
    findings = []
    for code, count in sorted(codes.items()):
        severity, meaning = xid_meaning(code)
        findings.append(Finding(check=f"kernel log Xid {code}", value=f"{count} line(s)", threshold="any Xid",
                                severity=severity, meaning=meaning, sop_branch="gpu_hardware"))
    return findings


# ---------------------------------------------------------------- the tool


async def health_check(params: HealthCheckInput, ctx: ToolContext) -> HealthCheckResult:
    """One bounded (<= 3 s) snapshot of every GPU and the host, with a findings table.

    Use first, for any symptom: it names a hot, throttled, power-capped, PCIe-degraded or ECC-failing
    GPU, a foreign process on a GPU, and host CPU/memory/swap/iowait pressure. Without an NVIDIA
    driver the GPU part is one 'NVML unavailable' row (unknown: GPU health is not judged) and the host
    part still runs; an unreadable kernel log leaves past Xid errors unjudged. Read-only.
    """
    backend = job_backend(params, ctx)
    if backend is not None:
        if params.job_pids:
            raise BadInput("job_pids are pids of one node; a job-level call cannot use them.",
                           "Drop job_pids, or call health_check on that node alone.")
        extra = ["--sample-s", f"{params.sample_s:g}", "--top-processes", str(params.top_processes),
                 "--include-kernel-log" if params.include_kernel_log else "--no-include-kernel-log"]
        return _merge_nodes(backend.label, await collect_from_nodes(backend, "health-check", HealthCheckResult, ctx,
                                                                    params.node_timeout_s, extra))
    sampled_at = datetime.now(UTC).isoformat(timespec="seconds")
    nvml_snapshot = _NvmlSnapshot()
    host = _HostSample()
    kernel: tuple[str, list[KernelEvent]] = ("skipped", [])
    budget = min(HEALTH_MAX_TOTAL_S, ctx.remaining_s())

    async def nvml_part() -> None:
        nonlocal nvml_snapshot
        with anyio.move_on_after(min(_NVML_TIMEOUT_S, budget)) as scope:
            nvml_snapshot = await anyio.to_thread.run_sync(_read_nvml, abandon_on_cancel=True)
        if scope.cancelled_caught:
            nvml_snapshot.status = f"unavailable: NVML did not answer within {_NVML_TIMEOUT_S:g} s (a lost GPU?)"

    async def kernel_part() -> None:
        nonlocal kernel
        kernel = await _read_kernel_log(min(_DMESG_TIMEOUT_S, budget))

    activity: list[GpuActivity] = []
    window_s = max(0.1, min(params.sample_s, budget - 0.5))  # what the host sample and GPM are taken over

    async def activity_part() -> None:
        # GPM needs two samples apart: taken over the same window as the host sample, beside the snapshot.
        nonlocal activity
        with anyio.move_on_after(min(_NVML_TIMEOUT_S, budget)):
            try:
                activity = await anyio.to_thread.run_sync(live_activity, window_s, 1, time.monotonic() + budget,
                                                             abandon_on_cancel=True)
            except Unavailable:
                activity = []  # the snapshot's NVML row says why

    async with anyio.create_task_group() as group:
        group.start_soon(nvml_part)
        group.start_soon(activity_part)
        group.start_soon(_sample_host, window_s, params.top_processes, host)
        if params.include_kernel_log:
            group.start_soon(kernel_part)

    assert host.host is not None
    gpus = [_gpu_from_nvml(d) for d in nvml_snapshot.devices]
    gpu_procs = _gpu_processes(nvml_snapshot.devices, set(params.job_pids))
    foreign_by_gpu: dict[int, list[str]] = {}
    for p in gpu_procs:
        if p.foreign:
            foreign_by_gpu.setdefault(p.gpu_index, []).append(f"{p.name}[{p.pid}]")

    findings: list[Finding] = []
    if nvml_snapshot.status != "ok":
        hung = "did not answer" in nvml_snapshot.status
        # Without NVML nothing was read that would show a GPU fault: the GPU part is unknown, not healthy.
        findings.append(Finding(check="NVML", value=f"NVML {nvml_snapshot.status}", threshold="driver present",
                                severity=Severity.warn if hung else Severity.unknown,
                                meaning="NVML hangs: a GPU may be lost; host checks still ran" if hung else
                                "no NVIDIA driver visible here, so GPU health cannot be judged; host checks still ran"))
    elif not gpus:
        findings.append(Finding(check="NVML", value="0 GPUs", threshold=">= 1 GPU", severity=Severity.unknown,
                                meaning="NVML lists no GPU here (a container without GPU access?), so GPU health "
                                "cannot be judged; host checks still ran"))
    findings += gpu_findings([gpu_values(g, foreign_by_gpu.get(g.index, [])) for g in gpus])
    busy = sum(1 for pct in host.host.cpu_per_core_pct if pct >= CORE_SATURATED_PCT)
    findings += host_findings(HostValues(
        cpu_count=host.host.cpu_count, load_1m=host.host.load_avg[0] if host.host.load_avg else None,
        busy_cores=busy, memory_total_mib=host.host.memory_total_mib,
        memory_available_mib=host.host.memory_available_mib, swap_used_mib=host.host.swap_used_mib,
        swapping_mib_s=host.host.swapping_mib_s, iowait_pct=host.host.iowait_pct, blocked_processes=host.blocked,
    ))
    findings += [_activity_row(f) for f in activity_findings(activity)]
    kernel_status, events = kernel
    findings += kernel_findings(events)
    if kernel_status != "scanned" and params.include_kernel_log:
        # NVML shows a GPU's state now; an Xid the driver logged (a GPU that fell off the bus and came back, a
        # GSP timeout, an NVLink error) is in the kernel log only.
        findings.append(Finding(check="kernel log", value=kernel_status, threshold="readable",
                                severity=Severity.unknown, meaning="Xid lines not checked; run as root (or with "
                                "`sudo dmesg`) or read /var/log/kern.log", sop_branch="gpu_hardware"))
    findings = by_severity(findings)
    severity = worst(f.severity for f in findings)
    coverage = _coverage(nvml_snapshot, len(gpus), host, window_s, kernel_status if params.include_kernel_log
                         else None, len(events))
    return HealthCheckResult(
        severity=severity,
        conclusion=_conclude(findings, nvml_snapshot, len(gpus)),
        next_steps=_next_steps(findings),
        coverage=coverage,
        decides=_decides(coverage) if severity is Severity.unknown else None,
        sampled_at=sampled_at,
        nvml=nvml_snapshot.status,
        driver_version=nvml_snapshot.driver,
        cuda_driver_version=nvml_snapshot.cuda,
        findings=findings,
        gpus=gpus,
        gpu_processes=gpu_procs,
        kernel_log=kernel_status,
        kernel_events=events,
        host=host.host,
        top_processes=host.top,
        node=node_name() if params.local else None,
        ranks_here=await _ranks_here() if params.local else [],
        activity=[a for a in activity if a.support is None],
        activity_note=next((a.support for a in activity if a.support), None),
    )


def _coverage(nvml: _NvmlSnapshot, gpu_count: int, host: _HostSample, window_s: float, kernel: str | None,
              kernel_lines: int) -> list[Coverage]:
    """One entry per source health_check reads: NVML (the GPUs), /proc (the host) and the kernel log."""
    entries: list[Coverage] = []
    if nvml.status != "ok":
        entries.append(Coverage.not_understood("NVML", f"{nvml.status}: no GPU was read, so GPU health cannot be "
                                               "judged", _SOURCES))
    elif not gpu_count:
        entries.append(Coverage.not_understood("NVML", "NVML answered but lists no GPU", _SOURCES))
    else:
        entries.append(Coverage.read("NVML", f"{gpu_count} GPU(s), driver {nvml.driver or 'unknown'}"))
    if host.host is not None:
        entries.append(Coverage.read("/proc", f"CPU, memory, swap and disk over {window_s:.1f} s; "
                                     f"{len(host.top)} busiest process(es) listed"))
    if kernel is not None:
        entries.append(Coverage.read("kernel log (dmesg)", f"{kernel_lines} NVRM/Xid line(s)") if kernel == "scanned"
                       else Coverage.not_understood("kernel log (dmesg)", f"{kernel}; Xid lines not checked",
                                                    _SOURCES))
    return entries


def _decides(coverage: list[Coverage]) -> str:
    missing = {c.input for c in coverage if c.status is CoverageStatus.not_understood}
    wanted = []
    if "NVML" in missing:
        wanted.append("health_check on a node where NVML sees the job's GPUs (the NVIDIA driver loaded, the GPUs "
                      "visible to this container)")
    if "kernel log (dmesg)" in missing:
        wanted.append("the kernel log's NVRM: Xid lines (`sudo dmesg -T | grep -E 'NVRM|Xid'` or /var/log/kern.log)")
    return ("; ".join(wanted) or "health_check on the job's node") + "."


def _activity_row(finding: ActivityFinding) -> Finding:
    return Finding(check=f"{finding.gpu} {finding.kind.replace('_', ' ')}", value=finding.evidence,
                   threshold=finding.threshold, severity=finding.severity,
                   meaning=finding.fix, sop_branch=finding.sop_branch)


async def _ranks_here() -> list[RankPlacement]:
    """The job's ranks on this node (this Slurm job's pids when run as its step) with the GPU each computes on."""
    within = await slurm_pids_on_this_node()
    found, _ = await anyio.to_thread.run_sync(discover_job, STACK_MAX_PROCESSES, within)
    return [RankPlacement(rank=p.rank, pid=p.pid, local_rank=p.local_rank, gpu=p.gpu) for p in found
            if p.rank is not None]


def _merge_nodes(label: str, answers: dict[str, HealthCheckResult | str]) -> HealthCheckResult:
    """One health result for a job from each node's collector answer (or the reason there is none)."""
    per_node: dict[str, tuple[list[Finding], dict[str, float], int | None] | str] = {}
    drivers: set[str] = set()
    coverage: list[Coverage] = []
    for node, result in answers.items():
        if isinstance(result, str):
            per_node[node] = result
            coverage.append(Coverage.not_understood(node, f"no answer: {result}", _COLLECTOR))
            continue
        coverage.append(_node_coverage(node, result))
        if result.driver_version:
            drivers.add(result.driver_version)
        gpus = [g.model_dump() for g in result.gpus]
        host = None
        if result.host is not None:
            host = {"load_1m": result.host.load_avg[0] if result.host.load_avg else None,
                    "cpu_count": float(result.host.cpu_count), "memory_total_mib": result.host.memory_total_mib,
                    "memory_available_mib": result.host.memory_available_mib}
        per_node[node] = (result.findings, node_measures(gpus, host), len(result.gpus) if result.nvml == "ok"
                          else None)
    findings, rows, spread = merge_health_findings(per_node)
    if len(drivers) > 1:
        findings.append(Finding(check="driver versions across nodes", value=", ".join(sorted(drivers)),
                                threshold="one version", severity=Severity.warn, sop_branch="gpu_hardware",
                                meaning="nodes run different NVIDIA drivers: NCCL and CUDA behaviour can differ"))
        findings = by_severity(findings)
    answered = sum(1 for v in per_node.values() if not isinstance(v, str))
    severity = worst(f.severity for f in findings)
    odd = [r for r in rows if r.status in ("crit", "warn", "stands_out", "no_answer", "unknown")]
    conclusion = [f"{label}: {answered} of {len(per_node)} nodes answered."]
    if odd:
        lead = odd[0]
        conclusion.append(f"{len(odd)} node(s) need a look; first {lead.node} ({lead.status}): {lead.why}.")
        crit = [f for f in findings if f.severity is Severity.crit] or findings
        conclusion.append(f"It means: {crit[0].meaning}.")
    else:
        conclusion.append("Every node passes every check and none stands out from the others.")
    unjudged = [c.input for c in coverage if c.status is not CoverageStatus.read]
    return HealthCheckResult(
        severity=severity, conclusion=conclusion[:3], next_steps=_next_steps(findings), coverage=coverage,
        decides=(f"health_check on {', '.join(unjudged[:4])}{' ...' if len(unjudged) > 4 else ''} once NVML, the "
                 "kernel log and the collector answer there." if severity is Severity.unknown else None),
        sampled_at=datetime.now(UTC).isoformat(timespec="seconds"), nvml=f"per node ({label})",
        driver_version=next(iter(drivers)) if len(drivers) == 1 else None, findings=findings, gpus=[],
        gpu_processes=[], kernel_log="per node", kernel_events=[], host=None, top_processes=[], nodes=rows,
        node_spread=spread,
    )


def _node_coverage(node: str, result: HealthCheckResult) -> Coverage:
    """A node that answered: read when its collector read every source, partial (naming what it could not) else."""
    missed = [c for c in result.coverage if c.status is not CoverageStatus.read]
    if not result.coverage:
        return Coverage.partial(node, "its collector said nothing of what it read")
    if missed:
        return Coverage.partial(node, "; ".join(f"{c.input}: {c.detail}" for c in missed))
    return Coverage.read(node, "; ".join(f"{c.input}: {c.detail}" for c in result.coverage))


def gpu_values(g: GpuHealth, foreign: list[str]) -> GpuValues:
    return GpuValues(
        index=g.index, utilization_gpu_pct=g.utilization_gpu_pct, memory_used_mib=g.memory_used_mib,
        memory_total_mib=g.memory_total_mib, sm_clock_mhz=g.sm_clock_mhz, sm_clock_max_mhz=g.sm_clock_max_mhz,
        temperature_c=g.temperature_c, power_draw_w=g.power_draw_w, power_limit_w=g.power_limit_w,
        throttle_reasons=g.throttle_reasons, pcie_gen_current=g.pcie_gen_current, pcie_gen_max=g.pcie_gen_max,
        pcie_width_current=g.pcie_width_current, pcie_width_max=g.pcie_width_max,
        ecc_uncorrected_volatile=g.ecc_uncorrected_volatile, retired_pages=g.retired_pages,
        retired_pages_pending=g.retired_pages_pending, remapped_rows_pending=g.remapped_rows_pending,
        remapped_rows_failure=g.remapped_rows_failure, foreign_processes=foreign,
    )


def _conclude(findings: list[Finding], nvml: _NvmlSnapshot, gpu_count: int) -> list[str]:
    problems = [f for f in findings if f.severity.rank > Severity.unknown.rank]
    unknown = [f for f in findings if f.severity is Severity.unknown]
    gpu_part = (f"{gpu_count} GPU(s) read through NVML." if nvml.status == "ok" and gpu_count
                else "NVML lists no GPU here, so GPU health cannot be judged; only the host was checked."
                if nvml.status == "ok"
                else f"NVML {nvml.status}: GPU health cannot be judged here; only the host was checked.")
    if not problems and unknown:
        rest = "the host checks pass" if nvml.status != "ok" or not gpu_count else "every check read passes"
        return [gpu_part, f"Not judged: {', '.join(f.check for f in unknown)}; {rest}.",
                f"It means: {unknown[0].meaning}."]
    if not problems:
        return [gpu_part, "No problem found: every check is within its threshold.",
                "A healthy snapshot does not explain a slow step: profile a few steps next."]
    crit = [f for f in problems if f.severity is Severity.crit]
    lead = (crit or problems)[0]
    first = f"{len(problems)} problem(s) ({len(crit)} critical); worst: {lead.check} = {lead.value}."
    return [gpu_part, first, f"It means: {lead.meaning}."]


# Only tools that exist are named; the rest of each branch is in its SOP page (sop://<branch>).
_BRANCH_ACTIONS: dict[str, tuple[str, str]] = {
    "gpu_hardware": ("Drain the node and reset or replace the flagged GPU (read `dmesg -T` for Xid lines)",
                     "Hardware faults make every other measurement meaningless until fixed."),
    "straggler": ("Sample the flagged GPU with nvidia_smi_query count=20 interval_s=0.5, then compare per-rank "
                  "step times", "Whether the slow GPU is the rank the others wait for."),
    "gpu_utilization_low": ("Profile a few steps with torch.profiler and read where the GPU idles",
                            "Data loading, launch overhead, sync or exposed communication."),
    "oom": ("Read torch.cuda.memory_stats() or a memory snapshot of the job",
            "Capacity, fragmentation or a transient peak."),
}


def _next_steps(findings: list[Finding]) -> list[NextStep]:
    steps: list[NextStep] = []
    for finding in findings:
        branch = finding.sop_branch
        if (finding.severity.rank <= Severity.unknown.rank or branch is None
                or any(s.branch == branch for s in steps)):
            continue
        if branch in _BRANCH_ACTIONS:
            action, why = _BRANCH_ACTIONS[branch]
            step = NextStep.from_sop(branch, done={"health_check"})
            steps.append(NextStep(branch=branch, action=action, why=why, step=step.step))
        else:
            steps.append(NextStep.from_sop(branch, done={"health_check"}))
    if not steps:
        unjudged = any(f.severity is Severity.unknown for f in findings)
        steps.append(NextStep(branch="triage", step="plan", action="triage_plan(symptom=<the user's words>)",
                              why="Part of this node was not judged (see decides); the plan says what else to read."
                              if unjudged else "A healthy node points at the job itself: data, launch overhead, "
                              "sync, comms."))
    return steps[:3]


