"""GPU-NIC affinity, rank CPU affinity, `nvidia-smi topo -p2p` and NCCL's P2P-disabled lines (issue 32), on real
excerpts: tests/data/interconnect/affinity (sources in its PROVENANCE.md) and the wild / round 4 development sets."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.core.files import expand_inputs
from tools.interconnect import CheckInterconnectInput, CheckInterconnectResult, check_interconnect
from tools.interconnect.affinity import judge_cpu_affinity, judge_live_cpu_affinity, judge_used_nics, nearest_nics
from tools.interconnect.captures import kind_of, parse_cpu_list, read_p2p, read_topo
from tools.interconnect.evidence import Evidence
from tools.interconnect.live import gpu_of_pids
from tools.interconnect.nccl_log import read_nccl_log

AFFINITY = DATA / "interconnect" / "affinity"
WILD = DATA / "interconnect" / "wild"
DEV = DATA / "interconnect" / "round4" / "dev"
SMI = DATA / "nvidia_smi"


def check(root: Path, **arguments: Any) -> CheckInterconnectResult:
    return anyio.run(check_interconnect, CheckInterconnectInput(**arguments),
                     ToolContext(roots=(root.resolve(),), timeout_s=60))


def kinds(result: CheckInterconnectResult) -> list[tuple[str, str]]:
    return [(f.kind, f.severity.value) for f in result.findings]


def matrix_of(path: Path) -> Any:
    matrix = read_topo(path.read_text())
    assert matrix is not None
    return matrix


# ---------------------------------------------------------------- nic_affinity from the matrix alone


def test_a_gpu_whose_only_nics_are_across_the_sockets_beside_pix_rails_is_nic_affinity() -> None:
    # NVIDIA/nccl#595: 4 A100s, 2 HCAs (old driver: device names as columns); GPU1 and GPU2 each own one at PIX,
    # GPU0 and GPU3 reach both only across the sockets.
    result = check(AFFINITY, captures=["topo__NVIDIA-nccl-595.txt"])
    assert kinds(result) == [("nic_affinity", "warn"), ("nic_affinity", "warn")]
    assert result.verdict == "nic_affinity" and result.severity.value == "warn"
    gpu0, gpu3 = result.findings
    assert gpu0.evidence.startswith("GPU0's nearest NIC is mlx5_0, mlx5_1 at SYS")
    assert gpu3.evidence.startswith("GPU3's nearest NIC is mlx5_0, mlx5_1 at SYS")
    assert "GPU1, GPU2 have one at PIX" in gpu0.evidence
    assert "NCCL_IB_HCA" in gpu0.fix and "rail" in gpu0.fix
    assert gpu0.node == "NVIDIA-nccl-595"


def test_a_board_whose_every_gpu_nic_path_is_sys_is_one_topology_fact() -> None:
    # vllm-project/vllm#17527: 4 A100s, 26 NICs, every GPU-NIC cell SYS (GPU3's row cut in the excerpt).
    result = check(AFFINITY, captures=["topo__vllm-project-vllm-17527.txt"])
    assert kinds(result) == [("nic_affinity", "warn")]
    said = result.findings[0].evidence
    assert said.startswith("every GPU-NIC path on this board is SYS (3 GPU(s), 26 NIC(s): NIC0, NIC1, NIC2, NIC3 ...")
    assert "not a misconfigured GPU" in said and "GPU0" not in said


def test_well_placed_nics_and_thin_boards_stay_quiet() -> None:
    # rapidsai/dask-cuda#1358: two A100s sharing two PXB NICs; and the dev / wild boards with NIC columns: every GPU
    # with its own PIX NIC (nccl#1617, nccl#933), NODE where the board has fewer NICs (llm-action), NIC pairs at PXB
    # (nccl#1505, xuesongtap).
    assert kinds(check(AFFINITY, captures=["topo__rapidsai-dask-cuda-1358.txt"])) == []
    for root, name in ((WILD, "topo__NVIDIA-nccl-1617.txt"), (WILD, "topo__NVIDIA-nccl-933.txt"),
                       (WILD, "topo__NVIDIA-nccl-1505.txt"), (WILD, "topo__deepseek-ai-DeepEP-223.txt"),
                       (DEV, "topo__liguodongiot-llm-action-2.txt"),
                       (DEV, "topo__xuesongtap-xuesongtap-github-io-1.txt")):
        result = check(root, captures=[name])
        assert "nic_affinity" not in {f.kind for f in result.findings}, (name, result.findings)
    # The thin board is said in a note, not a finding: GPUs at NODE have no nearer NIC to be moved to.
    thin = check(DEV, captures=["topo__liguodongiot-llm-action-2.txt"])
    assert any("GPU0, GPU2, GPU4, GPU5, GPU6 have no NIC closer than NODE" in note for note in thin.notes), thin.notes


def test_a_gpu_on_a_socket_without_a_nic_is_said_not_judged() -> None:
    # page wuyea.top (round 4 dev): GPU0 reaches both NICs on its own socket (NODE), GPU1 only across the sockets
    # (SYS): the board's layout, no nearer NIC to move to; its crossing traffic is said in a note, not a finding.
    result = check(DEV, captures=["topo__page-wuyea-top-1.txt"])
    assert kinds(result) == []
    assert any("GPU1 reach a NIC only across the CPU sockets (SYS), while GPU0 have one on their own socket (NODE)"
               in note for note in result.notes), result.notes


def test_the_matrix_keeps_each_gpus_cpus_and_numa_node() -> None:
    matrix = matrix_of(AFFINITY / "topo__NVIDIA-nccl-595.txt")
    assert matrix.cpu_affinity == {"GPU0": "16-31,80-95", "GPU1": "0-15,64-79", "GPU2": "48-63,112-127",
                                   "GPU3": "32-47,96-111"}
    assert matrix.numa_affinity == {"GPU0": "1", "GPU1": "0", "GPU2": "3", "GPU3": "2"}
    assert nearest_nics(matrix)["GPU1"] == ("PIX", ["mlx5_0"])
    legend = matrix_of(DEV / "topo__liguodongiot-llm-action-2.txt")
    assert legend.nic_device("NIC3") == "mlx5_3" and nearest_nics(legend)["GPU7"] == ("PIX", ["NIC2", "NIC3"])
    assert legend.cpu_affinity["GPU4"] == "32-63,96-127" and legend.numa_affinity["GPU4"] == "1"
    assert parse_cpu_list("0-3,8") == {0, 1, 2, 3, 8}
    assert parse_cpu_list("ffff,0000ffff") == set(range(16)) | set(range(32, 48))  # NCCL's mask, 32-bit groups
    assert parse_cpu_list("N/A") is None


# ---------------------------------------------------------------- the NIC each GPU uses, from NCCL's log


def test_nccl_lines_give_each_gpus_nic_its_nvml_index_and_environment() -> None:
    deadline = time.monotonic() + 30
    (partial,) = expand_inputs(["nogdr-partial-roce-2.5.7__nccl-392.log"], (WILD.resolve(),), 10)
    assert any(p.net_devices == {0: "mlx5_0"} for p in read_nccl_log(partial, deadline))
    # 2.19+ channel lines print the nvmlDev in brackets: GPU 5's channels go via NIC index 3 (nccl#1412).
    (maintainer,) = expand_inputs(["nogdr-ib-2node-maintainer__nccl-1412.log"], (WILD.resolve(),), 10)
    uses = {gpu: set(nics) for p in read_nccl_log(maintainer, deadline) for gpu, nics in p.nic_use.items()}
    assert uses[(5, True)] == {3}
    # 2.4's `GPU Direct RDMA Disabled for GPU 2[2] / HCA 0`: NCCL checking the NIC it picked for the [dev] GPU.
    (distance,) = expand_inputs(["nogdr-distance-2.4__nv_peer_memory-56.log"], (WILD.resolve(),), 10)
    assert any((2, False) in p.nic_use and 0 in p.nic_use[(2, False)] for p in read_nccl_log(distance, deadline))
    (roce,) = expand_inputs(["nccl_tests__cci-moc-roce-testing-1.txt"], (DEV.resolve(),), 10)
    assert {p.environment.get("NCCL_IB_HCA") for p in read_nccl_log(roce, deadline)} == {"mlx5_5"}
    (joorklee,) = expand_inputs(["nccl_log__joorklee-p2p-bench-p2p_off-c1.log"], (AFFINITY.resolve(),), 10)
    processes = read_nccl_log(joorklee, deadline)
    assert [p.cuda_to_nvml for p in processes] == [{0: 1}, {1: 2}]


def test_a_gpu_sending_over_a_far_nic_while_its_own_is_pix_is_named_with_both() -> None:
    # The join on nccl#595's matrix: GPU1 owns mlx5_0 at PIX; channels of GPU1 via mlx5_1 cross the sockets.
    matrix = matrix_of(AFFINITY / "topo__NVIDIA-nccl-595.txt")
    found = Evidence()
    judge_used_nics(matrix, "node-a", {"GPU1": {"mlx5_1": "Channel 00/0 : 1[1] -> 5[1] [send] via NET/IB/1"},
                                       "GPU2": {"mlx5_1": "Channel 00/0 : 2[2] -> 6[2] [send] via NET/IB/1"}}, found)
    assert [(f.kind, f.severity.value, f.node) for f in found.findings] == [("nic_affinity", "warn", "node-a")]
    said = found.findings[0].evidence
    assert said.startswith("GPU1 sends over mlx5_1 (mlx5_1) at SYS while mlx5_0 is PIX to it")
    assert "via NET/IB/1" in said
    # The GPU's own NIC, or one at its nearest path, is no finding; a device the matrix does not list is a note.
    quiet = Evidence()
    judge_used_nics(matrix, "node-a", {"GPU1": {"mlx5_0": "x"}, "GPU0": {"mlx5_1": "x"}, "GPU3": {"mlx5_9": "x"}},
                    quiet)
    assert quiet.findings == [] and any("mlx5_9" in note for note in quiet.notes)


def test_nccls_own_gpu_to_net_paths_are_read_and_an_even_board_stays_quiet() -> None:
    # NVIDIA/nccl#1519 (NCCL 2.20.5, GRAPH): GPU/5000 and GPU/B000 reach NET 0-4 at PHB and NET 5-7 at SYS alike.
    (graph,) = expand_inputs(["nccl_log__NVIDIA-nccl-1519-graph.log"], (AFFINITY.resolve(),), 10)
    (process,) = read_nccl_log(graph, time.monotonic() + 30)
    assert process.gpu_net_paths == {0x5000: {0: "PHB", 1: "PHB", 2: "PHB", 3: "PHB", 4: "PHB", 5: "SYS", 6: "SYS",
                                              7: "SYS"},
                                     0xB000: {0: "PHB", 1: "PHB", 2: "PHB", 3: "PHB", 4: "PHB", 5: "SYS", 6: "SYS",
                                              7: "SYS"}}
    result = check(AFFINITY, nccl_logs=["nccl_log__NVIDIA-nccl-1519-graph.log"])
    assert "nic_affinity" not in {f.kind for f in result.findings}
    # NCCL 2.3 says it per GPU: `CUDA Dev 0, IB Ports : mlx5_0/1(PIX)` (horovod/horovod#1191), the NIC beside it.
    (old_log,) = expand_inputs(["nccl_log__horovod-horovod-1191.log"], (AFFINITY.resolve(),), 10)
    (rank,) = read_nccl_log(old_log, time.monotonic() + 30)
    assert rank.nic_distance == {(0, None): {0: "PIX"}} and rank.net_devices == {0: "mlx5_0"}
    assert kinds(check(AFFINITY, nccl_logs=["nccl_log__horovod-horovod-1191.log"])) == []


# ---------------------------------------------------------------- rank CPU affinity


def test_a_rank_pinned_off_its_gpus_numa_node_is_named() -> None:
    matrix = matrix_of(AFFINITY / "topo__NVIDIA-nccl-595.txt")
    found = Evidence()
    # GPU1's CPUs are 0-15,64-79 (NUMA 0); a rank on 16-31 sits on GPU0's node (NUMA 1). A narrower pinning within
    # the node (GPU2 on 48-55) is fine, and so is NCCL's hex mask of GPU3's own CPUs.
    judge_cpu_affinity(matrix, "node-a", [("GPU1", "rank 1", "16-31"), ("GPU2", "rank 2", "48-55"),
                                          ("GPU3", "rank 3", "ffff,00000000,0000ffff,00000000")], found)
    assert [(f.kind, f.severity.value) for f in found.findings] == [("cpu_affinity", "warn")]
    said = found.findings[0].evidence
    assert said.startswith("rank 1 runs on CPUs 16-31 while GPU1's local CPUs are 0-15,64-79 (NUMA node 0)")
    assert "pinned to NUMA node 1" in said and "numactl --cpunodebind" in found.findings[0].fix


def test_a_live_process_is_judged_by_the_cpus_the_kernel_lets_it_use() -> None:
    # A real child pinned to CPU 0, said to run on GPU0 of rapidsai/dask-cuda#1358 (local CPUs 48-63,176-191).
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    try:
        matrix = matrix_of(AFFINITY / "topo__rapidsai-dask-cuda-1358.txt")
        found = Evidence()
        judge_live_cpu_affinity(matrix, "this", [child.pid, os.getpid()], {child.pid: 0}, found)
        assert [(f.kind, f.rank) for f in found.findings] == [("cpu_affinity", None)]
        assert found.findings[0].evidence.startswith(f"pid {child.pid} runs on CPUs 0 while GPU0's local CPUs are "
                                                     "48-63,176-191 (NUMA node 3)")
        assert any(f"pid {os.getpid()} holds no GPU" in note for note in found.notes)
    finally:
        child.kill()
        child.wait()


def test_which_gpu_a_process_uses_comes_from_nvidia_smis_own_tables() -> None:
    # Recorded nvidia-smi output (tests/data/nvidia_smi): three processes on the H200 at 00000000:83:00.0.
    apps = (SMI / "query_compute_apps_h200_load_header_units.csv").read_text()
    gpus = (SMI / "query_gpu_h200_allfields_idle_header_units.csv").read_text()
    rows = [line.split(", ") for line in apps.splitlines()[1:] if line.strip()]
    compute = "\n".join(f"{row[5]}, {row[2]}" for row in rows)
    header = gpus.splitlines()[0].split(", ")
    bus = gpus.splitlines()[1].split(", ")[header.index("pci.bus_id")]
    assert gpu_of_pids(compute, f"0, {bus}") == {10291: 0, 10293: 0, 10309: 0}
    assert gpu_of_pids(compute, "0, 00000000:07:00.0") == {}  # a bus id no GPU row has: no owner invented


def test_job_pids_are_refused_outside_live_mode() -> None:
    try:
        CheckInterconnectInput(captures=["x"], job_pids=[1])
    except ValueError as exc:
        assert "job_pids are read live" in str(exc)
    else:
        raise AssertionError("job_pids without live was accepted")


# ---------------------------------------------------------------- P2P refused


def test_topo_p2p_is_told_from_topo_m_and_its_refusals_are_p2p_disabled() -> None:
    # noonghunna/club-3090#1124: `topo -p2p rw` of two RTX 5090s: GNS (GPU not supported) both ways.
    text = (AFFINITY / "topo_p2p__noonghunna-club-3090-1124.txt").read_text()
    assert kind_of(text) == "topo_p2p"
    p2p = read_p2p(text)
    assert p2p is not None and p2p.gpus == ["GPU0", "GPU1"] and p2p.status[("GPU0", "GPU1")] == "GNS"
    result = check(AFFINITY, captures=["topo_p2p__noonghunna-club-3090-1124.txt"])
    assert kinds(result) == [("p2p_disabled", "warn")]
    assert "P2P refused between GPU0-GPU1 of 2 GPU(s) (GNS = GPU not supported" in result.findings[0].evidence
    assert "GeForce" in result.findings[0].fix
    assert result.findings[0].node == "noonghunna-club-3090-1124"
    assert [(k.kind, k.name, k.state) for k in result.links] == [("gpu_p2p", "GPU0-GPU1", "GNS")]


def test_nccl_p2p_disable_in_the_environment_is_p2p_disabled_with_the_gpus() -> None:
    # joorklee/p2p-bench: vLLM TP=2 on two RTX 5060 Ti, NCCL_P2P_DISABLE=1, rings via SHM/direct/direct.
    result = check(AFFINITY, nccl_logs=["nccl_log__joorklee-p2p-bench-p2p_off-c1.log"])
    assert kinds(result) == [("p2p_disabled", "warn")]
    said = result.findings[0].evidence
    assert said.startswith("NCCL_P2P_DISABLE=1 in the job's environment") and "no P2P between GPUs 1, 2" in said
    assert "(4 channel(s) via SHM)" in said and result.findings[0].node == "proxmox"
    # NCCL_P2P_DISABLE set to 0 says P2P is allowed: no finding of it (nccl#340, a TF job with 2 GPUs).
    quiet = check(WILD, nccl_logs=["warn-libibverbs-tf-2.5.7__nccl-340.log"])
    assert "p2p_disabled" not in {f.kind for f in quiet.findings}
