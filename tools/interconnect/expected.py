"""What bus bandwidth a fabric should give nccl-tests at large messages, with the source of each figure.

The bottleneck link decides (nccl-tests doc/PERFORMANCE.md: "The bus bandwidth should reflect the speed of the
hardware bottleneck: NVLink, PCI, QPI, or network"):
- within one NVSwitch node, the GPU's NVLink generation (NVIDIA maintainers' figures for 8-GPU boards);
- across nodes, the NICs: about line rate x NIC_EFFICIENCY per NIC, times the NICs of a node, never above what
  the node's NVLink gives.
Lower bounds on purpose: NVLS and two-node tree runs report more than the ring formula (nccl-tests#22, #212), so a
figure under these is low whatever the algorithm. PCIe-only boxes and alltoall depend on the board and the node
count: no figure, the caller's expected_busbw_gbs instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.core.thresholds import NIC_EFFICIENCY, PCIE_USABLE_SHARE, PLATFORM_MIN_NIC_GBPS

__all__ = ["Expectation", "expected_busbw", "nvswitch_busbw", "pcie_busbw", "platform_floor"]


@dataclass(frozen=True)
class Expectation:
    busbw_gbs: float
    basis: str  # what the figure stands on, in words


# (GPU name pattern, ring busbw of an 8-GPU NVSwitch board in GB/s, source). SXM/HGX parts only: PCIe cards of the
# same name have no NVSwitch.
_NVSWITCH = (
    (re.compile(r"\bB200\b|\bB300\b|GB200|GB300", re.I), 720.0,
     "NVLink5: NCCL's own model, 18 links x 40.1 GB/s (nccl#1807)"),
    (re.compile(r"\bH800\b", re.I), 215.0, "H800 (NVLink cut to 400 GB/s): ~215 GB/s all_reduce (nccl#1374)"),
    (re.compile(r"\bH100\b(?!.*PCIe)(?!.*NVL)|\bH200\b(?!.*NVL)|\bH20\b", re.I), 370.0,
     "NVLink4 8-GPU board: ~370 GB/s ring (18 x 20.6 GB/s; nccl-tests#212)"),
    (re.compile(r"\bA100\b(?=.*SXM)|A100-SXM", re.I), 230.0,
     "NVLink3 8-GPU board: ~230 GB/s all_reduce (nccl-tests#149)"),
)


# Grace Hopper superchips: no NVSwitch board figure (a quad node's four GH200 are NVLink-connected, an NVL2's two),
# but the same data-centre platform class for the multi-node floor.
_SUPERCHIP = re.compile(r"\bGH200\b", re.I)


def platform_floor(gpu_names: list[str], nodes: int) -> Expectation | None:
    """For a multi-node run of data-centre GPUs whose NICs nothing names: the least any platform of theirs carries
    between nodes (one PLATFORM_MIN_NIC_GBPS NIC per node). Only a busbw below it says anything (it is low); one above
    it clears nothing."""
    if nodes <= 1 or not gpu_names or not all(nvswitch_busbw(n) or _SUPERCHIP.search(n) for n in gpu_names):
        return None
    figure = round(PLATFORM_MIN_NIC_GBPS / 8 * NIC_EFFICIENCY, 1)
    return Expectation(figure, f"no NIC named: the least a multi-node {gpu_names[0]} platform carries, one "
                       f"{PLATFORM_MIN_NIC_GBPS:g} Gb/s NIC per node x {NIC_EFFICIENCY:.0%} (its DGX/HGX/MGX designs "
                       "give each GPU 200-400 Gb/s)")


def nvswitch_busbw(gpu_name: str) -> tuple[float, str] | None:
    """The ring busbw an 8-GPU NVSwitch board of this GPU gives, and why; None for other boards."""
    for pattern, busbw, source in _NVSWITCH:
        if pattern.search(gpu_name):
            return busbw, source
    return None


def expected_busbw(gpu_names: list[str], nodes: int, gpus_per_node: int,
                   nic_rates_gbps: list[float] | None) -> Expectation | None:
    """The floor a healthy fabric gives this run at large messages, or None when nothing says it."""
    board = nvswitch_busbw(gpu_names[0]) if gpu_names else None
    if nodes <= 1:
        if board is None or gpus_per_node < 4:
            return None  # PCIe boxes, bridged pairs and 2-GPU runs: the board decides, and it is not known
        return Expectation(board[0], board[1])
    if not nic_rates_gbps:
        return None
    network = sum(nic_rates_gbps) / 8 * NIC_EFFICIENCY  # GB/s a node's NICs carry
    rates = ", ".join(f"{r:g}" for r in sorted(set(nic_rates_gbps)))
    basis = f"{len(nic_rates_gbps)} NIC(s) of {rates} Gb/s per node x {NIC_EFFICIENCY:.0%}"
    if board is not None and board[0] < network:
        return Expectation(board[0], f"{basis}, capped by the node's NVLink ({board[1]})")
    return Expectation(round(network, 1), basis)


# (GPU name pattern, the PCIe generation of the card, x16): PCIe boards only; an SXM part's name never matches.
_PCIE_CARDS = (
    (re.compile(r"V100S?-PCIE|P100-PCIE|Tesla (?:T4|P4|P40)\b|GeForce (?:RTX 20[6-8]0|GTX 1[06][5-8]0)|"
                r"TITAN (?:RTX|V|Xp)|Quadro RTX [4-8]000", re.I), 3),
    (re.compile(r"A100[\w -]*PCIe|\b(?:A10|A16|A30|A40|L4|L40S?)\b|RTX A[2-6]000|GeForce RTX (?:30|40)[5-9]0|"
                r"RTX [2-6]000 Ada", re.I), 4),
    (re.compile(r"H100[\w -]*(?:PCIe|NVL)|H200 NVL|GeForce RTX 50[6-9]0|RTX PRO 6000", re.I), 5),
)
_PCIE_X16_GBS = {3: 15.75, 4: 31.5, 5: 63.0}  # raw one-way rate of an x16 link, GB/s


def pcie_busbw(gpu_names: list[str]) -> Expectation | None:
    """The floor a ring of PCIe cards within one node gives: the usable one-way rate of their PCIe generation at x16
    (the slowest card's); None unless every GPU is a PCIe card this table knows."""
    generations = []
    for name in gpu_names:
        generation = next((gen for pattern, gen in _PCIE_CARDS if pattern.search(name)), None)
        if generation is None:
            return None
        generations.append(generation)
    if not generations:
        return None
    slowest = min(generations)
    figure = round(_PCIE_X16_GBS[slowest] * PCIE_USABLE_SHARE, 1)
    return Expectation(figure, f"PCIe Gen{slowest} x16 of {gpu_names[0]}: {_PCIE_X16_GBS[slowest]:g} GB/s one way x "
                       f"{PCIE_USABLE_SHARE:.0%} usable")
