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
    # Where a failure was raised: PyTorch < 1.7's '(f at x:N)', the Python traceback above a NCCL error (the
    # location from the error line, the function from the innermost frame), 'Exception raised from' five lines
    # below, a Lua frame below. Ambiguous CUDA errors say a failing GPU gives them too.
    ("cuda_error__pytorch-49832.log", "cuda_error", "crit",
     {"error": "unspecified launch failure", "location": "/pytorch/c10/cuda/CUDACachingAllocator.cpp:764",
      "function": "insert_events", "hardware_possible": True}),
    ("nccl_init_network__nccl-875.log", "nccl_error", "crit",
     {"function": "all_gather", "nccl_error": "ncclSystemError"}),
    ("cuda_error__cudnn-torch-374.log", "cuda_error", "crit",
     {"location": "/home/<user>/torch/install/share/lua/5.1/cudnn/init.lua:145", "function": "getHandle"}),
    # Messages over several lines: dynamo's function and reason under a limit, the failed guard under a
    # recompile, explain()'s break reason, the profiler report's table, TensorFlow's allocator stats above its OOM.
    ("compile__heavyball-16.log", "compile_limit", "warn",
     {"limit": 8, "function": "_compilable_update_",
      "location": "/home/<user>/.pyenv/versions/3.9.6/envs/minerl/lib/python3.9/site-packages/heavyball/utils.py:694",
      "reason": "1/0: tensor 'L['p'][0]' size mismatch at index 0. expected 16, actual 64"}),
    ("compile__pytorch-113585.log", "recompile", "warn", {"function": "fn", "reason": "len(L['x']) == 3"}),
    ("compile__lightning-thunder-1810.log", "dynamo_explain", "warn",
     {"graph_break_count": 1, "reason": "generic_jump TensorVariable()", "function": "fn"}),
    ("compile__pytorch-113443.log", "graph_break", "warn", {"reason": "hasattr: UserDefinedClassVariable()"}),
    ("cuda_oom__automatic-speech-recognition-78.log", "xla_oom", "crit",
     {"limit_bytes": 10625279591, "in_use_bytes": 7350513920, "location": "tile_ops.cc:123"}),
    ("collective_mismatch__horovod-534.log", "horovod_stalled", "crit", {"missing_ranks": [0]}),
    ("gpu_hardware__gpud-80.log", "row_remapper", "warn",
     {"remapped_rows_uncorrectable": 4, "remap_pending": "Yes"}),
    # A watchdog timeout wrapped mid-word: the WorkNCCL(...) half still names the collective, as one hit.
    ("nccl_timeout__sglang-3424.log", "nccl_watchdog_timeout", "crit",
     {"op": "_ALLGATHER_BASE", "seq": 1522789, "process_group": 3, "pg_id": 2}),
    # Facts lent by NCCL's start-up lines: the socket NIC and the version.
    ("nccl_init_network__nccl-226.log", "nccl_socket_transport", "warn",
     {"interface": "ens3", "nccl_version": "2.4.7+cuda9.2"}),
    # A status at its fullest: the KV cache at 99.2 % with 9832 requests waiting (later lines show 76.6 %).
    ("inference__vllm-5578.log", "vllm_throughput", "warn", {"kv_cache_usage_pct": 99.2, "pending": 9832}),
    # Bystanders and exit codes as info: torchrun's first stopped worker, an IDE's exit code.
    ("gpu_hardware__accelerate-1192.log", "torchrun_closing", "info", {"pid": 197, "signal": "SIGTERM"}),
    ("dataloader__mc-gan-19.log", "process_finished", "info", {"exitcode": 1}),
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


def test_every_xid_of_a_gpu_is_listed_in_order_on_each_of_its_findings() -> None:
    xids = [f for f in diagnose("gpu_hardware__dxvk-1027.log").findings if f.rule == "xid"]
    assert [f.facts["xid"] for f in xids] == [31, 13, 32]
    assert all(f.facts["xids"] == [31, 13, 32] and f.facts["pci"] == "0000:01:00" for f in xids)


def test_two_line_timeout_is_one_hit_per_rank() -> None:
    # milabench-269: each rank prints 'Watchdog caught collective operation timeout:' and, on the next line,
    # its WorkNCCL(...): four ranks, four hits, each with the collective's facts.
    found = next(f for f in diagnose("nccl_timeout__milabench-269.log").findings if f.rule == "nccl_watchdog_timeout")
    assert (found.count, found.ranks) == (4, [11, 12, 14, 15])
    assert (found.facts["op"], found.facts["seq"], found.facts["timeout_ms"]) == ("REDUCE", 2070, 600000)


def test_socket_interface_setting_is_not_a_missing_interface() -> None:
    # 'NCCL_SOCKET_IFNAME set by environment to eth0' is configuration, not 'no socket interface found'.
    rules = {f.rule for f in diagnose("nccl_init_network__sglang-3398.log").findings}
    assert "nccl_no_interface" not in rules and "nccl_socket_transport" in rules


def test_graph_break_with_its_frame_on_the_next_line() -> None:
    # The 2.3 form: 'Graph break: from user code at:' and the frame under it (public set, pytorch#126722).
    public = DATA / "logs" / "public"
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["compile__pytorch-126722.log"]),
                       ToolContext(roots=(public.resolve(),)))
    found = [f for f in result.findings if f.rule == "graph_break"]
    assert len(found) == 1
    assert found[0].facts == {"location": "/data/users/<user>/pytorch3/playground4.py:5", "function": "f"}
