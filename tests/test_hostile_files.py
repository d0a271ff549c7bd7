"""Every reader against files that are not what they claim: a FIFO named like the input (nothing may block on it:
the call ends at once with a row or a refusal that says it is a FIFO), and a folder where a file is expected."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, base_env, run_cli

KERNEL_REPORT = REPO / "tests" / "data" / "kernels" / "files" / "speedy_scan-2020.3-details.csv"

# Each tool that opens a caller's file, with that file in its argument.
CALLS = {
    "grep-logs": ["grep-logs", "{f}", "--pattern", "x"],
    "diagnose-logs": ["diagnose-logs", "{f}"],
    "summarize-trace": ["summarize-trace", "{f}"],
    "dump-stacks": ["dump-stacks", "--from-files", "{f}"],
    "analyze-flight-recorder": ["analyze-flight-recorder", "{f}"],
    "find-stragglers": ["find-stragglers", "--logs", "{f}"],
    "analyze-memory": ["analyze-memory", "{f}"],
    "inference-metrics": ["inference-metrics", "{f}"],
    "diagnose-compile": ["diagnose-compile", "{f}"],
    "compare-runs": ["compare-runs", "--before", "{f}", "--after", "{f}"],
    "check-interconnect": ["check-interconnect", "--nccl-logs", "{f}"],
    "check-interconnect FILES": ["check-interconnect", "{f}"],  # sorted by its first bytes: that read must not block
    "telemetry-history --step-logs": ["telemetry-history", "http://127.0.0.1:9/", "--step-logs", "{f}"],
    # Two roots: a relative path would be ambiguous, so the FIFO is named absolutely ({dir}: the test's folder).
    "analyze-kernels --trace": ["analyze-kernels", str(KERNEL_REPORT), "--trace", "{dir}/{f}",
                                "--root", str(KERNEL_REPORT.parent)],
    "profile-cpu": ["profile-cpu", "--from-files", "{f}"],
    "sample-host": ["sample-host", "--from-files", "{f}"],
    "nvidia-smi-query": ["nvidia-smi-query", "--csv-path", "{f}"],
    "analyze-kernels": ["analyze-kernels", "{f}"],
    "gpu-activity": ["gpu-activity", "{f}"],
}


@pytest.mark.parametrize("tool", sorted(CALLS))
def test_a_fifo_never_blocks_and_is_named(tmp_path: Path, tool: str) -> None:
    os.mkfifo(tmp_path / "rank0.log")  # no writer: an open() for reading would wait for ever
    args = [a.replace("{f}", "rank0.log").replace("{dir}", str(tmp_path)) for a in CALLS[tool]]
    started = time.monotonic()
    done = run_cli([*args, "--json", "--timeout", "10", "--root", str(tmp_path)], base_env(), timeout=30)
    assert time.monotonic() - started < 10, tool  # refused before anything waits, not at the deadline
    said = done.stderr + done.stdout
    assert "internal error" not in said and "Traceback" not in said, said[-1500:]
    assert done.returncode in (0, 1, 2, 3)
    assert "FIFO" in said or "not a regular file" in said or "neither a regular file" in said, (tool, said[-1500:])


@pytest.mark.parametrize("tool", ["diagnose-logs", "analyze-memory", "nvidia-smi-query", "inference-metrics",
                                  "compare-runs", "diagnose-compile"])
def test_a_folder_where_a_file_is_expected_is_a_clear_refusal(tmp_path: Path, tool: str) -> None:
    (tmp_path / "rank0.log").mkdir()
    args = [a.replace("{f}", "rank0.log") for a in CALLS[tool]]
    done = run_cli([*args, "--timeout", "10", "--root", str(tmp_path)], base_env(), timeout=30)
    assert done.returncode == 3 and "internal error" not in done.stderr, (tool, done.stderr[-1500:])
    assert "rank0.log" in done.stderr, done.stderr


def test_one_rank_log_that_cannot_be_read_is_a_row_and_the_others_are_read(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    os.mkfifo(tmp_path / "rank1.log")
    (tmp_path / "rank2.log").write_text("step 1 loss 2.0\n")
    done = run_cli(["diagnose-logs", "rank0.log", "rank1.log", "rank2.log", "--json", "--root", str(tmp_path)],
                   base_env(), timeout=30)
    data = json.loads(done.stdout)
    assert done.returncode == 2 and data["findings"][0]["rule"] == "cuda_oom", data["findings"]
    status = {f["file"]: f["status"] for f in data["files"]}
    assert status["rank0.log"] == status["rank2.log"] == "scanned"
    assert status["rank1.log"].startswith("unreadable: rank1.log is a FIFO"), status


@pytest.mark.anyio
async def test_over_mcp_a_fifo_is_refused_at_once_and_the_server_answers_after(tmp_path: Path) -> None:
    from tests.helpers import stdio_client

    os.mkfifo(tmp_path / "rank0.log")
    (tmp_path / "rank1.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    async with stdio_client(base_env(), "--root", str(tmp_path), "--timeout", "10") as client:
        started = time.monotonic()
        stacks = await client.call_tool("dump_stacks", {"from_files": ["rank0.log"]})
        trace = await client.call_tool("summarize_trace", {"path": "rank0.log"})
        memory = await client.call_tool("analyze_memory", {"path": "rank0.log"})
        elapsed = time.monotonic() - started
        after = await client.call_tool("diagnose_logs", {"paths": ["rank1.log"]})
    assert elapsed < 10  # none waited for a writer
    assert stacks.structured_content["ranks"][0]["detail"].startswith("rank0.log is a FIFO")
    assert trace.is_error and "neither a regular file nor a folder" in trace.content[0].text
    assert memory.is_error and "is a FIFO, not a regular file" in memory.content[0].text
    assert after.is_error is False and after.structured_content["findings"][0]["rule"] == "cuda_oom"
