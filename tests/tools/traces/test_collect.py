"""tools.traces.collect: the host-span columns keep what was added, and `around` keeps exactly the spans that hold
a call's start on their own thread."""

from __future__ import annotations

from tools.traces.collect import HostOps
from tools.traces.compute import FlopCounter, achieved


def _ops(rows: list[tuple[float, float, object, str]]) -> HostOps:
    ops = HostOps()
    for row in rows:
        ops.add(*row)
    return ops


def test_columns_round_trip_names_and_threads() -> None:
    ops = _ops([(0, 5, 7, "aten::to"), (1, 2, "main", "aten::copy_"), (3, 9, 7, "aten::to")])
    ts, end, thread, name = ops.columns()
    assert (ts.tolist(), end.tolist()) == ([0, 1, 3], [5, 2, 9])
    assert [ops.threads[i] for i in thread] == [7, "main", 7]
    assert [ops.names[i] for i in name] == ["aten::to", "aten::copy_", "aten::to"]
    assert list(ops.spans()) == [(0.0, 9.0)]


def test_around_keeps_the_spans_holding_a_call_on_their_thread() -> None:
    ops = _ops([(0, 10, 1, "aten::item"), (20, 30, 1, "aten::to"), (40, 50, 2, "aten::copy_"),
                (45, 46, 1, "aten::cpu"), (60, 70, 1, "aten::to")])
    calls = _ops([(5, 6, 1, "cudaStreamSynchronize"), (45, 47, 2, "cudaMemcpy"), (70, 71, 1, "cudaMemcpy"),
                  (25, 26, 3, "cudaStreamSynchronize")])
    kept = ops.around(calls)
    ts, end, thread, name = kept.columns()
    # Thread 1's call at 5 is inside [0, 10]; thread 2's at 45 inside [40, 50]; thread 1's at 70 on the edge of
    # [60, 70]; the call at 25 is on thread 3, so [20, 30] on thread 1 goes, and so does [45, 46] on thread 1.
    assert ts.tolist() == [0, 40, 60]
    assert [kept.names[i] for i in name] == ["aten::item", "aten::copy_", "aten::to"]
    assert [kept.threads[i] for i in thread] == [1, 2, 1]
    assert len(ops.around(HostOps())) == 0 and len(HostOps().around(calls)) == 0


def test_flops_outside_the_window_are_no_figure_not_zero() -> None:
    # Issue 34: the report printed 'TFLOP/s 0.0' when the trace's counted ops all fell outside the analysed steps.
    counter = FlopCounter()
    counter.ts.append(10.0)
    counter.flops.append(2e12)
    counter.sources.add("with_flops")
    outside = achieved(counter, 1000.0, 2000.0, "NVIDIA A100-SXM4-80GB")
    assert outside.tflops is None and outside.mfu_pct is None and "cannot be told" in (outside.note or "")
    inside = achieved(counter, 0.0, 1_000_000.0, "NVIDIA A100-SXM4-80GB")
    assert inside.tflops == 2.0
