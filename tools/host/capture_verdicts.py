"""What pasted host captures say beyond the disk, CPU-idle and swap rules of sample_host's verdict: memory pressure
from a snapshot with signs of reclaim or from PSI, I/O stalls from PSI, a single-threaded main loop (one core
saturated while the rest idle, one process at one core's worth on an idle host, runnable tasks confined to few
cores), a host saturated by the processes pidstat lists, and memory placed off its NUMA node. Each finding names the
value and the capture it came from; what cannot decide (a low-memory snapshot with no sign of reclaim, CPU pressure
alone) is said as such, with the capture that would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.core.models import Severity
from tools.core.thresholds import (
    CONFINED_IDLE_PCT,
    CONFINED_LOAD,
    CONFINED_MAX_IOWAIT_PCT,
    CONFINED_RUNNING,
    CPU_IDLE_PCT,
    DIRECT_SCANS_S,
    HOST_MOSTLY_IDLE_PCT,
    IOWAIT_PCT,
    KSWAPD_BUSY_PCT,
    MAIN_LOOP_MAX_HOT_CORES,
    MAIN_LOOP_PROCESS_MAX_PCT,
    MAIN_LOOP_PROCESS_PCT,
    MAIN_LOOP_REST_IDLE_PCT,
    MAJOR_FAULTS_S,
    MEM_AVAILABLE_PCT,
    MEM_NEARLY_NONE_PCT,
    MEM_RUNNING_OUT_RATIO,
    NUMA_MISS_SHARE,
    PSI_CPU_SOME_PCT,
    PSI_IO_FULL_PCT,
    PSI_IO_SOME_PCT,
    PSI_MEMORY_FULL_PCT,
    PSI_MEMORY_SOME_PCT,
    RECLAIM_SYSTEM_PCT,
    SWAP_CACHED_PCT,
    SWAP_FULL_PCT,
    SWAP_PUSHED_PCT,
)
from tools.host.host_formats import HostCapture, MemorySnapshot, ProcessSample

__all__ = ["CaptureJudgement", "Evidence", "judge_captures"]

MEMORY_FIX = ("Free host memory: fewer or lighter DataLoader workers (each holds a copy of the dataset object), a "
              "smaller prefetch_factor or pinned-memory pool, the other tenants of the node moved off, or more RAM")
MAIN_LOOP_FIX = ("Move the work off the one thread: more DataLoader workers (num_workers > 0) for loading and "
                 "transforms, no per-step Python work on the main loop; profile_cpu on the process names the "
                 "function; if tasks are pinned to one core, widen the affinity (taskset -p, the launcher's "
                 "--cpu-bind / numactl)")
IO_FIX = ("Faster or local storage (NVMe, a node-local cache of the dataset), more DataLoader workers to overlap "
          "reads, larger sequential files (WebDataset, record formats) instead of many small ones")
CPU_FIX = ("More DataLoader workers if cores are free, else cheaper transforms (profile_cpu names the function), "
           "decoding on the GPU (DALI, torchvision.io on CUDA) or pre-decoded data")
_INTERVAL = "vmstat 1 10 (si/so, free, cache) with /proc/pressure/memory, captured while the job runs"


@dataclass
class Evidence:
    kind: str
    severity: Severity
    evidence: str
    fix: str


@dataclass
class CaptureJudgement:
    findings: list[Evidence] = field(default_factory=list)
    undecided: list[tuple[str, str]] = field(default_factory=list)  # what was seen, what would decide it
    resources: list[str] = field(default_factory=list)  # what the captures show: disk, CPU, memory, NUMA placement
    notes: list[str] = field(default_factory=list)


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def _shown(capture: HostCapture) -> list[str]:
    shown = []
    if capture.disks or any(p.resource == "io" for p in capture.pressure):
        shown.append("disk")
    if (capture.idle_pct or capture.core_idle or any(p.resource == "cpu" for p in capture.pressure)
            or (capture.processes_cpu_sum and capture.cores)):
        shown.append("CPU")
    if (capture.memory is not None or capture.swap_in or capture.major_faults_s
            or any(p.resource == "memory" for p in capture.pressure)):
        shown.append("memory")
    if capture.numa:
        shown.append("NUMA placement")
    return shown


def judge_captures(captures: list[HostCapture], swapping: bool) -> CaptureJudgement:
    """`captures`: those that sample an interval (since-boot ones are left out by the caller); `swapping`: swap
    traffic was seen in them (sample_host's own rule makes that memory_pressure)."""
    judgement = CaptureJudgement()
    for capture in captures:
        judgement.resources += [r for r in _shown(capture) if r not in judgement.resources]
    _memory(judgement, captures, swapping)
    _pressure(judgement, captures)
    _main_loop(judgement, captures)
    _processes_saturate(judgement, captures)
    _numa(judgement, captures)
    return judgement


def _memory(judgement: CaptureJudgement, captures: list[HostCapture], swapping: bool) -> None:
    """Little available memory is pressure only with reclaim seen beside it (or memory still running out across the
    capture's readings); a full page cache alone is health."""
    snapshots = [(c, m, c.memory_series or [m]) for c in captures
                 for m in (c.memory_series or ([c.memory] if c.memory is not None else []))
                 if m.available_pct is not None]
    if not snapshots or swapping:
        return
    capture, memory, series = min(snapshots, key=lambda s: s[1].available_pct or 0.0)
    available = memory.available_pct
    if available is None or available > MEM_AVAILABLE_PCT:
        return
    signs = _running_out(memory, series)
    kswapd = [p for c in captures for p in c.processes if p.command.startswith("kswapd")
              and (p.cpu_pct or 0) >= KSWAPD_BUSY_PCT]
    if kswapd:
        signs.append(f"{kswapd[0].command} at {kswapd[0].cpu_pct:g} % of a core (reclaiming)")
    if (memory.swap_used_pct or 0) >= SWAP_FULL_PCT:
        signs.append(f"swap {memory.swap_used_pct:g} % used")
    elif available <= MEM_NEARLY_NONE_PCT and (memory.swap_used_pct or 0) >= SWAP_PUSHED_PCT:
        signs.append(f"swap {memory.swap_used_pct:g} % used (pages already pushed out, no cache left to drop)")
    elif available <= MEM_NEARLY_NONE_PCT and memory.swap_total_kb == 0:
        signs.append("no swap to push pages out to and no cache left to drop (the OOM killer is next)")
    if memory.swap_cached_kb and memory.total_kb and 100 * memory.swap_cached_kb / memory.total_kb >= SWAP_CACHED_PCT:
        signs.append(f"{100 * memory.swap_cached_kb / memory.total_kb:.1f} % of memory in the swap cache (pages "
                     "pushed out to swap and read back)")
    system = _median([v for c in captures for v in c.system_pct])
    if system is not None and system >= RECLAIM_SYSTEM_PCT:
        signs.append(f"system CPU {system:g} % (the kernel reclaiming)")
    iowait = _median([v for c in captures for v in c.iowait_pct])
    if iowait is not None and iowait >= IOWAIT_PCT:
        signs.append(f"iowait {iowait:g} % (evicted pages read back)")
    faults = max([v for c in captures for v in c.major_faults_s]
                 + [p.major_faults_s or 0.0 for c in captures for p in c.processes], default=0.0)
    if faults >= MAJOR_FAULTS_S:
        signs.append(f"{faults:g} major page faults/s")
    scans = max((v for c in captures for v in c.direct_scans_s), default=0.0)
    if scans >= DIRECT_SCANS_S:
        signs.append(f"{scans:g} direct-reclaim page scans/s")
    if memory.bound:
        said = f"at most {available:g} % of memory available ({capture.kind}: {memory.bound})"
    else:
        said = (f"{available:g} % of memory available ({capture.kind}"
                + (": free + buffers + cache, no MemAvailable printed" if memory.available_estimated else "") + ")")
    if signs:
        judgement.findings.append(Evidence("memory_pressure", Severity.crit, f"{said} with {', '.join(signs)}",
                                           MEMORY_FIX))
    else:
        readings = "in one snapshot" if len(series) <= 1 else f"over {len(series)} readings, not falling"
        judgement.undecided.append((f"only {said} {readings}, with no sign of reclaim (swap traffic, kswapd, "
                                    "major faults) in it", _INTERVAL))


def _running_out(lowest: MemorySnapshot, series: list[MemorySnapshot]) -> list[str]:
    """What the readings before the lowest one say: the page cache evicted as memory ran out (reclaim at work), or
    the available memory itself fallen to MEM_RUNNING_OUT_RATIO of what it was (still running out)."""
    before = series[:series.index(lowest)] if lowest in series else []
    signs = []
    caches = [m.cache_kb for m in before if m.cache_kb is not None]
    if caches and lowest.cache_kb is not None and lowest.cache_kb <= MEM_RUNNING_OUT_RATIO * max(caches):
        # As shares of memory: free's plain numbers are in whatever unit it was asked for.
        signs.append(f"buffers + page cache shrunk from {_share(max(caches), lowest)} to "
                     f"{_share(lowest.cache_kb, lowest)} across {len(before) + 1} readings (reclaimed)")
    earlier = [m.available_pct for m in before if m.available_pct is not None]
    if earlier and (lowest.available_pct or 0.0) <= MEM_RUNNING_OUT_RATIO * max(earlier):
        signs.append(f"available memory down from {max(earlier):g} % across {len(before) + 1} readings (still "
                     "running out)")
    return signs


def _share(kb: float, reading: MemorySnapshot) -> str:
    return f"{100 * kb / reading.total_kb:.1f} % of memory" if reading.total_kb else f"{kb:g}"


def _pressure(judgement: CaptureJudgement, captures: list[HostCapture]) -> None:
    for capture in captures:
        for psi in capture.pressure:
            some = max(psi.some[:2])
            full = max(psi.full[:2]) if psi.full else None
            named = "" if psi.named else (" (the capture does not name its PSI file: a some+full pair is read as "
                                          "memory's; name the file pressure_io.txt if it was io)")
            said = (f"PSI {psi.resource} some avg10 {psi.some[0]:g} % / avg60 {psi.some[1]:g} %"
                    + (f", full avg10 {psi.full[0]:g} % / avg60 {psi.full[1]:g} %" if psi.full else "") + named)
            if psi.resource == "memory" and ((full or 0) >= PSI_MEMORY_FULL_PCT or some >= PSI_MEMORY_SOME_PCT):
                judgement.findings.append(Evidence("memory_pressure", Severity.crit, f"{said}: tasks stall on "
                                                   "memory (reclaim, refaults, swap-in)", MEMORY_FIX))
            elif psi.resource == "io" and ((full or 0) >= PSI_IO_FULL_PCT or some >= PSI_IO_SOME_PCT):
                judgement.findings.append(Evidence("io_bound", Severity.crit, f"{said}: tasks stall on I/O",
                                                   IO_FIX))
            elif psi.resource == "cpu" and some >= PSI_CPU_SOME_PCT:
                judgement.undecided.append((f"{said}: tasks wait for a CPU, which is also what a cgroup's CPU quota "
                                            "(throttling) shows", "mpstat -P ALL 1 10 (are the cores saturated?) "
                                            "and the job's cgroup cpu.stat (nr_throttled)"))


def _main_loop(judgement: CaptureJudgement, captures: list[HostCapture]) -> None:
    for capture in captures:
        found = _hot_cores(capture) or _one_core_process(capture) or _confined(capture)
        if found:
            judgement.findings.append(Evidence("main_loop_cpu_bound", Severity.warn, found, MAIN_LOOP_FIX))
            return


def _busiest(capture: HostCapture) -> ProcessSample | None:
    rows = [p for p in capture.processes if p.cpu_pct is not None and not p.command.startswith(("kswapd", "top"))]
    return max(rows, key=lambda p: p.cpu_pct or 0.0, default=None)


def _process_said(process: ProcessSample | None) -> str:
    if process is None:
        return ""
    core = f" on core {process.core}" if process.core is not None else ""
    return (f"; busiest {'thread' if process.thread else 'process'}: {process.command} (pid {process.pid}) at "
            f"{process.cpu_pct:g} % of a core{core}")


def _hot_cores(capture: HostCapture) -> str | None:
    medians = {cpu: _median(v) or 0.0 for cpu, v in capture.core_idle.items() if v}
    if len(medians) < 2:
        return None
    hot = [cpu for cpu, idle in medians.items() if idle <= CPU_IDLE_PCT]
    rest = [idle for cpu, idle in medians.items() if cpu not in hot]
    rest_idle = _median(rest)
    if not (1 <= len(hot) <= MAIN_LOOP_MAX_HOT_CORES and len(hot) * 2 <= len(medians) and rest_idle is not None
            and rest_idle >= MAIN_LOOP_REST_IDLE_PCT):
        return None
    busy = ", ".join(f"CPU {cpu} {100 - medians[cpu]:.1f} % busy" for cpu in hot)
    return (f"{busy} while the other {len(rest)} listed are {rest_idle:g} % idle (median; {capture.kind}'s per-CPU "
            f"rows): a single-threaded main loop saturates its core" + _process_said(_busiest(capture)))


def _host_idle(capture: HostCapture) -> float | None:
    idle = _median(capture.idle_pct)
    if idle is None and capture.processes_cpu_sum and capture.cores:
        idle = 100 - 100 * (_median(capture.processes_cpu_sum) or 0.0) / (capture.cores * 100)
    return idle


def _one_core_process(capture: HostCapture) -> str | None:
    idle = _host_idle(capture)
    if idle is None or idle < HOST_MOSTLY_IDLE_PCT or capture.cores == 1:
        return None
    # A thread that saturates its core is runnable at nearly every instant: a process shown sleeping (top's state is
    # its main thread's) did that core's worth of work on other threads, a pool's share, not one loop's.
    rows = [p for p in capture.processes if MAIN_LOOP_PROCESS_PCT <= (p.cpu_pct or 0) <= MAIN_LOOP_PROCESS_MAX_PCT
            and not p.command.startswith(("kswapd", "kworker", "ksoftirqd")) and p.state in (None, "R")]
    if not rows:
        return None
    lead = max(rows, key=lambda p: p.cpu_pct or 0.0)
    return (f"{'thread' if lead.thread else 'process'} {lead.command} (pid {lead.pid}) at {lead.cpu_pct:g} % of one "
            f"core while the host is {idle:.1f} % idle ({capture.kind}): one thread's worth of work, a single-threaded "
            "main loop")


def _confined(capture: HostCapture) -> str | None:
    """Load far above what the idle CPUs show: runnable tasks wait on the few cores they may run on."""
    idle, iowait = _median(capture.idle_pct), _median(capture.iowait_pct) or 0.0
    if (capture.load_1m is None or capture.tasks_running is None or idle is None or capture.load_1m < CONFINED_LOAD
            or capture.tasks_running < CONFINED_RUNNING or idle < CONFINED_IDLE_PCT
            or iowait > CONFINED_MAX_IOWAIT_PCT):
        return None
    return (f"load average {capture.load_1m:g} with {capture.tasks_running} tasks running while the CPUs are "
            f"{idle:g} % idle and iowait {iowait:g} % ({capture.kind}): the runnable tasks share one or a few cores "
            "(CPU affinity or a cpuset), not the host's" + _process_said(_busiest(capture)))


def _processes_saturate(judgement: CaptureJudgement, captures: list[HostCapture]) -> None:
    """pidstat -u with the banner's CPU count: the processes' %CPU together fill the cores."""
    for capture in captures:
        total = _median(capture.processes_cpu_sum)
        if total is None or not capture.cores or capture.idle_pct:
            continue
        share = total / capture.cores
        if share >= 100 - CPU_IDLE_PCT:
            top = sorted((p for p in capture.processes if not p.thread), key=lambda p: -(p.cpu_pct or 0.0))[:2]
            judgement.findings.append(Evidence(
                "cpu_bound", Severity.warn, f"the processes pidstat lists use {total:g} % of a core together, "
                f"{share:.0f} % of the {capture.cores} CPUs (" + ", ".join(f"{p.command} {p.cpu_pct:g} %"
                                                                          for p in top) + ")", CPU_FIX))


def _numa(judgement: CaptureJudgement, captures: list[HostCapture]) -> None:
    for capture in captures:
        for node in capture.numa:
            if node.hit and node.miss is not None and node.miss / node.hit >= NUMA_MISS_SHARE:
                judgement.notes.append(f"numastat: {node.node} numa_miss {node.miss:g} against numa_hit {node.hit:g}"
                                       f" ({100 * node.miss / node.hit:.0f} %): memory allocated off its node; bind "
                                       "the job's ranks to their GPU's socket (numactl --cpunodebind --membind).")
        empty = [n.node for n in capture.numa if n.mem_total_mb == 0]
        if empty and len(empty) < len(capture.numa):
            judgement.notes.append(f"numastat: {', '.join(empty)} hold no memory (memory-less nodes): CPUs there "
                                   "allocate remotely.")
