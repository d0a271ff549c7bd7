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
import io
import re
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tools._paths import confine
from tools.errors import BadInput, LimitExceeded, UnreadableInput
from tools.limits import (
    LOG_CHUNK_BYTES,
    LOG_MAX_FILES,
    LOG_MAX_LINE_CHARS,
    LOG_MAX_PATTERN_CHARS,
    LOG_SNIFF_BYTES,
)

__all__ = [
    "LogFile", "MatchedLine", "ScanStats", "compile_pattern", "display_line", "expand_inputs", "rank_of_line",
    "rank_of_path", "scan_file",
]

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


def _natural_key(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in _NATURAL.split(str(path))]


def _display(path: Path, roots: Sequence[Path]) -> str:
    for root in roots:
        if path.is_relative_to(root):
            return str(path.relative_to(root))
    return str(path)


def expand_inputs(patterns: Sequence[str], roots: Sequence[Path]) -> list[LogFile]:
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
        for base in ([Path("/")] if Path(pattern).is_absolute() else roots):
            relative = str(Path(pattern).relative_to("/")) if base == Path("/") else pattern
            for candidate in base.glob(relative):
                if not candidate.is_file():
                    continue
                try:
                    resolved = confine(str(candidate), roots)
                except BadInput:
                    continue  # a glob never reaches outside the roots, through symlinks or otherwise
                found[resolved] = None
                matched += 1
                if len(found) > LOG_MAX_FILES:
                    raise LimitExceeded(f"the inputs match more than {LOG_MAX_FILES} files.",
                                        "Narrow the globs (e.g. one node's folder, or rank[0-7].log).")
        if matched == 0:
            raise BadInput(f"no file under the allowed roots matches {pattern!r}.",
                           "Check the glob; paths are relative to the roots: " + ", ".join(map(str, roots)))
    files = sorted(found, key=_natural_key)
    if len(files) > LOG_MAX_FILES:
        raise LimitExceeded(f"{len(files)} files given; the limit is {LOG_MAX_FILES}.", "Pass fewer files.")
    return [LogFile(p, _display(p, roots), rank_of_path(_display(p, roots))) for p in files]


def compile_pattern(pattern: str) -> Any:
    """RE2, case-insensitive, never matching across lines; a clear error for bad or long patterns."""
    import re2  # type: ignore[import-untyped]

    if not pattern:
        raise BadInput("the pattern is empty.", "Pass a regex or a preset name.")
    if len(pattern) > LOG_MAX_PATTERN_CHARS:
        raise BadInput(f"the pattern is {len(pattern)} characters; the limit is {LOG_MAX_PATTERN_CHARS}.",
                       "Use a shorter pattern or a preset.")
    options = re2.Options()
    options.case_sensitive = False
    options.never_nl = True
    options.log_errors = False
    try:
        # (?m): ^ and $ anchor at line ends, as in grep, although blocks of many lines are searched.
        return re2.compile(b"(?m)" + pattern.encode(), options)
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
    carry = b""
    while True:
        if time.monotonic() > deadline:
            raise LimitExceeded("the scan ran out of time.", "Pass fewer or smaller files, or raise --timeout.")
        try:
            block = stream.read(LOG_CHUNK_BYTES)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise UnreadableInput(f"read failed: {exc}.", "The file may be truncated or not gzip.") from exc
        if not block:
            if carry:
                yield carry
            return
        data = carry + block
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) >= LOG_CHUNK_BYTES:
                yield data  # an over-long line: matched in pieces, counted once
                carry = b""
            else:
                carry = data
            continue
        yield data[: cut + 1]
        carry = data[cut + 1 :]


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
    file: LogFile, regex: Any, *, context: int, deadline: float, stats: ScanStats
) -> Iterator[MatchedLine]:
    """Lines of `file` that `regex` matches, with up to `context` lines before and after, in order.

    The search runs over whole blocks; Python only touches the matching lines and their context.
    """
    stream, stats.compressed = _open(file.path)
    with stream:
        try:
            head = stream.read(LOG_SNIFF_BYTES)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise UnreadableInput(f"cannot read {file.name}: {exc}.") from exc
        if b"\x00" in head:
            stats.binary = True
            return
        joined = io.BufferedReader(_Prefixed(head, stream), buffer_size=LOG_CHUNK_BYTES)
        tail: deque[tuple[int, bytes]] = deque(maxlen=max(context, 1))
        waiting: list[MatchedLine] = []  # matches still collecting their after-context
        newlines = 0  # newlines before the current position: line number = newlines + 1
        last_reported = 0
        ends_open = False
        for block in _blocks(joined, deadline):
            stats.bytes += len(block)
            size = len(block)
            position = 0
            while position < size:
                if waiting:
                    # Walk one line for the pending after-context; it may match itself.
                    end = block.find(b"\n", position)
                    end = size if end < 0 else end + 1
                    line = block[position:end]
                    number = newlines + 1
                    for pending in waiting:
                        pending.after.append((number, line))
                    yield from (m for m in waiting if len(m.after) >= context)
                    waiting = [m for m in waiting if len(m.after) < context]
                    if number != last_reported and regex.search(line) is not None:
                        before = _lines_before(block, position, context, tail, number)
                        waiting.append(MatchedLine(number, line, before))
                        last_reported = number
                    newlines += line.endswith(b"\n")
                    position = end
                    continue
                found = regex.search(block, position)
                if found is None:
                    newlines += block.count(b"\n", position)
                    break
                newline_before = block.rfind(b"\n", position, found.start())
                line_start = position if newline_before < 0 else newline_before + 1
                newlines += block.count(b"\n", position, line_start)
                end = block.find(b"\n", found.start())
                end = size if end < 0 else end + 1
                number = newlines + 1
                line = block[line_start:end]
                if number != last_reported:
                    match = MatchedLine(number, line, _lines_before(block, line_start, context, tail, number)
                                        if context else [])
                    last_reported = number
                    if context:
                        waiting.append(match)
                    else:
                        yield match
                newlines += line.endswith(b"\n")
                position = end
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


class _Prefixed(io.RawIOBase):
    """A stream that first returns `head`, then the rest of `stream` (the sniffed bytes are not lost)."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self._head = head
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
