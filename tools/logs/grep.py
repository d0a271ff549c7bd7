"""grep_logs: the safe `rg -i "error|oom|nan|timeout|cuda" rank*.log | tail -100`.

Many per-rank logs at once (files or globs inside the roots, .gz read transparently), a regex or a
named SOP preset (sop/log_presets.toml), RE2 so no pattern can hang the server, the last (or first)
N matches with context, repeated lines folded with a count and first/last line, grouped per rank.
SOP: the entry grep of every branch; hang, nccl, hardware, oom, nan, dataloader and compile presets.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from functools import lru_cache
from typing import Literal

import anyio.to_thread
from pydantic import BaseModel, Field, model_validator

from sop import log_presets
from tools.core.context import ToolContext
from tools.core.errors import TriageError, UnreadableInput
from tools.core.files import InputFile, size_text
from tools.core.limits import (
    GREP_READ_SHARE,
    LOG_DEFAULT_MATCHES,
    LOG_GROUPS_FACTOR,
    LOG_MAX_CONTEXT,
    LOG_MAX_MATCHES,
    LOG_MAX_PATTERN_CHARS,
    LOG_MAX_PATTERNS,
)
from tools.core.models import Coverage, CoverageStatus, InputModel, NextStep, PathArg, Severity, Table, ToolResult
from tools.core.ranks import rank_of_line
from tools.logs.reader import (
    LOG_FORMATS,
    LineMatcher,
    ScanStats,
    compile_pattern,
    cut_by_deadline,
    display_line,
    expand_log_inputs,
    log_coverage,
    map_files,
    scan_file,
)

__all__ = ["GrepLogsInput", "GrepLogsResult", "grep_logs"]

PresetName = Literal["errors", "nccl", "hang", "hardware", "oom", "nan", "dataloader", "compile"]

# Leading timestamps and launcher prefixes differ between repeats of the same message; digits too.
_PREFIX = re.compile(
    r"^\s*(?:\[(?:rank|default)\d+\]:\s*|\d{1,5}: )?"
    r"(?:\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*"
    r"|\[\s*\d+\.\d+\]\s*|[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d\s+)?"
)
_DIGITS = re.compile(r"\d+")
_MASK_DIGITS = bytes.maketrans(b"0123456789", b"##########")


class GrepLogsInput(InputModel):
    paths: list[PathArg] = Field(min_length=1, max_length=LOG_MAX_PATTERNS,
                             description="Log files or globs inside the roots, e.g. ['logs/rank*.log', "
                             "'node*/stderr*']; .gz files are read transparently.")
    pattern: str | None = Field(default=None, max_length=LOG_MAX_PATTERN_CHARS,
                                description="A regex (RE2 syntax, case-insensitive). Give either pattern or preset; "
                                "neither means preset='errors'.")
    preset: PresetName | None = Field(default=None, description="A named SOP pattern: " + "; ".join(
        f"{p.name}: {p.description}" for p in log_presets().values()))
    context: int = Field(default=0, ge=0, le=LOG_MAX_CONTEXT, description="Lines of context before and after.")
    mode: Literal["tail", "head"] = Field(default="tail", description="Keep the last N matches (like "
                                          "| tail -N) or the first N.")
    max_matches: int = Field(default=LOG_DEFAULT_MATCHES, ge=1, le=LOG_MAX_MATCHES,
                             description="N: matches kept (after folding repeats), shared fairly across files.")

    cli_positional = "paths"
    cli_shortcuts = {
        "--tail": ("keep the last N matches, like | tail -N", {"mode": "tail"}, "max_matches"),
        "--head": ("keep the first N matches, like | head -N", {"mode": "head"}, "max_matches"),
    }

    @model_validator(mode="after")
    def _one_pattern(self) -> GrepLogsInput:
        if self.pattern is not None and self.preset is not None:
            raise ValueError("give either pattern or preset, not both")
        return self


class GrepMatch(BaseModel):
    rank: int | None = Field(description="From the line's launcher prefix, else from the file name.")
    file: str
    line: int = Field(description="Line number of the first occurrence.")
    text: str
    count: int = Field(description="Occurrences folded into this row (same text but for digits/timestamps).")
    last_line: int = Field(description="Line number of the last occurrence.")
    before: list[str] = Field(default_factory=list)
    after: list[str] = Field(default_factory=list)


class FileTotal(BaseModel):
    file: str
    rank: int | None
    matches: int = Field(description="Matching lines, repeats included.")
    lines: int
    bytes: int
    status: str = Field(description="'scanned', 'binary: skipped', or why it could not be read.")


class GrepLogsResult(ToolResult):
    pattern: str
    preset: str | None
    mode: str
    matches: list[GrepMatch]
    files: list[FileTotal]

    narrow_hint = "pass fewer paths, a narrower pattern, or a lower max_matches/context"

    def tables(self) -> list[Table]:
        return [
            Table("Matches (grouped by rank)", ["rank", "file:line", "count", "text"],
                  [[_rank(m.rank), f"{m.file}:{m.line}" + (f"..{m.last_line}" if m.count > 1 else ""),
                    str(m.count), m.text + _context(m)] for m in self.matches], "matches"),
            Table("Files", ["file", "rank", "matching lines", "lines", "MiB", "status"],
                  [[f.file, _rank(f.rank), str(f.matches), str(f.lines), f"{f.bytes / 2**20:.1f}", f.status]
                   for f in self.files], "files"),
        ]


def _rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def _context(match: GrepMatch) -> str:
    if not match.before and not match.after:
        return ""
    return " ⟨before: " + " ⏎ ".join(match.before) + " | after: " + " ⏎ ".join(match.after) + "⟩"


def fold_key(text: str) -> str:
    """What stays the same when a message repeats: no launcher prefix, timestamp or digits."""
    return _DIGITS.sub("#", _PREFIX.sub("", text, count=1)).strip().lower()


class _FileScan:
    """Folded matches of one file, bounded in memory."""

    def __init__(self, file: InputFile, keep: int, mode: str) -> None:
        self.file = file
        self.keep = keep
        self.mode = mode
        self.groups: OrderedDict[tuple[int | None, bytes], GrepMatch] = OrderedDict()
        self.total = 0
        self.stats = ScanStats()
        self.status = "scanned"

    def add(self, number: int, raw: bytes, before: list[bytes], after: list[bytes]) -> None:
        """Count one matching line; only a line unlike those kept so far is decoded (the hot path)."""
        self.total += 1
        line_rank = rank_of_line(raw)
        rank = self.file.rank if line_rank is None else line_rank
        # Repeats fold within a rank, never across ranks; masking digits makes timestamps, steps and
        # launcher prefixes alike, so "the same message again" is one dictionary hit.
        key = (rank, raw.translate(_MASK_DIGITS).rstrip())
        group = self.groups.get(key)
        if group is not None:
            group.count += 1
            group.last_line = number
            if self.mode == "tail":
                self.groups.move_to_end(key)
            return
        if self.mode == "head" and len(self.groups) >= self.keep:
            return  # later lines only count towards repeats of the groups already kept
        self.groups[key] = GrepMatch(rank=rank, file=self.file.name, line=number, text=display_line(raw), count=1,
                                     last_line=number, before=[display_line(t) for t in before],
                                     after=[display_line(t) for t in after])
        if self.mode == "tail" and len(self.groups) > self.keep * LOG_GROUPS_FACTOR:
            for _ in range(len(self.groups) - self.keep):
                self.groups.popitem(last=False)

    def kept(self) -> list[GrepMatch]:
        groups = list(self.groups.values())
        return groups[-self.keep:] if self.mode == "tail" else groups[: self.keep]


@lru_cache(maxsize=32)  # a long-running server sees many patterns: keep the recent ones compiled
def _compiled(pattern: str) -> LineMatcher:
    return compile_pattern(pattern)


def _scan_one(file: InputFile, pattern: str, context: int, mode: str, keep: int, deadline: float) -> _FileScan:
    """One file: its folded matches and totals."""
    scan = _FileScan(file, keep, mode)
    last_line = 0
    try:
        for match in scan_file(file, _compiled(pattern), context=context, deadline=deadline, stats=scan.stats):
            last_line = match.number
            scan.add(match.number, match.text, [t for _, t in match.before], [t for _, t in match.after])
    except TriageError as exc:
        # Out of time: the matches found so far are the answer, the coverage row says where reading stopped.
        scan.status = (cut_by_deadline(file, scan.stats, last_line) if "ran out of time" in exc.message
                       else f"unreadable: {exc.message}")
        return scan
    scan.status = scan.stats.status()
    return scan


def _scan(params: GrepLogsInput, files: list[InputFile], pattern: str, deadline: float) -> list[_FileScan]:
    return map_files(lambda f: _scan_one(f, pattern, params.context, params.mode, params.max_matches, deadline),
                     files)


def _fair_share(scans: list[_FileScan], limit: int) -> list[GrepMatch]:
    """At most `limit` matches overall, each file getting an equal share of what it has."""
    pools = [scan.kept() for scan in scans]
    share = {i: 0 for i in range(len(pools))}
    remaining = limit
    while remaining > 0:
        progressed = False
        for i, pool in enumerate(pools):
            if remaining and share[i] < len(pool):
                share[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            break
    chosen: list[GrepMatch] = []
    for i, pool in enumerate(pools):
        chosen += pool[-share[i]:] if scans[i].mode == "tail" and share[i] else pool[: share[i]]
    chosen.sort(key=lambda m: (m.rank is None, m.rank if m.rank is not None else 0, m.file, m.line))
    return chosen


async def grep_logs(params: GrepLogsInput, ctx: ToolContext) -> GrepLogsResult:
    """Search many (per-rank) logs at once for a regex or a named SOP preset (errors, nccl, hang, hardware,
    oom, nan, dataloader, compile): the last (or first) N matches with optional context, repeated lines
    folded with a count and first/last line numbers, grouped per rank (from file names like rank3.log or
    prefixes like [rank3]: / [default3]: / `3: `), with totals per file. Streams files of any size and
    .gz; binary files are skipped; RE2, so no regex can hang it. Use instead of `cat`/`grep | tail`.
    """
    preset = params.preset or (None if params.pattern else "errors")
    pattern = params.pattern if params.pattern is not None else log_presets()[preset or "errors"].pattern
    compile_pattern(pattern)  # a bad pattern is refused before any file is opened
    files, unmatched = expand_log_inputs(params.paths, ctx.roots)
    total = sum(f.path.stat().st_size for f in files)
    ctx.progress.update(0, None, f"scanning {len(files)} file(s), {size_text(total)}")
    deadline = time.monotonic() + ctx.remaining_s() * GREP_READ_SHARE  # reading's; the rest folds and renders
    scans = await anyio.to_thread.run_sync(_scan, params, files, pattern, deadline, abandon_on_cancel=True)
    matches = _fair_share(scans, params.max_matches)
    totals = [FileTotal(file=s.file.name, rank=s.file.rank, matches=s.total, lines=s.stats.lines,
                        bytes=s.stats.bytes, status=s.status) for s in scans]
    total = sum(s.total for s in scans)
    ranks = sorted({m.rank for m in matches if m.rank is not None})
    shown = len(matches)
    conclusion = [f"{total} matching line(s) in {len(files)} file(s); {shown} distinct shown "
                  f"({params.mode}, repeats folded)."]
    if ranks:
        conclusion.append(f"Ranks with matches: {', '.join(map(str, ranks))}.")
    if all(t.status.startswith("unreadable") and not t.bytes for t in totals):
        raise UnreadableInput(f"none of the {len(totals)} file(s) could be read ({totals[0].file}: "
                              f"{totals[0].status}).", "Pass the saved log files themselves.")
    coverage = [log_coverage(t.file, t.status, t.lines, t.bytes, f"{t.matches} matching line(s)") for t in totals]
    coverage += [Coverage.not_understood(p, "no file matches this glob", LOG_FORMATS) for p in unmatched]
    # A search is ok when what it searched was read: no match in a file read whole is an answer. An input not
    # searched (binary, empty, unreadable, a glob that matched nothing) leaves the answer open: unknown.
    unsearched = [c for c in coverage if c.status is CoverageStatus.not_understood]
    cut = [c for c in coverage if c.status is CoverageStatus.partial]
    if unsearched:
        first = unsearched[0]
        conclusion.insert(1, f"Not searched: {len(unsearched)} of {len(coverage)} input(s) ({first.input}: "
                          f"{first.detail}): matches there are not in this answer.")
    elif cut:
        conclusion.insert(1, f"Searched only in part: {cut[0].input} ({cut[0].detail}).")
    # Searched only in part (the call's time ran out, a read failed, a file rotated): what is not in the answer may
    # hold matches, so the answer is open too.
    decides = ("The same search over those inputs as text logs (or .gz), or over the files the glob was meant to "
               "match." if unsearched else f"The same search on {cut[0].input} with a larger --timeout (or on that "
               "file alone)." if cut else None)
    return GrepLogsResult(
        severity=Severity.unknown if unsearched or cut else Severity.ok,
        conclusion=conclusion[:3],
        coverage=coverage,
        decides=decides,
        next_steps=[NextStep(branch="triage", step="logs", action=f"diagnose_logs(paths={params.paths!r})",
                             why="Names the failure, its facts and the rank to look at, instead of raw lines.")],
        pattern=pattern,
        preset=preset,
        mode=params.mode,
        matches=matches,
        files=totals,
    )
