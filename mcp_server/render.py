"""Turns a tool result into the text the model reads: markdown tables, at most three sentences of
conclusion, the next SOP steps, and a note when rows were cut. No MCP import: the CLI uses it too.

`fit_to_budget` is the single place the byte budget is enforced. It drops rows from the end of the
result's lists (least important tables first, each kept to at least one row) until the markdown fits
and the JSON is within JSON_BUDGET_FACTOR times the budget, then records the cut in `truncated`. When
the rows left are still too wide (one row of 40 nvidia-smi fields), the markdown's cells are cut shorter.
"""

from __future__ import annotations

import json
from typing import TypeVar

from tools.core.limits import JSON_BUDGET_FACTOR
from tools.core.models import CoverageStatus, Table, ToolResult, Truncation

__all__ = ["fit_to_budget", "render_markdown", "to_json"]

R = TypeVar("R", bound=ToolResult)

_MAX_CELL_CHARS = 160
_NARROWER_CELLS = (80, 40, 20)  # tried in turn when the rows left are too wide for the budget
_CAVEATS_SHOWN = 5  # the markdown's caveats; the JSON's `notes` has them all
_COVERAGE_SHOWN = 8  # inputs not read whole, listed in the markdown; `coverage` has them all


def _cell(text: str, limit: int) -> str:
    """A cell's text within `limit` characters: whole when it fits, else cut at a word's end (never inside a word or a
    path) when that keeps at least 60 % of the room; the JSON keeps it whole."""
    text = " ".join(text.split()).replace("|", "\\|")
    if len(text) <= limit:
        return text
    room = text[: limit - 1]
    space = room.rfind(" ")
    return (room[:space] if space >= limit * 0.6 else room).rstrip(" ,;:") + "…"


def _table_markdown(table: Table, limit: int, columns: int | None) -> str:
    if not table.rows:
        return ""
    shown = table.columns[:columns]
    lines = [f"**{table.title}**", "", "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(_cell(c, limit) for c in row[: len(shown)]) + " |" for row in table.rows]
    if len(shown) < len(table.columns):
        lines += ["", f"_{len(table.columns) - len(shown)} more columns are in the JSON._"]
    if table.note:
        lines += ["", table.note]
    return "\n".join(lines)


def render_markdown(result: ToolResult, title: str) -> str:
    cut = result.truncated
    limit = (cut.cell_chars if cut else None) or _MAX_CELL_CHARS
    columns = cut.columns_shown if cut else None
    parts = [f"## {title}: {result.severity.value}"]
    parts += [md for md in (_table_markdown(t, limit, columns) for t in result.tables()) if md]
    parts.append("**Conclusion:** " + " ".join(result.conclusion))
    parts += _caveats_markdown(result, limit)
    if result.next_steps:
        parts.append("**Next steps:**\n" + "\n".join(
            f"- [{s.branch}] {s.action} — {s.why}" for s in result.next_steps))
    if cut:
        rows = ", ".join(f"{n} rows of `{field}`" for field, n in cut.rows_cut.items())
        if rows:
            parts.append(f"_Cut to fit {cut.max_bytes} bytes: {rows} not shown "
                         f"(also cut from the JSON). To see them, {cut.hint}._")
        if cut.cell_chars:
            parts.append(f"_Cells cut to {cut.cell_chars} characters"
                         + (f" and tables to {cut.columns_shown} columns" if cut.columns_shown else "")
                         + f" to fit {cut.max_bytes} bytes; the JSON has them whole._")
    return "\n\n".join(parts) + "\n"


def _caveats_markdown(result: ToolResult, limit: int) -> list[str]:
    """What the verdict stands on besides the tables: the evidence that would decide an unknown, the inputs not read
    whole, and the tool's notes. Shown in every result, so a caveat never lives in the JSON alone."""
    parts = []
    if result.decides:
        parts.append(f"**What would decide:** {result.decides}")
    unread = [c for c in result.coverage if c.status is not CoverageStatus.read]
    if unread:
        read = len(result.coverage) - len(unread)
        lines = [f"**Inputs not read whole** ({read} of {len(result.coverage)} read whole):"]
        for entry in unread[:_COVERAGE_SHOWN]:
            known = f"(formats read: {', '.join(entry.formats_known)})" if entry.formats_known else ""
            lines.append(f"- `{_cell(entry.input, limit)}`: {entry.status.value.replace('_', ' ')}"
                         + (f", {_cell(entry.detail, limit)}" if entry.detail else "")
                         + (f" {_cell(known, limit)}" if known else ""))
        if len(unread) > _COVERAGE_SHOWN:
            lines.append(f"- and {len(unread) - _COVERAGE_SHOWN} more in `coverage`")
        parts.append("\n".join(lines))
    if result.notes:
        lines = ["**Caveats:**", *(f"- {_cell(note, limit * 2)}" for note in result.notes[:_CAVEATS_SHOWN])]
        if len(result.notes) > _CAVEATS_SHOWN:
            lines.append(f"- and {len(result.notes) - _CAVEATS_SHOWN} more in `notes`")
        parts.append("\n".join(lines))
    return parts


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
            return current
    # The rows left are still too wide for the markdown (one row of 40 nvidia-smi fields): narrower cells, then
    # as many columns as fit, the least cut that fits; the JSON keeps everything.
    truncated = current.truncated or Truncation(rows_cut={}, max_bytes=max_bytes, hint=result.narrow_hint)

    def narrowed(cell_chars: int, columns: int | None = None) -> R:
        update = {"cell_chars": cell_chars, "columns_shown": columns}
        return current.model_copy(update={"truncated": truncated.model_copy(update=update)})

    for limit in _NARROWER_CELLS:
        if _sizes(trial := narrowed(limit), title)[0] <= max_bytes:
            return trial
    low, high = 1, max((len(t.columns) for t in current.tables()), default=1)
    while low < high:
        mid = (low + high + 1) // 2
        if _sizes(narrowed(_NARROWER_CELLS[-1], mid), title)[0] <= max_bytes:
            low = mid
        else:
            high = mid - 1
    return narrowed(_NARROWER_CELLS[-1], low)


def _with_cut(result: R, field: str, kept: list[object], original: dict[str, int], max_bytes: int,
              hint: str) -> R:
    updated = result.model_copy(update={field: kept})
    rows_cut = {f: original[f] - len(getattr(updated, f)) for f in original}
    rows_cut = {f: n for f, n in rows_cut.items() if n > 0}
    truncated = Truncation(rows_cut=rows_cut, max_bytes=max_bytes, hint=hint) if rows_cut else None
    return updated.model_copy(update={"truncated": truncated})
