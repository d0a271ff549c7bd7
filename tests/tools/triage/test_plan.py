"""triage_plan's verdict on its one input, the question: a branch found is ok, none found is unknown."""

from __future__ import annotations

import anyio

from tools.core.context import ToolContext
from tools.core.models import CoverageStatus, Severity
from tools.triage import TriagePlanInput, TriagePlanResult, triage_plan


def plan(symptom: str, traces: list[str] | None = None) -> TriagePlanResult:
    return anyio.run(triage_plan, TriagePlanInput(symptom=symptom, traces=traces or []), ToolContext(roots=()))


def test_a_branch_found_is_ok_and_the_question_is_its_coverage() -> None:
    hang = plan("8 卡训练在 step 1200 卡住, NCCL watchdog timeout")
    assert hang.branch == "nccl_hang_or_slow" and hang.severity is Severity.ok and hang.decides is None
    assert [(c.input, c.status) for c in hang.coverage] == [("symptom", CoverageStatus.read)]
    assert "matched" in hang.coverage[0].detail and "watchdog" in hang.coverage[0].detail.lower()


def test_no_branch_found_cannot_tell_which_symptom_it_is() -> None:
    vague = plan("something is off")
    assert vague.branch == "triage" and vague.severity is Severity.unknown
    assert vague.decides is not None and vague.decides.startswith("Which symptom it is")
    assert [(c.input, c.status) for c in vague.coverage] == [("symptom", CoverageStatus.read)]
    assert "no branch's keyword" in vague.coverage[0].detail
    # A trace with no words: the trace branch is where a profile answers, but which symptom it is stays open.
    with_trace = plan("what is wrong here?", traces=["run/trace.json"])
    assert with_trace.branch == "gpu_utilization_low" and with_trace.severity is Severity.unknown
