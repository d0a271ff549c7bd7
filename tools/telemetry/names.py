"""The one table of dcgm-exporter names: what each measure is called in each exporter generation, its unit there,
and how the labels of a GPU series are spelled. Nothing else in the package names a metric or a label.

Generations (../shared/notes/metrics_history.md section 1):
- legacy, dcgm-exporter <= 4.8: `DCGM_FI_DEV_*` / `DCGM_FI_PROF_*` as in etc/default-counters.csv (MHz, %, MiB);
- 4.9 and later: the DCGM 4.7 canonical names of dcgm_fields.h's alias table (`DCGM_FI_DEV_SM_CLOCK_HERTZ` in Hz,
  `DCGM_FI_DEV_GPU_UTIL_RATIO` as 0-1, `DCGM_FI_DEV_BOARD_POWER_WATTS`, `DCGM_FI_DEV_XID_ERROR`...);
- 1.x compatibility (etc/1.x-compatibility-metrics.csv): lowercase `dcgm_*` names.
Labels: `Hostname` became `hostname` (4.6-4.8.3), `UUID` is `uuid` with --use-old-namespace, MIG instances carry
`GPU_I_ID` / `GPU_I_PROFILE` on the parent GPU's `gpu` and `UUID`, and behind kube-prometheus (honorLabels: false) the
workload labels arrive as `exported_pod` / `exported_namespace`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CONCEPTS", "Candidate", "Concept", "LABELS", "REASON_BITS", "RELEVANT_REASONS", "label_of"]


@dataclass(frozen=True)
class Candidate:
    name: str
    scale: float  # multiply a value by this for the concept's unit
    generation: str


@dataclass(frozen=True)
class Concept:
    key: str
    title: str
    unit: str
    candidates: tuple[Candidate, ...]
    counter: bool = False  # read as increase() over the window


def _c(key: str, title: str, unit: str, *names: tuple[str, float, str], counter: bool = False) -> Concept:
    return Concept(key, title, unit, tuple(Candidate(*n) for n in names), counter)


CONCEPTS: dict[str, Concept] = {c.key: c for c in (
    _c("sm_clock", "SM clock", "MHz", ("DCGM_FI_DEV_SM_CLOCK", 1.0, "legacy"),
       ("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e-6, "4.9"), ("dcgm_sm_clock", 1.0, "1.x")),
    _c("gpu_util", "GPU utilisation", "%", ("DCGM_FI_DEV_GPU_UTIL", 1.0, "legacy"),
       ("DCGM_FI_DEV_GPU_UTIL_RATIO", 100.0, "4.9"), ("dcgm_gpu_utilization", 1.0, "1.x")),
    # The activity of a MIG instance (GPU_UTIL is not supported there: dcgm-exporter issues 216, 105).
    _c("gr_engine_active", "graphics engine active", "%", ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100.0, "legacy"),
       ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", 100.0, "4.9"), ("dcgm_fi_prof_gr_engine_active", 100.0, "1.x")),
    _c("gpu_temp", "GPU temperature", "C", ("DCGM_FI_DEV_GPU_TEMP", 1.0, "legacy"),
       ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0, "4.9"), ("dcgm_gpu_temp", 1.0, "1.x")),
    _c("power", "power draw", "W", ("DCGM_FI_DEV_POWER_USAGE", 1.0, "legacy"),
       ("DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0, "4.9"), ("dcgm_power_usage", 1.0, "1.x")),
    # Memory held: only "more than nothing" is asked of it, so MiB and the 0-1 share both serve.
    _c("fb_used", "memory used", "MiB or %", ("DCGM_FI_DEV_FB_USED", 1.0, "legacy"), ("dcgm_fb_used", 1.0, "1.x"),
       ("DCGM_FI_DEV_FB_USED_PERCENT", 100.0, "4.9")),
    _c("clock_reasons", "clock event reasons", "bitmask", ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 1.0, "legacy"),
       ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 1.0, "deprecated alias")),
    # The last XID code, a gauge that keeps it (never reset): its changes matter, not its rate.
    _c("xid", "last XID", "code", ("DCGM_FI_DEV_XID_ERRORS", 1.0, "legacy"), ("DCGM_FI_DEV_XID_ERROR", 1.0, "4.9"),
       ("dcgm_xid_errors", 1.0, "1.x")),
    _c("pcie_replay", "PCIe replays", "retries", ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 1.0, "legacy"),
       ("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", 1.0, "4.9"), counter=True),
    _c("ecc_dbe", "double-bit ECC errors", "errors", ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1.0, "legacy"), counter=True),
    _c("remapped_uncorrectable", "uncorrectable remapped rows", "rows",
       ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1.0, "legacy"),
       ("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", 1.0, "4.9"), counter=True),
    _c("row_remap_failure", "row-remap failure", "flag", ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1.0, "legacy"),
       ("DCGM_FI_DEV_ROW_REMAP_FAILED", 1.0, "4.9")),
    _c("nvlink_crc", "NVLink CRC flit errors", "errors",
       ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 1.0, "legacy"), counter=True),
    # Link throughput, read as rates (bytes/s). The PROF fields are gauges of B/s; 4.10 adds _PER_SECOND to their
    # names. NVLINK_BANDWIDTH_TOTAL is declared a counter but holds a rate in MB/s (KempnerInstitute/kempnerpulse
    # issue 10, checked against nvidia-smi nvlink -gt d); 4.9 names it THROUGHPUT_TOTAL in bytes/s.
    _c("nvlink_tx", "NVLink TX", "B/s", ("DCGM_FI_PROF_NVLINK_TX_BYTES", 1.0, "legacy"),
       ("DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND", 1.0, "4.10")),
    _c("nvlink_rx", "NVLink RX", "B/s", ("DCGM_FI_PROF_NVLINK_RX_BYTES", 1.0, "legacy"),
       ("DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND", 1.0, "4.10")),
    _c("nvlink_total", "NVLink throughput", "B/s", ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 1e6, "legacy"),
       ("DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", 1.0, "4.9")),
    _c("pcie_tx", "PCIe TX", "B/s", ("DCGM_FI_PROF_PCIE_TX_BYTES", 1.0, "legacy"),
       ("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", 1.0, "4.10")),
    _c("pcie_rx", "PCIe RX", "B/s", ("DCGM_FI_PROF_PCIE_RX_BYTES", 1.0, "legacy"),
       ("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", 1.0, "4.10")),
)}

# How each label of a GPU series may be spelled, in order of preference. `instance` (host:port of the scrape) is the
# host's last resort: with --no-hostname the exporter writes none.
LABELS: dict[str, tuple[str, ...]] = {
    "host": ("Hostname", "hostname", "node", "nodename", "exported_instance", "instance"),
    "gpu": ("gpu",),
    "uuid": ("UUID", "uuid", "gpu_uuid"),
    "mig": ("GPU_I_ID", "gpu_i_id"),
    "mig_profile": ("GPU_I_PROFILE", "gpu_i_profile"),
    "model": ("modelName", "modelname", "model_name"),
    "job": ("hpc_job",),
    "pod": ("pod", "exported_pod", "pod_name"),
    "namespace": ("namespace", "exported_namespace", "pod_namespace"),
    "xid_code": ("err_code",),
}


def label_of(labels: dict[str, str], key: str) -> str:
    """The value of the first spelling of `key` present and non-empty ('' when none); a host taken from `instance`
    loses its port."""
    for name in LABELS[key]:
        value = labels.get(name, "")
        if value:
            return value.rsplit(":", 1)[0] if name in ("instance", "exported_instance") and ":" in value else value
    return ""


# DCGM_CLOCKS_EVENT_REASON_* bits (dcgm_fields.h), named as NVML / nvidia-smi name them (the names of
# tools/core/thresholds.py CRIT_THROTTLE and WARN_THROTTLE).
REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# The bits that slow a working GPU down (idle, an application clock setting, sync boost and display are not faults).
RELEVANT_REASONS = (0x4, 0x8, 0x20, 0x40, 0x80)
