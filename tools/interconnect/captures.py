"""The readers of saved node captures: `nvidia-smi topo -m`, `nvidia-smi nvlink -s` and `-e`, `ibstat`, `ibstatus`,
`ibv_devinfo`, `ibdev2netdev`, `ethtool IFACE`; the kind of a capture is told from its content, never its name.

Formats (../shared/notes/interconnect.md §3-5): topo's matrix is tab-separated (space-aligned when pasted), its
header may carry an ANSI underline, NIC columns are `NIC0..` with a `NIC Legend` (device names as columns on older
drivers). nvlink -s prints `GPU N: name (UUID: ...)` then `Link k: 26.562 GB/s` or `Link k: <inactive>`; all links
down is one NVML sentence. nvlink -e prints `Link k: Replay Errors: 0` and the like. ibstat prints `CA 'mlx5_0'`,
`Port 1:`, `State:`, `Physical state:`, `Rate:` (meaningless on a Down port), `Link layer:`; ibstatus and
ibv_devinfo say the same in their own words. ethtool prints `Settings for eth0:`, `Speed: 100000Mb/s` (or
`Unknown!`), `Link detected: yes|no`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from tools.interconnect.nccl_tests import is_nccl_tests

__all__ = ["CaptureKind", "EthLink", "IbPort", "NvLinkGpu", "P2pMatrix", "TopoMatrix", "kind_of", "parse_cpu_list",
           "read_ethtool", "read_ib_ports", "read_nvlink_errors", "read_nvlink_status", "read_p2p", "read_topo"]

CaptureKind = Literal["nccl_log", "nccl_tests", "topo", "topo_p2p", "nvlink_status", "nvlink_errors", "ibstat",
                      "ibstatus", "ibv_devinfo", "ibdev2netdev", "ethtool", "lspci", "smi_q", "lstopo", "unknown"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LAUNCHER = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:\s)")


def kind_of(text: str) -> CaptureKind:
    """What a capture is, from what it says."""
    head = _ANSI.sub("", text[:200_000])
    if re.search(r"NCCL (?:INFO|WARN) ", head):
        return "nccl_log"
    if is_nccl_tests(head) or re.search(r'"(?:bus_bw|busbw)"', head):
        return "nccl_tests"
    # topo -p2p's legend also says `X = Self`: its own words (or rows of status codes only) come first.
    if re.search(r"^\s*(?:OK\s*=\s*Status Ok|CNS\s*=\s*Chipset not supported)", head, re.M) or _P2P_ROW.search(head):
        return "topo_p2p"
    if re.search(r"X\s*=\s*Self|^\s*GPU0(?:\s+GPU1)?.*(?:CPU Affinity|NIC0|mlx5)", head, re.M):
        return "topo"
    if re.search(r"Link \d+: (?:Replay|Recovery|CRC)", head):
        return "nvlink_errors"
    if re.search(r"Link \d+: (?:[\d.]+ GB/s|<inactive>)|all links are inActive", head, re.I):
        return "nvlink_status"
    if re.search(r"^[ \t]*CA '[^']+'", head, re.M):
        return "ibstat"  # indented too: pasted from a doc's code block
    if re.search(r"Infiniband device '[^']+' port \d+ status", head):
        return "ibstatus"
    if re.search(r"^\s*hca_id:", head, re.M) or "No IB devices found" in head or (
            re.search(r"^\s*port:\s*\d+\s*$", head, re.M) and re.search(r"^\s*state:\s*PORT_\w+", head, re.M)):
        return "ibv_devinfo"  # a `port:` block with its PORT_ state: ibv_devinfo even when cut above its hca_id
    if re.search(r"port \d+ ==> \S+ \((?:Up|Down)\)", head):
        return "ibdev2netdev"
    if re.search(r"^[ \t]*Settings for \S+:", head, re.M):
        return "ethtool"
    if re.search(r"^\s*LnkSta:\s*Speed", head, re.M):
        return "lspci"
    if re.search(r"^\s*GPU Link Info\s*$", head, re.M) or re.search(r"NVSMI LOG", head):
        return "smi_q"
    if re.search(r"^\s*(?:Machine|Package|NUMANode|HostBridge|PCIBridge|PCI|Group0|Core)(?:\(\w+\))? L#\d+", head,
                 re.M) or (re.search(r"^\s*HostBridge\s*$", head, re.M)
                           and re.search(r"^\s*PCI (?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f] \(", head, re.M)):
        return "lstopo"  # the I/O part of a tree alone: hwloc prints no L# on I/O objects by default
    return "unknown"


def _lines(text: str) -> list[str]:
    return [_LAUNCHER.sub("", _ANSI.sub("", line)).rstrip() for line in text.splitlines()]


# ---------------------------------------------------------------- nvidia-smi topo -m


@dataclass
class TopoMatrix:
    gpus: list[str]
    links: dict[tuple[str, str], str]  # (GPUi, GPUj), i < j -> NV12, SYS, PIX...
    nic_links: dict[tuple[str, str], str] = field(default_factory=dict)  # (GPUi, NICk or mlx5_0) -> PIX, SYS...
    nic_names: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0 (NIC Legend)
    # The CPUs and NUMA node local to each GPU (the CPU Affinity / NUMA Affinity columns), as printed.
    cpu_affinity: dict[str, str] = field(default_factory=dict)  # GPU0 -> "0-31,64-95"
    numa_affinity: dict[str, str] = field(default_factory=dict)  # GPU0 -> "0"

    def nic_device(self, column: str) -> str:
        """The device a NIC column stands for: the legend's name (NIC0 -> mlx5_0), or the column itself (old
        drivers head their NIC columns with the device name)."""
        return self.nic_names.get(column, column)


_CELL = re.compile(r"^(?:X|NV\d+|SYS|NODE|PHB|PXB|PIX|NVB|C2C|PXN|P2C|N/A)$")
_CPU_LIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")


def parse_cpu_list(text: str) -> set[int] | None:
    """`0-31,64-95` (a Linux CPU list) or NCCL's hex mask in 32-bit groups (`ffff,0000ffff`) as a set of CPUs; None
    when it is neither."""
    text = text.strip()
    if _CPU_LIST.match(text) and not re.search(r"[a-f]", text):
        cpus: set[int] = set()
        for part in text.split(","):
            low, _, high = part.partition("-")
            if int(high or low) - int(low) > 65_536:
                return None
            cpus.update(range(int(low), int(high or low) + 1))
        return cpus
    if re.match(r"^[0-9a-fA-F]+(?:,[0-9a-fA-F]+)*$", text):
        value = int(text.replace(",", ""), 16)
        return {bit for bit in range(value.bit_length()) if value >> bit & 1}
    return None


def read_topo(text: str) -> TopoMatrix | None:
    lines = _lines(text)
    header: list[str] | None = None
    gpus: list[str] = []
    links: dict[tuple[str, str], str] = {}
    nic_links: dict[tuple[str, str], str] = {}
    names: dict[str, str] = {}
    cpu_affinity: dict[str, str] = {}
    numa_affinity: dict[str, str] = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if header is None and tokens[0] == "GPU0":
            header = [t for t in tokens if not t.startswith(("CPU", "NUMA", "Affinity", "ID"))]
            header = [t for t in header if t not in ("GPU", "Affinity")]
            continue
        if header is None:
            continue
        legend = re.match(r"^\s*(NIC\d+):\s*(\S+)", line)
        if legend:
            names[legend.group(1)] = legend.group(2)
            continue
        row = tokens[0]
        if not re.match(r"^(?:GPU\d+|NIC\d+|mlx\w+|ib\w+|eth\w+|bnxt\w+|efa\w+)$", row):
            continue
        cells = tokens[1 : 1 + len(header)]
        if len(cells) < len(header) or not all(_CELL.match(c) for c in cells):
            cells = [c for c in tokens[1:] if _CELL.match(c)][: len(header)]
        if row.startswith("GPU"):
            gpus.append(row)
            rest = tokens[1 + len(cells):] if cells == tokens[1 : 1 + len(cells)] else []
            if rest and _CPU_LIST.match(rest[0]):
                cpu_affinity[row] = rest[0]
                if len(rest) > 1 and re.match(r"^\d+(?:[-,]\d+)*$", rest[1]):
                    numa_affinity[row] = rest[1]
            for column, cell in zip(header, cells, strict=False):
                if column.startswith("GPU") and column != row:
                    links[tuple(sorted((row, column), key=_gpu_index))] = cell  # type: ignore[index]
                elif not column.startswith("GPU"):
                    nic_links[(row, column)] = cell
    if not gpus:
        return None
    return TopoMatrix(gpus, links, nic_links, names, cpu_affinity, numa_affinity)


# ---------------------------------------------------------------- nvidia-smi topo -p2p r|w|n|a|p

# The status codes of topo -p2p (its legend): OK, CNS chipset, GNS GPU, TNS topology not supported, NS not supported,
# DR disabled by regkey, U unknown.
_P2P_CODE = r"(?:X|OK|NS|CNS|GNS|TNS|DR|U)"
_P2P_ROW = re.compile(rf"^\s*GPU\d+\s+{_P2P_CODE}(?:\s+{_P2P_CODE})+\s*$", re.M)


@dataclass
class P2pMatrix:
    gpus: list[str]
    status: dict[tuple[str, str], str]  # (GPUi, GPUj), i != j -> OK, NS, CNS...
    mode: str | None  # r, w, n, a, p (the command's argument when the capture names it), else None


def read_p2p(text: str) -> P2pMatrix | None:
    lines = _lines(text)
    mode = re.search(r"topo\s+(?:-p2p|--p2pstatus)\s+([rwnap]+)\b", text)
    header: list[str] | None = None
    gpus: list[str] = []
    status: dict[tuple[str, str], str] = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if header is None and tokens[0] == "GPU0" and all(t.startswith("GPU") for t in tokens):
            header = tokens
            continue
        if header is None or not re.match(r"^GPU\d+$", tokens[0]):
            continue
        cells = tokens[1:]
        if len(cells) != len(header) or not all(re.match(rf"^{_P2P_CODE}$", c) for c in cells):
            continue
        gpus.append(tokens[0])
        for column, cell in zip(header, cells, strict=True):
            if column != tokens[0]:
                status[(tokens[0], column)] = cell
    if not gpus:
        return None
    return P2pMatrix(gpus, status, mode.group(1) if mode else None)


def _gpu_index(name: str) -> int:
    return int(name[3:]) if name[3:].isdigit() else 0


# ---------------------------------------------------------------- nvidia-smi nvlink -s / -e


@dataclass
class NvLinkGpu:
    gpu: str  # "GPU 0"
    speeds: dict[int, float | None] = field(default_factory=dict)  # link -> GB/s, None when <inactive>
    errors: dict[int, dict[str, int]] = field(default_factory=dict)  # link -> {"Replay Errors": n, ...}


def _per_gpu(text: str) -> list[tuple[NvLinkGpu, list[str]]]:
    """The `GPU N: name (UUID: ...)` blocks of an nvlink listing, each with its lines."""
    blocks: list[tuple[NvLinkGpu, list[str]]] = []
    for line in _lines(text):
        gpu = re.match(r"^\s*GPU (\d+):", line)
        if gpu:
            blocks.append((NvLinkGpu(f"GPU {gpu.group(1)}"), []))
        elif blocks:
            blocks[-1][1].append(line)
    return blocks


def read_nvlink_status(text: str) -> tuple[list[NvLinkGpu], bool]:
    """Per GPU its links' speeds; and whether NVML said every link is inactive."""
    gpus = []
    for gpu, lines in _per_gpu(text):
        for line in lines:
            link = re.match(r"^\s*Link (\d+): (?:([\d.]+) GB/s|<inactive>)", line)
            if link:
                gpu.speeds[int(link.group(1))] = float(link.group(2)) if link.group(2) else None
        gpus.append(gpu)
    return gpus, bool(re.search(r"all links are inActive", text, re.I))


def read_nvlink_errors(text: str) -> list[NvLinkGpu]:
    gpus = []
    for gpu, lines in _per_gpu(text):
        for line in lines:
            error = re.match(r"^\s*Link (\d+): ([A-Za-z ]+?Errors?)\s*:\s*(\d+)", line)
            if error:
                gpu.errors.setdefault(int(error.group(1)), {})[error.group(2).strip()] = int(error.group(3))
        gpus.append(gpu)
    return gpus


# ---------------------------------------------------------------- ibstat / ibstatus / ibv_devinfo / ibdev2netdev


@dataclass
class IbPort:
    device: str
    port: int
    state: str | None = None  # Active, Down, Initializing, Armed (ibstat's words)
    physical: str | None = None  # LinkUp, Polling, Disabled...
    rate_gbps: float | None = None
    link_layer: str | None = None  # InfiniBand, Ethernet
    netdev: str | None = None  # ibdev2netdev: the interface it backs
    ca_type: str | None = None  # the NIC model (ibstat's MT4129, ibv_devinfo's vendor_part_id 4129)
    rate_name: str | None = None  # the speed ibstat names beside the rate: `40 (FDR10)`
    lanes: int | None = None  # ibv_devinfo -v: active_width (4X) and active_speed per lane (25.0 Gbps)
    lane_gbps: float | None = None

    @property
    def up(self) -> bool:
        return (self.state or "").lower() in ("active", "up") and (self.physical or "LinkUp").lower() == "linkup"


_IBV_STATE = {"PORT_ACTIVE": "Active", "PORT_DOWN": "Down", "PORT_INIT": "Initializing", "PORT_ARMED": "Armed"}


def read_ib_ports(text: str, kind: CaptureKind) -> list[IbPort]:
    """The ports an ibstat / ibstatus / ibv_devinfo / ibdev2netdev capture lists."""
    ports: list[IbPort] = []
    device: str | None = None
    model: str | None = None
    for line in _lines(text):
        stripped = line.strip()
        if kind == "ibstat":
            if (ca := re.match(r"^CA '([^']+)'", stripped)) is not None:
                device, model = ca.group(1), None
            elif (ca_type := re.match(r"^CA type:\s*MT?(\d+)", stripped)) is not None:
                model = ca_type.group(1)
            elif (port := re.match(r"^Port (\d+):", stripped)) is not None and device:
                ports.append(IbPort(device, int(port.group(1)), ca_type=model))
            elif ports and ":" in stripped:
                key, value = (s.strip() for s in stripped.split(":", 1))
                _set(ports[-1], key.lower(), value)
        elif kind == "ibstatus":
            if (head := re.match(r"Infiniband device '([^']+)' port (\d+) status", stripped)) is not None:
                ports.append(IbPort(head.group(1), int(head.group(2))))
            elif ports and ":" in stripped:
                key, value = (s.strip() for s in stripped.split(":", 1))
                value = re.sub(r"^\d+:\s*", "", value)  # `state: 4: ACTIVE`
                _set(ports[-1], key.lower(), value)
        elif kind == "ibv_devinfo":
            if (hca := re.match(r"^hca_id:\s*(\S+)", stripped)) is not None:
                device, model = hca.group(1), None
            elif (part := re.match(r"^vendor_part_id:\s*(\d+)", stripped)) is not None:
                model = part.group(1)
            elif (port := re.match(r"^port:\s*(\d+)", stripped)) is not None:
                # An excerpt cut above its hca_id still names the port; the device is then unknown.
                ports.append(IbPort(device or "(hca_id not shown)", int(port.group(1)), ca_type=model))
            elif ports and (width := re.match(r"^active_width:\s*(\d+)X", stripped)) is not None:
                ports[-1].lanes = int(width.group(1))
                _ibv_rate(ports[-1])
            elif ports and (speed := re.match(r"^active_speed:\s*([\d.]+)\s*Gbps", stripped)) is not None:
                ports[-1].lane_gbps = float(speed.group(1))
                _ibv_rate(ports[-1])
            elif ports and (state := re.match(r"^state:\s*(PORT_\w+)", stripped)) is not None:
                ports[-1].state = _IBV_STATE.get(state.group(1), state.group(1))
            elif ports and (state := re.match(r"^state:\s*([A-Za-z]+)\s*\(\d\)", stripped)) is not None:
                _set(ports[-1], "state", state.group(1))  # OFED 1.x's `state: active (4)`
            elif ports and (phys := re.match(r"^phys_state:\s*(\w+)", stripped)) is not None:
                ports[-1].physical = {"LINK_UP": "LinkUp"}.get(phys.group(1), phys.group(1).title())
            elif ports and (layer := re.match(r"^link_layer:\s*(\w+)", stripped)) is not None:
                ports[-1].link_layer = layer.group(1)
        elif kind == "ibdev2netdev":
            if (row := re.match(r"^(\S+) port (\d+) ==> (\S+) \((Up|Down)\)", stripped)) is not None:
                ports.append(IbPort(row.group(1), int(row.group(2)), state=row.group(4), netdev=row.group(3)))
    return ports


def _ibv_rate(port: IbPort) -> None:
    """ibv_devinfo -v's port rate, as ibstat's Rate: lanes x per-lane speed (4X x 25.0 Gbps = 100, EDR; 4X x 14.0
    = 56, FDR, whose 14.0625 it rounds)."""
    if port.lanes is not None and port.lane_gbps is not None:
        port.rate_gbps = round(port.lanes * port.lane_gbps, 1)


def _set(port: IbPort, key: str, value: str) -> None:
    if key == "state":
        port.state = {"active": "Active", "down": "Down", "init": "Initializing", "armed": "Armed"}.get(
            value.lower(), value)
    elif key in ("physical state", "phys state"):
        port.physical = value
    elif key == "rate":
        number = re.match(r"([\d.]+)(?:\s*\((\w+)\))?", value)
        port.rate_gbps = float(number.group(1)) if number else None
        port.rate_name = number.group(2) if number else None
    elif key in ("link layer", "link_layer"):
        port.link_layer = value


# ---------------------------------------------------------------- ethtool


@dataclass
class EthLink:
    iface: str
    speed_mbps: int | None  # None: Unknown! or not printed
    link_detected: bool | None
    speed_said: str | None = None


def read_ethtool(text: str) -> list[EthLink]:
    links: list[EthLink] = []
    for line in _lines(text):
        stripped = line.strip()
        if (head := re.match(r"^Settings for (\S+?):", stripped)) is not None:
            links.append(EthLink(head.group(1), None, None))
        elif links and (speed := re.match(r"^Speed:\s*(\S+)", stripped)) is not None:
            links[-1].speed_said = speed.group(1)
            number = re.match(r"^(\d+)Mb/s", speed.group(1))
            links[-1].speed_mbps = int(number.group(1)) if number else None
        elif links and (detected := re.match(r"^Link detected:\s*(yes|no)", stripped)) is not None:
            links[-1].link_detected = detected.group(1) == "yes"
    return links
