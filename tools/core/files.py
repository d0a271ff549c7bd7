"""The files a call reads: paths and globs confined to the roots, in natural order, streamed in bounded blocks.

- Inputs are files or globs inside the roots (`logs/rank*.log`, `node*/stderr*`, `**/*.log`), confined
  like every other path, bounded in number, in natural order (rank2 before rank10), each with the rank its name says.
  A relative glob that matches under more than one root is refused with the candidates (the roots are often different
  jobs; their ranks must never be merged). A glob that matches nothing while others did is a gap the call reports
  (a `coverage` row, added by the contract for the calls it runs) and goes on; only when nothing matched is it refused.
- A file is streamed in blocks of whole lines (never read whole), within the call's deadline; gzip is detected by
  its magic bytes, whatever the name, and decompressed on the fly.
"""

from __future__ import annotations

import gzip
import os
import re
import stat
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.core.limits import LOG_CHUNK_BYTES, LOG_MAX_FILES
from tools.core.paths import ambiguous, confine
from tools.core.ranks import rank_of_path
from tools.core.stalls import CALL_ID, opened, refuse_if_stalled, touching

__all__ = [
    "InputFile",
    "changed_while_read",
    "expand_inputs",
    "natural_key",
    "open_input",
    "open_regular",
    "read_blocks",
    "read_blocks_reused",
    "read_regular",
    "read_whole_text",
    "require_regular",
    "size_text",
    "take_unmatched",
]

_GLOB_CHARS = frozenset("*?[")
_NATURAL = re.compile(r"(\d+)")
# Globs that matched nothing, per tool call (tools/core/stalls.py's CALL_ID), for the contract to report as coverage.
_unmatched_by_call: dict[int, list[str]] = {}
_unmatched_lock = threading.Lock()


def take_unmatched(call: int) -> list[str]:
    """The globs of call `call` that matched no file while others did (each once, in order); forgotten after."""
    with _unmatched_lock:
        return list(dict.fromkeys(_unmatched_by_call.pop(call, [])))


@dataclass(frozen=True)
class InputFile:
    """A file the caller named, confined to the roots: its path, its name relative to a root, its rank."""

    path: Path
    name: str = field(compare=False)
    rank: int | None = field(compare=False)


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
    refuse_if_stalled(base)
    with touching(base):
        inside = any(base.resolve().is_relative_to(root) for root in roots)
    if not inside:
        raise BadInput(f"glob {pattern!r} starts outside the allowed roots.",
                       "Use a glob inside the roots: " + ", ".join(map(str, roots)))
    return [(base, str(path.relative_to(base)))]


def size_text(size: float) -> str:
    """Bytes as a person reads them: 812.00 KiB, 1.20 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size:.0f} B"


def expand_inputs(patterns: Sequence[str], roots: Sequence[Path], max_files: int = LOG_MAX_FILES,
                  unmatched: list[str] | None = None) -> list[InputFile]:
    """Files named by `patterns` (paths or globs) inside `roots`, deduplicated, natural order. A glob that matches
    nothing is appended to `unmatched` (or, within a call the contract runs, to that call's record, which it turns
    into coverage rows) when another pattern matched: a gap in the evidence, e.g. `node*/stderr*` on a job without
    node folders. When none matched, or outside a call with no `unmatched` to note it in, it is refused."""
    found: dict[Path, None] = {}
    missed: list[str] = []
    for pattern in patterns:
        if not any(ch in _GLOB_CHARS for ch in pattern):
            path = confine(pattern, roots)
            with touching(path):
                folder = path.is_dir()
            if folder:
                raise BadInput(f"{pattern!r} is a directory.", f"Pass a glob such as '{pattern.rstrip('/')}/*.log'.")
            found[path] = None
            continue
        if pattern.startswith("-"):
            confine(pattern, roots)  # raises the standard refusal
        per_base: list[tuple[Path, dict[Path, None]]] = []
        for base, relative in _glob_bases(pattern, roots):
            matches: dict[Path, None] = {}
            refuse_if_stalled(base)
            with touching(base):
                for candidate in base.glob(relative):
                    if not candidate.is_file():
                        continue
                    try:
                        resolved = confine(str(candidate), roots)
                    except BadInput:
                        continue  # a glob never reaches outside the roots, through symlinks or otherwise
                    matches[resolved] = None
                    if len(found) + len(matches) > max_files:
                        raise LimitExceeded(f"the inputs match more than {max_files} files.",
                                            "Narrow the globs (e.g. one node's folder, or rank[0-7].log).")
            if matches and all(set(matches) != set(seen) for _, seen in per_base):
                per_base.append((base, matches))
        if len(per_base) > 1:
            raise ambiguous(pattern, [base / pattern for base, _ in per_base], [len(m) for _, m in per_base])
        if not per_base:
            missed.append(pattern)
            continue
        found.update(per_base[0][1])
    call = CALL_ID.get()
    if unmatched is None and call is not None:
        with _unmatched_lock:
            unmatched = _unmatched_by_call.setdefault(call, [])
    if missed and (unmatched is None or not found):
        raise BadInput(f"no file under the allowed roots matches {missed[0]!r}.",
                       "Check the glob; paths are relative to the roots: " + ", ".join(map(str, roots)))
    if unmatched is not None:
        unmatched.extend(missed)
    files = sorted(found, key=natural_key)
    if len(files) > max_files:
        raise LimitExceeded(f"{len(files)} files given; the limit is {max_files}.", "Pass fewer files.")
    named = [(p, _display(p, roots)) for p in files]
    return [InputFile(p, name, rank_of_path(name)) for p, name in named]


def _open_regular(path: Path, name: str) -> IO[bytes]:
    """The file opened for reading, if it is a regular file. Opened without blocking and checked on the open
    descriptor: a FIFO (or one swapped in after a check by name) would wait for a writer forever, a socket or a
    device is no saved output."""
    refuse_if_stalled(path)
    with touching(path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise UnreadableInput(f"cannot open {name}: {exc.strerror}.") from exc
        mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device or folder"
        raise UnreadableInput(f"{name} is {what}, not a regular file: nothing was read from it.",
                              "Pass the saved file itself.")
    os.set_blocking(fd, True)
    handle = os.fdopen(fd, "rb")
    opened(path, handle)  # a read that never returns names this path (tools/core/stalls.py)
    return handle


def open_regular(path: Path, name: str | None = None) -> IO[bytes]:
    """A caller's file opened for reading, refused unless it is a regular file (never blocks on a FIFO)."""
    return _open_regular(path, name or path.name)


def read_regular(path: Path, limit: int | None = None, name: str | None = None) -> bytes:
    """A caller's regular file read whole, or its first `limit` bytes; OSError becomes a clear refusal."""
    with open_regular(path, name) as handle:
        try:
            return handle.read() if limit is None else handle.read(limit)
        except OSError as exc:
            raise UnreadableInput(f"cannot read {name or path.name}: {exc.strerror}.") from exc


def require_regular(path: Path, name: str | None = None) -> None:
    """For a library that opens the path itself (SQLite): refused unless it is a regular file now."""
    open_regular(path, name).close()


def open_input(path: Path) -> tuple[IO[bytes], bool]:
    """The file's byte stream (regular files only), decompressed when it starts with gzip's magic bytes (whatever
    its name)."""
    raw = _open_regular(path, path.name)
    try:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise UnreadableInput(f"cannot read {path.name}: {exc.strerror}.") from exc
    stream: IO[bytes] = _OwnedGzip(raw) if compressed else raw  # type: ignore[assignment]
    return stream, compressed


class _OwnedGzip(gzip.GzipFile):
    """A gzip stream over a file it closes too (GzipFile leaves a file object it was given open)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def read_whole_text(file: InputFile, max_bytes: int, hint: str) -> str:
    """A small saved output (a capture, a profile) read whole as text: a regular file of at most `max_bytes`, not
    binary; `hint` says what to pass instead."""
    with _open_regular(file.path, file.name) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise LimitExceeded(f"{file.name} is {size} bytes; it is read up to {max_bytes}.", hint)
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise UnreadableInput(f"cannot read {file.name}: {exc.strerror}.") from exc
    if b"\x00" in data[:65536]:
        raise UnreadableInput(f"{file.name} is binary, not a command's text output.", hint)
    return data.decode("utf-8", "replace")


def changed_while_read(path: Path, stream: IO[bytes]) -> str | None:
    """What happened to `path` while `stream` (opened on it, read to where it stands) was read: rotated (the name
    is now another file; what was read is the old one's) or truncated (now shorter than what was read). Logs of
    running jobs are rotated and truncated (logrotate's copytruncate) under a scan; the lines read stay right."""
    try:
        descriptor = stream.fileno()
        position = os.lseek(descriptor, 0, os.SEEK_CUR)  # in the file on disk, gzip or not
        now = os.fstat(descriptor)
    except (OSError, ValueError):
        return None
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return "deleted while read: what was read is all there was"
    except OSError:
        return None
    if (named.st_dev, named.st_ino) != (now.st_dev, now.st_ino):
        return "rotated while read: these are the old file's lines, the new file was not read"
    if now.st_size < position:
        return (f"truncated while read (to {size_text(now.st_size)}, after {size_text(position)} were read): "
                "what was written after the cut is not in the scan")
    return None


def read_blocks(stream: IO[bytes], deadline: float) -> Iterator[bytes]:
    """Blocks that end at a newline (or, for a line longer than a block, at the block's end)."""
    while True:
        with _block_read(deadline):
            block = stream.read(LOG_CHUNK_BYTES)
            if block and not block.endswith(b"\n"):
                # Finish the line the block cut; a line longer than a block is matched in pieces.
                block += stream.readline(LOG_CHUNK_BYTES)
        if not block:
            return
        yield block


@contextmanager
def _block_read(deadline: float) -> Iterator[None]:
    """One block's read: refused once the deadline has passed; a failed read (or gzip stream) said as such."""
    if time.monotonic() > deadline:
        raise LimitExceeded("the scan ran out of time.", "Pass fewer or smaller files, or raise --timeout.")
    try:
        yield
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
        raise UnreadableInput(f"read failed: {exc}.", "The file may be truncated or not gzip.") from exc


def read_blocks_reused(stream: IO[bytes], deadline: float) -> Iterator[bytearray]:
    """read_blocks' blocks (LOG_CHUNK_BYTES, then the rest of the line they cut, at most as much again), read into one
    buffer that every block reuses: a fresh 4 MiB bytes object per block, and another for the cut line's join, cost
    more than the scan's counting of lines (page faults of a new mapping each, with glibc's fixed mmap threshold:
    mcp_server/process.py). A block is only valid until the next one is asked for."""
    buffer = bytearray(LOG_CHUNK_BYTES)
    while True:
        with _block_read(deadline):
            if len(buffer) < LOG_CHUNK_BYTES:  # the last read was short: the end, unless the file grew since
                buffer[:] = stream.read(LOG_CHUNK_BYTES)
            else:
                del buffer[LOG_CHUNK_BYTES:]  # the last block's cut line; the allocation stays
                filled = _fill(stream, buffer)
                if filled < LOG_CHUNK_BYTES:
                    del buffer[filled:]
            if buffer and not buffer.endswith(b"\n"):
                # Finish the line the block cut; a line longer than a block is matched in pieces.
                buffer += stream.readline(LOG_CHUNK_BYTES)
        if not buffer:
            return
        yield buffer


def _fill(stream: IO[bytes], buffer: bytearray) -> int:
    """Reads into all of `buffer`, as one read() of its size would (several reads where a stream returns less)."""
    filled = 0
    with memoryview(buffer) as view:
        while filled < len(buffer):
            with view[filled:] as rest:
                got = stream.readinto(rest)  # type: ignore[attr-defined]
            if not got:
                break
            filled += got
    return filled
