"""diagnose_logs' error lines and network failures (tools/logs/lines.py, sop/error_lines.toml) on real excerpts of
tests/data/logs/round2/dev (source and label of each in its cases.jsonl): a line at error level is judged by the
exception taxonomy's message patterns wherever it is printed (a Rust server's ERROR line, a JSON error body, TGI's
validation error, llama.cpp's failure statements); an error line the taxonomy does not know stays quiet; IB
completion errors and failed connections while the process group is built are nccl_init_network, the cause of a
watchdog timeout on the same line or after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, LogFinding, classify, diagnose_logs
from tools.logs.lines import error_line_message

DEV = DATA / "logs" / "round2" / "dev"


def diagnose(name: str, root: Path = DEV) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(root.resolve(),)))


def serious(result: DiagnoseLogsResult) -> list[LogFinding]:
    return [f for f in result.findings if f.severity != "info"]


def _write(tmp_path: Path, text: str) -> str:
    (tmp_path / "job.log").write_text(text)
    return "job.log"


@pytest.mark.parametrize(("name", "category", "severity", "facts"), [
    # A Rust server's ERROR line (tracing's `ERROR target: ...`): the clause the taxonomy knows is the error.
    ("inference__avarok-cybersecurity-atlas-375.log", "inference", "crit",
     {"error": "KV cache exhausted: no free blocks"}),
    ("inference__avarok-cybersecurity-atlas-1114.log", "inference", "crit",
     {"error": "KV cache exhausted: no free blocks"}),
    # TGI's validation error, printed bare: the prompt's size from 'Given: N `inputs` tokens'.
    ("inference__huggingface-llm-vscode-94.log", "inference", "crit",
     {"tokens": 3474, "max_tokens": 2048, "error": "`inputs` tokens + `max_new_tokens` must be <= 2048."}),
    ("inference__huggingface-chat-ui-1149.log", "inference", "crit", {"tokens": 6204, "max_tokens": 8192}),
    # llama-server's JSON error body; its n_prompt_tokens / n_ctx beside the message.
    ("inference__oobabooga-textgen-7257.log", "inference", "crit",
     {"tokens": 14429, "max_tokens": 8192,
      "error": "the request exceeds the available context size. try increasing the context size or enable context "
               "shift"}),
    # llama.cpp's verbose log: `send_error: ..., error: ...`, the prompt's size from the slot's line above it.
    ("inference__containers-ramalama-1914.log", "inference", "crit", {"tokens": 2059, "max_tokens": 2048}),
    # llama.cpp: the retries are not findings; the decode that fails with ret = 1 (no KV slot) is.
    ("inference__ggml-org-llama-cpp-1.log", "inference", "crit",
     {"error": "failed to decode the batch, n_batch = 1, ret = 1"}),
    # LocalAI: the gRPC backend died mid-request (Unavailable, EOF).
    ("inference__mudler-localai-3888.log", "inference", "crit",
     {"error": "rpc error: code = Unavailable desc = error reading from server: EOF"}),
])
def test_error_lines_by_meaning(name: str, category: str, severity: str, facts: dict[str, Any]) -> None:
    found = [f for f in diagnose(name).findings if f.category == category]
    assert found, name
    assert found[0].severity == severity
    for key, value in facts.items():
        assert found[0].facts.get(key) == value, (key, found[0].facts)


def test_llama_cpp_retries_are_one_finding_at_the_failed_decode() -> None:
    found = [f for f in diagnose("inference__ggml-org-llama-cpp-1.log").findings if f.category == "inference"]
    assert len(found) == 1 and found[0].count == 1 and found[0].first.line == 10


def test_ib_completion_error_is_the_cause_of_the_watchdog_abort() -> None:
    # One pasted line: ProcessGroupNCCL's abort, ncclRemoteError and, as its "Last error", NET/IB's completion error.
    result = diagnose("nccl_init_network__tatsu-lab-stanford-alpaca-1.log")
    network = next(f for f in result.findings if f.category == "nccl_init_network")
    assert network.rule == "ib_completion_error" and network.severity == "crit"
    assert network.facts["ib_status"] == 12 and network.facts["vendor_err"] == 129
    assert network.facts["transport"] == "NET/IB" and network.facts["nccl_error"] == "ncclRemoteError"
    assert network.facts["nccl_version"] == "2.14.3" and network.facts["peer"] == "11.214.147.122<39138>"
    assert str(network.facts["error"]).startswith("Got completion from peer 11.214.147.122<39138> with error 12")
    timeout = next(f for f in result.findings if f.category == "nccl_timeout")  # both stay
    assert str(timeout.facts["after_network_error"]).startswith("ib_completion_error at ")
    assert serious(result)[0] is network  # the cause leads the conclusion
    assert "ib_completion_error" in result.conclusion[0]


def test_gloo_full_mesh_failure_under_a_ray_prefix() -> None:
    result = diagnose("nccl_init_network__gpustack-gpustack-1.log")
    found = serious(result)
    assert [f.category for f in found] == ["nccl_init_network"]
    assert found[0].rule == "socket_connect_failed" and found[0].severity == "crit"
    assert found[0].facts["error"] == "Gloo connectFullMesh failed" and found[0].ranks == [1]
    assert found[0].facts["backend"] == "Gloo"


def test_ib_completion_under_nccl_warn_joins_that_finding() -> None:
    # tests/data/logs/public: the newer `status=12 ... vendor err 129` wording, which NCCL WARN's rule takes.
    result = diagnose("nccl_init_network__nccl-1405.log", DATA / "logs" / "public")
    assert not any(f.rule == "ib_completion_error" for f in result.findings)
    found = [f for f in result.findings if f.rule == "nccl_warn"]
    assert len(found) == 1
    assert found[0].facts["ib_status"] == 12 and found[0].facts["vendor_err"] == 129
    assert found[0].facts["transport"] == "NET/IB"


def test_connection_reset_during_training_is_not_a_connect_failure(tmp_path: Path) -> None:
    # Gloo's pair closed by a peer that died mid-training (wild: nccl_timeout) is not the connect mechanism.
    line = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [10.0.0.2]:25266: " \
           "Connection reset by peer\n"
    result = diagnose(_write(tmp_path, line), tmp_path)
    assert not any(f.rule == "socket_connect_failed" for f in result.findings)
    # It is the collective failing because that peer went first: the peer's address named.
    closed = [f for f in result.findings if f.rule == "peer_closed"]
    assert closed and closed[0].category == "nccl_timeout" and closed[0].facts["peer"] == "[10.0.0.2]:25266"
    connect = "RuntimeError: [/opt/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:38371: Connection refused\n"
    result = diagnose(_write(tmp_path, connect), tmp_path)
    found = [f for f in result.findings if f.rule == "socket_connect_failed"]
    assert found and found[0].facts["host"] == "127.0.1.1" and found[0].facts["port"] == 38371


def test_an_address_family_the_host_lacks_is_an_attempt_not_a_failure(tmp_path: Path) -> None:
    # c10d's per-address warning on an IPv6-less host (errno 99), then training: no failure. With its closing
    # "failed to connect to any network address" line (every address failed), the store is unreachable.
    attempt = ("[W socket.cpp:697] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - "
               "Cannot assign requested address).\n")
    result = diagnose(_write(tmp_path, attempt + "[rank0]: step 10 loss 4.1\n"), tmp_path)
    assert [(f.rule, f.severity) for f in result.findings] == [("store_connect_address_family", "info")]
    assert result.findings[0].facts["errno"] == 99
    failed = attempt + ("[E socket.cpp:719] [c10d] The client socket has failed to connect to any network address "
                        "of (localhost, 29500).\n")
    result = diagnose(_write(tmp_path, failed), tmp_path)
    assert any(f.rule == "store_connect" and f.severity == "crit" for f in result.findings)
    timed_out = ("[W socket.cpp:558] [c10d] The client socket has failed to connect to [::ffff:10.0.0.5]:40323 "
                 "(errno: 110 - Connection timed out).\n")
    assert any(f.rule == "store_connect" for f in diagnose(_write(tmp_path, timed_out), tmp_path).findings)


@pytest.mark.parametrize(("line", "message"), [
    ("ERROR phase_continue_prefills::run_standard: Prefill chunk error: KV cache exhausted",
     "phase_continue_prefills::run_standard: Prefill chunk error: KV cache exhausted"),
    ("2024-05-01 12:00:00,123 - vllm.engine - ERROR - Engine loop died", "Engine loop died"),
    ("[E528 08:52:46.164295950 ProcessGroupGloo.cpp:145] Gloo connectFullMesh failed",
     "Gloo connectFullMesh failed"),
    ("E1201 12:00:00.123456 4242 server.cc:42] failed to load model", "failed to load model"),
    ('time="2024-01-01T00:00:00Z" level=error msg="backend died"', 'msg="backend died"'),
    ('{"error":{"code":500,"message":"rpc error: code = Unavailable","type":""}}', "rpc error: code = Unavailable"),
    ("Error: model not found", "model not found"),
    ("update_slots : failed to decode the batch, n_batch = 1, ret = 1",
     "failed to decode the batch, n_batch = 1, ret = 1"),
])
def test_error_line_forms(line: str, message: str) -> None:
    assert error_line_message(line.encode()) == message


@pytest.mark.parametrize("line", [
    "INFO:     Uvicorn running on http://localhost:21001 (Press CTRL+C to quit)",
    "epoch 3 | loss: 0.31, error: 0.02",
    "NCCL_DEBUG=ERROR set",
    "validation error rate 0.12",
])
def test_not_error_lines(line: str) -> None:
    assert error_line_message(line.encode()) is None


def test_unknown_error_lines_stay_quiet(tmp_path: Path) -> None:
    # Servers log errors they recover from: an error line the taxonomy does not know is no finding at all.
    text = ("2024-05-01 12:00:00 | ERROR | stderr | INFO:     Started server process [4048844]\n"
            "ERROR api: request 42 failed: upstream closed the connection\n"
            "level=error msg=\"cannot parse config\"\n")
    result = diagnose(_write(tmp_path, text), tmp_path)
    assert not serious(result)


def test_error_line_that_retries_is_quiet(tmp_path: Path) -> None:
    text = "update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 256\n"
    assert classify(text.encode()) is not None  # the evidence rule sees it
    assert not serious(diagnose(_write(tmp_path, text), tmp_path))


def test_error_line_and_its_traceback_are_one_finding(tmp_path: Path) -> None:
    text = ("ERROR prefill: KV cache exhausted: no free blocks\n"
            "Traceback (most recent call last):\n"
            '  File "/srv/app.py", line 12, in step\n'
            "    raise RuntimeError(msg)\n"
            "RuntimeError: KV cache exhausted: no free blocks\n")
    found = [f for f in diagnose(_write(tmp_path, text), tmp_path).findings if f.category == "inference"]
    assert len(found) == 1 and found[0].facts["exception"] == "RuntimeError"


def test_every_first_pass_candidate_finds_every_line_its_rule_matches() -> None:
    """A rule's `candidate` (tools/logs/diagnose.load_rules) is a cheaper superset of its `match` for the first
    pass: a line the match would classify but the candidate misses is a finding silently lost. Checked on every line
    of the committed development logs, for every rule (a prefix-tolerant anchor is a first pass too)."""
    import re2  # type: ignore[import-untyped]

    from tests.helpers import DATA
    from tools.logs.diagnose import load_rules

    rules, matcher = load_rules()
    first_pass = [(rule, re2.compile(pattern.encode())) for rule, pattern in zip(rules, matcher.patterns, strict=True)]
    checked = 0
    folders = ("wild", "public", "round2/dev", "lab", "steps", "compile")
    for log in sorted(p for folder in folders for p in (DATA / "logs" / folder).rglob("*.log")):
        for line in log.read_bytes().splitlines():
            for rule, candidate in first_pass:
                if rule.match.search(line) is not None:
                    checked += 1
                    assert candidate.search(line) is not None, (rule.id, log.name, line[:200])
    assert checked > 500
