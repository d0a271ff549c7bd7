"""summarize_trace on the real traces from public repositories that are small and licensed enough to ship
(tests/data/traces/wild/files; source, licence and the reader's verdict of each in the cases_*.jsonl beside it,
PROVENANCE.md there). benchmarks/accuracy_traces.py scores the whole set, the uncopied traces too."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.traces.summary import SummarizeTraceInput, SummarizeTraceResult, summarize_trace

WILD = DATA / "traces" / "wild"
LABELS = {json.loads(line)["id"]: json.loads(line) for manifest in sorted(WILD.glob("cases_*.jsonl"))
          for line in manifest.read_text().splitlines() if line.strip()}
COPIED = sorted(p.name.removesuffix(".json.gz") for p in (WILD / "files").glob("*.json.gz"))


def summarize(case_id: str) -> SummarizeTraceResult:
    files = (WILD / "files").resolve()
    return anyio.run(summarize_trace, SummarizeTraceInput(path=f"{case_id}.json.gz"), ToolContext(roots=(files,)))


def test_every_copy_has_a_label_and_no_metadata_block() -> None:
    assert COPIED and all(LABELS[c]["copied"] for c in COPIED)
    assert {c for c, label in LABELS.items() if label["copied"]} == set(COPIED)


@pytest.mark.parametrize("case_id", [c for c in COPIED if LABELS[c]["primary"] != "unclear"])
def test_verdict_matches_the_readers(case_id: str) -> None:
    label: dict[str, Any] = LABELS[case_id]
    ours = summarize(case_id).bottleneck
    if label["strict"]:
        assert ours == label["primary"]
    else:  # a close call: the reader's primary or one of the causes they named beside it
        assert ours in {label["primary"], *label["secondary"]}


def test_eager_vllm_on_b200_is_launch_bound_with_its_multimem_all_reduce_as_communication() -> None:
    result = summarize("t1-tracelens-b200-vllm-gptoss-eager")
    assert result.causes[0].kind == "launch_bound" and result.causes[0].share_pct > 50
    assert "CPU overhead" in result.causes[0].evidence
    assert any("multimem_all_reduce_kernel" in k.name and k.kind == "comm" for k in result.top_kernels)
    assert result.ranks[0].device == "B200 (HGX)"


def test_bf16_inference_on_h100_reports_its_mfu() -> None:
    # record_shapes: the matmuls' FLOPs from their shapes, bf16 inputs, against the H100 SXM's dense 989.4.
    rank = summarize("t1-tracelens-qwen05b-h100").ranks[0]
    assert (rank.precision, rank.peak_tflops, rank.flops_from) == ("bf16", 989.4, "record_shapes (matmuls only)")
    assert rank.achieved_tflops is not None and rank.mfu_pct == round(100 * rank.achieved_tflops / 989.4, 2)
    assert 1 < rank.mfu_pct < 50

