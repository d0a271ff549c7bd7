"""The judgement of NCCL's debug logs: per node the network and the transport of every channel, against what the
job and its nodes should use (sockets across nodes, no GPU Direct RDMA, a virtual interface, P2P refused, SHM
where P2P should be, versions that differ, WARN lines)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, Field

from tools.core.files import InputFile
from tools.core.limits import NET_MAX_WARN_KINDS
from tools.core.models import Coverage, Severity
from tools.core.ranks import compact_ranges
from tools.core.thresholds import NVLINK_PAIR_RATIO
from tools.interconnect.affinity import judge_log_affinity
from tools.interconnect.evidence import NCCL_DOC, Evidence
from tools.interconnect.nccl_log import NcclProcess, read_nccl_log
from tools.logs import ScanStats

_NUMBERS = re.compile(r"0x[0-9a-f]+|\d+")

__all__ = ["Transport", "judge_logs"]


# Interfaces that are never a cluster's data path: container bridges and veths, tunnels, VPNs, loopback.
_VIRTUAL_IFACE = re.compile(r"^(?:docker\d*|veth\w*|br-\w+|virbr\d*|cni\d*|flannel[.\w]*|cali\w+|vxlan[.\w]*|"
                            r"kube-\w+|weave\w*|tunl\d*|tun\d*|tap\w*|wg\d*|tailscale\d*|zt\w+|utun\d*|"
                            r"CloudflareWARP)$")
_LOOPBACK = "lo"
# WARN lines that mean the job's communication failed, not only that NCCL noticed something.
_FATAL_WARN = re.compile(r"ibv_\w+ failed|completion|async (?:fatal|error)|Test NCCL failure|timeout|"
                         r"unhandled|no socket interface|No usable|Failed to open libibverbs", re.I)


class Transport(BaseModel):
    node: str
    ranks: str = Field(description="The ranks seen on that node (from ncclCommInitRank), or '?'.")
    nccl_version: str | None
    nranks: int | None
    nnodes: int | None
    network: str | None = Field(description="The network NCCL chose ('Using network X').")
    interfaces: str = Field(description="Bootstrap interface; IB devices or socket interfaces NCCL listed.")
    transports: str = Field(description="Channels by transport, e.g. 'NET/IB/GDRDMA x16, P2P/IPC x48'.")
    warnings: int
    file: str


def judge_logs(files: Sequence[InputFile], deadline: float, found: Evidence,
               embedded: Sequence[InputFile] = ()) -> list[Transport]:
    """`embedded`: nccl-tests outputs run with NCCL_DEBUG=INFO, whose NCCL lines are judged too (their coverage is
    the test's own)."""
    processes: list[NcclProcess] = []
    for file in embedded:
        # A test that ran printed its table: that is the verdict on it, not the WARN lines on the way (NCCL warns
        # of a libibverbs it does not need on a socket-only cluster); a log passed as such has them judged.
        for process in read_nccl_log(file, deadline, ScanStats()):
            process.warnings.clear()
            processes.append(process)
    for file in files:
        stats = ScanStats()
        read = read_nccl_log(file, deadline, stats)
        processes.extend(read)
        if stats.binary:
            found.notes.append(f"{file.name} is binary (NUL bytes at its start): not read as a log.")
        found.coverage.append(Coverage.read(file.name, f"NCCL lines of {len(read)} process(es)") if read else
                              Coverage.not_understood(file.name, "binary (NUL bytes at its start)" if stats.binary
                                                      else "no NCCL INFO/WARN line in it",
                                                      ["job logs with NCCL_DEBUG=INFO lines"]))
    if not processes:
        if not files:
            return []
        found.notes.append("No NCCL lines in the logs: run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET.")
        return []
    by_node = _by_node(processes)
    hosted = [node for node, group in by_node.items() if any(p.host for p in group)]
    # NCCL uses its network transport only between nodes: a NET channel anywhere means the job spans two or more.
    # ...unless both ends of every such channel are GPUs of the one process in the log (a local ring forced onto it).
    local = len(processes) == 1 and _all_local(processes[0])
    crosses = not local and any(t.startswith(("NET/", "COLLNET/")) for p in processes for t in p.transports)
    nodes = max([p.nnodes or 1 for p in processes] + [len(hosted), 2 if crosses else 1])
    rows = []
    versions = Counter(p.version for p in processes if p.version)
    if len(versions) > 1:
        common = versions.most_common(1)[0][0]
        odd = sorted({p.host or p.file for p in processes if p.version and p.version != common})
        found.add("nccl_version_mismatch", Severity.crit,
                  f"NCCL {', '.join(f'{v} on {n} process(es)' for v, n in versions.most_common())}: nodes "
                  f"{', '.join(odd[:5])} differ", "Run one NCCL build everywhere (the same container image or "
                  "module on every node).", odd[0] if odd else None)
    # Whether the job spans nodes: 2 or more seen; 0 when nothing says (one host, no communicator line).
    # One node for certain: NCCL's own nNodes 1 (2.20+), or every rank of the communicator seen on the one host.
    local_gpus = len({(p.pid, d) for p in processes for d in p.devices})
    # The launcher's command line, where the log kept it, says how many nodes the job was given (nccl_log.py).
    launched = max((p.launched_nodes or 0 for p in processes), default=0)
    said_single = any(p.nnodes == 1 for p in processes) or (
        nodes == 1 and 0 < max((p.nranks or 0 for p in processes), default=0) <= local_gpus) or (
        launched == 1 and nodes <= 1)
    span = max(nodes, launched) if max(nodes, launched) > 1 or said_single else 0
    ib_in_job = any(p.ib_devices for p in processes)
    for node, group in by_node.items():
        rows.append(_transport_row(node, group, nodes))
        _node_findings(node, group, span, ib_in_job, found, said_single)
        _nvlink_asymmetry(node, group, found)
        judge_log_affinity(node, group, found)
        found.nccl_nic_speeds[node] = {nic: mbps for p in group for nic, mbps in p.nic_speeds_mbps.items()}
        found.nccl_nics[node] = max((len(p.ib_devices) for p in group), default=0)
    _warn_findings(processes, found)
    return rows


def _nvlink_asymmetry(node: str, group: list[NcclProcess], found: Evidence) -> None:
    """NCCL's own topology (NCCL_DEBUG_SUBSYS=GRAPH) gives each GPU's NVLink bandwidth to its peer: a pair whose one
    direction is far below the other, or below the node's other pairs, has lost links (or is modelled so)."""
    bandwidth: dict[tuple[str, str], float] = {}
    for process in group:
        bandwidth.update(process.nvlink_bw)
    if not bandwidth:
        return
    top = max(bandwidth.values())
    for (gpu, peer), gbs in sorted(bandwidth.items()):
        if gbs < NVLINK_PAIR_RATIO * top:
            back = bandwidth.get((peer, gpu))
            found.add("topo_degraded", Severity.warn,
                      f"NCCL's topology: NVLink GPU {gpu} -> GPU {peer} at {gbs:g} GB/s, "
                      + (f"the reverse at {back:g} GB/s" if back is not None else f"the node's fastest at {top:g}"),
                      "A pair that lost NVLinks (or a topology file that says so, NCCL_TOPO_FILE): check "
                      "nvidia-smi nvlink -s on that node and the NCCL_TOPO_FILE in the job's environment.", node)
            return


def _all_local(process: NcclProcess) -> bool:
    """Every rank its channel lines name is one of the GPUs this one process drives (and no line says more nodes)."""
    return (process.nnodes or 1) == 1 and process.max_peer is not None and len(process.devices) > process.max_peer


def _by_node(processes: list[NcclProcess]) -> dict[str, list[NcclProcess]]:
    """Processes by node. Host names are weak evidence (containers, VMs all called 'ubuntu', posters who mask
    them): the processes of one name whose interface addresses never overlap are different nodes, labelled with
    their address."""
    by_host: dict[str, list[NcclProcess]] = defaultdict(list)
    for process in processes:
        by_host[process.host or process.file].append(process)
    by_node: dict[str, list[NcclProcess]] = {}
    for host, group in by_host.items():
        clusters: list[tuple[set[str], list[NcclProcess]]] = []
        for process in sorted(group, key=lambda p: not p.addresses):  # processes without an address join last
            addresses = set(process.addresses)
            home = next((c for c in clusters if c[0] & addresses), None) if addresses else (
                max(clusters, key=lambda c: len(c[1])) if clusters else None)
            if home is None:
                clusters.append((addresses, [process]))
            else:
                home[0].update(addresses)
                home[1].append(process)
        for addresses, members in clusters:
            label = f"{host} ({sorted(addresses)[0]})" if len(clusters) > 1 and addresses else host
            by_node[label] = members
    return by_node


def _ranks(group: list[NcclProcess]) -> str:
    ranks = sorted({p.rank for p in group if p.rank is not None})
    return compact_ranges(ranks) if ranks else "?"


def _transport_row(node: str, group: list[NcclProcess], nodes: int) -> Transport:
    channels: Counter[str] = Counter()
    for process in group:
        channels.update(process.transports)
    first = group[0]
    interfaces = [f"bootstrap {first.bootstrap_interface}"] if first.bootstrap_interface else []
    if first.ib_devices:
        interfaces.append("IB " + " ".join(first.ib_devices[:8]))
    if first.socket_interfaces:
        interfaces.append("sockets " + " ".join(first.socket_interfaces[:8]))
    said = [p.nranks for p in group if p.nranks]
    seen = [p.max_peer + 1 for p in group if p.max_peer is not None]
    return Transport(node=node, ranks=_ranks(group), nccl_version=first.version,
                     nranks=max(said) if said else max(seen, default=None),
                     nnodes=max([p.nnodes for p in group if p.nnodes] + [nodes]),
                     network=_network(group, channels),
                     interfaces="; ".join(interfaces) or "-",
                     transports=", ".join(f"{t} x{n}" for t, n in channels.most_common(6)) or "-",
                     warnings=sum(sum(p.warnings.values()) for p in group), file=first.file)


def _network(group: list[NcclProcess], channels: Counter[str]) -> str | None:
    """The network NCCL chose: as it said it (`Using network IB`), else as its lines show it: the transport of its
    network channels (`via NET/IB/0`), the IB devices it opened (`NET/IB : Using [0]mlx5_0:1/RoCE`: IB comes before
    sockets in NCCL's order, and it lists them only once they opened), or sockets when it said IB is absent or off."""
    said = next((p.network for p in group if p.network), None)
    if said is not None:
        return said
    net = [t.split("/")[1] for t, _ in channels.most_common() if t.startswith("NET/")]
    if net:
        return net[0]
    if any(p.no_ib_device or p.ib_disabled for p in group):
        return "Socket" if any(p.socket_interfaces for p in group) else None
    return "IB" if any(p.ib_devices for p in group) else None


def _node_findings(node: str, group: list[NcclProcess], span: int, ib_in_job: bool, found: Evidence,
                   said_single: bool = False) -> None:
    """The findings of one node's processes; `span` is the job's node count (0: not known); `said_single`: NCCL
    itself said nNodes 1."""
    channels: Counter[str] = Counter()
    for process in group:
        channels.update(process.transports)
    ranks = _ranks(group)
    network = next((p.network for p in group if p.network), None)
    socket_channels = sum(n for t, n in channels.items() if t.startswith("NET/Socket"))
    no_ib = any(p.no_ib_device for p in group)
    # NCCL lists its socket interfaces whatever it uses: a list alone is no evidence of sockets, unless no process of
    # the job ever named an IB device (2.2-2.6 logs say nothing else).
    on_sockets = network in ("Socket", "FastSocket") or no_ib or any(p.ib_disabled for p in group) or (
        network is None and not ib_in_job and any(p.socket_interfaces for p in group))
    # Both ranks of NCCL's network channels in one process on one host: local GPUs on the network transport.
    one = group[0]
    local_net = len(group) == 1 and span <= 1 and _all_local(one)
    if on_sockets and not socket_channels and span == 0:
        found.add("socket_fallback", Severity.unknown, "NCCL's network is TCP sockets"
                  + (f" on {', '.join(one.socket_interfaces[:3])}" if one.socket_interfaces else "")
                  + "; nothing in these lines says whether the job spans nodes (no nRanks/nNodes line, one host)",
                  "Pass every node's log (or the lines with 'nRanks N nNodes M'): across nodes this is the socket "
                  "fallback, within one node sockets carry nothing.", node, ranks)
    if (socket_channels and not local_net) or (span > 1 and on_sockets):
        said = (f"inter-node traffic over TCP sockets ({socket_channels} channel(s) via NET/Socket" if socket_channels
                else "NCCL's network is TCP sockets and the job spans nodes")
        said += (", 'NET/IB : No device found'" if no_ib else "") + (
            ", NCCL_IB_DISABLE=1" if any(p.ib_disabled for p in group) else "") + (
            f", NCCL chose {network}" if network else "") + (")" if socket_channels else "")
        found.add("socket_fallback", Severity.crit, said,
                  "Make the IB/RoCE devices usable in the job: rdma-core (libibverbs) in the container, "
                  "/dev/infiniband mounted, NCCL_IB_DISABLE unset, NCCL_IB_HCA naming the compute HCAs; ibstat "
                  f"must show them Active. {NCCL_DOC}", node, ranks)
    # GPU Direct RDMA shows as /GDRDMA on IB channels; other plugins (AWS Libfabric, TCPX) say it elsewhere or not.
    # Receive channels (GDR write) must have it; send channels (GDR read) may lack it by NCCL's default.
    sends: Counter[str] = Counter()
    for process in group:
        sends.update(process.send_transports)
    plain = {t: n for t, n in channels.items() if re.match(r"(?:NET|COLLNET)/IB", t) and not t.endswith("/GDRDMA")}
    # NCCL saying it enabled GPU Direct RDMA for the HCAs is the same evidence as a receive channel with the suffix:
    # the send channels beside it lack it by default (GDR read), not for want of GDR.
    ib_gdr_any = any(t.endswith("/GDRDMA") for t in channels) or any(p.gdr_enabled for p in group)
    ib_plain = sum(n - (sends[t] if ib_gdr_any else 0) for t, n in plain.items())
    # AWS's EFA plugin marks its RDMA channels the same way (`via NET/AWS Libfabric/0/GDRDMA` on p4d and later): a
    # receive channel without it is staged through host memory (issue 32).
    ib_plain += sum(n - sends[t] for t, n in channels.items()
                    if t.startswith("NET/AWS Libfabric") and not t.endswith("/GDRDMA"))
    ib_gdr = sum(n for t, n in channels.items() if t.endswith("/GDRDMA"))
    # NCCL says GPU Direct RDMA is off for an HCA as it opens it, whether or not any traffic will cross it: on a job
    # known to stay within one node nothing does.
    disabled = [line for p in group for line in p.gdr_disabled] if not said_single else []
    if (ib_plain and not local_net) or (disabled and not on_sockets):
        said = (f"{ib_plain} network channel(s) without GPU Direct RDMA (no /GDRDMA suffix"
                + (f"; {ib_gdr} with it" if ib_gdr else "") + ")") if ib_plain else "NCCL disables GPU Direct RDMA"
        found.add("no_gdr", Severity.warn,
                  said + (f"; NCCL: {disabled[0]}" if disabled else "") + ": data is staged through host memory",
                  "Load nvidia-peermem on every node (or use DMA-BUF with the open kernel driver), and check that "
                  "each GPU has a NIC at PIX/PXB in nvidia-smi topo -m (NCCL_NET_GDR_LEVEL).", node, ranks)
    interfaces = {p.bootstrap_interface for p in group if p.bootstrap_interface} | {
        i for p in group for i in p.socket_interfaces}
    virtual = sorted(i for i in interfaces if _VIRTUAL_IFACE.match(i))
    _loopback(node, group, interfaces, span, socket_channels, ranks, found)
    _ipv4_link_local(node, group, ranks, found)
    link_local = sorted({p.bootstrap_interface for p in group if p.bootstrap_link_local and p.bootstrap_interface})
    if link_local and not virtual:
        found.add("wrong_interface", Severity.warn,
                  f"NCCL bootstraps on {', '.join(link_local)} with only an IPv6 link-local address (fe80::): other "
                  "nodes can reach it only on the same link, and connects hang or fail",
                  "Set NCCL_SOCKET_IFNAME to an interface with a routable address (ip -br addr), on every node.",
                  node, ranks)
    # NCCL listing a tunnel or VPN among its socket interfaces on a job it says is one node (`nNodes 1`): nothing
    # crosses the network, so the interface carries nothing (as for loopback, _loopback).
    if virtual and not said_single:
        found.add("wrong_interface", Severity.crit if socket_channels else Severity.warn,
                  f"NCCL uses {', '.join(virtual)} (a container, tunnel or VPN interface) for its sockets"
                  + (f"; NCCL_SOCKET_IFNAME={group[0].socket_ifname}" if group[0].socket_ifname else ""),
                  "Set NCCL_SOCKET_IFNAME to the cluster's data interface (e.g. =ib0 or =^docker,lo,veth).", node,
                  ranks)
    # NCCL's network transport between GPUs of one process on one host: neither P2P nor SHM was used between them.
    if local_net and socket_channels + ib_plain + ib_gdr:
        net = ", ".join(sorted(t for t in channels if t.startswith("NET/")))
        found.add("p2p_disabled", Severity.warn,
                  f"the GPUs of one process on one host talk over NCCL's network transport ({net}): neither P2P nor "
                  "shared memory is used between them",
                  "P2P and SHM are off (NCCL_P2P_DISABLE / NCCL_SHM_DISABLE in the environment) or refused: unset "
                  "them, or check nvidia-smi topo -p2p r for the pair.", node, ranks)
    # P2P turned off by the job's environment: NCCL_P2P_DISABLE=1, or NCCL_P2P_LEVEL=LOC (0), which allows it nowhere.
    switched_off = next((f"{key}={value}" for p in group for key, value in p.environment.items()
                         if (key, value) in (("NCCL_P2P_DISABLE", "1"), ("NCCL_P2P_LEVEL", "LOC"),
                                             ("NCCL_P2P_LEVEL", "0"))), None)
    local_gpus = sorted({d for p in group for d in (p.nvml_devices or p.devices)})
    if switched_off and (len(local_gpus) > 1 or channels.get("SHM")):
        found.add("p2p_disabled", Severity.warn,
                  f"{switched_off} in the job's environment (NCCL says so): no P2P between GPUs "
                  f"{', '.join(map(str, local_gpus)) or '?'} of this node, their data goes through host memory"
                  + (f" ({channels['SHM']} channel(s) via SHM)" if channels.get("SHM") else ""),
                  f"Unset {switched_off.split('=')[0]} unless it works around a known fault (a hang with P2P on a "
                  "board whose ACS/IOMMU breaks it: fix that instead, see nvidia-smi topo -p2p r).", node, ranks)
    for process in group:
        for a, b, nvlink in process.p2p_disabled[:1]:
            found.add("p2p_disabled", Severity.crit if nvlink else Severity.warn,
                      f"P2P is disabled between {'NVLink-connected ' if nvlink else ''}GPUs {a} and {b}: NCCL "
                      "falls back to shared memory through the host",
                      "NVLink pair: a hardware or fabric-manager fault (nvidia-smi nvlink -s, topo -p2p n). PCIe: "
                      "ACS or IOMMU on the PCIe switches (disable ACS, iommu=pt), or containers without a shared "
                      "IPC namespace.", node, str(process.rank) if process.rank is not None else ranks)
            break
    # One GPU visible per process (CUDA_VISIBLE_DEVICES narrowed): every process says cudaDev 0 for another nvmlDev.
    one_visible = len(group) > 1 and all(p.devices <= {0} for p in group) and len(
        {d for p in group for d in p.nvml_devices}) > 1
    if channels.get("SHM") and one_visible:
        found.add("shm_instead_of_p2p", Severity.warn,
                  f"{channels['SHM']} channel(s) via SHM: each process sees only its own GPU (cudaDev 0 for nvmlDev "
                  f"{', '.join(map(str, sorted({d for p in group for d in p.nvml_devices})))}), so P2P cannot be used",
                  "Let every rank see all the node's GPUs (no per-process CUDA_VISIBLE_DEVICES; select the device in "
                  "the program with LOCAL_RANK), or run them in one container with --ipc=host.", node, ranks)
    elif channels.get("SHM") and not switched_off:
        if node in found.nvlink_nodes():
            found.add("shm_instead_of_p2p", Severity.warn,
                      f"{channels['SHM']} channel(s) via SHM between GPUs that the capture shows NVLink-connected",
                      "P2P is not used: processes in separate containers or IPC namespaces, one GPU visible per "
                      "process (CUDA_VISIBLE_DEVICES), or P2P refused (see p2p_disabled); run the ranks of a node "
                      "in one container with --ipc=host.", node, ranks)
        else:
            found.notes.append(f"{node}: {channels['SHM']} channel(s) via SHM within the node (P2P not used): fine "
                               "on a PCIe box without P2P, a loss if the GPUs have NVLink (pass nvidia-smi topo -m).")


def _loopback(node: str, group: list[NcclProcess], interfaces: set[str], span: int, socket_channels: int,
              ranks: str, found: Evidence) -> None:
    """Loopback as NCCL's bootstrap or socket interface: harmless while the job stays on one node, fatal across
    nodes; when a physical interface is listed beside it, NCCL may pick lo for a peer on another node."""
    if _LOOPBACK not in interfaces:
        return
    others = sorted(i for i in interfaces if i != _LOOPBACK and not _VIRTUAL_IFACE.match(i))
    said = "NCCL uses lo (loopback) for its sockets" + (f" beside {', '.join(others)}" if others else "")
    fix = "Set NCCL_SOCKET_IFNAME to the cluster's data interface (e.g. =eth0 or =^lo,docker), on every node."
    if span > 1 or (others and span != 1):
        found.add("wrong_interface", Severity.crit if socket_channels else Severity.warn,
                  said + (f" on a job of {span} nodes" if span > 1 else "") + ": other nodes cannot reach 127.0.0.1",
                  fix, node, ranks)
    elif span == 0:
        found.add("wrong_interface", Severity.unknown, said + "; these lines do not say whether the job spans nodes "
                  "(fine within one node, a hang across nodes)", "Pass every node's log (or the 'nRanks N nNodes M' "
                  "line): across nodes, " + fix[0].lower() + fix[1:], node, ranks)
    else:
        found.notes.append(f"{node}: NCCL uses lo for its sockets; harmless on this one-node job, fatal across nodes.")


def _ipv4_link_local(node: str, group: list[NcclProcess], ranks: str, found: Evidence) -> None:
    """An IPv4 link-local address (169.254/16: no DHCP answer) on the interface NCCL bootstraps on: reachable only on
    the same link. Chosen by NCCL itself it is a wrong pick; named by NCCL_SOCKET_IFNAME it is a back-to-back link
    set up on purpose."""
    link_local = sorted({i for p in group for i in p.ipv4_link_local})
    if not link_local:
        return
    if any(p.ifname_from_environment for p in group):
        found.notes.append(f"{node}: NCCL bootstraps on {', '.join(link_local)} with a 169.254 (link-local) address, "
                           "chosen by NCCL_SOCKET_IFNAME: a back-to-back link set up on purpose works; across a "
                           "routed network it does not.")
        return
    found.add("wrong_interface", Severity.warn,
              f"NCCL picked {', '.join(link_local)} with a 169.254 link-local address (no DHCP lease): nodes on other "
              "links cannot reach it", "Set NCCL_SOCKET_IFNAME to the interface with the cluster's routable address "
              "(ip -br addr), on every node.", node, ranks)


def _warn_findings(processes: list[NcclProcess], found: Evidence) -> None:
    shapes: Counter[str] = Counter()
    where: dict[str, set[str]] = defaultdict(set)
    text: dict[str, str] = {}
    for process in processes:
        for shape, count in process.warnings.items():
            shapes[shape] += count
            where[shape].add(process.host or process.file)
            text.setdefault(shape, process.warning_text[shape])
    for process in processes:
        if process.last_error or process.error_kind:
            said = process.last_error or process.error_kind or ""
            shape = _NUMBERS.sub("N", said)[:200]
            shapes[shape] += 1
            where[shape].add(process.host or process.file)
            text.setdefault(shape, f"{process.error_kind or 'NCCL error'}: {said}" if process.last_error else said)
    bootstrap = next((shape for shape in shapes if "no socket interface" in shape), None)
    if bootstrap is not None:
        found.add("wrong_interface", Severity.crit, "NCCL found no socket interface to bootstrap on (NCCL WARN "
                  "'Bootstrap : no socket interface found'): NCCL_SOCKET_IFNAME names none this node has, or every "
                  "interface is excluded", "Set NCCL_SOCKET_IFNAME to an interface that exists on every node "
                  "(ip -br addr), or unset it.", sorted(where[bootstrap])[0])
    for shape, count in shapes.most_common(NET_MAX_WARN_KINDS):
        nodes = sorted(where[shape])
        found.add("nccl_warn", Severity.crit if _FATAL_WARN.search(shape) else Severity.warn,
                  f"NCCL WARN x{count} on {len(nodes)} node(s): {text[shape]}",
                  _warn_fix(shape), nodes[0] if len(nodes) == 1 else ", ".join(nodes[:4]))


def _warn_fix(shape: str) -> str:
    if "ibv_modify_qp" in shape:
        return "No route or a GID mismatch on that rail: check the subnet/VLAN and NCCL_IB_GID_INDEX (RoCE)."
    if "completion" in shape.lower():
        return ("The IB transfer failed (status 12: retries exhausted, a flapping link or congestion; status 4: ACS "
                "breaking GPU Direct RDMA): check the named peer's port counters and ACS.")
    if "libibverbs" in shape:
        return "Install rdma-core (libibverbs) in the container, or NCCL falls back to sockets."
    if "socket interface" in shape or "No usable" in shape:
        return "NCCL_SOCKET_IFNAME matches no interface: set it to an existing one (ip -br addr)."
    return f"Read the warning in context ({NCCL_DOC})."
