"""A log that changes under the scan, as a running job's logs do: rotated (renamed, a new file in its place),
truncated (logrotate's copytruncate) or deleted between two blocks. The lines read stay right and the file's
row says what happened. Real files; the scan is paused between blocks by consuming its matches one by one."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tools.core.files import InputFile
from tools.core.limits import LOG_CHUNK_BYTES
from tools.logs.reader import ScanStats, compile_pattern, scan_file

LINE = b"[rank0]: step %07d loss 1.25 NCCL WARN slow\n"


def _big_log(path: Path) -> int:
    """A log of three scan blocks, one match a line; returns the line count."""
    lines = 3 * LOG_CHUNK_BYTES // len(LINE % 0) + 1
    path.write_bytes(b"".join(LINE % i for i in range(lines)))
    return lines


def _scan_changing(path: Path, change: str) -> tuple[int, ScanStats]:
    stats = ScanStats()
    found = scan_file(InputFile(path, path.name, 0), compile_pattern("NCCL WARN"), context=0,
                      deadline=time.monotonic() + 60, stats=stats)
    next(found)  # the first block is read; the rest is not
    if change == "truncated":
        os.truncate(path, 100)
    elif change == "rotated":
        path.rename(path.with_name(path.name + ".1"))
        path.write_bytes(LINE % 9999999)
    elif change == "deleted":
        path.unlink()
    return 1 + sum(1 for _ in found), stats


def test_a_log_truncated_under_the_scan_keeps_what_was_read_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    lines = _big_log(path)
    matched, stats = _scan_changing(path, "truncated")
    assert 0 < matched < lines  # the lines before the cut, not more
    assert stats.changed is not None and stats.changed.startswith("truncated while read (to 100 B, after 4.00 MiB")
    assert stats.status().startswith("scanned; truncated while read")


def test_a_log_rotated_under_the_scan_is_read_to_its_end(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    lines = _big_log(path)
    matched, stats = _scan_changing(path, "rotated")
    assert matched == lines  # the open file is the old one, read whole; the new file's line is not in it
    assert stats.changed == "rotated while read: these are the old file's lines, the new file was not read"


def test_a_log_deleted_under_the_scan_is_read_to_its_end(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    lines = _big_log(path)
    matched, stats = _scan_changing(path, "deleted")
    assert matched == lines
    assert stats.changed == "deleted while read: what was read is all there was"


def test_a_log_left_alone_is_just_scanned(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    lines = _big_log(path)
    matched, stats = _scan_changing(path, "none")
    assert matched == lines and stats.changed is None and stats.status() == "scanned"
