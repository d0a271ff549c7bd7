"""dump_stacks on real stacks of a rank that is not in the collective the others wait in, for reasons other than a
collective: waiting for its DataLoader, in torch.save, sleeping in a poll loop, computing an extra evaluation,
and (the one real "collective only some ranks call") a barrier. Recorded from a live 4-rank gloo job on CPU,
tests/data/stacks/odd_rank/ (PROVENANCE.md there): the rank is classified by where it is, the reason and the fix
follow the class, and only the different collective is called rank-conditional."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.core.ranks import compact_ranges
from tools.hangs.stacks import DumpStacksInput, DumpStacksResult, dump_stacks

ODD = DATA / "stacks" / "odd_rank"
JOB = "odd_rank_job.py"


def run(root: Path, **args: Any) -> DumpStacksResult:
    params = DumpStacksInput.model_validate(args)
    return anyio.run(dump_stacks, params, ToolContext(roots=(root.resolve(),)))


# (scenario, format folder, odd rank, kind, where the rank stands, words of the fix)
CASES = [
    ("dataloader", "pyspy_text", 2, "input", f"{JOB}:83 main", ("sample_host", "DataLoader workers")),
    ("dataloader", "pyspy_json", 2, "input", f"{JOB}:83 main", ("sample_host", "DataLoader workers")),
    ("dataloader", "pyspy_native", 2, "input", f"{JOB}:83 main", ("sample_host", "DataLoader workers")),
    ("dataloader", "faulthandler", 2, "input", f"{JOB}:83 main", ("sample_host", "DataLoader workers")),
    ("save", "pyspy_text", 0, "checkpoint", f"{JOB}:56 save_checkpoint", ("async_save", "every rank")),
    ("save", "pyspy_native", 0, "checkpoint", f"{JOB}:56 save_checkpoint", ("async_save", "every rank")),
    ("save", "faulthandler", 0, "checkpoint", f"{JOB}:56 save_checkpoint", ("async_save", "every rank")),
    ("sleep", "pyspy_native", 1, "sleeping", f"{JOB}:63 wait_for_marker", ("loop around",)),
    ("compute", "pyspy_text", 3, "computing", f"{JOB}:72 evaluate", ("find_stragglers", "health_check")),
    ("compute", "pyspy_json", 3, "computing", f"{JOB}:72 evaluate", ("find_stragglers", "health_check")),
    ("barrier", "pyspy_text", 2, "other_collective", f"{JOB}:102 main", ("every rank call it",)),
]


@pytest.mark.parametrize(("scenario", "fmt", "rank", "kind", "where", "fix_words"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_odd_rank_is_classified_by_where_it_is(scenario: str, fmt: str, rank: int, kind: str, where: str,
                                                   fix_words: tuple[str, ...]) -> None:
    result = run(ODD, from_files=[str(ODD / scenario / fmt)])
    (suspect,) = result.suspects
    assert (suspect.rank, suspect.kind) == (rank, kind)
    assert suspect.location.endswith(where)
    others = compact_ranges(sorted(set(range(4)) - {rank}))
    assert "all_reduce" in suspect.reason and f"ranks {others} wait in all_reduce" in suspect.reason
    assert all(word in suspect.fix for word in fix_words), suspect.fix
    # Only a different collective is a collective only some ranks call.
    assert ("rank-conditional" in suspect.reason) is (kind == "other_collective")
    assert result.severity == "crit" and f"Rank {rank} " in result.conclusion[0]
    assert [c.status for c in result.coverage] == ["read"] * 4


def test_next_steps_follow_the_class() -> None:
    actions = {scenario: [s.action for s in run(ODD, from_files=[str(ODD / scenario / fmt)]).next_steps]
               for scenario, fmt in (("dataloader", "pyspy_text"), ("save", "pyspy_text"),
                                     ("compute", "pyspy_text"), ("sleep", "pyspy_text"))}
    assert actions["dataloader"][:2] == ["sample_host on rank 2's node", "profile_cpu on rank 2's process and its "
                                         "DataLoader workers"]
    assert actions["save"][0] == "sample_host on rank 0's node"
    assert actions["compute"][0] == "find_stragglers on the job's step logs"
    assert actions["sleep"][0] == "dump_stacks(native=True) on rank 1"


def test_a_sleep_without_native_frames_is_blocked_and_says_what_decides() -> None:
    # py-spy's default dump and faulthandler show no frame for time.sleep: the rank stands on its own line,
    # idle; that is a C call of some kind, and only the native frames say which.
    for fmt in ("pyspy_text", "faulthandler"):
        (suspect,) = run(ODD, from_files=[str(ODD / "sleep" / fmt)]).suspects
        assert (suspect.rank, suspect.kind) == (1, "blocked")
        assert "native=True" in suspect.fix and "rank-conditional" not in suspect.reason


def test_the_rank_rows_say_what_each_rank_does() -> None:
    result = run(ODD, from_files=[str(ODD / "dataloader" / "pyspy_text")])
    rows = {r.rank: r for r in result.ranks}
    assert rows[2].collective is None and rows[2].activity == "input: DataLoader: _BaseDataLoaderIter.__next__"
    assert rows[0].activity is not None and rows[0].activity.startswith("collective: all_reduce")


def test_two_ranks_of_four_do_not_name_a_suspect(tmp_path: Path) -> None:
    # Ranks 0 and 2 of the DataLoader hang: rank 2 alone is not where rank 0 is, but ranks 1 and 3 could stand
    # with either of them, so the answer is unknown until their stacks are seen.
    for rank in (0, 2):
        shutil.copy(ODD / "dataloader" / "pyspy_text" / f"rank{rank}.txt", tmp_path)
    result = run(tmp_path, from_files=[str(tmp_path)], world_size=4)
    assert result.suspects == [] and result.severity == "unknown"
    assert result.decides is not None and "ranks 1,3" in result.decides
    assert result.conclusion[0].startswith("Stacks of 2 of 4 ranks were read")


def test_three_ranks_of_four_are_still_a_majority_of_the_job(tmp_path: Path) -> None:
    # Ranks 0-2 seen, rank 3 not: the two in the all-reduce are no majority of 4, so rank 2 is not named either.
    for rank in (0, 1, 2):
        shutil.copy(ODD / "dataloader" / "pyspy_text" / f"rank{rank}.txt", tmp_path)
    assert run(tmp_path, from_files=[str(tmp_path)], world_size=4).severity == "unknown"
    # With 8 ranks of which 0-4 are in the all-reduce and 5 in the DataLoader, five of eight are a majority:
    # rank 5 is named, and the conclusion says which ranks were not seen.
    for rank in range(6):
        source = "rank2.txt" if rank == 5 else "rank0.txt"
        shutil.copy(ODD / "dataloader" / "pyspy_text" / source, tmp_path / f"rank{rank}.txt")
    result = run(tmp_path, from_files=[str(tmp_path)], world_size=8)
    assert [(s.rank, s.kind) for s in result.suspects] == [(5, "input")] and result.severity == "crit"
    assert "ranks 6-7 missing" in result.conclusion[-1]


def test_coverage_of_a_cut_file_a_native_only_dump_and_an_unknown_format(tmp_path: Path) -> None:
    text = (ODD / "dataloader" / "pyspy_text" / "rank2.txt").read_text()
    (tmp_path / "rank0.txt").write_text(text[: text.index("main (odd_rank_job.py:83)") + 10])  # cut mid-line
    (tmp_path / "rank1.txt").write_text('Thread 7 (idle): "MainThread"\n    poll (libc.so.6)\n'
                                        "    0x7f390b24524a (libc.so.6)\n")
    (tmp_path / "rank2.txt").write_text("<html>not a stack</html>\n")
    (tmp_path / "rank3.json").write_text((ODD / "dataloader" / "pyspy_json" / "rank3.json").read_text()[:500])
    result = run(tmp_path, from_files=[str(tmp_path)])
    cover = {c.input.rsplit("/", 1)[-1]: c for c in result.coverage}
    assert cover["rank0.txt"].status == "partial" and "mid-line" in cover["rank0.txt"].detail
    assert cover["rank1.txt"].status == "partial" and "no Python frames" in cover["rank1.txt"].detail
    assert cover["rank2.txt"].status == "not_understood"
    assert cover["rank2.txt"].formats_known is not None and "faulthandler" in cover["rank2.txt"].formats_known
    assert cover["rank3.json"].status == "not_understood" and "JSON" in cover["rank3.json"].detail
    assert result.severity != "ok"
