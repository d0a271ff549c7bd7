"""The one reader of log files, shared by grep_logs and diagnose_logs.

- Inputs are files or globs inside the roots (`logs/rank*.log`, `node*/stderr*`, `**/*.log`), confined
  like every other path, bounded in number, in natural order (rank2 before rank10).
- Files are streamed in blocks of whole lines (never read whole); gzip is detected by its magic bytes
  and decompressed on the fly; a file whose first block holds NUL bytes is binary and skipped with a
  note; invalid UTF-8 is replaced; a line longer than a block is matched in pieces and reported once.
- Ranks come from the file name (rank3.log, rank_3, -r3-, node1/rank-03, torchrun's attempt_0/3/) or
  from launcher prefixes on the line ([rank3]:, [default3]:, `3: ` from srun --label).
- Matching uses RE2 (google-re2): linear time in the input, so no pattern can hang the server.
"""

from __future__ import annotations

import gzip
import os
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.core.limits import (
    LOG_CHUNK_BYTES,
    LOG_MAX_FILES,
    LOG_MAX_LINE_CHARS,
    LOG_MAX_PATTERN_CHARS,
    LOG_SNIFF_BYTES,
)
from tools.core.paths import confine

__all__ = [
    "LineMatcher", "LogFile", "MatchedLine", "ScanStats", "compile_pattern", "display_line", "expand_inputs",
    "map_files", "rank_of_line", "rank_of_path", "scan_file",
]

T = TypeVar("T")
_GLOB_CHARS = frozenset("*?[")
_RANK_IN_PATH = re.compile(
    r"(?:^|[/_.\-])(?:rank|r|worker|proc|local_rank)[_\-]?0*(\d{1,5})(?=[/_.\-]|$)"
    r"|attempt_\d+/0*(\d{1,5})/(?:stdout|stderr)",
    re.IGNORECASE,
)
_RANK_PREFIX = re.compile(rb"^\s*(?:\[(?:rank|default)(\d{1,5})\]:|(\d{1,5}): )")
_NATURAL = re.compile(r"(\d+)")


@dataclass(frozen=True)
class LogFile:
    path: Path
    name: str = field(compare=False)
    rank: int | None = field(compare=False)


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


def rank_of_path(relative: str) -> int | None:
    """The rank named closest to the file name (a folder like `run_rank3_test/` above it matters less)."""
    matches = list(_RANK_IN_PATH.finditer(relative))
    if not matches:
        return None
    last = matches[-1]
    return int(last.group(1) or last.group(2))


def rank_of_line(line: bytes) -> int | None:
    match = _RANK_PREFIX.match(line)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def natural_key(path: Path) -> list[Any]:
    """Sort key that puts rank2 before rank10."""
    return [int(part) if part.isdigit() else part for part in _NATURAL.split(str(path))]


def _display(path: Path, roots: Sequence[Path]) -> str:
    for root in roots:
        if path.is_relative_to(root):
            return str(path.relative_to(root))
    return str(path)


def _glob_bases(pattern: str, roots: Sequence[Path]) -> list[tuple[Path, str]]:
    """Where to start globbing: each root for a relative pattern; for an absolute one, its fixed leading
    folders, which must lie inside a root (so `/**/*.log` never walks the whole filesystem)."""
    path = Path(pattern)
    if not path.is_absolute():
        return [(root, pattern) for root in roots]
    fixed: list[str] = []
    for part in path.parts[1:]:
        if any(ch in _GLOB_CHARS for ch in part):
            break
        fixed.append(part)
    base = Path("/", *fixed)
    if not any(base.resolve().is_relative_to(root) for root in roots):
        raise BadInput(f"glob {pattern!r} starts outside the allowed roots.",
                       "Use a glob inside the roots: " + ", ".join(map(str, roots)))
    return [(base, str(path.relative_to(base)))]


def expand_inputs(patterns: Sequence[str], roots: Sequence[Path], max_files: int = LOG_MAX_FILES) -> list[LogFile]:
    """Files named by `patterns` (paths or globs) inside `roots`, deduplicated, natural order."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        if not any(ch in _GLOB_CHARS for ch in pattern):
            path = confine(pattern, roots)
            if path.is_dir():
                raise BadInput(f"{pattern!r} is a directory.", f"Pass a glob such as '{pattern.rstrip('/')}/*.log'.")
            found[path] = None
            continue
        if ".." in Path(pattern).parts or pattern.startswith("-"):
            confine(pattern, roots)  # raises the standard refusal
        matched = 0
        for base, relative in _glob_bases(pattern, roots):
            for candidate in base.glob(relative):
                if not candidate.is_file():
                    continue
                try:
                    resolved = confine(str(candidate), roots)
                except BadInput:
                    continue  # a glob never reaches outside the roots, through symlinks or otherwise
                found[resolved] = None
                matched += 1
                if len(found) > max_files:
                    raise LimitExceeded(f"the inputs match more than {max_files} files.",
                                        "Narrow the globs (e.g. one node's folder, or rank[0-7].log).")
        if matched == 0:
            raise BadInput(f"no file under the allowed roots matches {pattern!r}.",
                           "Check the glob; paths are relative to the roots: " + ", ".join(map(str, roots)))
    files = sorted(found, key=natural_key)
    if len(files) > max_files:
        raise LimitExceeded(f"{len(files)} files given; the limit is {max_files}.", "Pass fewer files.")
    return [LogFile(p, _display(p, roots), rank_of_path(_display(p, roots))) for p in files]


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

    def spans(self, block: bytes) -> list[tuple[int, int, frozenset[int]]]:
        """(line start, line end, ids of the patterns that matched) for each matching line, in order."""
        if self._hyperscan is not None:
            found = self._spans_hyperscan(block)
            if found is not None:
                return found
        return self._spans_re2(block)

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

    def _spans_hyperscan(self, block: bytes) -> list[tuple[int, int, frozenset[int]]] | None:
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


def _hyperscan_database(patterns: Sequence[str], case_sensitive: bool) -> Any:
    try:
        import hyperscan
    except ImportError:
        return None
    flags = hyperscan.HS_FLAG_MULTILINE | (0 if case_sensitive else hyperscan.HS_FLAG_CASELESS)
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        database.compile(expressions=[_strip_names(p).encode() for p in patterns], ids=list(range(len(patterns))),
                         elements=len(patterns), flags=[flags] * len(patterns))
    except hyperscan.error:
        return None  # a construct Hyperscan lacks: RE2 serves this pattern
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


def display_line(raw: bytes, limit: int = LOG_MAX_LINE_CHARS) -> str:
    """A log line as text: decoded leniently, control characters shown as '?', cut with a marker."""
    text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
    text = "".join(ch if ch >= " " or ch == "\t" else "?" for ch in text)
    if len(text) > limit:
        return f"{text[:limit]}…[+{len(text) - limit} chars]"
    return text


def _open(path: Path) -> tuple[IO[bytes], bool]:
    """The file's byte stream, decompressed when it starts with gzip's magic bytes (whatever its name)."""
    try:
        with path.open("rb") as probe:
            compressed = probe.read(2) == b"\x1f\x8b"
        stream: IO[bytes] = gzip.open(path, "rb") if compressed else path.open("rb")  # type: ignore[assignment]
        return stream, compressed
    except OSError as exc:
        raise UnreadableInput(f"cannot open {path.name}: {exc.strerror}.") from exc


def _blocks(stream: IO[bytes], deadline: float) -> Iterator[bytes]:
    """Blocks that end at a newline (or, for a line longer than a block, at the block's end)."""
    while True:
        if time.monotonic() > deadline:
            raise LimitExceeded("the scan ran out of time.", "Pass fewer or smaller files, or raise --timeout.")
        try:
            block = stream.read(LOG_CHUNK_BYTES)
            if block and not block.endswith(b"\n"):
                # Finish the line the block cut; a line longer than a block is matched in pieces.
                block += stream.readline(LOG_CHUNK_BYTES)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
            raise UnreadableInput(f"read failed: {exc}.", "The file may be truncated or not gzip.") from exc
        if not block:
            return
        yield block


def _lines_before(block: bytes, line_start: int, context: int, tail: deque[tuple[int, bytes]],
                  line_no: int) -> list[tuple[int, bytes]]:
    """Up to `context` lines before the line starting at `line_start` (numbered `line_no`)."""
    found: list[tuple[int, bytes]] = []
    end = line_start
    while len(found) < context and end > 0:
        start = block.rfind(b"\n", 0, end - 1) + 1
        found.append((line_no - len(found) - 1, block[start:end]))
        end = start
    if len(found) < context:
        # Reach back into the end of the previous block.
        need = context - len(found)
        found.extend(reversed(list(tail)[-need:]))
    found.reverse()
    return found


def scan_file(
    file: LogFile, matcher: LineMatcher, *, context: int, deadline: float, stats: ScanStats
) -> Iterator[MatchedLine]:
    """Lines of `file` that `matcher` matches, with up to `context` lines before and after, in order.

    The search runs over whole blocks; Python only touches the matching lines and their context.
    """
    stream, stats.compressed = _open(file.path)
    with stream:
        try:
            head = stream.read(LOG_SNIFF_BYTES)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
            raise UnreadableInput(f"cannot read {file.name}: {exc}.") from exc
        if b"\x00" in head:
            stats.binary = True
            return
        stream.seek(0)  # gzip rewinds by decompressing again: only the sniffed 8 KiB are read twice
        tail: deque[tuple[int, bytes]] = deque(maxlen=max(context, 1))
        waiting: list[MatchedLine] = []  # matches still collecting their after-context
        newlines = 0  # newlines before the current position: line number = newlines + 1
        last_reported = 0
        ends_open = False

        def feed(number: int, line: bytes) -> Iterator[MatchedLine]:
            nonlocal waiting
            for pending in waiting:
                pending.after.append((number, line))
            yield from (m for m in waiting if len(m.after) >= context)
            waiting = [m for m in waiting if len(m.after) < context]

        for block in _blocks(stream, deadline):
            stats.bytes += len(block)
            size = len(block)
            position = 0
            for line_start, line_end, ids in matcher.spans(block):
                while waiting and position < line_start:  # after-context from the lines in between
                    end = block.find(b"\n", position, line_start)
                    end = line_start if end < 0 else end + 1
                    yield from feed(newlines + 1, block[position:end])
                    newlines += block[end - 1 : end] == b"\n"
                    position = end
                newlines += block.count(b"\n", position, line_start)
                number = newlines + 1
                line = block[line_start:line_end]
                if number != last_reported:  # a line longer than a block is reported once
                    if waiting:
                        yield from feed(number, line)
                    match = MatchedLine(number, line, _lines_before(block, line_start, context, tail, number)
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
                yield from feed(newlines + 1, block[position:end])
                newlines += block[end - 1 : end] == b"\n"
                position = end
            newlines += block.count(b"\n", position)
            if context:
                for number, line in _last_lines(block, context, newlines):
                    tail.append((number, line))
            ends_open = not block.endswith(b"\n")
        stats.lines = newlines + (1 if ends_open else 0)
        yield from waiting


def _last_lines(block: bytes, count: int, newlines_after: int) -> list[tuple[int, bytes]]:
    """The last `count` complete lines of `block`, numbered (newlines_after = newlines up to block end)."""
    lines: list[tuple[int, bytes]] = []
    end = len(block)
    number = newlines_after
    while len(lines) < count and end > 0:
        start = block.rfind(b"\n", 0, end - 1) + 1
        lines.append((number, block[start:end]))
        number -= 1
        end = start
    lines.reverse()
    return lines


def map_files(scan: Callable[[LogFile], T], files: Sequence[LogFile]) -> list[T]:
    """`scan(file)` for every file, in order, on up to two threads.

    Hyperscan and file reads release the GIL, so a second thread gains about 10-15% on two cores; more
    threads only contend. (Worker processes would gain more, but multiprocessing re-imports __main__ in
    its workers and can wait forever on one that fails to start.) Scans carry their own deadline.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(2, cores, len(files))
    if workers < 2:
        return [scan(f) for f in files]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-scan") as pool:
        return list(pool.map(scan, files))
