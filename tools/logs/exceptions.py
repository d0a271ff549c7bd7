"""A log's Python tracebacks, each reduced to its final exception, and that exception classified by the exception
taxonomy (sop/exception_taxonomy.toml), so that a new wording of a known failure still lands in its family and an
exception nobody knows is still reported (`unclassified_error`) instead of passing in silence.

What is read (issue 31; forms from tests/data/logs/round2/dev):
- a traceback: `Traceback (most recent call last):` and/or its `File "x", line N, in f` frames (pasted tracebacks
  often start mid-way), then the final `pkg.mod.Type: message` line; a traceback cut before its final line still
  names its exception in the innermost frame's `raise Type(` source line;
- bare final-exception lines pasted without a traceback (`RuntimeError: Expected to ...`);
- chains: "The above exception was the direct cause of the following exception", "During handling of the above
  exception, another exception occurred" (the earlier exceptions are the final one's causes), a DataLoader
  worker's "Caught X in DataLoader worker process N" and its "Original Traceback" (the worker's exception decides),
  BackendCompilerFailed's "backend='inductor' raised:" with the wrapped exception on the next line;
- Dynamo's "from user code:" frames: the user's own code, preferred for the location;
- handled tracebacks: after "Exception ignored in", logged at warning level, or followed by a retry: never serious.

The scan hands this module only the lines the `traceback` rule of sop/log_rules.toml matches (with their context),
so a 1 GiB log without tracebacks costs nothing here. Lines are short (SITE_LINE_CHARS) and every pattern is linear.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from tools.core.files import InputFile
from tools.core.ranks import rank_of_line
from tools.logs.sites import SITE_LINE_CHARS, defined_at, python_frame, site_facts

if TYPE_CHECKING:
    from tools.logs.diagnose import Rule, _Hit

__all__ = ["TRACEBACK_RULE", "Classified", "RaisedException", "TracebackReader", "add_named_groups",
           "classify_exception", "exception_hits", "taxonomy"]

TRACEBACK_RULE = "traceback"  # the evidence rule in sop/log_rules.toml whose lines are handed here

# A type: dotted names allowed; undotted ones must read as an exception class (RuntimeError, KeyboardInterrupt).
_TYPE = (r"(?:(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Failed|Failure|Iteration)"
         r"|OutOf[A-Z]\w*)|(?:[a-z_]\w*\.)+[A-Z]\w*)")
_EXCEPTION_LINE = re.compile(rf"(?:^|(?<=[\s:\]|)>]))(?P<type>{_TYPE})(?:: (?P<message>.*?)|:?)\s*$")
_SUFFIXED = re.compile(r"(?:Error|Exception|Exit|Interrupt|Warning|Failed|Failure|Iteration)$|(?:^|\.)OutOf[A-Z]\w*$")
# A log record at error level: its bare 'Triton: InductorError' names an exception without a message.
_ERROR_RECORD = re.compile(r"(?:^|[\s\[|])(?:ERROR|CRITICAL|FATAL|E\d{4} \d\d:)\b")
_NOT_RAISED = re.compile(r"(?:\b(?:raise|except|class|import|from|isinstance|catch|handle[sd]?)|[(,=])\s*$")
_HEADER = re.compile(r"(?P<original>Original )?Traceback \(most recent call last\)")
_CHAIN = re.compile(r"The above exception was the direct cause of the following exception|"
                    r"During handling of the above exception, another exception occurred")
_IGNORED = re.compile(r"Exception ignored in\b")
_USER_CODE = re.compile(r"^\W*from user code:")
_RAISE = re.compile(r"^\s*(?:\S.*?\s)?raise (?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\b")
_RAISED_WRAPPER = re.compile(r"raised:\s*$")
# A log record at warning level around the exception line (glog W1024, Python logging WARNING): handled.
_WARNING_RECORD = re.compile(r"(?:^|[\s\[|])(?:W\d{4} \d\d:|WARNING\b|WARN\b|\[W\b|\bwarn(?:ing)?\]?:)")
_RETRY = re.compile(r"(?i)\bretry(?:ing)?\b|\bwill retry\b|\bretried\b|\battempt \d+\s*(?:/|of)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")
_LIBRARY = re.compile(r"(?:site-packages|dist-packages|[/\\]lib[/\\]python\d[\d.]*[/\\]|^<frozen |^<string>|"
                      r"[/\\]torch[/\\](?:nn|autograd|utils|_dynamo|_inductor|distributed|cuda)[/\\]|"
                      r"^\.\./aten/|^/opt/pytorch/)")
# Python's own modules: under lib/pythonX.Y/ (or Windows' Lib/) but not in site-packages, frozen, or printed by its
# bare name (`File "subprocess.py"`, an embedded Python's).
_STDLIB = re.compile(r"(?:^|/)(?:lib/python\d[\d.]*|Lib)/(?!site-packages/|dist-packages/)[^/]+(?:/[^/]+)?$|^<frozen |"
                     r"^(?:subprocess|threading|runpy|functools|contextlib|selectors|socket|ssl|queue|pickle|shutil|os|"
                     r"importlib|asyncio|concurrent|multiprocessing)\b[\w/.]*\.py$")
# Facts every exception may carry, from its message.
_COMMON_FACTS = [re.compile(p) for p in (
    r'INTERNAL ASSERT FAILED at "(?P<loc_file>[^"]{1,300})":(?P<loc_line>\d+)',
    r"^\[?[Rr]ank[ :]?(?P<rank>\d+)\]?:",
)]
_GAP = 8  # frames further apart than this are two tracebacks
_CONTINUES = 6  # an exception line up to this many lines under the last frame ends that traceback
_FRAMES_AFTER = 16  # frames starting up to this many lines under a bare exception may be its own (ComfyUI)


def _text(raw: bytes) -> str:
    return raw[:SITE_LINE_CHARS].decode("utf-8", "replace").rstrip("\r\n")


def parse_exception(text: str) -> tuple[str, str] | None:
    """(type, message) when `text` is a final-exception line ('pkg.Type: message', 'AssertionError'), else None."""
    found = _EXCEPTION_LINE.search(text)
    if found is None or _NOT_RAISED.search(text[: found.start()]):
        return None
    return found["type"], (found["message"] or "").strip()


def first_sentence(message: str) -> str:
    return _SENTENCE_END.split(message, maxsplit=1)[0].strip()


@dataclass
class Frame:
    path: str
    line: int
    function: str | None
    source: str = ""


@dataclass
class RaisedException:
    """One final exception and what the log says around it."""

    type: str
    message: str
    number: int  # its line (or, when the final line was cut, the innermost frame's)
    text: bytes
    before: list[bytes] = field(default_factory=list)
    after: list[bytes] = field(default_factory=list)
    start: int = 0  # the traceback's first line
    frames: list[Frame] = field(default_factory=list)
    user_frames: list[Frame] = field(default_factory=list)  # Dynamo's "from user code:"
    causes: list[RaisedException] = field(default_factory=list)  # chained, nearest first
    wrapped: RaisedException | None = None  # "backend='inductor' raised:" + the next line
    handled: bool = False
    worker: bool = False  # the original exception of a DataLoader worker
    bare: bool = False  # no traceback printed with it

    @property
    def is_warning(self) -> bool:
        return self.type.endswith("Warning")

    def error(self) -> str:
        sentence = first_sentence(self.message)
        return f"{self.type}: {sentence}" if sentence else self.type


class TracebackReader:
    """Fed the traceback rule's lines in file order (with their context); `exceptions()` gives the final
    exceptions."""

    def __init__(self) -> None:
        self._done: list[RaisedException] = []
        self._frames: list[Frame] = []
        self._frames_at: tuple[int, int] = (0, 0)  # first and last frame line of the traceback being read
        self._last_frame_after: list[bytes] = []
        self._last_frame_before: list[bytes] = []
        self._header: int | None = None
        self._current: RaisedException | None = None  # the last final exception, for user-code frames and wraps
        self._user_code = False
        self._chain: RaisedException | None = None  # an exception whose traceback goes on below (chained)
        self._worker_wrapper: RaisedException | None = None
        self._ignored = False

    def feed(self, number: int, raw: bytes, before: list[bytes], after: list[bytes]) -> None:
        text = _text(raw)
        frame = python_frame(text)
        if frame is not None:
            self._frame(number, text, frame, before, after)
            return
        header = _HEADER.search(text)
        if header is not None:
            self._close_cut()
            if header["original"] and self._current is not None and self._current.number >= number - 2:
                self._worker_wrapper = self._current
            self._header = number
            self._user_code = False
            return
        if _CHAIN.search(text) is not None:
            self._close_cut()
            if self._current is not None:
                self._chain = self._current
            self._user_code = False
            return
        if _IGNORED.search(text) is not None:
            self._close_cut()
            self._ignored = True
            return
        if _USER_CODE.search(text) is not None:
            self._user_code = self._current is not None
            return
        parsed = parse_exception(text)
        if parsed is not None:
            self._exception(number, raw, parsed, before, after)

    def _frame(self, number: int, text: str, printed: tuple[str, int, str | None], before: list[bytes],
               after: list[bytes]) -> None:
        source = next((_text(a).strip() for a in after[:1]), "")
        frame = Frame(*printed, source)
        if self._user_code and self._current is not None and number - self._current.number <= 40:
            self._current.user_frames.append(frame)
            return
        if self._frames and number - self._frames_at[1] > _GAP:
            self._close_cut()
        if not self._frames:
            self._frames_at = (number, number)
        self._frames.append(frame)
        self._frames_at = (self._frames_at[0], number)
        self._last_frame_after, self._last_frame_before = after, [*before, text.encode()]

    def _exception(self, number: int, raw: bytes, parsed: tuple[str, str], before: list[bytes],
                   after: list[bytes]) -> None:
        kind, message = parsed
        current = self._current
        if (current is not None and current.wrapped is None and number - current.number <= 2
                and _RAISED_WRAPPER.search(current.message)):
            current.wrapped = RaisedException(kind, message, number, raw, before, after, start=number)
            return
        framed = bool(self._frames) and number - self._frames_at[1] <= _CONTINUES
        headed = self._header is not None and number - self._header <= 2 and not self._frames
        if not framed and not headed and not message and _ERROR_RECORD.search(_text(raw)) is None:
            return  # a bare type without a message ('type: XidCriticalError' in kubectl's output) is no exception
        start = self._frames_at[0] if framed else self._header if self._header is not None else number
        exc = RaisedException(kind, message, number, raw, before, after, start=min(start, number),
                              frames=self._frames if framed else [], bare=not framed and not headed)
        self._finish(exc)

    def _finish(self, exc: RaisedException) -> None:
        exc.handled = self._ignored
        if self._chain is not None and self._chain is not exc:
            exc.causes = [self._chain, *self._chain.causes]
            self._done.remove(self._chain)
        if self._worker_wrapper is not None:
            exc.worker = True
            if self._worker_wrapper in self._done:
                self._done.remove(self._worker_wrapper)
        self._done.append(exc)
        self._current = exc
        self._chain = self._worker_wrapper = None
        self._frames = []
        self._header = None
        self._ignored = False
        self._user_code = False

    def _close_cut(self) -> None:
        """A traceback whose final line is missing (cut in the paste): its innermost frame's `raise Type(` names
        the exception, with no message. Frames with no header and no final line of their own right under a bare
        exception are that exception's: ComfyUI's error report prints the exception first, then its frames."""
        if not self._frames:
            return
        current = self._current
        if (current is not None and current.bare and not current.frames and self._header is None
                and 0 < self._frames_at[0] - current.number <= _FRAMES_AFTER):
            current.frames, current.bare = self._frames, False
            self._frames = []
            return
        last = self._frames[-1]
        raised = _RAISE.search(last.source)
        if raised is not None:
            kind = raised["type"]
            number = self._frames_at[1]
            exc = RaisedException(kind, "", number, self._last_frame_after[0] if self._last_frame_after else b"",
                                  self._last_frame_before, self._last_frame_after[1:], start=self._frames_at[0],
                                  frames=self._frames)
            self._finish(exc)
        self._frames = []

    def exceptions(self) -> list[RaisedException]:
        self._close_cut()
        return list(self._done)


# ---------------------------------------------------------------- the taxonomy


@dataclass(frozen=True)
class Entry:
    id: str
    category: str
    severity: str
    type: re.Pattern[str] | None
    message: re.Pattern[str] | None
    frame: re.Pattern[str] | None
    facts: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    sop_branch: str

    def matches(self, exc: RaisedException) -> bool:
        if self.type is None and exc.is_warning:
            return False
        if self.type is not None and self.type.search(exc.type) is None:
            return False
        if self.message is not None and self.message.search(exc.message) is None:
            return False
        if self.frame is not None:
            raised_in = _raised_in(exc)
            return raised_in is not None and self.frame.search(raised_in.path) is not None
        return True


def _raised_in(exc: RaisedException) -> Frame | None:
    """The innermost frame outside Python's standard library: `subprocess.check_call` raising for Triton's build is
    Triton's failure, not subprocess's."""
    return next((f for f in reversed(exc.frames) if _STDLIB.search(f.path.replace("\\", "/")) is None), None)


def _entry(raw: dict[str, Any], id: str) -> Entry:
    def pattern(key: str) -> re.Pattern[str] | None:
        return re.compile(raw[key]) if key in raw else None

    return Entry(id=id, category=raw["category"], severity=raw["severity"], type=pattern("type"),
                 message=pattern("message"), frame=pattern("frame"),
                 facts=tuple(re.compile(f) for f in raw.get("facts", [])), cause=raw["cause"], fix=raw["fix"],
                 sop_branch=raw["sop_branch"])


@cache
def taxonomy() -> tuple[tuple[Entry, ...], Entry]:
    """The entries in order, and the `unclassified` one."""
    raw = tomllib.loads(resources.files("sop").joinpath("exception_taxonomy.toml").read_text("utf-8"))
    return tuple(_entry(e, e["id"]) for e in raw["entry"]), _entry(raw["unclassified"], "unclassified_error")


@dataclass
class Classified:
    entry: Entry
    exc: RaisedException  # the final exception (what the finding shows)
    decided_by: RaisedException  # the one whose type or message the entry matched
    severity: str
    facts: dict[str, str | int]


def _decider_order(exc: RaisedException) -> list[RaisedException]:
    order = [exc]
    if exc.wrapped is not None:
        order.append(exc.wrapped)
    return order + exc.causes


def _user_frame(exc: RaisedException) -> Frame | None:
    """The innermost user frame (Dynamo's "from user code:" first), else None."""
    for frames in (exc.user_frames, exc.frames):
        user = [f for f in frames if _LIBRARY.search(f.path.replace("\\", "/")) is None]
        if user:
            return user[-1]
    return None


def _location(exc: RaisedException) -> str | None:
    frame = _user_frame(exc)
    return f"{frame.path}:{frame.line}" if frame is not None else None


def _traceback_facts(exc: RaisedException) -> dict[str, str]:
    """What a traceback says of the failure a rule found inside it: the final `exception` and its `message`, the
    `location` (the innermost user frame) and its `function`, when it printed frames."""
    site: dict[str, str] = {"exception": exc.type}
    if exc.message:
        site["message"] = first_sentence(exc.message)
    frame = _user_frame(exc)
    if frame is not None:
        site["location"] = f"{frame.path}:{frame.line}"
        if frame.function:
            site["function"] = frame.function
    return site


def classify_exception(exc: RaisedException) -> Classified | None:
    """The entry that knows `exc` (or unclassified_error), its severity and facts; None when it is not a fault (a
    warning no entry names, a Ctrl-C, a handled unknown exception)."""
    entries, unclassified = taxonomy()
    decided = next(((e, d) for d in _decider_order(exc) for e in entries if e.matches(d)), None)
    if decided is None:
        if exc.is_warning or exc.handled or (exc.bare and not _SUFFIXED.search(exc.type)):
            return None
        entry, decider = unclassified, exc
    else:
        entry, decider = decided
    if not entry.category:
        return None
    severity = entry.severity
    around = [_text(a) for a in exc.after[:4]]
    logged_as_warning = _WARNING_RECORD.search(_text(exc.text)) is not None
    handled = exc.handled or any(_RETRY.search(t) for t in around)
    if (handled or logged_as_warning) and (entry is unclassified or (entry.type is None and entry.message is None)):
        return None  # known only by where it was raised (a frame entry): a handled one says nothing
    if handled:
        severity = "info"  # printed and handled ("Exception ignored in", a retry): shown, never serious
    elif logged_as_warning and severity == "crit":
        severity = "warn"  # logged at warning level: the program went on (Dynamo falls back to eager)
    return Classified(entry, exc, decider, severity, _facts(entry, exc, decider))


def add_named_groups(found: re.Match[str], facts: dict[str, str | int]) -> None:
    """A fact pattern's named groups into `facts` (numbers as ints); a name already there keeps its value."""
    for name, value in found.groupdict().items():
        if value is not None:
            facts.setdefault(name, int(value) if value.isdigit() else value.strip())


_BACKEND_NAMED = re.compile(r"\bbackend='(?P<backend>[\w.]+)' raised\b")
_INDUCTOR_FRAME = re.compile(r"[/\\]torch[/\\]_inductor[/\\]")


def _compile_backend(exc: RaisedException) -> str | None:
    """The torch.compile backend that failed: as Dynamo names it (`backend='inductor' raised:`, in the message or
    the line above), else inductor when the traceback runs through torch/_inductor."""
    for text in (exc.message, *(_text(b) for b in exc.before[-2:])):
        named = _BACKEND_NAMED.search(text)
        if named is not None:
            return named["backend"]
    if any(_INDUCTOR_FRAME.search(f.path) for f in exc.frames):
        return "inductor"
    return None


def _facts(entry: Entry, exc: RaisedException, decider: RaisedException) -> dict[str, str | int]:
    facts: dict[str, str | int] = {}
    for pattern in (*entry.facts, *_COMMON_FACTS):
        for source in (decider.message, exc.message):
            found = pattern.search(source)
            if found is None:
                continue
            add_named_groups(found, facts)
            break
    loc_file, loc_line = facts.pop("loc_file", None), facts.pop("loc_line", None)
    facts["exception"] = exc.type
    facts["message"] = first_sentence(exc.message)
    facts["error"] = decider.error() if decider is not exc and exc.wrapped is not decider else exc.error()
    if exc.wrapped is not None:
        facts["wrapped"] = exc.wrapped.error()
    if exc.causes:
        facts["caused_by"] = exc.causes[0].error()
    if entry.category == "compile" and "reason" not in facts:
        inner = exc.wrapped or (exc.causes[0] if exc.causes else None)
        raised = _RAISE.search(exc.frames[-1].source) if exc.frames else None
        if inner is not None:
            facts["reason"] = inner.error()
        elif _RAISED_WRAPPER.search(exc.message) and raised is not None:
            facts["reason"] = raised["type"]  # the wrapped exception's line was cut: the raise above names it
        else:
            facts["reason"] = first_sentence(exc.message) or exc.type
    if entry.category == "compile" and "backend" not in facts:
        backend = _compile_backend(exc)
        if backend is not None:
            facts["backend"] = backend
    site = site_facts(exc.text, exc.before, exc.after)
    if exc.user_frames and exc.user_frames[-1].function:  # Dynamo's internals raised it; the user's code is the site
        site["function"] = exc.user_frames[-1].function
    if exc.frames and not site.get("function") and exc.frames[-1].function:
        site["function"] = exc.frames[-1].function
    location = (f"{loc_file}:{loc_line}" if loc_file and loc_line else None) or defined_at(exc.after) or _location(exc)
    if location is not None:
        facts["location"] = location
    for name, value in site.items():
        facts.setdefault(name, value)
    if exc.worker:
        facts["dataloader_worker"] = "yes"
    return facts


# ---------------------------------------------------------------- into diagnose_logs' findings

_RULES: dict[tuple[str, str], Rule] = {}
_TEXT_FACTS = frozenset({"exception", "message", "error", "wrapped", "caused_by", "reason", "location", "function",
                         "dataloader_worker"})


def _rule(entry: Entry, severity: str) -> Rule:
    from tools.logs.diagnose import Rule

    key = (entry.id, severity)
    level: Literal["info", "warn", "crit"] = "crit" if severity == "crit" else "warn" if severity == "warn" else "info"
    if key not in _RULES:
        _RULES[key] = Rule(
            id=entry.id if entry.category == "unclassified_error" else f"exception_{entry.id}",
            category=entry.category, level=level, match=None, facts=(),
            size_facts=frozenset({"requested"}), group_by=("exception",), cross_rank=False, context_only=False,
            multi_node=False, evidence_only=False, lends=(), peak=None, sets={}, latest=False, continues=(),
            within=0, cause=entry.cause, fix=entry.fix, sop_branch=entry.sop_branch)
    return _RULES[key]


def exception_hits(file: InputFile, hits: list[tuple[Rule, _Hit]], raised: list[RaisedException]
                   ) -> list[tuple[Rule, _Hit]]:
    """`hits` (one file's, in line order) with the taxonomy's findings of the final exceptions added. A traceback in
    which a rule matched a line (a serious one, or any on its final line) is that rule's; `unclassified_error` only
    where nothing else serious was found in the file."""
    from tools.logs.diagnose import _convert, _Hit

    added: list[tuple[Rule, _Hit]] = []
    for exc in raised:
        start = min([exc.start, *(c.start for c in exc.causes)])
        owners = [h for r, h in hits
                  if h.number == exc.number or (r.level != "info" and start <= h.number <= exc.number + 3)]
        if owners:
            for hit in owners:  # the rule's; what the traceback says fills in what its lines did not
                for fact, text in _traceback_facts(exc).items():
                    hit.site.setdefault(fact, text)
            continue
        classified = classify_exception(exc)
        if classified is None:
            continue
        facts: dict[str, Any] = {}
        for name, value in classified.facts.items():  # the entry's numbers as numbers, sizes in bytes; texts as is
            key, converted = (name, value) if name in _TEXT_FACTS else _convert(name, str(value),
                                                                                 frozenset({"requested"}))
            facts.setdefault(key, converted)
        rank = facts.pop("rank", None)
        if not isinstance(rank, int):
            rank = rank_of_line(exc.text)
        hit = _Hit(file, exc.number, rank if rank is not None else file.rank, exc.text, facts, through=exc.number)
        added.append((_rule(classified.entry, classified.severity), hit))
    serious = any(r.level != "info" and not r.evidence_only and r.category != "unclassified_error"
                  for r, _ in [*hits, *added])
    if serious:
        added = [(r, h) for r, h in added if r.category != "unclassified_error"]
    return sorted([*hits, *added], key=lambda pair: pair[1].number) if added else hits
