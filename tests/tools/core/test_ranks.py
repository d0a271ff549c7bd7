"""How ranks are named in file names and line prefixes, and how a set of ranks (or GPU indices) is written."""

from __future__ import annotations

import pytest

from tools.core.ranks import compact_ranges, rank_of_line, rank_of_path


@pytest.mark.parametrize(("path", "rank"), [
    ("rank3.log", 3), ("logs/rank_12.txt", 12), ("job-r7-out.log", 7), ("node1/rank-03.log", 3),
    ("run/attempt_0/5/stderr.log", 5), ("worker_2.log", 2), ("node1/stderr.log", None), ("train.log", None),
    ("ranking.log", None),
])
def test_rank_from_path(path: str, rank: int | None) -> None:
    assert rank_of_path(path) == rank


@pytest.mark.parametrize(("line", "rank"), [
    (b"[rank3]:[E501] Watchdog caught", 3), (b"[default12]:step 1", 12), (b"7: NCCL WARN x", 7),
    (b"step 7: loss 1.0", None), (b"2024-05-01 10:00:00 INFO", None),
    (b"[1,3]<stderr>:Traceback (most recent call last):", 3), (b"[1,0]<stdout>:[2024] Stalled ranks:", 0),
    (b"[1,3] stderr: x", None),
])
def test_rank_from_line(line: bytes, rank: int | None) -> None:
    assert rank_of_line(line) == rank


def test_compact_ranges() -> None:
    assert compact_ranges([7, 0, 1, 2, 3, 5]) == "0-3,5,7"
    assert compact_ranges([]) == ""
