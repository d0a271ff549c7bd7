"""Error lines judged by meaning, and network failures by mechanism (issue 31; data in sop/error_lines.toml).

- Error lines: a line printed at error level (Python logging's ERROR, glog's E1201, `level=error`, a JSON error
  body, `error:` at a line's start...) that no rule of log_rules.toml knows and that is not a traceback's final
  exception: its message goes through the exception taxonomy's message patterns (sop/exception_taxonomy.toml, the
  entries that need no exception type and no frame), so "KV cache exhausted" is the same failure whether a Python
  exception, a Rust server's ERROR line or an API's JSON body says it. An error line the taxonomy does not know is
  no finding (a server logs errors it recovers from), nor is one that says it retries. An API's error object (a JSON
  `"error": {... "message": ...}`, on one line or pretty-printed) is the exception: a message the taxonomy does not
  know is still a request the serving engine refused (`inference_api_error`); a message that starts with an
  exception's type names that exception. Records run together on one line (`ptxas error : ...   ptxas info : ...`)
  end the message where the next one starts.
- Network failures: the [[network]] rows (IB/RoCE work completions with an error status, TCP connections that fail
  while the process group is built) are rules tried right before `traceback`; they also see the lines another rule
  took first (NCCL's abort message that quotes the IB error as its "Last error"), and then the network failure is
  the cause: its finding comes first and a timeout after it in the same log says `after_network_error`.

`with_line_rules(rules)` adds both to log_rules.toml's rules; `LineReader` is fed every matched line in
`_scan_one`; `with_network` / `with_error_lines` add its hits to a file's; `network_before_timeout` marks the
findings. Every pattern is RE2 (linear); the taxonomy's are applied to one line of at most SITE_LINE_CHARS.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol

from tools.core.files import InputFile
from tools.core.ranks import rank_of_line
from tools.logs.exceptions import (
    COMMON_FACTS,
    TRACEBACK_RULE,
    RaisedException,
    add_named_groups,
    first_sentence,
    parse_exception,
    taxonomy,
)
from tools.logs.sites import SITE_LINE_CHARS, site_facts
from tools.logs.wraps import split_records

if TYPE_CHECKING:
    from tools.logs.diagnose import Rule, _Hit
    from tools.logs.exceptions import Entry
    from tools.logs.reader import MatchedLine

__all__ = ["ERROR_LINE_RULE", "LineReader", "error_line_message", "network_before_timeout", "with_line_rules"]

ERROR_LINE_RULE = "error_line"  # the evidence rule whose lines are read as error lines
_TIMEOUT_CATEGORY = "nccl_timeout"
_NETWORK_CATEGORY = "nccl_init_network"
_RETRY = re.compile(r"(?i)\bretry(?:ing)?\b|\bwill retry\b|\bretried\b|\bretrying\b|\battempt \d+\s*(?:/|of)")
# Clause boundaries inside a message: the failure the taxonomy matched is the clause it sits in and what follows.
_CLAUSE = re.compile(r"(?::|;|\|| - |\berror:)\s+")
_ENTRY_KINDS_SKIPPED = frozenset({"", "unclassified_error"})
# The logging call's site a logger prints before the message (Rust tracing with file and line, `span{..}:span: target:
# router/client/src/lib.rs:34: ...`; Go's log with Lshortfile, `main.go:12: ...`): the error line's location.
_MESSAGE_SOURCE = re.compile(r"^(?:[\w{}=:. \-]{0,200}?: )?"
                             r"(?P<location>[\w./\-]{1,300}\.(?:rs|go|py|cc|cpp|c|h|hpp|java|js|ts):\d+): ")
# A line that says which attempt it is (`Attempt 3/10 failed for index 88377: ...`) is a retry, whatever its message.
_ATTEMPT = re.compile(r"(?i)\battempt \d+\s*(?:/|of)\s*\d+")


@cache
def _table() -> dict[str, Any]:
    return tomllib.loads(resources.files("sop").joinpath("error_lines.toml").read_text("utf-8"))


@cache
def _network_ids() -> frozenset[str]:
    return frozenset(row["id"] for row in _table()["network"])


# A superset of every error-line form: each holds one of these (tests/tools/logs/test_error_lines.py checks it).
# Whole words only: `error_rate=0.09` and `errors=0` are on every line of some training logs (benchmarks/logs.py has
# them), and a first pass that takes them sends every line through the forms.
_ERROR_LINE_WORDS = (r"\b(?:ERROR|CRITICAL|FATAL|[Ee]rror|ERR|[Ff]atal|[Cc]ritical)\b|[EF]\d{3,4} \d\d:|\[[EF] |"
                     r'level=|"level|"severity|:\s(?:failed to|unable to|could not|cannot)\s'
                     r'|\d: [EF] [\w./]|\[[EF]\]|OP_REQUIRES failed|"message"\s*:')


def with_line_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rules` with the [[network]] rows right before the `traceback` rule and the error-line evidence rule last."""
    rows = [{"category": _NETWORK_CATEGORY, **row} for row in _table()["network"]]
    at = next((i for i, r in enumerate(rules) if r.get("id") == TRACEBACK_RULE), len(rules))
    error_line = {
        "id": ERROR_LINE_RULE, "category": "unclassified_error", "severity": "info", "evidence_only": True,
        "match": "(?:" + "|".join([*_table()["error_line"]["forms"], *_table()["error_line"]["api_body_forms"]]) + ")",
        "facts": [],
        # The first pass looks for the words every form holds, not for a level after every space (scan cost).
        "candidate": _ERROR_LINE_WORDS,
        "cause": "A line printed at error level.", "fix": "", "sop_branch": "triage",
    }
    return [*rules[:at], *rows, *rules[at:], error_line]


@cache
def _forms() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The error-level forms, and the API error bodies' (the last: a pretty-printed body's "message" line)."""
    from tools.logs.diagnose import _compile
    from tools.logs.prefixes import anchor_after_prefix

    table = _table()["error_line"]
    return (tuple(_compile(anchor_after_prefix(form)) for form in table["forms"]),
            tuple(_compile(anchor_after_prefix(form)) for form in table["api_body_forms"]))


_ERROR_OBJECT = re.compile(r'"error"\s*:\s*\{')  # the error object a pretty-printed body's "message" line is in
_OBJECT_LINES = 3


def _message_of(found: Any) -> str:
    value = found.groupdict().get("message") or found.groupdict().get(b"message") or b""
    return value.decode("utf-8", "replace").strip() if isinstance(value, bytes) else str(value).strip()


def error_line_message(line: bytes, before: Sequence[bytes] | None = None) -> str | None:
    """The message of an error-level line (the text after its level), or None when the line is not one. An API's
    error body counts; its pretty-printed "message" line only when `before` shows the "error" object it is in."""
    found = error_line_form(line, before)
    return found[0] if found is not None else None


def error_line_form(line: bytes, before: Sequence[bytes] | None = None) -> tuple[str, bool] | None:
    """(message, is an API's error body) of an error-level line, or None (see error_line_message)."""
    line = line[:SITE_LINE_CHARS].rstrip(b"\r\n")
    levels, bodies = _forms()
    for form in levels:
        found = form.search(line)
        if found is not None:
            return _message_of(found), False
    for index, form in enumerate(bodies):
        found = form.search(line)
        if found is None:
            continue
        pretty = index == len(bodies) - 1  # a line that is only `"message": "..."`, in an "error" object above it
        if pretty and (not _decode(line).lstrip().startswith('"message"')
                       or not any(_ERROR_OBJECT.search(_decode(b)) for b in (before or [])[-_OBJECT_LINES:])):
            return None
        return _message_of(found), True
    return None


@cache
def _line_entries() -> tuple[Entry, ...]:
    """The taxonomy's entries that judge a message alone: no exception type needed (or any type), no frame."""
    entries, _ = taxonomy()
    return tuple(e for e in entries if e.message is not None and e.frame is None
                 and (e.type is None or e.type.pattern == ".") and e.category not in _ENTRY_KINDS_SKIPPED)


def _clause(message: str, start: int) -> str:
    """The clause of `message` in which the taxonomy's match starts, to the end of its sentence."""
    begin = 0
    for boundary in _CLAUSE.finditer(message, 0, start + 1):
        if boundary.end() <= start:
            begin = boundary.end()
    return first_sentence(message[begin:]).strip(" \"'{}")


def _entry_facts(entry: Entry, message: str, context: Sequence[str]) -> dict[str, str | int]:
    """The entry's facts from the message, then (for names still missing) from the lines around it, nearest first."""
    facts: dict[str, str | int] = {}
    for source in (message, *context):
        for pattern in entry.facts:
            found = pattern.search(source)
            if found is not None:
                add_named_groups(found, facts)
    for pattern in COMMON_FACTS:  # an exit status, a rank named in the message
        found = pattern.search(message)
        if found is not None:
            add_named_groups(found, facts)
    for name, value in entry.sets.items():
        facts.setdefault(name, value)
    return facts


def _first_record(text: str, message: str) -> str:
    """`message` cut where the next of several records run together on the line starts."""
    records = split_records(text)
    if len(records) < 2:
        return message
    cut = message.find(records[1].strip())
    return message[:cut].rstrip() if cut > 0 else message


@cache
def _record_entries() -> tuple[Entry, ...]:
    entries, _ = taxonomy()
    return tuple(e for e in entries if e.record is not None)


@cache
def _api_entry() -> Entry:
    entries, _ = taxonomy()
    return next(e for e in entries if e.api_body)


@dataclass
class _ErrorLine:
    number: int
    text: bytes
    message: str
    before: list[bytes]
    after: list[bytes]
    api_body: bool = False  # an API's error body, not a line at error level


def _decode(raw: bytes) -> str:
    return raw[:SITE_LINE_CHARS].decode("utf-8", "replace").rstrip("\r\n")


@dataclass
class LineReader:
    """Fed every line the matcher found in one file, with what `classify` made of it."""

    _error_lines: list[_ErrorLine] = field(default_factory=list)
    _network: list[tuple[Rule, int, bytes, dict[str, Any]]] = field(default_factory=list)

    def feed(self, match: MatchedLine, classified: tuple[Rule, dict[str, Any]] | None) -> bool:
        """Read the line; True when it is only an error line (evidence for this module, not for the scan)."""
        from tools.logs.diagnose import extract_facts, load_rules

        rules, _ = load_rules()
        line = match.text.rstrip(b"\r\n")
        chosen = classified[0] if classified is not None else None
        for index in match.patterns:
            rule = rules[index]
            if rule.id in _network_ids() and rule is not chosen and rule.match.search(line) is not None:
                self._network.append((rule, match.number, match.text, extract_facts(rule, line)))
        if any(rules[i].id == ERROR_LINE_RULE for i in match.patterns):
            before = [t for _, t in match.before]
            form = error_line_form(match.text, before)
            if form is not None and form[0]:
                message = _first_record(_decode(match.text), form[0])
                self._error_lines.append(_ErrorLine(match.number, match.text, message, before,
                                                    [t for _, t in match.after], api_body=form[1]))
        return chosen is not None and chosen.id == ERROR_LINE_RULE

    def with_network(self, file: InputFile, hits: list[tuple[Rule, _Hit]]) -> list[tuple[Rule, _Hit]]:
        """`hits` with the network failures found on lines another rule took: on a line an nccl_init_network rule
        took, the row's facts join that hit; else a hit of its own, before the other hits of that line."""
        from tools.logs.diagnose import _Hit

        if not self._network:
            return hits
        added: list[tuple[Rule, _Hit]] = []
        for rule, number, text, facts in self._network:
            same = next((h for r, h in hits if h.number == number and r.category == rule.category
                         and not r.evidence_only), None)
            if same is not None:
                for name, value in facts.items():
                    same.facts.setdefault(name, value)
                continue
            facts = dict(facts)
            fact_rank = facts.pop("rank", None)
            line_rank = rank_of_line(text)
            rank = fact_rank if isinstance(fact_rank, int) else line_rank if line_rank is not None else file.rank
            added.append((rule, _Hit(file, number, rank, text, facts, through=number)))
        # Stable: the network hit goes before the other hits of its line (it is their cause).
        return sorted([*added, *hits], key=lambda pair: pair[1].number)

    def with_error_lines(self, file: InputFile, hits: list[tuple[Rule, _Hit]], raised: Sequence[RaisedException],
                         continued: frozenset[int] = frozenset()) -> list[tuple[Rule, _Hit]]:
        """`hits` with the error lines the taxonomy knows: not on a line a rule took (`continued`: the lines a rule
        read as a message's continuation, a retry loop's `Last error:`), not a traceback's lines, not one that retries,
        and not the same entry an exception of this file already reported."""
        from tools.logs.diagnose import _convert, _Hit
        from tools.logs.exceptions import _rule

        if not self._error_lines:
            return hits
        taken = {h.number for r, h in hits if r.id != ERROR_LINE_RULE} | continued
        spans = [(min([e.start, *(c.start for c in e.causes)]), e.number) for e in raised]
        reported = {r.id for r, _ in hits}
        added: list[tuple[Rule, _Hit]] = []
        for line in self._error_lines:
            if line.number in taken or any(start <= line.number <= end for start, end in spans):
                continue
            entry = next((e for e in _line_entries() if e.message is not None and e.message.search(line.message)),
                         None)
            raised_type = parse_exception(line.message) if line.api_body else None
            if entry is None and line.api_body:
                entry = _api_entry()  # a request the serving engine refused, for a reason the taxonomy does not know
            if entry is None:  # the component that logged it, by its tag (an inference engine's logger)
                entry = next((e for e in _record_entries() if e.record is not None
                              and e.record.search(_decode(line.text))), None)
                told = [*hits, *added]
                if entry is not None and entry.category in {r.category for r, _ in told}:
                    continue  # the engine's failure is already told, in words a rule or an entry knows
                if entry is not None and entry.category == "unclassified_error" and any(
                        r.level != "info" and not r.evidence_only and r.category != entry.category for r, _ in told):
                    continue  # a fatal record after a failure a rule knows is that failure's last word
            if entry is None:
                continue
            if (_RETRY.search(line.message) or _ATTEMPT.search(_decode(line.text))
                    or any(_RETRY.search(_decode(a)) for a in line.after[:2])):
                continue
            rule = _rule(entry, entry.severity)
            if rule.id in reported:
                continue  # the traceback's exception (or an earlier line) already says it
            found = entry.message.search(line.message) if entry.message is not None else None
            context = [_decode(b) for b in reversed(line.before[-4:])]
            raw_facts = _entry_facts(entry, line.message, [_decode(line.text), *context])
            facts: dict[str, Any] = {}
            for name, value in raw_facts.items():
                key, converted = _convert(name, str(value), frozenset({"requested"}))
                facts.setdefault(key, converted)
            if found is not None and "error" not in facts:  # an entry's own `error` group names the words
                facts["error"] = _clause(line.message, found.start())
            facts["message"] = first_sentence(line.message)
            if raised_type is not None and raised_type[1]:  # `ModelNotDeployedError: model=... does not support ...`
                facts["exception"] = raised_type[0]
                facts.setdefault("error", raised_type[1])
            facts.setdefault("error", line.message)
            source = _MESSAGE_SOURCE.match(line.message)
            if source is not None:
                facts.setdefault("location", source["location"])
            rank = facts.pop("rank", None)
            if not isinstance(rank, int):
                rank = rank_of_line(line.text)
            added.append((rule, _Hit(file, line.number, rank if rank is not None else file.rank, line.text, facts,
                                     site=site_facts(line.text, line.before, line.after), through=line.number)))
        if not added:
            return hits
        return sorted([*hits, *added], key=lambda pair: pair[1].number)


class _Finding(Protocol):
    @property
    def category(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def facts(self) -> dict[str, Any]: ...
    @property
    def first(self) -> Any: ...


def network_before_timeout(findings: Sequence[_Finding]) -> None:
    """A collective timeout in a log where a network failure (a [[network]] row's finding) came first, or on the
    same line, is its consequence: the timeout's finding says `after_network_error`; both stay."""
    network = [f for f in findings if f.rule in _network_ids() and f.severity != "info"]
    if not network:
        return
    for finding in findings:
        if finding.category != _TIMEOUT_CATEGORY:
            continue
        cause = next((n for n in network if n.first.file == finding.first.file
                      and n.first.line <= finding.first.line), None)
        if cause is not None:
            finding.facts["after_network_error"] = f"{cause.rule} at {cause.first.file}:{cause.first.line}"
