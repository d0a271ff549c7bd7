"""The tool contract, applied once for every tool by both the MCP server and the CLI.

validate the arguments against the tool's input model -> run it under the wall-clock limit ->
redact token-like strings -> write paths under the roots relative to them -> cut rows to the byte budget. Errors
come out as TriageError with an actionable message; nothing here imports MCP.

A tool runs on an event loop of its own, in a worker thread: a file-system call that never returns (a stalled NFS,
Lustre or FUSE mount blocks even stat in the kernel) then holds that thread only, and the call still ends at its
deadline while the server answers the others. What it was blocked on is named (tools/core/stalls.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from pydantic import ValidationError

from mcp_server.registry import ToolSpec
from mcp_server.render import fit_to_budget
from mcp_server.settings import Settings
from mcp_server.shown_paths import relative_paths
from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.core.files import take_unmatched
from tools.core.limits import CALL_STOP_GRACE_S, PROGRESS_INTERVAL_S, STALLED_CALLS_MAX
from tools.core.models import Coverage, InputModel, ToolResult
from tools.core.progress import Progress
from tools.core.redact import redact_value
from tools.core.stalls import CALL_ID, blocked, new_call_id, stalled_accesses, stuck_accesses
from tools.core.verdict import judged

__all__ = ["Reporter", "describe_validation_error", "execute", "validate_arguments", "with_unmatched"]

# Where progress goes: MCP's report_progress (a no-op without a progressToken) or the CLI's progress line.
Reporter = Callable[[float, float | None, str | None], Awaitable[None]]


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


async def _heartbeat(progress: Progress, started: float, report: Reporter) -> None:
    """Every PROGRESS_INTERVAL_S, how far the call is: percent of the work where the tool says how much it has done
    (never 100 before the end), else the seconds it has run, with no total ("running N s"): a share of the time
    limit would read 1-2 % for a call that is nearly done. Always increasing, as the spec requires."""
    last = 0.0
    while True:
        await anyio.sleep(PROGRESS_INTERVAL_S)
        done, total, message = progress.state
        elapsed = time.monotonic() - started
        figure: float
        of: float | None
        if total:
            figure, of = min(99.9, max(100 * min(done, total) / total, last + 0.01)), 100.0
        else:
            figure, of = max(elapsed, last + 0.01), None
            message = message or f"running {elapsed:.0f} s"
        last = figure
        try:
            await report(round(figure, 2), of, message)
        except Exception:  # a client gone or a closed stream must not fail the call: progress is best effort
            return


async def _on_own_loop(call_id: int, call: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    """`call()` on a fresh event loop in a worker thread. Cancelled (the deadline, or the client's cancel), the
    tool's task is cancelled on its loop, so its children are killed as before, and given CALL_STOP_GRACE_S to
    finish; a thread still blocked after that is left behind, and the caller goes on."""
    inner: dict[str, Any] = {}
    finished = threading.Event()

    def body() -> ToolResult:
        CALL_ID.set(call_id)

        async def main() -> ToolResult:
            inner["loop"], inner["task"] = asyncio.get_running_loop(), asyncio.current_task()
            if inner.get("cancelled"):
                raise asyncio.CancelledError
            return await call()

        try:
            return asyncio.run(main())
        finally:
            finished.set()

    try:
        return await anyio.to_thread.run_sync(body, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        inner["cancelled"] = True
        if "task" in inner:
            try:
                inner["loop"].call_soon_threadsafe(inner["task"].cancel)
            except RuntimeError:  # its loop closed meanwhile: the call has just finished
                pass
        with anyio.CancelScope(shield=True):
            until = time.monotonic() + CALL_STOP_GRACE_S
            # No waiting out the grace for a thread the kernel holds in a file-system call: it will not unwind.
            while not finished.is_set() and time.monotonic() < until and not blocked(call_id):
                await anyio.sleep(0.02)
        raise


def _refuse_when_too_many_stalled() -> None:
    stuck = stalled_accesses()
    calls = {access.call for access in stuck}
    if len(calls) >= STALLED_CALLS_MAX:
        raise LimitExceeded(
            f"{len(calls)} earlier calls are still blocked in the file system ({stuck[0].describe()}); this "
            "server takes no more calls until they return.",
            "Fix or unmount the stalled file systems, or restart the server.")


def with_unmatched(result: ToolResult, globs: list[str]) -> ToolResult:
    """The call's globs that matched no file (while others did: tools/core/files.py) as coverage rows, so a gap in
    the evidence is named, and an ok over it becomes unknown (`judged`), rather than the call failing or going
    quiet about it. A tool that already reported a glob keeps its own row."""
    reported = {c.input for c in result.coverage}
    rows = [Coverage.not_understood(glob, "no match: no file under the roots matches this glob")
            for glob in globs if glob not in reported]
    return result.model_copy(update={"coverage": [*result.coverage, *rows]}) if rows else result


async def execute(spec: ToolSpec, arguments: dict[str, Any], settings: Settings,
                  report: Reporter | None = None) -> ToolResult:
    """Run one tool call under the contract; raises TriageError for every expected failure. `report` receives
    the call's progress while it runs."""
    params = validate_arguments(spec, arguments)
    _refuse_when_too_many_stalled()
    call_id = new_call_id()
    ctx = ToolContext(roots=settings.roots, timeout_s=settings.timeout_s, remote_python=settings.remote_python,
                      ssh_config=settings.ssh_config)

    async def run() -> ToolResult:
        if report is None:
            return await _on_own_loop(call_id, lambda: spec.function(params, ctx))
        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(_heartbeat, ctx.progress, ctx.started, report)
            try:
                outcome = await _on_own_loop(call_id, lambda: spec.function(params, ctx))
            except Exception as exc:  # raised below as itself, not inside the task group's ExceptionGroup
                failure = exc
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return outcome

    try:
        with anyio.fail_after(settings.timeout_s):
            result = with_unmatched(await run(), take_unmatched(call_id))
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise
        # Python refuses int() of over 4300 digits (a guard against quadratic conversion); no tool output holds
        # such a number, so the file is damaged or not what it claims: one clear refusal for every reader.
        raise UnreadableInput(f"{spec.name}: the input holds a number of more than 4300 digits; it is damaged or "
                              "not the output it looks like.", "Pass the file the program wrote.") from exc
    except TimeoutError as exc:
        stuck = stuck_accesses(call_id)
        if stuck:
            raise LimitExceeded(
                f"{spec.name} did not finish within {settings.timeout_s:g} s: {stuck[0].describe()}"
                + (f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else "") + ".",
                "Check the mount (`mount`, `dmesg` for 'not responding'). Later calls that name paths there are "
                "refused at once until this one returns.") from exc
        doing = ctx.progress.state[2]  # what the tool said it was doing
        raise LimitExceeded(
            f"{spec.name} did not finish within {settings.timeout_s:g} s"
            + (f" (its last progress: {doing})" if doing else "") + "; it was stopped and its child processes killed.",
            "Ask for less (fewer GPUs, samples or files), or raise --timeout.",
        ) from exc
    finally:
        take_unmatched(call_id)  # a failed call's record goes too
    # Paths under the root (in the CLI, else under the working directory) written relative: usable in the next call,
    # and no machine's layout in the answer (mcp_server/shown_paths.py). With several roots a path keeps its root:
    # they are often different jobs, and a relative path found under two of them is refused.
    shown_from = [*(settings.roots if len(settings.roots) == 1 else ()),
                  *([settings.cwd] if settings.cwd is not None else [])]
    redacted = spec.result_model.model_validate(
        relative_paths(redact_value(judged(result).model_dump(mode="json")), shown_from))
    return fit_to_budget(redacted, spec.title, settings.max_bytes)
