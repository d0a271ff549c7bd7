"""profile_cpu and sample_host over every node of a job: which processes each node's collector looks at, the node
timeout a recording needs, and the per-node verdicts that one job-level answer is made of.

Each node runs the same tool in collector mode (`gpu-triage <tool> --local --json`, tools/cluster/nodes.py): it finds
this job's ranks on that node (inside a Slurm step, among the job's own pids) and answers for that node only; the
job-level call labels every row with its node and takes the verdict of the node that is worst off.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tools.cluster import discover_job, slurm_pids_on_this_node
from tools.core.context import ToolContext
from tools.core.errors import BadInput
from tools.core.limits import NODES_FANOUT_MARGIN_S
from tools.core.models import Severity

__all__ = ["NodeVerdict", "job_pids_here", "node_timeout_for", "worst_node"]

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


def worst_node(verdicts: list[NodeVerdict]) -> NodeVerdict | None:
    """The node whose verdict leads the job's: the most severe finding first, nodes in their order."""
    answered = [v for v in verdicts if v.severity is not None and v.verdict not in ("none", "no_answer")]
    return max(answered, key=lambda v: (v.severity or Severity.ok).rank, default=None)
