"""Every tool, on every committed real input it reads, keeps the rule behind `ok` by itself, before the contract's
backstop (mcp_server/contract.judged) gets a chance: an ok result has read at least one input and has no input it
did not understand; an unknown result says what would decide; every result accounts for its inputs in `coverage`.

The tools are called directly (not through the contract), so a tool that leaves it to the backstop fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_server.registry import tool_by_name
from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.core.errors import TriageError
from tools.core.models import CoverageStatus, Severity, ToolResult

WILD_NET = DATA / "interconnect" / "wild"


def _files(folder: Path, pattern: str) -> list[Path]:
    return sorted(p for p in folder.glob(pattern) if p.is_file() and p.name != "PROVENANCE.md")


def _cases() -> Iterator[tuple[str, dict[str, Any]]]:
    """(tool, arguments) for each committed real input, one call an input where the tool reads one at a time."""
    for log in (_files(DATA / "logs" / "public", "*.log") + _files(DATA / "logs" / "wild", "*.log")
                + _files(DATA / "logs" / "round5" / "dev", "*.log")):
        yield "diagnose_logs", {"paths": [str(log)]}
    for log in _files(DATA / "logs" / "public", "*.log")[:10]:
        yield "grep_logs", {"paths": [str(log)], "pattern": "error|Error"}
    for log in _files(DATA / "logs" / "compile", "*.log"):
        yield "diagnose_compile", {"paths": [str(log)]}
    for trace in _files(DATA / "traces" / "wild" / "files", "*.json.gz") + _files(DATA / "traces", "*/*.json.gz"):
        yield "summarize_trace", {"path": str(trace)}
    for export in _files(DATA / "nsys" / "files", "*.sqlite"):
        yield "summarize_trace", {"path": str(export)}
    for folder in sorted(p for p in (DATA / "stacks" / "rank_conditional_allgather").iterdir() if p.is_dir()):
        yield "dump_stacks", {"from_files": [str(folder)]}
    yield "analyze_flight_recorder", {"path": str(DATA / "flight_recorder" / "rank_conditional_allgather")}
    for log in _files(DATA / "logs" / "steps", "*.log"):
        yield "find_stragglers", {"logs": [str(log)]}
    for dump in _files(DATA / "memory", "*"):
        yield "analyze_memory", {"path": str(dump)}
    for page in _files(DATA / "inference", "*.txt"):
        yield "inference_metrics", {"source": str(page)}
    for capture in _files(DATA / "nvidia_smi", "query_gpu_*.csv"):
        yield "nvidia_smi_query", {"csv_path": str(capture)}
    for capture in _files(DATA / "activity", "*.txt") + _files(DATA / "activity", "*.prom"):
        yield "gpu_activity", {"files": [str(capture)]}
    for capture in (_files(DATA / "host", "iostat*") + _files(DATA / "host", "vmstat*")
                    + _files(DATA / "host" / "round4" / "dev", "*.txt")):
        yield "sample_host", {"from_files": [str(capture)]}
    for log in _files(WILD_NET, "*.log"):
        yield "check_interconnect", {"nccl_logs": [str(log)]}
    for output in _files(WILD_NET, "nccl_tests__*.txt"):
        yield "check_interconnect", {"nccl_tests": [str(output)]}
    for capture in (_files(WILD_NET, "topo__*.txt") + _files(WILD_NET, "ibstat__*.txt")
                    + _files(WILD_NET, "nvlink_status__*.txt") + _files(WILD_NET, "ethtool__*.txt")):
        yield "check_interconnect", {"captures": [str(capture)]}
    for words in ("GPU utilisation is 40%, why?", "the 64-GPU job hangs at step 1200", "CUDA out of memory"):
        yield "triage_plan", {"symptom": words}


def _call(tool: str, arguments: dict[str, Any]) -> ToolResult | TriageError:
    spec = tool_by_name(tool)
    assert spec is not None
    ctx = ToolContext(roots=(DATA.resolve(),), timeout_s=60)
    params = spec.input_model.model_validate(arguments)
    try:
        return anyio.run(spec.function, params, ctx)
    except TriageError as exc:  # a clear refusal (exit 3) is an honest answer too
        return exc


CASES = list(_cases())


@pytest.mark.parametrize("tool", sorted({tool for tool, _ in CASES}))
def test_ok_stands_on_what_was_read_and_unknown_says_what_would_decide(tool: str) -> None:
    answered, problems = 0, []
    for name, arguments in CASES:
        if name != tool:
            continue
        result = _call(name, arguments)
        if isinstance(result, TriageError):
            continue
        answered += 1
        where = f"{tool} {arguments}"
        statuses = [c.status for c in result.coverage]
        if not result.coverage:
            problems.append(f"{where}: no coverage")
        if result.severity is Severity.ok:
            if not any(s in (CoverageStatus.read, CoverageStatus.partial) for s in statuses):
                problems.append(f"{where}: ok with nothing read")
            if CoverageStatus.not_understood in statuses:
                problems.append(f"{where}: ok with an input not understood")
        if result.severity is Severity.unknown and not result.decides:
            problems.append(f"{where}: unknown without `decides`")
        for entry in result.coverage:
            if entry.status is CoverageStatus.not_understood and not entry.formats_known:
                problems.append(f"{where}: {entry.input} not understood without the formats this tool reads")
    # Most committed inputs are real outputs of the kind the tool reads: they must be answered, not refused.
    assert answered >= max(1, sum(1 for name, _ in CASES if name == tool) // 2), tool
    assert not problems, "\n".join(problems[:20])
