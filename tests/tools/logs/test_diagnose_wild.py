"""diagnose_logs' newer rules, one real excerpt per rule variant, from the evaluation set in tests/data/logs/wild
(source URL, versions and label of each in the cases_*.jsonl there). benchmarks/accuracy_logs.py scores the whole
set; these hold each variant to its rule and facts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.core.errors import UnreadableInput
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


# ---- issue 30: the DistBackendError wrapper is no network finding; coverage of files and ranks ------------------

PUBLIC = DATA / "logs" / "public"
_WATCHDOG = "Watchdog caught collective operation timeout"
# NCCL's own words for a failure below the timeout (a network error, a peer gone): an excerpt with one of these may
# rightly carry a network finding too.
_NCCL_FAILURE = ("NCCL WARN", "NCCL error in:", "ncclSystemError", "ncclRemoteError", "ncclInternalError",
                 "Connection closed by", "Connection reset", "Connection refused", "ibv_")


@pytest.mark.parametrize(("name", "ranks", "seen"), [
    ("nccl_timeout__megatron-lm-935.log", [5, 6], "logs of 2 of at least 7 ranks read"),
    ("nccl_timeout__catalyst-rl-tutorial-15.log", [3], "logs of 1 of at least 4 ranks read"),
    ("nccl_timeout__instructlab-training-520.log", [3], "logs of 1 of at least 4 ranks read"),
])
def test_watchdog_timeout_thrown_as_dist_backend_error_is_one_timeout(name: str, ranks: list[int],
                                                                        seen: str) -> None:
    # 'terminate called after throwing an instance of c10::DistBackendError': the class PyTorch wraps any backend
    # failure in; what it wraps here is a watchdog timeout, and nothing in the excerpt is a network error.
    result = diagnose(name)
    serious = [(f.category, f.rule) for f in result.findings if f.severity != "info"]
    assert serious == [("nccl_timeout", "nccl_watchdog_timeout")]
    assert result.severity == "crit" and result.findings[0].ranks == ranks
    assert result.findings[0].facts["ranks_logged"] == len(ranks)
    # Logs of fewer ranks than the job has: the conclusion says whose, never "every rank timed out alike".
    assert seen in result.conclusion[1] and "Every rank" not in " ".join(result.conclusion)
    assert [(c.input, c.status) for c in result.coverage] == [(name, "read")]


def test_no_real_watchdog_excerpt_without_an_nccl_failure_gets_a_network_finding() -> None:
    excerpts = [p for folder in (WILD, PUBLIC) for p in sorted(folder.glob("*.log"))
                if _WATCHDOG in (text := p.read_text(errors="replace"))
                and not any(word in text for word in _NCCL_FAILURE)]
    assert len(excerpts) >= 18  # the wild and public watchdog excerpts, the three DistBackendError ones among them
    for path in excerpts:
        result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]),
                           ToolContext(roots=(path.parent.resolve(),)))
        assert {f.category for f in result.findings if f.severity != "info"} <= {"nccl_timeout", "process_exit"}, (
            path.name, [(f.rule, f.severity) for f in result.findings])
        assert not any(f.rule == "nccl_error" for f in result.findings), path.name


def test_a_real_network_failure_behind_dist_backend_error_is_still_nccl_error() -> None:
    # DistBackendError around ncclRemoteError whose last error is a socket reset by the peer (NVIDIA/nccl#2076).
    result = diagnose("nccl_init_network__nccl-2076.log")
    found = [f for f in result.findings if f.rule == "nccl_error"]
    assert len(found) == 1 and found[0].severity == "crit" and found[0].facts["nccl_error"] == "ncclRemoteError"
    assert found[0].category == "nccl_init_network" and result.severity == "crit"


def test_dist_backend_error_with_a_message_the_rules_do_not_know_is_unknown(tmp_path: Path) -> None:
    # ProcessGroupNCCL raises DistBackendError("NCCL communicator was aborted on rank N.") after an abort from
    # elsewhere: the class says a backend failed, not how; with nothing else in the log that is unknown, not ok.
    (tmp_path / "rank1.log").write_text(
        "step 10 loss 1.92\n"
        "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.\n")
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["rank1.log"]), ToolContext(roots=(tmp_path,)))
    assert result.severity == "unknown" and result.findings == []
    assert result.conclusion[0].startswith("A torch.distributed backend failed at rank1.log:2 (NCCL communicator")
    assert result.decides is not None and "NCCL_DEBUG=INFO" in result.decides
    assert [(c.input, c.status) for c in result.coverage] == [("rank1.log", "read")]


def test_empty_binary_and_unreadable_logs(tmp_path: Path) -> None:
    root = (tmp_path,)
    (tmp_path / "empty.log").write_bytes(b"")
    alone = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["empty.log"]), ToolContext(roots=root))
    assert alone.severity == "unknown" and alone.decides
    assert [(c.input, c.status, c.detail) for c in alone.coverage] == [
        ("empty.log", "not_understood", "empty: no line to judge")]
    # Beside a log that holds the failure: the failure stands, the empty one is its coverage row.
    (tmp_path / "rank3.log").write_bytes((WILD / "nccl_timeout__catalyst-rl-tutorial-15.log").read_bytes())
    both = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["empty.log", "rank3.log"]), ToolContext(roots=root))
    assert both.severity == "crit" and {c.input: c.status for c in both.coverage} == {
        "empty.log": "not_understood", "rank3.log": "read"}
    # A benign log read whole is an honest ok; beside a binary file the answer is open (unknown).
    (tmp_path / "benign.log").write_bytes((WILD / "benign__nccl-428.log").read_bytes())
    (tmp_path / "core.bin").write_bytes(b"\x7fELF\x00\x00" * 100)
    benign = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["benign.log"]), ToolContext(roots=root))
    assert benign.severity == "ok" and [c.status for c in benign.coverage] == ["read"]
    mixed = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["benign.log", "core.bin"]), ToolContext(roots=root))
    assert mixed.severity == "unknown" and mixed.conclusion[0].startswith("No failure found in the 1 log(s) read")
    assert {c.input: c.status for c in mixed.coverage} == {"benign.log": "read", "core.bin": "not_understood"}
    # Nothing at all readable (a FIFO has no saved output): the call fails (exit 3).
    os.mkfifo(tmp_path / "pipe.log")
    with pytest.raises(UnreadableInput, match="none of the 1 log"):
        anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["pipe.log"]), ToolContext(roots=root))
    # A glob that matches nothing beside one that does: a coverage row.
    globbed = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["rank*.log", "node9/*.log"]),
                        ToolContext(roots=root))
    assert globbed.severity == "crit" and ("node9/*.log", "not_understood") in [
        (c.input, c.status) for c in globbed.coverage]


def test_merged_log_of_every_rank_says_what_it_is() -> None:
    # The lab's torchrun output of four ranks (the rank-conditional all_gather), all timing out alike in gloo: one
    # merged log, and it says so, with how many of the job's ranks it holds (WORLD_SIZE 4 printed).
    lab = DATA / "logs" / "lab" / "rank_conditional_allgather"
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["combined.log"]), ToolContext(roots=(lab.resolve(),)))
    timeout = next(f for f in result.findings if f.rule == "gloo_timeout")
    assert result.severity == "crit" and timeout.ranks == [0, 1, 2, 3]
    assert (timeout.facts["ranks_logged"], timeout.facts["world_size"]) == (4, 4)
    assert result.conclusion[1].startswith("One merged log of ranks 0-3 (logs of all 4 ranks read): all timed out")
