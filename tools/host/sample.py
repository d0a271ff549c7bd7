"""sample_host: is the host starving the GPU through its disks, its CPUs or its memory? A bounded live sample of
this host (two readings of /proc `duration_s` apart: per disk utilisation, throughput, IOPS, await and queue depth
from /proc/diskstats; CPU user/system/iowait/steal from /proc/stat; running and blocked tasks; swap traffic and
MemAvailable; per process CPU % over the window for the job's processes and their workers, and the ones in D state),
or saved captures people paste (issue 32): `iostat -x`, `vmstat`, `mpstat`, `pidstat`, `sar` / `sadf`, `top -b`,
`free`, /proc/pressure (PSI) and `numastat` (readers: tools/host/host_formats.py, top_format.py, memory_formats.py,
sar_format.py, pidstat_format.py; verdicts on them: capture_verdicts.py). A since-boot summary is not a sample.

%util is not saturation on devices that serve requests in parallel (SSD, NVMe, RAID): a disk counts as the
bottleneck by its await and queue depth, with blocked tasks and workers in D state as corroboration.
SOP: gpu_utilization_low (the host side of GPU idle).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
import psutil
from pydantic import BaseModel, Field, model_validator

from tools.cluster import collect_from_nodes, job_backend, node_name, processes_by_match
from tools.core.context import ToolContext
from tools.core.errors import BadInput, UnreadableInput
from tools.core.files import expand_inputs, read_whole_text
from tools.core.limits import (
    HOST_DEFAULT_DURATION_S,
    HOST_MAX_CAPTURE_BYTES,
    HOST_MAX_DURATION_S,
    HOST_MAX_PROCESSES,
    HOST_MIN_DURATION_S,
    HOST_SAMPLE_INTERVAL_S,
    STACK_MAX_MATCH_CHARS,
)
from tools.core.models import (
    Coverage,
    CoverageStatus,
    NextStep,
    NodesInput,
    PathArg,
    Severity,
    Table,
    ToolResult,
    worst,
)
from tools.core.pasted import without_line_markers
from tools.core.periodic import DIPS_FIX, PeriodicDips, dips_across, dips_evidence
from tools.core.thresholds import (
    CPU_IDLE_PCT,
    IO_AWAIT_MS,
    IO_BUSY_AWAIT_MS,
    IO_BUSY_UTIL_PCT,
    IO_QUEUE_DEPTH,
    IO_STALL_MS,
    IOWAIT_PCT,
    MEM_AVAILABLE_PCT,
    WORKER_SATURATED_PCT,
)
from tools.host.capture_verdicts import CPU_FIX, IO_FIX, MEMORY_FIX, CaptureJudgement, judge_captures
from tools.host.host_formats import (
    DiskSample,
    GpuSeries,
    HostCapture,
    is_iostat,
    is_mpstat,
    is_smi_monitor,
    is_vmstat,
    is_vmstat_counters,
    read_iostat,
    read_mpstat,
    read_smi_monitor,
    read_vmstat,
    read_vmstat_counters,
)
from tools.host.job import NodeVerdict, gather_nodes, job_pids_here, label_rows, node_timeout_for
from tools.host.memory_formats import (
    is_free,
    is_meminfo,
    is_numastat,
    is_pressure,
    read_free,
    read_meminfo,
    read_numastat,
    read_pressure,
)
from tools.host.pidstat_format import is_pidstat_text, read_pidstat
from tools.host.sar_format import is_sadf, is_sar, read_sadf, read_sar
from tools.host.top_format import is_top, read_top
from tools.steps import StepTime, mean_step_time

__all__ = ["SampleHostInput", "SampleHostResult", "sample_host"]

_BRANCH = "gpu_utilization_low"
Verdict = Literal["io_bound", "cpu_bound", "main_loop_cpu_bound", "memory_pressure", "none"]
# Memory exhausted explains the rest: the kernel's reclaim shows as system time and re-read pages as iowait.
_PRECEDENCE = {"memory_pressure": 0, "io_bound": 1, "cpu_bound": 2, "main_loop_cpu_bound": 3, "periodic": 4}
_SKIPPED_DISKS = ("loop", "ram", "zram", "sr", "fd")


class SampleHostInput(NodesInput):
    duration_s: float = Field(default=HOST_DEFAULT_DURATION_S, ge=HOST_MIN_DURATION_S, le=HOST_MAX_DURATION_S,
                              description="How long the live sample lasts.")
    pid: list[int] = Field(default_factory=list, max_length=64, description="The job's processes (their children, "
                           "the DataLoader workers, are read too).")
    match: str | None = Field(default=None, min_length=1, max_length=STACK_MAX_MATCH_CHARS,
                              description="A regex (RE2) on the job's command line, instead of pids.")
    cli_positional = "from_files"  # `gpu-triage sample-host iostat.txt vmstat.txt`, as the other readers of files

    from_files: list[PathArg] = Field(default_factory=list, max_length=32, description="Saved `iostat -x` (text or "
                                      "-o JSON), `vmstat`, `nvidia-smi dmon` and `pmon` outputs, inside the roots, "
                                      "instead of a live sample.")
    capture_interval_s: float | None = Field(default=None, gt=0, le=3600, description="Seconds between a dmon "
                                             "capture's rows when it has no Time column (dmon -d; default 1).")
    step_logs: list[PathArg] = Field(default_factory=list, max_length=32, description="The job's step logs (or a "
                                     "glob): a periodic dip's period is then also given in steps.")

    @model_validator(mode="after")
    def _not_both(self) -> SampleHostInput:
        if self.from_files and (self.pid or self.match):
            raise ValueError("from_files is a saved capture: pid and match are for a live sample")
        if (self.from_files or self.pid or self.match) and (self.slurm_job is not None or self.hosts
                                                            or self.hostfile is not None):
            raise ValueError("with slurm_job or hosts each node samples itself and finds the job's ranks: pid, match "
                             "and from_files are for one node")
        return self


class Disk(BaseModel):
    name: str
    node: str | None = None
    util_pct: float | None
    await_ms: float | None
    queue_depth: float | None
    read_mbs: float | None
    write_mbs: float | None
    iops: float | None
    queue_time_ms: float | None = Field(default=None, description="Little's law: requests in flight / IOPS, the "
                                        "time a request spends queued; it decides where await is missing or reads "
                                        "near 0 because few requests complete.")


class Cpu(BaseModel):
    user_pct: float | None
    system_pct: float | None
    iowait_pct: float | None
    steal_pct: float | None
    idle_pct: float | None
    run_queue: float | None
    blocked: float | None
    cores: int | None


def _busy(cpu: Cpu) -> float:
    return 100 - (cpu.idle_pct or 0.0)


class HostProcess(BaseModel):
    pid: int
    node: str | None = None
    role: Literal["trainer", "dataloader_worker", "other"]
    cpu_pct: float = Field(description="% of one core over the window.")
    state: str


class GpuRow(BaseModel):
    gpu: str = Field(description="The GPU index as the capture gives it.")
    source: Literal["dmon", "pmon"]
    columns: list[str] = Field(description="The metric columns the capture has (they depend on -s and the driver).")
    samples: int
    sm_pct_min: float | None = None
    sm_pct_median: float | None = None
    sm_pct_max: float | None = None
    mem_pct_median: float | None = None
    pids: list[int] = Field(default_factory=list, description="pmon: the processes on this GPU.")


class HostFinding(BaseModel):
    kind: Verdict | Literal["periodic"]
    severity: Severity
    evidence: str
    fix: str
    node: str | None = None
    sop_branch: str = _BRANCH


class SampleHostResult(ToolResult):
    verdict: Verdict
    source: str = Field(description="'live N s' or the captures read.")
    disks: list[Disk]
    cpu: Cpu
    processes: list[HostProcess]
    memory_available_pct: float | None
    gpus: list[GpuRow] = Field(default_factory=list, description="The GPUs of dmon / pmon captures.")
    periodic: PeriodicDips | None = Field(default=None, description="Dips that repeat (every N steps: a checkpoint, "
                                          "an eval, logging, a drained prefetch buffer), from the live series or a "
                                          "dmon capture's SM %.")
    findings: list[HostFinding]
    node: str | None = Field(default=None, description="The node this answer is from (collector mode).")
    nodes: list[NodeVerdict] = Field(default_factory=list, description="A job-level call: each node's verdict.")

    narrow_hint = "pass fewer pids"

    def tables(self) -> list[Table]:
        return [
            Table("Findings", ["kind", "severity", "evidence", "fix"],
                  [[f.kind, f.severity.value, f.evidence, f.fix] for f in self.findings], "findings"),
            Table("Nodes", ["node", "verdict", "severity", "evidence"],
                  [[n.node, n.verdict, n.severity.value if n.severity else "-", n.evidence] for n in self.nodes],
                  "nodes"),
            Table("Disks", ["disk", "util %", "await ms", "queue", "read MB/s", "write MB/s", "IOPS"],
                  [[f"{d.node}: {d.name}" if d.node else d.name, _f(d.util_pct), _f(d.await_ms),
                    _f(d.queue_depth), _f(d.read_mbs), _f(d.write_mbs), _f(d.iops)] for d in self.disks], "disks"),
            Table("Processes", ["node", "pid", "role", "CPU % of a core", "state"],
                  [[p.node or "-", str(p.pid), p.role, f"{p.cpu_pct:.0f}", p.state] for p in self.processes],
                  "processes"),
            Table("GPUs (dmon / pmon)", ["gpu", "source", "samples", "SM % min", "median", "max", "mem % median",
                                         "pids"],
                  [[g.gpu, g.source, str(g.samples), _f(g.sm_pct_min), _f(g.sm_pct_median), _f(g.sm_pct_max),
                    _f(g.mem_pct_median), ", ".join(map(str, g.pids[:8]))] for g in self.gpus], "gpus"),
        ]


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# ---------------------------------------------------------------- the live sample


@dataclass
class _Reading:
    at: float
    disks: dict[str, list[int]]  # name -> the diskstats fields after the name
    cpu: list[int]  # /proc/stat's cpu line
    running: int
    blocked: int
    swap: tuple[int, int]  # pswpin, pswpout
    process_cpu: dict[int, float]  # pid -> utime + stime (s)


def _read_proc(pids: list[int]) -> _Reading:
    disks: dict[str, list[int]] = {}
    whole = set(os.listdir("/sys/block")) if os.path.isdir("/sys/block") else set()
    for line in Path("/proc/diskstats").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 14 and (parts[2] in whole or not whole) and not parts[2].startswith(_SKIPPED_DISKS):
            disks[parts[2]] = [int(x) for x in parts[3:14]]
    stat = Path("/proc/stat").read_text().splitlines()
    cpu = [int(x) for x in stat[0].split()[1:]]
    fields = {line.split()[0]: int(line.split()[1]) for line in stat if line.startswith(("procs_running",
                                                                                         "procs_blocked"))}
    vmstat = {k: int(v) for k, v in (line.split() for line in Path("/proc/vmstat").read_text().splitlines())
              if k in ("pswpin", "pswpout")}
    process_cpu: dict[int, float] = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            process_cpu[pid] = times.user + times.system
        except psutil.Error:
            continue
    return _Reading(time.monotonic(), disks, cpu, fields.get("procs_running", 0), fields.get("procs_blocked", 0),
                    (vmstat.get("pswpin", 0), vmstat.get("pswpout", 0)), process_cpu)


def _disks_between(a: _Reading, b: _Reading) -> list[Disk]:
    span = max(b.at - a.at, 1e-3)
    rows = []
    for name, after in b.disks.items():
        before = a.disks.get(name)
        if before is None:
            continue
        d = [x - y for x, y in zip(after, before, strict=True)]
        # reads, reads merged, sectors read, ms reading, writes, merged, sectors written, ms writing, in flight,
        # ms doing I/O, weighted ms (Documentation/admin-guide/iostats.rst)
        ios = d[0] + d[4]
        queue = d[10] / (span * 1000)
        rows.append(Disk(name=name, util_pct=round(min(100.0, 100 * d[9] / (span * 1000)), 1),
                         await_ms=round((d[3] + d[7]) / ios, 2) if ios else None,
                         queue_depth=round(queue, 2), read_mbs=round(d[2] * 512 / 2**20 / span, 2),
                         write_mbs=round(d[6] * 512 / 2**20 / span, 2), iops=round(ios / span, 1),
                         queue_time_ms=round(1000 * queue * span / ios, 1) if ios else None))
    return sorted(rows, key=lambda r: -(r.util_pct or 0))


def _cpu_between(a: _Reading, b: _Reading) -> Cpu:
    d = [x - y for x, y in zip(b.cpu, a.cpu, strict=False)]
    total = sum(d[:8]) or 1  # user nice system idle iowait irq softirq steal
    pct = [round(100 * x / total, 1) for x in d[:8]] + [0.0] * (8 - len(d[:8]))
    return Cpu(user_pct=round(pct[0] + pct[1], 1), system_pct=round(pct[2] + pct[5] + pct[6], 1), iowait_pct=pct[4],
               steal_pct=pct[7], idle_pct=pct[3], run_queue=float(max(a.running, b.running)),
               blocked=float(max(a.blocked, b.blocked)), cores=psutil.cpu_count())


async def _targets(params: SampleHostInput) -> tuple[list[int], dict[int, str]]:
    """The job's processes and their children, with a role each. In collector mode with no pid: the job's ranks on
    this node."""
    roots = list(params.pid)
    if params.local and not roots and params.match is None:
        roots = await job_pids_here(HOST_MAX_PROCESSES, local=True)
    if params.match is not None:
        found, _, _ = processes_by_match(params.match, HOST_MAX_PROCESSES)
        roots = [p.pid for p in found]
        if not roots:
            raise BadInput(f"no process's command line matches {params.match!r}.", "Check `ps -eo pid,args`.")
    roles: dict[int, str] = {}
    for pid in roots:
        try:
            process = psutil.Process(pid)
        except psutil.Error as exc:
            raise BadInput(f"no such process: {pid}.", "Give the pids of running processes.") from exc
        roles.setdefault(pid, "trainer")
        for child in process.children(recursive=True)[:HOST_MAX_PROCESSES]:
            roles.setdefault(child.pid, "dataloader_worker" if _is_worker(child) else
                             "trainer" if _is_rank(child) else "other")
    return list(roles)[:HOST_MAX_PROCESSES], roles


def _is_rank(process: psutil.Process) -> bool:
    """A rank a launcher started (torchrun's children carry RANK in their environment)."""
    try:
        return "RANK" in process.environ()
    except psutil.Error:
        return False


def _is_worker(process: psutil.Process) -> bool:
    """A DataLoader worker: PyTorch names its thread pt_data_worker (2.4+); before, a forked child running the
    trainer's own command line, or a multiprocessing spawn child."""
    try:
        if process.name() == "pt_data_worker":
            return True
        parent = process.parent()
        command = process.cmdline()
        return (parent is not None and command == parent.cmdline()) or "--multiprocessing-fork" in command
    except psutil.Error:
        return False


async def _live(params: SampleHostInput, ctx: ToolContext) -> SampleHostResult:
    pids, roles = await _targets(params)
    readings = [_read_proc(pids)]
    end = readings[0].at + params.duration_s
    ctx.progress.update(0, params.duration_s, f"sampled 0 of {params.duration_s:g} s")  # the work is known at once
    while (left := end - time.monotonic()) > 0:
        await anyio.sleep(min(HOST_SAMPLE_INTERVAL_S, left))
        readings.append(_read_proc(pids))
        sampled = readings[-1].at - readings[0].at
        ctx.progress.update(sampled, params.duration_s, f"sampled {sampled:.0f} of {params.duration_s:g} s")
    first, second = readings[0], readings[-1]
    span = max(second.at - first.at, 1e-3)
    processes = []
    for pid in pids:
        if pid not in first.process_cpu or pid not in second.process_cpu:
            continue
        try:
            state: str = psutil.Process(pid).status()
        except psutil.Error:
            state = "gone"
        processes.append(HostProcess(pid=pid, role=roles[pid],  # type: ignore[arg-type]
                                     cpu_pct=round(100 * (second.process_cpu[pid] - first.process_cpu[pid]) / span, 1),
                                     state=state))
    memory = psutil.virtual_memory()
    swapping = (second.swap[0] - first.swap[0]) + (second.swap[1] - first.swap[1]) > 0
    trainers = [pid for pid in pids if roles[pid] == "trainer"]
    result = _judge(_disks_between(first, second), _cpu_between(first, second), processes,
                    round(100 * memory.available / memory.total, 1), swapping, f"live {params.duration_s:g} s", [])
    result.coverage.append(Coverage.read("/proc", f"diskstats, stat, vmstat and meminfo read {len(readings)} times "
                                         f"over {span:.1f} s"))
    for pid in pids:
        if pid not in first.process_cpu or pid not in second.process_cpu:
            # A process gone mid-window (or not readable): its share of the host is not in the figures.
            result.coverage.append(Coverage.partial(f"pid {pid}", "not read for the whole window (it exited, or "
                                                    "its /proc entry could not be read)"))
    # The step logs are read after the window, so that they hold the steps it saw.
    steps = await anyio.to_thread.run_sync(_step_time, params, ctx, result)
    _periodic(result, readings, trainers, steps)
    return result


def _step_time(params: SampleHostInput, ctx: ToolContext, result: SampleHostResult) -> StepTime | None:
    if not params.step_logs:
        return None
    steps, note = mean_step_time(params.step_logs, ctx, time.monotonic() + ctx.remaining_s())
    if note is not None:
        result.notes.append(note)
    return steps


def _periodic(result: SampleHostResult, readings: list[_Reading], trainers: list[int], steps: StepTime | None
              ) -> None:
    """Dips that repeat in the trainer's CPU (else the host's), between the readings of the live sample."""
    if len(readings) < 3:
        return
    pairs = list(zip(readings, readings[1:], strict=False))
    interval = (readings[-1].at - readings[0].at) / len(pairs)
    if trainers:
        series = [100 * sum(b.process_cpu.get(p, 0.0) - a.process_cpu.get(p, 0.0) for p in trainers)
                  / max(b.at - a.at, 1e-3) for a, b in pairs]
        name = f"the trainer's CPU (pid {', '.join(map(str, trainers[:3]))})"
    else:
        series = [_busy(_cpu_between(a, b)) for a, b in pairs]
        name = "the host's CPU"
    _add_dips(result, [(series, interval, name)], steps)


def _add_dips(result: SampleHostResult, candidates: list[tuple[list[float], float, str]], steps: StepTime | None
              ) -> None:
    """The deepest periodic dip among the series, as `periodic` and a finding; a note for each series without."""
    found, notes = dips_across(candidates, steps)
    result.notes += notes
    if not found:
        return
    result.periodic = found[0]
    for dips in found[:4]:
        result.findings.append(HostFinding(kind="periodic", severity=Severity.warn, evidence=dips_evidence(dips),
                                           fix=DIPS_FIX))
    result.severity = worst(f.severity for f in result.findings)
    lead = result.findings[0]
    if lead.kind == "periodic":
        result.conclusion[1:] = [f"periodic: {lead.evidence}.", f"Fix: {lead.fix}."]


# ---------------------------------------------------------------- captures


_FORMATS_KNOWN = ["iostat -x (text or -o JSON)", "iostat (tps, kB_read/s)", "vmstat", "vmstat -s (two or more "
                  "reports)", "mpstat -P ALL (or sar -u)", "mpstat -o JSON",
                  "sar (-u, -P, -r, -S, -B, -W, -d, -n DEV, -q)", "sadf -d / -p", "pidstat (-u, -r, -d, -t, -h)",
                  "top / top -b (procps, busybox, toybox; a process table alone)", "free (any unit; logged Mem: rows)",
                  "/proc/meminfo",
                  "/proc/pressure/{cpu,io,memory}", "numastat", "nvidia-smi dmon", "nvidia-smi pmon"]


def _read_capture(name: str, text: str) -> tuple[HostCapture | None, Coverage]:
    """One saved capture by its content, and what was made of it."""
    try:
        if is_sadf(text):
            capture = read_sadf(text)
            if not capture.reports:
                return None, Coverage.not_understood(name, "sadf output with no values (the -H header lists the "
                                                     "file's activities only): pass `sadf -d FILE -- -u -r -B -d` or "
                                                     "`sar -A -f FILE`", _FORMATS_KNOWN)
        elif is_sar(text) and not (is_mpstat(text) and text.lstrip().startswith("{")):
            capture = read_sar(text)
        elif is_mpstat(text):  # before iostat: mpstat's JSON is a "sysstat" document too
            capture = read_mpstat(text)
        elif is_top(text):
            capture = read_top(text)
        elif is_free(text):
            capture = read_free(text)
        elif is_meminfo(text):
            capture = read_meminfo(text)
        elif is_pressure(text):
            capture = read_pressure(text, name)
        elif is_numastat(text):
            capture = read_numastat(text)
        elif is_pidstat_text(text):
            capture = read_pidstat(text)
        elif is_iostat(text):
            capture = read_iostat(text)
        elif is_vmstat(text):
            capture = read_vmstat(text)
        elif is_vmstat_counters(text):
            capture = read_vmstat_counters(text)
        elif is_smi_monitor(text):
            capture = read_smi_monitor(text)
        else:
            return None, Coverage.not_understood(name, _looks_like(text), _FORMATS_KNOWN)
    except (json.JSONDecodeError, RecursionError) as exc:
        said = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
        raise UnreadableInput(f"{name}: sysstat JSON that does not parse ({said}).",
                              "Pass the -o JSON output as written, or the text form.") from exc
    if capture.kind == "free" and not capture.reports:
        return None, Coverage.not_understood(name, "free's Mem: rows without their header, whose numbers fit no "
                                             "single layout of free's columns: pass the output with its header line",
                                             _FORMATS_KNOWN)
    if not capture.reports or not (capture.host_evidence or capture.gpus):
        return None, Coverage.not_understood(name, f"{capture.kind} header(s) but no row of values under them",
                                             _FORMATS_KNOWN)
    what = (capture.what or capture.kind) + f": {capture.reports} report(s)" + (
        f", {len(capture.core_idle)} CPU(s) each" if capture.core_idle else "")
    if capture.since_boot:
        return capture, Coverage.partial(name, f"{what}: only the averages since boot, no interval")
    return capture, Coverage.read(name, what)


def _looks_like(text: str) -> str:
    """What an unread capture looked like: its first line with content."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"not a format this tool reads; it starts {first[:80]!r}" if first else "no text in it"


def _from_captures(params: SampleHostInput, ctx: ToolContext) -> SampleHostResult:
    captures: list[HostCapture] = []
    coverage: list[Coverage] = []
    notes: list[str] = []
    for file in expand_inputs(params.from_files, ctx.roots):
        text = without_line_markers(read_whole_text(file, HOST_MAX_CAPTURE_BYTES, "Pass the saved text of iostat "
                                                    "-x, vmstat, mpstat or nvidia-smi dmon / pmon."))
        capture, covered = _read_capture(file.name, text)
        coverage.append(covered)
        if capture is not None:
            captures.append(capture)
    # A since-boot summary is not a sample: it neither clears the host nor faults it; only the intervals are judged.
    live = [c for c in captures if not c.since_boot]
    disks_by_name: dict[str, list[DiskSample]] = {}
    for capture in live:
        for disk in capture.disks:
            disks_by_name.setdefault(disk.name, []).append(disk)
    disks = [Disk(name=name, util_pct=_peak(s.util_pct for s in samples), await_ms=_peak(s.await_ms for s in samples),
                  queue_depth=_peak(s.queue_depth for s in samples), read_mbs=_peak(s.read_mbs for s in samples),
                  write_mbs=_peak(s.write_mbs for s in samples), iops=_peak(s.iops for s in samples),
                  queue_time_ms=_peak(s.queue_time_ms for s in samples if (s.util_pct or 0) >= IO_BUSY_UTIL_PCT))
             for name, samples in disks_by_name.items()]

    def series(name: str) -> list[float]:
        return [v for c in live for v in getattr(c, name)]

    def median(name: str) -> float | None:
        values = sorted(series(name))
        return values[len(values) // 2] if values else None

    def mean(name: str) -> float | None:
        values = series(name)
        return round(sum(values) / len(values), 2) if values else None

    # iowait is a share of the window's time: the mean of equal intervals is the window's own figure (what the live
    # sample measures), where a median would drop the intervals in which the job waited; blocked tasks count when
    # any interval caught one, as the live sample takes the larger of its two readings.
    blocked = series("blocked")
    cpu = Cpu(user_pct=median("user_pct"), system_pct=median("system_pct"), iowait_pct=mean("iowait_pct"),
              steal_pct=median("steal_pct"), idle_pct=median("idle_pct"), run_queue=median("run_queue"),
              blocked=max(blocked) if blocked else None, cores=next((c.cores for c in captures if c.cores), None))
    # Swap traffic counts only from intervals: a since-boot line's si/so is the average of the machine's life.
    swap = [v for c in live for v in (*c.swap_in, *c.swap_out)]
    if any(c.since_boot for c in captures):
        notes.append("A capture holds only its first report, the averages since boot (or, for pidstat, since each "
                     "process started): it is not a sample of the present and is not judged; rerun with an interval "
                     "and a count (vmstat 1 10, iostat -x 1 10, mpstat -P ALL 1 10, pidstat 1 10).")
    notes += _core_notes(live)
    swapping = sum(1 for v in swap if v > 0) * 2 >= max(len(swap), 1) and any(v > 0 for v in swap)
    swapped = max(swap, default=0.0)
    captured = judge_captures(live, swapping)
    snapshots = [c.memory.available_pct for c in live if c.memory is not None and c.memory.available_pct is not None]
    names = ", ".join(c.kind for c in captures) or "nothing readable"
    result = _judge(sorted(disks, key=lambda d: -(d.await_ms or 0)), cpu, [], min(snapshots, default=None), swapping,
                    f"captures: {names}", notes, memory_read=bool(swap), captured=captured,
                    swapping_said=f"swap in/out up to {swapped:g}/s in "
                    f"{', '.join(sorted({c.kind for c in live if c.swap_in or c.swap_out}))}" if swapping else "")
    top = [p for c in live for p in c.processes if p.cpu_pct is not None]
    result.processes = [HostProcess(pid=p.pid, role="other", cpu_pct=p.cpu_pct or 0.0, state=p.state or "-")
                        for p in sorted(top, key=lambda p: -(p.cpu_pct or 0.0))[:16]]
    if captured.undecided and not result.findings:
        seen, decides = captured.undecided[0]
        result.severity, result.decides = Severity.unknown, decides
        result.conclusion[1:] = [f"Not decided: {seen}.", f"Capture {decides}."]
    result.coverage = coverage
    _gpus_of(result, captures, params.capture_interval_s, _step_time(params, ctx, result))
    _undecided(result, captures, bool(captured.resources))
    return result


def _core_notes(captures: list[HostCapture]) -> list[str]:
    """mpstat -P: the cores that are saturated, or that wait on I/O, while the average does not say so; one hot core
    is the sign of a single-threaded loop (the trainer's main thread, or a num_workers=0 loader)."""
    notes = []
    for capture in captures:
        if not capture.core_idle:
            continue
        medians = {cpu: sorted(v)[len(v) // 2] for cpu, v in capture.core_idle.items() if v}
        hot = sorted((cpu for cpu, idle in medians.items() if idle <= CPU_IDLE_PCT), key=int)
        waiting = sorted((cpu for cpu, v in capture.core_iowait.items() if v and sorted(v)[len(v) // 2] >= 50),
                         key=int)
        if hot:
            notes.append(f"{capture.kind}: {len(hot)} of {len(medians)} CPU(s) listed at <= {CPU_IDLE_PCT:g} % idle "
                         f"(CPU {', '.join(hot[:8])}): where they are few, a single-threaded loop is saturated "
                         "(profile_cpu names it).")
        if waiting:
            notes.append(f"{capture.kind}: CPU {', '.join(waiting[:8])} wait on I/O over half the time.")
    return notes


def _undecided(result: SampleHostResult, captures: list[HostCapture], judged: bool = True) -> None:
    """A verdict of none that the captures cannot back: nothing about the host was read, only a since-boot average,
    or (`judged` false) rows that show none of the disks, CPUs or memory whole (a process table alone, whose memory
    figure is only a bound). Then the answer is unknown, and says what decides it."""
    if result.findings:
        return
    host = [c for c in captures if c.host_evidence]
    unread = [c for c in result.coverage if c.status is CoverageStatus.not_understood]
    if result.severity is Severity.unknown and result.decides:
        return  # already undecided, with what decides it
    if host and not all(c.since_boot for c in host) and not unread and judged:
        return
    result.severity = Severity.unknown
    result.decides = ("iostat -x 1 10, vmstat 1 10 or mpstat -P ALL 1 10 captured on the node while the job ran "
                      "(or sample_host live there)")
    if not host:
        said = (f"{unread[0].input} was not read ({unread[0].detail})" if unread else
                "the captures hold no host evidence (GPU monitors only)")
        result.conclusion = [f"{result.source}: cannot tell whether the host starves the GPU: {said}.",
                             "No disk, CPU or memory figure was read, so none can be ruled out.",
                             f"Capture {result.decides}."]
    elif unread:
        result.conclusion[1:] = [f"No bottleneck in what was read, but {len(unread)} capture(s) were not read "
                                 f"({unread[0].input}: {unread[0].detail}).",
                                 "Pass them in a format this tool reads to rule the host out."]
    elif not judged and not all(c.since_boot for c in host):
        result.conclusion[1:] = ["No bottleneck in what was read, but it shows none of the disks, CPUs or memory "
                                 "whole (process rows alone: their memory is only a bound, their CPU not the host's).",
                                 f"Capture {result.decides}."]
    else:
        result.conclusion[1:] = ["No bottleneck in the since-boot averages, which say nothing of the job's window.",
                                 f"Capture {result.decides}."]


def _gpus_of(result: SampleHostResult, captures: list[HostCapture], interval_s: float | None,
             steps: StepTime | None) -> None:
    """The GPUs of dmon / pmon captures: their SM % over the rows, and periodic dips in it."""
    candidates: list[tuple[list[float], float, str]] = []
    assumed = False
    for capture in captures:
        for series in capture.gpus:
            if capture.kind == "pmon":
                sm = [v for values in series.pids.values() for v in values if v is not None]
                result.gpus.append(GpuRow(gpu=series.gpu, source="pmon", columns=series.columns,
                                          samples=series.rows, sm_pct_median=_median(sm), sm_pct_max=_peak(sm),
                                          pids=list(series.pids)))
                continue
            sm = [v for v in series.values.get("sm", []) if v is not None]
            memory = [v for v in series.values.get("mem", []) if v is not None]
            result.gpus.append(GpuRow(gpu=series.gpu, source="dmon", columns=series.columns, samples=series.rows,
                                      sm_pct_min=min(sm, default=None), sm_pct_median=_median(sm),
                                      sm_pct_max=_peak(sm), mem_pct_median=_median(memory)))
            if len(sm) == len(series.values.get("sm", [])) and sm:
                interval = _row_interval(series)
                if interval is None:
                    assumed = interval_s is None
                    interval = interval_s or 1.0
                candidates.append((sm, interval, f"GPU {series.gpu}'s SM %"))
    if assumed:
        result.notes.append("The dmon capture has no Time column: its rows are taken as 1 s apart (dmon's default "
                            "-d 1); pass capture_interval_s if it was run with another -d, or capture with -o T.")
    idle = [g for g in result.gpus if g.source == "dmon" and g.sm_pct_median is not None and g.sm_pct_median < 30]
    if idle:
        result.notes.append(f"GPU {', '.join(g.gpu for g in idle[:8])}: median SM % under 30 in the capture: the GPU "
                            "waits on something; the host verdict and profile_cpu say whether it is the host.")
    if result.gpus:
        result.conclusion[0] = (f"{result.source}: {len(result.disks)} disk(s), "
                                f"{len({g.gpu for g in result.gpus})} GPU(s).")
        if not result.disks and result.cpu.idle_pct is None and not result.findings:
            result.conclusion[1:] = ["The captures hold no host evidence (no iostat -x or vmstat): add them, or "
                                     "sample_host live on the node, to tell io_bound from cpu_bound."]
    _add_dips(result, candidates, steps)


def _row_interval(series: GpuSeries) -> float | None:
    """The median step between a dmon capture's Time stamps (whole seconds), when it has them."""
    gaps = sorted(b - a for a, b in zip(series.seconds, series.seconds[1:], strict=False) if b > a)
    if len(series.seconds) != series.rows or not gaps:
        return None
    return gaps[len(gaps) // 2]


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    return round(ordered[len(ordered) // 2], 2) if ordered else None


def _peak(values: object) -> float | None:
    numbers = [v for v in values if isinstance(v, int | float)]  # type: ignore[attr-defined]
    return round(max(numbers), 2) if numbers else None


# ---------------------------------------------------------------- the verdict


def _judge(disks: list[Disk], cpu: Cpu, processes: list[HostProcess], memory_available: float | None,
           swapping: bool, source: str, notes: list[str], *, memory_read: bool = True,
           captured: CaptureJudgement | None = None, swapping_said: str = "") -> SampleHostResult:
    """The verdict over what was read; `memory_read`: swap traffic or MemAvailable was in it (an mpstat or iostat
    capture holds neither, so "no memory bottleneck" is not said of it); `captured`: what saved captures add (their
    own findings, and the resources they show)."""
    findings: list[HostFinding] = []
    # Saturated: requests wait long with a queue, or (a disk that serves one request at a time) it is busy nearly
    # all the time with a queue and waits well above a flash device's.
    # Or (stalled) busy nearly all the time while the queue's own time per request (Little's law) is IO_STALL_MS or
    # more: its await column can read 0 when almost nothing completes.
    saturated = [d for d in disks if (d.queue_depth or 0) >= IO_QUEUE_DEPTH and (
        (d.await_ms or 0) >= IO_AWAIT_MS
        or ((d.util_pct or 0) >= IO_BUSY_UTIL_PCT and (d.await_ms or 0) >= IO_BUSY_AWAIT_MS)
        or ((d.util_pct or 0) >= IO_BUSY_UTIL_PCT and (d.queue_time_ms or 0) >= IO_STALL_MS))]
    stuck = [p for p in processes if p.state == psutil.STATUS_DISK_SLEEP]
    # iowait alone, where the capture cannot say what is blocked (iostat has no blocked count).
    waiting = (cpu.iowait_pct or 0) >= IOWAIT_PCT and (cpu.blocked is None or cpu.blocked >= 1 or bool(stuck))
    if saturated or waiting:
        worst_disk = max(saturated, key=lambda d: max(d.await_ms or 0, d.queue_time_ms or 0)) if saturated else None
        said = (_saturated_said(worst_disk) if worst_disk else
                f"CPU iowait {cpu.iowait_pct:g} %" + (f" with {cpu.blocked:g} task(s) blocked"
                                                       if cpu.blocked is not None else ""))
        findings.append(HostFinding(kind="io_bound", severity=Severity.crit, evidence=said + (
            f"; {len(stuck)} of the job's processes in D state (waiting on I/O)" if stuck else ""),
            fix=IO_FIX))
    workers = [p for p in processes if p.role == "dataloader_worker"]
    busy_workers = [p for p in workers if p.cpu_pct >= WORKER_SATURATED_PCT]
    # Time in iowait is idle time with a disk request outstanding: a CPU at 0 % idle and 60 % iowait computes 40 %.
    unused = None if cpu.idle_pct is None else cpu.idle_pct + (cpu.iowait_pct or 0.0)
    if (unused is not None and unused <= CPU_IDLE_PCT) or (workers and len(busy_workers) == len(workers)):
        said = (f"every DataLoader worker ({len(workers)}) runs at >= {WORKER_SATURATED_PCT:g} % of a core "
                f"({', '.join(f'{p.pid}: {p.cpu_pct:.0f} %' for p in busy_workers[:4])})" if busy_workers and
                len(busy_workers) == len(workers) else f"the CPUs are {100 - (unused or 0):.0f} % busy")
        findings.append(HostFinding(kind="cpu_bound", severity=Severity.crit if busy_workers else Severity.warn,
                                    evidence=said, fix=CPU_FIX))
    if swapping and (memory_available is None or memory_available <= MEM_AVAILABLE_PCT):
        findings.append(HostFinding(kind="memory_pressure", severity=Severity.crit,
                                    evidence="the host swaps" + (f" with {memory_available:g} % of memory available"
                                                                 if memory_available is not None else "")
                                    + (f" ({swapping_said})" if swapping_said else ""), fix=MEMORY_FIX))
    if captured is not None:
        kinds = {f.kind for f in findings}
        findings += [HostFinding(kind=e.kind, severity=e.severity, evidence=e.evidence, fix=e.fix)  # type: ignore[arg-type]
                     for e in captured.findings if e.kind not in kinds]
        notes += captured.notes
    if any(f.kind == "memory_pressure" for f in findings):
        for finding in findings:
            if finding.kind in ("io_bound", "cpu_bound", "main_loop_cpu_bound"):
                finding.severity = Severity.warn
                finding.evidence += ("; with memory exhausted this is likely the kernel reclaiming and re-reading "
                                     "evicted pages: the memory pressure comes first")
    findings.sort(key=lambda f: _PRECEDENCE[f.kind])
    verdict: Verdict = next((f.kind for f in findings if f.kind != "periodic"), "none")
    util_only = [d for d in disks if (d.util_pct or 0) >= 90 and d not in saturated]
    if util_only:
        notes.append(f"{', '.join(d.name for d in util_only)}: %util near 100 but await/queue say not saturated "
                     "(devices that serve requests in parallel read 100 % long before their limit).")
    judged = [name for name, read in (("disk", bool(disks)), ("CPU", cpu.idle_pct is not None),
                                      ("memory", memory_read)) if read]
    if captured is not None:
        judged = [name for name in ("disk", "CPU", "memory", "NUMA placement")
                  if name in judged or name in captured.resources]
    unread = [name for name in ("disk", "CPU", "memory") if name not in judged]
    busy = (f", CPU {100 - (cpu.idle_pct or 0):.1f} % busy" + (f" ({cpu.iowait_pct:g} % iowait)" if cpu.iowait_pct
                                                               else "")) if cpu.idle_pct is not None else ""
    opening = f"{source}: {len(disks)} disk(s){busy}, {len(processes)} job process(es)."
    clear = (f"No {', '.join(judged[:-1]) + ' or ' + judged[-1] if len(judged) > 1 else judged[0] if judged else ''} "
             "bottleneck on the host" + (f" ({' and '.join(unread)} not in what was read)." if unread else "."))
    conclusion = [opening, f"{verdict}: {findings[0].evidence}." if findings else clear,
                  f"Fix: {findings[0].fix}." if findings else "The GPU side decides: summarize_trace."]
    return SampleHostResult(
        severity=worst(f.severity for f in findings), verdict=verdict, source=source, disks=disks[:32], cpu=cpu,
        processes=sorted(processes, key=lambda p: -p.cpu_pct)[:32], memory_available_pct=memory_available,
        findings=findings, notes=notes[:10], conclusion=conclusion,
        next_steps=[NextStep(branch=_BRANCH, step="host", action="profile_cpu on the trainer's pid (the function "
                             "the host spends its time in)", why="sample_host says which resource; profile_cpu says "
                             "which code.")])


def _saturated_said(disk: Disk) -> str:
    if (disk.await_ms or 0) >= IO_BUSY_AWAIT_MS or not disk.queue_time_ms:
        return (f"{disk.name}: requests wait {disk.await_ms:g} ms with {disk.queue_depth:g} in flight "
                f"({_f(disk.util_pct)} % util)")
    return (f"{disk.name}: up to {disk.queue_depth:g} requests in flight at {_f(disk.util_pct)} % util, and so few "
            f"complete that each waits up to {disk.queue_time_ms:g} ms in the queue (Little's law: requests in flight "
            f"/ completions per second; the await column says {_f(disk.await_ms)} ms, counting only those that "
            "completed): the device is stalled")


async def sample_host(params: SampleHostInput, ctx: ToolContext) -> SampleHostResult:
    """Is the host starving the GPU through its disks, CPUs or memory? A bounded live sample of this host (1-60 s:
    per disk util, await, queue depth, MB/s, IOPS; CPU user/system/iowait/steal; running and blocked tasks; swap and
    MemAvailable; the job's processes and DataLoader workers by CPU % of a core over the window, and any in D state),
    or saved captures: iostat -x, vmstat, mpstat, pidstat, sar/sadf, top -b, free, /proc/meminfo, /proc/pressure (PSI),
    numastat, nvidia-smi dmon and pmon (SM % per GPU and its periodic dips); a since-boot summary is not a sample
    (unknown).
    slurm_job or hosts: every node of the job, rows labelled with their node. Verdict io_bound (await and queue
    depth, not %util alone), cpu_bound, main_loop_cpu_bound (one core or thread pinned while the rest idle),
    memory_pressure (low available memory with reclaim, PSI memory stalls) or none, with the evidence and the fix.
    """
    backend = job_backend(params, ctx)
    if backend is not None:
        answers = await collect_from_nodes(backend, "sample-host", SampleHostResult, ctx,
                                           node_timeout_for(params.duration_s, params.node_timeout_s, ctx),
                                           ["--duration-s", f"{params.duration_s:g}"])
        return _merge_nodes(backend.label, answers)
    if params.from_files:
        return await anyio.to_thread.run_sync(_from_captures, params, ctx)
    if ctx.remaining_s() < params.duration_s + 1:
        raise BadInput(f"the call has {ctx.remaining_s():.0f} s left, less than duration_s={params.duration_s:g}.",
                       "Lower duration_s or raise the server's --timeout.")
    result = await _live(params, ctx)
    if params.local:
        result.node = node_name()
        label_rows(result.node, result.disks, result.processes, result.findings)
    return result


def _merge_nodes(label: str, answers: dict[str, SampleHostResult | str]) -> SampleHostResult:
    """One answer for the job: every node's disks, processes and findings labelled with the node; the verdict, CPU
    and periodic dips of the node worst off, and each node's own verdict."""
    job = gather_nodes(answers, "their hosts are missing")
    answered, lead = job.answered, job.lead
    first = answered.get(lead.node) if lead else next(iter(answered.values()), None)
    findings = [f.model_copy(update={"node": node}) for node, answer in answered.items() for f in answer.findings]
    findings.sort(key=lambda f: (-f.severity.rank, f.node != (lead.node if lead else None)))
    conclusion = job.conclusion(label, "", findings[0].fix if findings else "",
                                "No disk, CPU or memory bottleneck on any node's host.")
    undecided = job.undecided if answered and not findings else []
    if undecided:
        conclusion[1:] = [f"No bottleneck on the nodes that were judged, but {len(undecided)} node(s) were not "
                          f"({', '.join(undecided[:4])}): the host of any of them may be the one."]
    return SampleHostResult(
        coverage=job.coverage, decides="sample_host on the node(s) named, live there, once they answer"
        if undecided else None,
        severity=Severity.unknown if undecided else worst(f.severity for f in findings) if answered else Severity.warn,
        verdict=first.verdict if first and lead else "none", source=label,
        disks=[d.model_copy(update={"node": node}) for node, answer in answered.items() for d in answer.disks][:64],
        cpu=first.cpu if first else Cpu(user_pct=None, system_pct=None, iowait_pct=None, steal_pct=None,
                                         idle_pct=None, run_queue=None, blocked=None, cores=None),
        processes=[p.model_copy(update={"node": node}) for node, answer in answered.items()
                   for p in answer.processes][:64],
        memory_available_pct=first.memory_available_pct if first else None,
        periodic=first.periodic if first else None, findings=findings, notes=job.notes[:20], nodes=job.nodes,
        conclusion=conclusion, next_steps=first.next_steps if first else [])
