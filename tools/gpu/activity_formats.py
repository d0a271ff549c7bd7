"""The saved forms of what the SMs do, read into one shape: per GPU (or MIG instance) a series of each metric, as
fractions for the activities (as DCGM gives them), bytes per second for the PCIe / NVLink rates, and percent for
utilization.gpu. A cell the source leaves blank is no value, never 0.

- dcgm-exporter's `/metrics` page (DCGM_FI_PROF_*, DCGM_FI_DEV_GPU_UTIL), through the project's one Prometheus
  reader; several pages of one exporter make a series. Label sets vary by version (`gpu`/`UUID`/`device`, then
  `Hostname`/`hostname`, `modelName`, MIG's `GPU_I_ID`/`GPU_I_PROFILE`); DCGM writes "no value" as a blank sentinel
  (2^47 for a double, 0x7ffffff0 and up for an integer).
- `dcgmi dmon -e ...`: a `#Entity` (or `# EntityId`) header of DCGM's short names, maybe an `ID` line, rows `GPU 0`
  / `GPU-I 1` with `N/A` cells; a MIG instance's row follows its GPU's.
- `nvidia-smi dmon --gpm-metrics ...`: read by the dmon reader; GPM columns are percent ("GPM:%"), their rates
  MiB/s unless the units line says otherwise; `-` before the second sample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from tools.core.errors import UnreadableInput
from tools.host import is_smi_monitor, read_smi_monitor

__all__ = ["ActivitySeries", "Source", "read_activity", "sniff_activity"]

Source = Literal["nvml_gpm", "dcgm_exporter", "dcgmi_dmon", "smi_dmon_gpm"]

_MIB = float(2**20)

# dcgm-exporter metric -> (our name, scale to our unit).
_EXPORTER: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_gpu_pct", 1.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": ("tensor_hmma_active", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": ("tensor_imma_active", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": ("tensor_dfma_active", 1.0),
    "DCGM_FI_PROF_PIPE_INT_ACTIVE": ("integer_active", 1.0),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": ("fp64_active", 1.0),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ("fp32_active", 1.0),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": ("fp16_active", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_bytes_per_s", 1.0),
}
# dcgmi dmon's short column names (DCGM's field tags) -> (our name, scale).
_DCGMI: dict[str, tuple[str, float]] = {
    "GPUTL": ("utilization_gpu_pct", 1.0), "GRACT": ("gr_engine_active", 1.0), "SMACT": ("sm_active", 1.0),
    "SMOCC": ("sm_occupancy", 1.0), "TENSO": ("tensor_active", 1.0), "THMMA": ("tensor_hmma_active", 1.0),
    "TIMMA": ("tensor_imma_active", 1.0), "TDFMA": ("tensor_dfma_active", 1.0), "INTAC": ("integer_active", 1.0),
    "FP64A": ("fp64_active", 1.0), "FP32A": ("fp32_active", 1.0), "FP16A": ("fp16_active", 1.0),
    "DRAMA": ("dram_active", 1.0), "PCITX": ("pcie_tx_bytes_per_s", 1.0), "PCIRX": ("pcie_rx_bytes_per_s", 1.0),
    "NVLTX": ("nvlink_tx_bytes_per_s", 1.0), "NVLRX": ("nvlink_rx_bytes_per_s", 1.0),
}
# nvidia-smi dmon's columns (lower case, as the dmon reader keeps them) -> (our name, scale). `sm` is dmon's SM
# utilisation, the same number as utilization.gpu; the GPM ones are percentages.
_SMI: dict[str, tuple[str, float]] = {
    "sm": ("utilization_gpu_pct", 1.0), "gract": ("gr_engine_active", 0.01), "smutil": ("sm_active", 0.01),
    "smocc": ("sm_occupancy", 0.01), "intutil": ("integer_active", 0.01), "anyten": ("tensor_active", 0.01),
    "tensor": ("tensor_active", 0.01), "mmaact": ("tensor_active", 0.01), "dfma": ("tensor_dfma_active", 0.01),
    "hmma": ("tensor_hmma_active", 0.01), "imma": ("tensor_imma_active", 0.01), "dram": ("dram_active", 0.01),
    "fp64": ("fp64_active", 0.01), "fp32": ("fp32_active", 0.01), "fp16": ("fp16_active", 0.01),
    "pcitx": ("pcie_tx_bytes_per_s", _MIB), "pcirx": ("pcie_rx_bytes_per_s", _MIB),
    "nvltx": ("nvlink_tx_bytes_per_s", _MIB), "nvlrx": ("nvlink_rx_bytes_per_s", _MIB),
}
_GPM_COLUMNS = frozenset(_SMI) - {"sm"}
_RATE_UNITS = {"kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "kib/s": 2.0**10, "mib/s": _MIB, "gib/s": 2.0**30}

# DCGM's "no value" (dcgm_structs.h): DCGM_FP64_BLANK is 2^47 (the activities are doubles), the int32 blanks start
# at 0x7ffffff0 (GPU_UTIL) and the int64 ones at 0x7ffffffffffffff0 (the byte rates, which really reach 10^10).
_FP64_BLANK = 2.0**47
_INT32_BLANK = float(0x7FFFFFF0)
_INT64_BLANK = float(0x7FFFFFFFFFFFFFF0)
_DCGMI_HEADER = re.compile(r"^\s*#\s*Entity(?:\s*Id)?\b", re.I | re.M)
_DCGMI_ROW = re.compile(r"^\s*(GPU-I|GPU-CI|GPU)\s+(\d+)\s+(.*)$")


@dataclass
class ActivitySeries:
    """One GPU's (or MIG instance's) values of each metric, in order of the samples."""

    gpu: str
    source: Source
    instance: str | None = None  # the MIG GPU instance (DCGM's GPU_I_ID, dcgmi's `GPU-I n`)
    host: str | None = None
    model: str | None = None
    capture: str | None = None  # the dmon capture it came from (each file is its own; exporter pages add up)
    values: dict[str, list[float]] = field(default_factory=dict)
    columns: set[str] = field(default_factory=set)  # the metrics the source has, values or not

    def add(self, name: str, value: float | None) -> None:
        self.columns.add(name)
        if value is not None:
            self.values.setdefault(name, []).append(value)


def sniff_activity(text: str) -> Source | None:
    head = text[:65536]
    if "DCGM_FI_" in head:
        return "dcgm_exporter"
    if _DCGMI_HEADER.search(head):
        return "dcgmi_dmon"
    if is_smi_monitor(head):
        return "smi_dmon_gpm"
    return None


def _value(name: str, raw: float, scale: float) -> float | None:
    """A cell in our unit, or None for NaN, N/A and DCGM's blanks."""
    blank = (_INT64_BLANK if name.endswith("_bytes_per_s") else _INT32_BLANK if name == "utilization_gpu_pct"
             else _FP64_BLANK)
    if raw != raw or raw >= blank:
        return None
    return raw * scale


_SAMPLE_LINE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(?:\{.*\})?[ \t]+\S+(?:[ \t]+\S+)?[ \t]*$")


def _read_exporter(text: str, into: dict[tuple[str, ...], ActivitySeries]) -> list[str]:
    from tools.serving import parse_samples

    # A page pasted into an issue or a terminal log carries prompts and `...` between its lines: those lines are
    # left out (and counted), not the page refused.
    lines = text.splitlines()
    kept = [line for line in lines if not line.strip() or line.lstrip().startswith("#") or _SAMPLE_LINE.match(line)]
    notes = ([f"{len(lines) - len(kept)} line(s) that are no Prometheus sample were left out."]
             if len(kept) < len(lines) else [])
    samples = parse_samples("\n".join(kept) + "\n")
    if not samples:
        raise UnreadableInput("the dcgm-exporter page holds no sample (only comments or HELP/TYPE lines).",
                              "Save the page while the exporter serves values: curl -s HOST:9400/metrics > page.prom.")
    for name, labels, raw in samples:
        known = _EXPORTER.get(name)
        if known is None:
            continue
        host = labels.get("Hostname") or labels.get("hostname")
        gpu = labels.get("gpu") or labels.get("UUID") or "?"
        instance = f"GPU-I {labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else None
        if instance and labels.get("GPU_I_PROFILE"):
            instance += f" {labels['GPU_I_PROFILE']}"
        key = ("dcgm_exporter", host or "", gpu, instance or "")
        series = into.setdefault(key, ActivitySeries(gpu, "dcgm_exporter", instance, host, labels.get("modelName")))
        series.add(known[0], _value(known[0], raw, known[1]))
    return notes


def _read_dcgmi(text: str, into: dict[tuple[str, ...], ActivitySeries], capture: str) -> None:
    names: list[str] | None = None
    current_gpu = "?"
    for line in text.splitlines():
        if _DCGMI_HEADER.match(line):
            tokens = line.strip().lstrip("#").split()
            names = tokens[2:] if len(tokens) > 1 and tokens[1].lower() == "id" else tokens[1:]
            continue
        row = _DCGMI_ROW.match(line)
        if names is None or row is None:
            continue
        kind, number, rest = row.groups()
        cells = rest.split()
        if len(cells) != len(names):
            continue  # a row cut short or a pasted `...`
        if kind == "GPU":
            current_gpu, instance = number, None
        else:
            instance = f"{kind} {number}"
        key = ("dcgmi_dmon", capture, current_gpu, instance or "")
        series = into.setdefault(key, ActivitySeries(current_gpu, "dcgmi_dmon", instance, capture=capture))
        for column, cell in zip(names, cells, strict=True):
            known = _DCGMI.get(column.upper())
            if known is None:
                continue
            try:
                raw = float(cell)
            except ValueError:
                raw = float("nan")  # N/A
            series.add(known[0], _value(known[0], raw, known[1]))


def _smi_units(text: str) -> dict[str, float]:
    """The scale of each rate column from the units line under a dmon header (`MB/s`, `GPM:MiB/s`)."""
    lines = [line.strip().lstrip("#").split() for line in text.splitlines()[:50] if line.strip().startswith("#")]
    for names, units in zip(lines, lines[1:], strict=False):
        lowered = [n.lower() for n in names]
        if "gpu" not in lowered[:3] or len(units) != len(names):
            continue
        scales: dict[str, float] = {}
        for name, unit in zip(lowered, units, strict=True):
            unit = unit.lower().removeprefix("gpm:")
            if unit in _RATE_UNITS:
                scales[name] = _RATE_UNITS[unit]
        return scales
    return {}


def _read_smi(text: str, into: dict[tuple[str, ...], ActivitySeries], capture: str) -> None:
    monitor = read_smi_monitor(text)
    if monitor.kind != "dmon" or not any(set(g.columns) & _GPM_COLUMNS for g in monitor.gpus):
        raise UnreadableInput("the nvidia-smi dmon capture has no GPM column (gract, smutil, smocc, ...): it shows "
                              "utilization.gpu only.",
                              "Record it on a Hopper or newer GPU with `nvidia-smi dmon --gpm-metrics 1,2,3,5,10 "
                              "-c 10`, or use health_check / gpu_activity live.")
    scales = _smi_units(text)
    for gpu in monitor.gpus:
        series = into.setdefault(("smi_dmon_gpm", capture, gpu.gpu),
                                 ActivitySeries(gpu.gpu, "smi_dmon_gpm", capture=capture))
        for column, values in gpu.values.items():
            known = _SMI.get(column)
            if known is None:
                continue
            scale = scales.get(column, known[1]) if known[1] == _MIB else known[1]
            for raw in values:
                series.add(known[0], None if raw is None else _value(known[0], raw, scale))


def read_activity(text: str, into: dict[tuple[str, ...], ActivitySeries], name: str) -> list[str]:
    """Add one saved file's series to `into`, keyed by source and entity: several exporter pages make one series, a
    dmon capture (`name`) is a series of its own. Returns notes on what was left out."""
    source = sniff_activity(text)
    if source == "dcgm_exporter":
        return [f"{name}: {note}" for note in _read_exporter(text, into)]
    if source == "dcgmi_dmon":
        _read_dcgmi(text, into, name)
    elif source == "smi_dmon_gpm":
        _read_smi(text, into, name)
    else:
        raise UnreadableInput(f"{name} is no dcgm-exporter page, dcgmi dmon or nvidia-smi dmon capture.",
                              "Pass `curl -s HOST:9400/metrics` saved, `dcgmi dmon -e 203,1002,1003,1004,1005 -c 10` "
                              "or `nvidia-smi dmon --gpm-metrics 1,2,3,5,10 -c 10` output.")
    return []
