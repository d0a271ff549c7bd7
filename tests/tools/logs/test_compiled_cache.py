"""The compiled rule sets kept between processes (tools/core/compiled_cache.py, used by tools/logs/reader.py): kept
once, loaded whole, a damaged or foreign file compiled again, nothing kept when turned off."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tools.logs.reader import LineMatcher

# Ten real rule-like patterns (more than a caller's one-off grep, so the set is kept).
PATTERNS = [r"CUDA out of memory", r"NCCL WARN", r"Watchdog caught collective", r"\bXid\b", r"Segmentation fault",
            r"RuntimeError: .*", r"loss[=:] ?nan", r"ProcessGroupNCCL", r"fallen off the bus", r"Killed\s*$"]
LINE = b"[rank3]:RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def _ids(matcher: LineMatcher) -> list[frozenset[int]]:
    return [ids for _, _, ids in matcher.spans(b"step 10 loss 2.31\n" + LINE)]


def test_a_rule_set_is_kept_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("GPU_TRIAGE_NO_CACHE", raising=False)
    first = LineMatcher(PATTERNS, case_sensitive=False)
    assert first.engine == "hyperscan"
    [kept] = list((tmp_path / "gpu-triage-mcp").glob("*.bin"))
    second = LineMatcher(PATTERNS, case_sensitive=False)
    assert _ids(first) == _ids(second) == [frozenset({0, 5})]
    # Damaged (a torn write, another build's bytes): compiled again, and kept whole again.
    kept.write_bytes(kept.read_bytes()[:1000])
    third = LineMatcher(PATTERNS, case_sensitive=False)
    assert third.engine == "hyperscan" and _ids(third) == [frozenset({0, 5})]
    assert kept.stat().st_size > 1000
    # A caller's single pattern is not kept.
    LineMatcher([r"error"], case_sensitive=False)
    assert len(list((tmp_path / "gpu-triage-mcp").glob("*.bin"))) == 1


def test_nothing_is_kept_when_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("GPU_TRIAGE_NO_CACHE", "1")
    matcher = LineMatcher(PATTERNS, case_sensitive=False)
    assert _ids(matcher) == [frozenset({0, 5})]
    assert not (tmp_path / "gpu-triage-mcp").exists()


def test_a_fifo_where_the_cache_file_goes_is_never_waited_on(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Something planted at the cache path (a FIFO nobody writes to) must not hang the first call: it is refused as
    # not a regular file and the rule set is compiled instead; a later call is served the same way.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("GPU_TRIAGE_NO_CACHE", raising=False)
    LineMatcher(PATTERNS, case_sensitive=False)
    [kept] = list((tmp_path / "gpu-triage-mcp").glob("*.bin"))
    kept.unlink()
    os.mkfifo(kept)
    done: list[LineMatcher] = []
    worker = threading.Thread(target=lambda: done.append(LineMatcher(PATTERNS, case_sensitive=False)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done and _ids(done[0]) == [frozenset({0, 5})]
    assert _ids(LineMatcher(PATTERNS, case_sensitive=False)) == [frozenset({0, 5})]
