"""diagnose_compile on logs generated here by torch 2.13 (CPU, backend="eager"): tests/lab/compile_cases.py run once
with TORCH_LOGS=graph_breaks,recompiles and stderr to a file holds a print break, an .item() branch, a shape
recompile, a dtype recompile, a recompile-limit hit and a fullgraph error; the expected file:line of each comes from
the `# case:` markers of that script. Plus the fault lab's recorded 2.13 log and real older-format excerpts
(tests/data/logs/compile, PROVENANCE.md there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, REPO, base_env, run_cli, stdio_client
from tools.compile.diagnose import DiagnoseCompileInput, DiagnoseCompileResult, diagnose_compile
from tools.core.context import ToolContext
from tools.core.errors import BadInput

pytestmark = pytest.mark.anyio

SCRIPT = REPO / "tests" / "lab" / "compile_cases.py"
OLDER = DATA / "logs" / "compile"


def line_of(marker: str) -> int:
    """The line of SCRIPT that carries `# case: <marker>`."""
    lines = SCRIPT.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# case: {marker}"))


def at(marker: str) -> str:
    return f"{SCRIPT}:{line_of(marker)}"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """rank0.log: the real stderr of one run; rank1.log: the same lines as torchrun prefixes them ([rank1]:)."""
    folder = tmp_path_factory.mktemp("compile_logs")
    env = dict(os.environ, TORCH_LOGS="graph_breaks,recompiles", OMP_NUM_THREADS="1")
    with (folder / "rank0.log").open("w") as stderr:
        done = subprocess.run([sys.executable, str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=stderr,
                              text=True, timeout=180, cwd=folder)
    assert done.returncode == 0, (folder / "rank0.log").read_text()[-3000:]
    assert done.stdout.count("print_break: y computed") == 3
    text = (folder / "rank0.log").read_text()
    lines = text.splitlines(keepends=True)
    (folder / "rank1.log").write_text("".join(f"[rank1]:{line}" for line in lines))
    # One stream of two ranks whose lines interleave, as torchrun's combined output can.
    (folder / "combined").mkdir()
    (folder / "combined" / "both.log").write_text("".join(f"[rank0]:{line}[rank1]:{line}" for line in lines))
    yield folder


def diagnose(root: Path, *paths: str) -> DiagnoseCompileResult:
    params = DiagnoseCompileInput(paths=list(paths))
    return anyio.run(diagnose_compile, params, ToolContext(roots=(root,)))


def rows(items: list[Any], *fields: str) -> list[tuple[Any, ...]]:
    return [tuple(getattr(item, f) for f in fields) for item in items]


def test_each_case_of_a_real_run(logs: Path) -> None:
    result = diagnose(logs, "rank0.log")
    assert rows(result.graph_breaks, "reason", "gb_id", "location", "function", "cause", "count") == [
        ("Failed to trace builtin operator", "GB0059", at("print"), "print_break", "print_or_logging", 1),
        ("Unsupported Tensor.item() call with capture_scalar_outputs=False", "GB0124", at("item"), "item_branch",
         "item_scalar", 1),
    ]
    assert "builtin operator `print`" in result.graph_breaks[0].explanation
    assert rows(result.recompiles, "function", "location", "reason", "cause", "count") == [
        ("limit_fn", at("limit"), "mode == <value>", "python_value", 2),
        ("shape_fn", at("shape"), "tensor 'x' size mismatch at index 0", "shape", 1),
        ("dtype_fn", at("dtype"), "tensor 'x' dtype mismatch", "dtype", 1),
    ]
    assert result.recompiles[0].examples == ["mode == 'double'", "mode == 'a'"]
    assert result.recompiles[1].examples == ["tensor 'x' size mismatch at index 0. expected 4, actual 8"]
    assert result.recompiles[2].examples == ["tensor 'x' dtype mismatch. expected Float, actual Double"]
    assert rows(result.limit_hits, "function", "location", "limit_name", "limit", "last_reason", "count") == [
        ("limit_fn", at("limit"), "recompile_limit", 2, "mode == 'a'", 1)]
    assert rows(result.fullgraph_errors, "error", "reason", "location", "count") == [
        ("Unsupported", "Failed to trace builtin operator", at("fullgraph"), 1)]
    assert result.verdict == "limit_hit" and result.severity == "crit"
    assert [f.kind for f in result.findings] == ["limit_hit", "fullgraph_error", "recompile", "recompile",
                                                 "graph_break", "graph_break"]
    fixes = {f.kind + ":" + f.evidence.split(" ")[0]: f.fix for f in result.findings}
    assert "runs eagerly" in fixes["limit_hit:limit_fn"] and "pass it as a tensor" in fixes["limit_hit:limit_fn"]
    assert "mark_dynamic" in fixes["recompile:shape_fn"] and "dtype stable" in fixes["recompile:dtype_fn"]
    assert "reorderable_logging_functions" in fixes["graph_break:Failed"]
    assert rows(result.functions, "function", "graph_breaks", "recompiles", "limit_hit") == [
        ("limit_fn", 0, 2, True), ("shape_fn", 0, 1, False), ("dtype_fn", 0, 1, False), ("print_break", 1, 0, False),
        ("item_branch", 1, 0, False)]
    assert result.conclusion[0].startswith("2 graph break(s) at 2 place(s) and 4 recompile(s) in 1 log(s); worst: "
                                           "limit_fn")


def test_ranks_add_up_and_prefixes_are_read(logs: Path) -> None:
    both = diagnose(logs, "rank*.log")
    assert [g.count for g in both.graph_breaks] == [2, 2]
    assert [(r.function, r.count) for r in both.recompiles] == [("limit_fn", 4), ("shape_fn", 2), ("dtype_fn", 2)]
    assert [(h.function, h.count) for h in both.limit_hits] == [("limit_fn", 2)]
    assert [(f.file, f.records) for f in both.files] == [("rank0.log", 8), ("rank1.log", 8)]
    interleaved = diagnose(logs, "combined/both.log")
    assert [g.count for g in interleaved.graph_breaks] == [2, 2]
    assert rows(interleaved.recompiles, "function", "reason", "count") == rows(both.recompiles, "function", "reason",
                                                                               "count")
    assert rows(interleaved.limit_hits, "function", "last_reason", "count") == [("limit_fn", "mode == 'a'", 2)]
    assert [(e.location, e.count) for e in interleaved.fullgraph_errors] == [(at("fullgraph"), 2)]


def test_the_recorded_lab_log() -> None:
    result = diagnose(REPO, "tests/data/logs/lab/compile_graph_breaks/combined.log")
    source = "/work/main/tests/lab/compile_graph_breaks.py"
    assert rows(result.graph_breaks, "gb_id", "location", "cause") == [
        ("GB0059", f"{source}:24", "print_or_logging"), ("GB0124", f"{source}:25", "item_scalar"),
        ("GB0170", f"{source}:26", "data_dependent_branch")]
    assert result.graph_breaks[2].reason == "Data-dependent branching"
    assert rows(result.limit_hits, "function", "limit", "last_reason") == [
        ("forward", 2, "tensor 'x' dtype mismatch. expected Float, actual Double")]
    assert result.verdict == "limit_hit" and "dtype stable" in result.findings[0].fix


@pytest.mark.parametrize(("name", "function", "limit_name", "limit", "cause"), [
    ("cache_size_limit_2_5.log", "_compilable_update_", "cache_size_limit", 8, "mark_dynamic"),
    ("cache_size_limit_torchdynamo_2022.log", "forward", "cache_size_limit", 64, "mark_dynamic"),
])
def test_older_formats(name: str, function: str, limit_name: str, limit: int, cause: str) -> None:
    result = diagnose(REPO, str(OLDER / name))
    assert rows(result.limit_hits, "function", "limit_name", "limit") == [(function, limit_name, limit)]
    assert result.verdict == "limit_hit" and cause in result.findings[0].fix


def test_clean_and_bad_inputs(tmp_path: Path) -> None:
    # A training log without one torch.compile log line cannot say "no graph break": only that none was logged.
    (tmp_path / "clean.log").write_text("step 1 loss 2.3\nstep 2 loss 2.1\n")
    clean = diagnose(tmp_path, "clean.log")
    assert (clean.verdict, clean.severity, clean.findings) == ("none", "unknown", [])
    assert clean.conclusion[0].startswith("Cannot tell whether torch.compile broke graphs or recompiled: clean.log")
    assert clean.decides is not None and "TORCH_LOGS=graph_breaks,recompiles" in clean.decides
    assert [(c.input, c.status) for c in clean.coverage] == [("clean.log", "not_understood")]
    # An empty log beside one that holds the breaks: the breaks stand, the empty one is its own coverage row.
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "rank0.log").write_bytes((OLDER / "cache_size_limit_2_5.log").read_bytes())
    both = diagnose(tmp_path, "empty.log", "rank0.log")
    assert both.verdict == "limit_hit" and both.severity == "crit"
    assert {c.input: (c.status, c.detail) for c in both.coverage}["empty.log"] == ("not_understood",
                                                                                    "empty: no line to judge")
    assert {c.input: c.status for c in both.coverage}["rank0.log"] == "read"
    # A glob that matches nothing beside a path that does is a coverage row, not a failed call.
    partly = diagnose(tmp_path, "rank0.log", "missing/*.log")
    assert partly.severity == "crit" and ("missing/*.log", "not_understood") in [
        (c.input, c.status) for c in partly.coverage]
    with pytest.raises(BadInput, match="no file under the allowed roots matches"):
        diagnose(tmp_path, "missing/*.log")
    with pytest.raises(BadInput, match="outside the allowed roots"):
        diagnose(tmp_path, "/etc/passwd")


async def test_through_the_mcp_client_the_cli_and_the_report(logs: Path) -> None:
    async with stdio_client(base_env(), "--root", str(logs)) as client:
        result = await client.call_tool("diagnose_compile", {"paths": ["rank0.log"]})
    assert result.is_error is False and result.structured_content is not None
    data = result.structured_content
    assert data["verdict"] == "limit_hit" and [g["gb_id"] for g in data["graph_breaks"]] == ["GB0059", "GB0124"]
    assert result.content[0].text.startswith("## torch.compile graph breaks and recompiles: crit")
    done = await anyio.to_thread.run_sync(lambda: run_cli(
        ["diagnose-compile", "rank0.log", "--root", str(logs), "--json"], base_env()))
    assert done.returncode == 2 and json.loads(done.stdout)["limit_hits"][0]["function"] == "limit_fn"
    report = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "mcp_server.cli", "report", "--no-health", "--compile-logs", "rank0.log", "--root",
         str(logs), "--json"], cwd=logs, env=base_env(), capture_output=True, text=True, timeout=120))
    assert report.returncode == 2, report.stderr
    rows_ = json.loads(report.stdout)["rows"]
    assert [r["symptom"] for r in rows_][:2] == ["limit_hit: torch.compile", "fullgraph_error: torch.compile"]
    assert {r["source"] for r in rows_} == {"diagnose_compile"} and len(rows_) == 6
