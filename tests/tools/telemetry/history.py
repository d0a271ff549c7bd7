"""A real Prometheus (Debian's 2.42 `prometheus` and `promtool`) holding GPU history the tests write: dcgm-exporter
series with the exporter's own metric names and label sets (tests/data/telemetry/PROVENANCE.md gives the pages each
label set was copied from), backfilled with `promtool tsdb create-blocks-from openmetrics` and served on 127.0.0.1.

The recipe and its traps are in ../shared/notes/metrics_history.md section 3: timestamps in seconds, ascending per
series, one family at a time, no blank line, `# EOF` last; counters declared `unknown` keep their names.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# concept -> (metric name, TYPE) per exporter generation. Legacy: dcgm-exporter <= 4.8 (etc/default-counters.csv);
# 4.9: the DCGM 4.7 names of dcgm_fields.h's alias table (units: Hz, ratio 0-1, watts, celsius).
LEGACY = {
    "sm_clock": ("DCGM_FI_DEV_SM_CLOCK", "gauge"), "gpu_util": ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    "gpu_temp": ("DCGM_FI_DEV_GPU_TEMP", "gauge"), "power": ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    "fb_used": ("DCGM_FI_DEV_FB_USED", "gauge"), "clock_reasons": ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge"),
    "xid": ("DCGM_FI_DEV_XID_ERRORS", "gauge"), "pcie_replay": ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "unknown"),
    "gr_engine_active": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"),
    # Commented out in etc/default-counters.csv (ECC) or enabled there (row remap, NVLink, PCIe): the names as written.
    "ecc_dbe": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "unknown"),
    "remapped_uncorrectable": ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "unknown"),
    "row_remap_failure": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"),
    "nvlink_total": ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "unknown"),
    "pcie_tx": ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge"),
}
V4_9 = {
    "sm_clock": ("DCGM_FI_DEV_SM_CLOCK_HERTZ", "gauge"), "gpu_util": ("DCGM_FI_DEV_GPU_UTIL_RATIO", "gauge"),
    "gpu_temp": ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "gauge"), "power": ("DCGM_FI_DEV_BOARD_POWER_WATTS", "gauge"),
    "fb_used": ("DCGM_FI_DEV_FB_USED_PERCENT", "gauge"),
    "clock_reasons": ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge"), "xid": ("DCGM_FI_DEV_XID_ERROR", "gauge"),
    "pcie_replay": ("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "unknown"),
}
# The unit each generation writes, from the canonical value (MHz, %, C, W, MiB) the scenarios speak in.
V4_9_SCALE = {"sm_clock": 1e6, "gpu_util": 0.01, "fb_used": 1 / 81559}


@dataclass(frozen=True)
class Gpu:
    """One GPU (or MIG instance) as dcgm-exporter labels it."""

    node: str
    index: int
    uuid: str
    pci_bus_id: str
    model: str = "NVIDIA H100 80GB HBM3"
    hpc_job: str | None = None
    mig: tuple[str, str] | None = None  # (GPU_I_PROFILE, GPU_I_ID)
    pod: tuple[str, str, str] | None = None  # (container, namespace, pod)
    driver: str = "550.127.08"

    def labels(self, generation: str) -> str:
        """The label set in the exporter's order (render_metrics.go), then what Prometheus adds (instance, job)."""
        parts = [f'gpu="{self.index}"', f'UUID="{self.uuid}"', f'pci_bus_id="{self.pci_bus_id}"',
                 f'device="nvidia{self.index}"', f'modelName="{self.model}"']
        if self.mig is not None:
            parts += [f'GPU_I_PROFILE="{self.mig[0]}"', f'GPU_I_ID="{self.mig[1]}"']
        if generation == "4.9":
            parts += [f'hostname="{self.node}"', f'DCGM_FI_SYSTEM_DRIVER_VERSION="{self.driver}"']
        else:
            parts += [f'Hostname="{self.node}"', f'DCGM_FI_DRIVER_VERSION="{self.driver}"']
        if self.pod is not None:
            parts += [f'container="{self.pod[0]}"', f'namespace="{self.pod[1]}"', f'pod="{self.pod[2]}"']
        if self.hpc_job is not None:
            parts.append(f'hpc_job="{self.hpc_job}"')
        parts += [f'instance="{self.node}:9400"', 'job="dcgm-exporter"']
        return ",".join(parts)


# A value function: (gpu, concept, unix time) -> the canonical value, or None for no sample (silence). For "xid" it
# returns the XID code (0: none), which picks the series' err_code / err_msg labels.
Values = Callable[[Gpu, str, int], float | None]

XID_MESSAGES = {0: "No Error", 79: "GPU has fallen off the bus", 48: "DBE (Double Bit Error) ECC Error"}


@dataclass
class Scenario:
    gpus: list[Gpu]
    values: Values
    start: int
    end: int  # exclusive
    interval: int = 30
    generation: str = "legacy"
    concepts: tuple[str, ...] = ("sm_clock", "gpu_util", "gpu_temp", "power", "fb_used", "clock_reasons", "xid",
                                 "pcie_replay")
    skip: Callable[[Gpu, str], bool] = field(default=lambda gpu, concept: False)

    def names(self) -> dict[str, tuple[str, str]]:
        return V4_9 if self.generation == "4.9" else LEGACY


def write_families(scenarios: list[Scenario], out: Iterator[str] | None = None) -> Iterator[str]:
    """OpenMetrics lines for every scenario: one family at a time (all scenarios' series of that name), each
    series in ascending time."""
    families: dict[str, list[tuple[Scenario, str]]] = {}
    types: dict[str, str] = {}
    for scenario in scenarios:
        for concept in scenario.concepts:
            name, kind = scenario.names()[concept]
            families.setdefault(name, []).append((scenario, concept))
            types[name] = kind
    for name, members in families.items():
        yield f"# TYPE {name} {types[name]}"
        for scenario, concept in members:
            scale = V4_9_SCALE.get(concept, 1.0) if scenario.generation == "4.9" else 1.0
            for gpu in scenario.gpus:
                if scenario.skip(gpu, concept):
                    continue
                labels = gpu.labels(scenario.generation)
                if concept == "xid":
                    yield from _xid_lines(name, labels, scenario, gpu)
                    continue
                for t in range(scenario.start, scenario.end, scenario.interval):
                    value = scenario.values(gpu, concept, t)
                    if value is not None:
                        yield f"{name}{{{labels}}} {_number(value * scale)} {t}"
    yield "# EOF"


def _xid_lines(name: str, labels: str, scenario: Scenario, gpu: Gpu) -> Iterator[str]:
    """A new XID code is a new series (its err_code label changes): one series per code, each in time order."""
    by_code: dict[int, list[int]] = {}
    for t in range(scenario.start, scenario.end, scenario.interval):
        code = scenario.values(gpu, "xid", t)
        if code is not None:
            by_code.setdefault(int(code), []).append(t)
    for code, times in sorted(by_code.items()):
        series = f'{labels},err_code="{code}",err_msg="{XID_MESSAGES.get(code, "Unknown Error")}"'
        yield from (f"{name}{{{series}}} {code} {t}" for t in times)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prometheus_available() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


class Prometheus:
    """promtool backfills `lines` into a TSDB under `folder`; prometheus serves it on 127.0.0.1 (no scrapes)."""

    def __init__(self, folder: Path, lines: Iterator[str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        history = folder / "history.om"
        with history.open("w") as out:
            for line in lines:
                out.write(line + "\n")
        data = folder / "data"
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(history), str(data)],
                       check=True, capture_output=True, timeout=600)
        history.unlink()
        config = folder / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 30s\nscrape_configs: []\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (folder / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, (folder / "prometheus.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log.close()
