"""diagnose_logs: reads the same inputs as grep_logs with the documented rule set (sop/log_rules.toml)
and says what failed, with the facts pulled from the lines, the first occurrence per rank, the likely
cause, the fix and the SOP branch; across ranks it says which rank is behind or silent in a hang.

One pass per file: a single RE2 built from every rule's `match` finds candidate lines at block speed;
only those lines are handed to the individual rules for classification and fact extraction.
"""

from __future__ import annotations

import re
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal

import anyio.to_thread
from pydantic import BaseModel, Field

from tools.core.context import ToolContext
from tools.core.errors import TriageError, UnreadableInput
from tools.core.files import InputFile, size_text
from tools.core.limits import (
    LOG_CLASSIFIED_LINES_KEPT,
    LOG_MAX_PATTERNS,
    LOG_PARALLEL_BYTES,
    LOG_READ_SHARE,
    LOG_SCAN_PROCESSES,
    LOG_SITE_LINES,
)
from tools.core.models import Coverage, CoverageStatus, InputModel, NextStep, PathArg, Severity, Table, ToolResult
from tools.core.ranks import compact_ranges, rank_of_line
from tools.core.stalls import on_local_disk
from tools.core.thresholds import GPUS_PER_NODE_MAX, KV_CACHE_WARN_PCT
from tools.core.workers import map_taking_turns, usable_cores
from tools.core.xid import xid_meaning
from tools.logs.cuda_facts import cuda_exception_facts, cuda_facts
from tools.logs.exceptions import (
    ERROR_TEXT_CHARS,
    TRACEBACK_RULE,
    TracebackReader,
    exception_hits,
    first_sentence,
    lend_cut_tracebacks,
    parse_exception,
)
from tools.logs.exits import demote_consequences, exit_facts, with_exit_rules
from tools.logs.grep import FileTotal
from tools.logs.learned import predict_file
from tools.logs.lines import LineReader, error_line_message, network_before_timeout, with_line_rules
from tools.logs.metrics import metric_facts, metric_level, overflow_level
from tools.logs.prefixes import anchor_after_prefix, prefix_facts, without_prefixes
from tools.logs.progress import steps_before
from tools.logs.reader import (
    LOG_FORMATS,
    LineMatcher,
    MatchedLine,
    ScanStats,
    cut_by_deadline,
    display_line,
    expand_log_inputs,
    log_coverage,
    map_files,
    scan_file,
    without_colours,
)
from tools.logs.sites import SITE_CONTEXT_LINES, site_facts

__all__ = ["DiagnoseLogsInput", "DiagnoseLogsResult", "diagnose_logs", "load_rules", "nccl_result_name"]

Level = Literal["info", "warn", "crit"]
FactValue = int | float | str | bool | list[int]
_LEVEL_RANK = {"info": 0, "warn": 1, "crit": 2}
_SIZE = re.compile(r"^([\d.]+) ?([KMGTP]?)i?B$|^(\d+) bytes$")
_SIZE_FACTOR = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_INT = re.compile(r"^-?\d+$")
_GROUPED_INT = re.compile(r"^\d{1,3}(?:,\d{3})+$")
_FLOAT = re.compile(r"^-?\d+\.\d*(?:e[+-]?\d+)?$|^-?\d+e[+-]?\d+$", re.IGNORECASE)
_TIMESTAMP = re.compile(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?"  # ISO / Python logging
    r"|\b[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+"  # glog (c10d, dynamo)
    r"|\b[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d"  # syslog
    r"|^\[ *\d+\.\d+\]"  # dmesg
)


CONTINUATION_LINES = 8  # dynamo prints a limit's function and reason, explain() a break's reason, a few lines below


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    level: Level
    match: Any
    facts: tuple[Any, ...]
    size_facts: frozenset[str]
    group_by: tuple[str, ...]
    cross_rank: bool
    context_only: bool
    # A problem only between nodes (e.g. the socket transport): its severity holds when the logs show more than one
    # node, else the finding is info.
    multi_node: bool
    # Not a finding: what the line says (NCCL's transport, a communicator's node count) is evidence for other rules.
    evidence_only: bool
    # Facts of an evidence rule that fill in the findings of its category that lack them (the socket NIC).
    lends: tuple[str, ...]
    # A status shown at its worst line: the one where this fact peaked (KV cache usage).
    peak: str | None
    # Facts the rule states by what it is (the socket transport rule: transport = NET/Socket).
    sets: dict[str, FactValue]
    # The finding shows the latest values, not the first: a status (info rules, unless they say otherwise), or
    # a failure that changes as it repeats (the loss scale skip by skip).
    latest: bool
    # Rules whose message this line goes on (within CONTINUATION_LINES below it); such a line is never a finding.
    continues: tuple[str, ...]
    within: int
    cause: str
    fix: str
    sop_branch: str
    # A finding only where nothing else serious came from the same file (TorchScript's source pointer, printed under
    # a compile error and under a runtime one alike: the runtime error's own finding says what failed).
    alone: bool = False


def _compile(pattern: str) -> Any:
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.never_nl = True
    options.log_errors = False
    return re2.compile(pattern.encode(), options)


class _LazyRegex:
    """A rule's RE2 pattern, compiled on its first use: a call compiles only the rules its lines matched, not the
    several hundred patterns of every rule (a quarter of a second at start-up). tests/test_sop.py compiles them all."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: Any = None

    def compiled(self) -> Any:
        if self._compiled is None:  # two threads may both compile it: the same pattern, either result serves
            self._compiled = _compile(self.pattern)
        return self._compiled

    def __getattr__(self, name: str) -> Any:  # search, match, finditer, groupindex ...
        return getattr(self.compiled(), name)


@cache
def _rule_file() -> dict[str, Any]:
    return tomllib.loads(resources.files("sop").joinpath("log_rules.toml").read_text("utf-8"))


@cache
def load_rules() -> tuple[tuple[Rule, ...], LineMatcher]:
    """The rules, and one matcher over every rule's `match` that also says which rules matched a line."""
    raw = _rule_file()
    # Issue 31: the exit table's rows join the rules; a rule's `^` also matches after known line prefixes.
    listed = with_line_rules(with_exit_rules(raw["rule"]))  # and the error lines, networks (tools/logs/lines.py)
    rules = tuple(
        Rule(id=r["id"], category=r["category"], level=r["severity"], match=_LazyRegex(anchor_after_prefix(r["match"])),
             facts=tuple(_LazyRegex(anchor_after_prefix(f)) for f in r["facts"]),
             size_facts=frozenset(r.get("size_facts", [])),
             group_by=tuple(r.get("group_by", [])), cross_rank=bool(r.get("cross_rank", False)),
             context_only=bool(r.get("context_only", False)), multi_node=bool(r.get("multi_node", False)),
             evidence_only=bool(r.get("evidence_only", False)),
             lends=tuple(r.get("lends", [])), continues=tuple(r.get("continues", [])),
             within=int(r.get("within", CONTINUATION_LINES)),
             latest=bool(r.get("latest", r["severity"] == "info")), sets=dict(r.get("sets", {})),
             peak=r.get("peak"),
             cause=r["cause"], fix=r["fix"], sop_branch=r["sop_branch"], alone=bool(r.get("alone", False)))
        for r in listed
    )
    # A rule's `candidate` (a cheaper superset of its `match`) finds its lines; `match` then decides (classify).
    return rules, LineMatcher([anchor_after_prefix(r.get("candidate", r["match"]), loose=True) for r in listed],
                              case_sensitive=True)


class DiagnoseLogsInput(InputModel):
    paths: list[PathArg] = Field(min_length=1, max_length=LOG_MAX_PATTERNS,
                             description="Log files or globs inside the roots (per-rank logs, torchrun output, "
                             "dmesg/syslog excerpts, inference server logs); .gz read transparently.")

    cli_positional = "paths"


class Occurrence(BaseModel):
    file: str
    line: int
    rank: int | None
    timestamp: str | None
    text: str


class LogFinding(BaseModel):
    category: str = Field(description="nccl_timeout, nccl_init_network, collective_mismatch, cuda_oom, nan_inf, "
                          "dataloader, gpu_hardware, cuda_error, compile, inference, process_exit, "
                          "unclassified_error (an error no category fits: facts exception, message, location).")
    rule: str
    severity: Level
    count: int
    first: Occurrence
    ranks: list[int] = Field(description="Ranks whose logs show it.")
    first_by_rank: list[Occurrence] = Field(default_factory=list)
    facts: dict[str, FactValue] = Field(description="Values pulled from the line (numbers as numbers, sizes in "
                                        "bytes as *_bytes), plus cross-rank conclusions for hangs.")
    cause: str
    fix: str
    sop_branch: str


class DiagnoseLogsResult(ToolResult):
    findings: list[LogFinding]
    files: list[FileTotal]

    narrow_hint = "pass fewer paths (e.g. the ranks named in the findings)"

    def tables(self) -> list[Table]:
        return [
            Table("Findings", ["severity", "category", "count", "ranks", "first (file:line)", "facts", "cause / fix"],
                  [[f.severity, f.category, str(f.count), _ranks(f.ranks), f"{f.first.file}:{f.first.line}",
                    _facts(f.facts), f"{f.cause} Fix: {f.fix}"] for f in self.findings], "findings"),
            Table("Files", ["file", "rank", "matching lines", "lines", "MiB", "status"],
                  [[f.file, "-" if f.rank is None else str(f.rank), str(f.matches), str(f.lines),
                    f"{f.bytes / 2**20:.1f}", f.status] for f in self.files], "files"),
        ]


def _both_units(facts: dict[str, FactValue], name: str) -> None:
    """A duration printed in seconds (`stuck for 600 seconds`) or milliseconds (`Timeout(ms)=600000`) in both units:
    one meaning, whichever way the line printed it."""
    seconds, millis = facts.get(f"{name}_s"), facts.get(f"{name}_ms")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and millis is None:
        facts[f"{name}_ms"] = round(seconds * 1000)
    elif isinstance(millis, int | float) and not isinstance(millis, bool) and seconds is None:
        facts[f"{name}_s"] = millis / 1000


def _ranks(ranks: list[int]) -> str:

    return compact_ranges(ranks) if ranks else "-"


def _facts(facts: dict[str, FactValue]) -> str:
    return ", ".join(f"{k}={v}" for k, v in facts.items())


# ---------------------------------------------------------------- extraction


def _convert(name: str, value: str, sizes: frozenset[str]) -> tuple[str, FactValue]:
    if name.endswith("_ranks"):  # a list of ranks, as the contract's `ranks`: "0, 3" or "1"
        return name, [int(r) for r in re.findall(r"\d+", value)]
    if name in sizes:
        size = _SIZE.match(value.strip())
        if size:
            if size.group(3) is not None:
                return f"{name}_bytes", int(size.group(3))
            return f"{name}_bytes", int(float(size.group(1)) * _SIZE_FACTOR[size.group(2)])
    if _INT.match(value):
        return name, int(value)
    if name.endswith("_frac") and _FLOAT.match(value):  # SGLang's 'token usage: 0.77' as vLLM's percentage
        return f"{name.removesuffix('_frac')}_pct", round(float(value) * 100, 2)
    if _GROUPED_INT.match(value):
        return name, int(value.replace(",", ""))  # vLLM prints '2,042,016 tokens'
    if _FLOAT.match(value):
        return name, float(value)
    return name, value.strip()


# NCCL's result codes and the text ncclGetErrorString gives each ('NCCL error in: ..., internal error, ...').
NCCL_RESULTS = {
    "unhandled cuda error": "ncclUnhandledCudaError",
    "unhandled system error": "ncclSystemError",
    "internal error": "ncclInternalError",
    "invalid argument": "ncclInvalidArgument",
    "invalid usage": "ncclInvalidUsage",
    "remote process exited or there was a network error": "ncclRemoteError",
    "operation in progress": "ncclInProgress",
}


# ncclResult_t by number, as the 'file.cc:LINE -> N' return chains print it.
NCCL_RESULT_CODES = ("ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
                     "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress")


def nccl_result_name(printed: str) -> str:
    """An NCCL result as its enum name, whichever way the log printed it (the name, or ncclGetErrorString's text,
    which may carry a suffix such as ' - please report this issue to the NCCL developers')."""
    text = printed.strip().lower()
    return next((name for words, name in NCCL_RESULTS.items() if text.startswith(words)), printed)


def extract_facts(rule: Rule, line: bytes) -> dict[str, FactValue]:
    facts: dict[str, FactValue] = {}
    for pattern in rule.facts:
        found = pattern.search(line)
        if found is None:
            continue
        for raw_name, value in found.groupdict().items():
            if value is None:
                continue
            name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
            key, converted = _convert(name, value.decode("utf-8", "replace"), rule.size_facts)
            facts.setdefault(key, converted)
    xid = facts.get("xid")
    if rule.category == "gpu_hardware" and isinstance(xid, int):
        facts["xid_meaning"] = xid_meaning(xid)[1]
    printed = facts.get("nccl_error")
    if isinstance(printed, str):
        facts["nccl_error"] = nccl_result_name(printed)
    frame_file, frame_line = facts.pop("loc_file", None), facts.pop("loc_line", None)
    if frame_file is not None and frame_line is not None:
        facts.setdefault("location", f"{frame_file}:{frame_line}")  # a frame's 'File "x", line N' as a location
    transport = facts.get("transport")
    if transport in ("Socket", "IB"):
        facts["transport"] = f"NET/{transport}"  # 'Using network Socket' is the transport 'via NET/Socket' names
    code = facts.get("nccl_result")
    if isinstance(code, int) and 0 < code < len(NCCL_RESULT_CODES):
        facts.setdefault("nccl_error", NCCL_RESULT_CODES[code])
    signal = facts.get("signal_number")
    if rule.id == "child_failed" and "exitcode" not in facts and isinstance(signal, int):
        facts["exitcode"] = -signal  # "Signal 15 (SIGTERM) received" is exit code -15
    return facts


def classify(line: bytes, matched: frozenset[int] | None = None) -> tuple[Rule, dict[str, FactValue]] | None:
    """The first rule (in file order) that matches `line`, and its facts. `matched`: rule indices the
    matcher already found for this line (Hyperscan reports them all at once)."""
    rules, _ = load_rules()
    candidates = sorted(matched) if matched else range(len(rules))
    line = line.rstrip(b"\r\n")  # RE2 with never_nl: a pattern's `$` cannot match before a kept newline
    for index in candidates:
        rule = rules[index]
        if rule.match.search(line) is not None:
            return rule, extract_facts(rule, line)
    return None


def _parent(hits: list[tuple[Rule, _Hit]], rule: Rule, number: int) -> _Hit | None:
    """The message just above line `number` that `rule`, a continuation rule, goes on (within its `within` lines)."""
    parent = next((h for r, h in reversed(hits[-4:]) if r.id in rule.continues), None)
    return parent if parent is not None and number - parent.through <= rule.within else None


def _classify_after(line: bytes, matched: frozenset[int] | None, rule: Rule, hits: list[tuple[Rule, _Hit]],
                    number: int) -> tuple[Rule, dict[str, FactValue]] | None:
    """The first rule after `rule` that matches `line` and is not itself a continuation without its message."""
    rules, _ = load_rules()
    left = frozenset(i for i in (matched or range(len(rules))) if i > rules.index(rule))
    while left:
        found = classify(line, left)
        if found is None or not found[0].continues or _parent(hits, found[0], number) is not None:
            return found
        left -= {rules.index(found[0])}
    return None


@dataclass
class _Hit:
    file: InputFile
    number: int
    rank: int | None
    text: bytes
    facts: dict[str, FactValue]
    # Where the failure was raised (sites.py): fills in what the rule's own facts lack, never a group key.
    site: dict[str, str] = field(default_factory=dict)
    through: int = 0  # the last line of the message (continuation lines included)


@dataclass
class _Group:
    rule: Rule
    hits: int = 0
    first: _Hit | None = None
    last: _Hit | None = None
    by_rank: dict[int, _Hit] = field(default_factory=dict)
    last_by_rank: dict[int, _Hit] = field(default_factory=dict)
    # Status rules (info) print their numbers over several lines (blocks, then tokens, then concurrency): the
    # finding shows the latest value of each. A failure shows the first value of each: its first line's facts,
    # then what its later lines add (the peer named two WARNs later, explain()'s counts line by line).
    latest: dict[str, FactValue] = field(default_factory=dict)
    site: dict[str, str] = field(default_factory=dict)  # where it was raised, from its first line
    peak: float = float("-inf")  # the highest value of the rule's `peak` fact so far
    # Hosts named by NCCL's line prefix: two are enough to know the logs span nodes.
    hosts: set[bytes] = field(default_factory=set)


@dataclass
class _FileHits:
    """One file's classified lines, in order, and its totals (scanned on a worker thread)."""

    hits: list[tuple[Rule, _Hit]]
    total: FileTotal


def _group_key(rule: Rule, facts: dict[str, FactValue]) -> str:
    return "|".join([rule.id, *(str(facts.get(name)) for name in rule.group_by)])


MISMATCH_RULE = "nccl_collective_check"


@cache
def _rule_named(rule_id: str) -> Rule:
    return next(r for r in load_rules()[0] if r.id == rule_id)


@cache
def _traceback_rule() -> int:
    """The index of the rule whose lines are read as tracebacks."""
    return next(i for i, r in enumerate(load_rules()[0]) if r.id == TRACEBACK_RULE)


def _scan_one(file: InputFile, deadline: float) -> _FileHits:
    _, candidates = load_rules()
    stats = ScanStats()
    status = "scanned"
    hits: list[tuple[Rule, _Hit]] = []
    # (last line, facts) of the entry of torchrun's failure summary being read: its host and rank lines come
    # before its exitcode line.
    summary: tuple[int, dict[str, FactValue]] = (0, {})
    # Findings (rule and group_by facts) sited in this file: lines sited so far, and whether one gave a location.
    sited: dict[str, tuple[int, bool]] = {}
    waiting: list[tuple[int, Rule, dict[str, FactValue]]] = []  # continuation lines seen before their message
    continued: set[int] = set()  # lines a rule read as the continuation of a message: that rule's, not error lines
    tracebacks = TracebackReader()  # the final exceptions, for the exception taxonomy (tools/logs/exceptions.py)
    traceback_rule = _traceback_rule()
    lines = LineReader()  # error lines and network failures (tools/logs/lines.py)
    # Each distinct matched line classified once: a log that repeats one failure (its traceback every step, one
    # warning per rank) has few distinct matched lines among very many.
    classify_once = lru_cache(maxsize=LOG_CLASSIFIED_LINES_KEPT)(classify)
    last_line = 0
    try:
        for match in scan_file(file, candidates, context=SITE_CONTEXT_LINES, deadline=deadline, stats=stats,
                               rejoin_wraps=True):
            last_line = match.number
            if traceback_rule in match.patterns:
                tracebacks.feed(match.number, match.text, [t for _, t in match.before], [t for _, t in match.after])
            once = classify_once(match.text, match.patterns)
            if once is not None and once[0].continues and _parent(hits, once[0], match.number) is None:
                # A continuation line with no message above it may be another rule's own line (kubectl's
                # `Exit Code:    137` is not a graph-break table row): a later rule that takes it is preferred.
                once = _classify_after(match.text, match.patterns, once[0], hits, match.number) or once
            # A copy of its facts: the hit takes facts out of them (the rank) and adds those of the lines around it.
            classified = None if once is None else (once[0], dict(once[1]))
            if lines.feed(match, classified):
                continue
            if classified is None or classified[0].id == TRACEBACK_RULE:
                continue
            rule, facts = classified
            line_reader = _RULE_LINE_READERS.get(rule.id) or _LINE_READERS.get(rule.category)
            if line_reader is not None:
                line_reader(rule, facts, match)
            if rule.context_only:
                earlier = summary[1] if match.number - summary[0] <= 3 else {}
                summary = (match.number, {**earlier, **facts})
                continue
            line_rank = rank_of_line(match.text)
            if match.number - summary[0] <= 3:  # an exitcode line of torchrun's failure summary
                for name, value in summary[1].items():
                    facts.setdefault(name, value)
            fact_rank = facts.pop("rank", None)
            if rule.continues:
                continued.add(match.number)
                # A line that goes on a message above it (the function and reason under a recompile limit):
                # its facts join that hit. TensorFlow prints its allocator stats above the OOM: a line with no
                # message above waits for one below. Alone it is nothing.
                parent = _parent(hits, rule, match.number)
                if parent is not None:
                    for name, value in facts.items():
                        parent.facts.setdefault(name, value)
                    parent.through = match.number
                else:
                    waiting.append((match.number, rule, facts))
                continue
            previous = hits[-1][1] if hits and hits[-1][0] is rule else None
            if (previous is not None and previous.through == match.number - 1 and line_rank is None
                    and fact_rank is None and facts and not facts.keys() & previous.facts.keys()):
                # One message over two lines (a watchdog timeout and, below it, its WorkNCCL(...)): one hit. A
                # repeated message would repeat its facts.
                for name, value in facts.items():
                    previous.facts.setdefault(name, value)
                previous.through = match.number
                continue
            if (isinstance(fact_rank, int) and line_rank is not None and fact_rank != line_rank
                    and ("process_group" in facts or "pg_id" in facts)):
                # `[rank4]:[E ...] [PG 5 Rank 0] ...`: the launcher's prefix is the global rank; the message's is the
                # rank within that process group.
                facts["group_rank"], fact_rank = fact_rank, line_rank
            rank = fact_rank if isinstance(fact_rank, int) else line_rank if line_rank is not None else file.rank
            hit = _Hit(file, match.number, rank, match.text, facts, through=match.number)
            # Each waiting line for as long as its rule's `within` (a TensorRT node dump runs 20 lines and more).
            waiting = [w for w in waiting if match.number - w[0] <= w[1].within]
            for number, part, part_facts in waiting:
                if rule.id in part.continues and match.number - number <= part.within:
                    for name, value in part_facts.items():
                        hit.facts.setdefault(name, value)
            key = _group_key(rule, facts)
            tried, located = sited.get(key, (0, False))
            if rule.level != "info" and not rule.evidence_only and not located and tried < LOG_SITE_LINES:
                # A finding's first line is shown with its facts: site that one, and where it names no location, the
                # next lines of the same finding (Caffe prints its CHECK bare, then with glog's file:line prefix).
                hit.site = site_facts(match.text, [t for _, t in match.before], [t for _, t in match.after])
                sited[key] = (tried + 1, "location" in hit.site)
            hits.append((rule, hit))
            if rule.id == HOROVOD_STALL_RULE and "pending_ops" in hit.facts:  # the ranks wait in different collectives
                hits.append((_rule_named(MISMATCH_RULE), replace(hit, facts=dict(hit.facts))))
    except TriageError as exc:
        if "ran out of time" not in exc.message:
            status = f"unreadable: {exc.message}"
        else:  # what was read is judged; the coverage row says where reading stopped
            status = cut_by_deadline(file, stats, last_line)
    else:
        status = stats.status()
    raised = tracebacks.exceptions()
    hits = lines.with_error_lines(file, exception_hits(file, lines.with_network(file, hits), raised), raised,
                                  frozenset(continued))
    hits = _without_lone_rules(hits)
    lend_cut_tracebacks(hits, tracebacks.cut_tracebacks())  # where a failure above a cut traceback surfaced
    cuda_exception_facts(hits)
    _own_rank(file, hits)
    _step_reached(file, hits, deadline, stats.wrap_width)
    total = FileTotal(file=file.name, rank=file.rank, matches=len(hits), lines=stats.lines, bytes=stats.bytes,
                      status=status)
    return _FileHits(hits, total)


def _without_lone_rules(hits: list[tuple[Rule, _Hit]]) -> list[tuple[Rule, _Hit]]:
    """`hits` without those of `alone` rules where another serious finding (an unclassified error aside) came from the
    file."""
    if not any(rule.alone for rule, _ in hits):
        return hits
    others = any(rule.level != "info" and not rule.alone and not rule.evidence_only
                 and rule.category != "unclassified_error" for rule, _ in hits)
    return [(rule, hit) for rule, hit in hits if not (rule.alone and others)]


def _step_reached(file: InputFile, hits: list[tuple[Rule, _Hit]], deadline: float, wrap_width: int | None) -> None:
    """Each failure that names no step of its own: the last step the training printed above its first line (`step`,
    and `step_line` where that was read), with the loss that line printed (tools/logs/progress.py)."""
    first: dict[str, _Hit] = {}
    for rule, hit in hits:
        if rule.level != "info" and not rule.evidence_only and "step" not in hit.facts:
            first.setdefault(_group_key(rule, hit.facts), hit)
    reached = steps_before(file, (hit.number for hit in first.values()), deadline, wrap_width)
    for hit in first.values():
        progress = reached.get(hit.number)
        if progress is not None:
            hit.facts["step"], hit.facts["step_line"] = progress.step, progress.line
            if progress.loss is not None:
                hit.facts.setdefault("loss", progress.loss)


def _own_rank(file: InputFile, hits: list[tuple[Rule, _Hit]]) -> None:
    """A log of one process: it names one rank as its own (`rank 3/8`, Lightning's `GLOBAL_RANK: 1`) and no other,
    its path names none, and no line carries a rank of its own (a merged log's prefixes): its findings are that
    rank's."""
    if file.rank is not None or any(h.rank is not None for _, h in hits):
        return
    own = {h.facts.get("self_rank") for r, h in hits if r.id in ("world_size", "nccl_topology")} - {None}
    if len(own) != 1:
        return
    rank = next(iter(own))
    if isinstance(rank, int) and not isinstance(rank, bool):
        for _, hit in hits:
            if hit.rank is None:
                hit.rank = rank


@dataclass(frozen=True)
class _RanksRead:
    """Whose logs were read, against how many ranks the job has: claims about who is behind or silent hold only for
    the ranks whose logs were read."""

    seen: frozenset[int]
    printed_world: int | None  # the most any line says the job has (WORLD_SIZE, rank i/N, NCCL's nranks)
    files: int

    def total(self, at_least: int = 0) -> int:
        """How many ranks the job has at least: what the logs print, or one more than the highest rank seen."""
        return max(self.printed_world or 0, max(self.seen, default=-1) + 1, at_least)

    def exact(self) -> bool:
        return self.printed_world is not None and self.printed_world >= self.total()

    def missing(self, at_least: int = 0) -> bool:
        return len(self.seen) < self.total(at_least)

    def phrase(self, at_least: int = 0) -> str:
        """How many ranks' logs were read, e.g. 'logs of 3 of 8 ranks read'."""
        total, read = self.total(at_least), len(self.seen)
        if read >= total:
            return (f"logs of all {total} ranks read" if self.exact()
                    else f"logs of {read} rank(s) read; the job's size is not in them")
        return f"logs of {read} of {total if self.exact() else f'at least {total}'} ranks read"


def _scan_files(files: list[InputFile], deadline: float, processes_from: int) -> list[_FileHits]:
    """Every file's hits, in file order: on up to two threads, or, for as much text as `processes_from`, in this
    thread and a spawned process taking turns at the files."""
    cores = usable_cores()
    # A file on a mount that can hang (NFS, Lustre, FUSE) is read on this process's threads: a read stuck in a
    # worker process would be out of sight of the stalled-mount watch (tools/core/stalls.py), and every later call
    # would wait out its deadline instead of being refused at once.
    if (len(files) < 2 or cores < 2 or sum(_size(f) for f in files) < processes_from
            or not all(on_local_disk(f.path) for f in files)):
        return map_files(lambda f: _scan_one(f, deadline), files)
    rules = load_rules()[0]
    shared: dict[tuple[str, str], Rule] = {}  # a rule made for an exception entry, one object per (id, level)
    out: list[_FileHits] = []
    for portable in map_taking_turns(_scan_portable, files, LOG_SCAN_PROCESSES, deadline):
        hits = [(rules[i] if rule is None else shared.setdefault((rule.id, rule.level), rule), hit)
                for i, rule, hit in portable.hits]
        out.append(_FileHits(hits, portable.total))
    return out


def _size(file: InputFile) -> int:
    try:
        return file.path.stat().st_size
    except OSError:
        return 0  # the scan says why it cannot be read


@dataclass
class _PortableFileHits:
    """_FileHits as a process hands them back: a rule of the rule file as its index (its regexes stay behind), a
    rule made for an exception entry (no regex) as itself."""

    hits: list[tuple[int, Rule | None, _Hit]]
    total: FileTotal


def _scan_portable(file: InputFile, deadline: float) -> _PortableFileHits:
    scanned = _scan_one(file, deadline)
    index = _rule_index()
    return _PortableFileHits([(index[id(rule)], None, hit) if id(rule) in index else (-1, rule, hit)
                              for rule, hit in scanned.hits], scanned.total)


@cache
def _rule_index() -> dict[int, int]:
    """The position of each rule of the rule file, by object (load_rules is cached: the same objects every call)."""
    return {id(rule): i for i, rule in enumerate(load_rules()[0])}


def _scan(files: list[InputFile], deadline: float, processes_from: int = LOG_PARALLEL_BYTES
          ) -> tuple[dict[str, _Group], list[FileTotal], set[int], int | None]:
    """Group every file's hits by rule (and group_by facts), in file order, and note the ranks seen and the largest
    world size a line prints. `processes_from`: the bytes of input from which a second process scans files."""
    groups: dict[str, _Group] = {}
    seen_ranks: set[int] = {f.rank for f in files if f.rank is not None}
    printed_world: int | None = None
    per_file = _scan_files(files, deadline, processes_from)
    for file_hits in per_file:
        for rule, hit in file_hits.hits:
            if hit.rank is not None:
                seen_ranks.add(hit.rank)
            for key in ("world_size", "nranks"):  # a communicator's nranks: the job has at least as many
                size = hit.facts.get(key)
                if isinstance(size, int) and not isinstance(size, bool) and size > (printed_world or 0):
                    printed_world = size
            group = groups.setdefault(_group_key(rule, hit.facts), _Group(rule))
            group.hits += 1
            group.first = group.first or hit
            for name, sited in hit.site.items():  # the first hit's site, then what later hits add (the exception
                group.site.setdefault(name, sited)  # of a traceback whose final line the rule matched again)
            group.last = hit
            if rule.peak:  # the values of the line where the peak fact was highest, then what others add
                value = hit.facts.get(rule.peak)
                if isinstance(value, int | float) and value >= group.peak:
                    group.peak = value
                    group.latest.update(hit.facts)
                else:
                    for name, fact in hit.facts.items():
                        group.latest.setdefault(name, fact)
            elif rule.latest:
                group.latest.update(hit.facts)
            else:
                for name, value in hit.facts.items():
                    group.latest.setdefault(name, value)
            if rule.multi_node or rule.evidence_only:
                host = _nccl_host(hit.text)
                if host is not None and len(group.hosts) < 2:
                    group.hosts.add(host)
            if hit.rank is not None:
                group.by_rank.setdefault(hit.rank, hit)
                group.last_by_rank[hit.rank] = hit
    return groups, [f.total for f in per_file], seen_ranks, printed_world


# ---------------------------------------------------------------- reasoning


def _occurrence(hit: _Hit) -> Occurrence:
    text = display_line(hit.text)
    stamp = _TIMESTAMP.search(text)
    return Occurrence(file=hit.file.name, line=hit.number, rank=hit.rank, timestamp=stamp.group(0) if stamp else None,
                      text=text)


def _int_by_rank(group: _Group, key: str) -> dict[int, int]:
    found: dict[int, int] = {}
    for rank, hit in group.last_by_rank.items():
        value = hit.facts.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            found[rank] = value
    return found


def _hang_facts(group: _Group, progress: _Group | None, world: set[int]) -> dict[str, FactValue]:
    """Which rank is behind (lowest sequence number, or lowest last completed work) and which ranks are
    silent (no timeout of their own)."""
    facts: dict[str, FactValue] = {}
    seqs = _int_by_rank(group, "seq")
    if seqs:
        newest = max(seqs.values())
        ops = {str(group.last_by_rank[r].facts.get("op")) for r, seq in seqs.items() if seq == newest}
        if len(ops) > 1:
            facts["ops_at_same_seq"] = ",".join(sorted(ops))  # ranks in different collectives: a mismatch
    if len(set(seqs.values())) <= 1 and progress is not None:
        # Same timed-out collective everywhere: the watchdog's last-completed counters may still differ.
        seqs = _int_by_rank(progress, "last_completed")
    if len(set(seqs.values())) > 1:
        lowest, highest = min(seqs.values()), max(seqs.values())
        facts["behind_ranks"] = sorted(r for r, s in seqs.items() if s == lowest)
        facts["behind_by_collectives"] = highest - lowest
        facts["seq_of_behind"] = lowest
        facts["seq_of_others"] = highest
    timed_out = set(group.last_by_rank)
    silent = sorted(world - timed_out)
    if timed_out and silent:
        facts["silent_ranks"] = silent
    return facts


def _oom_facts(facts: dict[str, FactValue]) -> dict[str, FactValue]:
    def num(key: str) -> int:
        value = facts.get(key)
        return value if isinstance(value, int) else 0

    requested, allocated = num("requested_bytes"), num("allocated_bytes")
    loose = num("reserved_unallocated_bytes") or max(0, num("reserved_bytes") - allocated)
    if requested and loose:
        facts["reserved_but_free_bytes"] = loose
        facts["likely"] = "fragmentation" if loose >= requested else "capacity"
    elif requested and allocated:
        facts["likely"] = "capacity"
    return facts


def _number(facts: dict[str, FactValue], key: str) -> float:
    value = facts.get(key)
    return float(value) if isinstance(value, int | float) else 0.0


def _nccl_host(line: bytes) -> bytes | None:
    """The host of an NCCL line (`host:pid:tid [dev] NCCL INFO ...`, after any launcher prefix)."""
    found = _nccl_prefix().search(line)
    return None if found is None else found.group(1)


@cache
def _nccl_prefix() -> Any:
    return _compile(r"(?:^|[\s:>\]])([\w.\-]+):\d+:\d+ \[\d+\] NCCL ")  # RE2: linear on any line


def _spans_nodes(groups: dict[str, _Group]) -> bool:
    """Whether the logs show more than one node: NCCL lines from two hosts, a communicator with nNodes > 1 or
    with more ranks than a node has GPUs, or channels that already run between nodes."""
    hosts: set[bytes] = set()
    for group in groups.values():
        hosts |= group.hosts
        nodes = group.first.facts.get("nnodes") if group.first else None
        ranks = group.first.facts.get("nranks") if group.first else None
        if group.rule.id == "nccl_socket_channel" or (isinstance(nodes, int) and nodes > 1):
            return True
        if nodes is None and isinstance(ranks, int) and ranks > GPUS_PER_NODE_MAX:
            return True  # older NCCL prints no nNodes
    return len(hosts) > 1


def _printed_error(line: bytes, level: Level) -> str | None:
    """A failure line's own words: the message after its level when it is an error line; for a fatal finding, else
    the line after its prefixes. A warning's line (a graph break, a recompile) is a report, not an error text."""
    message = error_line_message(line)
    if message is None and level == "crit":
        message = without_prefixes(without_colours(line[:ERROR_TEXT_CHARS * 2].decode("utf-8", "replace")).strip()
                                   ).strip()
    return message[:ERROR_TEXT_CHARS] if message else None


def _metric_line(rule: Rule, facts: dict[str, FactValue], match: MatchedLine) -> None:
    metric_facts(facts, match.text, match.before, match.after)  # the field, its value and the step


def _cuda_line(rule: Rule, facts: dict[str, FactValue], match: MatchedLine) -> None:
    cuda_facts(rule.id, rule.category, facts, match.text, match.before, match.after)  # the CUDA error's own text


HOROVOD_STALL_RULE = "horovod_stall"
# The stall inspector's list under its warning: `0: [HorovodBroadcast_x_0, ...]`, one line per stalled rank, after
# mpirun's `[1,0]<stderr>:` where there is one.
_STALLED_RANK = re.compile(rb"(?:^|[\s:>])(?P<rank>\d+): \[(?P<ops>[^\]]*)")
_HOROVOD_OP = re.compile(rb"Horovod(Allreduce|Broadcast|Allgather|Alltoall|ReduceScatter|Reducescatter|Barrier|Join)")


def _stall_line(rule: Rule, facts: dict[str, FactValue], match: MatchedLine) -> None:
    """Horovod's stall warning: the collectives each stalled rank waits in (`pending_ops`) when they differ: rank 0 in
    broadcasts while rank 1 is in allreduces is the ranks disagreeing on which collective runs, not only a late rank."""
    pending: dict[int, tuple[str, ...]] = {}
    for _, text in match.after:
        row = _STALLED_RANK.search(text)
        if row is not None:
            pending[int(row["rank"])] = tuple(sorted({op.decode() for op in _HOROVOD_OP.findall(row["ops"])}))
    if pending:
        facts["stalled_ranks"] = ",".join(str(r) for r in sorted(pending))
    if len({ops for ops in pending.values() if ops}) > 1:
        facts["pending_ops"] = "; ".join(f"rank {r}: {'/'.join(ops)}" for r, ops in sorted(pending.items()) if ops)


TORCHSCRIPT_POINTER_RULE = "torchscript_source_pointer"
# TorchScript's source reference above its pointer: `File "CosPlace\model\layers.py", line 8` (no `, in f`).
_TORCHSCRIPT_FILE = re.compile(rb'^\s*File "(?P<path>[^"]{1,400})", line (?P<line>\d+)\s*$')


def _torchscript_line(rule: Rule, facts: dict[str, FactValue], match: MatchedLine) -> None:
    """TorchScript's pointer: the file and line it points into (`location`) and the message printed above them."""
    before = [text for _, text in match.before]
    found = next(((i, ref) for i in range(len(before) - 1, -1, -1)
                  if (ref := _TORCHSCRIPT_FILE.match(before[i])) is not None), None)
    if found is None:
        return
    at, reference = found
    facts["location"] = f"{reference['path'].decode('utf-8', 'replace')}:{int(reference['line'])}"
    message = [text.decode("utf-8", "replace").strip() for text in before[:at]]
    start = next((i for i in range(len(message) - 1, -1, -1) if not message[i]), -1) + 1  # from the blank line
    if start < len(message):
        facts["error"] = message[start][:ERROR_TEXT_CHARS]


def _oom_finding(rule: Rule, facts: dict[str, FactValue], level: Level, hits: int
                 ) -> tuple[dict[str, FactValue], Level]:
    return _oom_facts(facts), level


def _metric_finding(rule: Rule, facts: dict[str, FactValue], level: Level, hits: int
                    ) -> tuple[dict[str, FactValue], Level]:
    if rule.id == "overflow_skip":
        return facts, overflow_level(level, facts, hits)
    return facts, metric_level(level, facts, hits)


def _scaler_skips(findings: list[LogFinding]) -> None:
    """fp16 overflow skips printed by every rank are one skip each: the count that says whether the loss scaler is
    still finding its scale is per rank (eight ranks printing three skips are three, not twenty-four). And a grad norm
    printed non-finite (the loss finite) in a log whose scaler is still finding its scale is that scaler's skip,
    printed before it acted (`Gradient norm: inf` on every rank, then `Skipped batch, new scale: 4096.0`): info too."""
    for finding in findings:
        if finding.rule == "overflow_skip" and finding.severity != "info" and len(finding.ranks) > 1:
            per_rank = -(-finding.count // len(finding.ranks))
            finding.severity = overflow_level(finding.severity, finding.facts, per_rank)
    if not any(f.rule == "overflow_skip" and f.severity == "info" for f in findings):
        return
    for finding in findings:
        if (finding.category == "nan_inf" and finding.facts.get("nonfinite") == "grad_norm"
                and finding.severity != "info"):
            finding.severity = "info"
            finding.facts["scaler_skip"] = True


def _exit_finding(rule: Rule, facts: dict[str, FactValue], level: Level, hits: int
                  ) -> tuple[dict[str, FactValue], Level]:
    return exit_facts(rule.id, facts, level)  # signal, exit code and who killed it (sop/exits.toml)


def _xid_finding(rule: Rule, facts: dict[str, FactValue], level: Level, hits: int
                 ) -> tuple[dict[str, FactValue], Level]:
    xid = facts.get("xid")
    if isinstance(xid, int):
        level = "crit" if xid_meaning(xid)[0] is Severity.crit else "warn"
    return facts, level


# A category's own reader (issue 31's mechanisms), by category, so that the scan loop and _finding name none:
# what it reads from a matched line into the hit's facts, then how it turns a group's facts into the finding's.
_LINE_READERS: dict[str, Callable[[Rule, dict[str, FactValue], MatchedLine], None]] = {
    "nan_inf": _metric_line, "cuda_error": _cuda_line, "cuda_oom": _cuda_line,
}
# A rule's own reader, where one format's lines say more than its category's do (before the category's).
_RULE_LINE_READERS: dict[str, Callable[[Rule, dict[str, FactValue], MatchedLine], None]] = {
    HOROVOD_STALL_RULE: _stall_line, TORCHSCRIPT_POINTER_RULE: _torchscript_line,
}
_FINDING_READERS: dict[str, Callable[[Rule, dict[str, FactValue], Level, int], tuple[dict[str, FactValue], Level]]] = {
    "cuda_oom": _oom_finding, "nan_inf": _metric_finding, "process_exit": _exit_finding, "gpu_hardware": _xid_finding,
}


def _finding(group: _Group, groups: dict[str, _Group], world: set[int], ranks: _RanksRead | None = None
             ) -> LogFinding:
    rule = group.rule
    assert group.first is not None and group.last is not None
    facts = dict(group.latest)
    for name, value in rule.sets.items():
        facts.setdefault(name, value)
    first_step = group.first.facts.get("step")
    if rule.latest and first_step is not None and facts.get("step") != first_step:
        # A run of hits shown at its latest values (the loss scale falling skip by skip) began at the first one.
        facts["last_step"], facts["step"] = facts.get("step", first_step), first_step
    for name, value in group.site.items():
        facts.setdefault(name, value)
    _both_units(facts, "timeout")
    # Where the line's own prefix says it came from (a worker's pid, the logging call's file:line), when nothing
    # nearer (a traceback's frame, the message) said it.
    for name, value in prefix_facts(group.first.text[:ERROR_TEXT_CHARS * 2].decode("utf-8", "replace")).items():
        facts.setdefault(name, value)
    for lender in groups.values():
        if lender.rule.lends and lender.rule.category == rule.category and lender.first is not None:
            for name in lender.rule.lends:
                if name in lender.first.facts:
                    facts.setdefault(name, lender.first.facts[name])
    level: Level = rule.level
    if rule.multi_node and not _spans_nodes(groups):
        level = "info"
    if rule.cross_rank:
        progress = next((g for g in groups.values() if g.rule.id == "nccl_last_work"), None)
        facts.update(_hang_facts(group, progress, world))
        facts["ranks_logged"] = len(world)  # what the cross-rank facts rest on
        if ranks is not None and ranks.printed_world is not None:
            facts["world_size"] = ranks.printed_world
    exitcode = facts.get("exitcode")
    if rule.id == "child_failed" and isinstance(exitcode, int):
        level = "crit" if exitcode == -9 else "info" if exitcode == -15 else "warn"
    finding_reader = _FINDING_READERS.get(rule.category)
    if finding_reader is not None:
        facts, level = finding_reader(rule, facts, level, group.hits)
    if "error" not in facts and not rule.evidence_only:
        printed = _printed_error(group.first.text, level)  # what the failing line says, as the program printed it
        if printed:
            facts["error"] = printed
    if rule.id == "xid" and "pci" in facts:  # every Xid of this GPU, in order: 13 then 31 reads as a story
        xids = [g.first.facts["xid"] for g in groups.values() if g.rule.id == "xid" and g.first is not None
                and g.first.facts.get("pci") == facts["pci"] and isinstance(g.first.facts.get("xid"), int)]
        if len(xids) > 1:
            facts["xids"] = [x for x in xids if isinstance(x, int)]
    cause = rule.cause
    ambiguous = _rule_file()["ambiguous_cuda_errors"]
    error = str(facts.get("error", "")).lower()
    if rule.category == "cuda_error" and any(e in error for e in ambiguous["errors"]):
        facts["hardware_possible"] = True  # the same words come from a bug and from a failing GPU
        cause = f"{cause} {ambiguous['note']}"
    if rule.id == "row_remapper":
        remapped = _number(facts, "remapped_rows_uncorrectable") > 0 or facts.get("remap_pending") == "Yes"
        level = "crit" if facts.get("remap_failed") == "Yes" else "warn" if remapped else "info"
    if rule.id in ("vllm_throughput", "sglang_decode"):  # requests wait while the KV cache is full
        if _number(facts, "pending") > 0 and _number(facts, "kv_cache_usage_pct") >= KV_CACHE_WARN_PCT:
            level = "warn"
    return LogFinding(
        category=rule.category, rule=rule.id, severity=level, count=group.hits, first=_occurrence(group.first),
        ranks=sorted(group.by_rank), first_by_rank=[_occurrence(h) for _, h in sorted(group.by_rank.items())][:16],
        facts=facts, cause=cause, fix=rule.fix, sop_branch=rule.sop_branch,
    )


def _learned(files: list[InputFile], findings: list[LogFinding], groups: dict[str, _Group]) -> list[LogFinding]:
    """The learned fallback's guess (tools/logs/learned.py), only where no rule produced a serious finding
    (unclassified_error aside) nor judged the log undecided (a backend failure the rules cannot place), and never
    of a category a rule reported: a warn that says it is a guess."""
    if any(f.severity != "info" and f.category != "unclassified_error" for f in findings) or any(
            g.rule.id == "dist_error_wrapper" for g in groups.values()):
        return []
    reported = frozenset(f.category for f in findings)
    rules = load_rules()[0]
    out: dict[str, LogFinding] = {}
    for file in files:
        guess = predict_file(file, reported)
        if guess is None or guess.category in out:
            continue
        model_rule = next(r for r in rules if r.category == guess.category)
        facts: dict[str, FactValue] = {
            "learned": True, "probability": guess.probability, "tokens": " ".join(guess.tokens)}
        # Facts still come from what was read, not from the model: the exception the rules could not place (the
        # same failure, now given a family), else the deciding line's own words.
        for unplaced in (f for f in findings if f.category == "unclassified_error" and f.first.file == file.name):
            for name in ("exception", "message", "location", "function", "error"):
                if name in unplaced.facts:
                    facts.setdefault(name, unplaced.facts[name])
        printed = _printed_error(guess.text.encode(), "crit")
        if printed and "error" not in facts:
            facts["error"] = printed
        if printed:  # the deciding line's exception and first sentence, as a traceback's would give them
            _line_exception(printed, facts)
        out[guess.category] = LogFinding(
            category=guess.category, rule="learned_fallback", severity="warn", count=1,
            first=Occurrence(file=file.name, line=guess.line, rank=file.rank, timestamp=None,
                             text=display_line(guess.text.encode())),
            ranks=[] if file.rank is None else [file.rank], facts=facts,
            cause=(f"A learned guess, not a rule: no rule found a fault of a known category, and the model trained on "
                   f"the development logs "
                   f"(sop/log_model.json) reads this log as {guess.category} (probability {guess.probability}), "
                   f"decided by the tokens {', '.join(guess.tokens)}. Typical cause of {guess.category}: "
                   f"{model_rule.cause}"),
            fix=f"Confirm from the log's own lines first (grep_logs). {model_rule.fix}",
            sop_branch=model_rule.sop_branch)
    return list(out.values())


_QUOTED = " \"'`"


def _line_exception(printed: str, facts: dict[str, FactValue]) -> None:
    """`exception` and `message` of a learned guess's deciding line: an exception's line quoted in prose
    (`"RuntimeError: Expected to have finished reduction ...`) names its type; the message is its first sentence."""
    text = printed.strip(_QUOTED)
    parsed = parse_exception(text)
    if parsed is not None and parsed[1]:
        facts.setdefault("exception", parsed[0])
        text = parsed[1]
    sentence = first_sentence(text).strip(_QUOTED)
    if sentence:
        facts.setdefault("message", sentence)


_TIMEOUT_RULES = ("nccl_watchdog_timeout", "gloo_timeout")
_DUMP = "dump every rank's stack (dump_stacks) or read the flight recorder (analyze_flight_recorder)"


def _alike(ranks: _RanksRead) -> str:
    """The sentence for timeouts that name no culprit, saying whose logs they are: one rank's, a merged log's, or
    every rank's."""
    read = sorted(ranks.seen)
    if not read:
        where = "the one log" if ranks.files == 1 else f"the {ranks.files} logs"
        return f"No rank is named in {where}, so the timeout's peer cannot be told from it: {_DUMP}."
    if ranks.missing(at_least=2):  # a collective that timed out had a peer
        if len(read) == 1:
            return (f"Only rank {read[0]}'s log was read ({ranks.phrase(2)}): it shows the timeout, not whom it "
                    f"waited for; read the other ranks' logs, or {_DUMP}.")
        return (f"Ranks {_ranks(read)} all timed out ({ranks.phrase(2)}): the ranks without logs may be the ones "
                f"they wait for; read their logs, or {_DUMP}.")
    if len(read) == 1:  # one rank's log, whatever the job's size: "alike" would compare it with nothing
        return (f"Only rank {read[0]}'s log was read: it shows the timeout, not whom it waited for; read the other "
                f"ranks' logs, or {_DUMP}.")
    if ranks.files == 1:
        return (f"One merged log of ranks {_ranks(read)} ({ranks.phrase()}): all timed out alike, so it cannot name "
                f"the culprit: {_DUMP}.")
    if ranks.exact():
        return f"Every rank (all {len(read)}) timed out alike, so the logs cannot name the culprit: {_DUMP}."
    return (f"All {len(read)} ranks whose logs were read timed out alike (the job's size is not in the logs), so the "
            f"logs cannot name the culprit: {_DUMP}.")


def _culprit(findings: list[LogFinding], ranks: _RanksRead) -> str | None:
    """The sentence naming the rank to look at, from whichever finding can name it; a claim drawn from comparing
    ranks says how many ranks' logs it compared."""
    for finding in findings:
        facts = finding.facts
        missing = facts.get("missing_ranks")
        if isinstance(missing, list):
            return f"{finding.rule} names rank(s) {_ranks(missing)} as never arriving: look there first."
        if "missing_rank" in facts:
            return f"Rank {facts['missing_rank']} never reached the rendezvous (store key): look there first."
        if "behind_ranks" in facts:
            return (f"Rank(s) {facts['behind_ranks']} stopped at {facts['seq_of_behind']}, "
                    f"{facts['behind_by_collectives']} collective(s) behind the others: look there first "
                    f"({ranks.phrase(2)}).")
        if "ops_at_same_seq" in facts:
            return (f"Ranks sit in different collectives ({facts['ops_at_same_seq']}) at the same sequence number "
                    f"({ranks.phrase(2)}).")
        if "silent_ranks" in facts:
            return (f"Rank(s) {facts['silent_ranks']} report no timeout: they are the likely ones the others "
                    f"wait for ({ranks.phrase(2)}).")
    killed = [f for f in findings if f.rule == "child_failed" and f.facts.get("exitcode") == -9]
    if killed:
        return (f"Rank(s) {_ranks(killed[0].ranks)} were killed (SIGKILL, exit -9; often the host OOM killer): "
                "the other ranks' errors are consequences.")
    if any(f.rule in _TIMEOUT_RULES for f in findings):
        return _alike(ranks)
    return None


def _conclude(findings: list[LogFinding], coverage: list[Coverage], ranks: _RanksRead) -> list[str]:
    problems = [f for f in findings if f.severity != "info"]
    if not problems:
        read = [c for c in coverage if c.status is not CoverageStatus.not_understood]
        partial = [c for c in coverage if c.status is CoverageStatus.partial]
        sentences = [f"No failure found by the rule set in {len(read)} log(s) read."
                     + (" Only status lines were recognised." if findings else "")]
        if partial:
            sentences.append(f"{partial[0].input} was read only in part ({partial[0].detail}): a failure after "
                             "the part read is not in the scan.")
        sentences.append("Use grep_logs with a preset to look for what the rules do not cover.")
        return sentences
    lead = problems[0]
    sentences = [f"{len(problems)} problem(s); first and worst: {lead.category} ({lead.rule}) x{lead.count} "
                 f"on rank(s) {_ranks(lead.ranks)}, first at {lead.first.file}:{lead.first.line}."]
    culprit = _culprit(problems, ranks)
    if culprit:
        sentences.append(culprit)
    sentences.append(f"Likely cause: {lead.cause}")
    return sentences[:3]


async def diagnose_logs(params: DiagnoseLogsInput, ctx: ToolContext) -> DiagnoseLogsResult:
    """Name what failed in training/inference logs: NCCL watchdog timeouts (op, SeqNum, numel, timeout,
    rank, and which rank is behind or silent), NCCL init/network errors, collective mismatches, CUDA OOM
    (requested/free/reserved, fragmentation or capacity), NaN/inf loss and overflow skips, DataLoader worker
    deaths/shm/open files, GPU Xid/ECC, CUDA errors, torch.compile graph breaks/recompiles, vLLM/SGLang
    KV-cache preemption and throughput, worker exits. Each finding: count, first occurrence per rank,
    facts, cause, fix, SOP branch. Rules: sop/log_rules.toml. Streams any size and .gz.
    """
    files, unmatched = expand_log_inputs(params.paths, ctx.roots)
    ctx.progress.update(0, None, f"reading {len(files)} log(s), {size_text(sum(f.path.stat().st_size for f in files))}")
    deadline = time.monotonic() + ctx.remaining_s() * LOG_READ_SHARE  # reading's; the rest judges what was read
    groups, totals, world, printed_world = await anyio.to_thread.run_sync(_scan, files, deadline,
                                                                          abandon_on_cancel=True)
    if all(t.status.startswith("unreadable") and not t.bytes for t in totals):
        raise UnreadableInput(f"none of the {len(totals)} log(s) could be read ({totals[0].file}: "
                              f"{totals[0].status}).", "Pass the saved log files themselves.")
    coverage = [log_coverage(t.file, t.status, t.lines, t.bytes, f"{t.matches} line(s) the rules matched")
                for t in totals]
    coverage += [Coverage.not_understood(p, "no file matches this glob", LOG_FORMATS) for p in unmatched]
    ranks = _RanksRead(frozenset(world), printed_world, len(files))
    findings = [_finding(g, groups, world, ranks) for g in groups.values() if not g.rule.evidence_only]
    demote_consequences(findings)  # issue 31: `Aborted (core dumped)` after a CUDA error is its consequence
    network_before_timeout(findings)  # issue 31: a timeout after a network failure is its consequence
    _scaler_skips(findings)  # issue 31: an inf grad norm the fp16 loss scaler skipped while finding its scale
    findings += _learned(files, findings, groups)  # issue 31: a learned guess where the rules stop (learned.py)
    findings.sort(key=lambda f: (-_LEVEL_RANK[f.severity], f.first.file, f.first.line))
    worst = max((_LEVEL_RANK[f.severity] for f in findings), default=0)
    severity = [Severity.ok, Severity.warn, Severity.crit][worst]
    branches = list(dict.fromkeys(f.sop_branch for f in findings if f.severity != "info"))
    steps = [NextStep.from_sop(b, done={"diagnose_logs"}) for b in branches[:3]] or [
        NextStep(branch="triage", action="grep_logs preset=errors on the same paths",
                 why="Lines the rules do not know may still explain the failure.")]
    conclusion = _conclude(findings, coverage, ranks)
    notes: list[str] = []
    decides: str | None = None
    if any(f.rule in _TIMEOUT_RULES for f in findings) and ranks.missing(at_least=2):
        notes.append(f"Cross-rank facts (behind, silent) compare only the ranks whose logs were read: "
                     f"{ranks.phrase(2)}.")
    if severity is Severity.ok:
        severity, conclusion, decides = _undecided(groups, coverage, conclusion)
    return DiagnoseLogsResult(severity=severity, conclusion=conclusion, next_steps=steps, coverage=coverage,
                              decides=decides, notes=notes, findings=findings, files=totals)


def _undecided(groups: dict[str, _Group], coverage: list[Coverage], conclusion: list[str]
               ) -> tuple[Severity, list[str], str | None]:
    """With no failure found: ok only when every input was read and nothing the rules cannot judge was seen;
    else unknown, saying what is missing and what would decide."""
    wrapped = next((g for g in groups.values() if g.rule.id == "dist_error_wrapper" and g.first), None)
    unread = [c for c in coverage if c.status is CoverageStatus.not_understood]
    if wrapped is not None and wrapped.first is not None:
        message = wrapped.first.facts.get("error")
        return Severity.unknown, [
            f"A torch.distributed backend failed at {wrapped.first.file.name}:{wrapped.first.number}"
            + (f" ({str(message)[:120]})" if message else "") + ", with a message the rules do not know: the "
            "exception class says that it failed, not how.", *conclusion[1:2]], (
            "The lines before it from NCCL or Gloo: rerun with NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL, or "
            "grep_logs preset=nccl on the same paths.")
    # A file read in part (the call's time ran out in it, a read failed, it was rotated under the scan) holds its
    # unread part's failure, if any, out of sight: not ok either.
    cut = [c for c in coverage if c.status is CoverageStatus.partial]
    if not unread and not cut:
        return Severity.ok, conclusion, None
    if not unread:
        return Severity.unknown, conclusion, (
            f"{cut[0].input} whole: the same call with a larger --timeout (or on that file alone), or grep_logs "
            "preset=errors on it, which reads faster.")
    first = unread[0]
    if len(unread) == len(coverage):
        lead = f"Nothing to judge: {first.input} is not a log the rules can read ({first.detail})."
    else:
        lead = (f"No failure found in the {len(coverage) - len(unread)} log(s) read, but {len(unread)} of "
                f"{len(coverage)} input(s) could not be judged ({first.input}: {first.detail}): a failure may be "
                "there.")
    return Severity.unknown, [lead, conclusion[-1]], (
        "The same call on every rank's log as text (or .gz): the job's own stdout/stderr per rank, e.g. torchrun "
        "--log-dir or the scheduler's output files.")
