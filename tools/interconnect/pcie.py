"""The readers of a device's PCIe link as people paste it: `lspci -vv` (whole, a middle chunk, or the LnkCap/LnkSta
lines grep'd out), the PCI section of `nvidia-smi -q`, and `lstopo -v` / `hwloc-ls` object lines.

Formats (pciutils ls-caps.c; nvidia-smi's -q layout; hwloc's lstopo-text):
- lspci: a device line `01:00.0 VGA compatible controller: NVIDIA Corporation GA102GL [RTX A6000]`, then per
  capability `LnkCap: Port #0, Speed 16GT/s, Width x16, ...` (what the link can do), `LnkSta: Speed 2.5GT/s
  (downgraded), Width x16 (ok)` (what it trained at; the flags since pciutils 3.6), `LnkCtl2: Target Link Speed:
  16GT/s` (the speed software asks for). Speeds `2.5GT/s`..`64GT/s` are generations 1..6.
- nvidia-smi -q: per `GPU 00000000:18:00.0`, `GPU Link Info` / `PCIe Generation` / `Max`, `Current` (and, on newer
  drivers, `Device Max`, `Host Max`), `Link Width` / `Max : 16x`, `Current : 16x`; `Utilization` / `Gpu : 35 %`;
  `Tx Throughput : 123000 KB/s`.
- lstopo -v: `PCIBridge L#21 (busid=0000:50:00.0 id=1000:c010 class=0604(PCIBridge) link=31.51GB/s ...)`: the
  current link only (hwloc reads the trained speed, which an idle GPU lowers), never what the link can do.
- lstopo / hwloc-ls text, a tree by indentation: `Package L#0` (or `NUMANode`, `Group0`), `HostBridge`, `PCIBridge`,
  `PCI 1a:00.0 (3D)` with its OS devices under it (`OpenFabrics "mlx5_0"`, `Net "ib0"`, `CoProc(CUDA) "cuda0"`,
  `GPU(NVML) "nvml0"`); I/O objects print no `L#` by default, so an excerpt of the I/O part has none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LstopoTree", "PcieLink", "read_lspci", "read_lstopo", "read_lstopo_tree", "read_smi_pcie"]

# PCIe generation by its per-lane rate (GT/s).
_GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_DEVICE = re.compile(r"^\s*(?:[0-9a-f]{4}:)?([0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])\s+([^:]+):\s*(.*)$", re.I)
_LNK = re.compile(r"^\s*(LnkCap|LnkSta):\s*(?:Port #\d+,\s*)?Speed\s+([\d.]+)GT/s(?:\s*\(([^)]*)\))?"
                  r"(?:,\s*Width\s+x(\d+)(?:\s*\(([^)]*)\))?)?")
_TARGET = re.compile(r"^\s*LnkCtl2:\s*Target Link Speed:\s*([\d.]+)GT/s")
# Device classes whose link speed does not drop when idle (their drivers leave the link at what it trained to);
# GPUs (VGA/3D/Display controllers) do drop it.
_STEADY_CLASS = re.compile(r"Ethernet|Infiniband|Network|Non-Volatile|RAID|SATA|SAS|Fibre", re.I)
_GPU_CLASS = re.compile(r"VGA|3D controller|Display controller", re.I)
# The classes whose link carries a GPU job's data: GPUs and accelerators, NICs, storage, and the bridges (switch ports)
# they sit behind. A USB, audio or serial controller at fewer lanes than it can take changes nothing for the job.
_JOB_CLASS = re.compile(r"VGA|3D controller|Display controller|Processing accelerator|Co-processor|Ethernet|"
                        r"Infiniband|Network|Fabric|Non-Volatile|RAID|SATA|SAS|SCSI|Fibre|Mass storage|PCI bridge|"
                        r"Host bridge", re.I)


@dataclass
class PcieLink:
    device: str  # bus id or "the device" when the paste has no device line
    name: str | None = None  # the device line's text: class and model
    cap_gen: int | None = None
    cap_width: int | None = None
    gen: int | None = None  # what it trained at now
    width: int | None = None
    target_gen: int | None = None  # LnkCtl2's target: software capped the link below what it can do
    downgraded: bool = False  # lspci's own '(downgraded)' flag on the speed or width
    gpu: bool | None = None  # True: a GPU (idle power saving lowers the speed); False: a device that does not
    job_device: bool = True  # False: a named device whose link carries nothing of a GPU job's (USB, audio)
    utilization_pct: float | None = None  # nvidia-smi -q's GPU utilisation, when the capture has it
    throughput_kbs: float | None = None  # nvidia-smi -q's Tx + Rx throughput

    @property
    def width_below(self) -> bool:
        return self.cap_width is not None and self.width is not None and self.width < self.cap_width

    @property
    def speed_below(self) -> bool:
        return self.cap_gen is not None and self.gen is not None and self.gen < self.cap_gen


def _generation(gts: str) -> int | None:
    return _GENERATION.get(float(gts))


def read_lspci(text: str) -> list[PcieLink]:
    """The links of an `lspci -vv` paste, one per device line (or one for a paste that kept only the Lnk lines)."""
    links: list[PcieLink] = []
    for line in text.splitlines():
        if (device := _DEVICE.match(line)) is not None and not line.startswith(("\t", " ")):
            kind = device.group(2)
            links.append(PcieLink(device.group(1), f"{kind}: {device.group(3).strip()}"[:120],
                                  gpu=True if _GPU_CLASS.search(kind) else False if _STEADY_CLASS.search(kind)
                                  else None, job_device=_JOB_CLASS.search(kind) is not None))
            continue
        if (lnk := _LNK.match(line)) is not None:
            if not links or (lnk.group(1) == "LnkCap" and links[-1].cap_gen is not None):
                links.append(PcieLink("the device"))
            link = links[-1]
            gen, width = _generation(lnk.group(2)), int(lnk.group(4)) if lnk.group(4) else None
            if lnk.group(1) == "LnkCap":
                link.cap_gen, link.cap_width = gen, width
            else:
                link.gen, link.width = gen, width
                link.downgraded = "downgraded" in f"{lnk.group(3)} {lnk.group(5)}"
        elif (target := _TARGET.match(line)) is not None and links:
            links[-1].target_gen = _generation(target.group(1))
    return [link for link in links if link.gen is not None]


_SMI_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_SMI_FIELD = re.compile(r"^(\s*)([A-Za-z][\w ./()-]*?)\s*:\s*(.*?)\s*$")
_SMI_HEAD = re.compile(r"^(\s*)([A-Za-z][\w ./()-]*?)\s*$")


def read_smi_pcie(text: str) -> list[PcieLink]:
    """Per GPU of an `nvidia-smi -q` capture: its PCIe generation and width, max and current, and its load."""
    links: list[PcieLink] = []
    section: list[tuple[int, str]] = []  # the headings above the current line, with their indent
    for raw in text.splitlines():
        line = raw.rstrip()
        if (gpu := _SMI_GPU.match(line)) is not None:
            links.append(PcieLink(gpu.group(1), gpu=True))
            section = []
            continue
        if not links or not line.strip():
            continue
        field = _SMI_FIELD.match(line)
        head = None if field else _SMI_HEAD.match(line)
        indent = len((field or head).group(1)) if (field or head) else 0  # type: ignore[union-attr]
        section = [(i, h) for i, h in section if i < indent]
        if head is not None:
            section.append((indent, head.group(2)))
            continue
        if field is None:
            continue
        key, value, where = field.group(2), field.group(3), [h for _, h in section]
        link = links[-1]
        number = re.match(r"^(\d+(?:\.\d+)?)", value)
        if key == "Product Name":
            link.name = value
        elif number is None:
            continue
        elif "PCIe Generation" in where and key in ("Max", "Current"):
            setattr(link, "cap_gen" if key == "Max" else "gen", int(float(number.group(1))))
        elif "Link Width" in where and key in ("Max", "Current"):
            setattr(link, "cap_width" if key == "Max" else "width", int(float(number.group(1))))
        elif "Utilization" in where and key == "Gpu":
            link.utilization_pct = float(number.group(1))
        elif key in ("Tx Throughput", "Rx Throughput"):
            link.throughput_kbs = (link.throughput_kbs or 0.0) + float(number.group(1))
    return [link for link in links if link.gen is not None or link.width is not None]


_LSTOPO = re.compile(r"^\s*(\w+) L#\d+ \((.*)\)")
_BUSID = re.compile(r"\bbusid=([0-9a-f:.]+)")
_LINK_GBS = re.compile(r"\blink=([\d.]+)GB/s")


def read_lstopo(text: str) -> tuple[int, list[tuple[str, str, float]]]:
    """How many hwloc objects the capture lists, and the PCI ones with a link figure: (kind, bus id, GB/s now)."""
    objects = len(re.findall(r"\b\w+ L#\d+", text))
    links = []
    for line in text.splitlines():
        if (match := _LSTOPO.match(line)) is None:
            continue
        busid, link = _BUSID.search(match.group(2)), _LINK_GBS.search(match.group(2))
        if busid and link:
            links.append((match.group(1), busid.group(1), float(link.group(1))))
    return objects, links


# ---------------------------------------------------------------- lstopo's tree: GPU-NIC paths

_TREE_OBJECT = re.compile(r"^(\s*)(Machine|Package|NUMANode|Group\d*|HostBridge|PCIBridge|PCI|OpenFabrics|Net|CoProc|"
                          r"GPU|Block|OSDev)\b(.*)$")
_PCI_DEVICE = re.compile(r"^\s*(?:L#\d+\s*)?(?:\(busid=)?([0-9a-f]{4}:)?([0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])\b[^(]*"
                         r"(?:\((\w+)\))?", re.I)
_OS_NAME = re.compile(r'"([^"]+)"')


@dataclass
class LstopoTree:
    """The GPUs and RDMA NICs of an lstopo tree with the path between each pair, in nvidia-smi topo's words."""

    gpus: list[str]  # PCI bus ids
    nics: dict[str, str]  # the RDMA device (mlx5_0) -> its PCI bus id
    paths: dict[tuple[str, str], str]  # (gpu bus id, RDMA device) -> PIX, PXB, PHB, NODE, SYS


def read_lstopo_tree(text: str) -> LstopoTree | None:
    """GPUs (a PCI 3D controller, or a PCI device with a CUDA / NVML child) and RDMA NICs (a PCI device with an
    OpenFabrics child) of the tree, and their path: the bridges between them (one: PIX; more, below one host bridge:
    PXB), their host bridge (PHB), two host bridges of one package or NUMA node (NODE), or two packages (SYS). An
    excerpt that does not show the objects above its host bridges puts them on one package (NODE): an unseen
    socket boundary is never claimed."""
    stack: list[tuple[int, str, str]] = []  # (indent, object kind, its id) from the root to the current line
    parents: dict[str, list[tuple[str, str]]] = {}  # PCI bus id -> its ancestors (kind, id), nearest last
    children: dict[str, list[tuple[str, str]]] = {}  # PCI bus id -> its OS devices (kind, name)
    classes: dict[str, str] = {}
    counter = 0
    for line in text.splitlines():
        match = _TREE_OBJECT.match(line)
        if match is None:
            continue
        indent, kind, rest = len(match.group(1).expandtabs()), match.group(2), match.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if kind in ("OpenFabrics", "Net", "CoProc", "GPU", "Block", "OSDev"):
            device = next((i for _, k, i in reversed(stack) if k == "PCI"), None)
            name = _OS_NAME.search(rest)
            if device is not None and name is not None:
                children.setdefault(device, []).append((kind + rest.split('"')[0].strip(), name.group(1)))
            continue
        counter += 1
        ident = f"{kind}#{counter}"
        if kind == "PCI":
            pci = _PCI_DEVICE.match(rest)
            if pci is None:
                continue
            ident = ((pci.group(1) or "") + pci.group(2)).lower()  # the domain, where printed, tells 0002:01:00.0
            classes[ident] = (pci.group(3) or "").lower()
            parents[ident] = [(k, i) for _, k, i in stack]
        stack.append((indent, kind, ident))
    gpus = [bus for bus, kind in classes.items() if kind == "3d" or any(
        k.startswith(("CoProc(CUDA", "GPU(NVML", "CoProc(OpenCL")) or n.startswith(("cuda", "nvml"))
        for k, n in children.get(bus, []))]
    nics = {name: bus for bus in classes for kind, name in children.get(bus, []) if kind.startswith("OpenFabrics")}
    if not gpus or not nics:
        return None
    paths = {(gpu, nic): _path(parents[gpu], parents[bus]) for gpu in gpus for nic, bus in nics.items()}
    return LstopoTree(gpus=gpus, nics=nics, paths=paths)


def _path(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> str:
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    common = a[:shared]
    if common and common[-1][0] == "PCIBridge":
        below = [k for k, _ in a[shared:] + b[shared:] if k == "PCIBridge"]
        return "PIX" if not below else "PXB"
    if common and common[-1][0] == "HostBridge":
        return "PHB"
    packages_a = [i for k, i in a if k in ("Package", "NUMANode")]
    packages_b = [i for k, i in b if k in ("Package", "NUMANode")]
    if packages_a and packages_b and not set(packages_a) & set(packages_b):
        return "SYS"
    return "NODE"
