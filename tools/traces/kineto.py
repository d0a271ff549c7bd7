"""The one reader of PyTorch profiler (Kineto) Chrome traces: streamed, never held whole.

Both forms of the Chrome trace format are read: the object with `traceEvents` (metadata keys before or
after it, in any order) and the bare array of events; gzip is detected by its magic bytes. The events are
decoded in batches of a block (about a MiB) by one typed msgspec call each, on a sliding window of the file's
bytes: the batch ends at an event boundary that the decode itself proves (a cut anywhere else fails it), or
that a structural scan finds (strings and depth, vectorised), so any layout (one line, one event per line,
indent=N, CRLF, Kineto's own) reads at the decoder's speed, and memory stays bounded by the block and by
what the caller keeps, whatever the file size. Of the metadata only `distributedInfo` and
`deviceProperties` are kept: other blocks hold environment variables and tokens and are never read out.
Errors (truncated JSON, no events, not gzip, wrong types) are UnreadableInput with the byte offset in the
(decompressed) file, as is the place where a file cut short ends (`ends_early_at`).
"""

from __future__ import annotations

import itertools
import json
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar, NoReturn, Union

import msgspec
import numpy as np

from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.core.files import open_input
from tools.core.limits import TRACE_BATCH_BYTES, TRACE_MAX_FILES, TRACE_MAX_METADATA_CHARS, TRACE_READ_CHARS
from tools.core.paths import confine
from tools.core.ranks import rank_of_path

__all__ = ["TraceArgs", "TraceEvent", "TraceHeader", "rank_of_trace", "read_trace", "read_trace_batches",
           "trace_files"]

# Kineto's Chrome traces, and the SQLite exports of Nsight Systems (tools/traces/nsys.py).
TRACE_SUFFIXES = (".json", ".json.gz", ".gz", ".sqlite", ".nsys-rep", ".qdrep")
_KEPT_METADATA = frozenset({"distributedInfo", "deviceProperties", "schemaVersion"})
_SKIP = re.compile(rb"[ \t\r\n,]*")  # JSON's whitespace, and the commas between values
_SPACE = re.compile(rb"[ \t\r\n]*")
_SKIP_TEXT = re.compile(r"[ \t\r\n,]*")
_BOM = b"\xef\xbb\xbf"
# How near its end a file's JSON may fail to decode and still be a file cut short rather than invalid: the longest
# token a cut can leave undecodable (a surrogate pair's escapes, "\\ud83d\\ude0").
_CUT_TOKEN = 12
_READ_PIECE = 64 * 1024  # the most bytes asked of the stream at once (below)
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


class TraceEvent(msgspec.Struct, tag_field="ph", tag="X", forbid_unknown_fields=False, gc=False):
    """One complete ('X') event, with only the fields the summary reads (any JSON type: checked by the reader);
    untracked by the garbage collector, as TraceArgs. The reader yields these events only: the analyses read no
    other phase."""

    ph: ClassVar[str] = "X"  # the tag msgspec decodes by: every event of this class is complete
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    args: TraceArgs | None = None


class _LooseEvent(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """An event of any phase (or none): the decode of a batch that has a phase the union below does not name."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    args: TraceArgs | None = None


# The other phases of the Chrome trace format, each decoded to an empty struct: msgspec reads the phase first and
# skips the rest of the event unmade (flow arrows, instants, counters and metadata are a third or more of a trace's
# events, and making their names, categories and times cost a fifth of the decode).
_OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P", "O", "N", "D", "M",
                 "V", "v", "R", "c", "(", ")")
_SKIPPED_PHASES = tuple(msgspec.defstruct(f"_Phase{index}", [], tag_field="ph", tag=phase, gc=False)
                        for index, phase in enumerate(_OTHER_PHASES))

# msgspec decodes straight into these (about 4x json.loads on real traces: no dict per event or arg).
_BATCH_DECODER: msgspec.json.Decoder[list[Any]] = msgspec.json.Decoder(
    list[Union[(TraceEvent, *_SKIPPED_PHASES)]])  # type: ignore[valid-type]  # noqa: UP007
_LOOSE_DECODER = msgspec.json.Decoder(list[_LooseEvent])


def _raw(value: Any) -> msgspec.Raw:
    return _NO_RAW if value is None else msgspec.Raw(msgspec.json.encode(value))


def _from_dict(raw: dict[str, Any]) -> TraceEvent | None:
    """The slow path's dicts, shaped like the fast path's events (wrong types become None); None for a phase other
    than 'X'."""
    if raw.get("ph") != "X":
        return None
    args = raw.get("args")
    shaped = TraceArgs(stream=args.get("stream"), correlation=args.get("correlation"), device=args.get("device"),
                       collective=args.get("Collective name"), flops=args.get("flops"),
                       input_dims=_raw(args.get("Input Dims")), input_type=_raw(args.get("Input type"))
                       ) if isinstance(args, dict) else None
    return TraceEvent(cat=raw.get("cat"), name=raw.get("name"), ts=raw.get("ts"), dur=raw.get("dur"),
                      tid=raw.get("tid"), args=shaped)


@dataclass
class TraceHeader:
    """What the trace says about itself (filled while reading; complete once events are exhausted)."""

    metadata: dict[str, Any] = field(default_factory=dict)
    events: int = 0
    # Where the file ended inside the event list (bytes read, decompressed; the messages say characters, which they
    # are in ASCII): a trace still being written, or cut short. The complete events before it are kept.
    ends_early_at: int | None = None
    skipped: int = 0  # entries of the event list that are not JSON objects (no event to read)


class _EndsEarly(UnreadableInput):
    """The input ended inside a value: the file is cut short (not invalid in the middle)."""


class _Buffer:
    """A sliding window of the trace's bytes: `data[pos:end]` is what is not read yet, `consumed` bytes were dropped
    from its front. One bytearray of a fixed size, read into in place: each read first moves the unread tail to the
    front, and the array grows only for a value longer than it holds. The CLI serves every allocation of 128 KiB
    or more from a fresh mapping (mcp_server/process.py): a new block object per read and per batch cost page faults
    on every byte (0.4 s of system time on 190 MB), and so did a bytearray resized per read (dropping its front
    and growing its end reallocates it)."""

    def __init__(self, stream: IO[bytes], name: str, deadline: float, read_bytes: int = TRACE_READ_CHARS,
                 batch_bytes: int = TRACE_BATCH_BYTES) -> None:
        self.stream = stream
        self.read_bytes = read_bytes  # each read's size (at least)
        self.batch_bytes = batch_bytes  # the most bytes decoded in one call
        self.name = name
        self.deadline = deadline
        self.data = bytearray()  # data[end:] is room for the next read (old bytes, never read as input)
        self.pos = 0
        self.end = 0
        self.consumed = 0  # bytes dropped from the front of `data`
        self.eof = False

    def more(self, minimum: int = 0) -> bool:
        """Read a block, or `minimum` bytes if more; False at the end of the input."""
        if self.eof:
            return False
        if time.monotonic() > self.deadline:
            raise LimitExceeded("the trace read ran out of time.", "Pass a smaller trace or raise --timeout.")
        size = max(minimum, self.read_bytes)
        unread = self.end - self.pos
        if self.pos:
            with memoryview(self.data) as view:
                view[:unread] = view[self.pos : self.end]  # the unread tail to the front
            self.consumed += self.pos
            self.pos, self.end = 0, unread
        if len(self.data) < unread + size:
            self.data.extend(bytes(unread + size - len(self.data)))
        got = 0
        with memoryview(self.data) as view:
            while got < size:
                # In pieces under 128 KiB: gzip makes a bytes object of each piece it decompresses.
                piece = view[unread + got : unread + min(size, got + _READ_PIECE)]
                try:
                    count = self.stream.readinto(piece)  # type: ignore[attr-defined]
                except EOFError:  # a .gz cut short (still being written): what decompressed so far is the text
                    count = 0
                    self.eof = True
                except (OSError, zlib.error) as exc:  # BadGzipFile is an OSError
                    raise UnreadableInput(f"{self.name}: read failed ({exc}).", "Is the .gz complete?") from exc
                finally:
                    piece.release()
                if not count:
                    break
                got += count
        self.end = unread + got
        if not got:
            self.eof = True
            return False
        if self.consumed == 0 and unread == 0 and self.data.startswith(_BOM):
            self.pos = len(_BOM)  # a UTF-8 byte order mark, as some Windows tools write it
        return True

    def skip(self) -> str:
        """Skip whitespace and commas; the next character ('' at end of input)."""
        while True:
            self.pos = _SKIP.match(self.data, self.pos, self.end).end()  # type: ignore[union-attr]
            if self.pos < self.end:
                return chr(self.data[self.pos])
            if not self.more():
                return ""

    def expect(self, char: str) -> None:
        if self.skip() != char:
            self.fail(f"expected {char!r}")
        self.pos += 1

    def value(self, limit: int | None = None) -> Any:
        """Decode one JSON value at the cursor (a key, a metadata value), reading more input while it is
        incomplete. The stdlib decoder, on the bytes from the cursor as text: invalid UTF-8 decodes one lone
        surrogate a byte (surrogateescape), so the value's length in bytes is exact."""
        while True:
            self.pos = _SPACE.match(self.data, self.pos, self.end).end()  # type: ignore[union-attr]
            if self.pos >= self.end and self.more():
                continue
            with memoryview(self.data) as view:
                text = str(view[self.pos : self.end], "utf-8", "surrogateescape")
            try:
                value, end = _DECODER.raw_decode(text)
            except RecursionError as exc:
                raise self.too_deep() from exc
            except json.JSONDecodeError as exc:
                if limit is not None and self.end - self.pos > limit:
                    raise UnreadableInput(f"{self.name}: a metadata value is larger than {limit} characters.",
                                          "This does not look like a profiler trace.") from exc
                if self.more(self.end - self.pos):  # doubling: a value read in n blocks costs O(n) decodes
                    continue
                # At the end of the input: a value the end cuts (an open string, or the decoder stopped at the
                # last character) is a file cut short; a failure before the end is invalid JSON.
                if "Unterminated" in exc.msg or exc.pos >= len(text.rstrip()) - _CUT_TOKEN:
                    raise _EndsEarly(f"{self.name}: the file ends inside a value at character "
                                     f"{self.consumed + self.pos}.") from exc
                self.fail(f"invalid or truncated JSON ({exc.msg})")
            taken = text[:end]
            raw = taken.encode("utf-8", "surrogateescape")
            self.pos += len(raw)
            if not taken.isascii():
                try:
                    taken.encode("utf-8")
                except UnicodeEncodeError:  # invalid bytes in it: U+FFFD for them, never lone surrogates
                    return json.loads(raw.decode("utf-8", "replace"))
            return value

    def too_deep(self) -> UnreadableInput:
        return UnreadableInput(f"{self.name}: JSON nested deeper than any trace's, at character "
                               f"{self.consumed + self.pos}.", "This is not a Chrome trace (torch.profiler).")

    def fail(self, what: str, at: int | None = None) -> NoReturn:
        where = self.consumed + (self.pos if at is None else at)
        raise UnreadableInput(f"{self.name}: {what} at character {where}.",
                              "The file may be truncated or not a Chrome trace (torch.profiler export_chrome_trace).")


def read_trace(path: Path, display: str, deadline: float, header: TraceHeader, *,
               read_bytes: int = TRACE_READ_CHARS, batch_bytes: int = TRACE_BATCH_BYTES) -> Iterator[TraceEvent]:
    """The trace's events, one at a time; `header` gets the kept metadata as it is met."""
    return itertools.chain.from_iterable(read_trace_batches(path, display, deadline, header, read_bytes=read_bytes,
                                                            batch_bytes=batch_bytes))


def read_trace_batches(path: Path, display: str, deadline: float, header: TraceHeader, *,
                       read_bytes: int = TRACE_READ_CHARS,
                       batch_bytes: int = TRACE_BATCH_BYTES) -> Iterator[list[TraceEvent]]:
    """The trace's events in the batches they are decoded in (up to `batch_bytes` each): a loop over a batch costs
    no generator step per event, which the summary's hot loop feels. `read_bytes`: each read's size."""
    stream, _ = open_input(path)  # a regular file only (a FIFO would block), gzip told by its magic bytes
    with stream:
        buffer = _Buffer(stream, display, deadline, read_bytes, batch_bytes)
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


# The likely boundary between two events, in any layout: a closing brace, a comma, an opening brace, with any JSON
# whitespace between. A match inside a value (a nested list of objects, a string) is no boundary, but the decode of
# the events before it then fails (an open string or object before the closing bracket): never a wrong batch.
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
# The tails of a batch's bytes searched for its last boundary, shortest first: every match in a tail is a step of
# Python (a 16 KiB tail of one-line JSON holds about 70), and the first tail holds a boundary but for events longer.
_BOUNDARY_WINDOWS = (1024, 16 * 1024)
_DEPTH_DELTA = np.zeros(256, dtype=np.int8)
_DEPTH_DELTA[[ord("{"), ord("[")]] = 1
_DEPTH_DELTA[[ord("}"), ord("]")]] = -1
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def _structure(data: bytes | bytearray, start: int, end: int | None = None) -> tuple[int, int]:
    """Where the values of a JSON list end, scanning data[start:end] (from the start of a value, outside any string;
    to the end of `data` by default): (the end of the last whole object or list at the list's level, -1 if none; the
    position of the bracket that closes the list, -1 if not in the scan). Structurally: quotes not escaped by an odd
    run of backslashes open and close strings; braces and brackets outside strings (an even number of quotes before
    them) change the depth. Whitespace, layout and key order play no part. Exact on valid JSON; on invalid JSON the
    decode that follows fails, as it would have."""
    count = (len(data) if end is None else end) - start
    if count <= 0:
        return -1, -1
    view = np.frombuffer(data, dtype=np.uint8, offset=start, count=count)
    quotes = np.flatnonzero(view == _QUOTE)
    escaped = view[np.maximum(quotes - 1, 0)] == _BACKSLASH
    if quotes.size and quotes[0] == 0:
        escaped[0] = False  # the byte before `start` is no part of this value
    if escaped.any():
        # A quote after a run of backslashes is escaped when the run is odd ("\"" vs "\\").
        slashes = np.flatnonzero(view == _BACKSLASH)
        run_starts = np.ones(slashes.size, dtype=bool)
        run_starts[1:] = np.diff(slashes) != 1
        run_start_index = np.maximum.accumulate(np.where(run_starts, np.arange(slashes.size), 0))
        after_slash = np.flatnonzero(escaped)
        last_slash = np.searchsorted(slashes, quotes[after_slash] - 1)
        odd = (last_slash - run_start_index[last_slash]) % 2 == 0  # run length = difference + 1
        quotes = np.delete(quotes, after_slash[odd])
    delta = _DEPTH_DELTA[view]
    brackets = np.flatnonzero(delta)
    brackets = brackets[(np.searchsorted(quotes, brackets) & 1) == 0]  # outside strings
    if not brackets.size:
        return -1, -1
    depth = np.cumsum(delta[brackets], dtype=np.int64)
    below = np.flatnonzero(depth < 0)
    closes_list = int(brackets[below[0]]) + start if below.size else -1
    level = depth[: below[0]] if below.size else depth
    at_level = np.flatnonzero(level == 0)
    last_end = int(brackets[at_level[-1]]) + start + 1 if at_level.size else -1
    return last_end, closes_list


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
        if batch is None:  # no whole value in the buffer: a longer read (doubling), or the end of the file
            if buffer.more(buffer.end - buffer.pos):
                continue
            try:
                one = buffer.value()  # says whether the end cuts a value or the JSON is invalid before it
            except _EndsEarly:
                header.ends_early_at = buffer.consumed + buffer.pos
                return
            if isinstance(one, dict):
                header.events += 1
                event = _from_dict(one)
                batch = [] if event is None else [event]
            else:
                header.skipped += 1
                batch = []
        yield batch


def _batch(buffer: _Buffer, header: TraceHeader) -> list[TraceEvent] | None:
    """The whole values of the event list from the cursor, up to a batch's bytes, decoded in one call; None when
    the buffer holds none. Fast path: up to the last likely boundary (a batch decodes only when the cut was a real
    one). Else the structural scan finds the last real one in the buffer, whatever the layout."""
    data, start, filled = buffer.data, buffer.pos, buffer.end
    end = min(filled, start + buffer.batch_bytes)
    cut = _last_boundary(data, start, end)
    if cut < 0 and end < filled:  # an event longer than a batch
        cut = _last_boundary(data, start, filled)
    if cut > start:
        events = _decode(buffer, _list_of(data, start, cut), header, strict=False)
        if events is not None:
            buffer.pos = cut  # at the comma before the next event
            return events
    last_end, closes_list = _structure(data, start, filled)
    cut = closes_list if closes_list >= 0 else last_end
    if cut <= start:
        return None
    events = _decode(buffer, _list_of(data, start, cut), header, strict=True)
    assert events is not None
    buffer.pos = cut
    return events


def _last_boundary(data: bytearray, start: int, end: int) -> int:
    """Just after the closing brace of the last likely boundary in data[start:end] (its tail first); -1: none."""
    cut = -1
    for low in (*(max(start, end - window) for window in _BOUNDARY_WINDOWS), start):
        for match in _BOUNDARY.finditer(data, low, end):
            cut = match.start() + 1
        if cut >= 0 or low == start:
            return cut
    return cut


def _list_of(data: bytearray, start: int, end: int) -> bytes:
    """`data[start:end]` (list values, commas between them) as a JSON list: one allocation. An immutable copy, as
    msgspec.Raw fields (shapes) are views into what was decoded."""
    return b"".join((b"[", memoryview(data)[start:end], b"]"))


def _decode(buffer: _Buffer, chunk: bytes, header: TraceHeader, strict: bool) -> list[TraceEvent] | None:
    """The complete events of a run of whole list values (`chunk`, as a JSON list), counting its events of every
    phase in `header`. One typed msgspec call; a phase the union does not name (or none) takes a second msgspec
    call that makes every event; valid JSON with odd types (args as a string, a number past a float) goes through
    the stdlib decoder and shaping. On invalid JSON: None, or when `strict` (the values are known whole), one value
    at a time, the stdlib decoder taking what msgspec refuses (NaN, Infinity) and saying where the JSON is
    invalid."""
    for decoder in (_BATCH_DECODER, _LOOSE_DECODER):  # the typed union first; every phase made only if it fails
        try:
            decoded = decoder.decode(chunk)
        except RecursionError as exc:
            raise buffer.too_deep() from exc
        except msgspec.ValidationError:
            continue
        except msgspec.DecodeError:
            if not strict:
                return None
            continue
        header.events += len(decoded)
        if decoder is _BATCH_DECODER:
            return [event for event in decoded if type(event) is TraceEvent]
        return [TraceEvent(cat=e.cat, name=e.name, ts=e.ts, dur=e.dur, tid=e.tid, args=e.args) for e in decoded
                if e.ph == "X"]
    text = chunk.decode("utf-8", "replace")
    try:
        loose = json.loads(text)
    except RecursionError as exc:
        raise buffer.too_deep() from exc
    except json.JSONDecodeError:
        if not strict:
            return None
        loose = _one_at_a_time(buffer, text)
    objects = [e for e in loose if isinstance(e, dict)]
    header.events += len(objects)
    header.skipped += len(loose) - len(objects)
    return [event for e in objects if (event := _from_dict(e)) is not None]


def _one_at_a_time(buffer: _Buffer, text: str) -> list[Any]:
    """The values of `text` ("[" + values + "]") one by one: the place of the first that is not JSON."""
    values: list[Any] = []
    pos = 1
    while True:
        pos = _SKIP_TEXT.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= len(text) - 1:
            return values
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except RecursionError as exc:
            raise buffer.too_deep() from exc
        except json.JSONDecodeError as exc:
            buffer.fail(f"invalid JSON ({exc.msg})", buffer.pos + exc.pos - 1)
        values.append(value)


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
