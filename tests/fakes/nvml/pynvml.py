"""Stand-in for the pynvml module (this CI has no NVIDIA driver), put first on PYTHONPATH by tests.

Allowed by the project's rules: NVML is hardware the tests may fake, at the pynvml function boundary.
The functions, constants, return shapes and units (mW, bytes, struct attributes, NVMLError with
NVML's own error strings) are those of nvidia-ml-py; the per-GPU values come from the JSON scenario
named by GPU_TRIAGE_FAKE_NVML. Without that variable it behaves like a host with no driver.

Scenario: {"driver": "550.54.15", "cuda": 12040, "gpus": [{<key>: value, ...}, ...]} with keys
name, uuid, bus_id, util_gpu, util_mem, mem_used_mib, mem_total_mib, sm_clock, sm_clock_max,
temperature, power_w, power_limit_w, throttle_mask, pcie_gen, pcie_gen_max, pcie_width,
pcie_width_max, ecc_uncorrected, retired_sbe, retired_dbe, retired_pending, remapped
([corr, unc, pending, failure]) and processes ([{"pid": P, "used_mib": M}]).
A value of "NOT_SUPPORTED" makes that call raise NVMLError(NVML_ERROR_NOT_SUPPORTED), as on GPUs
without the feature.

GPM (Hopper and newer): "gpm": {"<NVML_GPM_METRIC id>": value as NVML gives it (percent, or MiB/s for PCIe and
NVLink)}; a GPU without "gpm" reports isSupportedDevice 0, as pre-Hopper GPUs do, and a metric left out of it
answers NVML_ERROR_NOT_SUPPORTED in its slot.
"""

import json
import os
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
}


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


# nvmlInit / nvmlShutdown are reference counted, as NVML's are: two sessions at once (health_check reads the
# snapshot and GPM together) each keep the library up until the last one shuts down.
_state = {"scenario": None, "inits": 0}


def _scenario():
    if _state["scenario"] is None:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _state["scenario"]


def _gpu(handle):
    return _scenario()["gpus"][handle]


def _get(handle, key):
    value = _gpu(handle).get(key, "NOT_SUPPORTED")
    if value == "NOT_SUPPORTED":
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


def nvmlInit():
    path = os.environ.get("GPU_TRIAGE_FAKE_NVML")
    if not path:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    # Emulated multi-node tests run every "node" on one machine with one environment: "{node}" in the path
    # gives each node its own GPUs (SLURMD_NODENAME is set by slurmd in each node's job step).
    path = path.replace("{node}", os.environ.get("SLURMD_NODENAME", "localhost"))
    with open(path, encoding="utf-8") as f:
        scenario = json.load(f)
    _state["scenario"] = _state["scenario"] or scenario
    _state["inits"] += 1


def nvmlShutdown():
    _scenario()
    _state["inits"] -= 1
    if _state["inits"] == 0:
        _state["scenario"] = None


def nvmlSystemGetDriverVersion():
    return _scenario()["driver"]


def nvmlSystemGetCudaDriverVersion():
    return _scenario()["cuda"]


def nvmlDeviceGetCount():
    return len(_scenario()["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < len(_scenario()["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return index


def nvmlDeviceGetName(handle):
    return _get(handle, "name")


def nvmlDeviceGetUUID(handle):
    return _get(handle, "uuid")


def nvmlDeviceGetPciInfo(handle):
    return SimpleNamespace(busId=_get(handle, "bus_id").encode())


def nvmlDeviceGetUtilizationRates(handle):
    return SimpleNamespace(gpu=_get(handle, "util_gpu"), memory=_get(handle, "util_mem"))


def nvmlDeviceGetMemoryInfo(handle):
    mib = 1024 * 1024
    total = _get(handle, "mem_total_mib") * mib
    used = _get(handle, "mem_used_mib") * mib
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetClockInfo(handle, clock):
    assert clock == NVML_CLOCK_SM
    return _get(handle, "sm_clock")


def nvmlDeviceGetMaxClockInfo(handle, clock):
    assert clock == NVML_CLOCK_SM
    return _get(handle, "sm_clock_max")


def nvmlDeviceGetTemperature(handle, sensor):
    assert sensor == NVML_TEMPERATURE_GPU
    return _get(handle, "temperature")


def nvmlDeviceGetPowerUsage(handle):
    return int(_get(handle, "power_w") * 1000)


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return int(_get(handle, "power_limit_w") * 1000)


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _get(handle, "throttle_mask")


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _get(handle, "pcie_gen")


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _get(handle, "pcie_gen_max")


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _get(handle, "pcie_width")


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _get(handle, "pcie_width_max")


def nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type):
    assert (error_type, counter_type) == (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
    return _get(handle, "ecc_uncorrected")


def nvmlDeviceGetRetiredPages(handle, cause):
    key = "retired_dbe" if cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR else "retired_sbe"
    return [0x1000 * i for i in range(_get(handle, key))]


def nvmlDeviceGetRetiredPagesPendingStatus(handle):
    return 1 if _get(handle, "retired_pending") else 0


def nvmlDeviceGetRemappedRows(handle):
    return tuple(_get(handle, "remapped"))


def nvmlDeviceGetComputeRunningProcesses(handle):
    return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_mib"] * 1024 * 1024)
            for p in _get(handle, "processes")]


NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_METRIC_MAX = 210


class c_nvmlGpmMetric_t:
    def __init__(self):
        self.metricId, self.nvmlReturn, self.value = 0, NVML_SUCCESS, 0.0


class c_nvmlGpmMetricsGet_t:
    def __init__(self):
        self.version = self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [c_nvmlGpmMetric_t() for _ in range(NVML_GPM_METRIC_MAX)]


_samples = {"allocated": 0}


def nvmlGpmQueryDeviceSupport(device):
    return SimpleNamespace(version=1, isSupportedDevice=int("gpm" in _gpu(device)))


def nvmlGpmSampleAlloc():
    _samples["allocated"] += 1
    return SimpleNamespace(device=None)


def nvmlGpmSampleFree(sample):
    _samples["allocated"] -= 1


def nvmlGpmSampleGet(device, sample):
    if "gpm" not in _gpu(device):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    sample.device = device
    return sample


def nvmlGpmMetricsGet(request):
    assert request.version == NVML_GPM_METRICS_GET_VERSION
    device = request.sample1.device
    assert device is not None and device == request.sample2.device
    values = _gpu(device)["gpm"]
    for metric in request.metrics[: request.numMetrics]:
        value = values.get(str(metric.metricId))
        metric.nvmlReturn, metric.value = (NVML_ERROR_NOT_SUPPORTED, 0.0) if value is None else (NVML_SUCCESS, value)
    return request
