"""The rule behind every verdict: `ok` stands only on evidence read (see ToolResult.severity)."""

from __future__ import annotations

from typing import Any, TypeVar

from tools.core.models import CoverageStatus, Severity, ToolResult

__all__ = ["judged"]

R = TypeVar("R", bound=ToolResult)


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def judged(result: R) -> R:
    """The rule behind every `ok`: evidence that would have shown the problem was read. A result that says ok with
    no input read, or with an input it did not understand, becomes `unknown`, saying so; every `unknown` says what
    would decide. Tools are expected to get this right themselves; this is the backstop, applied by the contract to
    every call and by the report to each tool it runs."""
    read = [c for c in result.coverage if c.status is CoverageStatus.read or c.status is CoverageStatus.partial]
    not_understood = [c for c in result.coverage if c.status is CoverageStatus.not_understood]
    formats = sorted({f for c in not_understood for f in (c.formats_known or [])})
    update: dict[str, Any] = {}
    if result.severity is Severity.ok and (not read or not_understood):
        if not read:
            why = ("Cannot judge: no input held evidence this tool reads"
                   + (f" ({not_understood[0].input}: {_sentence(not_understood[0].detail)})" if not_understood
                      and not_understood[0].detail else "") + ".")
            conclusion = [why]
        else:
            first = not_understood[0]
            why = (f"Cannot judge the whole: {len(not_understood)} of {len(result.coverage)} inputs were not "
                   f"understood ({first.input}" + (f": {_sentence(first.detail)}" if first.detail else "") + ").")
            conclusion = [why, f"Of what was read: {_sentence(result.conclusion[0])}." if result.conclusion
                          else "Nothing was found in what was read."]
        update.update(severity=Severity.unknown, conclusion=conclusion)
    if (update.get("severity") or result.severity) is Severity.unknown and not result.decides:
        update["decides"] = ("The same call on inputs in a format it reads: " + ", ".join(formats) + "."
                             if formats else "The same call on the job's own output of the kind this tool reads.")
    return result.model_copy(update=update) if update else result
