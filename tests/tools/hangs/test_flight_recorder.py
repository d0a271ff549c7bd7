"""analyze_flight_recorder on the real dumps of the hung lab job, on variants of them, and on hostile input.

Variants: the real dumps are loaded (they are our own lab's files), one field is changed to make each kind of
disagreement, and they are written back in the same schema. Where a variant stands for NCCL (states
started/scheduled), that is said; gloo never leaves "scheduled".
"""

from __future__ import annotations

import copy
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, base_env, stdio_client
from tools.core.context import ToolContext
from tools.core.errors import BadInput
from tools.core.workers import run_in_shares
from tools.hangs.flight_recorder import (
    AnalyzeFlightRecorderInput,
    AnalyzeFlightRecorderResult,
    _analyse,
    _merge,
    _read_chunk,
    analyze_flight_recorder,
)

pytestmark = pytest.mark.anyio

FR = DATA / "flight_recorder" / "rank_conditional_allgather"


def real_dumps() -> dict[int, dict[str, Any]]:
    return {r: pickle.loads((FR / f"rank_{r}").read_bytes()) for r in range(4)}


def healthy(dumps: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Rank 0 makes the all_reduce like the others at seq 11: nobody disagrees."""
    dumps[0]["entries"][-1] = copy.deepcopy(dumps[1]["entries"][-1])
    return dumps


def write(folder: Path, dumps: dict[int, dict[str, Any]], fix_pg_config: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, dump in dumps.items():
        if fix_pg_config:
            dump["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}
        (folder / f"rank_{rank}").write_bytes(pickle.dumps(dump))
    return folder


def analyse(path: Path, root: Path, **args: Any) -> AnalyzeFlightRecorderResult:
    params = AnalyzeFlightRecorderInput(path=str(path), **args)
    return anyio.run(analyze_flight_recorder, params, ToolContext(roots=(root.resolve(),)))


def test_real_dumps() -> None:
    result = analyse(FR, DATA)
    (group,) = result.process_groups
    assert (group.pg, group.desc, group.ranks, group.last_common_seq, group.first_mismatch_seq, group.expected_op) == (
        "0", "default_pg", "0-3", 10, 11, "all_reduce")
    (suspect,) = result.suspects
    assert (suspect.rank, suspect.seq, suspect.reason, suspect.op) == (0, 11, "mismatched_op", "all_gather")
    assert suspect.location == "/work/main/tests/lab/rank_conditional_allgather.py:40 save_checkpoint"  # as recorded
    assert suspect.stack[0] == "torch/distributed/distributed_c10d.py:4280 all_gather"
    assert result.version == "2.10"
    assert group.in_flight == "all_reduce seq 11 on 3 ranks; all_gather seq 11 on 1 rank"


def test_healthy_variant_has_no_suspect(tmp_path: Path) -> None:
    dumps = healthy(real_dumps())
    for dump in dumps.values():
        dump["entries"][0]["is_p2p"] = True  # as if seq 1 had been a send/recv
    result = analyse(write(tmp_path / "d", dumps), tmp_path)
    assert "4 point-to-point entries (send/recv) were not compared; only collectives are." in result.notes
    assert result.suspects == [] and result.severity == "ok"
    assert result.process_groups[0].first_mismatch_seq is None
    assert result.conclusion[0].startswith("All ranks agree on every recorded collective")


def test_missing_rank(tmp_path: Path) -> None:
    dumps = healthy(real_dumps())
    del dumps[2]["entries"][-1]  # rank 2 never enqueued seq 11
    dumps[2]["pg_status"]["0"]["last_enqueued_collective"] = 10
    result = analyse(write(tmp_path / "d", dumps), tmp_path)
    assert [(s.rank, s.seq, s.reason) for s in result.suspects] == [(2, 11, "missing")]
    assert "rank 2 never entered it" in result.conclusion[0]


def _official(folder: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)],
                          capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def official_culprits(text: str) -> set[int]:
    return {int(m) for m in re.findall(r"Culprit rank (\d+)", text)}


def test_mismatched_sizes_agrees_with_pytorchs_analyzer(tmp_path: Path) -> None:
    dumps = healthy(real_dumps())
    entry = dumps[3]["entries"][-1]
    entry["input_sizes"] = entry["output_sizes"] = [[1000]]
    folder = write(tmp_path / "d", dumps, fix_pg_config=True)
    result = analyse(folder, tmp_path)
    assert [(s.rank, s.seq, s.reason) for s in result.suspects] == [(3, 11, "mismatched_sizes")]
    assert "[[1000]]" in result.suspects[0].detail and "[[2177]]" in result.suspects[0].detail
    text = _official(folder)
    assert "Collective sequence number: 11 has errors" in text and "SIZE_OR_SYNTAX_MISMATCH" in text, text[-2000:]
    # PyTorch's analyzer takes the first rank file it reads (directory order) as the reference and blames
    # the ranks that differ from it: rank 3, or ranks 0-2 when rank 3's file comes first. We decide by majority.
    assert official_culprits(text) in ({3}, {0, 1, 2})


def test_not_started_on_nccl_style_states(tmp_path: Path) -> None:
    # NCCL records started/completed; here ranks 0-2 started seq 11 and rank 3 has not (its GPU is still busy).
    dumps = healthy(real_dumps())
    for rank, dump in dumps.items():
        entry = dump["entries"][-1]
        entry["profiling_name"] = "nccl:all_reduce"
        entry["state"] = "scheduled" if rank == 3 else "started"
    result = analyse(write(tmp_path / "d", dumps), tmp_path)
    assert [(s.rank, s.seq, s.reason, s.op) for s in result.suspects] == [(3, 11, "not_started", "all_reduce")]


def test_a_rank_without_dump_and_old_entries_dropped_by_the_ring_buffer(tmp_path: Path) -> None:
    dumps = real_dumps()
    del dumps[1]
    del dumps[2]["entries"][:4]  # the buffer forgot seq 1-4 on rank 2: compared from seq 5 on
    result = analyse(write(tmp_path / "d", dumps), tmp_path)
    # The members come from pg_config (gloo's unnamed entry still lists them), so the absent rank 1 is named.
    assert result.process_groups[0].ranks == "0-3"
    assert [r.rank for r in result.ranks] == [0, 2, 3]
    # Rank 0 runs all_gather at seq 11 where ranks 2 and 3 run all_reduce: two of four members are no majority,
    # and rank 1 (no dump) could side with rank 0, so rank 0 is not named the culprit: unknown until rank 1's
    # dump is read (before, rank 0 was a confident mismatched_op).
    assert [(s.rank, s.reason) for s in result.suspects] == [(1, "no_dump")]
    assert result.severity == "unknown" and result.decides is not None and "ranks 1 " in result.decides
    group = result.process_groups[0]
    assert (group.first_mismatch_seq, group.expected_op, group.missing_ranks, group.dumps_seen) == (
        11, "all_reduce", [1], 3)
    assert result.conclusion[0].startswith("Process group 0: dumps of 3 of 4 member ranks were read")
    assert [c.status for c in result.coverage] == ["read"] * 3


def test_missing_ranks_with_a_majority_of_the_group_still_name_the_culprit(tmp_path: Path) -> None:
    # Eight members (ranks 4-7 are copies of ranks 1-3 and 1), rank 5 without a dump: rank 0's all_gather against
    # six ranks' all_reduce is a majority of the eight, so rank 0 is named, and rank 5 is listed as without dump.
    base = real_dumps()
    dumps = {r: copy.deepcopy(base[r]) for r in range(4)}
    for rank, source in ((4, 1), (6, 3), (7, 1)):
        dumps[rank] = copy.deepcopy(base[source])
    for dump in dumps.values():
        dump["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}}
    result = analyse(write(tmp_path / "d", dumps), tmp_path)
    assert [(s.rank, s.reason) for s in result.suspects] == [(0, "mismatched_op"), (5, "no_dump")]
    assert result.severity == "crit" and result.decides is None
    assert result.process_groups[0].missing_ranks == [5]


def test_a_folder_with_no_dump_is_unreadable_input(tmp_path: Path) -> None:
    from tools.core.errors import UnreadableInput

    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a dump\n")
    with pytest.raises(UnreadableInput, match="holds 1 file"):
        analyse(folder, tmp_path)


async def test_hostile_pickle_is_refused_without_running_and_the_rest_is_analysed(tmp_path: Path) -> None:
    folder = write(tmp_path / "d", real_dumps())
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (subprocess.call, (["touch", str(marker)],))

    (folder / "rank_1").write_bytes(pickle.dumps({"version": "2.10", "entries": [Exploit()]}))
    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        result = await client.call_tool("analyze_flight_recorder", {"path": str(folder)})
        outside = await client.call_tool("analyze_flight_recorder", {"path": "/etc"})
        empty = await client.call_tool("analyze_flight_recorder", {"path": str(tmp_path / "d" / ".." / "x")})
        (tmp_path / "none").mkdir()
        nothing = await client.call_tool("analyze_flight_recorder", {"path": str(tmp_path / "none")})
        still = await client.call_tool("analyze_flight_recorder", {"path": str(folder)})
    assert not marker.exists()
    data = result.structured_content
    assert result.is_error is False and data is not None
    rows = {r["rank"]: r for r in data["ranks"]}
    assert rows[1]["format"] == "pickle (refused)" and "subprocess.call" in rows[1]["error"]
    assert "refused without running anything" in rows[1]["error"]
    # With rank 1 unread, rank 0's all_gather against ranks 2-3's all_reduce is no majority of four: unknown,
    # decided by rank 1's dump (see test_a_rank_without_dump...).
    assert [(s["rank"], s["reason"]) for s in data["suspects"]] == [(1, "no_dump")]
    assert data["severity"] == "unknown" and "ranks 1 " in data["decides"]
    assert {c["input"]: c["status"] for c in data["coverage"]}["rank_1"] == "not_understood"
    assert any("rank 1:" in note for note in data["notes"])
    for bad, text in ((outside, "outside the allowed roots"), (empty, "does not exist under the allowed roots"),
                      (nothing, "no flight-recorder dump")):
        message = getattr(bad.content[0], "text", "")
        assert bad.is_error and text in message and "Traceback" not in message
    assert still.is_error is False


def test_every_file_unreadable_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "rank_0").write_bytes(b"\x80\x04garbage")
    (folder / "rank_1").write_text("{not json")
    with pytest.raises(Exception, match="no dump could be read"):
        analyse(folder, tmp_path)


def test_unknown_pg_filter(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no process group named 'nope'"):
        analyse(FR, DATA, pg="nope")
    assert analyse(FR, DATA, pg="default_pg").process_groups[0].pg == "0"


def _share_pid(share: list[int]) -> tuple[int, list[int]]:
    """Run in a share's process: which process read which items (module level, so a spawned worker imports it)."""
    return os.getpid(), share


def test_worker_processes_give_the_same_result_as_one(tmp_path: Path) -> None:
    # Large jobs (> FR_PARALLEL_BYTES of dumps) are read in shares by spawned worker processes. Here the real reader
    # runs both ways on the same real dumps (twelve ranks), in this process and in two shares, and the merged
    # shares must analyse exactly like the single read.
    dumps = real_dumps()
    for rank in range(4, 12):
        dumps[rank] = copy.deepcopy(dumps[1 + rank % 3])
    for dump in dumps.values():
        dump["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(12)))}}
    folder = write(tmp_path / "d", dumps)
    files = [(folder / f"rank_{r}", f"rank_{r}", r) for r in range(12)]
    deadline = time.monotonic() + 60
    single = _read_chunk(files, deadline)[0]
    chunks = run_in_shares(_read_chunk, files, 2, deadline)
    assert [len(dumps) for dumps, _ in chunks] == [6, 6]
    merged = sorted(_merge(chunks), key=lambda d: d.rank)
    one, two = _analyse(single, None, []), _analyse(merged, None, [])
    assert two.model_dump() == one.model_dump()
    assert [(s.rank, s.reason) for s in two.suspects] == [(0, "mismatched_op")]
    assert [r.rank for r in two.ranks] == list(range(12))
    # The second share really ran in another process.
    (pid_a, share_a), (pid_b, share_b) = run_in_shares(_share_pid, list(range(6)), 2)
    assert pid_a == os.getpid() and pid_b != pid_a and (share_a, share_b) == ([0, 2, 4], [1, 3, 5])
