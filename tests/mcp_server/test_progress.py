"""MCP progress through the real SDK client's progress callback: a live sample (the tool says how far it is), a
big trace (the tool says what it reads; the figure is the seconds it has run), increasing, at most a few a second."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, base_env, stdio_client

pytestmark = pytest.mark.anyio

sys.path.insert(0, str(REPO))
from benchmarks.traces import generate  # noqa: E402  (the benchmark's replicated real trace)

SOURCE = REPO / "tests" / "data" / "traces" / "resnet50_num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"


async def test_a_live_sample_and_a_big_trace_report_progress(tmp_path: Path) -> None:
    generate(SOURCE, tmp_path / "big.pt.trace.json", 250_000_000)
    seen: dict[str, list[tuple[float, float | None, str | None, float]]] = {"sample": [], "trace": []}

    def recorder(name: str):  # type: ignore[no-untyped-def]
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen[name].append((progress, total, message, time.monotonic()))
        return on_progress

    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        sampled = await client.call_tool("sample_host", {"duration_s": 3}, progress_callback=recorder("sample"))
        traced = await client.call_tool("summarize_trace", {"path": "big.pt.trace.json"},
                                        progress_callback=recorder("trace"))
        quiet = await client.call_tool("sample_host", {"duration_s": 1})  # no progressToken: no notification
    assert not sampled.is_error and not traced.is_error and not quiet.is_error
    sample = seen["sample"]
    assert 3 <= len(sample) <= 8, sample  # one every 0.5 s over 3 s
    assert all(total == 100 for _, total, _, _ in sample)
    assert [p for p, *_ in sample] == sorted({p for p, *_ in sample}) and sample[-1][0] < 100  # increasing
    assert any(message and message.startswith("sampled ") and message.endswith(" of 3 s") for _, _, message, _ in
               sample), sample
    trace = seen["trace"]
    # No measure of the work: the seconds it has run, with no total (a share of the 60 s limit would read 2 %).
    assert all(total is None for _, total, _, _ in trace), trace
    assert [p for p, *_ in trace] == sorted(p for p, *_ in trace) and 0.4 <= trace[0][0] <= trace[-1][0] < 60
    size = (tmp_path / "big.pt.trace.json").stat().st_size
    assert trace and {message for _, _, message, _ in trace} == {f"reading 1 trace(s), {size / 2**20:.2f} MiB"}, trace
    span = trace[-1][3] - trace[0][3]
    assert len(trace) <= span / 0.5 + 2, trace  # at most two a second (counted: arrival times can bunch)
