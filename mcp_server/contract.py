"""The tool contract, applied once for every tool by both the MCP server and the CLI.

validate the arguments against the tool's input model -> run it under the wall-clock limit ->
redact token-like strings -> cut rows to the byte budget. Errors come out as TriageError with an
actionable message; nothing here imports MCP.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import ValidationError

from mcp_server.registry import ToolSpec
from mcp_server.render import fit_to_budget
from mcp_server.settings import Settings
from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded
from tools.core.models import InputModel, ToolResult
from tools.core.redact import redact_value

__all__ = ["describe_validation_error", "execute", "validate_arguments"]


def describe_validation_error(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown argument"
        if not error["loc"]:
            # A check across fields: the message names them; echoing every argument helps nobody.
            problems.append(message)
            continue
        where = ".".join(str(p) for p in error["loc"])
        problems.append(f"{where}: {message} (got {error.get('input')!r})")
    return "; ".join(problems)


def validate_arguments(spec: ToolSpec, arguments: dict[str, Any]) -> InputModel:
    try:
        return spec.input_model.model_validate(arguments)
    except ValidationError as exc:
        known = ", ".join(spec.input_model.model_fields)
        raise BadInput(
            f"invalid arguments for {spec.name}: {describe_validation_error(exc)}.",
            f"Valid arguments: {known}; see the tool's input schema for bounds.",
        ) from exc


async def execute(spec: ToolSpec, arguments: dict[str, Any], settings: Settings) -> ToolResult:
    """Run one tool call under the contract; raises TriageError for every expected failure."""
    params = validate_arguments(spec, arguments)
    ctx = ToolContext(roots=settings.roots, timeout_s=settings.timeout_s, remote_python=settings.remote_python,
                      ssh_config=settings.ssh_config)
    try:
        with anyio.fail_after(settings.timeout_s):
            result = await spec.function(params, ctx)
    except TimeoutError as exc:
        raise LimitExceeded(
            f"{spec.name} did not finish within {settings.timeout_s:g} s; it was stopped and its child "
            "processes killed.",
            "Ask for less (fewer GPUs, samples or files), or raise --timeout.",
        ) from exc
    redacted = spec.result_model.model_validate(redact_value(result.model_dump(mode="json")))
    return fit_to_budget(redacted, spec.title, settings.max_bytes)
