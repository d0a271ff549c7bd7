"""diagnose_logs' newer rules, one real excerpt per rule variant, from the evaluation set in tests/data/logs/wild
(source URL, versions and label of each in the cases_*.jsonl there). benchmarks/accuracy_logs.py scores the whole
set; these hold each variant to its rule and facts."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs

WILD = DATA / "logs" / "wild"


def diagnose(name: str) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(WILD.resolve(),)))


@pytest.mark.parametrize(("name", "rule", "severity", "facts"), [
    # c10d store: the port is taken (old and new wording), the client cannot connect, torchelastic's rendezvous.
    ("nccl_init_network__tune-a-video-90.log", "store_port_in_use", "crit",
     {"port": 29500, "errno": 98, "error": "Address already in use"}),
    ("nccl_init_network__vlm-r1-289.log", "store_port_in_use", "crit", {"port": 29500, "errno": -98}),
    ("nccl_init_network__torch-xpu-ops-2119.log", "store_connect", "crit",
     {"host": "localhost", "port": 44557, "timeout_ms": 10000}),
    ("nccl_init_network__av-hubert-19.log", "rendezvous_error", "crit", {}),
    # NCCL: a bare return-code chain, the 'NCCL error in:' form, an old WARN without the NCCL prefix, sockets.
    ("nccl_init_network__nccl-1099.log", "nccl_return_chain", "crit",
     {"nccl_result": 2, "nccl_error": "ncclSystemError", "location": "misc/socket.cc:564"}),
    ("nccl_init_network__pytorch-78638.log", "nccl_error", "crit",
     {"nccl_error": "ncclInternalError", "nccl_version": "2.7.8",
      "location": "/opt/conda/conda-bld/pytorch_1607370120218/work/torch/lib/c10d/ProcessGroupNCCL.cpp:748"}),
    # NCCL's result as its enum name whichever way it was printed ('unhandled system error' in a user's check).
    ("nccl_init_network__nccl-111.log", "nccl_error", "crit", {"nccl_error": "ncclSystemError"}),
    # A socket WARN names the peer (IPv6 with its interface scope too) and the socket error.
    ("nccl_init_network__nccl-975.log", "nccl_warn", "warn",
     {"host": "fe80::966d:ae03:a2:8cf0%ib1", "port": 17943, "error": "Software caused connection abort"}),
    ("nccl_init_network__nccl-210.log", "nccl_warn", "warn", {"error": "Address family not supported by protocol"}),
    # The socket transport is a problem only between nodes: one host's lines state it (info); lines of several hosts,
    # channels already running 'via NET/Socket', or a communicator of more ranks than a node has GPUs (16 in
    # nccl-1537, whose NCCL prints no nNodes) are the problem (warn). GPU Direct RDMA off for a GPU is printed per
    # inter-node connection, so it needs no second host to count.
    ("nccl_init_network__nccl-tests-188.log", "nccl_socket_transport", "info", {"transport": "NET/Socket"}),
    ("nccl_init_network__nccl-226.log", "nccl_socket_transport", "warn", {}),
    ("nccl_init_network__nccl-tests-179.log", "nccl_socket_transport", "warn", {"transport": "NET/Socket"}),
    ("nccl_init_network__oneflow-3586.log", "nccl_socket_channel", "warn", {"transport": "NET/Socket"}),
    ("nccl_init_network__deeplearningexamples-383.log", "nccl_gdr_distance", "warn",
     {"distance": 5, "max_distance": 4}),
    ("nccl_init_network__nccl-1537.log", "nccl_gdr_disabled", "warn", {"interface": "mlx5_0"}),
    # Collectives that do not line up: NCCL's own check, TensorFlow's, c10d's argument checks.
    ("collective_mismatch__nccl-296.log", "nccl_collective_check", "crit", {"around_rank": 39}),
    ("collective_mismatch__tensorflow-62790.log", "nccl_collective_check", "crit",
     {"shape": "[28678440]", "other_shape": "[39166184]", "gpu": 2}),
    ("collective_mismatch__colossalai-524.log", "collective_argument", "crit",
     {"error": "Tensor list input to scatter/gather must match number of collective participants"}),
    # Watchdog heartbeat and JAX's barrier.
    ("nccl_timeout__verl-1158.log", "watchdog_stuck", "crit", {"timeout_s": 480}),
    ("nccl_timeout__levanter-432.log", "watchdog_stuck", "crit", {"barrier": "multihost_broadcast_sync0"}),
    # Stopped from outside: Slurm's cgroup OOM killer, a crash signal, torchelastic's death signal.
    ("process_exit__brain-score-vision-950.log", "death_signal", "warn", {"oom_kill_events": 1}),
    ("process_exit__zssr-34.log", "death_signal", "warn", {"exitcode": 139, "signal": "SIGSEGV"}),
    ("process_exit__rtd-action-31.log", "death_signal", "warn", {"signal": 2}),
    # JAX/XLA and TensorFlow out of memory; a GPU the driver cannot bring up; older and non-PyTorch CUDA errors.
    ("cuda_oom__alphafold-1023.log", "xla_oom", "crit", {"requested_bytes": 7406166528}),
    ("cuda_oom__jax-27354.log", "xla_oom", "crit", {"requested_bytes": 1374521760000, "gpu": 0}),
    ("cuda_oom__azure-machinelearningnotebooks-880.log", "xla_oom", "crit", {"tensor_shape": "[16,112,112,147]"}),
    ("gpu_hardware__workspace-19.log", "gpu_init_failed", "crit", {"pci": "0000:0B:00.0", "error": "Unknown Error"}),
    ("gpu_hardware__cmpunlocker-4.log", "gpu_init_failed", "crit", {"pci": "0000:01:00.0"}),
    ("cuda_error__cutorch-809.log", "cuda_error", "crit",
     {"cuda_error_code": 35, "error": "CUDA driver version is insufficient for CUDA runtime version"}),
    ("cuda_error__maskyolo-caffe-55.log", "cuda_error", "crit", {"cuda_error_code": 74, "error": "misaligned address"}),
    ("cuda_error__nanoflow-23.log", "cuda_error", "crit", {"cuda_error_code": 716, "error": "misaligned address"}),
    ("cuda_error__tensorrt-pro-162.log", "cuda_error", "crit",
     {"error": "no kernel image is available for execution on the device"}),
    # A DataLoader worker that crashed in native code; explain()'s counts over several lines, and its 2022 wording.
    ("dataloader__pytorch-53894.log", "dataloader_worker_crash", "crit", {"signal": "segmentation fault"}),
    ("compile__pytorch-102869.log", "dynamo_explain", "warn", {"graph_count": 2, "graph_break_count": 1}),
    ("compile__pytorch-93656.log", "dynamo_explain", "warn", {"graph_count": 12, "graph_break_count": 11}),
    # A fact anchored at the end of its line ('killed by signal: Killed.'), and a line that is only 'Killed'.
    ("dataloader__pytorch-yolov3-300.log", "dataloader_worker_died", "crit", {"pid": 6164, "signal": "Killed"}),
    ("process_exit__arjunausers-52.log", "death_signal", "warn", {}),
    # Inference engines: no room for the KV cache (vLLM, SGLang), and the start-up capacity (numbers over lines).
    ("inference__vllm-10439.log", "kv_cache_no_memory", "crit", {}),
    ("inference__sglang-4184.log", "kv_cache_no_memory", "crit", {"retracted_reqs": 1}),
    ("inference__vllm-13596.log", "kv_cache_capacity", "info", {"tokens": 2042016, "max_concurrency": 997.08}),
    ("inference__vllm-10517-2.log", "kv_cache_capacity", "info",
     {"blocks": 1952, "max_concurrency": 1.56, "total_bytes": 25318832209}),
])
def test_rule_variant(name: str, rule: str, severity: str, facts: dict[str, Any]) -> None:
    found = [f for f in diagnose(name).findings if f.rule == rule]
    assert len(found) == 1, [(f.rule, f.severity) for f in diagnose(name).findings]
    assert found[0].severity == severity
    assert {k: found[0].facts.get(k) for k in facts} == facts


def test_engine_that_cannot_hold_its_context_is_critical_with_both_numbers() -> None:
    # vLLM: max_model_len 29000 asks for more tokens than the KV cache holds (23648); capacity is stated too.
    findings = {f.rule: f for f in diagnose("inference__vllm-10517.log").findings}
    assert findings["kv_cache_no_memory"].severity == "crit"
    assert findings["kv_cache_no_memory"].facts["tokens"] == 23648
    assert findings["kv_cache_no_memory"].facts["max_model_len"] == 29000
    assert findings["kv_cache_capacity"].facts["max_concurrency"] == 0.82


@pytest.mark.parametrize("name", [
    "benign__nccl-428.log",  # one node, no libibverbs: NCCL WARNs and picks sockets, traffic stays on the node
    "benign__nccl-1653.log",  # one node (nNodes 1) over sockets
    "benign__nv-peer-memory-56.log",  # two nodes on IB; NCCL 2.4 lists the socket NICs all the same
])
def test_socket_chatter_of_a_healthy_job_stays_quiet(name: str) -> None:
    result = diagnose(name)
    assert [(f.rule, f.severity) for f in result.findings if f.severity != "info"] == []
    assert result.severity == "ok"
