"""The judgement of node captures: GPU pairs below the board's norm and GPU-NIC affinity (topo -m), inactive or
slow NVLinks and their error counters, IB ports down or slower than their siblings, Ethernet links slower than
the others."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from tools.core.files import InputFile
from tools.core.models import Coverage, Severity
from tools.interconnect.affinity import judge_matrix_affinity
from tools.interconnect.captures import (
    CaptureKind,
    EthLink,
    IbPort,
    TopoMatrix,
    kind_of,
    read_ethtool,
    read_ib_ports,
    read_nvlink_errors,
    read_nvlink_status,
    read_p2p,
    read_topo,
)
from tools.interconnect.evidence import Evidence, Link, node_of, read_capture
from tools.interconnect.pcie import LstopoTree, read_lspci, read_lstopo, read_lstopo_tree, read_smi_pcie
from tools.interconnect.pcie_judge import judge_pcie

__all__ = ["CAPTURE_FORMATS", "judge_across_nodes", "judge_capture", "judge_captures"]

CAPTURE_FORMATS = ["nvidia-smi topo -m", "nvidia-smi topo -p2p r|w|n", "nvidia-smi nvlink -s", "nvidia-smi nvlink -e",
                   "ibstat", "ibstatus", "ibv_devinfo", "ibdev2netdev", "ethtool IFACE", "lspci -vv", "nvidia-smi -q",
                   "lstopo -v"]


def judge_captures(files: Sequence[InputFile], found: Evidence) -> None:
    for file in files:
        judge_capture(read_capture(file), file.name, node_of(file.name), found)


def judge_capture(text: str, name: str, node: str, found: Evidence) -> None:
    """One capture's findings and link rows; `name` is the file (or the command) it came from."""
    kind = kind_of(text)
    if kind not in ("nccl_log", "nccl_tests", "unknown"):
        found.coverage.append(Coverage.read(name, kind))
    if kind == "topo":
        _topo(text, node, name, found)
    elif kind == "topo_p2p":
        _p2p(text, node, name, found)
    elif kind == "nvlink_status":
        _nvlink_status(text, node, found)
    elif kind == "nvlink_errors":
        _nvlink_errors(text, node, found)
    elif kind in ("ibstat", "ibstatus", "ibv_devinfo", "ibdev2netdev"):
        ports = read_ib_ports(text, kind)
        if not any(port.state for port in ports):
            # Recognised by its header, yet no port's state came out of it: nothing says the ports are up.
            found.coverage[-1] = Coverage.not_understood(name, f"{kind} header(s) but no port state under them",
                                                         CAPTURE_FORMATS)
        _ib(ports, node, kind, found, _NAMED_DEVICE.findall(text))
    elif kind == "ethtool":
        _eth(read_ethtool(text), node, found)
    elif kind in ("lspci", "smi_q"):
        links = read_lspci(text) if kind == "lspci" else read_smi_pcie(text)
        if not links:
            found.coverage[-1] = Coverage.partial(name, f"{kind}: no PCIe link state in it (LnkSta / GPU Link Info)")
        judge_pcie(links, node, found)
    elif kind == "lstopo":
        objects, figures = read_lstopo(text)
        tree = read_lstopo_tree(text)
        if tree is None:
            found.coverage[-1] = Coverage.partial(name, f"lstopo: {objects} object(s), {len(figures)} PCI link "
                                                  "figure(s), no GPU with an RDMA NIC to pair it with: the speed a "
                                                  "link runs at now, never what it can do")
        else:
            found.coverage[-1] = Coverage.read(name, f"lstopo: {len(tree.gpus)} GPU(s), {len(tree.nics)} RDMA "
                                               "NIC(s) and the PCIe paths between them (link speeds there are what "
                                               "the links run at now only)")
            _lstopo_affinity(tree, node, found)
        found.links.extend(Link(node=node, kind="pcie", name=f"{what} {busid}", state="now", speed=f"{gbs:g} GB/s",
                                expected="-") for what, busid, gbs in figures)
    elif kind in ("nccl_log", "nccl_tests"):
        found.notes.append(f"{name} is {kind.replace('_', '-')} output: pass it as {kind}.")
        found.coverage.append(Coverage.not_understood(name, f"{kind.replace('_', '-')} output given as a capture: "
                                                      f"pass it as {kind}", CAPTURE_FORMATS))
    else:
        found.notes.append(f"{name}: not a capture this tool reads (topo -m, nvlink -s/-e, ibstat, ibstatus, "
                           "ibv_devinfo, ibdev2netdev, ethtool).")
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        found.coverage.append(Coverage.not_understood(name, f"not a capture this tool reads; it starts {first[:80]!r}"
                                                      if first else "no text in it", CAPTURE_FORMATS))
        return
    if kind == "topo" and read_topo(text) is None:
        # Recognised, yet no GPU row came out of it (a matrix cut before its rows). A matrix of PCIe paths only is
        # read all the same: no NVLink to judge is no reason to call it not understood.
        found.coverage[-1] = Coverage.not_understood(name, "topo -m header with no GPU row under it", CAPTURE_FORMATS)


def _lstopo_affinity(tree: LstopoTree, node: str, found: Evidence) -> None:
    """lstopo's GPU-NIC paths judged as topo -m's are; its GPUs are named by bus id (lstopo has no GPU index)."""
    names = {bus: f"GPU {bus}" for bus in tree.gpus}
    matrix = TopoMatrix(gpus=list(names.values()), links={},
                        nic_links={(names[gpu], nic): path for (gpu, nic), path in tree.paths.items()})
    found.links.extend(Link(node=node, kind="gpu_nic", name=f"{names[gpu]} - {nic}", state=path, speed="-",
                            expected="PIX/PXB") for (gpu, nic), path in sorted(tree.paths.items()))
    judge_matrix_affinity(matrix, node, found)


def judge_across_nodes(found: Evidence) -> None:
    """What only several nodes show: a node whose rails are slower than the other nodes' (each node alone looks
    uniform), and Ethernet links slower than the same links elsewhere."""
    fastest = {node: max(rates) for node, rates in found.nic_rates().items() if rates}
    if len(fastest) >= 2:
        top = max(fastest.values())
        for node, rate in sorted(fastest.items()):
            if rate < top:
                found.add("ib_port_slow", Severity.warn, f"{node}'s rails run at {rate:g} Gb/s, the other nodes' at "
                          f"{top:g} Gb/s", "Check that node's cables, transceivers and switch ports; the slowest node "
                          "paces every collective of the job.", node)
    _eth_across(found)


def _nv_count(cell: str) -> int:
    return int(cell[2:]) if cell.startswith("NV") and cell[2:].isdigit() else 0


def _topo(text: str, node: str, name: str, found: Evidence) -> None:
    matrix = read_topo(text)
    if matrix is None:
        found.notes.append(f"{name}: no GPU rows in the topology matrix.")
        return
    pairs = matrix.links
    norm, _ = Counter(pairs.values()).most_common(1)[0] if pairs else ("-", 0)
    if _nv_count(norm):
        for (a, b), cell in sorted(pairs.items()):
            if cell == norm:
                continue
            lost = not _nv_count(cell)
            found.add("topo_degraded", Severity.crit if lost else Severity.warn,
                      f"{a}-{b} is {cell} where the other GPU pairs are {norm}"
                      + (": no NVLink between them, traffic goes over PCIe/CPU" if lost else ": fewer NVLinks"),
                      "Check that pair's NVLinks (nvidia-smi nvlink -s / -e), the fabric manager (NVSwitch boards); "
                      "reseat or replace, drain the node meanwhile.", node)
            found.links.append(Link(node=node, kind="gpu_pair", name=f"{a}-{b}", state=cell, speed="-",
                                    expected=norm))
        found.links.append(Link(node=node, kind="gpu_pair", name=f"{len(pairs)} GPU pairs", state=norm, speed="-",
                                expected=norm))
    found.topologies[node] = matrix
    judge_matrix_affinity(matrix, node, found)


# topo -p2p's codes that say P2P is refused, and why (its legend); U (unknown) says nothing.
_P2P_REFUSED = {"NS": "not supported", "CNS": "chipset not supported (ACS/IOMMU or a root complex that does not "
                "forward P2P)", "TNS": "topology not supported", "GNS": "GPU not supported (a GeForce/consumer "
                "board: the driver offers no P2P)", "DR": "disabled by regkey"}


def _p2p(text: str, node: str, name: str, found: Evidence) -> None:
    """nvidia-smi topo -p2p: a pair of GPUs refused P2P talks through host memory (NCCL's SHM); OK is P2P. In NVLink
    mode (-p2p n) NS only says the pair has no NVLink, which a PCIe board never has: that is no refusal."""
    matrix = read_p2p(text)
    if matrix is None:
        found.coverage[-1] = Coverage.not_understood(name, "topo -p2p legend with no GPU row under it",
                                                     CAPTURE_FORMATS)
        return
    refused = {pair: code for pair, code in matrix.status.items() if code in _P2P_REFUSED and pair[0] < pair[1]}
    found.links.extend(Link(node=node, kind="gpu_p2p", name=f"{a}-{b}", state=code, speed="-", expected="OK")
                       for (a, b), code in sorted(refused.items()))
    if matrix.mode == "n":
        if refused:
            found.notes.append(f"{node}: topo -p2p n (NVLink) says {len(refused)} GPU pair(s) have no NVLink P2P: a "
                               "PCIe board has none; an NVLink board should show OK everywhere.")
        return
    if not refused:
        return
    codes = sorted(set(refused.values()))
    pairs = sorted(refused, key=lambda pair: (_gpu_key(pair[0]), _gpu_key(pair[1])))
    said = ", ".join(f"{a}-{b}" for a, b in pairs[:6]) + (f" and {len(pairs) - 6} more" if len(pairs) > 6 else "")
    consumer = codes == ["GNS"]
    found.add("p2p_disabled", Severity.warn,
              f"nvidia-smi topo -p2p{(' ' + matrix.mode) if matrix.mode else ''}: P2P refused between {said} of "
              f"{len(matrix.gpus)} GPU(s) ({'; '.join(f'{c} = {_P2P_REFUSED[c]}' for c in codes)}): NCCL moves their "
              "data through host memory (SHM)",
              "A GeForce board has no P2P to enable: expect SHM/host-memory bandwidth between its GPUs." if consumer
              else "CNS/NS on PCIe: disable ACS on the PCIe switches and root ports (setpci, or the BIOS), boot "
              "with iommu=pt (or off), and outside a VM; check the pair again with topo -p2p r. In a VM, P2P needs "
              "the hypervisor's support.", node)


def _gpu_key(name: str) -> int:
    digits = re.sub(r"\D", "", name)
    return int(digits) if digits else 0


def _nvlink_status(text: str, node: str, found: Evidence) -> None:
    gpus, all_inactive = read_nvlink_status(text)
    if all_inactive:
        found.add("nvlink_inactive", Severity.crit, "NVML: all NVLinks are inactive on this node",
                  "Check the fabric manager (systemctl status nvidia-fabricmanager) and the GPUs' NVLink state; "
                  "SKUs without NVLink print nothing at all.", node)
        return
    counts = Counter(len([s for s in g.speeds.values() if s is not None]) for g in gpus)
    norm_links = counts.most_common(1)[0][0] if counts else 0
    speeds = [s for g in gpus for s in g.speeds.values() if s is not None]
    top = max(speeds, default=0.0)
    # Links inactive on every GPU alike are the SKU's design (H100 NVL boards use 12 of 18); a GPU with more inactive
    # links than the others, or one GPU shown alone with some inactive, has lost them.
    fewest = min((sum(s is None for s in g.speeds.values()) for g in gpus), default=0)
    by_design = len(gpus) > 1 and fewest > 0 and all(
        sum(s is None for s in g.speeds.values()) == fewest for g in gpus)
    if by_design:
        found.notes.append(f"{node}: every GPU has {fewest} inactive NVLink(s) alike: the board's design, not a fault.")
    for gpu in gpus:
        inactive = sorted(k for k, s in gpu.speeds.items() if s is None)
        slow = sorted(k for k, s in gpu.speeds.items() if s is not None and s < 0.95 * top)
        active = len(gpu.speeds) - len(inactive)
        if inactive and active and not by_design and (len(gpus) == 1 or len(inactive) > fewest):
            found.add("nvlink_inactive", Severity.crit, f"{gpu.gpu}: link(s) {', '.join(map(str, inactive))} "
                      f"inactive ({active} of {len(gpu.speeds)} active"
                      + (f", the other GPUs {norm_links})" if len(gpus) > 1 else ")"),
                      "Reset or reseat; check the fabric manager and Xid 74/NVLink errors (nvidia-smi nvlink -e); "
                      "drain the node if it stays.", node)
        if slow:
            found.add("nvlink_slow", Severity.warn, f"{gpu.gpu}: link(s) {', '.join(map(str, slow))} at "
                      f"{min(gpu.speeds[k] or 0 for k in slow):g} GB/s, the others {top:g} GB/s",
                      "A link trained below its siblings: reset the GPU or reseat; see nvidia-smi nvlink -e.", node)
        found.links.append(Link(node=node, kind="nvlink", name=gpu.gpu,
                                state=f"{active}/{len(gpu.speeds)} active", speed=f"{top:g} GB/s" if top else "-",
                                expected=f"{norm_links} active"))
    if inactive_everywhere := [g.gpu for g in gpus if g.speeds and all(s is None for s in g.speeds.values())]:
        if len(inactive_everywhere) == len(gpus):
            found.notes.append(f"{node}: every NVLink listed is inactive (some SKUs have inactive links by design).")


def _nvlink_errors(text: str, node: str, found: Evidence) -> None:
    for gpu in read_nvlink_errors(text):
        bad = {(link, name): n for link, counters in gpu.errors.items() for name, n in counters.items() if n > 0}
        if bad:
            worst_link = max(bad.items(), key=lambda kv: kv[1])
            found.add("nvlink_errors", Severity.warn, f"{gpu.gpu}: {len(bad)} non-zero NVLink error counter(s), "
                      f"largest link {worst_link[0][0]} {worst_link[0][1]} = {worst_link[1]}",
                      "Watch whether they grow under load; replays that keep growing mean a bad link: reseat or "
                      "replace, drain the node.", node)


# The NICs a capture names (ibstat's `CA 'mlx5_0'`, ibv_devinfo's `hca_id: mlx5_0`), whether or not their ports
# are in the excerpt.
_NAMED_DEVICE = re.compile(r"^\s*(?:CA '([^']+)'|hca_id:\s*(\S+))", re.MULTILINE)


def _ib(ports: list[IbPort], node: str, kind: CaptureKind, found: Evidence,
        named: list[tuple[str, str]] | None = None) -> None:
    if not ports:
        found.notes.append(f"{node}: the {kind} capture lists no port (no IB device on that node).")
        return
    # Ports by NIC model and link layer: the compute rails are the group with the fastest active port (a node's
    # front-end or storage NICs are another model or layer, and their Down ports are no fault). A Down port's rate
    # is meaningless, so it is never compared.
    groups: dict[tuple[str | None, str | None], list[IbPort]] = defaultdict(list)
    for port in ports:
        groups[(port.ca_type, port.link_layer)].append(port)
    top = max((p.rate_gbps or 0 for p in ports if p.up), default=0)
    rails = {key for key, members in groups.items()
             if key[1] == "InfiniBand" or any(p.up and (p.rate_gbps or 0) >= top for p in members)}
    shown = {p.device for p in ports}
    every_nic_shown = all((ca or hca) in shown for ca, hca in named or [])
    if not any(p.up for p in ports):
        # Nothing is up: the InfiniBand ports are rails; when the capture shows every NIC it names with its ports,
        # so is any other (a RoCE NIC whose every port is Down / Disabled leaves the node no RDMA port at all:
        # issue 32's round 10); a NIC whose ports the excerpt cut may be the rail that is up.
        rails = set(groups) if every_nic_shown else {key for key in groups if key[1] in ("InfiniBand", None)}
    # The second port of a card whose other port is up is an unused port (dual-port HCAs), not a lost rail.
    up_devices = {p.device for p in ports if p.up}
    for port in ports:
        name = f"{port.device}:{port.port}" + (f" ({port.netdev})" if port.netdev else "")
        rate = f"{port.rate_gbps:g} Gb/s" if port.rate_gbps is not None and port.up else "-"
        found.links.append(Link(node=node, kind="ib_port", name=name, state=f"{port.state or '?'}"
                                + (f"/{port.physical}" if port.physical else ""), speed=rate,
                                expected="Active/LinkUp" if (port.ca_type, port.link_layer) in rails else "-"))
        listed = {p.port for p in ports if p.device == port.device}
        if not port.up and port.port > 1 and listed == {port.port}:
            found.notes.append(f"{node}: {name} is {port.state or '?'}, and the capture shows no other port of "
                               f"{port.device} (a filtered listing?): the second port of a dual-port card is often "
                               "unused.")
        elif port.state is None:
            # The capture lists the port but not its state (cut, or a layout the reader does not know): unread.
            found.notes.append(f"{node}: {name}: no state read for this port, so it is not judged.")
        elif not port.up and (port.ca_type, port.link_layer) in rails and port.device not in up_devices:
            found.add("ib_port_down", Severity.crit, f"{name} is {port.state or '?'}"
                      + (f" / {port.physical}" if port.physical else "")
                      + f" ({sum(p.up for p in ports)} of {len(ports)} ports up)",
                      "Check the cable and the switch port (ibstat, ibportstate), the subnet manager (port_lid "
                      "65535 = none assigned); drain the node until the rail is back.", node)
    for port in ports:
        # FDR10 is a rate only an FDR-capable port trains at: the partner (switch port, cable, licence) held it to
        # 40 Gb/s of the 56 the HCA does.
        if port.up and (port.rate_name or "").upper() == "FDR10":
            found.add("ib_port_slow", Severity.warn, f"{port.device}:{port.port} runs at {port.rate_gbps:g} Gb/s "
                      "(FDR10): an FDR-capable port trained below its 56 Gb/s",
                      "The switch port, cable or switch licence limits the link to FDR10: check ibportstate / the "
                      "switch's port speed and the cable; FDR needs FDR-rated cables end to end.", node)
    for key in rails:
        same = [p for p in groups[key] if p.up and p.rate_gbps]
        fastest = max((p.rate_gbps or 0 for p in same), default=0)
        for port in same:
            if (port.rate_gbps or 0) < fastest:
                found.add("ib_port_slow", Severity.warn, f"{port.device}:{port.port} runs at {port.rate_gbps:g} Gb/s, "
                          f"its siblings at {fastest:g} Gb/s",
                          "A port trained at a lower rate: check the cable/transceiver and the switch port; NCCL "
                          "spreads traffic evenly, so the slow rail paces the others.", node)


def _eth(links: list[EthLink], node: str, found: Evidence) -> None:
    found.links.extend(Link(node=node, kind="eth", name=link.iface,
                            state={True: "link up", False: "no link", None: "?"}[link.link_detected],
                            speed=f"{link.speed_mbps} Mb/s" if link.speed_mbps else (link.speed_said or "-"),
                            expected="-") for link in links)
    for link in links:
        if link.link_detected and link.speed_mbps is None and link.speed_said:
            found.add("eth_speed_low", Severity.warn, f"{link.iface}: link up but speed {link.speed_said}",
                      "The driver reports no speed: check the NIC's driver and firmware (virtual NICs report none).",
                      node)
        elif link.link_detected is False:
            found.add("eth_speed_low", Severity.warn, f"{link.iface}: no link detected",
                      "Check the cable and the switch port, or that this is not the interface NCCL uses.", node)


def _eth_across(found: Evidence) -> None:
    """Ethernet links slower than the fastest one of the same kind across the captures."""
    eth = [link for link in found.links if link.kind == "eth" and link.speed.endswith("Mb/s")]
    speeds = [int(link.speed.split()[0]) for link in eth]
    if len(speeds) < 2:
        return
    top = max(speeds)
    for link, speed in zip(eth, speeds, strict=True):
        if speed < top and speed >= top / 100:  # a 1 Gb/s management port beside 100G data ports is another kind
            found.add("eth_speed_low", Severity.warn, f"{link.name} on {link.node} runs at {speed} Mb/s, the fastest "
                      f"link at {top} Mb/s", "Check the cable, transceiver and switch port (ethtool shows the "
                      "negotiated speed); a slow rail paces every collective.", link.node)
