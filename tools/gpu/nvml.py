"""The only module that imports pynvml: a thin, honest NVML reader.

Every NVML call goes through `NvmlSession.query`, which turns NVML errors into a `Missing` value with
the reason (a missing value is never 0), decodes bytes, and converts NVML's units (mW, bytes) into the
project's (W, MiB). `open_session` initialises NVML lazily and maps a missing library or driver to
`Unavailable("NVML unavailable: <reason>")`, which health_check reports as one row.

Tests replace pynvml with a fake module of the same function names (tests/fakes/nvml/pynvml.py) put
first on PYTHONPATH: NVML is hardware this project's CI lacks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from types import ModuleType
from typing import Any, TypeVar

from tools.core.errors import Unavailable

__all__ = ["GPM_METRICS", "Missing", "NvmlDevice", "NvmlProcess", "NvmlSession", "THROTTLE_REASON_BITS",
           "open_session"]

T = TypeVar("T")

MIB = 1024 * 1024

# nvmlClocksEventReason* bit masks (formerly nvmlClocksThrottleReason*), named as nvidia-smi names
# its clocks_event_reasons.* query fields.
THROTTLE_REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


# NVML GPU Performance Monitoring (Hopper and newer): metric id -> (our name, scale to our unit). NVML gives the
# activities in percent (0-100) and the PCIe / NVLink rates in MiB/s (nvml.h, NVML_GPM_METRIC_*); we keep
# fractions (as DCGM does) and bytes per second.
GPM_METRICS: dict[int, tuple[str, float]] = {
    1: ("gr_engine_active", 0.01), 2: ("sm_active", 0.01), 3: ("sm_occupancy", 0.01), 4: ("integer_active", 0.01),
    5: ("tensor_active", 0.01), 6: ("tensor_dfma_active", 0.01), 7: ("tensor_hmma_active", 0.01),
    9: ("tensor_imma_active", 0.01), 10: ("dram_active", 0.01), 11: ("fp64_active", 0.01),
    12: ("fp32_active", 0.01), 13: ("fp16_active", 0.01), 20: ("pcie_tx_bytes_per_s", float(MIB)),
    21: ("pcie_rx_bytes_per_s", float(MIB)), 60: ("nvlink_rx_bytes_per_s", float(MIB)),
    61: ("nvlink_tx_bytes_per_s", float(MIB)),
}


@dataclass(frozen=True)
class Missing:
    """A value NVML could not give, with the reason (e.g. 'Not Supported')."""

    reason: str


@dataclass(frozen=True)
class NvmlProcess:
    pid: int
    used_memory_mib: float | None


@dataclass
class NvmlDevice:
    """Raw per-GPU values from one snapshot. Each is the value or Missing(reason)."""

    index: int
    name: str | Missing
    uuid: str | Missing
    bus_id: str | Missing
    utilization_gpu_pct: int | Missing
    utilization_memory_pct: int | Missing
    memory_used_mib: float | Missing
    memory_total_mib: float | Missing
    sm_clock_mhz: int | Missing
    sm_clock_max_mhz: int | Missing
    temperature_c: int | Missing
    power_draw_w: float | Missing
    power_limit_w: float | Missing
    throttle_reasons_mask: int | Missing
    pcie_gen_current: int | Missing
    pcie_gen_max: int | Missing
    pcie_width_current: int | Missing
    pcie_width_max: int | Missing
    ecc_uncorrected_volatile: int | Missing
    retired_pages: int | Missing
    retired_pages_pending: bool | Missing
    remapped_rows_uncorrectable: int | Missing
    remapped_rows_pending: bool | Missing
    remapped_rows_failure: bool | Missing
    processes: list[NvmlProcess] | Missing = field(default_factory=list)


def _decode(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class NvmlSession:
    """An initialised NVML library. Obtain one with `open_session()`."""

    def __init__(self, module: ModuleType) -> None:
        self._nvml = module

    def query(self, getter: str, *args: Any, convert: Callable[[Any], T] = _decode) -> T | Missing:
        """Call `pynvml.<getter>(*args)`; NVML errors and absent functions become Missing."""
        function = getattr(self._nvml, getter, None)
        if function is None:
            return Missing(f"{getter} not in this pynvml")
        try:
            return convert(_decode(function(*args)))
        except self._nvml.NVMLError as exc:
            return Missing(str(exc))

    def driver_version(self) -> str | Missing:
        return self.query("nvmlSystemGetDriverVersion", convert=str)

    def cuda_driver_version(self) -> str | Missing:
        # NVML reports e.g. 12040 for CUDA 12.4.
        return self.query(
            "nvmlSystemGetCudaDriverVersion", convert=lambda v: f"{int(v) // 1000}.{int(v) % 1000 // 10}"
        )

    def device_count(self) -> int:
        count = self.query("nvmlDeviceGetCount", convert=int)
        if isinstance(count, Missing):
            raise Unavailable(f"NVML unavailable: cannot count GPUs ({count.reason}).")
        return count

    def device(self, index: int) -> NvmlDevice:
        nvml = self._nvml
        handle = self.query("nvmlDeviceGetHandleByIndex", index, convert=lambda h: h)
        if isinstance(handle, Missing):
            gone = Missing(f"GPU {index} not reachable: {handle.reason}")
            unknown = {f.name: gone for f in fields(NvmlDevice) if f.name != "index"}
            return NvmlDevice(index=index, **unknown)
        q = self.query
        util = q("nvmlDeviceGetUtilizationRates", handle, convert=lambda u: (int(u.gpu), int(u.memory)))
        memory = q("nvmlDeviceGetMemoryInfo", handle, convert=lambda m: (m.used / MIB, m.total / MIB))
        reasons = q("nvmlDeviceGetCurrentClocksEventReasons", handle, convert=int)
        if isinstance(reasons, Missing):
            reasons = q("nvmlDeviceGetCurrentClocksThrottleReasons", handle, convert=int)
        retired_single = q(
            "nvmlDeviceGetRetiredPages", handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            convert=len,
        )
        retired_double = q(
            "nvmlDeviceGetRetiredPages", handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, convert=len
        )
        retired: int | Missing = (
            retired_single + retired_double
            if isinstance(retired_single, int) and isinstance(retired_double, int)
            else retired_single if isinstance(retired_single, Missing) else retired_double
        )
        # (correctable, uncorrectable, pending, failure)
        remapped = q("nvmlDeviceGetRemappedRows", handle, convert=tuple)
        return NvmlDevice(
            index=index,
            name=q("nvmlDeviceGetName", handle, convert=str),
            uuid=q("nvmlDeviceGetUUID", handle, convert=str),
            bus_id=q("nvmlDeviceGetPciInfo", handle, convert=lambda p: str(_decode(p.busId))),
            utilization_gpu_pct=_pick(util, 0),
            utilization_memory_pct=_pick(util, 1),
            memory_used_mib=_pick(memory, 0),
            memory_total_mib=_pick(memory, 1),
            sm_clock_mhz=q("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM, convert=int),
            sm_clock_max_mhz=q("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_SM, convert=int),
            temperature_c=q("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU, convert=int),
            power_draw_w=q("nvmlDeviceGetPowerUsage", handle, convert=lambda mw: mw / 1000.0),
            power_limit_w=q("nvmlDeviceGetEnforcedPowerLimit", handle, convert=lambda mw: mw / 1000.0),
            throttle_reasons_mask=reasons,
            pcie_gen_current=q("nvmlDeviceGetCurrPcieLinkGeneration", handle, convert=int),
            pcie_gen_max=q("nvmlDeviceGetMaxPcieLinkGeneration", handle, convert=int),
            pcie_width_current=q("nvmlDeviceGetCurrPcieLinkWidth", handle, convert=int),
            pcie_width_max=q("nvmlDeviceGetMaxPcieLinkWidth", handle, convert=int),
            ecc_uncorrected_volatile=q(
                "nvmlDeviceGetTotalEccErrors", handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_VOLATILE_ECC, convert=int,
            ),
            retired_pages=retired,
            retired_pages_pending=q("nvmlDeviceGetRetiredPagesPendingStatus", handle, convert=bool),
            remapped_rows_uncorrectable=_pick(remapped, 1),
            remapped_rows_pending=_pick(remapped, 2, bool),
            remapped_rows_failure=_pick(remapped, 3, bool),
            processes=q("nvmlDeviceGetComputeRunningProcesses", handle, convert=_processes),
        )


    def utilization_gpu_pct(self, index: int) -> int | Missing:
        """utilization.gpu alone (the whole `device` snapshot is dozens of calls)."""
        handle = self.query("nvmlDeviceGetHandleByIndex", index, convert=lambda h: h)
        if isinstance(handle, Missing):
            return handle
        return self.query("nvmlDeviceGetUtilizationRates", handle, convert=lambda u: int(u.gpu))

    def gpm_supported(self, index: int) -> bool | Missing:
        """Whether the GPU has GPM (Hopper and newer; not every MIG or vGPU setup)."""
        handle = self.query("nvmlDeviceGetHandleByIndex", index, convert=lambda h: h)
        if isinstance(handle, Missing):
            return handle
        return self.query("nvmlGpmQueryDeviceSupport", handle, convert=lambda s: bool(s.isSupportedDevice))

    def gpm_take(self, index: int) -> Any | Missing:
        """One GPM sample of the GPU (an NVML-allocated buffer: hand it to gpm_metrics, which frees it)."""
        handle = self.query("nvmlDeviceGetHandleByIndex", index, convert=lambda h: h)
        if isinstance(handle, Missing):
            return handle
        sample = self.query("nvmlGpmSampleAlloc", convert=lambda s: s)
        if isinstance(sample, Missing):
            return sample
        taken = self.query("nvmlGpmSampleGet", handle, sample, convert=lambda s: s)
        if isinstance(taken, Missing):
            self.query("nvmlGpmSampleFree", sample)
        return taken

    def gpm_metrics(self, first: Any, second: Any) -> dict[str, float | Missing] | Missing:
        """The GPM metrics over the time between two samples, in our names and units; frees the first sample."""
        nvml = self._nvml
        try:
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(GPM_METRICS)
            request.sample1, request.sample2 = first, second
            for slot, metric in enumerate(GPM_METRICS):
                request.metrics[slot].metricId = metric
        except AttributeError as exc:
            return Missing(f"this pynvml has no GPM ({exc})")
        answer = self.query("nvmlGpmMetricsGet", request, convert=lambda r: r)
        self.query("nvmlGpmSampleFree", first)
        if isinstance(answer, Missing):
            return answer
        values: dict[str, float | Missing] = {}
        for slot, (name, scale) in enumerate(GPM_METRICS.values()):
            metric = answer.metrics[slot]
            values[name] = (float(metric.value) * scale if int(metric.nvmlReturn) == 0
                            else Missing(f"NVML return {int(metric.nvmlReturn)}"))
        return values

    def gpm_free(self, sample: Any) -> None:
        self.query("nvmlGpmSampleFree", sample)


def _pick(values: tuple[Any, ...] | Missing, position: int, convert: Callable[[Any], Any] = lambda v: v) -> Any:
    return values if isinstance(values, Missing) else convert(values[position])


def _processes(raw: Any) -> list[NvmlProcess]:
    found = []
    for proc in raw:
        used = getattr(proc, "usedGpuMemory", None)
        # NVML reports "not available" (e.g. without permission or under MIG) as None or a huge sentinel.
        mib = None if used is None or used >= 2**63 else used / MIB
        found.append(NvmlProcess(pid=int(proc.pid), used_memory_mib=mib))
    return found


@contextmanager
def open_session() -> Iterator[NvmlSession]:
    """Initialise NVML for one snapshot and shut it down afterwards."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError as exc:
        raise Unavailable(
            "NVML unavailable: the pynvml module is not installed.", "pip install nvidia-ml-py"
        ) from exc
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise Unavailable(
            f"NVML unavailable: {exc}.",
            "No NVIDIA driver is loaded on this host (or it is not visible in this container); "
            "GPU checks need a GPU node.",
        ) from exc
    except OSError as exc:
        raise Unavailable(f"NVML unavailable: {exc}.") from exc
    try:
        yield NvmlSession(nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
