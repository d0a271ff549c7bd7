"""sample_host on what round 10's development captures (tests/data/host/round10/dev; each file's source URL is its
line in dev/cases.jsonl) showed it missing (issue 32): nearly no memory available with much of swap already used.
The held-out half is never read by a test."""

from __future__ import annotations

from pathlib import Path

import anyio

from tools.core.context import ToolContext
from tools.host import SampleHostInput, SampleHostResult, sample_host

DEV = Path(__file__).resolve().parents[2] / "data" / "host" / "round10" / "dev"


def sample(root: Path, *files: str) -> SampleHostResult:
    return anyio.run(sample_host, SampleHostInput(from_files=list(files)), ToolContext(roots=(root.resolve(),)))


def test_nearly_nothing_available_with_half_the_swap_used_is_pressure() -> None:
    # https://github.com/qdrant/qdrant/issues/1920: free -m on a 7446 MiB node, 205 MiB available (2.8 %), 2076 of
    # 4095 MiB swap used; one search took 6 s.
    result = sample(DEV, "free__qdrant-qdrant-1920.txt")
    assert result.verdict == "memory_pressure" and result.severity.value == "crit"
    evidence = result.findings[0].evidence
    assert evidence.startswith("2.8 % of memory available") and "swap 50.7 % used (pages already pushed out" in evidence
