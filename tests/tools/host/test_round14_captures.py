"""sample_host on what round 14's development captures (tests/data/host/round14/dev; each file's source URL is its
line in dev/cases.jsonl) showed it missing (issue 32): /proc/meminfo pasted as it is, and a pool's process at one
core's worth on an idle host read as one thread's loop. The held-out half is never read by a test."""

from __future__ import annotations

from pathlib import Path

import anyio

from tools.core.context import ToolContext
from tools.host import SampleHostInput, SampleHostResult, sample_host
from tools.host.memory_formats import is_meminfo, read_meminfo

DEV = Path(__file__).resolve().parents[2] / "data" / "host" / "round14" / "dev"


def sample(*files: str) -> SampleHostResult:
    return anyio.run(sample_host, SampleHostInput(from_files=list(files)), ToolContext(roots=(DEV.resolve(),)))


def test_meminfo_with_little_available_and_pages_back_from_swap_is_pressure() -> None:
    # https://github.com/matomo-org/matomo/issues/15588: 64 GB host, MemAvailable 4999644 kB (7.6 %), page cache
    # squeezed to 0.5 GB and 2.5 GB in SwapCached: the swapping has happened, not a full page cache.
    result = sample("meminfo__matomo-org-matomo-1.txt")
    assert result.verdict == "memory_pressure" and result.memory_available_pct == 7.6
    assert "3.9 % of memory in the swap cache" in result.findings[0].evidence


def test_meminfo_readings_each_start_at_memtotal() -> None:
    text = ("MemTotal:       1000000 kB\nMemFree:          50000 kB\nMemAvailable:     80000 kB\nBuffers:  1000 kB\n"
            "Cached:   20000 kB\nSwapCached:      0 kB\nSwapTotal:   200000 kB\nSwapFree:    150000 kB\n"
            "MemTotal:       1000000 kB\nMemFree:          40000 kB\n")
    assert is_meminfo(text) and not is_meminfo("MemTotal: 1000000 kB\n")
    capture = read_meminfo(text)
    first, last = capture.memory_series
    assert (first.available_pct, first.cache_kb, first.swap_used_kb, first.swap_cached_kb) == (8.0, 21000, 50000, 0)
    # The second reading prints no MemAvailable: free + buffers + cache, said to be an estimate.
    assert last.available_estimated and last.available_kb == 40000 and capture.memory is last


def test_a_sleeping_process_at_one_core_is_a_pool_not_a_pinned_loop() -> None:
    # https://github.com/pevma/SEPTun-Mark-II/issues/3: a 93 % idle sensor whose Elasticsearch java is at 102 % in
    # state S: its threads share that core's worth of work; a loop that saturates its core is runnable (R).
    result = sample("top__pevma-septun-mark-ii-1.txt")
    assert result.verdict == "none"
    assert "main_loop_cpu_bound" not in [f.kind for f in result.findings]
