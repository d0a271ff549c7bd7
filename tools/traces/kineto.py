"""The one reader of PyTorch profiler (Kineto) Chrome traces: streamed, never held whole.

Both forms of the Chrome trace format are read: the object with `traceEvents` (metadata keys before or
after it) and the bare array of events; gzip is detected by its magic bytes. Events are decoded one at
a time with the C JSON scanner on a sliding text buffer, so memory stays bounded by the buffer and by
what the caller keeps, whatever the file size. Of the metadata only `distributedInfo` and
`deviceProperties` are kept: other blocks hold environment variables and tokens and are never read out.
Errors (truncated JSON, no events, not gzip, wrong types) are UnreadableInput with the byte offset.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.core.files import open_input
from tools.core.limits import TRACE_MAX_FILES, TRACE_MAX_METADATA_CHARS, TRACE_READ_CHARS
from tools.core.paths import confine
from tools.core.ranks import rank_of_path

__all__ = ["TraceArgs", "TraceEvent", "TraceHeader", "rank_of_trace", "read_trace", "read_trace_batches",
           "trace_files"]

# Kineto's Chrome traces, and the SQLite exports of Nsight Systems (tools/traces/nsys.py).
TRACE_SUFFIXES = (".json", ".json.gz", ".gz", ".sqlite", ".nsys-rep", ".qdrep")
_KEPT_METADATA = frozenset({"distributedInfo", "deviceProperties", "schemaVersion"})
_SKIP = re.compile(r"[\s,]*")
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


_NO_RAW = msgspec.Raw(b"")


class TraceArgs(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The event args the summary uses; the rest (call stacks, metadata) is skipped unread. Shapes and input
    types stay raw JSON until a matmul asks for them (record_shapes puts them on every op). Not tracked by the
    garbage collector (gc=False; decoded JSON is a tree, it cannot make a cycle): millions of tracked objects
    made the collector's passes cost more than the decode itself."""

    stream: Any = None
    correlation: Any = None
    device: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    flops: Any = None  # with_flops=True: the op's FLOP count
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")  # b"" when absent
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")


class TraceEvent(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """One trace event, with only the fields the summary reads (any JSON type: checked by the reader); untracked
    by the garbage collector, as TraceArgs."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    args: TraceArgs | None = None


# msgspec decodes straight into these (about 4x json.loads on real traces: no dict per event or arg).
_BATCH_DECODER = msgspec.json.Decoder(list[TraceEvent])


def _raw(value: Any) -> msgspec.Raw:
    return _NO_RAW if value is None else msgspec.Raw(msgspec.json.encode(value))


def _from_dict(raw: dict[str, Any]) -> TraceEvent:
    """The slow path's dicts, shaped like the fast path's events (wrong types become None)."""
    args = raw.get("args")
    shaped = TraceArgs(stream=args.get("stream"), correlation=args.get("correlation"), device=args.get("device"),
                       collective=args.get("Collective name"), flops=args.get("flops"),
                       input_dims=_raw(args.get("Input Dims")), input_type=_raw(args.get("Input type"))
                       ) if isinstance(args, dict) else None
    return TraceEvent(ph=raw.get("ph"), cat=raw.get("cat"), name=raw.get("name"), ts=raw.get("ts"),
                      dur=raw.get("dur"), tid=raw.get("tid"), args=shaped)


@dataclass
class TraceHeader:
    """What the trace says about itself (filled while reading; complete once events are exhausted)."""

    metadata: dict[str, Any] = field(default_factory=dict)
    events: int = 0
    # Where the file ended inside the event list (characters read): a trace still being written, or cut short.
    # The complete events before it are kept.
    ends_early_at: int | None = None
    skipped: int = 0  # entries of the event list that are not JSON objects (no event to read)


class _EndsEarly(UnreadableInput):
    """The input ended inside a value: the file is cut short (not invalid in the middle)."""


class _Buffer:
    def __init__(self, stream: IO[str], name: str, deadline: float) -> None:
        self.stream = stream
        self.name = name
        self.deadline = deadline
        self.text = ""
        self.pos = 0
        self.consumed = 0  # characters dropped from the front of `text`
        self.eof = False
        self.batch_tried_until = -1  # absolute end of the text a batch attempt already failed on

    def more(self, minimum: int = TRACE_READ_CHARS) -> bool:
        if self.eof:
            return False
        if time.monotonic() > self.deadline:
            raise LimitExceeded("the trace read ran out of time.", "Pass a smaller trace or raise --timeout.")
        try:
            chunk = self.stream.read(max(minimum, TRACE_READ_CHARS))
        except EOFError:  # a .gz cut short (still being written): what decompressed so far is the text
            self.eof = True
            return False
        except (OSError, zlib.error) as exc:  # BadGzipFile is an OSError
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
            except RecursionError as exc:
                raise self.too_deep() from exc
            except json.JSONDecodeError as exc:
                if limit is not None and len(self.text) - self.pos > limit:
                    raise UnreadableInput(f"{self.name}: a metadata value is larger than {limit} characters.",
                                          "This does not look like a profiler trace.") from exc
                if self.more():
                    continue
                # At the end of the input: a value the end cuts (an open string, or the decoder stopped at the
                # last character) is a file cut short; a failure before the end is invalid JSON.
                if "Unterminated" in exc.msg or exc.pos >= len(self.text.rstrip()) - 1:
                    raise _EndsEarly(f"{self.name}: the file ends inside a value at character "
                                     f"{self.consumed + self.pos}.") from exc
                self.fail(f"invalid or truncated JSON ({exc.msg})")
            self.pos = end
            return value

    def too_deep(self) -> UnreadableInput:
        return UnreadableInput(f"{self.name}: JSON nested deeper than any trace's, at character "
                               f"{self.consumed + self.pos}.", "This is not a Chrome trace (torch.profiler).")

    def fail(self, what: str) -> None:
        raise UnreadableInput(f"{self.name}: {what} at character {self.consumed + self.pos}.",
                              "The file may be truncated or not a Chrome trace (torch.profiler export_chrome_trace).")


def _open_text(path: Path) -> IO[str]:
    raw, _ = open_input(path)  # a regular file only (a FIFO would block), gzip told by its magic bytes
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def read_trace(path: Path, display: str, deadline: float, header: TraceHeader) -> Iterator[TraceEvent]:
    """The trace's events, one at a time; `header` gets the kept metadata as it is met."""
    return itertools.chain.from_iterable(read_trace_batches(path, display, deadline, header))


def read_trace_batches(path: Path, display: str, deadline: float,
                       header: TraceHeader) -> Iterator[list[TraceEvent]]:
    """The trace's events in the batches they are decoded in (a few MB each): a loop over a batch costs no
    generator step per event, which the summary's hot loop feels."""
    with _open_text(path) as stream:
        buffer = _Buffer(stream, display, deadline)
        first = buffer.skip()
        if first == "":
            raise UnreadableInput(f"{display} is empty.", "Pass a trace written by torch.profiler.")
        if first == "[":
            buffer.pos += 1
            yield from _events(buffer, header)
            if header.ends_early_at is not None and header.events == 0:
                buffer.fail("the file is truncated before its first complete event")
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
                if header.ends_early_at is not None and header.events == 0:
                    buffer.fail("the file is truncated before its first complete event")
                if header.ends_early_at is not None:
                    return  # the metadata after the events never came
            elif key in _KEPT_METADATA:
                header.metadata[key] = buffer.value(TRACE_MAX_METADATA_CHARS)
            else:
                buffer.value(TRACE_MAX_METADATA_CHARS)  # read past, never kept: may hold env vars and tokens
        if not saw_events:
            raise UnreadableInput(f"{display} has no traceEvents.", "Pass a trace written by torch.profiler.")


# Event separators of the two usual layouts: Kineto's pretty print (one event per indented block) and
# one event per line. Raw newlines never occur inside JSON strings, so neither can hide in a value; a
# separator that is not an event boundary only fails the decode, and the slow path takes over.
_SEPARATORS = ("\n  },\n  {", "},\n{")


def _events(buffer: _Buffer, header: TraceHeader) -> Iterator[list[TraceEvent]]:
    """The event list's events; where the file ends inside it, the complete ones, and `header` says where."""
    while True:
        nxt = buffer.skip()
        if nxt == "]":
            buffer.pos += 1
            return
        if nxt == "":
            header.ends_early_at = buffer.consumed + buffer.pos
            return
        batch = _batch(buffer, header)
        if batch is None:  # not a known layout here: one event at a time
            try:
                one = buffer.value()
            except _EndsEarly:
                header.ends_early_at = buffer.consumed + buffer.pos
                return
            batch = [_from_dict(one)] if isinstance(one, dict) else []
            header.skipped += 1 - len(batch)
        header.events += len(batch)
        yield batch


def _batch(buffer: _Buffer, header: TraceHeader) -> list[TraceEvent] | None:
    """Fast path: every whole event up to the last separator in the buffer, decoded in one call. A failed
    attempt is not repeated until more text arrives, so files in other layouts stay linear."""
    text_end = buffer.consumed + len(buffer.text)
    if buffer.batch_tried_until == text_end:
        return None
    for separator in _SEPARATORS:
        cut = buffer.text.rfind(separator, buffer.pos)
        if cut < 0:
            continue
        end = cut + separator.index("}") + 1
        chunk = "[" + buffer.text[buffer.pos : end] + "]"
        try:
            events = _BATCH_DECODER.decode(chunk)
        except RecursionError as exc:
            raise buffer.too_deep() from exc
        except msgspec.ValidationError:
            # Valid JSON with an odd type somewhere (args as a string...): the plain decoder, then shaping.
            try:
                loose = json.loads(chunk)
            except RecursionError as exc:
                raise buffer.too_deep() from exc
            except json.JSONDecodeError:
                continue
            events = [_from_dict(e) for e in loose if isinstance(e, dict)]
            header.skipped += len(loose) - len(events)
        except msgspec.DecodeError:
            continue
        buffer.pos = end  # at the comma before the next event
        return events
    buffer.batch_tried_until = text_end
    return None


def trace_files(path: Path, roots: tuple[Path, ...]) -> list[Path]:
    """A trace file, or the .json / .json.gz traces of a folder (symlinks leading out of the roots skipped)."""
    if path.is_file():
        return [path]
    if not path.is_dir():  # a FIFO, socket or device: opening it could wait forever on a writer
        raise BadInput(f"{path.name} is neither a regular file nor a folder.",
                       "Pass a trace file (.json, .json.gz, nsys .sqlite) or a folder of them.")
    candidates = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    files = []
    for candidate in candidates:
        try:
            files.append(confine(str(candidate), roots))  # a symlink in the folder must not lead out
        except BadInput:
            continue
    if not files:
        raise BadInput(f"no trace (.json, .json.gz, or an nsys .sqlite export) in {path.name}.",
                       "Pass a trace file or a folder of them.")
    if len(files) > TRACE_MAX_FILES:
        raise LimitExceeded(f"{len(files)} traces in the folder; the limit is {TRACE_MAX_FILES}.",
                            "Pass a folder with fewer ranks.")
    return files


def rank_of_trace(header: TraceHeader, display: str, position: int) -> int:
    """The rank a trace says (distributedInfo), else the one in its file name, else its position."""
    info = header.metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    from_name = rank_of_path(display)
    return position if from_name is None else from_name
