"""grep_logs on real files: block boundaries, gzip, context, folding, ranks, bad input, ReDoS, huge and
binary files. (No stand-ins: files are written by the tests; the CLI runs as a real process.)"""

from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import base_env, run_cli
from tools.core.files import InputFile
from tools.logs.grep import fold_key
from tools.logs.reader import ScanStats, compile_pattern, scan_file


def _grep(tmp_path: Path, *args: str, timeout: str = "60") -> tuple[int, dict[str, Any], str]:
    done = run_cli(["grep-logs", "--json", "--root", str(tmp_path), "--timeout", timeout, *args], base_env())
    return done.returncode, (json.loads(done.stdout) if done.stdout else {}), done.stderr


@pytest.mark.parametrize("engine", ["auto", "re2"])
def test_scan_matches_a_line_by_line_reference_across_blocks(tmp_path: Path, engine: str) -> None:
    # ~13 MB: three 4 MiB blocks, matches placed at and around block edges.
    lines = [f"{i:08d} INFO step {i} loss 1.{i % 97} ok" for i in range(1, 330_001)]
    for i in (3, 131_000, 131_001, 262_143, 262_144, 329_999, 330_000):
        lines[i - 1] = f"{i:08d} ERROR something failed at step {i}"
    text = "\n".join(lines) + "\n"
    path = tmp_path / "big.log"
    path.write_text(text)
    (tmp_path / "big.log.gz").write_bytes(gzip.compress(text.encode(), compresslevel=1))
    expected = [n for n, line in enumerate(lines, start=1) if re.search(r"\berror\b", line, re.I)]
    for name in ("big.log", "big.log.gz"):
        stats = ScanStats()
        matcher = compile_pattern(r"\berror\b", engine)
        assert matcher.engine == ("hyperscan" if engine == "auto" else "re2")
        found = list(scan_file(InputFile(tmp_path / name, name, None), matcher, context=2,
                               deadline=time.monotonic() + 60, stats=stats))
        assert [m.number for m in found] == expected
        assert stats.lines == len(lines) and stats.compressed is (name.endswith(".gz"))
        for m in found:
            assert m.text.decode().startswith(f"{m.number:08d} ERROR")
            assert [n for n, _ in m.before] == [n for n in (m.number - 2, m.number - 1) if n >= 1]
            assert [t.decode()[:8] for _, t in m.before] == [f"{n:08d}" for n, _ in m.before]
            assert [n for n, _ in m.after] == [n for n in (m.number + 1, m.number + 2) if n <= len(lines)]


def test_tail_head_folding_and_ranks_from_prefixes(tmp_path: Path) -> None:
    # One combined torchrun --tee output: ranks come from the [defaultN]: prefixes.
    out = []
    for step in range(1, 201):
        for rank in range(4):
            out.append(f"[default{rank}]:2024-05-01 10:{step % 60:02d}:00 INFO step {step} loss 0.{step}")
    for rank in (1, 3):
        for n in range(3):
            out.append(f"[default{rank}]:2024-05-01 11:0{n}:00 ERROR NCCL timeout on attempt {n}")
    out.append("[default0]:2024-05-01 11:09:00 ERROR checkpoint write failed")
    (tmp_path / "job.out").write_text("\n".join(out) + "\n")
    code, data, _ = _grep(tmp_path, "--paths", "job.out")
    assert code == 0
    rows = [(m["rank"], m["count"], m["line"], m["last_line"]) for m in data["matches"]]
    assert rows == [(0, 1, 807, 807), (1, 3, 801, 803), (3, 3, 804, 806)]
    assert data["files"] == [{"file": "job.out", "rank": None, "matches": 7, "lines": 807, "bytes": len(
        ("\n".join(out) + "\n").encode()), "status": "scanned"}]
    # head keeps the first groups; tail the last.
    _, head, _ = _grep(tmp_path, "--paths", "job.out", "--mode", "head", "--max-matches", "1")
    _, tail, _ = _grep(tmp_path, "--paths", "job.out", "--mode", "tail", "--max-matches", "1")
    assert head["matches"][0]["line"] == 801 and tail["matches"][0]["line"] == 807


def test_errors_preset_is_word_bounded(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "INFO: loading financial dataset from /data/nanogpt/shard0\n"
        "Information: infinite sampler on; info level\n"
        "step 10 loss nan\n"
        "grad norm inf at step 11\n"
        "error_rate=0.0\n"
    )
    _, data, _ = _grep(tmp_path, "--paths", "train.log")
    assert [m["line"] for m in data["matches"]] == [3, 4]
    assert data["preset"] == "errors"


def test_redos_pattern_returns_and_bad_patterns_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("a" * 200_000 + "b\n" + "aaaa\n")
    # Catastrophic for a backtracking engine; RE2 answers at once, well inside the 20 s call limit.
    code, data, err = _grep(tmp_path, "--paths", "a.log", "--pattern", "(a+)+$", timeout="20")
    assert code == 0, err
    assert [m["line"] for m in data["matches"]] == [2]
    code, _, err = _grep(tmp_path, "--paths", "a.log", "--pattern", r"(a)\1")
    assert code == 3 and "invalid regex" in err and "no backreferences" in err
    code, _, err = _grep(tmp_path, "--paths", "a.log", "--pattern", "x" * 600)
    assert code == 3 and "pattern: String should have at most 512 characters" in err
    code, _, err = _grep(tmp_path, "--paths", "a.log", "--pattern", "x", "--preset", "nccl")
    assert code == 3 and "either pattern or preset" in err


def test_huge_sparse_binary_and_invalid_utf8_files(tmp_path: Path) -> None:
    sparse = tmp_path / "core.log"
    with sparse.open("wb") as f:
        f.truncate(2 * 1024**3)  # 2 GB of NUL bytes, sparse on disk
    (tmp_path / "model.bin").write_bytes(b"\x89HDF\r\n\x1a\n\x00\x00" + bytes(range(256)) * 64)
    (tmp_path / "mixed.log").write_bytes(
        b"ok line\n" + b"bad \xff\xfe utf8 ERROR here\n" + b"long " + b"x" * 5000 + b" error end\n")
    started = time.monotonic()
    code, data, err = _grep(tmp_path, "--paths", "*.log,*.bin")
    # Two of three inputs were not searched: what is in them is not in the answer, so it is unknown (exit 4).
    assert code == 4 and data["severity"] == "unknown", err
    assert time.monotonic() - started < 30  # skipped by sniffing, not scanned
    status = {f["file"]: f["status"] for f in data["files"]}
    assert status == {"core.log": "binary: skipped", "mixed.log": "scanned", "model.bin": "binary: skipped"}
    assert {c["input"]: c["status"] for c in data["coverage"]} == {
        "core.log": "not_understood", "mixed.log": "read", "model.bin": "not_understood"}
    assert data["conclusion"][1].startswith("Not searched: 2 of 3 input(s) (core.log: binary")
    texts = [m["text"] for m in data["matches"]]
    assert texts[0] == "bad \ufffd\ufffd utf8 ERROR here"
    assert texts[1].startswith("long xxx") and texts[1].endswith("…[+4615 chars]") and len(texts[1]) < 420


def test_paths_stay_inside_the_roots(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "rank0.log").write_text("ERROR inside\n")
    (tmp_path / "secret.log").write_text("ERROR outside\n")
    (root / "logs" / "rank1.log").symlink_to(tmp_path / "secret.log")
    code, data, err = _grep(root, "--paths", "logs/*.log")
    assert code == 0, err
    assert [f["file"] for f in data["files"]] == ["logs/rank0.log"]  # the escaping symlink is not followed
    code, data, err = _grep(root, "--paths", str(root) + "/**/rank*.log")  # absolute, inside a root
    assert code == 0 and [f["file"] for f in data["files"]] == ["logs/rank0.log"], err
    for bad, message in (("../secret.log", "resolves to"), ("../*.log", "starts outside the allowed roots"),
                         (str(tmp_path / "secret.log"), "outside the allowed roots"),
                         ("logs/rank1.log", "through a symlink"), ("nothing/*.log", "no file under the allowed roots"),
                         ("/**/*.log", "starts outside the allowed roots"),
                         (str(tmp_path) + "/*.log", "starts outside the allowed roots"),
                         ("logs", "is a directory")):
        code, _, err = _grep(root, "--paths", bad)
        assert code == 3 and message in err, (bad, err)


def test_fold_key_ignores_prefix_timestamp_and_digits() -> None:
    a = fold_key("[default1]:2024-05-01 11:00:00 ERROR NCCL timeout on attempt 0")
    b = fold_key("[default1]:2024-05-01 11:02:07 ERROR NCCL timeout on attempt 2")
    assert a == b == "error nccl timeout on attempt #"


def test_truncated_gzip_is_reported_and_other_files_still_searched(tmp_path: Path) -> None:
    whole = gzip.compress(b"".join(b"line %d ERROR x\n" % i for i in range(20000)))
    (tmp_path / "rank0.log.gz").write_bytes(whole[: len(whole) // 2])  # a copy cut off mid-stream
    (tmp_path / "rank1.log").write_text("fine\nERROR in rank1\n")
    code, data, err = _grep(tmp_path, "--paths", "rank*")
    assert code == 4 and data["severity"] == "unknown", err  # rank0's matches are not in the answer
    status = {f["file"]: f["status"] for f in data["files"]}
    assert status["rank0.log.gz"].startswith("unreadable: read failed")
    coverage = {c["input"]: c for c in data["coverage"]}
    assert coverage["rank0.log.gz"]["status"] == "not_understood" and coverage["rank1.log"]["status"] == "read"
    assert status["rank1.log"] == "scanned"
    assert any(m["file"] == "rank1.log" and m["line"] == 2 for m in data["matches"])


def test_a_pattern_matching_every_byte_stays_linear(tmp_path: Path) -> None:
    # '.' matches at every byte: Hyperscan would report ~6 million events; past its bound the block
    # goes to RE2, which reports each line once. Same lines either way.
    big = tmp_path / "big.log"
    big.write_bytes((b"z" * 99 + b"\n") * 60_000)  # 6 MB, 6 million single-byte matches
    matcher = compile_pattern(".")
    stats = ScanStats()
    found = list(scan_file(InputFile(big, "big.log", None), matcher, context=0, deadline=time.monotonic() + 60,
                           stats=stats))
    assert [m.number for m in found] == list(range(1, 60_001))


def test_one_cached_matcher_serves_concurrent_scans(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "a.log"
    path.write_bytes(b"".join(b"%d ok\n%d ERROR\n" % (i, i) for i in range(30_000)))
    matcher = compile_pattern(r"\berror\b")
    counts: list[int] = []

    def scan() -> None:
        counts.append(len(list(scan_file(InputFile(path, "a.log", None), matcher, context=0,
                                         deadline=time.monotonic() + 60, stats=ScanStats()))))

    threads = [threading.Thread(target=scan) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == [30_000] * 4


def test_corrupt_gzip_is_reported(tmp_path: Path) -> None:
    (tmp_path / "rank0.log.gz").write_bytes(b"\x1f\x8b\x08\x00garbage-not-gzip" * 10)
    code, data, err = _grep(tmp_path, "rank0.log.gz")
    # Nothing at all could be read: the call fails (exit 3) and says which file and why.
    assert code == 3 and "none of the 1 file(s) could be read (rank0.log.gz: unreadable: " in err, err
