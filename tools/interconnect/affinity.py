"""GPU-NIC and GPU-CPU affinity, from `nvidia-smi topo -m` and what NCCL's log says each GPU uses.

The matrix's GPU-NIC cells are PCIe distances (nvidia-smi's legend): PIX (one bridge, a shared switch) < PXB
(several bridges, no host bridge) < PHB (through the CPU's host bridge) < NODE (between host bridges of one NUMA
node) < SYS (across the CPU sockets' interconnect). GPU Direct RDMA needs PIX/PXB by NCCL's default
(NCCL_NET_GDR_LEVEL); a NIC across the sockets also carries every byte over QPI/UPI.

- Matrix alone: a GPU whose nearest NIC is SYS while other GPUs of the board have one at PIX/PXB is a rail out of
  line (nic_affinity); one whose nearest NIC is SYS while the others reach one on their own socket (PHB/NODE) sits on
  a socket without a NIC: the board's layout, said in a note; fewer NICs than GPUs at NODE is the board's design,
  not a fault; a box where every GPU-NIC path is SYS is a fact of the topology, said once, never as a per-GPU
  fault.
- With NCCL's log: the NIC each GPU's network channels use (`via NET/IB/<n>` under the `[dev]` of the line, `GPU
  Direct RDMA ... for GPU x / HCA n`), joined to the matrix through NCCL's device list (`NET/IB : Using [n]mlx5_k`)
  and the matrix's NIC legend: a GPU that uses a NIC at SYS, or at NODE/PHB while one at PIX/PXB is its own, is
  named with that NIC, its path and the nearer one. Channels sent through another GPU (PXN, `NET/IB/n(rank)`) are
  NCCL's own routing over NVLink and are not judged.
- CPU affinity: the CPUs a rank may run on (NCCL's `Setting affinity for GPU n to ...`, or a live process's
  allowed CPUs) against the CPU Affinity column of its GPU: none of them local is a rank pinned off its GPU's node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tools.core.models import Severity
from tools.core.ranks import compact_ranges
from tools.interconnect.captures import TopoMatrix, parse_cpu_list
from tools.interconnect.evidence import Evidence
from tools.interconnect.live import allowed_cpus
from tools.interconnect.nccl_log import NcclProcess

__all__ = ["PATH_ORDER", "judge_cpu_affinity", "judge_live_cpu_affinity", "judge_log_affinity",
           "judge_matrix_affinity", "judge_used_nics", "nearest_nics"]

PATH_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nearest first
_NEAR = ("PIX", "PXB")  # GPU Direct RDMA's default reach
_FIX = ("Pair each GPU with the NIC behind its own PCIe switch: NCCL_IB_HCA naming the rail NICs (and nothing "
        "else), a NCCL_TOPO_FILE that matches the board (or none), rails cabled and numbered GPU i -> NIC i; "
        "check with NCCL_DEBUG=INFO that each GPU's channels go via its PIX/PXB NIC.")


def _rank(path: str) -> int:
    return PATH_ORDER.index(path) if path in PATH_ORDER else len(PATH_ORDER)


def _gpu_key(name: str) -> int:
    digits = "".join(c for c in name if c.isdigit())
    return int(digits) if digits else 0


def nearest_nics(matrix: TopoMatrix) -> dict[str, tuple[str, list[str]]]:
    """Per GPU its nearest path to any NIC and the NIC columns at that path."""
    best: dict[str, tuple[str, list[str]]] = {}
    for (gpu, nic), cell in matrix.nic_links.items():
        if cell not in PATH_ORDER:
            continue
        if gpu not in best or _rank(cell) < _rank(best[gpu][0]):
            best[gpu] = (cell, [nic])
        elif cell == best[gpu][0]:
            best[gpu][1].append(nic)
    return best


def _nics(matrix: TopoMatrix, columns: list[str]) -> str:
    return ", ".join(f"{matrix.nic_device(c)} ({c})" if matrix.nic_device(c) != c else c for c in columns[:4])


def judge_matrix_affinity(matrix: TopoMatrix, node: str, found: Evidence, source: str = "") -> None:
    """The matrix's own verdict on GPU-NIC affinity (no log needed); `source`: where the paths come from when not
    from topo -m (NCCL's own topology, which shows only the GPUs the processes saw)."""
    nearest = nearest_nics(matrix)
    if not nearest:
        return
    if all(path == "SYS" for path, _ in nearest.values()):
        everyone = sorted({n for _, nics in nearest.values() for n in nics}, key=_gpu_key)
        found.add("nic_affinity", Severity.warn,
                  f"every GPU-NIC path {'on this board' if not source else 'of the GPUs NCCL saw'} is SYS "
                  f"({len(nearest)} GPU(s), {len(everyone)} NIC(s): "
                  f"{_nics(matrix, everyone)}{' ...' if len(everyone) > 4 else ''}): no NIC shares a "
                  "CPU socket with any GPU, so inter-node traffic crosses the sockets and GPU Direct RDMA is off by "
                  "default. A fact of this topology, not a misconfigured GPU" + source,
                  "Nothing to pair on this board: put the NICs on the GPUs' PCIe switches / sockets (or accept "
                  "host-staged traffic; NCCL_NET_GDR_LEVEL=SYS forces GPU Direct RDMA across the sockets, at a "
                  "cost).", node)
        return
    close = sorted((g for g, (path, _) in nearest.items() if path in _NEAR), key=_gpu_key)
    far = sorted((g for g, (path, _) in nearest.items() if path == "SYS"), key=_gpu_key)
    if close and far:
        for gpu in far:
            found.add("nic_affinity", Severity.warn,
                      f"{gpu}'s nearest NIC is {_nics(matrix, nearest[gpu][1])} at SYS (across the CPU sockets), "
                      f"while {', '.join(close[:4])}{' ...' if len(close) > 4 else ''} have one at "
                      f"{'/'.join(sorted({nearest[g][0] for g in close}))}: a rail out of line, its network traffic "
                      "crosses QPI/UPI without GPU Direct RDMA" + source, _FIX, node)
    middle = sorted((g for g, (path, _) in nearest.items() if path in ("PHB", "NODE")), key=_gpu_key)
    if far and middle and not close:
        # A socket without a NIC: its GPUs reach one only across the sockets while the others have one on their own
        # socket. The board's layout, not a misplaced rail (no nearer NIC to move to): said, not judged.
        found.notes.append(f"{node}: {', '.join(far)} reach a NIC only across the CPU sockets (SYS), while "
                           f"{', '.join(middle[:4])}{' ...' if len(middle) > 4 else ''} have one on their own socket "
                           f"({'/'.join(sorted({nearest[g][0] for g in middle}))}): no NIC on that socket, so their "
                           "inter-node traffic crosses QPI/UPI without GPU Direct RDMA; put the ranks that carry it "
                           "on the NIC's socket, or rely on NCCL's PXN over NVLink where the GPUs have it.")
    if close and middle:
        # Fewer NICs than GPUs is the board's design: a GPU with no NIC near it has none to be moved to. Whether a
        # GPU uses a far NIC while a near one exists is judged with NCCL's log.
        found.notes.append(f"{node}: {', '.join(middle)} have no NIC closer than "
                           f"{'/'.join(sorted({nearest[g][0] for g in middle}))} ({len(close)} GPU(s) have one at "
                           "PIX/PXB): the board has fewer NICs than GPUs; pass NCCL's log to see which NIC each uses.")


def judge_used_nics(matrix: TopoMatrix, node: str, used: Mapping[str, Mapping[str, str]], found: Evidence,
                    basis: str = "") -> None:
    """`used`: per GPU of the matrix (GPU3) the NIC devices (mlx5_2) its network channels use, each with the line
    that says so; `basis`: how the log's GPUs were matched to the matrix's, said in the evidence when assumed."""
    columns = {matrix.nic_device(nic): nic for (_, nic) in matrix.nic_links}
    nearest = nearest_nics(matrix)
    unmatched: set[str] = set()
    for gpu in sorted(used, key=_gpu_key):
        if gpu not in nearest:
            continue
        best_path, best_nics = nearest[gpu]
        for device, said in sorted(used[gpu].items()):
            column = columns.get(device)
            if column is None:
                unmatched.add(device)
                continue
            path = matrix.nic_links.get((gpu, column))
            if path is None or _rank(path) <= _rank(best_path):
                continue
            if path == "SYS" or (path in ("PHB", "NODE") and best_path in _NEAR):
                found.add("nic_affinity", Severity.warn,
                          f"{gpu} sends over {device} ({column}) at {path} while {_nics(matrix, best_nics)} "
                          f"is {best_path} to it (NCCL: {said[:160]}){basis}",
                          _FIX, node)
                break  # one finding per GPU: its worst-placed NIC is enough to act on
    if unmatched:
        found.notes.append(f"{node}: NCCL uses {', '.join(sorted(unmatched)[:4])}, which the topo -m matrix does not "
                           "list (no NIC legend, or another node's matrix): their placement was not judged.")


def judge_cpu_affinity(matrix: TopoMatrix, node: str, allowed: Sequence[tuple[str, str, str]],
                       found: Evidence) -> None:
    """`allowed`: (GPU of the matrix, who, CPU list or mask) the CPUs a rank on that GPU may run on. None of them
    among the GPU's local CPUs (topo's CPU Affinity) is a rank pinned off its GPU's NUMA node; a partial overlap is
    a narrower pinning and fine."""
    for gpu, who, cpus_text in sorted(allowed, key=lambda row: _gpu_key(row[0])):
        local_text = matrix.cpu_affinity.get(gpu)
        local = parse_cpu_list(local_text) if local_text else None
        cpus = parse_cpu_list(cpus_text)
        if not local or not cpus or cpus & local:
            continue
        numa = matrix.numa_affinity.get(gpu)
        others = sorted({n for g, n in matrix.numa_affinity.items()
                         if (c := parse_cpu_list(matrix.cpu_affinity.get(g, ""))) and c & cpus and n != numa})
        found.add("cpu_affinity", Severity.warn,
                  f"{who} runs on CPUs {cpus_text} while {gpu}'s local CPUs are {local_text}"
                  + (f" (NUMA node {numa})" if numa else "")
                  + (f": pinned to NUMA node {', '.join(others)}" if others else ": none of them is local")
                  + "; every host copy and kernel launch crosses the sockets",
                  "Bind each rank to its GPU's NUMA node (srun --cpu-bind, numactl --cpunodebind=<the GPU's NUMA "
                  "Affinity>, or a per-rank taskset), or set no CPU mask and let NCCL pick the GPU's CPUs.", node)


def _nccl_matrix(group: Sequence[NcclProcess], devices: Mapping[int, str]) -> TopoMatrix | None:
    """NCCL's own GPU-to-NET paths (NCCL_DEBUG_SUBSYS=GRAPH) as a matrix: GPUs by NVML index where an init line
    gives their bus id, NICs by the device NCCL listed at that index. PXN (through a peer GPU's NIC over NVLink) is
    NCCL's near route and counts as PXB; C2C/P2C (Grace) as PIX."""
    nvml_of = {bus: nvml for process in group for bus, nvml in process.bus_to_nvml.items()}
    links: dict[tuple[str, str], str] = {}
    gpus: list[str] = []
    for process in group:
        for bus, nets in process.gpu_net_paths.items():
            gpu = f"GPU{nvml_of[bus]}" if bus in nvml_of else f"GPU@{bus:x}"
            if gpu not in gpus:
                gpus.append(gpu)
            for index, path in nets.items():
                column = devices.get(index, f"NET/{index}")
                links[(gpu, column)] = {"PXN": "PXB", "C2C": "PIX", "P2C": "PIX"}.get(path, path)
        for (cuda_dev, said_nvml), distances in process.nic_distance.items():
            nvml = said_nvml if said_nvml is not None else process.cuda_to_nvml.get(cuda_dev)
            gpu = f"GPU{nvml}" if nvml is not None else f"CUDA dev {cuda_dev}"
            if gpu not in gpus:
                gpus.append(gpu)
            for index, path in distances.items():
                links[(gpu, devices.get(index, f"NET/{index}"))] = path
    return TopoMatrix(gpus, {}, links) if links else None


def judge_log_affinity(node: str, group: Sequence[NcclProcess], found: Evidence) -> None:
    """One node's NCCL processes against its topo -m matrix: the NIC each GPU's channels use, and the CPUs NCCL
    bound each GPU's thread to. The log's GPUs are matched to the matrix's by NVML index only (the nvmlDev of
    ncclCommInitRank or of 2.19+ channel lines): a CUDA index is renumbered by CUDA_VISIBLE_DEVICES and would
    name the wrong GPU."""
    matrix: TopoMatrix | None = found.topologies.get(node)
    basis = ""
    from_nccl = False
    devices = {index: name for process in group for index, name in process.net_devices.items()}
    if matrix is None and len(found.topologies) == 1:
        # One matrix for a job's nodes: the nodes of a job share a board; the evidence says it was assumed.
        given, matrix = next(iter(found.topologies.items()))
        basis = f"; the topo -m given ({given}) taken as this node's"
    if matrix is None:
        # NCCL's paths to socket interfaces (TCP, FastSocket) say nothing of RDMA rails: only IB/RoCE NETs are judged.
        sockets = any((p.network or "").startswith(("Socket", "FastSocket")) for p in group)
        matrix = None if sockets else _nccl_matrix(group, devices)
        if matrix is None:
            return
        basis, from_nccl = "; paths as NCCL's own topology computed them", True
        judge_matrix_affinity(matrix, node, found, basis)
    used: dict[str, dict[str, str]] = {}
    unmapped = 0
    for process in group:
        for (gpu, is_nvml), nics in process.nic_use.items():
            index = gpu if is_nvml else process.cuda_to_nvml.get(gpu)
            if index is None:
                unmapped += 1
                continue
            for nic, line in nics.items():
                name = devices.get(nic) or (f"NET/{nic}" if from_nccl else None)
                if name is not None:
                    used.setdefault(f"GPU{index}", {}).setdefault(name, line)
    hca = next((p.environment["NCCL_IB_HCA"] for p in group if "NCCL_IB_HCA" in p.environment), None)
    if used:
        judge_used_nics(matrix, node, used, found, basis + (f"; NCCL_IB_HCA={hca}" if hca else ""))
    elif unmapped:
        found.notes.append(f"{node}: NCCL's channels name NICs, but no line maps its CUDA devices to NVML indexes "
                           "(ncclCommInitRank's nvmlDev): which GPU of the topo -m matrix uses which NIC is not "
                           "judged.")
    allowed: list[tuple[str, str, str]] = []
    for process in group:
        for cuda_dev, cpus in process.cpu_affinity.items():
            nvml = process.cuda_to_nvml.get(cuda_dev)
            if nvml is not None:
                allowed.append((f"GPU{nvml}", f"rank {process.rank if process.rank is not None else '?'} (NCCL: "
                                f"Setting affinity for GPU {cuda_dev})", cpus))
    if allowed:
        judge_cpu_affinity(matrix, node, allowed, found)


def judge_live_cpu_affinity(matrix: TopoMatrix, node: str, pids: Sequence[int], gpu_of: Mapping[int, int],
                            found: Evidence) -> None:
    """The job's processes on this node, live: each one's allowed CPUs (the kernel's affinity mask) against the
    CPU Affinity of the GPU it runs on (`gpu_of`: pid -> GPU index, from nvidia-smi)."""
    allowed: list[tuple[str, str, str]] = []
    for pid in pids:
        cpus = allowed_cpus(pid)
        if cpus is None:
            found.notes.append(f"{node}: pid {pid}: its CPU affinity could not be read (gone, or not ours).")
        elif pid not in gpu_of:
            found.notes.append(f"{node}: pid {pid} holds no GPU (nvidia-smi --query-compute-apps): its CPU "
                               "affinity was not judged.")
        else:
            allowed.append((f"GPU{gpu_of[pid]}", f"pid {pid}", compact_ranges(sorted(cpus))))
    judge_cpu_affinity(matrix, node, allowed, found)
