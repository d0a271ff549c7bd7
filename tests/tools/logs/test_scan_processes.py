"""diagnose_logs' scan of a large input (tools/logs/diagnose.py _scan_files): files taken in turns by this thread and
a spawned process give the same groups, hits and totals as the threads; tools.core.files.read_blocks_reused's reused
buffer cuts blocks where tools.core.files.read_blocks does."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tests.helpers import DATA, base_env, stdio_client, structured
from tools.core.context import ToolContext
from tools.core.files import open_input, read_blocks, read_blocks_reused
from tools.core.limits import LOG_CHUNK_BYTES
from tools.logs import diagnose
from tools.logs.grep import FileTotal
from tools.logs.reader import CUT_BY_DEADLINE, expand_log_inputs

DEV = DATA / "logs" / "round2" / "dev"


def _summary(scanned: tuple[dict[str, diagnose._Group], list[FileTotal], set[int], int | None]) -> object:
    groups, totals, seen, world = scanned
    return ([(key, g.rule.id, g.rule.level, g.hits, g.first and (g.first.file.name, g.first.number, g.first.facts),
              g.last and g.last.number, sorted(g.by_rank), g.latest, g.site) for key, g in groups.items()],
            totals, seen, world)


def test_files_taken_in_turns_by_a_process_read_as_the_threads_read_them() -> None:
    names = [*sorted(p.name for p in DEV.glob("unclassified_error__*.log"))[:3],
             *sorted(p.name for p in DEV.glob("cuda_error__*.log"))[:3]]
    files, _ = expand_log_inputs(names, (DEV.resolve(),))
    deadline = time.monotonic() + 120
    threads = diagnose._scan(files, deadline, processes_from=1 << 62)
    processes = diagnose._scan(files, deadline, processes_from=0)
    assert _summary(processes) == _summary(threads)
    rule_file = diagnose.load_rules()[0]
    assert any(all(g.rule is not r for r in rule_file) for g in processes[0].values())  # made for an exception


def test_the_reused_buffer_cuts_blocks_where_read_blocks_does(tmp_path: Path) -> None:
    line = b"x" * 1000 + b" step 1 loss 2.0\n"
    long_line = b"y" * (LOG_CHUNK_BYTES * 2 + 123) + b"\n"  # longer than a block: read in pieces
    path = tmp_path / "rank0.log"
    path.write_bytes(line * (LOG_CHUNK_BYTES // len(line) + 7) + long_line + line * 3 + b"no newline at the end")
    expected: list[bytes] = []
    with open_input(path)[0] as stream:
        expected = list(read_blocks(stream, time.monotonic() + 60))
    with open_input(path)[0] as stream:
        got = [bytes(block) for block in read_blocks_reused(stream, time.monotonic() + 60)]
    assert got == expected and len(got) == 3


def test_the_process_path_ends_at_the_reading_deadline() -> None:
    # A reading deadline already past: the scan in this thread and the one in the spawned process each stop before
    # their first block, promptly, with no process left running; every file says it was not read for lack of time.
    names = sorted(p.name for p in DEV.glob("cuda_error__*.log"))[:4]
    files, _ = expand_log_inputs(names, (DEV.resolve(),))
    started = time.monotonic()
    groups, totals, _, _ = diagnose._scan(files, started - 1, processes_from=0)
    assert time.monotonic() - started < 30
    assert not multiprocessing.active_children()
    assert not groups and len(totals) == 4
    assert all(t.status == f"{CUT_BY_DEADLINE} before it was read" and t.lines == 0 for t in totals), totals



def test_one_failing_line_repeated_a_hundred_thousand_times_is_one_finding_with_its_count(tmp_path: Path) -> None:
    # The wild set's OOM line (tests/data/logs/wild/cuda_oom__mygirlgpt-11.log), printed at every step of a long run:
    # as many exceptions as lines, each matched with the hits near it, not with every hit (that was quadratic: this
    # 8 MB log ran past a 100 s deadline).
    line = (DATA / "logs" / "wild" / "cuda_oom__mygirlgpt-11.log").read_bytes().splitlines()[0]
    copies = 8_000_000 // (len(line) + 1)
    (tmp_path / "rank0.log").write_bytes((line + b"\n") * copies)
    result = anyio.run(diagnose.diagnose_logs, diagnose.DiagnoseLogsInput(paths=["rank0.log"]),
                       ToolContext(roots=(tmp_path,), timeout_s=60))
    [oom] = [f for f in result.findings if f.category == "cuda_oom"]
    assert oom.severity == "crit" and oom.count == copies


@pytest.mark.anyio
async def test_over_mcp_a_process_scan_past_its_deadline_ends_and_the_server_answers_after(tmp_path: Path) -> None:
    # Two logs of 320 MB each (a real round-2 development excerpt repeated) take the process path; with a 1 s
    # deadline the call is stopped; the scan's thread stops at its next deadline check and stops the spawned scanner
    # with it (this dense text scans at a few MB/s: left alone, the scanner's file would take minutes), and the next
    # call is answered.
    seed = (DEV / sorted(p.name for p in DEV.glob("cuda_error__*.log"))[0]).read_bytes()
    for rank in (0, 1):
        with (tmp_path / f"rank{rank}.log").open("wb") as out:
            for _ in range(320 * 1024 * 1024 // len(seed) + 1):
                out.write(seed)
    async with stdio_client(base_env(), "--root", str(tmp_path), "--timeout", "1") as client:
        started = time.monotonic()
        stopped = await client.call_tool("diagnose_logs", {"paths": ["rank*.log"]})
        assert time.monotonic() - started < 10
        if stopped.is_error:  # the spawned scanner's start outlasted the second: the contract stopped the call
            assert "did not finish within 1 s" in str(stopped.content[0]), stopped.content
        else:  # reading stopped at its share of the second: what was read is judged, the rest said to be unread
            cut = structured(stopped)["coverage"]
            assert cut and all(c["status"] in ("partial", "not_understood") and CUT_BY_DEADLINE in c["detail"]
                               for c in cut), cut
        server = next(p for p in psutil.Process().children(recursive=True)
                      if "mcp_server" in " ".join(p.cmdline()) and str(tmp_path) in " ".join(p.cmdline()))

        def scanners() -> list[psutil.Process]:  # multiprocessing's resource tracker stays for the server's life
            return [p for p in server.children(recursive=True)
                    if "resource_tracker" not in " ".join(p.cmdline())]

        deadline = time.monotonic() + 10
        while scanners() and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert not scanners(), [p.cmdline() for p in scanners()]  # the spawned scanner was stopped with the call
        (tmp_path / "small.log").write_bytes(seed)
        answered = structured(await client.call_tool("diagnose_logs", {"paths": ["small.log"]}))
        assert answered["findings"] and answered["findings"][0]["category"] == "cuda_error"
