"""The one reader of PyTorch profiler (Kineto) Chrome traces: streamed, never held whole.

Both forms of the Chrome trace format are read: the object with `traceEvents` (metadata keys before or
after it) and the bare array of events; gzip is detected by its magic bytes. Events are decoded one at
a time with the C JSON scanner on a sliding text buffer, so memory stays bounded by the buffer and by
what the caller keeps, whatever the file size. Of the metadata only `distributedInfo` and
`deviceProperties` are kept: other blocks hold environment variables and tokens and are never read out.
Errors (truncated JSON, no events, not gzip, wrong types) are UnreadableInput with the byte offset.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tools.errors import LimitExceeded, UnreadableInput
from tools.limits import TRACE_MAX_METADATA_CHARS, TRACE_READ_CHARS

__all__ = ["TraceHeader", "read_trace"]

_KEPT_METADATA = frozenset({"distributedInfo", "deviceProperties", "schemaVersion"})
_SKIP = re.compile(r"[\s,]*")
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


@dataclass
class TraceHeader:
    """What the trace says about itself (filled while reading; complete once events are exhausted)."""

    metadata: dict[str, Any] = field(default_factory=dict)
    events: int = 0


class _Buffer:
    def __init__(self, stream: IO[str], name: str, deadline: float) -> None:
        self.stream = stream
        self.name = name
        self.deadline = deadline
        self.text = ""
        self.pos = 0
        self.consumed = 0  # characters dropped from the front of `text`
        self.eof = False

    def more(self, minimum: int = TRACE_READ_CHARS) -> bool:
        if self.eof:
            return False
        if time.monotonic() > self.deadline:
            raise LimitExceeded("the trace read ran out of time.", "Pass a smaller trace or raise --timeout.")
        try:
            chunk = self.stream.read(max(minimum, TRACE_READ_CHARS))
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
            raise UnreadableInput(f"{self.name}: read failed ({exc}).", "Is the .gz complete?") from exc
        if not chunk:
            self.eof = True
            return False
        if self.pos > TRACE_READ_CHARS:
            self.consumed += self.pos
            self.text = self.text[self.pos :]
            self.pos = 0
        self.text += chunk
        return True

    def skip(self) -> str:
        """Skip whitespace and commas; the next character ('' at end of input)."""
        while True:
            self.pos = _SKIP.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def expect(self, char: str) -> None:
        if self.skip() != char:
            self.fail(f"expected {char!r}")
        self.pos += 1

    def value(self, limit: int | None = None) -> Any:
        """Decode one JSON value at the cursor, reading more input while it is incomplete."""
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos >= len(self.text) and self.more():
                continue
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if limit is not None and len(self.text) - self.pos > limit:
                    raise UnreadableInput(f"{self.name}: a metadata value is larger than {limit} characters.",
                                          "This does not look like a profiler trace.") from exc
                if self.more():
                    continue
                self.fail(f"invalid or truncated JSON ({exc.msg})")
            self.pos = end
            return value

    def fail(self, what: str) -> None:
        raise UnreadableInput(f"{self.name}: {what} at character {self.consumed + self.pos}.",
                              "The file may be truncated or not a Chrome trace (torch.profiler export_chrome_trace).")


def _open_text(path: Path) -> IO[str]:
    try:
        with path.open("rb") as probe:
            head = probe.read(2)
        raw: IO[bytes] = gzip.open(path, "rb") if head == b"\x1f\x8b" else path.open("rb")  # type: ignore[assignment]
    except OSError as exc:
        raise UnreadableInput(f"cannot open {path.name}: {exc.strerror}.") from exc
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def read_trace(path: Path, display: str, deadline: float, header: TraceHeader) -> Iterator[dict[str, Any]]:
    """The trace's events, one dict at a time; `header` gets the kept metadata as it is met."""
    with _open_text(path) as stream:
        buffer = _Buffer(stream, display, deadline)
        first = buffer.skip()
        if first == "":
            raise UnreadableInput(f"{display} is empty.", "Pass a trace written by torch.profiler.")
        if first == "[":
            buffer.pos += 1
            yield from _events(buffer, header)
            return
        if first != "{":
            buffer.fail("expected a JSON object or array")
        buffer.pos += 1
        saw_events = False
        while True:
            nxt = buffer.skip()
            if nxt == "}":
                break
            if nxt != '"':
                buffer.fail("expected a key")
            key = buffer.value()
            buffer.expect(":")
            if key == "traceEvents":
                if buffer.skip() != "[":
                    buffer.fail("traceEvents is not a list")
                buffer.pos += 1
                saw_events = True
                yield from _events(buffer, header)
            elif key in _KEPT_METADATA:
                header.metadata[key] = buffer.value(TRACE_MAX_METADATA_CHARS)
            else:
                buffer.value(TRACE_MAX_METADATA_CHARS)  # read past, never kept: may hold env vars and tokens
        if not saw_events:
            raise UnreadableInput(f"{display} has no traceEvents.", "Pass a trace written by torch.profiler.")


# Kineto writes one event per block, top-level events separated by exactly this (raw newlines never occur
# inside JSON strings, so the marker cannot be inside a value).
_KINETO_SEPARATOR = "\n  },\n  {"


def _events(buffer: _Buffer, header: TraceHeader) -> Iterator[dict[str, Any]]:
    while True:
        nxt = buffer.skip()
        if nxt == "]":
            buffer.pos += 1
            return
        if nxt == "":
            buffer.fail("the event list ends early")
        batch = _batch(buffer)
        if batch is None:  # not Kineto's layout here: one event at a time
            batch = [buffer.value()]
        for event in batch:
            if isinstance(event, dict):
                header.events += 1
                yield event


def _batch(buffer: _Buffer) -> list[Any] | None:
    """Fast path: every whole event up to the last separator in the buffer, decoded in one call."""
    cut = buffer.text.rfind(_KINETO_SEPARATOR, buffer.pos)
    if cut < 0:
        return None
    try:
        events = json.loads("[" + buffer.text[buffer.pos : cut + 4] + "]")
    except json.JSONDecodeError:
        return None
    buffer.pos = cut + 4  # at the comma before the next event
    return events if isinstance(events, list) else None
