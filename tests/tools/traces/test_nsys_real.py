"""summarize_trace on real Nsight Systems exports from public repositories (tests/data/nsys/files: sanitised copies;
source, licence and a reader's verdict of each in cases.jsonl, PROVENANCE.md beside it), schema 3.1 to 3.25."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, base_env
from tools.core.context import ToolContext
from tools.core.errors import BadInput, TriageError
from tools.stragglers import FindStragglersInput, find_stragglers
from tools.traces.summary import SummarizeTraceInput, SummarizeTraceResult, summarize_trace

FILES = DATA / "nsys" / "files"
LABELS = {(row := json.loads(line))["id"]: row for line in (DATA / "nsys" / "cases.jsonl").read_text().splitlines()
          if line.strip()}
PLANTED = "hf_FAKEtestTOKENfor0redaction0check00"


def summarize(case_id: str) -> SummarizeTraceResult:
    return anyio.run(summarize_trace, SummarizeTraceInput(path=f"{case_id}.sqlite"),
                     ToolContext(roots=(FILES.resolve(),)))


STRICT = [(case_id, p["pid_index"], p) for case_id, row in LABELS.items() if row["copied"]
          for p in row["per_process"] if p["strict"]]


@pytest.mark.parametrize(("case_id", "index", "label"), STRICT, ids=[f"{c}-{i}" for c, i, _ in STRICT])
def test_strict_verdicts_of_the_readers(case_id: str, index: int, label: dict[str, Any]) -> None:
    result = summarize(case_id)
    rank = result.ranks[index]
    assert rank.gpu_busy_pct == pytest.approx(label["gpu_busy_pct"], abs=0.2)
    assert rank.bottleneck == label["primary"]


def test_two_ranks_of_one_torchrun_capture_with_their_nccl() -> None:
    result = summarize("nsysai-mfu-2gpu-before")
    assert [r.rank for r in result.ranks] == [0, 1] and all("(process " in r.file for r in result.ranks)
    comm = {k.name: k.kind for k in result.top_kernels if "nccl" in k.name.lower()}
    assert comm and set(comm.values()) == {"comm"}


def test_nvidia_gap_rule_on_a_real_export_finds_the_readers_gaps() -> None:
    # NVIDIA/Fuser's capture: three GPU gaps over 500 ms while the host loads modules and compiles.
    rules = {r.rule: r for r in summarize("fuser-cross-entropy-report1").nsys_rules}
    gaps = LABELS["fuser-cross-entropy-report1"]["per_process"][0]["gaps_500ms"]
    assert rules["gpu_gaps"].count == len(gaps) == 3
    assert rules["gpu_gaps"].time_ms == pytest.approx(sum(gaps), abs=1)


def test_a_real_capture_without_cuda_data_quotes_nsys() -> None:
    with pytest.raises(TriageError) as raised:
        summarize("jacc-report1")
    assert "no GPU work was traced" in raised.value.message and "nsys said:" in raised.value.message


def test_the_environment_block_of_a_real_export_never_reaches_the_output() -> None:
    # The copy holds one planted, token-shaped environment variable in META_DATA_CAPTURE; the CLI prints
    # everything the tool says (table, sentences, JSON): it must not appear.
    argv = [sys.executable, "-m", "mcp_server.cli", "summarize-trace", "nsysai-mock-planted-secret.sqlite",
            "--root", str(FILES), "--json"]
    done = subprocess.run(argv, cwd=FILES, env=base_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["ranks"][0]["gpu_events"] > 0
    assert PLANTED not in done.stdout + done.stderr and "HF_TOKEN" not in done.stdout + done.stderr


def test_stragglers_on_an_export_without_steps_are_refused_saying_what_a_trace_needs() -> None:
    # An export with no step marker holds no step time to compare: refused (exit 3), saying what a trace needs.
    with pytest.raises(BadInput, match="no step time found.*ProfilerStep"):
        anyio.run(find_stragglers, FindStragglersInput(traces=["nsysai-mfu-2gpu-before.sqlite"]),
                  ToolContext(roots=(FILES.resolve(),)))
