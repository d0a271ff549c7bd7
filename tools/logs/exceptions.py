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
- handled tracebacks: after "Exception ignored in", logged at warning level, or followed by a retry: never serious;
- the other forms a traceback is printed in (round 8): IPython's (`TimeoutError   Traceback (most recent call last)`,
  frames `path.py in f(...)` with the line under a `--> N` arrow), a debugger's (VS Code / debugpy: `Exception has
  occurred: T`, the message, then the frames innermost first; pasted without its first line, an untyped message right
  above header-less frames), a C++ exception that ended the process (`terminate called after throwing an instance of
  'T'` and its `what():` message), a worker's exception re-raised with its traceback as the message (`ValueError:
  Traceback (most recent call last):`, PyTorch <= 1.1's DataLoader); records run together on one line (`OSError: x
  OSError: y`) are read one by one (tools/logs/wraps.py), and a DataLoader worker's wrapper whose original traceback
  is not below it takes the exception of the type it names printed beside it.

The scan hands this module only the lines the `traceback` rule of sop/log_rules.toml matches (with their context),
so a 1 GiB log without tracebacks costs nothing here. Lines are short (SITE_LINE_CHARS) and every pattern is linear.
"""

from __future__ import annotations

import bisect
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from tools.core.files import InputFile
from tools.core.ranks import rank_of_line
from tools.logs.oom import oom_facts
from tools.logs.sites import SITE_LINE_CHARS, defined_at, logger_site, python_frame, site_facts
from tools.logs.wraps import split_records

if TYPE_CHECKING:
    from tools.logs.diagnose import Rule, _Hit

__all__ = ["COMMON_FACTS", "ERROR_TEXT_CHARS", "TRACEBACK_RULE", "Classified", "CutTraceback", "RaisedException",
           "TracebackReader", "add_named_groups", "classify_exception", "exception_hits", "first_sentence",
           "lend_cut_tracebacks", "parse_exception",
           "taxonomy"]

TRACEBACK_RULE = "traceback"  # the evidence rule in sop/log_rules.toml whose lines are handed here

# A type: dotted names allowed; undotted ones must read as an exception class (RuntimeError, KeyboardInterrupt).
# A C extension's module-level exception class is often plain `error` (OpenCV's cv2.error, socket.error, zlib.error).
# Ray re-raises a task's exception as `ray.exceptions.RayTaskError(OutOfMemoryError)`: the wrapper and, in
# parentheses, the type the task raised (the failure; RaisedException.dotted_type reads that one).
_TYPE = (r"(?:(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Failed|Failure|Iteration)"
         r"|Exception|OutOf[A-Z]\w*)|(?:[a-z_]\w*\.)+(?:[A-Z]\w*|error))"  # Python's base `Exception` too
         r"(?:\((?:[A-Za-z_]\w*\.)*[A-Z]\w*\))?")
# A paste's markdown bold around the line (`**RuntimeError: Address already in use**`) is the reporter's, not the
# exception's: allowed before the type and taken off the message's end.
_EXCEPTION_LINE = re.compile(rf"(?:^|(?<=[\s:\]|)>*]))(?P<type>{_TYPE})(?:: (?P<message>.*?)|:?)\**\s*$")
# A C extension's module-level class is `error` (OpenCV's cv2.error, struct.error): as much an exception's name.
_CARRIED = re.compile(r"\((?P<type>[\w.]+)\)$")
_SUFFIXED = re.compile(r"(?:Error|Exception|Exit|Interrupt|Warning|Failed|Failure|Iteration)$|(?:^|\.)OutOf[A-Z]\w*$|"
                       r"[a-z0-9_]\.error$")
# A log record at error level: its bare 'Triton: InductorError' names an exception without a message.
_ERROR_RECORD = re.compile(r"(?:^|[\s\[|])(?:ERROR|CRITICAL|FATAL|E\d{4} \d\d:)\b")
# A record's level right before a dotted name: the name is the logger's (Java's and Python's `LEVEL logger: message`).
_LOGGER_LEVEL = re.compile(r"\b(?:WARN(?:ING)?|INFO|DEBUG|TRACE|NOTICE)\b[\s\]:|-]*$")
_NOT_RAISED = re.compile(r"(?:\b(?:raise|except|class|import|from|isinstance|catch|handle[sd]?)|[(,=])\s*$")
# TorchScript prints its own ("Traceback of TorchScript (most recent call last):"), frames in Python's form.
_HEADER = re.compile(r"(?P<original>Original )?Traceback (?:of TorchScript(?:, original code)? )?"
                     r"\(most recent call last\)")
_CHAIN = re.compile(r"The above exception was the direct cause of the following exception|"
                    r"During handling of the above exception, another exception occurred")
_IGNORED = re.compile(r"Exception ignored in\b")
_USER_CODE = re.compile(r"^\W*from user code:")
_RAISE = re.compile(r"^\s*(?:\S.*?\s)?raise (?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\b")
_RAISED_WRAPPER = re.compile(r"raised:\s*$")
# The other printed forms of a traceback (see the module's docstring).
# The header names the exception whatever its class is called (ONNX Runtime's `InvalidArgument`, `Fail`): the words
# `Traceback (most recent call last)` after it make it one.
_IPYTHON_HEADER = re.compile(r"^\W{0,3}(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\s{2,}Traceback \(most recent call last\)")
_IPYTHON_FRAME = re.compile(r"^(?P<path><ipython-input-[\w\-]+>|[^\s\"]{1,400}\.pyx?) in "
                            r"(?P<function>[\w<>.]+)(?:\(|\s*$)")
_IPYTHON_CELL = re.compile(r"^\W{0,3}Cell In\s?\[(?P<cell>\d+)\], line (?P<line>\d+)")
# IPython 8.0-8.4's frame of a cell: `Input In [25], in <cell line: 1>()`, its line under the `----> 1` arrow.
_IPYTHON_INPUT = re.compile(r"^\W{0,3}Input In \[(?P<cell>\d+)\], in (?P<function><cell line: \d+>|[^\s(]+)")
_IPYTHON_ARROW = re.compile(r"^-*> ?(?P<line>\d+)\b")
_DEBUGGER_HEADER = re.compile(rf"^\W{{0,3}}Exception has occurred: (?P<type>{_TYPE}|[A-Z]\w*)\s*$")
_CXX_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']{1,200})'")
_CXX_WHAT = re.compile(r"^\s*what\(\):\s+(?P<message>\S.*)")
_CXX_LOCATION = re.compile(r"^\s*\[\d\d:\d\d:\d\d\] (?P<location>[^\s:]+:\d+): ")  # MXNet/dmlc's `[10:44:35] x.h:359: `
_TRACEBACK_AS_MESSAGE = re.compile(rf"(?:^|(?<=[\s:\]|)>]))(?P<type>{_TYPE}): Traceback \(most recent call last\)")
_WORKER_WRAPPER = re.compile(r"\bCaught (?P<type>[\w.]+) in DataLoader worker process \d+")
# The data loaders' own fetch of a sample (PyTorch's, Paddle's, MXNet Gluon's; the pipelines that run the decoding and
# transforms themselves: FFCV's epoch iterator, webdataset, DALI's pipeline, Grain): a frame of it above the
# dataset's code says the exception was raised reading a sample, in a worker or, with num_workers=0, in the main
# process (FFCV's numba-compiled transforms fail inside numba, under its iterator: issue 31, round 13).
_SAMPLE_FETCH = re.compile(r"(?:^|[/\\])(?:torch[/\\]utils[/\\]data[/\\]_utils[/\\]fetch|"
                           r"paddle[/\\]io[/\\]dataloader[/\\]fetcher|mxnet[/\\]gluon[/\\]data[/\\]dataloader|"
                           r"ffcv[/\\]loader[/\\]epoch_iterator|webdataset[/\\]\w+|nvidia[/\\]dali[/\\]pipeline|"
                           r"grain[/\\]_src[/\\]python[/\\]\w+)\.py$")
# torch.multiprocessing.spawn's report of a child's traceback: its process index is the rank spawn gave it (issue 31).
_SPAWNED = re.compile(r"\bProcess (?P<index>\d+) terminated with the following error")
_STACK_DUMP = re.compile(r"most recent call (?:first|last)|^\s*(?:Thread|Current thread|Stack)\b")
# faulthandler's dump of a thread (py-spy's too): its frames run from the innermost out. The current thread's is where
# the process was when the signal came (`Fatal Python error: Segmentation fault` above the dump).
_THREAD_DUMP = re.compile(r"^\s*(?P<current>Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):")
_MESSAGE_LINE = re.compile(r"[A-Za-z]{3}")
_RULE_LINE = re.compile(r"[=\-*#~_+]{3,}")  # a banner's rule (`=====`), not a message
# A log record at warning level around the exception line (glog W1024, Python logging WARNING): handled.
_WARNING_RECORD = re.compile(r"(?:^|[\s\[|])(?:W\d{4} \d\d:|WARNING\b|WARN\b|\[W\b|\bwarn(?:ing)?\]?:)")
_RETRY = re.compile(r"(?i)\bretry(?:ing)?\b|\bwill retry\b|\bretried\b|\battempt \d+\s*(?:/|of)")
# A capability probe (xformers' `_is_triton_available`, `is_flash_attn_available`, `try_import_apex`): a printed
# traceback holds the frames from where it was caught down, so one whose outermost frame is such a probe was caught
# inside it; the probe's answer is "not available", and the program goes on without the feature.
_PROBE_FUNCTION = re.compile(r"^_?(?:is|has|check)_\w*(?:available|installed|supported)$|^_?try_import\w*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")
_BUG_REPORT = re.compile(r"(?i)\b(?:open|file|report|submit|raise) (?:an? |this )?(?:issue|bug)|\bplease report\b|"
                         r"\bshould never happen\b")
_LIBRARY = re.compile(r"(?:site-packages|dist-packages|[/\\]lib[/\\]python\d[\d.]*[/\\]|^<frozen |^<string>|"
                      r"[/\\]torch[/\\](?:nn|autograd|utils|_dynamo|_inductor|distributed|cuda)[/\\]|"
                      r"^\.\./aten/|^/opt/pytorch/)")
# A console script pip generated for a package's entry point: `<env>/bin/name` with no .py, Windows' `Scripts\name`.
_CONSOLE_SCRIPT = re.compile(r"[/\\](?:bin|Scripts)[/\\][\w.-]+(?<!\.py)$")
# Python's own modules: under lib/pythonX.Y/ (or Windows' Lib/) but not in site-packages, frozen, or printed by its
# bare name (`File "subprocess.py"`, an embedded Python's).
_STDLIB = re.compile(r"(?:^|/)(?:lib/python\d[\d.]*|Lib)/(?!site-packages/|dist-packages/)[^/]+(?:/[^/]+)?$|^<frozen |"
                     r"^(?:subprocess|threading|runpy|functools|contextlib|selectors|socket|ssl|queue|pickle|shutil|os|"
                     r"importlib|asyncio|concurrent|multiprocessing)\b[\w/.]*\.py$")
# Facts every exception may carry, from its message.
# The native source line a message names as where its check failed (loc_file, loc_line): torch's INTERNAL ASSERT,
# dmlc's check (DGL, MXNet, TVM, XGBoost: `[02:00:36] /src/rpc/rpc.cc:484: Check failed: ...`).
NATIVE_SITES = [re.compile(p) for p in (
    r'INTERNAL ASSERT FAILED at "(?P<loc_file>[^"]{1,300})":(?P<loc_line>\d+)',
    r"^\[\d\d:\d\d:\d\d\] (?P<loc_file>[^\s:]{1,300}):(?P<loc_line>\d+): ",
)]
COMMON_FACTS = [*NATIVE_SITES, *(re.compile(p) for p in (
    r"^\[?[Rr]ank[ :]?(?P<rank>\d+)\]?:",
    r"\bexit(?:ed with)? (?:status|code)[ :=]+(?P<exitcode>-?\d+)\b",  # a child the failing program ran
))]
# A failure's words kept as its `error` fact (an exception's whole message up to this long; a line's after its
# prefixes, diagnose.py); the line itself is in the finding's occurrence.
ERROR_TEXT_CHARS = 300
_GAP = 8  # frames further apart than this are two tracebacks
_CONTINUES = 6  # an exception line up to this many lines under the last frame ends that traceback
_FRAMES_AFTER = 16  # frames starting up to this many lines under a bare exception may be its own (ComfyUI)
# better_exceptions' and loguru's (diagnose=True) tracebacks print each frame's variables under its source line
# (`│    └ Conv2d(12, 24, ...)`, a tensor over several lines): a frame and the next (or the exception) are this many
# lines apart at most when the lines just above the next are such annotations.
_ANNOTATED_GAP = 60
_ANNOTATION = re.compile(r"^\s*(?:[│└├┌]|$)")


def _annotated(before: list[bytes]) -> bool:
    """The lines just above are a frame's variable annotations (better_exceptions, loguru), not the log going on."""
    last = [_text(b) for b in before[-4:]]
    return any(t.strip() for t in last) and all(_ANNOTATION.match(t) for t in last)
_MESSAGE_LINES = 3  # a debugger's or C++ what() message goes on over at most this many lines below its first
_OOM_LINES_BELOW = 2  # a TensorFlow OOM names the node and its device (GPU:0) on the lines under it
_ARROW_LINES = 12  # IPython prints up to this many source lines of context under a frame before its `--> N` arrow


@lru_cache(maxsize=4096)  # one str per distinct line: a log repeating a traceback decodes its lines once
def _text(raw: bytes) -> str:
    return raw[:SITE_LINE_CHARS].decode("utf-8", "replace").rstrip("\r\n")


def parse_exception(text: str) -> tuple[str, str] | None:
    """(type, message) when `text` is a final-exception line ('pkg.Type: message', 'AssertionError'), else None."""
    found = _EXCEPTION_LINE.search(text)
    if found is None or _NOT_RAISED.search(text[: found.start()]):
        return None
    if _SUFFIXED.search(found["type"]) is None and _LOGGER_LEVEL.search(text[: found.start()]):
        return None  # `WARN  org.deeplearning4j.nn.layers.ConvolutionLayer: ...`: a logger's name, not a class raised
    return found["type"], (found["message"] or "").strip()


def first_sentence(message: str) -> str:
    return _SENTENCE_END.split(message, maxsplit=1)[0].strip()


def _whole_sentences(message: str, limit: int) -> str:
    """`message`'s sentences that fit in `limit` characters (at least the first), without those that only ask for a
    bug report ("This should never happen! Please open an issue on Github."): they say nothing of the failure."""
    sentences = _SENTENCE_END.split(message)
    kept = sentences[0]
    for sentence in sentences[1:]:
        if _BUG_REPORT.search(sentence) is not None:
            continue
        if len(kept) + 1 + len(sentence) > limit:
            break
        kept = f"{kept} {sentence}"
    return kept[:limit]


def _ipython_frame(text: str, after: list[bytes]) -> tuple[str, int, str | None] | None:
    """(path, line, function) of an IPython frame: `x.py in f(...)` (the line under its `--> N` arrow) or IPython 8's
    `Cell In[5], line 2`."""
    cell = _IPYTHON_CELL.search(text)
    if cell is not None:
        return f"Cell In[{cell['cell']}]", int(cell["line"]), None
    found = _IPYTHON_FRAME.search(text)
    cell_input = _IPYTHON_INPUT.search(text) if found is None else None
    if found is None and cell_input is None:
        return None
    for raw in after[:_ARROW_LINES]:
        arrow = _IPYTHON_ARROW.search(_text(raw))
        if arrow is not None and found is not None:
            return found["path"], int(arrow["line"]), found["function"]
        if arrow is not None and cell_input is not None:
            return f"Input In [{cell_input['cell']}]", int(arrow["line"]), cell_input["function"]
    return None


def _message_lines(after: list[bytes]) -> list[str]:
    """The lines a message goes on over, below its first: up to a blank line, a frame or a header."""
    lines: list[str] = []
    for raw in after[:_MESSAGE_LINES]:
        text = _text(raw)
        if not text.strip() or python_frame(text) is not None or _HEADER.search(text) or _CHAIN.search(text):
            break
        lines.append(text)
    return lines


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
    innermost_first: bool = False  # a debugger's: the frames printed below it run from the innermost out
    spawned_index: int | None = None  # torch.multiprocessing.spawn's "Process N terminated with the following error"

    @property
    def is_warning(self) -> bool:
        return self.type.endswith("Warning")

    @property
    def fetching_sample(self) -> bool:
        """Raised while a data loader fetched a sample: a worker's original exception, or, with num_workers=0, a
        traceback in the main process that runs through the loader's fetch (its frames above the dataset's code), or
        one through a user dataset's `__getitem__` (a paste that kept only the frames of the user's code)."""
        return self.worker or any(_SAMPLE_FETCH.search(f.path) or (
            f.function == "__getitem__" and _LIBRARY.search(f.path.replace("\\", "/")) is None) for f in self.frames)

    @cached_property
    def matched_message(self) -> str:
        """The message the taxonomy reads: a message that ends in a colon introduces the value printed below it
        (torch.distributions' "found invalid values:" and the tensor of nan under it), so those lines are its end.
        Read once: every taxonomy entry matches against it (classification happens after the log was read)."""
        if not self.message.rstrip().endswith(":") or not self.after:
            return self.message
        return " ".join([self.message, *(line.strip() for line in _message_lines(self.after))])

    @property
    def dotted_type(self) -> str:
        """The type with C++'s `::` read as Python's `.` (`c10::OutOfMemoryError`), for the taxonomy's patterns; of a
        wrapper that names the type it carries (Ray's `RayTaskError(OutOfMemoryError)`), the carried one."""
        carried = _CARRIED.search(self.type)
        return (carried["type"] if carried is not None else self.type).replace("::", ".")

    def error(self) -> str:
        """`Type: message`: the whole message when it is short (a second sentence often says why: "Your Tesla T4 GPU
        has compute capability 7.5."), else the sentences that fit in ERROR_TEXT_CHARS."""
        text = _whole_sentences(self.message.strip(), ERROR_TEXT_CHARS)
        if not self.type:
            return text
        return f"{self.type}: {text}" if text else self.type


@dataclass
class CutTraceback:
    """A traceback cut before its final line, whose frames name no exception (no `raise Type(` innermost): no
    exception of its own, but where a failure a rule found right above or inside it surfaced (issue 31, round 9: an
    NCCL WARN, then the rank's traceback cut at the paste's edge)."""

    start: int  # its header's line, else its first frame's
    end: int  # its last frame's line
    frames: list[Frame]  # in Python's order, the innermost last
    rank: int | None  # the launcher's prefix on its lines (`[rank9]:`)
    # How far above its start the failure it belongs to may be: a faulthandler dump prints every other thread's stack
    # between the crash line and the current thread's.
    lead: int = 8  # a failure's line up to this many lines above a cut traceback's first line is where it surfaced
    other_thread: bool = False  # a faulthandler dump of a thread that was not the one running: not the failure's


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
        self._chain_headed = False  # the chained traceback's header was read: a second header starts another failure
        self._worker_wrapper: RaisedException | None = None
        self._ignored = False
        self._header_type: str | None = None  # IPython's header names the exception before its frames
        self._first_frame_before: list[bytes] = []
        self._skip_until = 0  # the message lines of a debugger's or C++ exception, read with its first line
        self._cut: list[CutTraceback] = []  # frames whose exception no line names (see CutTraceback)
        self._spawned_index: int | None = None  # the child process whose traceback is being read (_SPAWNED)
        self._frames_rank: int | None = None  # the launcher's rank prefix on the current traceback's first frame

    def feed(self, number: int, raw: bytes, before: list[bytes], after: list[bytes]) -> None:
        text = _text(raw)
        frame = python_frame(text) or _ipython_frame(text, after)
        if frame is not None:
            self._frame(number, text, frame, before, after)
            return
        if number <= self._skip_until:
            return  # a line of a message already read with its exception
        if self._foreign_forms(number, raw, text, before, after):
            return
        header = _HEADER.search(text)
        if header is not None:
            self._close_cut()
            if self._chain is not None:
                # The traceback the chain marker introduced was cut before its final line: this header is the next
                # failure's, not chained to it (a log repeating a cut chain chained every copy to the one before).
                if self._chain_headed:
                    self._chain = None
                self._chain_headed = self._chain is not None
            if header["original"] and self._current is not None and (
                    self._current.number >= number - 2 or _WORKER_WRAPPER.search(self._current.message)):
                self._worker_wrapper = self._current
            self._header = number
            spawned = next((_SPAWNED.search(_text(b)) for b in before[-1:]), None)
            self._spawned_index = int(spawned["index"]) if spawned is not None else None
            ipython = _IPYTHON_HEADER.search(text)
            self._header_type = ipython["type"] if ipython is not None else None
            self._user_code = False
            return
        if _CHAIN.search(text) is not None:
            self._close_cut()
            if self._current is not None:
                self._chain = self._current
                self._chain_headed = False
            self._user_code = False
            return
        if _IGNORED.search(text) is not None:
            self._close_cut()
            self._ignored = True
            return
        if _USER_CODE.search(text) is not None:
            self._user_code = self._current is not None
            return
        records = split_records(text)
        for record in records:
            parsed = parse_exception(record)
            if parsed is not None:
                self._exception(number, record.encode() if len(records) > 1 else raw, parsed, before, after)

    def _foreign_forms(self, number: int, raw: bytes, text: str, before: list[bytes], after: list[bytes]) -> bool:
        """A debugger's header, a C++ exception that ended the process, or an exception whose message is a worker's
        traceback: read here (True), else False."""
        debugger = _DEBUGGER_HEADER.search(text)
        cxx = _CXX_TERMINATE.search(text) if debugger is None else None
        if debugger is not None or cxx is not None:
            self._close_cut()
            skipped = 0  # lines under the header that belong to it (the message, and C++'s what() line)
            if debugger is not None:
                kind, lines = debugger["type"], _message_lines(after)
                skipped = len(lines)
            else:
                assert cxx is not None
                kind, lines = cxx["type"], []
                what = next((i for i, a in enumerate(after[:2]) if _CXX_WHAT.search(_text(a))), None)
                if what is not None:
                    first = _CXX_WHAT.search(_text(after[what]))
                    assert first is not None
                    what_text = first["message"]
                    while (site := _CXX_LOCATION.match(what_text)) is not None:  # dmlc's `[time] file:N: ` prefixes
                        what_text = what_text[site.end():]
                    lines = [what_text, *_message_lines(after[what + 1:])]
                    skipped = what + len(lines)
            message = " ".join(line.strip() for line in lines)
            exc = RaisedException(kind, message, number, raw, before, after, start=number, bare=True,
                                  innermost_first=debugger is not None)
            self._skip_until = number + skipped
            self._finish(exc)
            return True
        as_message = _TRACEBACK_AS_MESSAGE.search(text)
        if as_message is not None:
            # `ValueError: Traceback (most recent call last):`: the worker's traceback follows as the message, and its
            # final line (when printed) is the exception that decides.
            self._exception(number, raw, (as_message["type"], ""), before, after)
            if self._current is not None and self._current.number == number:
                self._worker_wrapper = self._current
                self._header = number
            return True
        return False

    def _frame(self, number: int, text: str, printed: tuple[str, int, str | None], before: list[bytes],
               after: list[bytes]) -> None:
        source = next((_text(a).strip() for a in after[:1]), "")
        frame = Frame(*printed, source)
        if self._user_code and self._current is not None and number - self._current.number <= 40:
            self._current.user_frames.append(frame)
            return
        gap = number - self._frames_at[1]
        if self._frames and ((gap > _GAP and not (gap <= _ANNOTATED_GAP and _annotated(before)))
                             or (before and _THREAD_DUMP.search(_text(before[-1])) is not None)):
            self._close_cut()  # a gap, or the next thread of a faulthandler dump: another stack
        if not self._frames:
            self._frames_at = (number, number)
            self._first_frame_before = before
            self._frames_rank = rank_of_line(text.encode())
        self._frames.append(frame)
        self._frames_at = (self._frames_at[0], number)
        self._last_frame_after, self._last_frame_before = after, [*before, text.encode()]

    def _exception(self, number: int, raw: bytes, parsed: tuple[str, str], before: list[bytes],
                   after: list[bytes]) -> None:
        kind, message = parsed
        if message and _RULE_LINE.fullmatch(message.strip()):
            message = ""  # a rule under the type (torchrun's `ChildFailedError:` and its `=====` banner): no words
        current = self._current
        if (current is not None and current.wrapped is None and number - current.number <= 2
                and _RAISED_WRAPPER.search(current.message)):
            current.wrapped = RaisedException(kind, message, number, raw, before, after, start=number)
            return
        gap = number - self._frames_at[1]
        framed = bool(self._frames) and (gap <= _CONTINUES or (gap <= _ANNOTATED_GAP and _annotated(before)))
        headed = self._header is not None and number - self._header <= 2 and not self._frames
        below = _message_lines(after) if not message and _text(raw).rstrip("\r\n").endswith(": ") else []
        if below and not _RULE_LINE.fullmatch(below[0].strip()):
            # `RuntimeError: ` and the message on the lines below it, as TorchScript and torch.jit's tracer print
            # theirs (`could not export python function call _DCNv2. ...`; issue 31, round 17). Its first line: the
            # tracer's call stack follows it.
            message = below[0].strip()
        if not framed and not headed and not message and _ERROR_RECORD.search(_text(raw)) is None:
            return  # a bare type without a message ('type: XidCriticalError' in kubectl's output) is no exception
        start = self._frames_at[0] if framed else self._header if self._header is not None else number
        exc = RaisedException(kind, message, number, raw, before, after, start=min(start, number),
                              frames=self._frames if framed else [], bare=not framed and not headed)
        exc.worker = _WORKER_WRAPPER.search(message) is not None  # "Caught X in DataLoader worker process N"
        self._finish(exc)

    def _finish(self, exc: RaisedException) -> None:
        exc.handled = self._ignored
        if exc.spawned_index is None:
            exc.spawned_index = self._spawned_index
        self._spawned_index = None
        if self._chain is not None and self._chain is not exc:
            # The nearest causes are the ones that say why; a chain of hundreds (a retry loop re-raising) kept whole
            # would grow each exception with every one before it.
            exc.causes = [self._chain, *self._chain.causes][:_CAUSES_KEPT]
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
        self._header_type = None

    def _close_cut(self) -> None:
        """A traceback whose final line is missing (cut in the paste): its innermost frame's `raise Type(` names
        the exception (or IPython's header did), with no message. Frames with no header and no final line of their
        own right under a bare exception are that exception's: ComfyUI's error report prints the exception first, then
        its frames; a debugger prints them innermost first. Frames after a chain marker whose final line was cut show
        where the chained exception was handled: they are its, when it has no user frame of its own. An untyped line
        right above header-less frames is the message of a debugger's report pasted without its first line."""
        if not self._frames:
            return
        frames, self._frames = self._frames, []
        current = self._current
        if (current is not None and current.bare and not current.frames and self._header is None
                and 0 < self._frames_at[0] - current.number <= _FRAMES_AFTER):
            current.frames = frames[::-1] if current.innermost_first else frames
            current.bare = False
            return
        wrapper = self._worker_wrapper
        if wrapper is not None and self._header is not None and (
                not wrapper.frames or any(_LIBRARY.search(f.path.replace("\\", "/")) is None for f in frames)):
            # A worker's "Original Traceback" cut before its final line: the wrapper names the type, and these frames
            # are where the worker raised it (the dataset's __getitem__), nearer the fault than the main process's.
            wrapper.frames = frames
            wrapper.bare = False
            self._worker_wrapper = None
            return
        raised = _RAISE.search(frames[-1].source)
        kind = raised["type"] if raised is not None else self._header_type
        if kind is not None:
            number = self._frames_at[1]
            exc = RaisedException(kind, "", number, self._last_frame_after[0] if self._last_frame_after else b"",
                                  self._last_frame_before, self._last_frame_after[1:], start=self._frames_at[0],
                                  frames=frames)
            self._finish(exc)
            return
        chained = self._chain
        if chained is not None and chained is current and _user_frame(chained) is None:
            chained.frames = [*chained.frames, *frames]
            return
        above = _text(self._first_frame_before[-1]) if self._first_frame_before else ""
        if (self._header is None and len(frames) >= 2 and _MESSAGE_LINE.search(above) and not above[:1].isspace()
                and not above.rstrip().endswith(":")  # a header of the frames ("Traceback of forward call ...:")
                and _STACK_DUMP.search(above) is None and parse_exception(above) is None):
            number = self._frames_at[0] - 1
            self._finish(RaisedException("", above.strip(), number, above.encode(), self._first_frame_before[:-1],
                                         [], start=number, frames=frames[::-1], innermost_first=True))
            return
        start = self._header if self._header is not None else self._frames_at[0]
        dump = _THREAD_DUMP.search(above)
        if dump is not None:  # innermost first: as Python prints them, for the innermost user frame
            self._cut.append(CutTraceback(start - 1, self._frames_at[1], frames[::-1], self._frames_rank,
                                          lead=_THREAD_DUMP_LEAD, other_thread=dump["current"] == "Thread"))
            return
        self._cut.append(CutTraceback(start, self._frames_at[1], frames, self._frames_rank))

    def cut_tracebacks(self) -> list[CutTraceback]:
        """The tracebacks cut before any line names their exception (call after `exceptions()`)."""
        return list(self._cut)

    def exceptions(self) -> list[RaisedException]:
        self._close_cut()
        self._merge_worker_originals()
        return list(self._done)

    def _merge_worker_originals(self) -> None:
        """A DataLoader worker's wrapper ("Caught X in DataLoader worker process N") whose original traceback gave no
        final line takes the exception of type X printed beside it (the same or the next line): its message is the
        worker's, the wrapper's frames show where the main process met it."""
        for wrapper in [e for e in self._done if e.worker and _WORKER_WRAPPER.search(e.message)]:
            named = _WORKER_WRAPPER.search(wrapper.message)
            assert named is not None
            original = next((e for e in self._done if e is not wrapper and abs(e.number - wrapper.number) <= 1
                             and e.type.rsplit(".", 1)[-1] == named["type"].rsplit(".", 1)[-1]), None)
            if original is not None:
                original.frames = original.frames or wrapper.frames
                original.worker, original.bare = True, False
                self._done.remove(wrapper)


# ---------------------------------------------------------------- the taxonomy


@dataclass(frozen=True)
class Entry:
    id: str
    category: str
    severity: str
    type: re.Pattern[str] | None
    message: re.Pattern[str] | None
    frame: re.Pattern[str] | None
    through: re.Pattern[str] | None  # searched in every frame's path: the call went through that machinery
    facts: tuple[re.Pattern[str], ...]
    sets: dict[str, str]  # facts the entry states by what it is (backend = "TensorRT")
    worker: bool  # matches only an exception raised in a DataLoader worker
    api_body: bool  # an API's error body the taxonomy does not know (tools/logs/lines.py): never an exception's
    # An error line's own text (its logger's tag) that names the component which failed, for an error line no message
    # entry knows (tools/logs/lines.py): never an exception's.
    record: re.Pattern[str] | None
    cause: str
    fix: str
    sop_branch: str

    def matches(self, exc: RaisedException) -> bool:
        if self.api_body or self.record is not None or (self.type is None and exc.is_warning):
            return False
        if self.worker and not exc.fetching_sample:
            return False
        if self.type is not None and self.type.search(exc.dotted_type) is None:
            return False
        if self.message is not None and self.message.search(exc.matched_message) is None:
            return False
        if self.through is not None and not any(self.through.search(f.path) for f in exc.frames):
            return False
        if self.frame is not None:
            raised_in = _raised_in(exc)
            return raised_in is not None and self.frame.search(raised_in.path) is not None
        return True


def _innermost_last(frames: list[Frame]) -> list[Frame]:
    """`frames` in Python's order, the innermost last. A `<module>` frame is always a traceback's outermost: frames
    that end with one (and do not start with one) were pasted innermost first (a debugger's order, a paste that put the
    failing call first), issue 31 round 9. Except in an import: an imported module's `<module>` frame is the innermost,
    entered from the import machinery (`<frozen importlib._bootstrap>`) or from another module's `<module>`."""
    if len(frames) > 1 and frames[-1].function == "<module>" and frames[0].function != "<module>" and not (
            frames[-2].function == "<module>" or "importlib" in frames[-2].path):
        return frames[::-1]
    return frames


def _raised_in(exc: RaisedException) -> Frame | None:
    """The innermost frame outside Python's standard library: `subprocess.check_call` raising for Triton's build is
    Triton's failure, not subprocess's."""
    return next((f for f in reversed(_innermost_last(exc.frames))
                 if _STDLIB.search(f.path.replace("\\", "/")) is None), None)


def _entry(raw: dict[str, Any], id: str) -> Entry:
    def pattern(key: str) -> re.Pattern[str] | None:
        return re.compile(raw[key]) if key in raw else None

    return Entry(id=id, category=raw["category"], severity=raw["severity"], type=pattern("type"),
                 message=pattern("message"), frame=pattern("frame"), through=pattern("through"),
                 facts=tuple(re.compile(f) for f in raw.get("facts", [])), sets=dict(raw.get("sets", {})),
                 worker=bool(raw.get("worker", False)), api_body=bool(raw.get("api_body", False)),
                 record=pattern("record"), cause=raw["cause"], fix=raw["fix"],
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
    """The innermost user frame (Dynamo's "from user code:" first), else None. A console script's shim
    (`<env>/bin/dpgen`, `sys.exit(main())`) is pip's wrapper around the package's entry point, not the user's code."""
    for frames in (exc.user_frames, _innermost_last(exc.frames)):
        user = [f for f in frames if _LIBRARY.search(f.path.replace("\\", "/")) is None
                and _CONSOLE_SCRIPT.search(f.path.replace("\\", "/")) is None]
        if user:
            return user[-1]
    return None


def _location(exc: RaisedException) -> str | None:
    frame = _user_frame(exc)
    return f"{frame.path}:{frame.line}" if frame is not None else None


def _traceback_facts(exc: RaisedException) -> dict[str, str]:
    """What a traceback says of the failure a rule found inside it: the final `exception` and its `message`, the
    `location` (the innermost user frame) and its `function`, when it printed frames."""
    site: dict[str, str] = {"exception": exc.type} if exc.type else {}
    if exc.message:
        site["message"] = first_sentence(exc.message)
    # Every frame a library's (a paste that kept only the library's part): where it was raised is still the place to
    # look, after whatever the rule's own line and the lines around it said.
    frame = _user_frame(exc) or _raised_in(exc)
    native = _native_site(exc.message)
    if native is not None:
        site["location"] = native
    elif frame is not None:
        site["location"] = f"{frame.path}:{frame.line}"
    if frame is not None and frame.function:
        site["function"] = frame.function
    return site


def _native_site(message: str) -> str | None:
    """The C++ source line an exception's message names as where its check failed (torch's INTERNAL ASSERT, dmlc's
    `[time] x.cc:484: Check failed`): nearer the fault than any Python frame."""
    for pattern in NATIVE_SITES:
        found = pattern.search(message)
        if found is not None:
            return f"{found['loc_file']}:{found['loc_line']}"
    return None


_RESTATED_LEAD = 8  # an error line at most this many lines above a traceback that restates it
_RESTATED_CHARS = 40  # the exception message's first characters that must be on that line


def _restated(exc: RaisedException, start: int, hits: Sequence[tuple[Rule, Any]], by_line: Sequence[int],
              lines: Sequence[int]) -> list[Any]:
    """The serious hits just above the exception's traceback whose line its message restates: a runtime that logs
    its error, then raises it with the same words (ONNX Runtime's `[E:onnxruntime:...] Non-zero status code returned
    while running Cast node ... CUDA error ...`, then `Fail: [ONNXRuntimeError] : 1 : FAIL : Non-zero status code
    returned while running Cast node.`): one failure, the line's, which says more."""
    said = " ".join(re.sub(r"^\[[^\]]*\]\s*(?::\s*\d+\s*:\s*\w+\s*:\s*)?", "", exc.message).split())
    said = said[:_RESTATED_CHARS]
    if len(said) < _RESTATED_CHARS // 2:
        return []
    above = by_line[bisect.bisect_left(lines, start - _RESTATED_LEAD):bisect.bisect_left(lines, start)]
    return [h for r, h in (hits[i] for i in above)
            if r.level != "info" and said in " ".join(_text(h.text).split())]


def _user_location_over_library_frame(site: dict[str, str], exc: RaisedException) -> None:
    """A rule's line read its `location` from the frame right above it (sites.py); when that frame is a library's
    (torch's DataLoader signal handler, autograd) and the traceback has user code, the location is the user's frame
    (issue 31: where the user's code called into the failure). The `function` stays the innermost frame's: the
    call that failed (`_cuda_synchronize`), as labels and the contract name it."""
    printed = site.get("location")
    if printed is None:
        return
    innermost = next((f for f in reversed(_innermost_last(exc.frames)) if f"{f.path}:{f.line}" == printed), None)
    if innermost is None or _LIBRARY.search(innermost.path.replace("\\", "/")) is None:
        return  # the line's own site (a C++ file:line), or a user frame already
    user = _location(exc)
    if user is not None:
        site["location"] = user


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
    probe = bool(exc.frames) and _PROBE_FUNCTION.match(exc.frames[0].function or "") is not None
    handled = exc.handled or probe or any(_RETRY.search(t) for t in around)
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
    for pattern in (*entry.facts, *COMMON_FACTS):
        for source in (decider.message, exc.message):
            found = pattern.search(source)
            if found is None:
                continue
            add_named_groups(found, facts)
            break
    loc_file, loc_line = facts.pop("loc_file", None), facts.pop("loc_line", None)
    for name, value in entry.sets.items():
        facts.setdefault(name, value)
    if exc.type:  # a debugger's report pasted without its first line names no type
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
    # Every frame a library's (a paste that kept only the library's part, TorchScript's traceback of a compiled
    # extension): where it was raised is still the place to look, as in a rule's traceback facts.
    location = ((f"{loc_file}:{loc_line}" if loc_file and loc_line else None) or defined_at(exc.after)
                or _location(exc))
    if location is None and (raised_in := _raised_in(exc)) is not None:
        location = f"{raised_in.path}:{raised_in.line}"
    if location is not None:
        facts["location"] = location
    for name, value in site.items():
        facts.setdefault(name, value)
    if exc.worker:
        facts["dataloader_worker"] = "yes"
    if entry.category in _DISTRIBUTED_CATEGORIES:
        for name, value in (_distributed_call(decider) or _distributed_call(exc)).items():
            facts.setdefault(name, value)
    return facts


_DISTRIBUTED_CATEGORIES = frozenset({"nccl_init_network", "nccl_timeout", "collective_mismatch"})
_DISTRIBUTED_CALL = re.compile(r"\b(?:dist|distributed|torch\.distributed|c10d)\.(?P<op>[a-z_]+)\(")
_BACKEND_ARGUMENT = re.compile(r"\bbackend\s*=\s*['\"](?P<backend>\w+)['\"]")


def _distributed_call(exc: RaisedException) -> dict[str, str]:
    """The torch.distributed call the user's code made where a distributed failure was raised: its name (`op`,
    `init_process_group`, `all_reduce`, `barrier`) and the backend it asked for, from the source line under the
    innermost frame that makes one (issue 31, round 11: `dist.init_process_group(backend='nccl', ...)`)."""
    for frame in reversed(_innermost_last(exc.frames)):
        call = _DISTRIBUTED_CALL.search(frame.source)
        if call is None:
            continue
        said = {"op": call["op"]}
        backend = _BACKEND_ARGUMENT.search(frame.source)
        if backend is not None:
            said["backend"] = backend["backend"]
        return said
    return {}


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


def _rank_near(exc: RaisedException) -> int | None:
    """The rank the launcher prefixed the exception's line with, else the lines right around it (a paste that kept
    the prefix on the traceback's lines but not on the message's)."""
    for line in (exc.text, *exc.after[:2], *exc.before[-1:]):
        rank = rank_of_line(line)
        if rank is not None:
            return rank
    return exc.spawned_index


def exception_hits(file: InputFile, hits: list[tuple[Rule, _Hit]], raised: list[RaisedException]
                   ) -> list[tuple[Rule, _Hit]]:
    """`hits` (one file's, in line order) with the taxonomy's findings of the final exceptions added. A traceback in
    which a rule matched a line (a serious one, or any on its final line) is that rule's; `unclassified_error` only
    where nothing else serious was found in the file."""
    from tools.logs.diagnose import _convert, _Hit

    added: list[tuple[Rule, _Hit]] = []
    starts: dict[int, int] = {}  # an unclassified exception's hit -> its traceback's first line
    # The same traceback printed again (every step, by every rank) is classified once: its entry and facts depend on
    # what it printed, not on where (issue 31: a 1 MB log of one repeated exception took 8 s, all of it here).
    kept: dict[tuple[Any, ...], Classified | None] = {}
    # The hits by line, to find each exception's owners among the few near it: a log repeating one failing line (an
    # OOM printed every step, 100k times) has as many exceptions as hits, and a scan of every hit for each was
    # quadratic (8 MB of one repeated line ran past any deadline).
    by_line = sorted(range(len(hits)), key=lambda i: hits[i][1].number)
    lines = [hits[i][1].number for i in by_line]
    for exc in raised:
        start = min([exc.start, *(c.start for c in exc.causes)])
        near = sorted(by_line[bisect.bisect_left(lines, min(start, exc.number)):
                              bisect.bisect_right(lines, exc.number + 3)])  # in the hits' own order
        # A warning printed just above a failure is not its exception (a FutureWarning, then torchrun's
        # ChildFailedError; issue 31, round 17): only the line it is on.
        owners = [h for r, h in (hits[i] for i in near)
                  if h.number == exc.number or (not exc.is_warning and r.level != "info"
                                                and start <= h.number <= exc.number + 3)]
        if not owners and not exc.is_warning:
            owners = _restated(exc, start, hits, by_line, lines)
        if owners:
            for hit in owners:  # the rule's; what the traceback says fills in what its lines did not
                if hit.rank is None and exc.spawned_index is not None:
                    hit.rank = exc.spawned_index  # the spawned child whose traceback it is
                _user_location_over_library_frame(hit.site, exc)
                for fact, text in _traceback_facts(exc).items():
                    hit.site.setdefault(fact, text)
                if hit.number > exc.number and exc.message:
                    # A consequence printed after the exception (a server's 500 for the request): the exception's
                    # words are the error, not the consequence's line.
                    hit.site.setdefault("error", exc.error())
            continue
        printed = _printed(exc)
        if printed not in kept:
            if len(kept) >= _EXCEPTIONS_KEPT:
                kept.clear()
            kept[printed] = classify_exception(exc)
        classified = kept[printed]
        if classified is None:
            continue
        facts: dict[str, Any] = {}
        for name, value in classified.facts.items():  # the entry's numbers as numbers, sizes in bytes; texts as is
            key, converted = (name, value) if name in _TEXT_FACTS else _convert(name, str(value),
                                                                                 frozenset({"requested"}))
            facts.setdefault(key, converted)
        if classified.entry.category == "cuda_oom":  # the request and the GPU, as any allocator prints them
            oom_facts(facts, [exc.message, *(_text(a) for a in exc.after[:_OOM_LINES_BELOW])])
        rank = facts.pop("rank", None)
        if not isinstance(rank, int):
            rank = _rank_near(exc)
        hit = _Hit(file, exc.number, rank if rank is not None else file.rank, exc.text, facts, through=exc.number)
        if classified.entry.category == "unclassified_error":
            starts[id(hit)] = start  # where its traceback began, for _lend_to_failure_above
        added.append((_rule(classified.entry, classified.severity), hit))
    serious = any(r.level != "info" and not r.evidence_only and r.category != "unclassified_error"
                  for r, _ in [*hits, *added])  # (cut tracebacks: lend_cut_tracebacks)
    if serious:
        for unplaced in [h for r, h in added if r.category == "unclassified_error"]:
            _lend_to_failure_above(hits, unplaced, starts[id(unplaced)])
        added = [(r, h) for r, h in added if r.category != "unclassified_error"]
    return sorted([*hits, *added], key=lambda pair: pair[1].number) if added else hits


_EXCEPTIONS_KEPT = 4096  # distinct printed exceptions whose classification one file's scan keeps
_CAUSES_KEPT = 8  # chained causes an exception keeps, nearest first


def _printed(exc: RaisedException, linked: bool = True) -> tuple[Any, ...]:
    """What classify_exception reads of `exc`: everything it printed, not the line numbers it printed it at; of its
    wrapped exception and causes (`linked`), their own text only, as it reads no further."""
    def frames(of: list[Frame]) -> tuple[tuple[str, int, str | None, str], ...]:
        return tuple((f.path, f.line, f.function, f.source) for f in of)

    own = (exc.type, exc.message, exc.text, tuple(exc.before), tuple(exc.after), frames(exc.frames),
           frames(exc.user_frames), exc.handled, exc.worker, exc.bare, exc.innermost_first)
    if not linked:
        return own
    return (*own, None if exc.wrapped is None else _printed(exc.wrapped, linked=False),
            tuple(_printed(c, linked=False) for c in exc.causes))


_ABOVE_LINES = 3  # a failure's line at most this many lines above a traceback that no entry knows raised it


def _lend_to_failure_above(hits: list[tuple[Rule, _Hit]], unplaced: _Hit, start: int) -> None:
    """An exception no entry knows, raised right under a failure a rule found (a `loss: nan` step line, then numpy's
    "ValueError: range parameter must be finite." from the histogram of the NaN weights; Keras' nan loss, then
    IPython's InvalidArgumentError): the failure surfaced as that exception. Its exception, message, error and location
    join the failure's finding where the failure's line did not say them (issue 31, round 9)."""
    above = [h for r, h in hits if r.level != "info" and not r.evidence_only
             and r.category != "unclassified_error" and start - _ABOVE_LINES <= h.number < start]
    if not above:
        return
    hit = above[-1]
    for name in ("exception", "message", "error", "location"):  # its function is the innermost frame's, not the user's
        value = unplaced.facts.get(name)
        if isinstance(value, str) and value and name not in hit.facts:
            hit.site.setdefault(name, value)


# A crash line up to this many lines above faulthandler's dump of the current thread: the other threads' dumps come
# between (a training process has a dozen threads, each a few frames deep).
_THREAD_DUMP_LEAD = 400


def lend_cut_tracebacks(hits: list[tuple[Rule, _Hit]], cut: list[CutTraceback]) -> None:
    """A traceback cut before its final line names no exception, but it is where the serious failure a rule found
    right above it (or on a line inside it, interleaved) surfaced: that hit takes the traceback's innermost user frame
    as its location (when it has none) and the launcher's rank prefix as its rank (when it has none)."""
    # The serious hits by line, each cut traceback looking only at those near it: a log repeating a cut traceback has as
    # many cut tracebacks as hits, and a scan of every hit for each was quadratic (16 MB took minutes).
    serious = sorted((h.number, i) for i, (r, h) in enumerate(hits) if r.level != "info" and not r.evidence_only)
    numbers = [number for number, _ in serious]
    for traceback in cut:
        if traceback.other_thread:
            continue
        near = [hits[i] for _, i in serious[bisect.bisect_left(numbers, traceback.start - traceback.lead):
                                            bisect.bisect_right(numbers, traceback.end)]]
        if not near:
            continue
        _, hit = min(near, key=lambda pair: abs(pair[1].number - traceback.start))
        user = [f for f in _innermost_last(traceback.frames) if _LIBRARY.search(f.path.replace("\\", "/")) is None]
        if user and "location" not in hit.facts:
            # A source line the log line names itself (a THCudaCheck's `file=x.cu line=84`) stays the location, as
            # under a whole traceback: round 2's labels want the failing CUDA source there. The logging call's own
            # file:line in the line's prefix (`[E ProcessGroupNCCL.cpp:719]`, `net_socket.cc:488 NCCL WARN`) is
            # only where the message was printed: the user's frame below is where the program was.
            if hit.site.get("location") is not None and hit.site.get("location") == logger_site(hit.text):
                del hit.site["location"]
            hit.site.setdefault("location", f"{user[-1].path}:{user[-1].line}")
            if user[-1].function:
                hit.site.setdefault("function", user[-1].function)
        if hit.rank is None and traceback.rank is not None:
            hit.rank = traceback.rank
