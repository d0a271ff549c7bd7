"""The one line scanner of logs, shared by grep_logs, diagnose_logs and the other domains' log readers.

- Files come from tools.core.files (confined, natural order, gzip detected, bounded blocks); a file whose first
  block holds NUL bytes is binary and skipped with a note; invalid UTF-8 is replaced; a line longer than a block
  is matched in pieces and reported once.
- Ranks come from the file name or from launcher prefixes on the line (tools.core.ranks).
- Matching is linear-time: Hyperscan on x86-64 for many patterns at once, RE2 (google-re2) elsewhere, so no
  pattern can hang the server.
"""

from __future__ import annotations

import platform
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tools.core.compiled_cache import cache_key, load_compiled, store_compiled
from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.core.files import (
    InputFile,
    changed_while_read,
    expand_inputs,
    open_input,
    read_blocks_reused,
    size_text,
)
from tools.core.limits import (
    LOG_CLOCK_EVERY_MATCHES,
    LOG_MAX_FILES,
    LOG_MAX_LINE_CHARS,
    LOG_MAX_PATTERN_CHARS,
    LOG_SAME_LINES_KEPT,
    LOG_SNIFF_BYTES,
)
from tools.core.models import Coverage
from tools.core.workers import usable_cores
from tools.logs.wraps import hard_wrap_width, rejoin_wrapped

__all__ = ["CUT_BY_DEADLINE", "LOG_FORMATS", "LineMatcher", "MatchedLine", "ScanStats", "compile_pattern",
           "cut_by_deadline", "display_line", "expand_log_inputs", "log_coverage", "map_files", "scan_file",
           "without_colours"]

# What the log readers read, for a coverage row of an input they could not.
LOG_FORMATS = ("text log (UTF-8; invalid bytes replaced)", "gzip-compressed text log")

T = TypeVar("T")


@dataclass
class MatchedLine:
    number: int
    text: bytes
    before: list[tuple[int, bytes]] = field(default_factory=list)
    after: list[tuple[int, bytes]] = field(default_factory=list)
    patterns: frozenset[int] = frozenset()


@dataclass
class ScanStats:
    lines: int = 0
    bytes: int = 0
    binary: bool = False
    compressed: bool = False
    changed: str | None = None  # rotated or truncated while it was read (tools/core/files.changed_while_read)
    wrap_width: int | None = None  # the width its lines were hard-wrapped at, rejoined for matching (wraps.py)

    def status(self) -> str:
        """A scanned file's row status."""
        if self.binary:
            return "binary: skipped"
        if self.changed:
            return f"scanned; {self.changed}"
        return f"scanned; {_REJOINED.format(width=self.wrap_width)}" if self.wrap_width else "scanned"


# A file's scan status when the call's time for reading ran out in it or before it (diagnose_logs).
CUT_BY_DEADLINE = "the call's time ran out"


def cut_by_deadline(file: InputFile, stats: ScanStats, last_line: int) -> str:
    """The status of a file whose reading the call's time stopped after `last_line` (0: before it began); its line
    count becomes the lines read."""
    stats.lines = last_line
    if not stats.bytes:
        return f"{CUT_BY_DEADLINE} before it was read"
    try:
        size = size_text(file.path.stat().st_size)
    except OSError:
        size = "?"
    return f"{CUT_BY_DEADLINE} at line {last_line} (about {size_text(stats.bytes)} of {size} read)"


# Said in a file's coverage row: its line numbers count the rejoined lines, not the file's.
_REJOINED = "lines hard-wrapped at {width} columns were read rejoined (line numbers count rejoined lines)"


def _re2_options(case_sensitive: bool) -> Any:
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.never_nl = True
    options.log_errors = False
    return options


class LineMatcher:
    """Finds the lines of a block that match any of several patterns, and which patterns matched.

    Two linear-time engines, no backtracking anywhere: Hyperscan (SIMD automata, several GB/s, x86-64)
    when it is installed and accepts the patterns, else RE2 (a few hundred MB/s). Patterns are always
    validated by RE2 first, so both accept the same language and errors read the same.
    """

    def __init__(self, patterns: Sequence[str], *, case_sensitive: bool, engine: str = "auto") -> None:
        import re2

        self.patterns = tuple(patterns)
        options = _re2_options(case_sensitive)
        # (?m): ^ and $ anchor at line ends, as in grep, although blocks of many lines are searched.
        self._re2 = [re2.compile(b"(?m)" + p.encode(), options) for p in patterns]
        self._combined = re2.compile(b"(?m)" + b"|".join(b"(?:" + _strip_names(p).encode() + b")"
                                                         for p in patterns), options)
        matches_empty = any(rx.search(b"") is not None for rx in self._re2)
        usable = engine == "auto" and not matches_empty
        self._hyperscan = _hyperscan_database(self.patterns, case_sensitive) if usable else None
        self._local = threading.local()

    @property
    def engine(self) -> str:
        return "hyperscan" if self._hyperscan is not None else "re2"

    def spans(self, block: bytes | bytearray) -> list[tuple[int, int, frozenset[int]]]:
        """(line start, line end, ids of the patterns that matched) for each matching line, in order."""
        if self._hyperscan is not None:
            found = self._spans_hyperscan(block)
            if found is not None:
                return found
        return self._spans_re2(bytes(block) if isinstance(block, bytearray) else block)

    def _spans_re2(self, block: bytes) -> list[tuple[int, int, frozenset[int]]]:
        found: list[tuple[int, int, frozenset[int]]] = []
        position, size = 0, len(block)
        while position < size:
            hit = self._combined.search(block, position)
            if hit is None:
                break
            newline = block.rfind(b"\n", position, hit.start())
            start = position if newline < 0 else newline + 1
            end = block.find(b"\n", hit.start())
            end = size if end < 0 else end + 1
            line = block[start:end]
            ids = frozenset(i for i, rx in enumerate(self._re2) if len(self._re2) == 1 or rx.search(line))
            found.append((start, end, ids))
            position = end  # one report per line, however many matches it holds
        return found

    def _spans_hyperscan(self, block: bytes | bytearray) -> list[tuple[int, int, frozenset[int]]] | None:
        """Hyperscan reports every match end; past a bound per block (say `.`, an event per byte) the
        block goes to RE2, which stops at the first match of each line."""
        import hyperscan

        ends: list[tuple[int, int]] = []
        # Real logs give at most a few events per line; one per 4 bytes means a degenerate pattern.
        limit = max(_MIN_HYPERSCAN_EVENTS, len(block) // 4)

        def on_match(pattern_id: int, start: int, end: int, flags: int, context: object) -> bool:
            ends.append((end, pattern_id))
            return len(ends) > limit  # True stops the scan

        assert self._hyperscan is not None
        try:
            self._hyperscan.scan(block, match_event_handler=on_match, scratch=self._scratch())
        except hyperscan.ScanTerminated:
            return None
        found: list[tuple[int, int, frozenset[int]]] = []
        size = len(block)
        ids: set[int] = set()
        line_start = line_end = -1
        for end, pattern_id in sorted(ends):
            last_byte = max(end - 1, 0)
            if last_byte < line_end:
                ids.add(pattern_id)
                continue
            if line_end >= 0:
                found.append((line_start, line_end, frozenset(ids)))
            line_start = block.rfind(b"\n", max(line_end, 0), last_byte) + 1 or max(line_end, 0)
            newline = block.find(b"\n", last_byte)
            line_end = size if newline < 0 else newline + 1
            ids = {pattern_id}
        if line_end >= 0:
            found.append((line_start, line_end, frozenset(ids)))
        return found

    def _scratch(self) -> Any:
        # Hyperscan scratch space is per thread: concurrent tool calls share this cached matcher.
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            import hyperscan

            scratch = self._local.scratch = hyperscan.Scratch(self._hyperscan)
        return scratch


# Match events Hyperscan may report for a block (at least) before the block is handed to RE2.
_MIN_HYPERSCAN_EVENTS = 10_000
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def _strip_names(pattern: str) -> str:
    return _NAMED_GROUP.sub("(", pattern)


_CACHED_SETS_FROM = 8  # patterns in a set that is kept compiled (the tools' rule sets; not a caller's grep)


def _hyperscan_database(patterns: Sequence[str], case_sensitive: bool) -> Any:
    try:
        import hyperscan
    except ImportError:
        return None
    flags = hyperscan.HS_FLAG_MULTILINE | (0 if case_sensitive else hyperscan.HS_FLAG_CASELESS)
    expressions = [_strip_names(p).encode() for p in patterns]
    # A rule set is compiled once per machine and kept (tools/core/compiled_cache.py); a caller's one-off pattern
    # compiles in milliseconds and is not kept.
    version = str(getattr(hyperscan, "__version__", "")).encode()
    key = (cache_key(version, platform.machine().encode(), str(flags).encode(), *expressions)
           if len(patterns) >= _CACHED_SETS_FROM else None)
    stored = load_compiled(key) if key else None
    if stored is not None:
        try:
            return hyperscan.loadb(stored, mode=hyperscan.HS_MODE_BLOCK)
        except (hyperscan.error, TypeError, ValueError):
            pass  # another build's or a damaged file: compile again
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        database.compile(expressions=expressions, ids=list(range(len(patterns))), elements=len(patterns),
                         flags=[flags] * len(patterns))
    except hyperscan.error:
        return None  # a construct Hyperscan lacks: RE2 serves this pattern
    if key:
        store_compiled(key, hyperscan.dumpb(database))
    return database


def compile_pattern(pattern: str, engine: str = "auto") -> LineMatcher:
    """A case-insensitive line matcher for a caller's regex; a clear error for bad or long patterns."""
    import re2

    if not pattern:
        raise BadInput("the pattern is empty.", "Pass a regex or a preset name.")
    if len(pattern) > LOG_MAX_PATTERN_CHARS:
        raise BadInput(f"the pattern is {len(pattern)} characters; the limit is {LOG_MAX_PATTERN_CHARS}.",
                       "Use a shorter pattern or a preset.")
    try:
        return LineMatcher([pattern], case_sensitive=False, engine=engine)
    except re2.error as exc:
        raise BadInput(f"invalid regex {pattern!r}: {exc}.",
                       "RE2 syntax: no backreferences or look-around; escape ( ) [ ] . * + ? |") from exc


# A terminal's colour codes (SGR: `ESC[36m` ... `ESC[0m`, loguru's and rich's output), and the same codes a paste lost
# its ESC from (`[36m05-07 13:05:33[0m`, GitHub strips it): at least two on the line, so a lone `[5m` stays text.
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_BARE_SGR = re.compile(r"\[(?:\d{1,3};)*\d{1,3}m")


def without_colours(text: str) -> str:
    """`text` without a terminal's colour codes."""
    text = _SGR.sub("", text)
    return _BARE_SGR.sub("", text) if len(_BARE_SGR.findall(text)) >= 2 else text


def display_line(raw: bytes, limit: int = LOG_MAX_LINE_CHARS) -> str:
    """A log line as text: decoded leniently, colour codes dropped, control characters shown as '?', cut with a
    marker."""
    text = without_colours(raw.rstrip(b"\r\n").decode("utf-8", "replace"))
    text = "".join(ch if ch >= " " or ch == "\t" else "?" for ch in text)
    if len(text) > limit:
        return f"{text[:limit]}…[+{len(text) - limit} chars]"
    return text


class _SameLines:
    """One bytes object for each distinct line text among the last ones read: a log that repeats a traceback keeps
    each of its lines (matched, or context of a match) once, not once per repetition."""

    def __init__(self) -> None:
        self._lines: dict[bytes, bytes] = {}

    def __call__(self, line: bytes) -> bytes:
        kept = self._lines.get(line)
        if kept is None:
            if len(self._lines) >= LOG_SAME_LINES_KEPT:
                self._lines.clear()
            kept = self._lines[line] = line
        return kept


def _lines_before(block: bytes | bytearray, line_start: int, context: int, tail: deque[tuple[int, bytes]],
                  line_no: int, same: _SameLines) -> list[tuple[int, bytes]]:
    """Up to `context` lines before the line starting at `line_start` (numbered `line_no`)."""
    found: list[tuple[int, bytes]] = []
    end = line_start
    while len(found) < context and end > 0:
        start = block.rfind(b"\n", 0, end - 1) + 1
        found.append((line_no - len(found) - 1, same(bytes(block[start:end]))))
        end = start
    if len(found) < context:
        # Reach back into the end of the previous block.
        need = context - len(found)
        found.extend(reversed(list(tail)[-need:]))
    found.reverse()
    return found


def scan_file(
    file: InputFile, matcher: LineMatcher, *, context: int, deadline: float, stats: ScanStats,
    rejoin_wraps: bool = False,
) -> Iterator[MatchedLine]:
    """Lines of `file` that `matcher` matches, with up to `context` lines before and after, in order.

    The search runs over whole blocks; Python only touches the matching lines and their context. `rejoin_wraps`:
    a file hard-wrapped at a fixed width is read as the lines it was printed in (tools/logs/wraps.py); readers of
    tables and of lines as they stand (grep_logs, memory summaries) leave it off.
    """
    stream, stats.compressed = open_input(file.path)
    with stream:
        try:
            head = stream.read(LOG_SNIFF_BYTES)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
            raise UnreadableInput(f"cannot read {file.name}: {exc}.") from exc
        if b"\x00" in head:
            stats.binary = True
            return
        stream.seek(0)  # gzip rewinds by decompressing again: only the sniffed 8 KiB are read twice
        stats.wrap_width = hard_wrap_width(head) if rejoin_wraps else None
        physical_lines = 0  # newlines a rejoin took out, for the file's line count
        tail: deque[tuple[int, bytes]] = deque(maxlen=max(context, 1))
        waiting: list[MatchedLine] = []  # matches still collecting their after-context
        newlines = 0  # newlines before the current position: line number = newlines + 1
        last_reported = 0
        ends_open = False
        same = _SameLines()

        def feed(number: int, line: bytes) -> Iterator[MatchedLine]:
            nonlocal waiting
            for pending in waiting:
                pending.after.append((number, line))
            yield from (m for m in waiting if len(m.after) >= context)
            waiting = [m for m in waiting if len(m.after) < context]

        block: bytes | bytearray
        for block in read_blocks_reused(stream, deadline):
            stats.bytes += len(block)
            if stats.wrap_width:
                rejoined = rejoin_wrapped(bytes(block), stats.wrap_width)
                physical_lines += block.count(b"\n") - rejoined.count(b"\n")
                block = rejoined
            size = len(block)
            position = 0
            for count, (line_start, line_end, ids) in enumerate(matcher.spans(block)):
                if count % LOG_CLOCK_EVERY_MATCHES == LOG_CLOCK_EVERY_MATCHES - 1 and time.monotonic() > deadline:
                    # A block of a dense log (a traceback repeated) is seconds of matched lines: the call's time is
                    # looked at within one, not only between blocks.
                    raise LimitExceeded("the scan ran out of time.", "Pass fewer or smaller files, or raise --timeout.")
                while waiting and position < line_start:  # after-context from the lines in between
                    end = block.find(b"\n", position, line_start)
                    end = line_start if end < 0 else end + 1
                    yield from feed(newlines + 1, same(bytes(block[position:end])))
                    newlines += block[end - 1 : end] == b"\n"
                    position = end
                newlines += block.count(b"\n", position, line_start)
                number = newlines + 1
                line = same(bytes(block[line_start:line_end]))
                if number != last_reported:  # a line longer than a block is reported once
                    if waiting:
                        yield from feed(number, line)
                    match = MatchedLine(number, line, _lines_before(block, line_start, context, tail, number, same)
                                        if context else [], patterns=ids)
                    last_reported = number
                    if context:
                        waiting.append(match)
                    else:
                        yield match
                newlines += line.endswith(b"\n")
                position = line_end
            while waiting and position < size:
                end = block.find(b"\n", position)
                end = size if end < 0 else end + 1
                yield from feed(newlines + 1, same(bytes(block[position:end])))
                newlines += block[end - 1 : end] == b"\n"
                position = end
            newlines += block.count(b"\n", position)
            if context:
                for number, line in _last_lines(block, context, newlines):
                    tail.append((number, line))
            ends_open = not block.endswith(b"\n")
        stats.lines = newlines + physical_lines + (1 if ends_open else 0)
        stats.changed = changed_while_read(file.path, stream)
        yield from waiting


def _last_lines(block: bytes | bytearray, count: int, newlines_after: int) -> list[tuple[int, bytes]]:
    """The last `count` complete lines of `block`, numbered (newlines_after = newlines up to block end)."""
    lines: list[tuple[int, bytes]] = []
    end = len(block)
    number = newlines_after
    while len(lines) < count and end > 0:
        start = block.rfind(b"\n", 0, end - 1) + 1
        lines.append((number, bytes(block[start:end])))
        number -= 1
        end = start
    lines.reverse()
    return lines


def map_files(scan: Callable[[InputFile], T], files: Sequence[InputFile]) -> list[T]:
    """`scan(file)` for every file, in order, on up to two threads.

    Hyperscan and file reads release the GIL, so a second thread gains about 10-15% on two cores; more
    threads only contend. (Worker processes would gain more, but multiprocessing re-imports __main__ in
    its workers and can wait forever on one that fails to start.) Scans carry their own deadline.
    """
    cores = usable_cores()
    workers = min(2, cores, len(files))
    if workers < 2:
        return [scan(f) for f in files]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-scan") as pool:
        return list(pool.map(scan, files))


def expand_log_inputs(patterns: Sequence[str], roots: Sequence[Any],
                      max_files: int = LOG_MAX_FILES) -> tuple[list[InputFile], list[str]]:
    """The files `patterns` name (tools.core.files.expand_inputs), and the globs that matched none. A glob that
    matches nothing while others match is a gap in the evidence, reported as such, not a failed call; when none
    matches, the call fails as before."""
    unmatched: list[str] = []
    return expand_inputs(patterns, roots, max_files, unmatched=unmatched), unmatched


def log_coverage(name: str, status: str, lines: int, read_bytes: int = 0, what: str = "") -> Coverage:
    """One log file's coverage row, from its scan's status ('scanned', 'scanned; rotated ...', 'binary: skipped',
    'unreadable: ...'): read whole, read in part (cut short by a read error, rotated or truncated under the scan),
    or not understood (binary, empty, unreadable). `what`: what was found in it, for the detail."""
    found = f"; {what}" if what else ""
    if status.startswith(CUT_BY_DEADLINE):
        if lines:
            return Coverage.partial(name, f"{status}; what follows is not in the scan{found}")
        return Coverage.not_understood(name, f"not read: {status}; a larger --timeout or fewer files would read it")
    if status == "binary: skipped":
        return Coverage.not_understood(name, "binary (NUL bytes in its first 8 KiB), not a text log: skipped",
                                       LOG_FORMATS)
    if status.startswith("unreadable:"):
        reason = status.removeprefix("unreadable:").strip()
        if read_bytes:
            return Coverage.partial(name, f"{size_text(read_bytes)} read, then it could not be: {reason}{found}")
        return Coverage.not_understood(name, f"nothing could be read: {reason}", LOG_FORMATS)
    if lines == 0:
        return Coverage.not_understood(name, "empty: no line to judge", LOG_FORMATS)
    changed = status.removeprefix("scanned").lstrip("; ")
    if changed.startswith(_REJOINED.split("{", 1)[0]):
        return Coverage.read(name, f"{lines} line(s); {changed}{found}")
    if changed:
        return Coverage.partial(name, f"{lines} line(s) read; {changed}{found}")
    return Coverage.read(name, f"{lines} line(s){found}")
