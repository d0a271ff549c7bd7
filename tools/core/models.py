"""Shapes shared by every tool result.

A result is a pydantic model (the MCP structured content and the CLI's --json) that also knows
which of its lists are shown as markdown tables. The renderer in mcp_server/render.py turns it into
text and, when the byte budget is exceeded, drops rows from the end of those lists, so the text and
the JSON always show the same rows. Tools therefore put the most important rows first.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sop import branch_ids, branches, tool_call
from tools.core.limits import (
    MAX_PATH_CHARS,
    NODES_DEFAULT_TIMEOUT_S,
    NODES_MAX,
    NODES_MAX_HOST_CHARS,
    NODES_MAX_TIMEOUT_S,
    NODES_MIN_TIMEOUT_S,
)

__all__ = [
    "Coverage",
    "CoverageStatus",
    "Finding",
    "JobInput",
    "NameArg",
    "NodesInput",
    "PathArg",
    "InputModel",
    "IsPath",
    "is_path_list",
    "NextStep",
    "Severity",
    "Table",
    "cell",
    "ToolResult",
    "Truncation",
    "worst",
]


class IsPath:
    """Marks an argument as a path or glob, for the CLI: a shell's relative path means the working directory."""


# A path or glob argument: bounded in the schema too (the roots check happens when it is opened).
PathArg = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS), IsPath()]
# One short name (a field of nvidia-smi, a preset): bounded alike.
NameArg = Annotated[str, Field(min_length=1, max_length=128)]


class Severity(StrEnum):
    """How bad a finding is. `unknown`: the inputs were read but do not decide the question (a capture we cannot
    read, a bandwidth with no figure to judge it by, one rank of four); it ranks above ok, since a problem may be
    hiding there, and below warn, since none was seen. The CLI exit code is `exit_code` of the worst one."""

    ok = "ok"
    unknown = "unknown"
    warn = "warn"
    crit = "crit"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]

    @property
    def exit_code(self) -> int:
        """0 ok, 1 warn, 2 crit, 4 unknown (3 is a call that failed: bad input or a tool error)."""
        return _EXIT_CODES[self]


_SEVERITY_RANK = {Severity.ok: 0, Severity.unknown: 1, Severity.warn: 2, Severity.crit: 3}
_EXIT_CODES = {Severity.ok: 0, Severity.warn: 1, Severity.crit: 2, Severity.unknown: 4}


def worst(severities: Iterable[Severity]) -> Severity:
    """The most severe of `severities`; ok when there are none."""
    return max(severities, key=lambda s: s.rank, default=Severity.ok)


def _known_branch(value: str) -> str:
    if value not in branch_ids():
        raise ValueError(f"unknown SOP branch {value!r}; known: {', '.join(sorted(branch_ids()))}")
    return value


def is_path_list(annotation: object) -> bool:
    """Whether a field's type is a list of paths (list[PathArg], optional or not)."""
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(arg) is list:
            item = typing.get_args(arg)[0]
            return any(isinstance(m, IsPath) for m in getattr(item, "__metadata__", ()))
    return False


class InputModel(BaseModel):
    """Base of every tool's input: unknown arguments are an error, not silently dropped. A list of paths also takes
    one path as a bare string: MCP clients and the Inspector send `logs=steps/rank*.log` so."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _one_path_is_a_list(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        wrap = [name for name, value in data.items() if isinstance(value, str) and name in cls.model_fields
                and is_path_list(cls.model_fields[name].annotation)]
        return {**data, **{name: [data[name]] for name in wrap}} if wrap else data

    # How the CLI spells this input (the MCP schema ignores both): the field (or fields, in order) given as
    # positional arguments, and options that set several fields at once: option -> (help, fixed values, the
    # field that takes the option's number).
    cli_positional: ClassVar[str | tuple[str, ...] | None] = None
    cli_shortcuts: ClassVar[dict[str, tuple[str, dict[str, Any], str]]] = {}


class JobInput(InputModel):
    """Job-level arguments of the tools that reach every node of a job (tools/cluster/nodes.py): a Slurm job id, or
    hosts reached over SSH. Without them the tool looks at this node only."""

    slurm_job: str | None = Field(default=None, pattern=r"^[0-9]{1,12}$", max_length=12,
                                  description="Slurm job id (digits): collect from every node of this running job "
                                  "(srun --overlap, one collector per node) and give one verdict for the job.")
    hosts: list[Annotated[str, Field(min_length=1, max_length=NODES_MAX_HOST_CHARS + 70)]] = Field(
        default_factory=list, max_length=NODES_MAX,
        description="Hosts to collect from over SSH, as [user@]host[:port] (key or agent only, never a password).")
    hostfile: PathArg | None = Field(default=None, description="A file naming the SSH hosts, one per line "
                                     "(MPI-style 'host slots=N' lines work).")
    node_timeout_s: float = Field(default=NODES_DEFAULT_TIMEOUT_S, ge=NODES_MIN_TIMEOUT_S, le=NODES_MAX_TIMEOUT_S,
                                  description="Time each node's collector gets; a node silent past it is reported "
                                  "as such and the others are still used.")


class NodesInput(JobInput):
    """JobInput of a tool that is also a per-node collector (`gpu-triage <tool> --local --json`)."""

    local: bool = Field(default=False, description="Collector mode, used on each node by a job-level call: return "
                        "only this node's evidence, labelled with its name, for the caller to merge.")

    @model_validator(mode="after")
    def _one_node_or_the_job(self) -> NodesInput:
        if self.local and (self.slurm_job is not None or self.hosts or self.hostfile is not None):
            raise ValueError("local (collector mode) is for one node; it cannot be combined with slurm_job, hosts or "
                             "hostfile: drop local for a job-level call")
        return self


class Finding(BaseModel):
    """One check with its verdict, in the shape of the SOP's triage table."""

    check: str = Field(description="What was checked, e.g. 'GPU 3 temperature'.")
    value: str = Field(description="What was measured, with its unit.")
    threshold: str = Field(description="The limit it was compared with.")
    severity: Severity
    meaning: str = Field(description="What it means for the job, in one sentence.")
    sop_branch: str | None = Field(default=None, description="The SOP branch that handles it.")

    @field_validator("sop_branch")
    @classmethod
    def _check_branch(cls, value: str | None) -> str | None:
        return None if value is None else _known_branch(value)


class NextStep(BaseModel):
    """Where the SOP goes from here."""

    branch: str = Field(description="SOP branch id (see the sop://index resource).")
    action: str = Field(description="The call or command to run next.")
    why: str = Field(description="What that step will decide.")
    step: str | None = Field(default=None, description="The SOP step id within the branch (sop://<branch>).")

    @field_validator("branch")
    @classmethod
    def _check_branch(cls, value: str) -> str:
        return _known_branch(value)

    @model_validator(mode="after")
    def _check_step(self) -> NextStep:
        if self.step is not None and branches()[self.branch].step(self.step) is None:
            raise ValueError(f"branch {self.branch!r} has no step {self.step!r}")
        return self

    @classmethod
    def from_sop(cls, branch: str, done: Iterable[str] = (), **arguments: Any) -> NextStep:
        """The branch's first step whose tool is not in `done` (the tools that have answered), as a next step,
        with `arguments` (values the answering tool knows, e.g. its paths) over the step's own; when every step
        is done, the branch's triage table."""
        made = set(done)
        step = next((s for s in branches()[branch].steps if s.tool not in made), None)
        if step is None:
            return cls(branch=branch, action=f"Read sop://{branch}: match the findings to its triage table",
                       why="Each row gives the cause, the fix and how to verify it.")
        merged = {**step.arguments, **arguments}
        return cls(branch=branch, action=tool_call(step.tool, merged), why=step.decides, step=step.id)


class CoverageStatus(StrEnum):
    """How much of one input a tool could use."""

    read = "read"  # read whole, and it is evidence of the kind the question needs
    partial = "partial"  # read in part (cut short, sampled, some lines or ranks only): `detail` says which part
    not_understood = "not_understood"  # not a format the tool reads, or empty of what it needs


class Coverage(BaseModel):
    """What a tool made of one input (a file, a live source such as NVML or /proc, a URL, a node)."""

    input: str = Field(description="The input: a path, a URL, 'NVML', '/proc', a node or rank name.")
    status: CoverageStatus
    detail: str = Field(default="", description="What was read, or why only part of it, or what it looked like.")
    formats_known: list[str] | None = Field(default=None, description="For an input not understood: the formats "
                                            "this tool reads.")

    @classmethod
    def read(cls, input: str, detail: str = "") -> Coverage:
        return cls(input=input, status=CoverageStatus.read, detail=detail)

    @classmethod
    def partial(cls, input: str, detail: str) -> Coverage:
        return cls(input=input, status=CoverageStatus.partial, detail=detail)

    @classmethod
    def not_understood(cls, input: str, detail: str, formats_known: Iterable[str] | None = None) -> Coverage:
        return cls(input=input, status=CoverageStatus.not_understood, detail=detail,
                   formats_known=None if formats_known is None else list(formats_known))


class Truncation(BaseModel):
    """Rows cut to keep the response within the byte budget."""

    rows_cut: dict[str, int] = Field(description="Rows dropped per list field.")
    max_bytes: int = Field(description="The byte budget that was applied.")
    hint: str = Field(description="How to narrow the call to see the rest.")
    cell_chars: int | None = Field(default=None, description="Set when one row alone was over the budget: the "
                                   "markdown's cells were cut to this many characters (the JSON keeps them whole).")
    columns_shown: int | None = Field(default=None, description="Set when even short cells were over the budget: "
                                      "the markdown shows each table's first N columns (the JSON has them all).")


@dataclass(frozen=True)
class Table:
    """A markdown table; `source_field` names the result list whose items are its rows (cuttable)."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    source_field: str | None = None
    note: str = field(default="")


def cell(value: float | None) -> str:
    """A table cell for a number that may be unknown: '-' for None or NaN, one decimal for a float."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


class ToolResult(BaseModel):
    """Fields every result carries. Subclasses add their data and implement `tables()`."""

    severity: Severity = Field(description="Worst finding: ok, warn or crit; unknown when the inputs were read but "
                               "do not decide the question (see `decides`). ok means evidence that would have "
                               "shown the problem was read, and the problem is not there.")
    conclusion: list[str] = Field(
        max_length=3, description="At most three sentences: the verdict and what to do."
    )
    next_steps: list[NextStep] = Field(default_factory=list)
    coverage: list[Coverage] = Field(default_factory=list, description="Per input: read, partly read (why) or not "
                                     "understood (what it looked like, which formats are read).")
    decides: str | None = Field(default=None, description="When severity is unknown: the evidence that would "
                                "decide the question.")
    notes: list[str] = Field(default_factory=list, description="Caveats: what was skipped, assumed or cut; shown "
                             "in the markdown after the conclusion.")
    truncated: Truncation | None = Field(
        default=None, description="Set when rows were cut to fit the byte budget."
    )

    # How to ask for less when the budget cuts rows; each tool says it in its own terms.
    narrow_hint: ClassVar[str] = "narrow the call"

    def tables(self) -> list[Table]:
        raise NotImplementedError
