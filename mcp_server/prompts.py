"""The SOP as MCP prompts: `triage` (the user's symptom -> instructions with the plan to follow),
`triage_report` (the one-call report) and one prompt per branch (`sop_<branch id>`), plus the `sop://rules`
resource. The text is built from sop/ and from triage_plan's own plan, so the prompts, the resources and the
tool never disagree."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.server import MCPServer

from sop import branch_markdown, branches, rules_markdown, tool_call
from tools.core.context import ToolContext

if TYPE_CHECKING:
    from tools.triage.plan import TriagePlanResult

__all__ = ["add_prompts", "triage_instructions"]

_ANSWER = ("Answer the user with one markdown table (symptom | root cause | evidence | fix | verification), then at "
           "most three sentences; quote each tool's numbers as evidence and cite an official reference per fix "
           "(the branch's references in sop://<branch>).")


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def triage_instructions(plan: TriagePlanResult, symptom: str) -> str:
    lines = [f"The user reports: {symptom}", "",
             f"SOP branch: `{plan.branch}` (confidence {plan.confidence:.2f}); read sop://{plan.branch} for its "
             "triage table.", "", "Make these calls in order (the first two at once, without waiting for details):"]
    for number, step in enumerate(plan.steps, 1):
        need = f" (first ask the user for: {', '.join(step.needs)})" if step.needs else ""
        lines.append(f"{number}. `{tool_call(step.tool, step.arguments)}`: {step.decides}{need}")
    lines += ["", "After each call, follow its next_steps; stay on the branch until it is confirmed or ruled out. A "
              "gpu_hardware finding goes first.", "", rules_markdown(), _ANSWER]
    return "\n".join(lines)


def add_prompts(server: MCPServer) -> None:
    @server.prompt(name="triage", title="Triage a slow or hung GPU job",
                   description="The SOP for the user's symptom (English or Chinese): the branch and the tool calls "
                   "to make in order, the hard rules and the answer format. Optional artifact paths "
                   "(comma-separated) and the job's Slurm id (slurm_job: every node of it) are put into the calls.")
    async def triage(symptom: str, logs: str = "", traces: str = "", stacks: str = "", fr_dir: str = "",
                     slurm_job: str = "") -> str:
        from tools.triage.plan import TriagePlanInput, triage_plan  # on first use: the server starts without it

        params = TriagePlanInput(symptom=symptom[:2000], logs=_split(logs), traces=_split(traces),
                                 stacks=_split(stacks), fr_dir=fr_dir or None, slurm_job=slurm_job or None)
        plan = await triage_plan(params, ToolContext(roots=()))
        return triage_instructions(plan, symptom)

    @server.prompt(name="triage_report", title="One-call triage report",
                   description="Ask for the triage_report tool on the job's artifacts (comma-separated paths) or its "
                   "Slurm id, and for the answer in the SOP's format.")
    def triage_report_prompt(logs: str = "", traces: str = "", stacks: str = "", fr_dir: str = "",
                             slurm_job: str = "") -> str:
        arguments = {k: v for k, v in (("logs", _split(logs)), ("traces", _split(traces)), ("stacks", _split(stacks)),
                                       ("fr_dir", fr_dir or None), ("slurm_job", slurm_job or None)) if v}
        return (f"Call `{tool_call('triage_report', arguments)}`. It runs the health check and every tool that has "
                "inputs and returns the SOP's table. Relay its table and conclusion; for each row, follow its branch's "
                "next step (next_steps) before you call the cause confirmed.\n\n" + rules_markdown() + "\n" + _ANSWER)

    for branch in branches().values():
        _add_branch_prompt(server, branch.id, branch.title)

    @server.resource("sop://rules", name="sop-rules", title="Hard rules for agents", mime_type="text/markdown")
    def sop_rules() -> str:
        return rules_markdown() + "\n" + _ANSWER + "\n"


def _add_branch_prompt(server: MCPServer, branch_id: str, title: str) -> None:
    @server.prompt(name=f"sop_{branch_id}", title=f"SOP: {title}",
                   description=f"The {branch_id} branch of the triage SOP: steps with their tool calls, triage "
                   "table, env vars, commands and references.")
    def branch_prompt(context: str = "") -> str:
        page = branch_markdown(branch_id) or ""
        said = f"The user reports: {context}\n\n" if context else ""
        return f"{said}Follow this branch's steps in order.\n\n{page}\n{rules_markdown()}\n{_ANSWER}"
