"""diagnose_compile: graph breaks, recompiles and recompile-limit hits of torch.compile, from the job's logs.

Reads what `TORCH_LOGS=graph_breaks,recompiles` writes (and what torch prints without it: the `.item()` graph-break
warning, the recompile-limit warning, fullgraph errors), through the one log reader (tools/logs/reader.py over
tools/core/files.py: globs, gzip, bounded streaming; only the lines of dynamo's records are decoded). Grammars:

- glog records (2.2+): `<L><MMDD> <time> <pid> torch/_dynamo/<file>.py:<n>] [<frame>/<compile>] [__<artifact>] text`,
  the prefix repeated on every line of a multi-line message; `[rankN]:` prefixes under torchrun are dropped.
  Graph breaks: `Graph break in user code at F:L` / `Graph Break Reason: <gb_type>` (after `Encountered graph
  break when attempting to trace CALL: ...` when the break is at a call) / the gbNNNN page / `User code traceback`.
  2.3-2.4: `Graph break (details suppressed) in user code at F:L` / `Reason: ...`. The W-level `.item()` record
  (`Graph break from Tensor.item()`) names the same break again and is merged with it.
- Python-logging records (2.1): `[date time] torch._dynamo...: [LEVEL] Graph break: <reason> from user code at:`
  then the `File "F", line N, in fn` line.
- Recompiles: `Recompiling function <fn> in F:L` / `triggered by the following guard failure(s):` / `- <id>: reason`.
- The limit: `torch._dynamo hit config.recompile_limit (N)` (`cache_size_limit` before 2.6) / `function: 'fn' (F:L)`
  / `last reason: ...`; past it the frame runs eagerly, silently.
- fullgraph errors: `torch._dynamo.exc.Unsupported: <gb_type>` ... `from user code:` / `File "F", line N, in fn`.

SOP: torch_compile.
"""

from __future__ import annotations

import re
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from tools.core.context import ToolContext
from tools.core.errors import TriageError, UnreadableInput
from tools.core.files import InputFile
from tools.core.limits import COMPILE_MAX_FINDINGS, LOG_MAX_FILES
from tools.core.models import (
    Coverage,
    CoverageStatus,
    InputModel,
    NextStep,
    PathArg,
    Severity,
    Table,
    ToolResult,
    worst,
)
from tools.logs import (
    LOG_FORMATS,
    LineMatcher,
    ScanStats,
    display_line,
    expand_log_inputs,
    log_coverage,
    map_files,
    scan_file,
)

__all__ = ["DiagnoseCompileInput", "DiagnoseCompileResult", "diagnose_compile"]

_BRANCH = "torch_compile"
Kind = Literal["limit_hit", "fullgraph_error", "recompile", "graph_break"]
BreakCause = Literal["print_or_logging", "item_scalar", "data_dependent_branch", "skipped_function",
                     "unsupported_builtin", "explicit_graph_break", "other"]
GuardCause = Literal["shape", "dtype", "python_value", "global_state", "other"]

# Lines of dynamo's records (and the lines around them, read as context): glog records of torch/_dynamo files,
# the artifact loggers, 2.1's Python-logging records, raised dynamo errors and their user-code line.
_PATTERNS = (
    r"torch[/\\]_dynamo[/\\][\w/\\]+\.py:\d+\]",
    r"\[__(?:graph_breaks|recompiles|recompiles_verbose)\]",
    r"torch(?:\._)?dynamo[\w.]*: \[\w+\]",
    r"torch\._dynamo\.exc\.\w+:",
    r"^\s*from user code:",
    r"Graph break",
    # The lines after a raised error's header and `from user code:` (several ranks' lines can come between).
    r"^(?:\[(?:rank|default)\d+\]:)?\s+(?:File \"|Explanation: )",
)
_CONTEXT = 2  # 2.1 records and raised errors continue on lines without the prefix
_RANK = re.compile(r"^\s*\[(?:rank|default)(\d+)\]:")
_OPEN_RECORDS = 64  # glog records of several ranks interleave in a combined log: this many stay open
_PLAIN_GAP = 16  # a plain (unprefixed) message of one rank continues across this many lines of other ranks
_GLOG = re.compile(r"^([VIWEDF])\d{4} (\S+) +(\d+) (\S+?):(\d+)\] (?:\[([^\]]*\d+/\d+[^\]]*)\] )?"
                   r"(?:\[__(\w+)\] ?)?(.*)$")
_PYLOG = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+\] (?:\[([^\]]+)\] )?(torch(?:\.|dynamo)[\w.]*): \[(\w+)\] ?(.*)$")
_BREAK_AT = re.compile(r"Graph break (?:\(details suppressed\) )?in user code at (.+:\d+)\s*$")
_FILE_LINE = re.compile(r'^-?\s*File "(.+)", line (\d+), in (\S+)')
_GB_ID = re.compile(r"/gb/gb(\d{4})\.html")
_RECOMPILING = re.compile(r"Recompiling function (\S+) in (.+:\d+)\s*$")
_GUARD = re.compile(r"^-\s+(?:\S*\d+/\d+(?:_\d+)?: )?(.+)$")
_LIMIT = re.compile(r"hit config\.(recompile_limit|cache_size_limit|accumulated_recompile_limit|"
                    r"accumulated_cache_size_limit) \((\d+)\)")
_LIMIT_FUNCTION = re.compile(r"function: '([^']+)' \((.+:\d+)\)")
# 2.1+: `last reason: 0/7: <guard>`; 2022 (torchdynamo): `reasons:  ["<guard>"]`.
_LAST_REASON = re.compile(r"(?:last reason: (?:\S*\d+/\d+(?:_\d+)?: )?|reasons:\s+\[[\"'])(.+?)(?:[\"']\])?$")
_EXC = re.compile(r"torch\._dynamo\.exc\.(\w+): (.*)$")
# A line only torch.compile's own logging writes (a torch/_dynamo source, an artifact logger, dynamo's Python
# logger, a dynamo error, a graph break): without one, the log cannot say that nothing broke, only that nothing was
# logged.
_DYNAMO_LINE = re.compile(r"torch[/\\]_dynamo[/\\]|\[__(?:graph_breaks|recompiles)|torch(?:\._)?dynamo[\w.]*: \["
                          r"|torch\._dynamo\.exc\.|Graph break")
_TORCH_LOGS = "TORCH_LOGS=graph_breaks,recompiles,dynamo"
_OLD_BREAK = re.compile(r"Graph break: (.*?)\s*from user code at:?\s*$")


class DiagnoseCompileInput(InputModel):
    paths: list[PathArg] = Field(min_length=1, max_length=64, description="Logs of the job (files or globs inside "
                                 "the roots), written with TORCH_LOGS=graph_breaks,recompiles (stderr).")

    cli_positional = "paths"


class GraphBreak(BaseModel):
    reason: str = Field(description="The graph-break type (gb_type) or, in older logs, the reason text.")
    gb_id: str | None = Field(description="PyTorch's graph-break id (GBxxxx) when logged.")
    location: str = Field(description="User code file:line where the graph breaks.")
    function: str | None
    explanation: str = Field(default="", description="PyTorch's explanation (2.8+), e.g. which builtin.")
    cause: BreakCause
    count: int = Field(description="Compiles that broke here (each rank's log counts).")


class Recompile(BaseModel):
    function: str
    location: str
    reason: str = Field(description="The failed guard, with the changing value left out.")
    cause: GuardCause
    count: int
    examples: list[str] = Field(description="Up to three of the logged guard failures, values included.")


class LimitHit(BaseModel):
    function: str
    location: str
    limit_name: str = Field(description="recompile_limit (cache_size_limit before torch 2.6).")
    limit: int
    last_reason: str
    count: int


class FullgraphError(BaseModel):
    error: str = Field(description="The torch._dynamo.exc class.")
    reason: str
    location: str | None
    explanation: str = ""
    count: int


class CompileFinding(BaseModel):
    kind: Kind
    severity: Severity
    evidence: str
    fix: str
    sop_branch: str = _BRANCH


class FunctionCounts(BaseModel):
    function: str
    graph_breaks: int
    recompiles: int
    limit_hit: bool


class FileScan(BaseModel):
    file: str
    lines: int
    records: int
    status: str


class DiagnoseCompileResult(ToolResult):
    verdict: Literal["limit_hit", "fullgraph_error", "recompile", "graph_break", "none"]
    findings: list[CompileFinding]
    graph_breaks: list[GraphBreak]
    recompiles: list[Recompile]
    limit_hits: list[LimitHit]
    fullgraph_errors: list[FullgraphError]
    functions: list[FunctionCounts] = Field(description="Counts per compiled function, worst first.")
    files: list[FileScan]

    narrow_hint = "pass fewer logs (one rank's)"

    def tables(self) -> list[Table]:
        return [
            Table("Findings", ["kind", "severity", "evidence", "fix"],
                  [[f.kind, f.severity.value, f.evidence, f.fix] for f in self.findings], "findings"),
            Table("Recompile limit hits", ["function", "location", "limit", "last reason", "count"],
                  [[h.function, h.location, f"{h.limit_name}={h.limit}", h.last_reason, str(h.count)]
                   for h in self.limit_hits], "limit_hits"),
            Table("Recompiles", ["function", "location", "guard that failed", "cause", "count"],
                  [[r.function, r.location, r.reason, r.cause, str(r.count)] for r in self.recompiles], "recompiles"),
            Table("Graph breaks", ["reason", "gb id", "location", "function", "cause", "count"],
                  [[g.reason, g.gb_id or "-", g.location, g.function or "-", g.cause, str(g.count)]
                   for g in self.graph_breaks], "graph_breaks"),
            Table("fullgraph errors", ["error", "reason", "location", "count"],
                  [[e.error, e.reason, e.location or "-", str(e.count)] for e in self.fullgraph_errors],
                  "fullgraph_errors"),
            Table("Per function", ["function", "graph breaks", "recompiles", "limit hit"],
                  [[f.function, str(f.graph_breaks), str(f.recompiles), "yes" if f.limit_hit else "-"]
                   for f in self.functions], "functions"),
            Table("Files", ["file", "lines", "records", "status"],
                  [[f.file, str(f.lines), str(f.records), f.status] for f in self.files], "files"),
        ]


# ------------------------------------------------------------------------------------------------ reading


@dataclass
class _Record:
    """One logged message: its lines (prefix removed), the compile id and where it starts."""

    first_line: int
    level: str
    source: str
    compile_id: str | None
    lines: list[str] = field(default_factory=list)
    last_line: int = 0
    rank: str = ""
    pid: str = ""


@dataclass
class _FileEvents:
    breaks: dict[tuple[str, str], tuple[str, str | None, str | None, str]] = field(default_factory=dict)
    recompiles: list[tuple[str, str, list[str]]] = field(default_factory=list)
    limits: list[tuple[str, str, str, int, str]] = field(default_factory=list)
    errors: list[tuple[str, str, str | None, str]] = field(default_factory=list)
    records: int = 0
    dynamo_lines: int = 0  # lines torch.compile's logging wrote
    status: str = "scanned"
    stats: ScanStats = field(default_factory=ScanStats)


@lru_cache(maxsize=1)
def _matcher() -> LineMatcher:
    """Compiled once per process (a Hyperscan database takes milliseconds to build)."""
    return LineMatcher(list(_PATTERNS), case_sensitive=True)


def _lines(file: InputFile, deadline: float, stats: ScanStats) -> list[tuple[int, str]]:
    """The matching lines of `file` and their context, in order, each once."""
    seen: dict[int, str] = {}
    for match in scan_file(file, _matcher(), context=_CONTEXT, deadline=deadline, stats=stats):
        for number, raw in (*match.before, (match.number, match.text), *match.after):
            if number not in seen:
                seen[number] = display_line(raw, 2000)
    return sorted(seen.items())


def _records(lines: Iterable[tuple[int, str]]) -> list[_Record]:
    """Lines grouped into messages. A glog record is every line with its prefix (pid, timestamp, source line,
    compile id) and rank, even when other ranks' lines come between them; a Python-logging record or a run of
    plain lines continues while the line numbers do."""
    records: list[_Record] = []
    open_glog: OrderedDict[tuple[str, str, str | None], _Record] = OrderedDict()
    plain: dict[str, _Record] = {}  # per rank: the message that unprefixed lines continue
    for number, raw in lines:
        rank_match = _RANK.match(raw)
        rank = rank_match.group(1) if rank_match else ""
        text = raw[rank_match.end():] if rank_match else raw
        glog = _GLOG.match(text)
        if glog:
            level, stamp, pid, source, src_line, compile_id, _artifact, body = glog.groups()
            key = (rank, f"glog {pid} {stamp} {source}:{src_line}", compile_id)
            record = open_glog.get(key)
            if record is None or number - record.last_line > _PLAIN_GAP * _OPEN_RECORDS:
                record = open_glog[key] = _Record(number, level, key[1], compile_id, rank=rank, pid=pid)
                records.append(record)
                if len(open_glog) > _OPEN_RECORDS:
                    open_glog.popitem(last=False)
            record.lines.append(body)
            record.last_line = number
            plain.pop(rank, None)
            continue
        pylog = _PYLOG.match(text)
        if pylog:
            compile_id, logger, level, body = pylog.groups()
            plain[rank] = _Record(number, level[:1], f"py {logger}", compile_id, [body], number, rank)
            records.append(plain[rank])
            continue
        previous = plain.get(rank)
        if previous is not None and number - previous.last_line <= _PLAIN_GAP:
            previous.lines.append(text)
            previous.last_line = number
            continue
        plain[rank] = _Record(number, "", "plain", None, [text], number, rank)
        records.append(plain[rank])
    return records


def _location_function(lines: list[str], location: str | None) -> tuple[str | None, str | None]:
    """(location, function) from a record's `File "F", line N, in fn` lines: the one at `location`, else the last."""
    frames = [(f"{m.group(1)}:{m.group(2)}", m.group(3)) for m in map(_FILE_LINE.match, lines) if m]
    for where, function in frames:
        if where == location:
            return where, function
    if location is not None:
        return location, None
    return frames[-1] if frames else (None, None)


def _explanation(lines: list[str]) -> str:
    """The `Explanation:` line of a 2.8+ message (names the call, e.g. builtin `print`), or ''."""
    return next((s.strip().removeprefix("Explanation:").strip() for s in lines[:12]
                 if s.strip().startswith("Explanation:")), "")


def _break_reason(lines: list[str]) -> str:
    for i, line in enumerate(lines):
        if line.startswith("Graph Break Reason:"):
            reason = line.removeprefix("Graph Break Reason:").strip()
            if reason.startswith("Encountered graph break when attempting to trace"):
                # The gb_type follows after a blank line.
                following = next((s.strip() for s in lines[i + 1:] if s.strip()), "")
                return following or reason
            return reason
        if line.startswith("Reason:"):
            return line.removeprefix("Reason:").strip()
    return "unknown"


def _interpret(record: _Record, events: _FileEvents, pending_error: dict[str, int]) -> None:
    lines = record.lines
    head = lines[0].strip() if lines else ""
    # One break is logged twice (the V record and, for .item(), a W record) by one process under one compile id.
    key_base = f"{record.rank}:{record.pid}:{record.compile_id or f'line {record.first_line}'}"
    if (at := _BREAK_AT.search(head)) is not None:
        location, function = _location_function(lines, at.group(1).strip())
        gb = next((m.group(1) for m in map(_GB_ID.search, lines) if m), None)
        events.breaks[(key_base, location or "?")] = (_break_reason(lines), f"GB{gb}" if gb else None, function,
                                                       _explanation(lines))
        return
    if head.startswith("Graph break from `Tensor.item()`"):
        location, function = _location_function(lines, None)
        key = (key_base, location or "?")
        if key not in events.breaks:  # the V-level record of the same break says more; keep it when present
            events.breaks[key] = ("Unsupported Tensor.item() call with capture_scalar_outputs=False", None, function,
                                  "")
        return
    if (old := _OLD_BREAK.search(head)) is not None:
        location, function = _location_function(lines, None)
        events.breaks[(key_base, location or "?")] = (old.group(1).strip() or "unknown", None, function, "")
        return
    if (recompiling := _RECOMPILING.search(head)) is not None:
        guards = [m.group(1).strip() for m in map(_GUARD.match, (s.strip() for s in lines[1:])) if m]
        guards = [g for g in guards if not g.startswith(("User stack trace", "File ")) and not g.startswith(" ")]
        events.recompiles.append((recompiling.group(1), recompiling.group(2), guards))
        return
    if (limit := _LIMIT.search(head)) is not None:
        function_match = next((m for m in map(_LIMIT_FUNCTION.search, lines) if m), None)
        reason = next((m.group(1) for m in map(_LAST_REASON.search, lines) if m), "")
        events.limits.append((function_match.group(1) if function_match else "?",
                              function_match.group(2) if function_match else "?", limit.group(1),
                              int(limit.group(2)), _strip_comment(reason)))
        return
    for i, line in enumerate(lines):
        if (error := _EXC.search(line)) is not None:
            events.errors.append((error.group(1), error.group(2).strip(), None, _explanation(lines[i + 1:])))
            pending_error[record.rank] = len(events.errors) - 1
        elif line.strip() == "from user code:" and record.rank in pending_error:
            location, _ = _location_function(lines[i + 1:i + 2], None)
            index = pending_error.pop(record.rank)
            name, reason, _, explanation = events.errors[index]
            events.errors[index] = (name, reason, location, explanation)


def _strip_comment(guard: str) -> str:
    """A guard without its `# source # file:line in fn` tail."""
    return re.split(r"\s{2,}#\s", guard, maxsplit=1)[0].strip()


def _scan_one(file: InputFile, deadline: float) -> _FileEvents:
    events = _FileEvents()
    try:
        lines = _lines(file, deadline, events.stats)
        events.dynamo_lines = sum(1 for _, text in lines if _DYNAMO_LINE.search(text))
        records = _records(lines)
    except TriageError as exc:
        if "ran out of time" in exc.message:
            raise
        events.status = f"unreadable: {exc.message}"
        return events
    if events.stats.binary:
        events.status = "binary: skipped"
    pending: dict[str, int] = {}  # per rank: the raised error still waiting for its user-code line
    for record in records:
        before = (len(events.breaks), len(events.recompiles), len(events.limits), len(events.errors))
        _interpret(record, events, pending)
        events.records += before != (len(events.breaks), len(events.recompiles), len(events.limits),
                                     len(events.errors))
    return events


# ------------------------------------------------------------------------------------------------ analysis

_VALUE_GUARD = re.compile(r"^(.*?)\s*(==|!=|<=|>=|<|>)\s*(.+)$")


def _guard(reason: str) -> tuple[str, GuardCause]:
    """The guard with its changing value left out, and its cause."""
    text = _strip_comment(reason)
    if (m := re.match(r"^(tensor '.+?' (?:size|strides?) mismatch at index \d+)", text)) is not None:
        return m.group(1), "shape"
    if (m := re.match(r"^(tensor '.+?' (?:size|stride|rank|ndim) mismatch)", text)) is not None:
        return m.group(1), "shape"
    if (m := re.match(r"^(tensor '.+?' dtype mismatch)", text)) is not None:
        return m.group(1), "dtype"
    if re.search(r"global state|GLOBAL_STATE|grad_mode|autocast", text, re.IGNORECASE):
        return re.sub(r"\d{5,}", "<id>", text), "global_state"
    if (m := _VALUE_GUARD.match(text)) is not None and not text.startswith("tensor "):
        return f"{m.group(1)} {m.group(2)} <value>", "python_value"
    if re.match(r"^(?:___check_obj_id|___check_type_id|len\()", text):
        return re.sub(r"\d{5,}", "<id>", text), "python_value"
    return re.sub(r"\d{5,}", "<id>", text), "other"


def _break_cause(reason: str, gb_id: str | None, explanation: str = "") -> BreakCause:
    text = f"{reason} {explanation}".lower()
    if gb_id == "GB0124" or ".item()" in text or "tolist" in text or "capture_scalar_outputs" in text:
        return "item_scalar"
    if gb_id == "GB0170" or "data-dependent" in text or "generic_jump" in text:
        return "data_dependent_branch"
    if re.search(r"\bprint\b|logging|logger|\bwarn", text):
        return "print_or_logging"
    if gb_id == "GB0025" or "graph_break()" in text:
        return "explicit_graph_break"
    if gb_id == "GB0007" or "skipped" in text or text.startswith("skip"):
        return "skipped_function"
    if gb_id == "GB0059" or "builtin" in text:
        return "unsupported_builtin"
    return "other"


_BREAK_FIX: dict[BreakCause, str] = {
    "print_or_logging": "Remove the print/logging call from the compiled code, or add it to "
    "torch._dynamo.config.reorderable_logging_functions.",
    "item_scalar": "Keep the value a tensor (no .item()/.tolist() inside the compiled code), or set "
    "torch._dynamo.config.capture_scalar_outputs = True; branch with torch.where / torch.cond instead of Python if.",
    "data_dependent_branch": "Replace the Python `if` on a tensor value with torch.where or torch.cond, or move it "
    "out of the compiled region.",
    "skipped_function": "Move the call out of the compiled region, or wrap it as a custom op "
    "(torch.library.custom_op) / allow_in_graph.",
    "unsupported_builtin": "Replace the builtin with a torch op or move it out of the compiled region.",
    "explicit_graph_break": "Remove torch._dynamo.graph_break() unless the split is intended.",
    "other": "Read the reason at sop://torch_compile and move that code out of the compiled region or rewrite it.",
}
_GUARD_FIX: dict[GuardCause, str] = {
    "shape": "Mark the changing dimension dynamic (torch._dynamo.mark_dynamic(x, dim) before the call) or compile "
    "with dynamic=True; or pad inputs to a few fixed sizes.",
    "dtype": "Keep the input dtype stable: cast before the compiled call and use one autocast setting for every call.",
    "python_value": "A Python value that changes between calls is baked into the graph: pass it as a tensor, or "
    "hoist it out of the compiled function.",
    "global_state": "Keep grad mode / autocast the same for every call of the compiled function (or compile one "
    "function per mode).",
    "other": "Keep the guarded property of the inputs stable between calls (TORCH_LOGS=recompiles_verbose shows "
    "every guard).",
}


def _aggregate(per_file: list[_FileEvents]) -> tuple[list[GraphBreak], list[Recompile], list[LimitHit],
                                                     list[FullgraphError]]:
    breaks: Counter[tuple[str, str | None, str, str | None, str]] = Counter()
    for events in per_file:
        for (_, location), (reason, gb_id, function, explanation) in events.breaks.items():
            breaks[(reason, gb_id, location, function, explanation)] += 1
    graph_breaks = [GraphBreak(reason=r, gb_id=g, location=loc, function=f, explanation=x,
                               cause=_break_cause(r, g, x), count=n) for (r, g, loc, f, x), n in breaks.most_common()]
    recompiles: dict[tuple[str, str, str], Recompile] = {}
    for events in per_file:
        for function, location, guards in events.recompiles:
            reason, cause = _guard(guards[0]) if guards else ("(reason not logged)", "other")
            entry = recompiles.get((function, location, reason))
            if entry is None:
                entry = recompiles[(function, location, reason)] = Recompile(
                    function=function, location=location, reason=reason, cause=cause, count=0, examples=[])
            entry.count += 1
            if guards and len(entry.examples) < 3 and _strip_comment(guards[0]) not in entry.examples:
                entry.examples.append(_strip_comment(guards[0]))
    limits: dict[tuple[str, str, str, int], LimitHit] = {}
    for events in per_file:
        for function, location, name, value, last in events.limits:
            hit = limits.get((function, location, name, value))
            if hit is None:
                hit = limits[(function, location, name, value)] = LimitHit(
                    function=function, location=location, limit_name=name, limit=value, last_reason=last, count=0)
            hit.count += 1
    errors: Counter[tuple[str, str, str | None, str]] = Counter()
    for events in per_file:
        errors.update(events.errors)
    return (graph_breaks, sorted(recompiles.values(), key=lambda r: -r.count), list(limits.values()),
            [FullgraphError(error=e, reason=r, location=loc, explanation=x, count=n)
             for (e, r, loc, x), n in errors.most_common()])


def _findings(graph_breaks: list[GraphBreak], recompiles: list[Recompile], limit_hits: list[LimitHit],
              errors: list[FullgraphError]) -> list[CompileFinding]:
    found: list[CompileFinding] = []
    for hit in limit_hits:
        causes = [r for r in recompiles if r.function == hit.function]
        _, guard_cause = _guard(hit.last_reason)
        found.append(CompileFinding(
            kind="limit_hit", severity=Severity.crit,
            evidence=f"{hit.function} ({hit.location}) hit {hit.limit_name} ({hit.limit}) x{hit.count}; last "
            f"guard: {hit.last_reason}; {sum(r.count for r in causes)} recompile(s) logged before",
            fix=f"{hit.function} now runs eagerly (uncompiled) for new inputs. Fix the cause: "
            f"{_GUARD_FIX[guard_cause]} Raising torch._dynamo.config.{hit.limit_name} only postpones it."))
    for error in errors:
        found.append(CompileFinding(
            kind="fullgraph_error", severity=Severity.crit,
            evidence=f"torch._dynamo.exc.{error.error}: {error.reason} at {error.location or '?'} x{error.count}",
            fix=f"fullgraph=True refuses any graph break: "
            f"{_BREAK_FIX[_break_cause(error.reason, None, error.explanation)]}"))
    limited = {h.function for h in limit_hits}
    for recompile in recompiles:
        if recompile.function in limited and recompile.cause == "python_value":
            continue  # said in the limit finding
        found.append(CompileFinding(
            kind="recompile", severity=Severity.warn,
            evidence=f"{recompile.function} ({recompile.location}) recompiled x{recompile.count}: {recompile.reason}"
            + (f" (e.g. {recompile.examples[0]})" if recompile.examples else ""),
            fix=_GUARD_FIX[recompile.cause]))
    for brk in graph_breaks:
        found.append(CompileFinding(
            kind="graph_break", severity=Severity.warn,
            evidence=f"{brk.reason}{f' ({brk.gb_id})' if brk.gb_id else ''} at {brk.location}"
            f"{f' in {brk.function}' if brk.function else ''} x{brk.count}",
            fix=_BREAK_FIX[brk.cause]))
    return found[:COMPILE_MAX_FINDINGS]


def _functions(graph_breaks: list[GraphBreak], recompiles: list[Recompile],
               limit_hits: list[LimitHit]) -> list[FunctionCounts]:
    names = list(dict.fromkeys([*(h.function for h in limit_hits), *(r.function for r in recompiles),
                                *(b.function or "?" for b in graph_breaks)]))
    rows = [FunctionCounts(function=name,
                           graph_breaks=sum(b.count for b in graph_breaks if (b.function or "?") == name),
                           recompiles=sum(r.count for r in recompiles if r.function == name),
                           limit_hit=any(h.function == name for h in limit_hits)) for name in names]
    return sorted(rows, key=lambda r: (not r.limit_hit, -(r.recompiles + r.graph_breaks)))


def _coverage(file: InputFile, events: _FileEvents) -> Coverage:
    """A log read whole with torch.compile lines is read; one without any is not understood: it cannot show a break."""
    row = log_coverage(file.name, events.status, events.stats.lines, events.stats.bytes,
                       f"{events.dynamo_lines} torch.compile log line(s)")
    if row.status is CoverageStatus.read and not events.dynamo_lines:
        return Coverage.not_understood(file.name, f"{events.stats.lines} line(s), none from torch.compile's logging "
                                       f"({_TORCH_LOGS} was not set, or nothing was compiled)",
                                       [f"stderr of a job run with {_TORCH_LOGS}"])
    return row


def _conclusion(findings: list[CompileFinding], graph_breaks: list[GraphBreak], recompiles: list[Recompile],
                files: int) -> list[str]:
    total_breaks = sum(b.count for b in graph_breaks)
    total_recompiles = sum(r.count for r in recompiles)
    counts = (f"{total_breaks} graph break(s) at {len(graph_breaks)} place(s) and {total_recompiles} recompile(s) "
              f"in {files} log(s)")
    if not findings:
        return [f"No graph break, recompile or limit hit in {files} log(s).",
                f"If compiles still look slow, check the logs were written with {_TORCH_LOGS}."]
    first = findings[0]
    return [f"{counts}; worst: {first.evidence}.", f"Fix: {first.fix}"]


async def diagnose_compile(params: DiagnoseCompileInput, ctx: ToolContext) -> DiagnoseCompileResult:
    """Why torch.compile is slow or keeps recompiling, from the job's logs (TORCH_LOGS=graph_breaks,recompiles;
    also the warnings torch prints without it): every graph break with its reason, PyTorch's graph-break id
    (GBxxxx) and the user code file:line; every recompile with the guard that failed; recompile-limit hits (after
    which the function silently runs eagerly); fullgraph errors. Counts per function and per reason, worst first,
    each with the fix (print/logging, .item() and data-dependent branches, unsupported calls, shape changes ->
    mark_dynamic / dynamic=True, dtype switches, the limit). Reads torch 2.1-2.13 formats, many ranks' logs, .gz.
    """
    files, unmatched = expand_log_inputs(params.paths, ctx.roots, max_files=LOG_MAX_FILES)
    deadline = time.monotonic() + ctx.remaining_s()
    per_file = await anyio.to_thread.run_sync(lambda: map_files(lambda f: _scan_one(f, deadline), files),
                                              abandon_on_cancel=True)
    if all(e.status.startswith("unreadable") and not e.stats.bytes for e in per_file):
        raise UnreadableInput(f"none of the {len(files)} log(s) could be read ({files[0].name}: {per_file[0].status}).",
                              "Pass the saved log files themselves.")
    graph_breaks, recompiles, limit_hits, errors = _aggregate(per_file)
    findings = _findings(graph_breaks, recompiles, limit_hits, errors)
    scans = [FileScan(file=f.name, lines=e.stats.lines, records=e.records, status=e.status)
             for f, e in zip(files, per_file, strict=True)]
    coverage = [_coverage(f, e) for f, e in zip(files, per_file, strict=True)]
    coverage += [Coverage.not_understood(p, "no file matches this glob", LOG_FORMATS) for p in unmatched]
    severity = worst(f.severity for f in findings)
    conclusion = _conclusion(findings, graph_breaks, recompiles, len(files))
    decides = None
    if severity is Severity.ok and not any(c.status is not CoverageStatus.not_understood for c in coverage):
        # No log shows torch.compile's logging: "no graph break" would only mean that none was logged.
        first = coverage[0]
        severity, decides = Severity.unknown, (
            f"The job's stderr written with {_TORCH_LOGS} (the dynamo lines show that compile logging was on; "
            "graph_breaks and recompiles log each break and recompile).")
        conclusion = [f"Cannot tell whether torch.compile broke graphs or recompiled: {first.input} "
                      f"({first.detail}) holds no torch.compile log line.", f"Rerun with {_TORCH_LOGS}."]
    return DiagnoseCompileResult(
        severity=severity,
        conclusion=conclusion,
        coverage=coverage,
        decides=decides,
        next_steps=[NextStep.from_sop(_BRANCH, done={"diagnose_compile"})],
        verdict=findings[0].kind if findings else "none", findings=findings, graph_breaks=graph_breaks,
        recompiles=recompiles, limit_hits=limit_hits, fullgraph_errors=errors,
        functions=_functions(graph_breaks, recompiles, limit_hits), files=scans)
