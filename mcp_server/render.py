"""Turns a tool result into the text the model reads: markdown tables, at most three sentences of
conclusion, the next SOP steps, and a note when rows were cut. No MCP import: the CLI uses it too.

`fit_to_budget` is the single place the byte budget is enforced. It drops rows from the end of the
result's lists (least important tables first, each kept to at least one row) until the markdown fits
and the JSON is within JSON_BUDGET_FACTOR times the budget, then records the cut in `truncated`.
"""

from __future__ import annotations

import json
from typing import TypeVar

from tools.core.limits import JSON_BUDGET_FACTOR
from tools.core.models import Table, ToolResult, Truncation

__all__ = ["fit_to_budget", "render_markdown", "to_json"]

R = TypeVar("R", bound=ToolResult)

_MAX_CELL_CHARS = 160


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= _MAX_CELL_CHARS else text[: _MAX_CELL_CHARS - 1] + "…"


def _table_markdown(table: Table) -> str:
    if not table.rows:
        return ""
    lines = [f"**{table.title}**", "", "| " + " | ".join(table.columns) + " |",
             "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", table.note]
    return "\n".join(lines)


def render_markdown(result: ToolResult, title: str) -> str:
    parts = [f"## {title}: {result.severity.value}"]
    parts += [md for md in (_table_markdown(t) for t in result.tables()) if md]
    parts.append("**Conclusion:** " + " ".join(result.conclusion))
    if result.next_steps:
        parts.append("**Next steps:**\n" + "\n".join(
            f"- [{s.branch}] {s.action} — {s.why}" for s in result.next_steps))
    if result.truncated:
        cut = ", ".join(f"{n} rows of `{field}`" for field, n in result.truncated.rows_cut.items())
        parts.append(f"_Cut to fit {result.truncated.max_bytes} bytes: {cut} not shown "
                     f"(also cut from the JSON). To see them, {result.truncated.hint}._")
    return "\n\n".join(parts) + "\n"


def to_json(result: ToolResult) -> str:
    return json.dumps(result.model_dump(mode="json"), ensure_ascii=False)


def _sizes(result: ToolResult, title: str) -> tuple[int, int]:
    return len(render_markdown(result, title).encode()), len(to_json(result).encode())


def fit_to_budget(result: R, title: str, max_bytes: int) -> R:
    """Return `result`, with rows cut from its table lists if its rendering exceeds `max_bytes`."""
    json_budget = max_bytes * JSON_BUDGET_FACTOR
    text_size, json_size = _sizes(result, title)
    if text_size <= max_bytes and json_size <= json_budget:
        return result
    fields = [t.source_field for t in result.tables() if t.source_field]
    original = {f: len(getattr(result, f)) for f in fields}
    current = result
    # Least important (last) tables first; halve the step until a single row decides.
    for field in reversed(fields):
        items = list(getattr(result, field))
        # No more rows can fit than the budget has bytes for at a few bytes a row: the search starts there, not
        # at 10^5 rows of a long capture (each trial renders the whole result).
        low, high = 1 if items else 0, min(len(items), max_bytes // 4)
        while low < high:
            mid = (low + high + 1) // 2
            trial = _with_cut(current, field, items[:mid], original, max_bytes, result.narrow_hint)
            t_size, j_size = _sizes(trial, title)
            if t_size <= max_bytes and j_size <= json_budget:
                low = mid
            else:
                high = mid - 1
        current = _with_cut(current, field, items[:low], original, max_bytes, result.narrow_hint)
        t_size, j_size = _sizes(current, title)
        if t_size <= max_bytes and j_size <= json_budget:
            break
    return current


def _with_cut(result: R, field: str, kept: list[object], original: dict[str, int], max_bytes: int,
              hint: str) -> R:
    updated = result.model_copy(update={field: kept})
    rows_cut = {f: original[f] - len(getattr(updated, f)) for f in original}
    rows_cut = {f: n for f, n in rows_cut.items() if n > 0}
    truncated = Truncation(rows_cut=rows_cut, max_bytes=max_bytes, hint=hint) if rows_cut else None
    return updated.model_copy(update={"truncated": truncated})
