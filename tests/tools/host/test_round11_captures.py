"""sample_host on what round 11's development captures (tests/data/host/round11/dev; each file's source URL is its
line in dev/cases.jsonl) and one of round 10's showed it missing (issue 32): per-CPU top lines waiting on I/O, a
host with no swap and nearly nothing available, iostat reports that are all since boot. The held-out half is never
read by a test."""

from __future__ import annotations

from pathlib import Path

import anyio

from tools.core.context import ToolContext
from tools.host import SampleHostInput, SampleHostResult, sample_host

DATA = Path(__file__).resolve().parents[2] / "data" / "host"


def sample(root: Path, *files: str) -> SampleHostResult:
    return anyio.run(sample_host, SampleHostInput(from_files=list(files)), ToolContext(roots=(root.resolve(),)))


def test_per_cpu_top_lines_idle_in_iowait_are_io_bound_not_busy() -> None:
    # https://pastebin.com/7WMX3Ys4: old top's "Cpu0 : 38.1%us, ... 0.0%id, 50.8%wa" for four CPUs and no summary
    # line; mysqld writing 45-180 MB/s. 0 % idle is not 100 % computing: 60 % of it is waiting on the disk.
    result = sample(DATA / "round11" / "dev", "top__pastebin-7WMX3Ys4.txt")
    assert result.verdict == "io_bound"
    assert result.cpu.iowait_pct == 60.4 and result.cpu.user_pct == 33.0
    assert "cpu_bound" not in [f.kind for f in result.findings]


def test_nearly_nothing_available_and_no_swap_is_pressure() -> None:
    # https://github.com/zulip/zulip/issues/25906: top on a 1983 MiB server, 83.5 MiB available (4.2 %), no swap.
    result = sample(DATA / "round11" / "dev", "top__zulip-zulip-25906.txt")
    assert result.verdict == "memory_pressure"
    assert result.findings[0].evidence.startswith("4.2 % of memory available (top) with no swap")


def test_iostat_reports_each_after_a_banner_are_all_since_boot() -> None:
    # https://gist.github.com/ohlol/1227949: `iostat -x sdb` in a shell loop, so every report is a new run's first,
    # the averages since boot (identical to the second decimal): no interval was sampled.
    result = sample(DATA / "round11" / "dev", "iostat__gist-ohlol-1227949.txt")
    assert result.severity.value == "unknown" and result.verdict == "none"
    assert "since-boot" in " ".join(result.conclusion)


def test_iostat_totals_spanning_days_are_since_boot_without_a_banner() -> None:
    # https://serverfault.com/questions/412003: one default iostat report pasted without its banner; sdc's
    # Blk_read 36726612 at 43.71 Blk_read/s spans 9.7 days, the averages since boot.
    result = sample(DATA / "round10" / "dev", "iostat__serverfault-412003.txt")
    assert result.severity.value == "unknown"
    assert "since-boot" in " ".join(result.conclusion)
