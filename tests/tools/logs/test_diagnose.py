"""diagnose_logs on real log lines: public excerpts (tests/data/logs/public, sources in PROVENANCE.md there,
one file per message variant) and real failing torch.distributed jobs run on this machine
(tests/data/logs/lab, scripts in tests/lab). No stand-ins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, REPO
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs

PUBLIC = DATA / "logs" / "public"
LAB = DATA / "logs" / "lab"


def diagnose(*paths: str) -> DiagnoseLogsResult:
    ctx = ToolContext(roots=(REPO.resolve(),))
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=list(paths)), ctx)


def only(result: DiagnoseLogsResult, rule: str, **facts: Any) -> Any:
    found = [f for f in result.findings if f.rule == rule and all(f.facts.get(k) == v for k, v in facts.items())]
    assert len(found) == 1, [(f.rule, f.facts) for f in result.findings]
    return found[0]


def public(name: str) -> DiagnoseLogsResult:
    return diagnose(str((PUBLIC / name).relative_to(REPO)))


# ---- nccl_timeout -----------------------------------------------------------------------------------


def test_watchdog_with_numel_and_pg_ranks_and_silent_rank() -> None:
    # PyTorch >= 2.2 wording: [rankN]:[E... ProcessGroupNCCL.cpp:607] [Rank N] ... NumelIn/NumelOut.
    result = public("nccl_timeout__llamafactory-6269.log")
    f = only(result, "nccl_watchdog_timeout")
    assert f.severity == "crit" and f.category == "nccl_timeout" and f.ranks == [0, 3, 4]
    assert {k: f.facts[k] for k in ("op", "seq", "numel_in", "numel_out", "timeout_ms", "ran_for_ms")} == {
        "op": "_REDUCE_SCATTER_BASE", "seq": 7753, "numel_in": 544997376, "numel_out": 68124672,
        "timeout_ms": 600000, "ran_for_ms": 600061}
    assert f.first.timestamp == "E1206 18:44:12.715298746" and f.first.rank == 0
    # Rank 2 only reports progress counters, never a timeout of its own.
    assert f.facts["silent_ranks"] == [2]
    assert "Rank(s) [2] report no timeout" in result.conclusion[1]


def test_old_watchdog_wording_and_the_rank_behind() -> None:
    # PyTorch 2.1 wording, no NumelIn; rank 7 timed out at SeqNum 64088 while the others reached 96125.
    result = public("nccl_timeout__pytorch-118369.log")
    f = only(result, "nccl_watchdog_timeout")
    assert "numel_in" not in f.facts and f.facts["timeout_ms"] == 1800000
    assert (f.facts["behind_ranks"], f.facts["seq_of_behind"], f.facts["seq_of_others"],
            f.facts["behind_by_collectives"]) == ([7], 64088, 96125, 32037)
    assert result.conclusion[1].startswith("Rank(s) [7] stopped at 64088, 32037 collective(s) behind")


def test_different_collectives_at_the_same_seq() -> None:
    f = only(public("nccl_timeout__nccl-1409.log"), "nccl_watchdog_timeout")
    assert f.ranks == [3, 7] and f.facts["ops_at_same_seq"] == "ALLREDUCE,BROADCAST"


def test_gloo_timeout_names_the_silent_rank_from_per_rank_files() -> None:
    # Lab: 4 ranks under torchrun --log-dir; rank 3 skips an all_reduce, ranks 0-2 time out after 10 s.
    result = diagnose(str((LAB / "gloo_timeout_rank3_absent").relative_to(REPO)) + "/**/*.log")
    f = only(result, "gloo_timeout")
    assert f.ranks == [0, 1, 2] and f.facts["timeout_ms"] == 10000 and f.facts["silent_ranks"] == [3]


def test_all_ranks_time_out_alike_says_logs_cannot_name_the_culprit() -> None:
    # Lab: the rank-conditional all_gather hang; gloo's timeout text is the same on every rank.
    result = diagnose(str((LAB / "rank_conditional_allgather").relative_to(REPO)) + "/rank*.log")
    f = only(result, "gloo_timeout")
    assert f.ranks == [0, 1, 2, 3] and "silent_ranks" not in f.facts
    assert "logs cannot name the culprit" in result.conclusion[1]


def test_monitored_barrier_and_store_timeout_name_the_missing_rank() -> None:
    barrier = diagnose(str((LAB / "monitored_barrier" / "combined.log").relative_to(REPO)))
    assert only(barrier, "monitored_barrier").facts["missing_ranks"] == [3]
    assert barrier.conclusion[1] == "monitored_barrier names rank(s) 3 as never arriving: look there first."
    store = diagnose(str((LAB / "store_timeout" / "combined.log").relative_to(REPO)))
    f = only(store, "store_timeout")
    assert (f.facts["missing_rank"], f.facts["timeout_ms"]) == (3, 10000) and f.category == "nccl_init_network"


def test_killed_rank_is_named_and_sigterm_bystanders_are_info() -> None:
    result = diagnose(str((LAB / "rank_killed" / "combined.log").relative_to(REPO)))
    killed = only(result, "child_failed", exitcode=-9)
    assert killed.severity == "crit" and killed.ranks == [3]
    assert only(result, "child_failed", exitcode=-15).severity == "info"
    assert only(result, "peer_closed").ranks == [0, 1, 2]
    assert "Rank(s) 3 were killed (SIGKILL" in result.conclusion[1]


# ---- the other categories: one real excerpt per message variant ------------------------------------

CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("nccl_init_network__espnet-1940.log", "nccl_warn", "warn", {"peer": "10.38.10.112<21724>"}),
    ("nccl_init_network__nccl-562.log", "nccl_warn", "warn", {"ib_call": "ibv_create_qp"}),
    ("nccl_init_network__hkproj-ptd-1.log", "nccl_error", "crit", {"nccl_version": "2.18.6"}),
    ("collective_mismatch__ms-swift-9443.log", "collective_mismatch", "crit",
     {"seq": 3104, "shape": "[195812480]", "other_rank": 0, "other_shape": "[51123456]"}),
    ("collective_mismatch__pytorch-78022.log", "collective_mismatch", "crit", {"op": "BROADCAST", "shape": "[34112]"}),
    # Newest OOM wording (2.4+), the 2.1 one with "Process N has", the pre-2.0 one, and the ~1.0 "cached" one.
    ("cuda_oom__ms-swift-5943.log", "cuda_oom", "crit",
     {"gpu": 3, "requested_bytes": 2823940997, "reserved_unallocated_bytes": 3736621547, "likely": "fragmentation"}),
    ("cuda_oom__generateu-10.log", "cuda_oom", "crit",
     {"other_pid": 20398, "free_bytes": 246478274, "likely": "capacity"}),
    ("cuda_oom__gpt4-llm-16.log", "cuda_oom", "crit",
     {"total_bytes": 85201413734, "reserved_bytes": 82463372083, "likely": "fragmentation"}),
    ("cuda_oom__pytorch-16417.log", "cuda_oom", "crit", {"requested_bytes": 13107200, "likely": "capacity"}),
    ("nan_inf__gradnorm-tf-17.log", "nan_loss", "crit", {"loss": "nan", "epoch": 3451}),
    ("nan_inf__insightface-2262.log", "nan_loss", "crit", {"loss": "nan"}),
    ("nan_inf__modernbert-233.log", "nan_grad_norm", "crit", {"grad_norm": "nan", "loss": 0.2051}),
    ("nan_inf__pytorch-51196.log", "anomaly_nan", "crit", {"function": "MulBackward0", "output": 0}),
    # Overflow skips show where the loss scale got to, not where it started (64 -> 32 ... -> 2).
    ("nan_inf__chinese-llama-alpaca-534.log", "overflow_skip", "warn", {"attempted_loss_scale": 4, "loss_scale": 2}),
    ("nan_inf__apex-318.log", "overflow_skip", "warn", {"loss_scale": 9.967194951097568e-206}),
    ("dataloader__pytorch-8976.log", "dataloader_worker_died", "crit", {"pid": 1817}),
    ("dataloader__dcpdn-58.log", "dataloader_shm", "crit", {}),
    ("dataloader__maskrcnn-benchmark-158.log", "too_many_open_files", "crit", {}),
    ("dataloader__pytorch-68643.log", "dataloader_timeout", "warn", {"timeout_s": 5}),
    ("gpu_hardware__gpu-operator-1146.log", "xid", "crit", {"xid": 48, "xid_meaning": "double-bit ECC error"}),
    ("gpu_hardware__vllm-40652.log", "xid", "crit", {"xid": 74, "xid_meaning": "NVLink error"}),
    ("gpu_hardware__vllm-5901.log", "xid", "warn", {"xid": 13}),
    ("gpu_hardware__nvsentinel-155.log", "fallen_off_bus", "crit", {}),
    ("cuda_error__tegnas-19.log", "cuda_error", "crit", {"error": "an illegal memory access was encountered"}),
    ("cuda_error__pytorch-2567.log", "cuda_error", "crit",
     {"cuda_error_code": 4, "error": "unspecified launch failure"}),
    ("cuda_error__person-reid-372.log", "device_assert", "crit", {"assertion": "t >= 0 && t < n_classes"}),
    ("compile__dion-23.log", "compile_limit", "warn", {"limit_name": "recompile_limit", "limit": 8}),
    ("compile__mochiwrapper-44.log", "compile_limit", "warn", {"limit_name": "cache_size_limit", "limit": 8}),
    ("compile__pytorch-110325.log", "recompile", "warn", {"function": "forward"}),
    ("compile__pytorch-167393.log", "graph_break", "warn",
     {"location": "/data/users/<user>/pytorch4/playground2.py:8"}),
    ("inference__vllm-6102.log", "kv_cache_preemption", "warn", {"mode": "RECOMPUTE", "cumulative_preemptions": 1}),
    # Queued requests with the KV cache nearly full: the status line becomes a warning.
    ("inference__vllm-43295.log", "vllm_throughput", "warn", {"pending": 23, "kv_cache_usage_pct": 98.4}),
    ("inference__sglang-938.log", "sglang_decode", "warn", {"pending": 12279, "kv_cache_usage_pct": 93.0}),
    ("inference__sglang-3909.log", "sglang_decode", "info", {"pending": 0, "kv_cache_usage_pct": 13.0}),
]


@pytest.mark.parametrize(("name", "rule", "severity", "facts"), CASES, ids=[c[0] for c in CASES])
def test_each_category_on_real_lines(name: str, rule: str, severity: str, facts: dict[str, Any]) -> None:
    finding = only(public(name), rule, **facts)
    assert finding.severity == severity
    assert finding.cause and finding.fix and finding.sop_branch


def test_mismatch_detail_lab_run_names_both_ranks_and_ops() -> None:
    result = diagnose(str((LAB / "mismatch_detail" / "detail_op.log").relative_to(REPO)))
    f = only(result, "collective_mismatch")
    # Which rank's line comes first varies from run to run; the pair of ops does not.
    assert {f.facts["op"], f.facts["other_op"]} == {"ALLREDUCE", "ALLGATHER"} and f.facts["seq"] == 1


def lab(path: str) -> DiagnoseLogsResult:
    return diagnose(str((LAB / path).relative_to(REPO)))


def test_lab_nan_grad_norm_comes_before_the_nan_loss_and_anomaly_names_the_op() -> None:
    # A too-high learning rate: grad_norm is inf at step 9, the loss nan from step 10.
    high_lr = lab("nan_loss/lr_too_high.log")
    grad = only(high_lr, "nan_grad_norm")
    loss = only(high_lr, "nan_loss")
    assert grad.facts["grad_norm"] == "inf" and grad.first.line < loss.first.line
    assert (loss.facts["loss"], loss.facts["step"]) == ("nan", 10)
    assert only(lab("nan_loss/detect_anomaly.log"), "anomaly_nan").facts["function"] == "SqrtBackward0"


def test_lab_dataloader_failures() -> None:
    assert only(lab("dataloader_worker_killed/killed_by_main.log"), "dataloader_worker_died").severity == "crit"
    for variant in ("leak_workers0.log", "leak_workers2.log", "sharing_file_descriptor.log"):
        only(lab(f"dataloader_too_many_files/{variant}"), "too_many_open_files")


def test_lab_graph_breaks_per_location_recompiles_and_the_limit() -> None:
    result = lab("compile_graph_breaks/combined.log")
    breaks = [f for f in result.findings if f.rule == "graph_break"]
    assert len(breaks) >= 2 and len({f.facts.get("location") for f in breaks}) == len(breaks)
    assert only(result, "recompile").facts["function"] == "forward"
    assert only(result, "compile_limit").facts["limit"] == 2


def test_lab_healthy_straggler_logs_are_not_failures() -> None:
    # Step-time lines only (rank 2 computes slower): no failure rule may fire on them.
    assert diagnose(str((LAB / "straggler_steps").relative_to(REPO)) + "/*.log").findings == []


BENIGN = sorted(p.name for p in PUBLIC.glob("benign__*.log"))


@pytest.mark.parametrize("name", BENIGN)
def test_benign_lines_are_not_findings(name: str) -> None:
    # NCCL INFO init, config dumps with timeouts, 'nan' inside words and paths, harmless warnings.
    result = public(name)
    assert result.findings == [] and result.severity.value == "ok"


def test_benign_synthetic_edge_cases(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_text(
        'config: {"timeout": 1800, "ddp_timeout": 1800, "nccl_timeout_s": 600}\n'
        "timeout=1800 error_rate=0.0 errors=0 nan_count=0\n"
        "loading /data/financial/nanogpt/train.bin\n"
        "NCCL INFO comm 0x5581 rank 0 nranks 8 cudaDev 0 busId 18000 - Init COMPLETE\n"
        "{'loss': 1.2345, 'grad_norm': 0.98, 'learning_rate': 3e-05, 'epoch': 0.5}\n"
    )
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["ok.log"]), ToolContext(roots=(tmp_path,)))
    assert result.findings == []


def test_a_multi_rank_job_log_with_everything_summarised_in_one_call() -> None:
    result = diagnose(str(PUBLIC.relative_to(REPO)) + "/*.log")
    categories = {f.category for f in result.findings}
    assert categories >= {"nccl_timeout", "nccl_init_network", "collective_mismatch", "cuda_oom", "nan_inf",
                          "dataloader", "gpu_hardware", "cuda_error", "compile", "inference"}
    severities = [f.severity for f in result.findings]
    assert severities == sorted(severities, key=["crit", "warn", "info"].index)
    assert len(result.conclusion) <= 3


def test_every_rule_names_a_branch_the_sop_has() -> None:
    # A rule naming a branch the SOP lacks made diagnose_logs raise KeyError building its next steps.
    from tools.logs.diagnose import load_rules

    branches = {p.stem for p in (REPO / "sop" / "branches").glob("*.toml")}
    rules, _ = load_rules()
    assert rules and {r.sop_branch for r in rules} - branches == set()
