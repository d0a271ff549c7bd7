"""dump_stacks on stacks captured earlier: every format recorded from the real hung lab job, plus the formats
the lab cannot produce on its own (a torch debug-server bundle, a Python traceback), built from those records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, REPO, base_env, run_cli
from tools.core.context import ToolContext
from tools.core.errors import BadInput
from tools.hangs.stack_formats import locate, main_thread, parse_dump
from tools.hangs.stacks import DumpStacksInput, DumpStacksResult, dump_stacks

STACKS = DATA / "stacks" / "rank_conditional_allgather"
ALL_GATHER = "rank_conditional_allgather.py:40 save_checkpoint"  # as recorded (tests/data/stacks/PROVENANCE.md)
BACKWARD = "rank_conditional_allgather.py:47 train_step"


def run(root: Path, **args: Any) -> DumpStacksResult:
    params = DumpStacksInput.model_validate(args)
    return anyio.run(dump_stacks, params, ToolContext(roots=(root.resolve(),)))


@pytest.mark.parametrize("folder", ["pyspy_text", "pyspy_json", "pyspy_native", "faulthandler", "mixed"])
def test_every_recorded_format_names_rank_0_in_all_gather(folder: str) -> None:
    result = run(REPO, from_files=[str(STACKS / folder)])
    assert [(s.rank, s.function) for s in result.suspects] == [(0, "save_checkpoint")]
    assert result.suspects[0].location.endswith(ALL_GATHER)
    assert [(g.ranks, g.collective is not None and g.collective.split(" (")[0]) for g in result.groups] == [
        ([1, 2, 3], "all_reduce"), ([0], "all_gather")]
    assert result.groups[0].location.endswith(BACKWARD)
    assert [r.rank for r in result.ranks] == [0, 1, 2, 3] and all(r.status == "ok" for r in result.ranks)
    assert result.severity == "crit"
    assert "rank-conditional" in result.conclusion[0]


def test_native_frames_show_the_reducer_wait() -> None:
    (dump,) = parse_dump((STACKS / "pyspy_native" / "rank1.txt").read_text())
    thread = main_thread(dump)
    assert thread is not None and thread.name == "MainThread" and thread.idle is True
    assert any(f.function == "c10d::Reducer::finalize_backward" and f.native for f in thread.frames)
    where = locate(thread.frames)
    assert where.collective == "all_reduce (DDP backward)"
    assert where.user_frame is not None and where.user_frame.display() == BACKWARD


def test_torch_debug_server_bundle_and_a_traceback(tmp_path: Path) -> None:
    # torch.distributed.debug's StacksHandler.dump() writes `=== Rank i: addr ===` then each rank's
    # dump_traceback (faulthandler) text; built here from the recorded faulthandler files, rank 3 left out.
    parts = [f"=== Rank {r}: 127.0.0.1:2{r}999 ===\n" + (STACKS / "faulthandler" / f"rank_{r}.txt").read_text()
             for r in range(3)]
    (tmp_path / "stacks").write_text("\n".join(parts))
    bundle = run(tmp_path, from_files=["stacks"])
    assert [r.rank for r in bundle.ranks] == [0, 1, 2]
    assert [s.rank for s in bundle.suspects] == [0]
    # A traceback (outermost first), e.g. a KeyboardInterrupt printed by the hung rank.
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "rank5.log").write_text(
        "Traceback (most recent call last):\n"
        '  File "/job/train.py", line 90, in <module>\n    main()\n'
        '  File "/job/train.py", line 12, in main\n    dist.barrier()\n'
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4811, in barrier\n'
        "    work.wait()\nKeyboardInterrupt\n")
    single = run(tmp_path, from_files=["tb/*.log"])
    (row,) = single.ranks
    assert (row.rank, row.collective, row.innermost_user_frame) == (5, "barrier", "/job/train.py:12 main")
    assert single.suspects == [] and len(single.groups) == 1


def test_a_rank_in_its_dataset_code_is_named_as_waiting_for_input(tmp_path: Path) -> None:
    # num_workers=0: the dataset's __getitem__ runs in the rank itself, under torch.utils.data's fetch.
    folder = tmp_path / "stacks"
    folder.mkdir()
    for rank in (1, 2, 3):
        (folder / f"rank{rank}.txt").write_text((STACKS / "pyspy_text" / f"rank{rank}.txt").read_text())
    (folder / "rank0.txt").write_text(
        'Thread 11 (active+gil): "MainThread"\n'
        "    _augment (data/pipeline.py:88)\n    __getitem__ (data/dataset.py:41)\n"
        "    fetch (torch/utils/data/_utils/fetch.py:52)\n    main (train.py:60)\n    <module> (train.py:99)\n")
    result = run(tmp_path, from_files=["stacks"])
    (suspect,) = result.suspects
    assert (suspect.rank, suspect.function, suspect.location) == (0, "_augment", "data/pipeline.py:88 _augment")
    assert suspect.kind == "input" and "ranks 1-3" in suspect.reason and "all_reduce" in suspect.reason
    assert "sample_host" in suspect.fix and "rank-conditional" not in suspect.reason


def test_one_group_of_the_whole_job_says_no_rank_is_missing(tmp_path: Path) -> None:
    # The three recorded ranks in the all-reduce, as the whole of a 3-rank job (copied as ranks 0-2).
    for new_rank, rank in enumerate((1, 2, 3)):
        (tmp_path / f"rank{new_rank}.txt").write_text((STACKS / "pyspy_text" / f"rank{rank}.txt").read_text())
    result = run(tmp_path, from_files=[str(tmp_path / f"rank{r}.txt") for r in range(3)], world_size=3)
    assert result.suspects == [] and result.severity == "ok" and result.decides is None
    assert result.conclusion[0].startswith("All 3 ranks stand at the same place, in all_reduce")
    assert [c.status for c in result.coverage] == ["read"] * 3


def test_one_group_with_rank_0_missing_is_unknown_and_names_it() -> None:
    # Ranks 1-3 in the all-reduce, rank 0's stack not given (it is the one in all_gather): the ranks seen cannot
    # say that no rank is elsewhere; before, this was a confident "ok".
    result = run(REPO, from_files=[str(STACKS / "pyspy_text" / f"rank{r}.txt") for r in (1, 2, 3)])
    assert result.suspects == [] and result.severity == "unknown"
    assert result.decides is not None and "rank 0 " in result.decides
    assert "3 of at least 4 ranks" in result.conclusion[0] and "rank 0 is missing" in result.conclusion[0]
    assert result.next_steps[0].action.startswith("dump_stacks on rank 0 ")


def test_unparsable_file_is_a_row_and_the_others_still_count(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "rank0.txt").write_text("nothing to see\n")
    for rank in (1, 2):
        (folder / f"rank{rank}.json").write_text((STACKS / "pyspy_json" / f"rank{rank}.json").read_text())
    result = run(tmp_path, from_files=["s"])
    rows = {r.rank: r for r in result.ranks}
    assert rows[0].status == "no_stack" and "expected py-spy" in rows[0].detail
    assert rows[1].status == rows[2].status == "ok"
    assert result.severity == "warn"


def test_bad_selectors_and_paths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="one of pid, match or from_files"):
        run(tmp_path, pid=[1], match="x")
    with pytest.raises(BadInput, match="outside the allowed roots"):
        run(tmp_path, from_files=["/etc"])
    with pytest.raises(BadInput, match="not a valid RE2"):
        run(tmp_path, match="(unclosed")
    with pytest.raises(BadInput, match="the same pid is given twice"):
        run(tmp_path, pid=[1, 1])


def test_cli_repeatable_from_files_flag() -> None:
    done = run_cli(["dump-stacks", "--from-files", str(STACKS / "pyspy_text" / "rank0.txt"),
                    str(STACKS / "pyspy_json" / "rank1.json"),
                    "--from-files", str(STACKS / "faulthandler" / "rank_2.txt"), "--json"], base_env())
    data = json.loads(done.stdout)
    assert [r["rank"] for r in data["ranks"]] == [0, 1, 2] and [s["rank"] for s in data["suspects"]] == [0]
    assert done.returncode == 2


def test_a_symlink_out_of_the_roots_in_a_stack_folder_is_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "rank0.txt").write_text((STACKS / "pyspy_text" / "rank0.txt").read_text())
    (folder / "rank1.txt").symlink_to("/etc/hostname")
    result = run(tmp_path, from_files=["s"])
    assert [r.source for r in result.ranks] == ["s/rank0.txt"]


def test_no_majority_names_no_suspect(tmp_path: Path) -> None:
    folder = tmp_path / "busy"
    folder.mkdir()
    for rank in range(4):  # a busy job: every rank at its own line of the step
        (folder / f"rank{rank}.txt").write_text(
            f'Thread 1 (active): "MainThread"\n    step_part{rank} (train.py:{10 + rank})\n    main (train.py:90)\n')
    result = run(tmp_path, from_files=["busy"])
    assert result.suspects == [] and len(result.groups) == 4 and result.severity == "warn"
    assert result.notes[0].startswith("no majority: the largest group")
    assert "no clear odd one out" in result.conclusion[0]


def test_collectors_of_two_nodes_merge_into_one_verdict() -> None:
    # The multi-node layer's core: each node's collector (`gpu-triage dump-stacks --local --json`, a real process
    # with the node name Slurm gives it) returns its ranks with their frames; merge_nodes groups all ranks together,
    # so the odd rank is found across nodes. Node A holds ranks 0-1, node B ranks 2-3 (the recorded hang); node C
    # did not answer.
    from tools.hangs.stacks import DumpStacksResult, merge_nodes

    results: dict[str, DumpStacksResult | str] = {}
    for node, ranks in (("nodeA", (0, 1)), ("nodeB", (2, 3))):
        files = [str(STACKS / "pyspy_json" / f"rank{r}.json") for r in ranks]
        done = run_cli(["dump-stacks", "--local", "--json", "--max-bytes", "262144", "--from-files", *files],
                       base_env(SLURMD_NODENAME=node))
        local = DumpStacksResult.model_validate_json(done.stdout)
        assert [r.rank for r in local.ranks] == list(ranks) and {r.node for r in local.ranks} == {node}
        assert all(r.frames and r.frames[0].function for r in local.ranks)
        results[node] = local
    results["nodeC"] = "the collector did not answer within 30 s"
    merged = merge_nodes(results)
    assert [(s.rank, s.function) for s in merged.suspects] == [(0, "save_checkpoint")]
    assert "rank-conditional" in merged.suspects[0].reason
    rows = {(r.node, r.rank): r for r in merged.ranks}
    assert rows[("nodeA", 0)].collective == "all_gather" and rows[("nodeB", 3)].group == 0
    assert rows[("nodeC", None)].status == "node_unreachable"
    assert merged.notes[0].startswith("no answer from 1 node(s): nodeC")
    assert all(r.frames is None for r in merged.ranks)  # the job-level answer does not repeat the frames
