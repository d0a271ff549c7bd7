"""What the interconnect judges share: a finding, a link row, the evidence gathered as the inputs are read, and
the reading of a saved capture (bounded, text only)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from tools.core.files import InputFile, read_whole_text
from tools.core.limits import NET_MAX_CAPTURE_BYTES
from tools.core.models import Coverage, Severity
from tools.core.pasted import without_line_markers

__all__ = ["BRANCH", "Evidence", "FindingKind", "Link", "NCCL_DOC", "NetFinding", "node_of", "read_capture"]


BRANCH = "nccl_hang_or_slow"
FindingKind = Literal["socket_fallback", "no_gdr", "wrong_interface", "p2p_disabled", "shm_instead_of_p2p",
                      "nccl_version_mismatch", "single_process_test", "busbw_low", "wrong_results", "topo_degraded",
                      "nvlink_inactive", "nvlink_slow", "nvlink_errors", "ib_port_down", "ib_port_slow",
                      "eth_speed_low", "nccl_warn", "pcie_degraded", "nic_affinity", "cpu_affinity"]
NCCL_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"


class NetFinding(BaseModel):
    kind: FindingKind
    severity: Severity
    node: str | None = Field(default=None, description="The node (host, or the capture's folder or file).")
    rank: str | None = Field(default=None, description="The rank(s) concerned, when the evidence names them.")
    evidence: str
    fix: str
    sop_branch: str = BRANCH


class Link(BaseModel):
    node: str
    kind: str = Field(description="gpu_pair, gpu_nic, nvlink, ib_port, eth.")
    name: str
    state: str
    speed: str
    expected: str


def read_capture(file: InputFile) -> str:
    return without_line_markers(read_whole_text(
        file, NET_MAX_CAPTURE_BYTES, "Pass the command's own output (a capture or an nccl-tests run), or the job log "
        "as nccl_logs (read in one streamed pass)."))


def node_of(name: str) -> str:
    """A capture's node: the folder it sits in, else its file name without the command's words."""
    path = Path(name)
    if len(path.parts) > 1:
        return path.parts[-2]
    stem = re.sub(r"\.(?:txt|log|out)$", "", path.name)
    stem = re.sub(r"(?i)(?:^|[-_.])(?:nvidia[-_]smi|topo(?:[-_](?:m|p2p))?|nvlink(?:[-_][se])?|ibstat(?:us)?|"
                  r"ibv[-_]devinfo|ibdev2netdev|ethtool(?:[-_]\w+)?)(?=$|[-_.])", "", stem).strip("-_.")
    return stem or path.name


class Evidence:
    def __init__(self) -> None:
        self.findings: list[NetFinding] = []
        self.links: list[Link] = []
        self.notes: list[str] = []
        self.coverage: list[Coverage] = []  # per input file or live command: what was made of it
        # What NCCL's own lines say of each node's NICs: the speed it read per NIC (Mb/s) and how many it uses.
        self.nccl_nic_speeds: dict[str, dict[str, int]] = {}
        self.nccl_nics: dict[str, int] = {}
        self.topologies: dict[str, Any] = {}  # node -> its topo -m matrix (captures.TopoMatrix), for NIC affinity

    def nic_rates(self) -> dict[str, list[float]]:
        """Per node the rates (Gb/s) of its active rail ports, from the link rows (saved, live or collected)."""
        rates: dict[str, list[float]] = defaultdict(list)
        for link in self.links:
            rate = re.match(r"([\d.]+) Gb/s$", link.speed)
            if link.kind == "ib_port" and link.expected != "-" and rate:
                rates[link.node].append(float(rate.group(1)))
        return rates

    def nvlink_nodes(self) -> set[str]:
        """The nodes whose GPUs a capture shows NVLink-connected (NV# pairs, or active NVLinks)."""
        return {link.node for link in self.links if (link.kind == "gpu_pair" and link.state.startswith("NV"))
                or (link.kind == "nvlink" and link.speed != "-")}

    def add(self, kind: FindingKind, severity: Severity, evidence: str, fix: str, node: str | None = None,
            rank: str | None = None) -> None:
        self.findings.append(NetFinding(kind=kind, severity=severity, node=node, rank=None if rank == "?" else rank,
                                        evidence=evidence, fix=fix))
