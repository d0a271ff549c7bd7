"""Roots never mix jobs, and path arguments take the shapes clients send: driven over stdio by the SDK's client and
through the CLI as a process, on the bundled real logs of a hung 4-rank job (mcp_server/samples/PROVENANCE.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO, base_env, run_cli, stdio_client

pytestmark = pytest.mark.anyio

SAMPLE_LOGS = REPO / "mcp_server" / "samples" / "logs"


def _two_jobs(tmp_path: Path) -> tuple[Path, Path]:
    """Two roots, each a job with logs/rank0..3.log (as `--root job --root samples` in the issue)."""
    roots = []
    for name in ("job", "samples"):
        logs = tmp_path / name / "logs"
        logs.mkdir(parents=True)
        for log in SAMPLE_LOGS.glob("rank*.log"):
            shutil.copy(log, logs / log.name)
        roots.append(tmp_path / name)
    return roots[0], roots[1]


async def test_a_relative_glob_or_path_under_two_roots_is_refused_naming_both(tmp_path: Path) -> None:
    job, samples = _two_jobs(tmp_path)
    (job / "only_here.log").write_text((SAMPLE_LOGS / "rank0.log").read_text())
    async with stdio_client(base_env(), "--root", str(job), "--root", str(samples)) as client:
        glob = await client.call_tool("diagnose_logs", {"paths": ["logs/rank*.log"]})
        plain = await client.call_tool("grep_logs", {"paths": ["logs/rank1.log"], "preset": "errors"})
        single = await client.call_tool("grep_logs", {"paths": ["only_here.log"], "preset": "errors"})
        absolute = await client.call_tool("diagnose_logs", {"paths": [str(samples / "logs" / "rank*.log")]})
    assert glob.is_error and plain.is_error, (glob.content, plain.content)
    text = glob.content[0].text  # type: ignore[union-attr]
    assert f"'logs/rank*.log' matches under more than one root: {job / 'logs/rank*.log'} (4 files), " \
           f"{samples / 'logs/rank*.log'} (4 files); files of different roots are never merged" in text, text
    assert f"{job / 'logs' / 'rank1.log'}, {samples / 'logs' / 'rank1.log'}" in plain.content[0].text  # type: ignore[union-attr]
    # A path under one root only is that root's; an absolute glob names its root: four ranks, never eight.
    assert single.is_error is False and single.structured_content is not None
    assert [f["file"] for f in single.structured_content["files"]] == ["only_here.log"]
    assert absolute.is_error is False and absolute.structured_content is not None
    assert [f["file"] for f in absolute.structured_content["files"]] == [f"logs/rank{r}.log" for r in range(4)]


def test_the_cli_resolves_against_the_working_directory_whatever_the_roots(tmp_path: Path) -> None:
    job, samples = _two_jobs(tmp_path)
    done = run_cli(["diagnose-logs", "logs/rank*.log", "--json", "--root", str(job), "--root", str(samples)],
                   base_env(), cwd=samples)
    assert done.returncode in (1, 2), done.stderr
    files = [f["file"] for f in json.loads(done.stdout)["files"]]
    assert files == [f"logs/rank{r}.log" for r in range(4)]  # the working directory's job, the other root untouched


async def test_a_glob_that_matches_nothing_is_a_coverage_row_and_the_call_goes_on(tmp_path: Path) -> None:
    job, _ = _two_jobs(tmp_path)
    (job / "stacks").mkdir()
    shutil.copy(REPO / "mcp_server" / "samples" / "stacks" / "rank0.txt", job / "stacks" / "rank0.txt")
    shutil.copy(REPO / "mcp_server" / "samples" / "stacks" / "rank1.txt", job / "stacks" / "rank1.txt")
    async with stdio_client(base_env(), "--root", str(job)) as client:
        stragglers = await client.call_tool("find_stragglers", {"logs": ["logs/rank*.log", "node*/stderr*"]})
        stacks = await client.call_tool("dump_stacks", {"from_files": ["stacks/rank*.txt", "node*/py-spy*"]})
        nothing = await client.call_tool("find_stragglers", {"logs": ["node*/stderr*", "other/*.log"]})
    for result in (stragglers, stacks):
        assert result.is_error is False, result.content
        assert result.structured_content is not None
        rows = {c["input"]: c for c in result.structured_content["coverage"]}
        missing = "node*/stderr*" if result is stragglers else "node*/py-spy*"
        assert rows[missing]["status"] == "not_understood", rows
        assert rows[missing]["detail"].startswith("no match"), rows[missing]
    assert stacks.structured_content is not None and [r["rank"] for r in stacks.structured_content["ranks"]] == [0, 1]
    # Only when nothing matched at all is the call refused, naming the first glob.
    assert nothing.is_error and "no file under the allowed roots matches 'node*/stderr*'" in nothing.content[0].text  # type: ignore[union-attr]


def test_the_readme_grep_with_an_absent_node_folder_reads_the_four_logs(tmp_path: Path) -> None:
    job, _ = _two_jobs(tmp_path)
    done = run_cli(["grep-logs", "logs/rank*.log", "node*/stderr*", "--preset", "nccl", "--context", "2", "--tail",
                    "50", "--json"], base_env(), cwd=job)
    assert done.returncode != 3, done.stderr
    data = json.loads(done.stdout)
    assert [f["file"] for f in data["files"]] == [f"logs/rank{r}.log" for r in range(4)]
    assert [c["status"] for c in data["coverage"] if c["input"].endswith("node*/stderr*")] == ["not_understood"]


async def test_a_list_of_paths_takes_one_string_and_compare_runs_takes_lists(tmp_path: Path) -> None:
    job, samples = _two_jobs(tmp_path)
    async with stdio_client(base_env(), "--root", str(job)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        one = await client.call_tool("diagnose_logs", {"paths": "logs/rank*.log"})  # as the Inspector sends it
        stragglers = await client.call_tool("find_stragglers", {"logs": "logs/rank*.log"})
        compared = await client.call_tool("compare_runs", {"before": ["logs/rank0.log", "logs/rank1.log"],
                                                           "after": "logs/rank[23].log"})
    paths = tools["diagnose_logs"].input_schema["properties"]["paths"]
    assert [s["type"] for s in paths["anyOf"]] == ["array", "string"], paths
    assert one.is_error is False and one.structured_content is not None, one.content
    assert [f["file"] for f in one.structured_content["files"]] == [f"logs/rank{r}.log" for r in range(4)]
    assert stragglers.is_error is False, stragglers.content
    assert compared.is_error is False and compared.structured_content is not None, compared.content
    sides = {c["input"]: c["detail"] for c in compared.structured_content["coverage"]}
    assert set(sides) == {"logs/rank0.log, logs/rank1.log", "logs/rank[23].log"}, sides


def test_every_reader_of_files_takes_its_inputs_as_arguments(tmp_path: Path) -> None:
    job, _ = _two_jobs(tmp_path)
    env = base_env()
    positional = run_cli(["find-stragglers", "logs/rank*.log", "--json"], env, cwd=job)
    flagged = run_cli(["find-stragglers", "--logs", "logs/rank0.log,logs/rank1.log", "--logs", "logs/rank2.log",
                       "logs/rank3.log", "--json"], env, cwd=job)
    assert positional.returncode == flagged.returncode == 4, positional.stderr + flagged.stderr
    ranks = [[r["rank"] for r in json.loads(done.stdout)["ranks"]] for done in (positional, flagged)]
    assert ranks == [[0, 1, 2, 3], [0, 1, 2, 3]]
    compared = run_cli(["compare-runs", "logs/rank0.log", "logs/rank1.log", "--json"], env, cwd=job)
    assert compared.returncode != 3, compared.stderr
    # Shown relative to the root (here the working directory), as the shell took them.
    assert [c["input"] for c in json.loads(compared.stdout)["coverage"]] == ["logs/rank0.log", "logs/rank1.log"]
