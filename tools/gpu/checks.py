"""GPU and host checks against the thresholds of the source documents (tools.core.thresholds), shared by
health_check and nvidia_smi_query so a value means the same thing whichever tool read it.

Each check turns values into Findings. Per-GPU results are folded: a check that is ok on every GPU
is one row ("GPU 0-7 temperature: max 61 C"), a GPU that fails it gets its own row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tools.core.models import Finding, Severity
from tools.core.ranks import compact_ranges
from tools.core.thresholds import (
    CORE_SATURATED_PCT,
    CRIT_THROTTLE,
    GPU_MEMORY_WARN_PCT,
    GPU_TEMP_CRIT_C,
    GPU_TEMP_WARN_C,
    IOWAIT_CRIT_PCT,
    IOWAIT_WARN_PCT,
    LOAD_PER_CORE_WARN,
    MEM_AVAILABLE_CRIT_PCT,
    MEM_AVAILABLE_WARN_PCT,
    POWER_AT_CAP_PCT,
    SM_CLOCK_LOW_PCT,
    SWAP_USED_WARN_MIB,
    UNDER_LOAD_PCT,
    WARN_THROTTLE,
)

__all__ = ["GpuValues", "HostValues", "by_severity", "gpu_findings", "host_findings"]


@dataclass
class GpuValues:
    """What is known of one GPU; None means unknown (never zero)."""

    index: int
    utilization_gpu_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: list[str] | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    ecc_uncorrected_volatile: int | None = None
    retired_pages: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    # None: the GPU's processes were not looked at (an nvidia-smi query of other fields), so no row is given.
    foreign_processes: list[str] | None = None


@dataclass
class HostValues:
    cpu_count: int
    load_1m: float | None
    busy_cores: int
    memory_total_mib: float
    memory_available_mib: float
    swap_used_mib: float
    swapping_mib_s: float
    iowait_pct: float | None
    blocked_processes: list[str]


@dataclass
class _Check:
    """One kind of per-GPU check: its failures per GPU and its worst ok value for the folded row."""

    name: str
    threshold: str
    ok_meaning: str
    failures: list[Finding] = field(default_factory=list)
    ok_gpus: list[int] = field(default_factory=list)
    ok_values: list[str] = field(default_factory=list)


def _under_load(gpu: GpuValues) -> bool:
    return gpu.utilization_gpu_pct is not None and gpu.utilization_gpu_pct >= UNDER_LOAD_PCT


def gpu_findings(gpus: Sequence[GpuValues]) -> list[Finding]:
    """Evaluate every GPU check; failures one row per GPU, passes folded into one row per check."""
    checks: dict[str, _Check] = {}

    def record(
        key: str, threshold: str, ok_meaning: str, gpu: GpuValues, value: str | None,
        severity: Severity = Severity.ok, meaning: str = "", branch: str | None = None,
    ) -> None:
        check = checks.setdefault(key, _Check(key, threshold, ok_meaning))
        if value is None:
            return
        if severity is Severity.ok:
            check.ok_gpus.append(gpu.index)
            check.ok_values.append(value)
        else:
            check.failures.append(
                Finding(check=f"GPU {gpu.index} {key}", value=value, threshold=threshold, severity=severity,
                        meaning=meaning, sop_branch=branch)
            )

    for gpu in gpus:
        # Temperature.
        t = gpu.temperature_c
        record(
            "temperature", f">= {GPU_TEMP_WARN_C} C warn, >= {GPU_TEMP_CRIT_C} C crit", "cool enough", gpu,
            None if t is None else f"{t:g} C",
            Severity.crit if t is not None and t >= GPU_TEMP_CRIT_C
            else Severity.warn if t is not None and t >= GPU_TEMP_WARN_C else Severity.ok,
            "hot enough to lower SM clocks: this GPU computes slower and the other ranks wait for it",
            "straggler",
        )
        # Clock throttle reasons.
        reasons = gpu.throttle_reasons
        if reasons is not None:
            bad = sorted(set(reasons) & CRIT_THROTTLE)
            capped = sorted(set(reasons) & WARN_THROTTLE)
            record(
                "clock throttle", "hw/thermal slowdown crit, sw power cap warn", "no slowdown reason active", gpu,
                ",".join(reasons) or "none",
                Severity.crit if bad else Severity.warn if capped and _under_load(gpu) else Severity.ok,
                "clocks held down by " + ", ".join(bad or capped) + " (cooling, power supply or power cap)",
                "straggler",
            )
        # SM clock under load.
        if gpu.sm_clock_mhz is not None and gpu.sm_clock_max_mhz and _under_load(gpu):
            pct = 100.0 * gpu.sm_clock_mhz / gpu.sm_clock_max_mhz
            record(
                "SM clock", f"< {SM_CLOCK_LOW_PCT:g}% of max under load", "near max under load", gpu,
                f"{gpu.sm_clock_mhz:g}/{gpu.sm_clock_max_mhz:g} MHz ({pct:.0f}%)",
                Severity.warn if pct < SM_CLOCK_LOW_PCT else Severity.ok,
                "running well below its max clock while busy: check throttle reasons, temperature, power cap",
                "straggler",
            )
        # Power at cap.
        if gpu.power_draw_w is not None and gpu.power_limit_w:
            pct = 100.0 * gpu.power_draw_w / gpu.power_limit_w
            record(
                "power", f">= {POWER_AT_CAP_PCT:g}% of the enforced limit", "below its limit", gpu,
                f"{gpu.power_draw_w:.0f}/{gpu.power_limit_w:.0f} W",
                Severity.warn if pct >= POWER_AT_CAP_PCT else Severity.ok,
                "drawing its full power limit: boost cannot go higher; check for a lowered limit (nvidia-smi -pl)",
                "straggler",
            )
        # Memory nearly full.
        if gpu.memory_used_mib is not None and gpu.memory_total_mib:
            pct = 100.0 * gpu.memory_used_mib / gpu.memory_total_mib
            record(
                "memory", f">= {GPU_MEMORY_WARN_PCT:g}% used", "headroom left", gpu,
                f"{gpu.memory_used_mib:.0f}/{gpu.memory_total_mib:.0f} MiB ({pct:.0f}%)",
                Severity.warn if pct >= GPU_MEMORY_WARN_PCT else Severity.ok,
                "almost no free memory: the next peak OOMs or the allocator fragments", "oom",
            )
        # PCIe link width and generation.
        if gpu.pcie_width_current is not None and gpu.pcie_width_max:
            w, wmax = gpu.pcie_width_current, gpu.pcie_width_max
            record(
                "PCIe width", "current below max", "at max width", gpu, f"x{w} of x{wmax}",
                Severity.crit if w * 2 <= wmax else Severity.warn if w < wmax else Severity.ok,
                "the link trained below its width: host-device copies and PCIe collectives run slower "
                "(reseat the card or check the riser/slot)",
                "gpu_hardware",
            )
        if gpu.pcie_gen_current is not None and gpu.pcie_gen_max:
            g, gmax = gpu.pcie_gen_current, gpu.pcie_gen_max
            downgraded = g < gmax and _under_load(gpu)
            record(
                "PCIe generation", "current below max while under load", "at max (or idle, where lower is normal)",
                gpu, f"Gen{g} of Gen{gmax}" + ("" if g == gmax or _under_load(gpu) else " (idle)"),
                Severity.warn if downgraded else Severity.ok,
                "the link runs at a lower PCIe generation while busy: copies are slower", "gpu_hardware",
            )
        # ECC and memory retirement.
        if gpu.ecc_uncorrected_volatile is not None:
            e = gpu.ecc_uncorrected_volatile
            record(
                "ECC uncorrected (volatile)", "> 0", "none since the last driver load", gpu, str(e),
                Severity.crit if e > 0 else Severity.ok,
                "uncorrectable memory errors: results may be wrong and the job may crash; drain the node and "
                "reset the GPU",
                "gpu_hardware",
            )
        pending = [n for n, v in (("page retirement", gpu.retired_pages_pending),
                                  ("row remap", gpu.remapped_rows_pending)) if v]
        failed = bool(gpu.remapped_rows_failure)
        if gpu.retired_pages_pending is not None or gpu.remapped_rows_pending is not None:
            retired = f", {gpu.retired_pages} retired pages" if gpu.retired_pages else ""
            record(
                "memory repair", "pending retirement/remap or remap failure", "nothing pending", gpu,
                ("remap FAILED; " if failed else "") + ("pending: " + ", ".join(pending) if pending else "none")
                + retired,
                Severity.crit if failed or pending else Severity.ok,
                "memory repair waits for a GPU reset (or failed): reset the GPU when the job allows, "
                "replace it if remapping failed",
                "gpu_hardware",
            )
        # Other processes on this GPU.
        if gpu.foreign_processes is not None:
            record(
                "other processes", "a process not in the job", "only the job's processes", gpu,
                ", ".join(gpu.foreign_processes) or "none",
                Severity.warn if gpu.foreign_processes else Severity.ok,
                "another process shares this GPU: it takes SMs and memory from the job", "gpu_utilization_low",
            )

    findings: list[Finding] = []
    for check in checks.values():
        findings.extend(check.failures)
        if check.ok_gpus:
            findings.append(
                Finding(
                    check=f"GPU {compact_ranges(check.ok_gpus)} {check.name}",
                    value=_fold_values(check.ok_values),
                    threshold=check.threshold,
                    severity=Severity.ok,
                    meaning=check.ok_meaning,
                )
            )
    return findings


def _fold_values(values: list[str]) -> str:
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else f"{distinct[0]} .. {distinct[-1]} ({len(values)} GPUs)"


def host_findings(host: HostValues) -> list[Finding]:
    found: list[Finding] = []
    if host.load_1m is not None:
        per_core = host.load_1m / max(host.cpu_count, 1)
        found.append(Finding(
            check="CPU load (1 min)", value=f"{host.load_1m:.2f} on {host.cpu_count} cores",
            threshold=f"> {LOAD_PER_CORE_WARN:g} per core",
            severity=Severity.warn if per_core > LOAD_PER_CORE_WARN else Severity.ok,
            meaning="more runnable threads than cores: data loading and kernel launches are starved"
            if per_core > LOAD_PER_CORE_WARN else "CPU not oversubscribed",
            sop_branch="gpu_utilization_low" if per_core > LOAD_PER_CORE_WARN else None,
        ))
    saturated = host.busy_cores >= max(1, host.cpu_count) and host.cpu_count > 0
    found.append(Finding(
        check="CPU cores saturated", value=f"{host.busy_cores}/{host.cpu_count} cores >= {CORE_SATURATED_PCT:g}%",
        threshold="all cores busy", severity=Severity.warn if saturated else Severity.ok,
        meaning="every core is busy: the input pipeline or another tenant may be CPU-bound"
        if saturated else "spare CPU cores",
        sop_branch="gpu_utilization_low" if saturated else None,
    ))
    avail_pct = 100.0 * host.memory_available_mib / max(host.memory_total_mib, 1.0)
    found.append(Finding(
        check="host memory available", value=f"{host.memory_available_mib:.0f}/{host.memory_total_mib:.0f} MiB "
        f"({avail_pct:.0f}%)",
        threshold=f"< {MEM_AVAILABLE_WARN_PCT:g}% warn, < {MEM_AVAILABLE_CRIT_PCT:g}% crit",
        severity=Severity.crit if avail_pct < MEM_AVAILABLE_CRIT_PCT
        else Severity.warn if avail_pct < MEM_AVAILABLE_WARN_PCT else Severity.ok,
        meaning="host memory nearly exhausted: the OOM killer or swapping is next"
        if avail_pct < MEM_AVAILABLE_WARN_PCT else "enough host memory",
        sop_branch="gpu_utilization_low" if avail_pct < MEM_AVAILABLE_WARN_PCT else None,
    ))
    swapping = host.swapping_mib_s > 0
    swap_bad = host.swap_used_mib >= SWAP_USED_WARN_MIB or swapping
    found.append(Finding(
        check="swap", value=f"{host.swap_used_mib:.0f} MiB used, {host.swapping_mib_s:.1f} MiB/s in+out now",
        threshold=f">= {SWAP_USED_WARN_MIB:g} MiB used or any swapping",
        severity=Severity.warn if swap_bad else Severity.ok,
        meaning="the host swaps: data loader workers and pinned-memory copies stall"
        if swap_bad else "no swapping",
        sop_branch="gpu_utilization_low" if swap_bad else None,
    ))
    if host.iowait_pct is not None:
        io = host.iowait_pct
        found.append(Finding(
            check="CPU iowait", value=f"{io:.1f}%",
            threshold=f">= {IOWAIT_WARN_PCT:g}% warn, >= {IOWAIT_CRIT_PCT:g}% crit",
            severity=Severity.crit if io >= IOWAIT_CRIT_PCT else Severity.warn if io >= IOWAIT_WARN_PCT
            else Severity.ok,
            meaning="CPUs wait on storage: the data pipeline is I/O bound (check iostat %util, the dataset's disk)"
            if io >= IOWAIT_WARN_PCT else "storage is keeping up",
            sop_branch="gpu_utilization_low" if io >= IOWAIT_WARN_PCT else None,
        ))
    blocked = host.blocked_processes
    found.append(Finding(
        check="processes in D state", value=", ".join(blocked[:5]) + (" ..." if len(blocked) > 5 else "")
        if blocked else "none",
        threshold=">= 1", severity=Severity.warn if blocked else Severity.ok,
        meaning="processes stuck in uninterruptible I/O (slow or hung storage or driver)"
        if blocked else "no process stuck in I/O",
        sop_branch="gpu_utilization_low" if blocked else None,
    ))
    return found


def by_severity(findings: list[Finding]) -> list[Finding]:
    """Worst first, stable within a severity."""
    buckets: dict[int, list[Finding]] = defaultdict(list)
    for finding in findings:
        buckets[finding.severity.rank].append(finding)
    return [f for rank in sorted(buckets, reverse=True) for f in buckets[rank]]
