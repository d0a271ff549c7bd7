"""triage_plan: from the user's words (English or Chinese) to an SOP branch and the tool calls to make, in order.

The SOP's branches (sop/branches/) carry keywords in both languages; the symptom is matched against them
(case-insensitive substrings: Chinese has no spaces). The plan always starts with the entry's health check and
log diagnosis (run them at once, do not wait), then the chosen branch's steps, with the artifact paths the caller
gave put in place of the placeholders. A step whose input was not given is kept and says which input it needs.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import BaseModel, Field

from sop import Branch, Step, branches, tool_call
from tools.core.context import ToolContext
from tools.core.limits import MAX_PATH_CHARS, PLAN_MAX_SYMPTOM_CHARS
from tools.core.models import Coverage, InputModel, NextStep, PathArg, Severity, Table, ToolResult
from tools.telemetry import PROMETHEUS_URL_ENV

__all__ = ["PlannedStep", "TriagePlanInput", "TriagePlanResult", "triage_plan"]

_PLACEHOLDER = re.compile(r"^<.*>$")
# A rank the user names: "rank 3", "rank3", "rank_3", "rank #3"; in Chinese "3号卡" / "3 号 rank".
_NAMED_RANK = re.compile(r"\brank[\s_#-]*(\d{1,7})\b|(\d{1,7})\s*号\s*(?:卡|rank)", re.IGNORECASE)
# A Slurm job the user names: "job 12345", "jobid=12345", "job #12345"; in Chinese "作业 12345" / "作业号12345". Not
# a count of what it holds ("job 2 nodes").
_NAMED_JOB = re.compile(r"\bjob[\s_-]*(?:id)?[\s#:=]*(\d{1,12})\b(?!\s*(?:nodes?|gpus?|ranks?|cards?|卡|节点))"
                        r"|作业\s*(?:号|id)?\s*[:：#=]?\s*(\d{1,12})(?!\d)(?!\s*(?:个|张|卡|节点))", re.IGNORECASE)
# The steps that judge ranks, and what to check of the rank the user named there.
_RANK_CHECK = {"find_stragglers": "is rank {r} flagged, or does it wait on another rank (the one that waits least "
                                  "is the straggler)?",
               "dump_stacks": "is rank {r} where the other ranks are?",
               "diagnose_logs": "what does rank {r}'s log say that the others' do not?"}
# A branch pattern names the situation ("rank 3 is slow"), so it outweighs a generic keyword ("slow").
_PATTERN_WEIGHT = 3


class TriagePlanInput(InputModel):
    symptom: str = Field(min_length=1, max_length=PLAN_MAX_SYMPTOM_CHARS,
                         description="What the user said, in their words (English or Chinese).")
    logs: list[PathArg] = Field(default_factory=list, max_length=64,
                            description="The job's logs (paths or globs), if known.")
    traces: list[PathArg] = Field(default_factory=list, max_length=64,
                                  description="Profiler traces (files or folders).")
    stacks: list[PathArg] = Field(default_factory=list, max_length=64,
                              description="Stack dumps saved earlier (for a job this host cannot reach).")
    fr_dir: str | None = Field(default=None, max_length=MAX_PATH_CHARS,
                               description="Folder of flight-recorder dumps.")
    memory: str | None = Field(default=None, max_length=MAX_PATH_CHARS,
                               description="An allocator snapshot, memory_summary() text or memory_stats() dump.")
    slurm_job: str | None = Field(default=None, pattern=r"^[0-9]{1,12}$", max_length=12,
                                  description="The job's Slurm id: the live calls (dump_stacks, health_check) then "
                                  "cover every node of the job.")
    pids: list[int] = Field(default_factory=list, max_length=64, description="The trainer's pids on this host, if "
                            "known: the host steps (sample_host, profile_cpu) then look at them.")

    cli_positional = "symptom"


class PlannedStep(BaseModel):
    branch: str
    step: str = Field(description="The SOP step id (sop://<branch> lists them).")
    tool: str
    arguments: dict[str, Any]
    decides: str
    needs: list[str] = Field(default_factory=list, description="Inputs the caller still has to give for this call.")


class BranchScore(BaseModel):
    branch: str
    score: int
    matched: list[str]


class TriagePlanResult(ToolResult):
    branch: str = Field(description="The SOP branch the symptom belongs to (triage when nothing matched).")
    confidence: float = Field(description="0-1: the chosen branch's share of all keyword matches (0 when none).")
    steps: list[PlannedStep]
    alternatives: list[BranchScore] = Field(description="Every branch that matched, best first.")
    ranks_named: list[int] = Field(default_factory=list, description="The ranks the question names ('rank 3 is "
                                   "slow'): the steps that judge ranks say what to check of them.")

    narrow_hint = "pass a shorter symptom"

    def tables(self) -> list[Table]:
        return [
            Table("Plan", ["#", "branch", "step", "call", "decides", "needs"],
                  [[str(i + 1), s.branch, s.step, tool_call(s.tool, s.arguments), s.decides, ", ".join(s.needs) or "-"]
                   for i, s in enumerate(self.steps)], "steps"),
            Table("Branches matched", ["branch", "score", "keywords"],
                  [[a.branch, str(a.score), ", ".join(a.matched)] for a in self.alternatives], "alternatives"),
        ]


def _scores(symptom: str) -> list[BranchScore]:
    text = symptom.casefold()
    found = []
    for branch in branches().values():
        if branch.id == "triage":
            continue
        # Each keyword once (a word can be in both languages' lists, or in a pattern's phrase too).
        matched = list(dict.fromkeys(k.casefold() for k in (*branch.keywords_en, *branch.keywords_zh)
                                     if k.casefold() in text))
        # Longer keywords are more specific ("graph break" over "break"): they weigh more.
        score = sum(1 + len(k) // 8 for k in matched)
        for pattern in branch.keyword_patterns:  # the SOP's own patterns, on a symptom of bounded length
            phrase = re.search(pattern, text)
            if phrase:
                matched = [k for k in matched if k not in phrase.group(0)] + [phrase.group(0)]
                score += _PATTERN_WEIGHT
        if matched:
            found.append(BranchScore(branch=branch.id, score=score, matched=matched))
    return sorted(found, key=lambda s: -s.score)


def _fill(step: Step, params: TriagePlanInput) -> tuple[dict[str, Any], list[str]]:
    """The step's arguments with the caller's artifacts in place of placeholders, and what is still missing."""
    arguments: dict[str, Any] = {}
    needs: list[str] = []
    for name, value in step.arguments.items():
        placeholder = isinstance(value, str) and _PLACEHOLDER.match(value) or (
            isinstance(value, list) and value and all(isinstance(v, str) and _PLACEHOLDER.match(v) for v in value))
        if not placeholder:
            arguments[name] = value
            continue
        text = " ".join(value) if isinstance(value, list) else str(value)
        if "after the fix" in text:  # a run that does not exist yet when the plan is made: never filled in
            arguments[name] = value
            needs.append(text.strip("<>"))
        elif "trace" in text and params.traces:
            arguments[name] = params.traces if isinstance(value, list) else params.traces[0]
        elif "flight" in text and params.fr_dir:
            arguments[name] = params.fr_dir
        elif "memory" in text and params.memory:
            arguments[name] = params.memory
        elif ("log" in text or "server" in text) and params.logs:
            arguments[name] = params.logs if isinstance(value, list) else params.logs[0]
        elif name == "symptom":
            arguments[name] = params.symptom
        else:
            arguments[name] = value
            needs.append(text.strip("<>"))
    return arguments, needs


def _oscillates(branch: Branch, symptom: str) -> bool:
    text = symptom.lower()
    return any(word in text for word in branch.oscillation_keywords)


def _planned(branch: Branch, step: Step, params: TriagePlanInput) -> PlannedStep:
    arguments, needs = _fill(step, params)
    if step.tool == "dump_stacks" and params.stacks:
        arguments["from_files"] = params.stacks  # saved stacks instead of the live job
    elif step.tool in ("dump_stacks", "health_check") and params.slurm_job:
        arguments["slurm_job"] = params.slurm_job  # every node of the job, one verdict
    if step.if_oscillating and _oscillates(branch, params.symptom):
        arguments.update(step.if_oscillating)
        if step.tool in ("nvidia_smi_query", "sample_host") and params.logs:
            arguments["step_logs"] = params.logs  # the period in steps: every N steps points at the culprit
    if step.tool in ("profile_cpu", "sample_host") and (params.pids or params.slurm_job):
        arguments.pop("match", None)  # the pids given, or each node's own ranks: no command-line pattern to ask
        needs = [n for n in needs if "training script" not in n]
        if params.pids:
            arguments["pid"] = params.pids
        else:
            arguments["slurm_job"] = params.slurm_job
    if step.tool == "telemetry_history":  # planned only where the cluster's Prometheus is configured
        arguments["url"] = os.environ.get(PROMETHEUS_URL_ENV, arguments.get("url"))
        needs = [n for n in needs if "Prometheus" not in n]
        job = params.slurm_job or _job_named(params.symptom)
        if job:
            arguments.pop("start", None)  # the job's own window, from scontrol
            arguments["job"] = job
            needs = [n for n in needs if "began" not in n]
        if params.logs:
            arguments["step_logs"] = params.logs  # when the job slowed, matched with what changed on its GPUs
    if step.tool == "find_stragglers" and params.slurm_job and arguments.pop("sample_gpus", False):
        arguments["slurm_job"] = params.slurm_job  # the flagged rank's own GPU, read on its own node
    decides = step.decides
    named = _ranks_named(params.symptom)
    if named and step.tool in _RANK_CHECK:
        ranks = ", ".join(map(str, named))
        decides = f"{decides.rstrip('.')}. Named by the user: {_RANK_CHECK[step.tool].format(r=ranks)}"
    return PlannedStep(branch=branch.id, step=step.id, tool=step.tool, arguments=arguments, decides=decides,
                       needs=needs)


def _job_named(symptom: str) -> str | None:
    match = _NAMED_JOB.search(symptom)
    return (match.group(1) or match.group(2)) if match else None


def _ranks_named(symptom: str) -> list[int]:
    return sorted({int(m.group(1) or m.group(2)) for m in _NAMED_RANK.finditer(symptom)})


async def triage_plan(params: TriagePlanInput, ctx: ToolContext) -> TriagePlanResult:
    """Turn the user's description of a GPU-job problem (English or Chinese: "training is slow, GPU util 40%",
    "8 卡训练在 step 1200 卡住") into the SOP branch and the ordered tool calls to make, each with its arguments (the
    logs / traces / flight-recorder folder you pass are filled in) and what it will decide. Always starts with
    health_check and diagnose_logs (run them at once). Reads nothing; instant.
    """
    del ctx  # plans only: reads no file, starts nothing
    sop = branches()
    scores = _scores(params.symptom)
    total = sum(s.score for s in scores)
    # No words to go by, but a profile to read: the trace branch is where a profile answers (an nsys report or a
    # torch.profiler trace handed over with "what is wrong here?").
    chosen = sop[scores[0].branch] if scores else sop["gpu_utilization_low" if params.traces else "triage"]
    named = _ranks_named(params.symptom)
    confidence = round(scores[0].score / total, 2) if scores else 0.0
    entry = sop["triage"]
    steps = [_planned(entry, s, params) for s in entry.steps if s.tool != "triage_plan"]
    seen = {(s.tool, repr(sorted(s.arguments.items()))) for s in steps}
    for step in chosen.steps if chosen.id != "triage" else ():
        if step.tool == "telemetry_history" and not os.environ.get(PROMETHEUS_URL_ENV):
            continue  # no Prometheus configured: the GPUs' history is not there to read
        planned = _planned(chosen, step, params)
        key = (planned.tool, repr(sorted(planned.arguments.items())))
        if key not in seen:
            steps.append(planned)
            seen.add(key)
    if scores:
        runner_up = f"; next {scores[1].branch} ({scores[1].score})" if len(scores) > 1 else ""
        conclusion = [f"Branch {chosen.id} ({chosen.title}), confidence {confidence:.2f}: matched "
                      f"{', '.join(scores[0].matched)}{runner_up}.",
                      f"Run the {len(steps)} calls in order; the first two at once, without waiting for details"
                      + (f"; the user names rank {', '.join(map(str, named))}: the plan's steps say what to check "
                         "of it." if named else ".")]
    elif params.traces:
        conclusion = [f"No branch's keywords occur in the symptom, but traces were given: branch {chosen.id} "
                      f"({chosen.title}) reads them; ask the user what they saw (slow, hung, one rank slow) meanwhile."]
    else:
        conclusion = ["No branch's keywords occur in the symptom: ask the user which of slow / hung / one rank slow / "
                      "out of memory / NaN / inference latency / compile it is, and run the health checks meanwhile."]
    # The verification step (compare_runs, after a fix) needs a run that does not exist yet: asked for then, not now.
    missing = sorted({n for s in steps if s.tool != "compare_runs" for n in s.needs})
    if missing:
        conclusion.append(f"Still needed from the user: {'; '.join(missing)}.")
    # The question is this tool's one input: a branch found in it is the plan's answer (ok); none found leaves the
    # branch to the user's next words (unknown, and what would decide).
    read = Coverage.read("symptom", f"the question ({len(params.symptom)} characters): "
                         + (f"matched {', '.join(scores[0].matched)}" if scores else "no branch's keyword in it"))
    return TriagePlanResult(
        severity=Severity.ok if scores else Severity.unknown, conclusion=conclusion[:3], coverage=[read],
        decides=None if scores else "Which symptom it is, in the user's words: slow, hung, one rank slow, out of "
        "memory, NaN, inference latency or torch.compile.",
        next_steps=[NextStep(branch=chosen.id, action=f"Read sop://{chosen.id}",
                             why="The branch's triage table maps each finding to its cause, fix and verification.")],
        branch=chosen.id, confidence=confidence, steps=steps, alternatives=scores, ranks_named=named)
