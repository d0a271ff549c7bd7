"""openWorldHint tells a client which tools reach beyond this machine; it must follow the inputs that do so."""

from __future__ import annotations

from mcp_server.registry import TOOLS
from tests.helpers import OPEN_WORLD_TOOLS

# Inputs that make a tool reach another machine: a URL it fetches, or a job's nodes through Slurm or SSH.
REACHING_INPUTS = {"url", "source", "slurm_job", "hosts", "hostfile", "prometheus"}
# triage_plan only writes the calls down (a slurm_job it echoes into them); it reaches nothing itself.
PLANS_ONLY = {"triage_plan"}


def test_every_tool_that_can_reach_another_machine_says_so() -> None:
    reaching = {spec.name for spec in TOOLS
                if set(spec.input_model.model_fields) & REACHING_INPUTS and spec.name not in PLANS_ONLY}
    assert reaching == {spec.name for spec in TOOLS if spec.open_world}
    assert reaching == OPEN_WORLD_TOOLS
