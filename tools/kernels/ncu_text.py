"""`ncu` text output, as printed at profile time or by `ncu --import F`, and as pasted in READMEs, PR comments and
course logs (indented in a code block, or behind `//` in a source comment).

Per launch: a kernel line (`name(args) (GX, GY, GZ)x(BX, BY, BZ), Context 1, Stream 7, Device 0, CC 8.6`; up to
2022.x `name(args), 2022-Jun-02 19:46:33, Context 1, Stream 7` without the launch shape; `, Invocations N` with
`--print-summary`), then `Section: <name>` blocks of label / unit / value rows (the old wide style without a header
row, the compact style with one, Minimum/Maximum/Average columns in a summary), then rule messages (`OPT`, `WRN`
up to 2023.1, `INF`, `ERR`; `Est. Speedup: N%` from 2023.2) wrapped on indented lines. Rows are keyed by section and
label (shared/notes/ncu_format.md, section 4). The `[PID] process@host` line is never read.
"""

from __future__ import annotations

import re

from tools.kernels.launches import (
    Launch,
    Rule,
    duration_ns,
    figure_for_label,
    is_nan,
    parse_number,
    stall_reason,
    stated_stall,
)

__all__ = ["looks_like_ncu_text", "read_ncu_text"]

_KERNEL_NEW = re.compile(r"^(?P<name>\S.*?) \((?P<grid>\d+, ?\d+, ?\d+)\)x\((?P<block>\d+, ?\d+, ?\d+)\), "
                         r"(?:Context \d+, Stream \d+|Device \d+)(?P<rest>.*)$")
_KERNEL_OLD = re.compile(r"^(?P<name>\S.*?), \d{4}-[A-Za-z]{3}-\d{1,2} \d{1,2}:\d{2}:\d{2}, Context \d+, Stream \d+"
                         r"(?P<rest>.*)$")
_INVOCATIONS = re.compile(r"Invocations (\d+)")
_SECTION = re.compile(r"^Section: (?P<name>.+?)\s*$")
_RULE = re.compile(r"^(?P<type>OPT|WRN|INF|ERR)\s{2,}(?P<text>\S.*)$")
_SPEEDUP = re.compile(r"^Est\. (?:Local |Global )?Speedup: ?(?P<pct>[\d.,]+) ?%\s*")
_COMMENT = re.compile(r"^\s*(?://+|#+|\*+)?")
_ROW_SPLIT = re.compile(r"\s{2,}")
# Words that mark a table row's unit column (a value alone is a row without a unit).
_NUMBERISH = re.compile(r"^(?:\(!\)\s*)?[-+]?[\d.,]+$|^[-+]?\d{1,3}(?: \d{3})+(?:[.,]\d+)?$|^(?:\(!\)\s*)?n/?a$|"
                        r"^(?:\(!\)\s*)?-?nan$", re.IGNORECASE)
# A shell prompt running the profiler: in a paste of several runs, each starts here (`$ ncu ./app`,
# `$ srun ... nv-nsight-cu-cli ./app 500E6`), and the same kernel name in two runs is two results, not one.
_PROFILER_PROMPT = re.compile(r"^\$\s.*\b(?:ncu|nv-nsight-cu-cli)\b")


def looks_like_ncu_text(text: str) -> bool:
    """Whether a text holds ncu's per-kernel sections (a kernel line followed by `Section:` blocks)."""
    head = text[: 4 << 20]
    return "Section: " in head and any(
        _KERNEL_NEW.match(_strip(line)) or _KERNEL_OLD.match(_strip(line)) for line in head.splitlines())


def _strip(line: str) -> str:
    """The line without its indentation and a comment marker a paste put before it."""
    return line[_COMMENT.match(line).end():].strip()  # type: ignore[union-attr]


def _row(text: str) -> tuple[str, str, str] | None:
    """(label, unit, value) of a table row; with Minimum/Maximum/Average columns, the average."""
    parts = _ROW_SPLIT.split(text)
    if len(parts) < 2 or parts[0] in ("Metric Name",) or set(text) <= {"-", " "}:
        return None
    values = [p for p in parts[1:] if _NUMBERISH.match(p)]
    if not values:
        return None
    unit = parts[1] if len(parts) >= 3 and not _NUMBERISH.match(parts[1]) else ""
    return parts[0], unit, values[-1]


def read_ncu_text(text: str) -> list[Launch]:
    """The launches of ncu text output, in the order printed."""
    launches: list[Launch] = []
    launch: Launch | None = None
    section: str | None = None
    rule: Rule | None = None
    rule_lines: list[str] = []

    def close_rule() -> None:
        nonlocal rule
        if rule is not None and launch is not None:
            message = " ".join(rule_lines)
            speedup = _SPEEDUP.match(message)
            if speedup:
                rule.speedup_pct = parse_number(speedup.group("pct"))
                message = message[speedup.end():]
            rule.message = re.split(r"(?<=[.!?])\s", message.strip(), maxsplit=1)[0][:300]
            launch.rules.append(rule)
            stall = stated_stall(message)
            if stall is not None:
                launch.stated_stalls.setdefault(stall[0], stall[1:])
        rule = None
        rule_lines.clear()

    run = 0
    for raw in text.splitlines():
        line = _strip(raw)
        if not line:
            close_rule()
            continue
        if _PROFILER_PROMPT.match(line):
            close_rule()
            run += 1
            launch = None
            continue
        header = _KERNEL_NEW.match(line) or _KERNEL_OLD.match(line)
        if header and not line.startswith("Section:"):
            close_rule()
            groups = header.groupdict()
            launch = Launch(name=groups["name"].strip(), grid=f"({groups['grid']})" if groups.get("grid") else None,
                            block=f"({groups['block']})" if groups.get("block") else None, run=run)
            invocations = _INVOCATIONS.search(groups.get("rest") or "")
            if invocations:
                launch.invocations = int(invocations.group(1))
            launches.append(launch)
            section = None
            continue
        if launch is None:
            continue
        found = _SECTION.match(line)
        if found:
            close_rule()
            section = found.group("name")
            continue
        found_rule = _RULE.match(line)
        if found_rule:
            close_rule()
            rule = Rule(found_rule.group("type"), section or "", None, "")
            rule_lines.append(found_rule.group("text"))
            continue
        if rule is not None:
            if set(line) <= {"-", " "}:
                close_rule()
            else:
                rule_lines.append(line)
            continue
        row = _row(line)
        if row is None:
            continue
        label, unit, raw_value = row
        value = parse_number(raw_value)
        if value is None:
            launch.nan_values += is_nan(raw_value)
            continue
        reason = stall_reason(section, label)
        if reason is not None:
            launch.stalls[reason] = value
            continue
        figure = figure_for_label(section, label, unit)
        if figure is None:
            continue
        if figure == "duration_ns":
            converted = duration_ns(value, unit)
            if converted is None:
                continue
            value = converted
        launch.figures.setdefault(figure, value)
    close_rule()
    return launches
