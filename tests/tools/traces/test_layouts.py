"""The Kineto reader whatever the file's layout (issue 33): the same real trace written the ways traces are saved gives
the same summary; the structural scan that finds event boundaries holds on the hard cases (strings holding braces,
quotes, backslashes and unicode escapes, an event split across a read block, a file cut inside an event)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import tools.traces.kineto as kineto
from tests.helpers import REPO
from tools.core.context import ToolContext
from tools.core.errors import UnreadableInput
from tools.traces.kineto import TraceHeader, read_trace
from tools.traces.summary import SummarizeTraceInput, summarize_trace

# Real traces (tests/data/traces/wild/PROVENANCE.md): a PARAM benchmark run with distributedInfo, and a TraceLens
# sample from an H100 with nested args (lists of shapes, strings of concrete inputs), each a few thousand events.
REAL = [REPO / "tests/data/traces/wild/files/t2-param-1.json.gz",
        REPO / "tests/data/traces/wild/files/t2-tracelens-3.json.gz"]


def _load(path: Path) -> dict[str, Any]:
    trace = json.loads(gzip.decompress(path.read_bytes()))
    return trace if isinstance(trace, dict) else {"traceEvents": trace}


def _one_per_line(trace: dict[str, Any]) -> bytes:
    head = "".join(f"{json.dumps(k)}: {json.dumps(v)},\n" for k, v in trace.items() if k != "traceEvents")
    events = ",\n".join(json.dumps(e) for e in trace["traceEvents"])
    return f'{{\n{head}"traceEvents": [\n{events}\n]}}\n'.encode()


def _brace_comma(trace: dict[str, Any]) -> bytes:
    # A generator's `},\n  {`: compact events, two spaces of indentation, the metadata after the events.
    events = ",\n  ".join(json.dumps(e, separators=(",", ":")) for e in trace["traceEvents"])
    tail = "".join(f',"{k}":{json.dumps(v)}' for k, v in trace.items() if k != "traceEvents")
    return f'{{"traceEvents":[\n  {events}\n]{tail}}}'.encode()


def _reordered(trace: dict[str, Any]) -> dict[str, Any]:
    # Another writer's key order: every object's keys reversed (args before ph), the events list first.
    def reverse(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: reverse(value[k]) for k in reversed(value)}
        return [reverse(v) for v in value] if isinstance(value, list) else value

    return {"traceEvents": reverse(trace["traceEvents"]),
            **{k: reverse(v) for k, v in trace.items() if k != "traceEvents"}}


LAYOUTS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "one_per_line": _one_per_line,
    "one_line": lambda t: json.dumps(t).encode(),
    "indent2": lambda t: json.dumps(t, indent=2).encode(),
    "indent4_crlf": lambda t: json.dumps(t, indent=4).replace("\n", "\r\n").encode(),
    "brace_comma": _brace_comma,
    "reordered_sorted_compact": lambda t: json.dumps(_reordered(t), separators=(",", ":")).encode(),
    "sorted_keys_tabs": lambda t: json.dumps(t, sort_keys=True, indent="\t").encode(),
    "one_line_gz": lambda t: gzip.compress(json.dumps(t).encode()),
    "non_ascii_as_is_bom": lambda t: b"\xef\xbb\xbf" + json.dumps(t, ensure_ascii=False, indent=1).encode(),
}


def _summary(folder: Path) -> dict[str, Any]:
    result = anyio.run(summarize_trace, SummarizeTraceInput(path="trace.json"), ToolContext(roots=(folder,)))
    return result.model_dump(mode="json")


@pytest.mark.parametrize("source", REAL, ids=[p.name.split(".")[0] for p in REAL])
def test_every_layout_gives_the_same_summary(tmp_path: Path, source: Path) -> None:
    trace = _load(source)
    results, events = {}, {}
    for name, write in LAYOUTS.items():
        folder = tmp_path / name
        folder.mkdir()
        content = write(trace)
        (folder / "trace.json").write_bytes(content)  # one name for all: gzip is told by its magic bytes
        results[name] = _summary(folder)
        # Read again in 4 KiB blocks and batches of a third of that: an event is cut by a block's end hundreds of
        # times in every layout, and the events read are the same.
        small, _ = _read(folder / "trace.json", read_bytes=4096, batch_bytes=4096 // 3)
        whole, _ = _read(folder / "trace.json")
        assert _projection(small) == _projection(whole), name
        events[name] = _projection(whole)
        if name == "one_line":
            assert content.count(b"\n") == 0
    reference = results.pop("one_per_line")
    assert reference["ranks"] and reference["ranks"][0]["gpu_events"] > 200
    assert [c["status"] for c in reference["coverage"]] == ["read"]
    for name, result in results.items():
        assert result == reference, name
        assert events[name] == events["one_per_line"], name


def _projection(events: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.name, e.ph, e.ts, e.dur, e.cat, e.args.correlation if e.args else None) for e in events]


def _read(path: Path, **sizes: int) -> tuple[list[Any], TraceHeader]:
    header = TraceHeader()
    events = list(read_trace(path, path.name, time.monotonic() + 60, header, **sizes))
    return events, header


# Strings that break a reader that finds boundaries by text: braces, brackets, the `}, {` of a boundary itself,
# escaped quotes after even and odd runs of backslashes, unicode escapes (a surrogate pair among them), raw UTF-8.
HARD_NAMES = ['aten::index}, {"ph": "X"', '{[', ']}', '\\', '\\\\"}, {', 'say \"hi\" }', 'caf\u00e9 \U0001f600 },{',
              '"', '\\"', 'tab\tnew\nline\r', '\x00\x1f', 'end\\']


def _hard_events() -> list[dict[str, Any]]:
    events = []
    for i, name in enumerate(HARD_NAMES * 4):
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": 10 * i, "dur": 5, "tid": 1,
                       "args": {"note": name[::-1], "nested": [{"a": name}, {"b": [[1, 2], {"c": "}"}]}],
                                "Input Dims": [[2, 3], []], "correlation": i}})
        events.append({"ph": "i", "name": "x", "ts": 10 * i + 1, "s": "t", "args": {"deep": {"er": {"est": "]]"}}}})
    return events


def _hard_layouts() -> dict[str, bytes]:
    trace = {"schemaVersion": 1, "deviceProperties": [{"name": "}, {"}], "traceEvents": _hard_events(),
             "traceName": '"]}'}
    return {"one_line": json.dumps(trace).encode(),
            "raw_utf8_indent": json.dumps(trace, ensure_ascii=False, indent=3).encode(),
            "indent2_crlf": json.dumps(trace, indent=2).replace("\n", "\r\n").encode()}


@pytest.mark.parametrize("block", [7, 64, 1000])
def test_hard_strings_and_events_split_across_read_blocks(tmp_path: Path, block: int) -> None:
    # Small read blocks put a block boundary inside every kind of token of these events, many times over; small
    # batches make events longer than a batch.
    expected = _hard_events()
    for name, content in _hard_layouts().items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(content)
        events, header = _read(path, read_bytes=block, batch_bytes=2 * block)
        # The complete events, whole; the instants between them counted, never made.
        assert [(e.name, e.ph, e.ts, e.args.correlation if e.args else None) for e in events] == [
            (e["name"], e["ph"], e["ts"], e["args"].get("correlation")) for e in expected if e["ph"] == "X"], name
        assert json.loads(bytes(events[0].args.input_dims)) == [[2, 3], []]
        assert header.events == len(expected) and header.skipped == 0 and header.ends_early_at is None
        assert header.metadata == {"schemaVersion": 1, "deviceProperties": [{"name": "}, {"}]}


def test_the_structural_scan_on_strings_that_look_like_structure() -> None:
    events = _hard_events()[:6]
    values = b", ".join(json.dumps(e).encode() for e in events)
    last_end, closes = kineto._structure(values + b"]", 0)
    assert (last_end, closes) == (len(values), len(values))
    # Cut inside the last event's strings, anywhere: the end found is always the end of a whole event before it.
    starts = [values.index(json.dumps(e).encode()) for e in events]
    ends = [s + len(json.dumps(e)) for s, e in zip(starts, events, strict=True)]
    for cut in range(starts[-1], len(values)):
        assert kineto._structure(values[:cut], 0) == (ends[-2], -1), cut


@pytest.mark.parametrize("layout", ["one_line", "raw_utf8_indent"])
def test_a_file_cut_inside_an_event_is_read_up_to_it(tmp_path: Path, layout: str) -> None:
    # A copy of a trace still being written: every cut inside the event list keeps the events before the cut and
    # says where the first incomplete one starts, as the reader always has (read in 256-byte blocks).
    content = _hard_layouts()[layout]
    events = _hard_events()
    decoder = json.JSONDecoder()
    list_start = content.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    text = content.decode()
    starts, pos = [], len(content[:list_start].decode())
    for _ in events:  # the byte offset where each event starts, from the stdlib decoder on the whole text
        while text[pos] in " \t\r\n,":
            pos += 1
        starts.append(len(text[:pos].encode()))
        _, pos = decoder.raw_decode(text, pos)
    path = tmp_path / "cut.json"
    for index in range(1, len(events), 5):
        for cut in (starts[index] + 1, (starts[index] + starts[index + 1]) // 2 if index + 1 < len(events) else
                    starts[index] + 3):
            path.write_bytes(content[:cut])
            read, header = _read(path, read_bytes=256)
            assert len(read) == sum(e["ph"] == "X" for e in events[:index]) and header.events == index, (index, cut)
            assert header.ends_early_at == starts[index], (index, cut)
    path.write_bytes(content[: list_start + 5])  # inside the first event: nothing to summarise, refused
    with pytest.raises(UnreadableInput, match="truncated before its first complete event"):
        _read(path, read_bytes=256)


def test_invalid_json_between_events_is_an_error_with_its_place(tmp_path: Path) -> None:
    good = json.dumps({"traceEvents": _hard_events()})
    broken = good.replace('"ts": 50,', '"ts": 50,,', 1)
    (tmp_path / "bad.json").write_text(broken)
    with pytest.raises(UnreadableInput, match=r"invalid JSON .* at character (\d+)") as raised:
        _read(tmp_path / "bad.json")
    at = int(str(raised.value.message).rsplit(" ", 1)[-1].rstrip("."))
    assert broken.index('"ts": 50,,') < at < broken.index('"ts": 50,,') + 20
