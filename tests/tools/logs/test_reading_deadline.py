"""diagnose_logs and grep_logs on logs too large for the call's time: reading stops at its share of the deadline
(tools/core/limits.LOG_READ_SHARE, GREP_READ_SHARE) and the part read is judged or searched, said to be partial; a cut
healthy log is unknown, as is a search that could not read everything.

The logs are real excerpts repeated: a development traceback (round 2) and a healthy vLLM start-up from the benign
corpus, whose lines the rules read as candidates (warnings, INFO lines), so both scan at a few MB/s.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from tests.helpers import DATA, base_env, stdio_client, structured
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs
from tools.logs.grep import GrepLogsInput, grep_logs
from tools.logs.reader import CUT_BY_DEADLINE

TRACEBACK = DATA / "logs" / "round2" / "dev" / "cuda_error__ace-504.log"
HEALTHY = DATA / "logs" / "benign_corpus" / "benign__marissazli-attnpiprobe-1.log"


def _repeated(seed: Path, target: Path, size: int) -> int:
    text = seed.read_bytes()
    copies = size // len(text) + 1
    target.write_bytes(text * copies)
    return copies


def test_each_repetition_of_a_traceback_is_counted(tmp_path: Path) -> None:
    # Lines classified once and kept (diagnose._ClassifiedLines) give every repetition its own hit: the count is the
    # number of copies, as it was when each line was classified anew.
    one = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[TRACEBACK.name]),
                    ToolContext(roots=(TRACEBACK.parent,), timeout_s=60))
    copies = _repeated(TRACEBACK, tmp_path / "rank0.log", 200 * TRACEBACK.stat().st_size - 1)
    many = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["rank0.log"]),
                     ToolContext(roots=(tmp_path,), timeout_s=60))
    assert copies == 200
    assert [(f.category, f.rule, f.count * copies) for f in one.findings] == [
        (f.category, f.rule, f.count) for f in many.findings]
    assert [f.facts for f in one.findings] == [f.facts for f in many.findings]


@pytest.mark.anyio
async def test_over_mcp_a_repeated_traceback_past_the_time_is_judged_on_the_part_read(tmp_path: Path) -> None:
    _repeated(TRACEBACK, tmp_path / "rank0.log", 40 * 1024 * 1024)
    async with stdio_client(base_env(), "--root", str(tmp_path), "--timeout", "3") as client:
        started = time.monotonic()
        result = structured(await client.call_tool("diagnose_logs", {"paths": ["rank0.log"]}))
        assert time.monotonic() - started < 3 + 2  # the answer comes by the deadline (process start-up aside)
    assert result["severity"] == "crit"
    assert [f["category"] for f in result["findings"]][0] == "cuda_error"
    [cut] = result["coverage"]
    assert cut["status"] == "partial" and CUT_BY_DEADLINE in cut["detail"], cut
    [total] = result["files"]
    assert 0 < total["lines"] and total["bytes"] < 40 * 1024 * 1024


def test_a_healthy_log_cut_by_the_time_is_unknown_not_ok(tmp_path: Path) -> None:
    _repeated(HEALTHY, tmp_path / "rank0.log", 64 * 1024 * 1024)
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["rank0.log"]),
                       ToolContext(roots=(tmp_path,), timeout_s=2))
    assert result.severity == "unknown"
    assert result.coverage[0].status == "partial" and CUT_BY_DEADLINE in result.coverage[0].detail
    assert result.decides is not None and "--timeout" in result.decides
    assert any("read only in part" in sentence for sentence in result.conclusion)


def test_a_search_cut_by_the_time_keeps_its_matches_and_is_unknown(tmp_path: Path) -> None:
    copies = _repeated(TRACEBACK, tmp_path / "rank0.log", 64 * 1024 * 1024)
    started = time.monotonic()
    result = anyio.run(grep_logs, GrepLogsInput(paths=["rank0.log"], pattern="INTERNAL ASSERT FAILED"),
                       ToolContext(roots=(tmp_path,), timeout_s=1))
    assert time.monotonic() - started < 1 + 1
    [total] = result.files
    assert result.severity == "unknown" and 0 < total.matches < copies
    assert result.coverage[0].status == "partial" and CUT_BY_DEADLINE in result.coverage[0].detail
    assert result.matches and result.matches[0].count == total.matches  # one line repeated: one folded match
    assert result.decides is not None and "--timeout" in result.decides
