"""`ncu --csv` exports: the details page (one row per launch and metric, or per launch and rule) and the raw page
(one row per launch, one column per metric), as ncu prints them at profile time or on import.

Details-page generations (shared/notes/ncu_format.md, 3.1): 12 columns up to 2022.x (`Kernel Time`, no launch
shape), 15 from 2023.1 (`Block Size`, `Grid Size`, `Device`, `CC`), 20 with rule results (`Rule Name`, `Rule Type`,
`Rule Description`, `Estimated Speedup Type`, `Estimated Speedup`); NVTX columns may be inserted; `--print-summary`
gives `Invocations` and Minimum/Maximum/Average instead of a value. Columns are found by name, never by position.
`==PROF==` / `==WARNING==` lines and the application's own output are skipped wherever they are. The Host Name and
Process Name columns are never read.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator

from tools.kernels.launches import (
    FIGURE_BY_METRIC,
    STALL_METRIC,
    Launch,
    Rule,
    duration_ns,
    figure_for_label,
    is_nan,
    parse_number,
    stall_reason,
    stated_stall,
)

__all__ = ["csv_kind", "read_details_csv", "read_raw_csv"]

DURATION = "duration_ns"


def _csv_lines(text: str) -> Iterator[str]:
    """The lines of an export without ncu's own `==PROF==` / `==WARNING==` / `==ERROR==` lines."""
    for line in text.splitlines():
        if not line.startswith("=="):
            yield line


def _header_at(lines: list[str]) -> tuple[int, list[str]] | None:
    for index, line in enumerate(lines[:5000]):
        if line.startswith(('"ID"', "ID,", '"Process ID"')) or (
                '"Kernel Name"' in line and ('"Metric Name"' in line or "__" in line)):
            return index, next(csv.reader([line]))
    return None


def csv_kind(text: str) -> str | None:
    """'details' or 'raw' for an ncu CSV export, None for anything else."""
    lines = list(_csv_lines(text[: 1 << 20]))
    found = _header_at(lines)
    if found is None or "Kernel Name" not in found[1]:
        return None
    header = found[1]
    if "Metric Name" in header and ("Metric Value" in header or "Average" in header):
        return "details"
    return "raw" if any("__" in column for column in header) else None


def _rows(text: str) -> tuple[list[str], Iterable[list[str]]]:
    lines = list(_csv_lines(text))
    found = _header_at(lines)
    if found is None:
        return [], []
    index, header = found
    width = len(header)
    # Metric rows of the 20-column layout stop after Metric Value (with a trailing comma); the application's own
    # output may come after the header too: keep rows near the header's width, padded to it.
    rows = ((row + [""] * (width - len(row)))[:width] for row in csv.reader(lines[index + 1:])
            if width - 6 <= len(row) <= width + 1)
    return header, rows


def _shape(text: str) -> str | None:
    text = text.strip()
    return text if text.startswith("(") else None


def _add_rule(launch: Launch, row: dict[str, str]) -> None:
    kind = row.get("Rule Type", "").strip()
    name = row.get("Rule Name", "").strip()
    if not kind or not name:
        return
    speedup = parse_number(row.get("Estimated Speedup", ""))
    description = row.get("Rule Description", "").strip()
    message = re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0][:300]
    if not any(r.name == name and r.message == message for r in launch.rules):
        launch.rules.append(Rule(kind, name, speedup, message))
    stall = stated_stall(description)
    if stall is not None:
        launch.stated_stalls.setdefault(stall[0], stall[1:])


def read_details_csv(text: str) -> list[Launch]:
    """The launches of a details-page export (per-launch or `--print-summary`), in the order ncu printed them."""
    header, rows = _rows(text)
    summary = "Average" in header and "Metric Value" not in header
    launches: dict[tuple[str, ...], Launch] = {}
    for cells in rows:
        row = dict(zip(header, cells, strict=True))
        name = row.get("Kernel Name", "").strip()
        if not name:
            continue
        grid, block = _shape(row.get("Grid Size", "")), _shape(row.get("Block Size", ""))
        key = (row.get("ID", ""), name, grid or "", block or "") if not summary else (name, grid or "", block or "",
                                                                                     row.get("Device", ""))
        launch = launches.get(key)
        if launch is None:
            launch = launches[key] = Launch(name=name, grid=grid, block=block)
            if summary:
                launch.invocations = int(parse_number(row.get("Invocations", "")) or 1)
        label = row.get("Metric Name", "").strip()
        if not label:
            _add_rule(launch, row)
            continue
        raw_value = row.get("Average" if summary else "Metric Value", "")
        value = parse_number(raw_value)
        if value is None:
            launch.nan_values += is_nan(raw_value)
            continue
        unit = row.get("Metric Unit", "").strip()
        section = row.get("Section Name", "").strip() or None
        reason = stall_reason(section, label)
        if reason is not None:  # the breakdown table `--print-details all` adds
            launch.stalls[reason] = value
            continue
        figure = figure_for_label(section, label, unit) or FIGURE_BY_METRIC.get(label)
        if figure is None:
            stall = STALL_METRIC.match(label)
            if stall:
                launch.stalls[stall.group(1)] = value
            continue
        if figure == DURATION:
            converted = duration_ns(value, unit)
            if converted is None:
                continue
            value = converted
        launch.figures.setdefault(figure, value)
    return list(launches.values())


def read_raw_csv(text: str) -> list[Launch]:
    """The launches of a raw-page export (one row per launch; the second row holds the units)."""
    header, rows = _rows(text)
    units: list[str] | None = None
    launches = []
    for cells in rows:
        row = dict(zip(header, cells, strict=True))
        if units is None and not row.get("ID", "x").strip() and not row.get("Kernel Name", "").strip():
            units = cells
            continue
        unit_of = dict(zip(header, units or [""] * len(header), strict=True))
        name = row.get("Kernel Name", "").strip()
        if not name:
            continue
        launch = Launch(name=name, grid=_shape(row.get("Grid Size", "")), block=_shape(row.get("Block Size", "")))
        for column, raw_value in row.items():
            figure = FIGURE_BY_METRIC.get(column)
            stall = None if figure else STALL_METRIC.match(column)
            if figure is None and stall is None:
                continue
            value = parse_number(raw_value)
            if value is None:
                launch.nan_values += is_nan(raw_value)
                continue
            if stall is not None:
                launch.stalls[stall.group(1)] = value
                continue
            if figure == DURATION:
                converted = duration_ns(value, unit_of.get(column, ""))
                if converted is None:
                    continue
                value = converted
            if figure is not None:
                launch.figures.setdefault(figure, value)
        launches.append(launch)
    return launches
