"""The one reader of NCCL's debug output (NCCL_DEBUG=INFO / WARN), 2.4 to 2.30: what each process says about its
communicator, the network it chose and the transport of every channel.

Grammar (NVIDIA/nccl src/debug.cc and the transports' connect lines, as ../shared/notes/interconnect.md §2 lists):
- `<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <msg>`, WARN lines with `<file>:<line>` before `NCCL WARN`; launchers
  prefix lines (`[1,0]<stdout>:`, `0: `, `[rank3]:`), 2.2x may prefix a wall-clock stamp, and people who paste logs
  often drop the host part: the `NCCL INFO|WARN` marker is what a line is found by, the identity is taken when it
  is there.
- Version: the bare `NCCL version 2.21.5+cuda12.4` (up to 2.21) or the INFO form (2.22+).
- Communicator: `ncclCommInitRank comm 0x.. rank R nranks N cudaDev D ...` and (2.20+) `comm 0x.. rank R nRanks N
  nNodes M localRanks L localRank l MNNVL x`; a process in several communicators keeps the largest.
- Network: `Using network <name>` (the chosen one), `NET/IB : Using [0]mlx5_0:1/IB ...`, `NET/Socket : Using
  [0]eth0:10.0.0.1<0> ...`, `NET/IB : No device found.`, `Bootstrap : Using eth0:...` (no space before the colon
  from 2.24), `NCCL_SOCKET_IFNAME set (by environment) to X`.
- Channels: `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`, `... [send] via NET/IB/0/GDRDMA`, `via NET/Socket/1`,
  `via SHM/direct/direct` (`direct shared memory` up to 2.12), `via P2P/CUMEM`, `via P2P/MNNVL`, `COLLNET`.
- GPU Direct RDMA: `GPU Direct RDMA Disabled for GPU ...` / `NET/IB : GPU Direct RDMA Disabled for HCA ...`.
- `P2P is disabled between [NVLINK ]connected GPUs A and B`.
The log lines are found by the shared log scanner (tools/logs: globs, gzip, bounded streaming), so a 2 GB job log
costs one pass.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from tools.core.files import InputFile
from tools.logs import LineMatcher, ScanStats, display_line, scan_file

__all__ = ["NcclProcess", "read_nccl_log"]

# NCCL's network lines quoted without their `host:pid:tid [dev] NCCL INFO` (a write-up, a doc page): `NET/IB : Using
# [0]rocep1s0f0:1/RoCE`, `NET/NCCL RDMA Plugin v10 : GPU Direct RDMA Disabled for HCA 0` (issue 32, round 13).
_BARE_NET = re.compile(r"^\s*NET/[\w ./-]{1,40}? ?: (?:Using|GPU Direct RDMA|No device found|Made virtual device)")
# Lines the scanner hands over: NCCL's own, and the bare version banner.
# The launcher's command line a log often starts with says how many nodes the job was given (issue 32: a log of one
# rank of a 2-node run, whose other host never speaks): mpirun's host list (`-H 10.0.0.1:1,10.0.0.2:1`), srun's
# `-N 2` / `--nodes=2`, torchrun's `--nnodes=2`, deepspeed's `--num_nodes 2`, accelerate's `--num_machines 2`.
_LAUNCHER = re.compile(r"(?:^|[\s$#>/])(?:mpirun|mpiexec|srun|torchrun|deepspeed|accelerate launch|"
                       r"python3? -m torch\.distributed\.(?:run|launch))\s")
# Each launcher's own flag: mpirun's `-N` is processes per node, so srun's is read on srun's line only.
_NODE_COUNT = {"srun": re.compile(r"(?:\s-N\s?|--nodes[= ])(\d+)(?![\d:-])"),
               "torch": re.compile(r"--nnodes[= ](\d+)(?![\d:])"),
               "deepspeed": re.compile(r"--num_nodes[= ](\d+)(?!\d)"),
               "accelerate": re.compile(r"--num_machines[= ](\d+)(?!\d)")}
_HOST_LIST = re.compile(r"\s(?:-H|--host|-host)[= ]([^\s]+)")
_PATTERNS = (r"NCCL (?:INFO|WARN)", r"NCCL version \d", r"\d+(?:\[[0-9a-fx]+\])? -> \d+(?:\[[0-9a-fx]+\])?.* via ",
             r"ncclCommInitRank|comm 0x[0-9a-f]+ rank \d+ n[Rr]anks", r"^\s*Last error:\s*$", _BARE_NET.pattern,
             _LAUNCHER.pattern)

# A host may be masked by the poster (`<host1>:3319:3329 [1] ...`): still a name that tells the nodes apart.
_LINE = re.compile(r"(?:(?P<host>[A-Za-z0-9][\w.\-]*|<[\w.\-]+>):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] )?"
                   r"(?:(?P<src>[\w/.\-]+\.(?:cc|cpp|h):\d+) )?NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_INIT_RANK = re.compile(r"\bcomm 0x[0-9a-f]+ rank (\d+) n[Rr]anks (\d+)(?: nNodes (\d+) localRanks (\d+))?")
_NVML_DEV = re.compile(r"\bcudaDev (\d+) nvmlDev (\d+)")
_USING_NETWORK = re.compile(r"^Using network (.+?)\s*$")
_NET_USING = re.compile(r"^NET/(\w+) ?: Using (.*)$")
_LISTED = re.compile(r"\[\d+\]([^\s\[]+)")
_INDEXED = re.compile(r"\[(\d+)\]([^\s\[]+)")
_BOOTSTRAP = re.compile(r"^Bootstrap ?: Using (.*)$")
_OLD_SOCKET = re.compile(r"^NET ?: Using interface ([^:\s]+):")  # 2.2-2.3: one line per interface
_ADDRESS = re.compile(r"(?:^|[\s\]])([A-Za-z][\w.\-]*):((?:\d{1,3}\.){3}\d{1,3}|[0-9a-f:]+%?\w*)<\d+>")
_IFNAME = re.compile(r"NCCL_SOCKET_IFNAME set (?:by environment )?to (\S+)")
# `Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA` (2.7+), `Ring 00 : 6 -> 2 [receive] via NET/IB/0` (before),
# or the bare `9[1a000] -> 2[6b000] [send] via ...` a poster kept.
_CHANNEL = re.compile(r"(?:^|(?:Channel|CollNet|Ring) \d+(?:/\d+)? : )(\d+)(?:\[[0-9a-fx]*\])? -> (\d+)"
                      r"(?:\[[0-9a-fx]*\])?(?: \[(send|receive)\])? via (\S+(?: \S+)*?)\s*$")
_CHANNEL_DEVICES = re.compile(r"\d+\[([0-9a-fx]*)\] -> \d+\[([0-9a-fx]*)\]")
_NET_TRANSPORT = re.compile(r"^(?:NET|COLLNET)/(.+?)/\d+")
_GDR_DISABLED = re.compile(r"GPU Direct RDMA Disabled for")
# `NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'rocep1s0f1'`, `GPU Direct RDMA Enabled for HCA 0`
_GDR_ENABLED = re.compile(r"GPU Direct RDMA (?:\(DMABUF\) )?[Ee]nabled for")
_P2P_DISABLED = re.compile(r"P2P is disabled between (NVLINK )?connected GPUs (\d+) and (\d+)")
# 2.4-2.7 say it per channel: `Could not enable P2P between dev 3(=68000) and dev 2(=67000)`.
_P2P_FAILED = re.compile(r"Could not enable P2P between dev (\d+)\S* and dev (\d+)")
# NCCL's topology dump (NCCL_DEBUG_SUBSYS=GRAPH): `+ NVL[20.0] - GPU/0-65000` under the GPU it leaves from.
_TOPO_NODE = re.compile(r"^\+ \w+\[[\d.]+\] - GPU/([0-9a-fx\-]+)")
_TOPO_NVL = re.compile(r"^\s*\+ NVL\[([\d.]+)\] - GPU/([0-9a-fx\-]+)")
# NCCL's paths from each GPU (NCCL_DEBUG_SUBSYS=GRAPH): `GPU/0-5000 :GPU/0-4000 (2/370.8/NVL) ... NET/0-1
# (5/24.0/PHB)`, the GPU by its bus id, each NET by its index in NCCL's device list, with the path type NCCL computed.
_GPU_PATHS = re.compile(r"^GPU/(?:[0-9a-fA-F]+-)?([0-9a-fA-F]+) :(.*)$")
_NET_PATH = re.compile(r"\bNET/(?:[0-9a-fA-F]+-)?(\d+) \(\d+/[\d.]+/(\w+)\)")
_BUS_ID = re.compile(r"\bnvmlDev (\d+) busId ([0-9a-fA-F]+)")
# 2.3-2.4 print each GPU's distance to every IB device, in NCCL's device order: `CUDA Dev 0[0], IB NIC distance :  PHB
# SYS` (2.4), `CUDA Dev 0, IB Ports : mlx5_0/1(PIX) mlx5_1/1(SOC)` (2.3; SOC is SYS).
_NIC_DISTANCE = re.compile(r"CUDA Dev (\d+)(?:\[(\d+)\])?, IB (?:NIC distance|Ports) :\s*(.*)$")
# The NICs' link speed as NCCL reads it: `NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000` (Mb/s).
_NIC_SPEED = re.compile(r"\[(\d+)\]\s*([\w.\-]+)(?::\w+)*:\d+/\w+.*?\bspeed=(\d+)")
# What PyTorch carries of NCCL's own error: `NCCL error in: ...cpp:1691, invalid usage (run with ...)`, and the text
# after `Last error:` on the next line (NCCL's WARN text, kept even when NCCL_DEBUG was off).
_TORCH_NCCL_ERROR = re.compile(r"NCCL error in: \S+, ([^(,]+?)\s*(?:\(|,)")
_IFNAME_ENV = re.compile(r"NCCL_SOCKET_IFNAME set by environment to")
_NO_IB = re.compile(r"^NET/IB ?: No device found")
_IB_DISABLE = re.compile(r"NCCL_IB_DISABLE set (?:by environment )?to 1")
# Network plugins that carry NCCL's traffic over TCP (Google's FastSocket): a job on them is on sockets.
_SOCKET_PLUGIN = re.compile(r"^NET/(FastSocket) ?:")
_NUMBERS = re.compile(r"0x[0-9a-f]+|\d+")
# The NIC a network channel uses: `NET/IB/3/GDRDMA`, `NET/IBext_v8/0`; `NET/IB/3(9)/...` is sent through rank 9's
# NIC (PXN, over NVLink first): NCCL's own routing, not this GPU's NIC.
_NET_INDEX = re.compile(r"^(?:NET|COLLNET)/[^/]+/(\d+)(\(\d+\))?")
# `GPU Direct RDMA Disabled for GPU 1a000 / HCA 0 (distance 7 > 5)`: NCCL checking the NIC it picked for a GPU.
_GDR_HCA = re.compile(r"GPU Direct RDMA (?:Enabled|Disabled) for GPU \S+ / HCA (\d+) \(distance (\d+)")
_SET_AFFINITY = re.compile(r"Setting affinity for GPU (\d+) to ([0-9a-f,\-]+)")
_ENV = re.compile(r"\b(NCCL_IB_HCA|NCCL_P2P_DISABLE|NCCL_P2P_LEVEL|NCCL_TOPO_FILE|NCCL_CROSS_NIC) set "
                  r"(?:by environment )?to (\S+)")


@dataclass
class NcclProcess:
    """What one process (host and pid, or the file when the log lost them) said about its communication."""

    file: str
    host: str | None
    pid: str | None
    version: str | None = None
    rank: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    launched_nodes: int | None = None  # the nodes the launcher's command line in the same file gave the job
    local_ranks: int | None = None
    network: str | None = None  # `Using network X`: IB, Socket, IBext_v8, AWS Libfabric...
    ib_devices: list[str] = field(default_factory=list)
    socket_interfaces: list[str] = field(default_factory=list)
    bootstrap_interface: str | None = None
    socket_ifname: str | None = None
    addresses: list[str] = field(default_factory=list)  # IPs of its interfaces, in the order NCCL named them
    devices: set[int] = field(default_factory=set)  # local CUDA devices it used (the `[dev]` of its lines)
    nvml_devices: set[int] = field(default_factory=set)  # their NVML ids (ncclCommInitRank's nvmlDev)
    no_ib_device: bool = False
    ib_disabled: bool = False  # NCCL_IB_DISABLE=1 in its environment
    transports: Counter[str] = field(default_factory=Counter)  # P2P/IPC, SHM, NET/IB, NET/IB/GDRDMA, NET/Socket...
    max_peer: int | None = None  # the largest rank its channel lines name (a floor for nranks when none is said)
    # The send side of its network channels: GPU Direct RDMA there is GDR *read*, off by default on many platforms
    # (NCCL_NET_GDR_READ), so a send channel without /GDRDMA beside receive channels with it is no fault.
    send_transports: Counter[str] = field(default_factory=Counter)
    bootstrap_link_local: bool = False  # the bootstrap interface has only an IPv6 link-local address (fe80::)
    # The interfaces NCCL bootstraps on or lists for sockets whose address is IPv4 link-local (169.254/16, no DHCP
    # answer), and whether the interface was chosen by NCCL_SOCKET_IFNAME (a back-to-back link set on purpose).
    ipv4_link_local: list[str] = field(default_factory=list)
    ifname_from_environment: bool = False
    nic_speeds_mbps: dict[str, int] = field(default_factory=dict)  # NIC -> speed NCCL read for it
    nvlink_bw: dict[tuple[str, str], float] = field(default_factory=dict)  # (GPU bus id, peer) -> NVL GB/s
    topo_gpu: str | None = None  # the GPU of the topology dump's current block
    last_error: str | None = None  # NCCL's last error as PyTorch quoted it (the line after `Last error:`)
    error_kind: str | None = None  # PyTorch's `NCCL error in: ...` reason: invalid usage, unhandled system error...
    gdr_disabled: list[str] = field(default_factory=list)
    gdr_enabled: bool = False  # NCCL said GPU Direct RDMA is enabled for an HCA it opened
    # The NICs NCCL listed by index (`NET/IB : Using [0]mlx5_0:1/IB ...`), device names without the port.
    net_devices: dict[int, str] = field(default_factory=dict)
    cuda_to_nvml: dict[int, int] = field(default_factory=dict)  # ncclCommInitRank's cudaDev -> nvmlDev
    # Per local GPU (the `[dev]` of the line, or the nvmlDev a 2.19+ channel line prints) the NIC indexes its own
    # network channels use, with one line that says so.
    nic_use: dict[tuple[int, bool], dict[int, str]] = field(default_factory=dict)  # (gpu, is nvml) -> nic -> line
    cpu_affinity: dict[int, str] = field(default_factory=dict)  # cudaDev -> the CPUs NCCL bound its thread to
    bus_to_nvml: dict[int, int] = field(default_factory=dict)  # a GPU's PCI bus id (as a number) -> its nvmlDev
    gpu_net_paths: dict[int, dict[int, str]] = field(default_factory=dict)  # GPU bus id -> NET index -> PIX/SYS...
    nic_distance: dict[tuple[int, int | None], dict[int, str]] = field(default_factory=dict)  # (cudaDev, nvmlDev)
    environment: dict[str, str] = field(default_factory=dict)  # NCCL_IB_HCA, NCCL_P2P_DISABLE... as NCCL said them
    p2p_disabled: list[tuple[int, int, bool]] = field(default_factory=list)  # (gpu, gpu, NVLink-connected)
    warnings: Counter[str] = field(default_factory=Counter)  # WARN text with its numbers blanked -> count
    warning_text: dict[str, str] = field(default_factory=dict)  # one real instance of each
    lines: int = 0

    @property
    def crosses_nodes(self) -> bool:
        return any(t.startswith(("NET/", "COLLNET/")) for t in self.transports) or (self.nnodes or 1) > 1


@lru_cache(maxsize=1)
def _matcher() -> LineMatcher:
    return LineMatcher(list(_PATTERNS), case_sensitive=True)


def _transport(via: str) -> str:
    """A channel's `via` text as a transport class: `NET/IB/GDRDMA`, `NET/Socket`, `P2P/IPC`, `SHM`..."""
    if via.startswith(("NET/", "COLLNET/")):
        found = _NET_TRANSPORT.match(via)
        name = found.group(1) if found else via.split("/")[1]
        kind = "COLLNET" if via.startswith("COLLNET/") else "NET"
        return f"{kind}/{name}" + ("/GDRDMA" if "/GDRDMA" in via else "")
    if via.startswith(("SHM", "direct shared memory")):
        return "SHM"
    if via.startswith("P2P/"):
        parts = via.split("/")
        return "P2P/" + (parts[1].split()[0] if len(parts) > 1 else "?")
    return via.split("/")[0]


def read_nccl_log(file: InputFile, deadline: float, stats: ScanStats | None = None) -> list[NcclProcess]:
    """Every process that wrote NCCL lines to `file`, in the order they first spoke (`stats`: what the scan saw,
    e.g. that the file is binary and was not read)."""
    processes: dict[tuple[str | None, str | None], NcclProcess] = {}
    stats = stats if stats is not None else ScanStats()
    last: NcclProcess | None = None
    launched: int | None = None
    # One line of context: the text after PyTorch's `Last error:` is on the line below it.
    for match in scan_file(file, _matcher(), context=1, deadline=deadline, stats=stats):
        text = display_line(match.text, 4000)
        if text.strip() == "Last error:":
            said = display_line(match.after[0][1], 400).strip() if match.after else ""
            if said and last is None:
                last = processes.setdefault((None, None), NcclProcess(file.name, None, None))
            if said and last is not None:
                last.last_error = said
                last.lines += 1
            continue
        line = _LINE.search(text)
        if line is None and _LAUNCHER.search(text) and (count := launched_nodes(text)) is not None:
            launched = count
            continue
        if line is None and (_BARE_NET.match(text) or "NCCL" not in text and (
                _CHANNEL.search(text) or _INIT_RANK.search(text))):
            # A poster kept the message and cut the `host:pid:tid [dev] NCCL INFO` before it.
            last = processes.setdefault((None, None), NcclProcess(file.name, None, None)) if last is None else last
            _read(last, "INFO", text.strip())
            continue
        if line is None and (torch_error := _TORCH_NCCL_ERROR.search(text)) is not None:
            last = processes.setdefault((None, None), NcclProcess(file.name, None, None)) if last is None else last
            last.error_kind = torch_error.group(1).strip()
            version = _VERSION.search(text)
            last.version = last.version or (version.group(1) if version else None)
            last.lines += 1
            continue
        if line is None:
            version = _VERSION.search(text)
            if version and last is not None and last.version is None:
                last.version = version.group(1)
            elif version:  # the bare banner before any INFO line: a process of its own until one speaks
                last = processes.setdefault((None, None), NcclProcess(file.name, None, None))
                last.version = last.version or version.group(1)
            continue
        key = (line.group("host"), line.group("pid"))
        process = processes.get(key)
        if process is None:
            process = processes[key] = NcclProcess(file.name, key[0], key[1])
            anonymous = processes.get((None, None))
            if anonymous is not None and anonymous is not process and process.version is None and key[0]:
                process.version = anonymous.version
        last = process
        process.lines += 1
        dev = int(line.group("dev")) if line.group("dev") is not None else None
        if dev is not None:
            process.devices.add(dev)
        _read(process, line.group("level"), line.group("msg"), dev)
    if (None, None) in processes and len(processes) > 1 and processes[(None, None)].lines == 0:
        del processes[(None, None)]  # only a banner, now carried by the processes that spoke
    for process in processes.values():
        process.launched_nodes = launched
    return list(processes.values())


def launched_nodes(command: str) -> int | None:
    """The number of nodes a launcher's command line gives the job: its node count, or its host list's hosts."""
    launcher = _LAUNCHER.search(command)
    word = launcher.group(0).strip(" \t$#>/").split()[0] if launcher else ""
    if word in ("mpirun", "mpiexec"):
        hosts = _HOST_LIST.search(command)
        return len({host.split(":")[0] for host in hosts.group(1).split(",") if host}) if hosts else None
    flag = _NODE_COUNT.get("torch" if word in ("torchrun", "python", "python3") else word)
    count = flag.search(command) if flag is not None else None
    return int(count.group(1)) if count is not None else None


def _nic_use(process: NcclProcess, dev: int | None, channel: re.Match[str], via: str, message: str) -> None:
    """The NIC a GPU's own network channel uses: the sending rank's on [send], the receiving rank's on [receive]."""
    index = _NET_INDEX.match(via)
    if index is None or index.group(2):
        return
    brackets = _CHANNEL_DEVICES.search(message)
    mine = (brackets.group(2) if channel.group(3) == "receive" else brackets.group(1)) if brackets else None
    mine = mine or ""
    # 2.19+ print the nvmlDev in the brackets (a small decimal); 2.7-2.18 the bus id (hex, `7000`; a VM's may be
    # as short as `80`), so a version said below 2.19 keeps the line's [dev] instead.
    version = tuple(int(v) for v in process.version.split(".")[:2]) if process.version else None
    nvml_brackets = version is None or version >= (2, 19)
    key = ((int(mine), True) if nvml_brackets and mine.isdigit() and len(mine) <= 2 else
           (dev, False) if dev is not None else None)
    if key is None or key[0] is None:
        return
    process.nic_use.setdefault((int(key[0]), key[1]), {}).setdefault(int(index.group(1)), message.strip()[:200])


def _read(process: NcclProcess, level: str, message: str, dev: int | None = None) -> None:
    if (p2p := _P2P_DISABLED.search(message)) is not None:  # INFO on a PCIe path, WARN between NVLink peers
        process.p2p_disabled.append((int(p2p.group(2)), int(p2p.group(3)), bool(p2p.group(1))))
    elif (failed := _P2P_FAILED.search(message)) is not None:
        pair = (int(failed.group(1)), int(failed.group(2)), False)
        if pair not in process.p2p_disabled:
            process.p2p_disabled.append(pair)
    if level == "WARN":
        shape = _NUMBERS.sub("N", message.strip())[:200]
        process.warnings[shape] += 1
        process.warning_text.setdefault(shape, message.strip()[:300])
        return
    if (version := _VERSION.search(message)) is not None:
        process.version = version.group(1)
        return
    if (nvml := _NVML_DEV.search(message)) is not None:
        process.nvml_devices.add(int(nvml.group(2)))
        process.cuda_to_nvml[int(nvml.group(1))] = int(nvml.group(2))
    if (bus := _BUS_ID.search(message)) is not None:
        process.bus_to_nvml[int(bus.group(2), 16)] = int(bus.group(1))
    if (distance := _NIC_DISTANCE.search(message)) is not None:
        nearness: dict[int, str] = {}
        for position, token in enumerate(distance.group(3).split()):
            port = re.match(r"^([\w.\-]+)/\d+\((\w+)\)$", token)
            if port is not None:
                process.net_devices.setdefault(position, port.group(1))
            path = port.group(2) if port is not None else token
            nearness[position] = "SYS" if path == "SOC" else path
        key = (int(distance.group(1)), int(distance.group(2)) if distance.group(2) else None)
        process.nic_distance[key] = nearness
        return
    if (paths := _GPU_PATHS.match(message.strip())) is not None:
        nets = {int(index): path for index, path in _NET_PATH.findall(paths.group(2))}
        if nets:
            process.gpu_net_paths[int(paths.group(1), 16)] = nets
        return
    if (env := _ENV.search(message)) is not None:
        process.environment[env.group(1)] = env.group(2).rstrip(".")
    if (affinity := _SET_AFFINITY.search(message)) is not None:
        process.cpu_affinity[int(affinity.group(1))] = affinity.group(2).rstrip(",")
        return
    if (gdr := _GDR_HCA.search(message)) is not None and dev is not None:
        process.nic_use.setdefault((dev, False), {}).setdefault(int(gdr.group(1)), message.strip()[:200])
    if (init := _INIT_RANK.search(message)) is not None:
        nranks = int(init.group(2))
        if process.nranks is None or nranks >= process.nranks:  # the largest communicator: the job's world
            process.rank, process.nranks = int(init.group(1)), nranks
            if init.group(3):
                process.nnodes, process.local_ranks = int(init.group(3)), int(init.group(4))
        return
    if (gpu := _TOPO_NODE.match(message)) is not None:
        process.topo_gpu = gpu.group(1)
    elif (nvl := _TOPO_NVL.match(message)) is not None and process.topo_gpu:
        process.nvlink_bw[(process.topo_gpu, nvl.group(2))] = float(nvl.group(1))
    for nic, _, speed in _NIC_SPEED.findall(message):
        process.nic_speeds_mbps[nic] = int(speed)
    if _IFNAME_ENV.search(message):
        process.ifname_from_environment = True
    for iface, address in _ADDRESS.findall(message):
        if address.startswith("169.254.") and iface not in process.ipv4_link_local:
            process.ipv4_link_local.append(iface)
        if address not in process.addresses and not address.startswith(("127.", "fe80")):
            process.addresses.append(address)
    if (channel := _CHANNEL.search(message)) is not None:
        _nic_use(process, dev, channel, channel.group(4), message)
        transport = _transport(channel.group(4))
        process.transports[transport] += 1
        if channel.group(3) == "send" and transport.startswith(("NET/", "COLLNET/")):
            process.send_transports[transport] += 1
        peer = max(int(channel.group(1)), int(channel.group(2)))
        process.max_peer = peer if process.max_peer is None else max(process.max_peer, peer)
        return
    if (network := _USING_NETWORK.match(message)) is not None:
        process.network = network.group(1)
        return
    if (listing := _NET_USING.match(message)) is not None:
        names = _LISTED.findall(listing.group(2).split("; OOB")[0])
        if listing.group(1) != "Socket":
            for index, name in _INDEXED.findall(listing.group(2).split("; OOB")[0]):
                process.net_devices[int(index)] = name.split(":")[0]
        if listing.group(1) == "Socket":
            process.socket_interfaces = [n.split(":")[0] for n in names]
        elif listing.group(1) == "IB":
            process.ib_devices = names
        return
    if (bootstrap := _BOOTSTRAP.match(message)) is not None:
        said = bootstrap.group(1)
        # 2.4-2.6 list every interface found (`[0]enp7s0:10.0.0.1<0> [1]virbr0:...`); later ones name the one used.
        names = _LISTED.findall(said) if said.startswith("[") else [said]
        process.bootstrap_interface = names[0].split(":")[0] if names else None
        process.bootstrap_link_local = bool(names) and names[0].split(":", 1)[-1].lower().startswith("fe80")
        process.socket_interfaces += [n.split(":")[0] for n in names[1:] if n.split(":")[0] not in
                                      process.socket_interfaces]
        return
    if (old := _OLD_SOCKET.match(message)) is not None:
        if old.group(1) not in process.socket_interfaces:
            process.socket_interfaces.append(old.group(1))
        return
    if (ifname := _IFNAME.search(message)) is not None:
        process.socket_ifname = ifname.group(1).rstrip(".")
        return
    if _NO_IB.match(message):
        process.no_ib_device = True
        return
    if _IB_DISABLE.search(message):
        process.ib_disabled = True
        return
    if (plugin := _SOCKET_PLUGIN.match(message)) is not None and process.network is None:
        process.network = plugin.group(1)
        return
    if _GDR_DISABLED.search(message):
        process.gdr_disabled.append(message.strip()[:200])
    elif _GDR_ENABLED.search(message):
        process.gdr_enabled = True
