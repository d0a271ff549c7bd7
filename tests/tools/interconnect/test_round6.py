"""check_interconnect on what round 6's development outputs (tests/data/interconnect/round6/dev; each file's source
URL is its line in dev/cases.jsonl) showed it missing: a multi-node busbw far below the least its GPUs' platform
carries, ibv_devinfo cut above its hca_id, lstopo's I/O tree without L# indices, an indented ibstat (round 4's dev),
and the label words the round 5 and 6 collectors used. The held-out part is never read here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from benchmarks.accuracy_interconnect import label_kinds
from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.interconnect import CheckInterconnectInput, CheckInterconnectResult, check_interconnect
from tools.interconnect.captures import kind_of, read_ib_ports
from tools.interconnect.pcie import read_lstopo_tree

DEV = DATA / "interconnect" / "round6" / "dev"
ROUND4 = DATA / "interconnect" / "round4" / "dev"


def check(root: Path, **arguments: Any) -> CheckInterconnectResult:
    return anyio.run(check_interconnect, CheckInterconnectInput(**arguments),
                     ToolContext(roots=(root.resolve(),), timeout_s=60))


def test_a_busbw_below_the_platforms_least_fabric_is_low() -> None:
    # https://github.com/eth-cscs/cscs-docs/blob/88df2a22f3b76d6c1fee286594b82e838b229231/docs/software/communication/
    # nccl.md: 2 nodes x 4 GH200 with the CXI hook disabled, peaking at 6.07 GB/s; no NIC is named anywhere.
    result = check(DEV, nccl_tests=["nccl_tests__eth-cscs-cscs-docs-nccl-md-cxi-off.txt"])
    assert [(f.kind, f.severity.value) for f in result.findings] == [("busbw_low", "warn")]
    [row] = result.bandwidth
    assert row.peak_busbw_gbs == 6.07 and row.expected_busbw_gbs == 12.0 and row.ratio == 0.506
    assert row.expected_from is not None and row.expected_from.startswith("no NIC named: the least a multi-node "
                                                                          "NVIDIA GH200 120GB platform carries")


def test_a_busbw_above_the_floor_is_not_cleared_by_it() -> None:
    # https://github.com/eth-cscs/cscs-docs/blob/7caf8c124490506e694c7b3136dddc84f0101a4f/docs/software/
    # container-engine/sarus-suite/index.md: 2 x 1 GH200 at 22.88 GB/s; the floor (12 GB/s) says nothing of it.
    result = check(DEV, nccl_tests=["nccl_tests__eth-cscs-cscs-docs-sarus-suite.txt"])
    assert result.findings == [] and result.severity.value == "unknown"
    assert result.bandwidth[0].expected_busbw_gbs is None and result.decides is not None
    # One node: the NVSwitch board's figure judges it, as before (boeschf/nccl-benchmark-on-alps-2025, 339 GB/s).
    single = check(DEV, nccl_tests=["nccl_tests__boeschf-nccl-benchmark-on-alps-2025-N1.txt"])
    assert single.findings == []


def test_ibv_devinfo_cut_above_its_hca_id() -> None:
    # https://github.com/E3SM-Project/scorpio/blob/ed2cbf39933e8b33fb100773f844050efeb35637/ibv_devinfo.txt, the
    # tail of `ibv_devinfo -v`: port 1 PORT_ACTIVE, 4X at 50.0 Gbps a lane (HDR, 200 Gb/s).
    text = (DEV / "ibstat__E3SM-Project-scorpio-ibv_devinfo-chrysalis.txt").read_text()
    assert kind_of(text) == "ibv_devinfo"
    [port] = read_ib_ports(text, "ibv_devinfo")
    assert (port.device, port.port, port.state, port.physical, port.rate_gbps, port.link_layer) == (
        "(hca_id not shown)", 1, "Active", "LinkUp", 200.0, "InfiniBand")
    result = check(DEV, captures=["ibstat__E3SM-Project-scorpio-ibv_devinfo-chrysalis.txt"])
    assert result.severity.value == "ok" and result.coverage[0].status.value == "read"
    assert [(link.state, link.speed) for link in result.links] == [("Active/LinkUp", "200 Gb/s")]


def test_lstopo_io_tree_without_indices() -> None:
    # https://github.com/ntua-el20062/grace-hopper-benchmark/blob/505e82c1cdfd1f09818bb9c69472d5e3af7a516c/lstopo.txt:
    # the I/O part of a GH200 node's tree (no L#): the GPU 0009:01:00.0 and mlx5_0/1 under other host bridges.
    text = (DEV / "lstopo__ntua-el20062-grace-hopper-benchmark-lstopo-txt.txt").read_text()
    assert kind_of(text) == "lstopo"
    tree = read_lstopo_tree(text)
    assert tree is not None and tree.gpus == ["0009:01:00.0"]  # the (VGA) behind four bridges is the BMC's
    assert tree.nics == {"mlx5_0": "0002:01:00.0", "mlx5_1": "0002:01:00.1"}
    assert set(tree.paths.values()) == {"NODE"}
    result = check(DEV, captures=["lstopo__ntua-el20062-grace-hopper-benchmark-lstopo-txt.txt"])
    assert result.severity.value == "ok" and result.coverage[0].status.value == "read"
    assert [link.state for link in result.links if link.kind == "gpu_nic"] == ["NODE", "NODE"]


def test_lstopo_paths_by_the_tree(tmp_path: Path) -> None:
    # https://github.com/ULHPC/ulhpc-docs/blob/f82dbfc6f2abfaa11d031588684e8c5163f68ddf/docs/jobs/hwloc.md: four
    # V100 (3D) under one host bridge, the InfiniBand HCA under another of the same package: NODE, no finding.
    tree = read_lstopo_tree((DEV / "lstopo__ULHPC-ulhpc-docs-hwloc-gpu-node.txt").read_text())
    assert tree is not None and tree.gpus == ["1a:00.0", "1c:00.0", "1d:00.0", "1e:00.0"]
    assert set(tree.paths.values()) == {"NODE"}
    assert check(DEV, captures=["lstopo__ULHPC-ulhpc-docs-hwloc-gpu-node.txt"]).findings == []
    # Built in hwloc's text layout: a GPU that shares a PCIe switch with one NIC (PIX) and sits on the other package
    # from the second (SYS); a second GPU whose only NIC is across the sockets is a rail out of line.
    built = ("Machine (512GB total)\n"
             "  Package L#0\n"
             "    HostBridge\n"
             "      PCIBridge\n"
             "        PCI 1a:00.0 (3D)\n"
             "        PCI 1b:00.0 (InfiniBand)\n"
             "          OpenFabrics \"mlx5_0\"\n"
             "  Package L#1\n"
             "    HostBridge\n"
             "      PCIBridge\n"
             "        PCI 9a:00.0 (3D)\n")
    tree = read_lstopo_tree(built)
    assert tree is not None and tree.paths == {("1a:00.0", "mlx5_0"): "PIX", ("9a:00.0", "mlx5_0"): "SYS"}
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "lstopo.txt").write_text(built)
    result = check(tmp_path, captures=["node1/lstopo.txt"])
    assert [(f.kind, f.node) for f in result.findings] == [("nic_affinity", "node1")]
    assert result.findings[0].evidence.startswith("GPU 9a:00.0's nearest NIC is mlx5_0 at SYS")


def test_an_indented_ibstat_is_ibstat() -> None:
    # kaust-rccl/ksl-docs (round 4 dev, its source in round4/dev/cases.jsonl): ibstat pasted in a doc's code block.
    result = check(ROUND4, captures=["ibstat__kaust-rccl-ksl-docs-1.txt"])
    assert result.severity.value == "ok" and result.coverage[0].status.value == "read"
    assert [(link.name, link.speed) for link in result.links] == [("mlx5_0:1", "100 Gb/s")]


def test_the_collectors_label_words_are_the_tools_kinds() -> None:
    # round6/PROVENANCE_x6.md: "Labels follow the brief's definitions" (the words, not the finding kinds).
    assert label_kinds({"kind": "nccl_log", "findings": ["nccl_socket_between_nodes"]}) == {"socket_fallback"}
    assert label_kinds({"kind": "ibstat", "findings": ["link_down"]}) == {"ib_port_down"}
    assert label_kinds({"kind": "nvlink_status", "findings": ["link_down"]}) == {"nvlink_inactive"}
    assert label_kinds({"kind": "lspci", "findings": ["pcie_degraded"]}) == {"pcie_degraded"}
