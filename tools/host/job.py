"""profile_cpu and sample_host over every node of a job: which processes each node's collector looks at, the node
timeout a recording needs, and the per-node verdicts that one job-level answer is made of.

Each node runs the same tool in collector mode (`gpu-triage <tool> --local --json`, tools/cluster/nodes.py): it finds
this job's ranks on that node (inside a Slurm step, among the job's own pids) and answers for that node only; the
job-level call labels every row with its node and takes the verdict of the node that is worst off.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel, Field

from tools.cluster import discover_job, slurm_pids_on_this_node
from tools.core.context import ToolContext
from tools.core.errors import BadInput
from tools.core.limits import NODES_FANOUT_MARGIN_S
from tools.core.models import Coverage, Severity

__all__ = ["JobAnswers", "NodeVerdict", "gather_nodes", "job_pids_here", "label_rows", "node_timeout_for"]

# What a collector needs beyond its own sampling window: the interpreter and our imports start, py-spy attaches and
# writes its file.
_COLLECTOR_OVERHEAD_S = 15.0


class NodeVerdict(BaseModel):
    node: str
    verdict: str = Field(description="The node's own verdict, or 'no_answer'.")
    severity: Severity | None = None
    evidence: str = Field(description="The node's first finding, or why it did not answer.")


def node_timeout_for(window_s: float, asked_s: float, ctx: ToolContext) -> float:
    """A node's collector gets at least its sampling window plus its start-up: a shorter node timeout would cut
    every node off mid-recording, so a call without that much time left is refused at once."""
    needed = window_s + _COLLECTOR_OVERHEAD_S
    if ctx.remaining_s() < needed + NODES_FANOUT_MARGIN_S + 1:
        raise BadInput(f"a {window_s:g} s window on every node needs about {needed + NODES_FANOUT_MARGIN_S:.0f} s; "
                       f"the call has {ctx.remaining_s():.0f} s left.",
                       "Lower duration_s or raise the server's --timeout.")
    return max(asked_s, needed)


async def job_pids_here(limit: int, local: bool) -> list[int]:
    """The ranks of the job on this host (RANK / WORLD_SIZE in their environment); in collector mode under Slurm,
    among this job's pids on this node only (other jobs, and other emulated nodes on one machine, stay out)."""
    within = await slurm_pids_on_this_node() if local else None
    found, notes = discover_job(limit, within=within)
    if not found:
        raise BadInput("no distributed job found on this host: " + notes[0],
                       "Pass the trainer's pids (pid) or a command-line pattern (match).")
    return [p.pid for p in found]


class _Finding(Protocol):
    @property
    def evidence(self) -> str: ...


class _NodeResult(Protocol):
    @property
    def verdict(self) -> str: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def findings(self) -> Sequence[_Finding]: ...
    @property
    def notes(self) -> list[str]: ...


class _Labelled(Protocol):
    node: str | None


ResultT = TypeVar("ResultT", bound=_NodeResult)


@dataclass
class JobAnswers(Generic[ResultT]):
    """The nodes' answers sorted out: the results of the nodes that answered, every node's verdict, the notes
    (prefixed with the node), and the node whose verdict leads."""

    answered: dict[str, ResultT]
    nodes: list[NodeVerdict]
    notes: list[str] = field(default_factory=list)
    lead: NodeVerdict | None = None
    coverage: list[Coverage] = field(default_factory=list)  # per node: answered, or why not

    @property
    def undecided(self) -> list[str]:
        """The nodes whose evidence is missing from the job's answer: silent, or unable to judge themselves."""
        return [n.node for n in self.nodes if n.verdict == "no_answer" or n.severity is Severity.unknown]

    def conclusion(self, label: str, opening: str, fix: str, nothing: str) -> list[str]:
        first = f"{label}: {len(self.answered)} of {len(self.nodes)} node(s) answered{opening}."
        if not self.answered:
            return [first, "No node answered: check that gpu-triage is installed there."]
        if self.lead is None:
            return [first, nothing]
        agree = sum(1 for n in self.nodes if n.verdict == self.lead.verdict)
        return [first, f"{self.lead.verdict} on {self.lead.node} ({agree} of {len(self.answered)} node(s) say so): "
                f"{self.lead.evidence}.", f"Fix: {fix}."]


def gather_nodes(answers: dict[str, ResultT | str], missing: str) -> JobAnswers[ResultT]:
    """`missing`: what a silent node's absence costs the verdict ("their processes are missing")."""
    job: JobAnswers[ResultT] = JobAnswers({}, [])
    for node, answer in answers.items():
        if isinstance(answer, str):
            job.nodes.append(NodeVerdict(node=node, verdict="no_answer", evidence=answer))
            job.coverage.append(Coverage.not_understood(node, f"no answer: {answer}"))
            continue
        job.answered[node] = answer
        job.coverage.append(Coverage.partial(node, "answered, but could not judge its own inputs")
                            if answer.severity is Severity.unknown else
                            Coverage.read(node, f"answered: {answer.verdict}"))
        job.notes += [f"{node}: {note}" for note in answer.notes]
        job.nodes.append(NodeVerdict(node=node, verdict=answer.verdict, severity=answer.severity,
                                     evidence=answer.findings[0].evidence if answer.findings else
                                     "nothing stands out"))
    silent = [n.node for n in job.nodes if n.verdict == "no_answer"]
    if silent:
        job.notes.insert(0, f"no answer from {len(silent)} node(s): {', '.join(silent)}; {missing}.")
    # The node that leads: the most severe verdict, nodes in their order.
    judged = [v for v in job.nodes if v.severity is not None and v.verdict not in ("none", "no_answer")]
    job.lead = max(judged, key=lambda v: (v.severity or Severity.ok).rank, default=None)
    return job


def label_rows(node: str, *groups: Iterable[_Labelled]) -> None:
    """Collector mode: every row of this node's answer says which node it is from."""
    for group in groups:
        for row in group:
            row.node = node
