"""The columnar collect (issue 33): numpy over a chunk's fields gives the same columns, in the same order and with the
same number types, as the per-event loop that judges odd values one by one, on every committed trace (Kineto and
Nsight Systems) and whatever the chunk size; chunks with odd values (numbers as strings, bools, nulls, huge numbers,
lists) take the loop and still agree; the reader makes only complete events and counts the others."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO
from tools.traces.collect import Collected, HostOps, collect_events
from tools.traces.kineto import TraceEvent, TraceHeader, read_trace, read_trace_batches
from tools.traces.nsys import nsys_processes, read_nsys_batches

KINETO = sorted((REPO / "tests/data/traces").rglob("*.json.gz"))
# jacc-report1 holds no GPU work: refused before any event is read (tests/tools/traces/test_nsys.py).
NSYS = sorted(p for p in (REPO / "tests/data/nsys/files").glob("*.sqlite") if p.name != "jacc-report1.sqlite")


def _host(ops: HostOps) -> tuple[Any, ...]:
    return (ops.ts.tolist(), ops.end.tolist(), [ops.threads[i] for i in ops.thread],
            [ops.names[i] for i in ops.name])


def _typed(value: Any) -> Any:
    """A value with the type of every number in it: 5 and 5.0 differ, as they may in what is shown."""
    if isinstance(value, list | tuple):
        return [_typed(v) for v in value]
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    return (type(value).__name__, value)


def snapshot(data: Collected) -> dict[str, Any]:
    """Everything collect_events fills, dict keys in their order."""
    return {
        "gpu": (data.gpu_ts.tolist(), data.gpu_end.tolist(), bytes(data.gpu_kind), bytes(data.gpu_comm),
                data.gpu_corr.tolist()),
        "runtime": (data.runtime_corr.tolist(), data.runtime_ts.tolist()),
        "steps": _typed(data.steps), "dataloader": _typed(data.dataloader),
        "host": [_host(ops) for ops in (data.syncs, data.sync_ops, data.long_ops, data.host_comm)],
        "launches": (data.launch_durations.tolist(), data.graph_launches),
        "kernels": list(_typed(data.kernels).items()), "histogram": list(data.kernel_durations.items()),
        "span": _typed(data.cpu_span), "last": list(_typed(data.last_start).items()),
        "flops": (data.flops.ts.tolist(), data.flops.flops.tolist(), list(data.flops.by_precision.items()),
                  list(data.flops.gemm_time.items()), sorted(data.flops.sources), data.flops.convolutions),
        "counts": (data.device, data.events, data.skipped, data.float_ts),
    }


def _batches(path: Path, small: bool = False) -> list[list[TraceEvent]]:
    """The reader's batches; `small` ones (reads of 2 KiB, batches of 512 bytes) of a few events each."""
    sizes = {"read_bytes": 2048, "batch_bytes": 512} if small else {}
    return list(read_trace_batches(path, path.name, time.monotonic() + 60, TraceHeader(), **sizes))


def _agree(batches: list[list[TraceEvent]], chunk_events: int = 8192) -> dict[str, Any]:
    loop = snapshot(collect_events(batches, columnar=False))
    columns = snapshot(collect_events(batches, chunk_events=chunk_events))
    for key in loop:
        assert columns[key] == loop[key], key
    return loop


@pytest.mark.parametrize("path", KINETO, ids=[p.name.split(".")[0] for p in KINETO])
def test_kineto_traces_give_the_loops_columns(path: Path) -> None:
    found = _agree(_batches(path))
    assert found["counts"][1] > 100 and found["gpu"][0]  # timed events, GPU work among them


@pytest.mark.parametrize("path", NSYS, ids=[p.stem for p in NSYS])
def test_nsys_exports_give_the_loops_columns(path: Path) -> None:
    deadline = time.monotonic() + 60
    for process in nsys_processes(path, path.name, deadline):
        _agree(list(read_nsys_batches(path, process, path.name, deadline, TraceHeader())))


def test_any_chunk_size_gives_the_same_columns() -> None:
    # Chunks of one event, of a prime number of them, and of a whole trace: the same running sums, first-met orders,
    # latest starts and first device.
    batches = _batches(REPO / "tests/data/traces/wild/files/t1-tracelens-qwen05b-h100.json.gz", small=True)
    assert max(map(len, batches)) < 16
    whole = snapshot(collect_events(batches))
    for size in (1, 7, 10**9):
        assert snapshot(collect_events(batches, chunk_events=size)) == whole, size


def _event(**fields: Any) -> dict[str, Any]:
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 100, "dur": 20, "tid": 1, "args": {}}
    event.update(fields)
    return event


# Every odd value the loop has a meaning for: numbers as strings, bools, nulls, NaN-like strings, numbers past a
# float and past int64, lists and dicts where strings go, a stream as a string.
ODD = [
    _event(ts="150"), _event(dur="7.5"), _event(ts=True), _event(dur=None), _event(cat=None), _event(cat=["x"]),
    _event(name=None), _event(name={"a": 1}), _event(ts=10**400), _event(dur=-(2**70)), _event(ts="nan"),
    _event(cat="kernel", name="volta_sgemm_128x64_nn", args={"stream": "7", "correlation": 5, "device": 0}),
    _event(cat="kernel", name="ncclKernel_AllReduce", args={"stream": True, "correlation": 6}),
    _event(cat="kernel", name="ampere_bf16_gemm", args={"stream": 7, "correlation": 2**64, "device": 1}),
    _event(cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": 2**64}),
    _event(cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": 6}),
    _event(cat="kernel", name="ampere_bf16_gemm", dur=2.5, args={"stream": 7, "correlation": 6}),
    _event(cat="Trace", name="PyTorch Profiler"), _event(cat="gpu_user_annotation", name="ProfilerStep#1"),
    _event(name="ProfilerStep#1", cat="user_annotation", ts=0, dur=1000),
    _event(args={"Input Dims": [[4, 8], [8, 16]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}),
    _event(name="aten::conv2d", args={"flops": 1e9}), _event(name="aten::add", args={"flops": "12"}),
]


def _normal(i: int) -> dict[str, Any]:
    """Ordinary events between the odd ones: host ops, launches and kernels with numbers of both types."""
    base = 1000 + 10 * i
    return [_event(name="aten::to", ts=base, dur=150 + i % 3),
            _event(cat="cuda_runtime", name="cudaStreamSynchronize" if i % 5 == 0 else "cudaLaunchKernel",
                   ts=base + 1, dur=3, args={"correlation": i}),
            _event(cat="kernel", name=f"kernel_{i % 4}_gemm_fp16", ts=base + 2.5 if i % 2 else base + 2, dur=4,
                   args={"stream": 7, "correlation": i, "device": 0})][i % 3]


def _write(tmp_path: Path, events: list[Any]) -> Path:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_odd_values_anywhere_take_the_loop_and_agree(tmp_path: Path) -> None:
    events = [_normal(i) for i in range(400)]
    for k, odd in enumerate(ODD):
        events.insert(17 * k + 3, odd)
    batches = _batches(_write(tmp_path, events), small=True)
    # Chunks of about 16 events: some all ordinary (numpy), some with an odd value (the loop), in turn.
    assert max(map(len, batches)) < 16
    found = _agree(batches, chunk_events=16)
    device, counted, skipped, float_ts = found["counts"]
    # Skipped: true, null, 10**400 and -(2**70) as a time, "nan", no category, a list as category; the string "150"
    # and "7.5" are numbers to the loop.
    assert (skipped, float_ts, device) == (7, True, 0)
    assert counted == len(events) - skipped - 1  # the profiler's own span is no event
    # A correlation id past int64 links nothing (it was an OverflowError): the launch with id 6 is the last one.
    assert 2**64 not in found["runtime"][0] and found["runtime"][0].count(6) == 1
    assert -1 in found["gpu"][4]


def test_the_reader_makes_only_complete_events_and_counts_every_phase(tmp_path: Path) -> None:
    events = [_normal(i) for i in range(50)]
    others = [{"ph": "f", "id": 3, "ts": 5, "cat": "ac2g", "name": "flow"}, {"ph": "i", "s": "t", "name": "mark"},
              {"ph": "M", "name": "process_name", "args": {"name": "py"}}]
    mixed: list[Any] = [e for i, event in enumerate(events) for e in ([event, others[i % 3]])]
    header = TraceHeader()
    read = list(read_trace(_write(tmp_path, mixed), "trace.json.gz", time.monotonic() + 60, header))
    assert [(e.name, e.ts) for e in read] == [(e["name"], e["ts"]) for e in events]
    assert all(e.ph == "X" for e in read) and header.events == len(mixed) and header.skipped == 0
    # A phase the Chrome format does not have, or none, and an entry that is no object, in the batch: it takes the
    # slower decodes, and gives the same complete events.
    odd: list[Any] = [*mixed[:30], {"ph": "Z", "name": "new"}, {"name": "no phase", "ts": 1}, 5, *mixed[30:]]
    header = TraceHeader()
    again = list(read_trace(_write(tmp_path, odd), "trace.json.gz", time.monotonic() + 60, header))
    assert [(e.name, e.ts, e.dur) for e in again] == [(e.name, e.ts, e.dur) for e in read]
    assert (header.events, header.skipped) == (len(mixed) + 2, 1)

