"""check_interconnect on what round 10's development outputs (tests/data/interconnect/round10/dev; each file's source
URL is its line in dev/cases.jsonl) showed it missing: a RoCE NIC whose every port is down, OFED 1.x's ibv_devinfo
state line, and an nccl-tests run of one rank. The held-out part is never read here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.interconnect import CheckInterconnectInput, CheckInterconnectResult, check_interconnect
from tools.interconnect.captures import read_ib_ports

DEV = DATA / "interconnect" / "round10" / "dev"


def check(root: Path, **arguments: Any) -> CheckInterconnectResult:
    return anyio.run(check_interconnect, CheckInterconnectInput(**arguments),
                     ToolContext(roots=(root.resolve(),), timeout_s=60))


def test_a_roce_nic_with_every_port_down_leaves_no_rdma_port() -> None:
    # https://github.com/deepseek-ai/3FS/issues/39: both Ethernet-layer ports of the node's only RDMA NICs are
    # Down / Disabled while 3FS is brought up over RDMA; this was read as healthy before.
    result = check(DEV, captures=["ibstat__deepseek-ai-3FS-39.txt"])
    assert [(f.kind, f.severity.value) for f in result.findings] == [("ib_port_down", "crit")] * 2
    assert "mlx5_0:1 is Down / Disabled (0 of 2 ports up)" in result.findings[0].evidence


def test_a_down_port_beside_a_nic_the_excerpt_cut_is_no_verdict() -> None:
    # tests/data/interconnect/wild: the tail of an ibv_devinfo listing (deepseek-ai/DeepEP#60) shows a front-end
    # port Down and names the compute NIC whose port lines were cut: that port may be the rail that is up.
    result = check(DATA / "interconnect" / "wild", captures=["ibv_devinfo__deepseek-ai-DeepEP-60.txt"])
    assert not [f for f in result.findings if f.kind == "ib_port_down"]


def test_ofed_1_ibv_devinfo_state_is_read() -> None:
    # https://pastebin.com/VXMAZdeZ: `state: active (4)`, without the PORT_ prefix of later releases.
    [port] = read_ib_ports((DEV / "ibstat__pastebin-VXMAZdeZ-1.txt").read_text(), "ibv_devinfo")
    assert (port.device, port.port, port.state, port.up) == ("mlx4_0", 1, "Active", True)
    assert check(DEV, captures=["ibstat__pastebin-VXMAZdeZ-1.txt"]).findings == []


def test_a_one_rank_test_is_unknown_not_a_bandwidth() -> None:
    # https://github.com/sparticlesteve/podman-nccl-testing/blob/d7966c5e78597774a6d63a9cd2c9289964148cca/logs/
    # podman-nccl-tests-30606107.out: `rank 0 nranks 1`, busbw 0.00 at every size while algbw climbs to 399 GB/s.
    result = check(DEV, nccl_tests=["nccl_tests__sparticlesteve-podman-nccl-testing-1.txt"])
    assert [(f.kind, f.severity.value) for f in result.findings] == [("single_process_test", "unknown")]
    assert result.severity.value == "unknown" and "one-rank test" in result.findings[0].evidence


def test_the_network_is_read_from_the_lines_when_no_using_network_line_was_kept() -> None:
    # https://github.com/catid/dgx_station_benchmarks: `NET/IB : Using [0]mlx5_0:1/RoCE` and no `Using network`;
    # sparticlesteve/pytorch-nccl-test: the old NCCL's channels `via NET/Socket/0` on each node.
    roce = check(DEV, nccl_logs=["nccl_log__catid-dgx_station_benchmarks-1.txt"])
    assert [t.network for t in roce.transports] == ["IB"]
    sockets = check(DEV, nccl_logs=["nccl_log__sparticlesteve-pytorch-nccl-test-1.txt"])
    assert [t.network for t in sockets.transports] == ["Socket", "Socket"]
    # One V100 node's channels all P2P/IPC, no NET line at all: nothing says which network NCCL would have used.
    single = check(DEV, nccl_logs=["nccl_log__bigscience-workshop-bigscience-n1-32gb.txt"])
    assert [t.network for t in single.transports] == [None]


def test_a_vpn_interface_listed_on_a_one_node_job_is_no_wrong_interface() -> None:
    # https://github.com/eunomia-bpf/nccl-eBPF: NCCL lists tailscale0 among its socket interfaces but says
    # `nRanks 1 nNodes 1` and bootstraps on enp129s0: nothing crosses the network.
    result = check(DEV, nccl_logs=["nccl_log__eunomia-bpf-nccl-eBPF-1.txt"])
    assert not [f for f in result.findings if f.kind == "wrong_interface"]


def test_efa_receive_channels_without_gdrdma_are_no_gdr() -> None:
    # tests/data/interconnect/wild (aws/aws-ofi-nccl#64): NCCL 2.7.8 on p4d over EFA, its receive channels
    # `via NET/AWS Libfabric/0` without /GDRDMA; the healthy p4d log of NVIDIA/nccl#527 shows them with it.
    wild = DATA / "interconnect" / "wild"
    staged = check(wild, nccl_logs=["efa-nogdr-p4-2.7.8__aws-ofi-nccl-64.log"])
    assert "no_gdr" in {f.kind for f in staged.findings}
    healthy = check(wild, nccl_logs=["healthy-efa-gdr-p4d-2.9__nccl-527.log"])
    assert "no_gdr" not in {f.kind for f in healthy.findings}
