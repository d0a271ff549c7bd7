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
    ("nccl_init_network__nccl-1099.log", "nccl_return_chain", "crit", {"nccl_result": 2, "source": "misc/socket.cc"}),
    ("nccl_init_network__pytorch-78638.log", "nccl_error", "crit",
     {"nccl_error": "internal error", "nccl_version": "2.7.8", "location": "ProcessGroupNCCL.cpp:748"}),
    ("nccl_init_network__nccl-210.log", "nccl_warn", "warn", {"error": "Address family not supported by protocol"}),
    ("nccl_init_network__nccl-tests-188.log", "nccl_socket_transport", "warn", {}),
    # Collectives that do not line up: NCCL's own check, TensorFlow's, c10d's argument checks.
    ("collective_mismatch__nccl-296.log", "nccl_collective_check", "crit", {"around_rank": 39}),
    ("collective_mismatch__tensorflow-62790.log", "nccl_collective_check", "crit",
     {"shape_a": "[28678440]", "shape_b": "[39166184]"}),
    ("collective_mismatch__colossalai-524.log", "collective_argument", "crit",
     {"error": "Tensor list input to scatter/gather must match number of collective participants"}),
    # Watchdog heartbeat and JAX's barrier.
    ("nccl_timeout__verl-1158.log", "watchdog_stuck", "crit", {"stuck_s": 480}),
    ("nccl_timeout__levanter-432.log", "watchdog_stuck", "crit", {"barrier": "multihost_broadcast_sync0"}),
    # Stopped from outside: Slurm's cgroup OOM killer, a crash signal, torchelastic's death signal.
    ("process_exit__brain-score-vision-950.log", "death_signal", "warn", {"oom_kill_events": 1}),
    ("process_exit__zssr-34.log", "death_signal", "warn", {"exitcode": 139, "signal": "SIGSEGV"}),
    ("process_exit__rtd-action-31.log", "death_signal", "warn", {"signal": 2}),
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
