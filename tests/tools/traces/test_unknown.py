"""summarize_trace when the honest answer is "cannot tell" (issue 30): a real trace cut while it was written, empty
and eventless traces, a CPU-only profile, a folder missing ranks, an export without its kernel table, files that
are no trace, nsys stats totals. Each asserts the severity, the coverage entry and what would decide."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import REPO, base_env, run_cli
from tools.core.context import ToolContext
from tools.core.errors import UnreadableInput
from tools.traces.summary import SummarizeTraceInput, SummarizeTraceResult, summarize_trace

RESNET = next((REPO / "tests" / "data" / "traces" / "resnet50_num_workers_0").glob("*.json.gz"))
SHARED = REPO.parent / "shared" / "data" / "traces"
NSYS = REPO / "tests" / "data" / "nsys" / "files"


def summarize(path: str, root: Path) -> SummarizeTraceResult:
    return anyio.run(summarize_trace, SummarizeTraceInput(path=path), ToolContext(roots=(root.resolve(),)))


def _x(cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


@pytest.fixture(scope="module")
def whole() -> SummarizeTraceResult:
    return summarize(RESNET.name, RESNET.parent)


def test_the_whole_real_trace_is_read_whole(whole: SummarizeTraceResult) -> None:
    assert (whole.severity, whole.bottleneck) == ("warn", "data_loading")
    assert [(c.input, c.status) for c in whole.coverage] == [(RESNET.name, "read")]
    assert whole.coverage[0].detail.startswith("44,665 timed events (9,096 on the GPU)")


@pytest.mark.parametrize("fraction", [0.5, 0.7, 0.8, 0.9])
def test_a_real_trace_cut_while_written_is_judged_on_its_complete_steps_or_not_at_all(
        fraction: float, whole: SummarizeTraceResult, tmp_path: Path) -> None:
    """Kineto writes the host ops first and the GPU work last: cut at 70 % of its text, the ResNet trace had all its
    host events and a sixth of its GPU work, and read as 52 % host_other with the GPU 6 % busy (the whole: data
    loading 35 %, busy 55 %). Now only the steps with all their events are judged, or none."""
    text = gzip.decompress(RESNET.read_bytes())
    (tmp_path / "cut.json").write_bytes(text[:int(len(text) * fraction)])
    cut = summarize("cut.json", tmp_path)
    assert cut.bottleneck != "host_other" and all(c.kind != "host_other" or c.share_pct < 10 for c in cut.causes)
    assert [(c.input, c.status) for c in cut.coverage] == [("cut.json", "partial")]
    assert cut.coverage[0].detail.startswith("ends early, at character ")
    assert "ends early" in " ".join(cut.conclusion)
    if fraction <= 0.7:  # no GPU event at 50 %; at 70 % the GPU work stops inside the first step
        assert (cut.severity, cut.bottleneck, cut.causes) == ("unknown", "unknown", [])
        assert cut.conclusion[1].startswith("Cannot judge why the GPU idles: cut.json ends early")
        assert cut.decides is not None and "once the profiler has finished writing it" in cut.decides
        assert cut.ranks[0].gpu_busy_pct is None
        return
    rank, lead = cut.ranks[0], cut.causes[0]
    assert (cut.severity, cut.bottleneck, lead.kind) == ("warn", "data_loading", "data_loading")
    assert abs(lead.share_pct - whole.causes[0].share_pct) < 3
    assert abs((rank.gpu_busy_pct or 0) - (whole.ranks[0].gpu_busy_pct or 0)) < 3
    assert 1 <= rank.steps < whole.ranks[0].steps + 1
    assert cut.conclusion[2].startswith(f"Only ProfilerSteps {rank.steps} of 6, where the host and GPU events are "
                                        "all present, are judged: cut.json ends early")


def test_a_gz_copy_cut_while_written_is_not_read_as_an_idle_gpu(whole: SummarizeTraceResult, tmp_path: Path) -> None:
    raw = RESNET.read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(raw[:int(len(raw) * 0.85)])
    cut = summarize("cut.json.gz", tmp_path)
    assert cut.coverage[0].status == "partial" and cut.bottleneck in ("data_loading", "unknown")
    if cut.bottleneck == "data_loading":
        assert abs((cut.ranks[0].gpu_busy_pct or 0) - (whole.ranks[0].gpu_busy_pct or 0)) < 3


@pytest.mark.parametrize(("content", "message"), [
    (b'{"traceEvents": []}', "its traceEvents list is empty"),
    (gzip.compress(b'{"schemaVersion": 1, "traceEvents": []}'), "its traceEvents list is empty"),
    (json.dumps({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
                                 {"ph": "i", "name": "mark", "ts": 5, "pid": 1, "tid": 1}]}).encode(),
     "none of its 2 trace entries is a complete event"),
    (gzip.compress(b""), "is empty"),
    (gzip.compress(b"{}"), "has no traceEvents"),
])
def test_an_empty_or_eventless_trace_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "t.json.gz").write_bytes(content)
    with pytest.raises(UnreadableInput, match=message):
        summarize("t.json.gz", tmp_path)


def test_an_empty_event_list_exits_3_on_the_cli(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    done = run_cli(["summarize-trace", "t.json", "--root", str(tmp_path), "--timeout", "20"], base_env())
    assert done.returncode == 3 and "its traceEvents list is empty" in done.stderr, (done.stdout, done.stderr)


def test_a_cpu_only_profile_cannot_say_when_the_gpu_idled(tmp_path: Path) -> None:
    # The real ResNet trace as ProfilerActivity.CPU alone records it: its host ops, no runtime calls, no GPU work.
    events = json.loads(gzip.decompress(RESNET.read_bytes()))["traceEvents"]
    host = [e for e in events if e.get("cat") not in ("Kernel", "Memcpy", "Memset", "Runtime")]
    (tmp_path / "cpu.json").write_text(json.dumps({"traceEvents": host}))
    result = summarize("cpu.json", tmp_path)
    assert (result.severity, result.bottleneck, result.causes) == ("unknown", "unknown", [])
    assert result.decides is not None and "ProfilerActivity.CUDA" in result.decides
    assert result.coverage[0].status == "partial" and "no GPU event" in result.coverage[0].detail
    assert result.ranks[0].data_wait_pct is not None and result.ranks[0].data_wait_pct > 30  # the host figure stays
    assert result.conclusion[1].startswith("Cannot judge why the GPU idles: cpu.json holds host events only")


def _straggler_rank(folder: Path, rank: int, wait: int, world: int) -> None:
    events = [_x("user_annotation", f"ProfilerStep#{i}", s, e - s) for i, (s, e) in enumerate(((0, 1000),
                                                                                              (1000, 1001)))]
    for name, ts, dur, corr, stream in (("gemm_kernel", 0, 1000 - wait, 1, 7),
                                        ("ncclDevKernel_AllReduce", 1000 - wait, wait, 2, 20)):
        events += [_x("cuda_runtime", "cudaLaunchKernel", ts - 5, 4, correlation=corr),
                   _x("kernel", name, ts, dur, pid=0, tid=stream, stream=stream, correlation=corr, device=0)]
    (folder / f"rank{rank}.json").write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": world},
                                                         "traceEvents": events}))


def test_a_folder_missing_ranks_says_how_many_were_seen(tmp_path: Path) -> None:
    # Ranks 0 and 2 of 4: rank 2 waits least, but rank 1 or 3, with no trace here, may be the one all wait for.
    for rank, wait in ((0, 600), (2, 100)):
        _straggler_rank(tmp_path, rank, wait, 4)
    result = summarize(".", tmp_path)
    straggler = next(c for c in result.causes if c.kind == "straggler")
    assert straggler.rank == 2 and "the latest of the 2 of 4 ranks traced here" in straggler.evidence
    assert result.conclusion[0].startswith("2 rank(s) of 4")
    assert result.conclusion[2] == ("Only 2 of the job's 4 ranks have a trace here (missing: 1,3), so what is said "
                                    "across ranks holds for those traced.")
    assert (".", "partial") in [(c.input, c.status) for c in result.coverage]


def test_busy_ranks_with_ranks_missing_are_not_ok(tmp_path: Path) -> None:
    for rank in (0, 2):
        _straggler_rank(tmp_path, rank, 0, 4)  # all compute: nothing to see on the ranks traced
    result = summarize(".", tmp_path)
    assert result.severity == "unknown" and result.decides is not None and "every rank" in result.decides
    assert result.bottleneck == "gpu_busy"  # of the ranks traced


def test_two_real_ranks_of_128_say_so() -> None:
    result = summarize("hta/trace_filter", SHARED)
    assert result.conclusion[0].startswith("2 rank(s) of 128")
    folder = next(c for c in result.coverage if c.input == "hta/trace_filter")
    assert folder.status == "partial" and folder.detail == ("traces of 2 of the job's 128 ranks; rank(s) 2-127 have "
                                                            "none here")
    assert [c.status for c in result.coverage if c.input != "hta/trace_filter"] == ["read", "read"]


def test_a_file_in_the_folder_that_is_no_trace_is_said_and_the_rest_read(tmp_path: Path) -> None:
    shutil.copy(RESNET, tmp_path / "worker0.pt.trace.json.gz")
    (tmp_path / "config.json").write_text('{"lr": 0.1, "epochs": 90}')
    result = summarize(".", tmp_path)
    by_input = {c.input: c for c in result.coverage}
    assert by_input["worker0.pt.trace.json.gz"].status == "read"
    assert by_input["config.json"].status == "not_understood" and "has no traceEvents" in by_input["config.json"].detail
    assert any("Kineto" in f for f in by_input["config.json"].formats_known or [])
    assert result.bottleneck == "data_loading"


def test_an_nsys_export_without_its_kernel_table_withholds_the_verdict(tmp_path: Path) -> None:
    export = tmp_path / "copies.sqlite"
    shutil.copy(NSYS / "fuser-cross-entropy-report1.sqlite", export)
    with sqlite3.connect(export) as connection:
        connection.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    result = summarize("copies.sqlite", tmp_path)
    assert (result.severity, result.bottleneck, result.causes) == ("unknown", "unknown", [])
    assert result.coverage[0].status == "partial" and "no CUPTI_ACTIVITY_KIND_KERNEL table" in result.coverage[0].detail
    assert result.decides is not None and "kernel table" in result.decides
    whole = summarize("fuser-cross-entropy-report1.sqlite", NSYS)
    assert whole.coverage[0].status == "read" and whole.bottleneck != "unknown"


def test_nsys_stats_totals_give_figures_but_no_verdict(tmp_path: Path) -> None:
    (tmp_path / "stats.csv").write_text(
        "Processing [report1.sqlite] with [/opt/nsys/reports/gpukernsum.py]...\n\n"
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),GridXYZ,BlockXYZ,Name\n"
        '100.0,2000000,4,500000.0,500000.0,400000,600000,81649.7,"   2    1    1","  512    1    1",add_kernel\n')
    result = summarize("stats.csv", tmp_path)
    assert (result.severity, result.bottleneck) == ("unknown", "unknown") and result.top_kernels
    assert result.coverage[0].status == "partial" and result.decides is not None and "sqlite" in result.decides


def test_a_rank_that_cannot_be_judged_is_left_out_of_the_causes_and_said(tmp_path: Path) -> None:
    shutil.copy(RESNET, tmp_path / "rank0.json.gz")
    events = json.loads(gzip.decompress(RESNET.read_bytes()))["traceEvents"]
    (tmp_path / "rank1.json").write_text(json.dumps({"traceEvents": [
        e for e in events if e.get("cat") not in ("Kernel", "Memcpy", "Memset", "Runtime")]}))
    result = summarize(".", tmp_path)
    assert (result.severity, result.bottleneck) == ("warn", "data_loading")
    assert result.causes[0].share_pct == 34.66  # rank 0's own share, not halved by the rank it cannot judge
    assert result.conclusion[2].startswith("Not judged: rank1.json holds host events only")
    assert result.conclusion[2].endswith("1 of 2 ranks are judged.")
    assert [(c.input, c.status) for c in result.coverage] == [("rank0.json.gz", "read"), ("rank1.json", "partial")]
