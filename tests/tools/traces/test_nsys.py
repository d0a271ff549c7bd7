"""summarize_trace on Nsight Systems SQLite exports: hand-built files in nsys's schema (the tables and columns of
real exports, shared/notes/nsys_format.md) with known intervals in and known shares out."""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import time
from pathlib import Path

import anyio
import pytest

from tests.helpers import base_env, pid_alive, stdio_client, structured
from tools.compare.runs import CompareRunsInput, compare_runs
from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, TriageError
from tools.stragglers import FindStragglersInput, find_stragglers
from tools.traces import nsys
from tools.traces.names import api_name, is_sync_call
from tools.traces.summary import SummarizeTraceInput, SummarizeTraceResult, summarize_trace

PID_A, PID_B = 144 << 24, 145 << 24  # globalPid: the pid in bits 24-47
SECRET = "hf_FAKEtestTOKENfor0redaction0check00"


class Export:
    """A minimal nsys export: the tables a capture with -t cuda,nvtx writes, in schema 3.x's columns."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.executescript("""
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,
                streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER,
                gridX INTEGER, blockX INTEGER, graphNodeId INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER,
                correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,
                streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER,
                srcKind INTEGER, dstKind INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,
                streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER, bytes INTEGER,
                graphNodeId INTEGER, memKind INTEGER);
            CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER, category INTEGER,
                color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
            CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, cuDevice INTEGER, busLocation TEXT);
            CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);
            CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
            CREATE TABLE DIAGNOSTIC_EVENT (timestamp INTEGER, timestampType INTEGER, source INTEGER, severity INTEGER,
                text TEXT, globalPid INTEGER);
        """)
        self.db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')")
        self.db.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                        (f"HF_TOKEN={SECRET}",))
        self.strings: dict[str, int] = {}
        self.corr = 1

    def string(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = len(self.strings) + 1
            self.db.execute("INSERT INTO StringIds VALUES (?, ?)", (self.strings[value], value))
        return self.strings[value]

    def kernel(self, pid: int, name: str, start_us: float, dur_us: float, stream: int = 7, device: int = 0,
               launch_us: float | None = None) -> None:
        corr, self.corr = self.corr, self.corr + 1
        ns = int(start_us * 1000), int((start_us + dur_us) * 1000)
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, 1, 128, NULL)",
                        (*ns, device, stream, corr, pid, self.string(name), self.string(name.split("(")[0])))
        launch = start_us - 5 if launch_us is None else launch_us
        self.runtime(pid, "cudaLaunchKernel_v7000", launch, 4, corr)

    def runtime(self, pid: int, name: str, start_us: float, dur_us: float, corr: int = 0) -> None:
        row = (int(start_us * 1000), int((start_us + dur_us) * 1000), 0, pid + 1, corr, self.string(name), 0, 0)
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        # 2022.x exports repeat every call as its backtrace (eventClass 67): it must count once.
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 67, ?, ?, ?, 0, 0)",
                        (row[0], row[1], row[3], corr, self.string(name.split("_v")[0])))

    def copy(self, pid: int, api: str, start_us: float, dur_us: float, kind: int, src: int, dst: int,
             size: int) -> None:
        corr, self.corr = self.corr, self.corr + 1
        self.runtime(pid, api, start_us, dur_us, corr)
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, ?, ?)",
                        (int(start_us * 1000) + 1000, int((start_us + dur_us) * 1000), corr, pid, size, kind, src,
                         dst))

    def memset(self, pid: int, api: str, start_us: float, dur_us: float, mem_kind: int) -> None:
        corr, self.corr = self.corr, self.corr + 1
        self.runtime(pid, api, start_us, dur_us, corr)
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, 0, 1, 7, ?, ?, 0, 4096, NULL, ?)",
                        (int(start_us * 1000) + 1000, int((start_us + dur_us) * 1000), corr, pid, mem_kind))

    def range(self, pid: int, text: str, start_us: float, end_us: float, registered: bool = False) -> None:
        text_id = self.string(text) if registered else None
        self.db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, 0, 0, 0, ?, ?, NULL, ?, 0)",
                        (int(start_us * 1000), int(end_us * 1000), None if registered else text, pid + 1, text_id))

    def graph_replay(self, pid: int, start_us: float, dur_us: float, launch_us: float, graph: int = 3) -> None:
        """One replay of a CUDA graph as --cuda-graph-trace=graph records it (2025.x's table), with its launch."""
        self.db.execute("CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, "
                        "deviceId INTEGER, contextId INTEGER, greenContextId INTEGER, streamId INTEGER, "
                        "correlationId INTEGER, globalPid INTEGER, graphId INTEGER, graphExecId INTEGER)")
        corr, self.corr = self.corr, self.corr + 1
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 1, NULL, 7, ?, ?, ?, 1)",
                        (int(start_us * 1000), int((start_us + dur_us) * 1000), corr, pid, graph))
        self.runtime(pid, "cudaGraphLaunch_v10000", launch_us, 3, corr)

    def close(self) -> None:
        self.db.commit()
        self.db.close()


def summarize(path: Path) -> SummarizeTraceResult:
    return anyio.run(summarize_trace, SummarizeTraceInput(path=path.name),
                     ToolContext(roots=(path.parent.resolve(),)))


def _two_rank_export(path: Path) -> Path:
    export = Export(path)
    export.db.execute("INSERT INTO TARGET_INFO_GPU VALUES (281474976710656, 0, 'NVIDIA H100 80GB HBM3', 0, '0000:1b')")
    for pid in (PID_A, PID_B):
        for i, base in enumerate((0, 1000, 2000)):
            export.range(pid, f"ProfilerStep#{i}", base, base + 1000, registered=pid == PID_B)
    # Rank A: each step waits 400 us for its DataLoader, then computes 600 us.
    for base in (0, 1000, 2000):
        export.range(PID_A, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", base, base + 400)
        export.kernel(PID_A, "sm90_xmma_gemm_bf16bf16_bf16f32(params)", base + 400, 600)
    # Rank B: compute 0-500, then an all-reduce with nothing beside it 500-800, then a sync the GPU idles in.
    for base in (0, 1000, 2000):
        export.kernel(PID_B, "sm90_xmma_gemm_bf16bf16_bf16f32(params)", base, 500)
        export.kernel(PID_B, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", base + 500,
                      300, stream=20, launch_us=base + 100)
        export.runtime(PID_B, "cudaStreamSynchronize_v3020", base + 800, 195)
    export.close()
    return path


def test_two_processes_of_one_export_are_two_ranks_with_their_causes(tmp_path: Path) -> None:
    result = summarize(_two_rank_export(tmp_path / "job.sqlite"))
    # Ranks in order of their first GPU work: process 145 computes from 0, process 144 waits for data first.
    assert [(r.rank, r.file) for r in result.ranks] == [(0, "job.sqlite (process 145)"),
                                                       (1, "job.sqlite (process 144)")]
    loader, reducer = result.ranks[1], result.ranks[0]
    assert (loader.steps, loader.step_time_ms, loader.gpu_busy_pct, loader.data_wait_pct) == (2, 1.0, 60.0, 40.0)
    assert (reducer.gpu_busy_pct, reducer.comm_pct, reducer.exposed_comm_pct) == (80.0, 30.0, 30.0)
    assert loader.device is not None and "H100" in loader.device
    by_kind = {c.kind: c for c in result.causes}
    assert by_kind["data_loading"].share_pct == 20.0 and by_kind["data_loading"].rank == 1  # 40 % on one of two
    assert by_kind["exposed_comm"].share_pct == 15.0 and by_kind["exposed_comm"].rank == 0
    # The sync (its backtrace row left out) is named once per step, under its plain name.
    assert "cudaStreamSynchronize x2" in by_kind["implicit_sync"].evidence
    kernels = {k.name: k for k in result.top_kernels}
    assert kernels["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"].kind == "comm"


def test_cuda_graph_replays_traced_at_graph_level_are_gpu_work_counted_once(tmp_path: Path) -> None:
    # Decode steps as CUDA graphs, traced at graph level: the kernel table holds only an eager 100 us kernel; each
    # step's 900 us replay is one GRAPH_TRACE row, launched 20 us ahead. Read, the GPU is 9/10 busy, not idle.
    export = Export(tmp_path / "graphs.sqlite")
    for i, base in enumerate((0, 1000, 2000, 3000)):
        export.range(PID_A, f"ProfilerStep#{i}", base, base + 1000)
        export.kernel(PID_A, "sampler_kernel(float*)", base, 100)
        export.graph_replay(PID_A, base + 100, 900, launch_us=base + 80)
    export.close()
    result = summarize(tmp_path / "graphs.sqlite")
    rank = result.ranks[0]
    assert (rank.steps, rank.gpu_busy_pct, rank.compute_pct) == (3, 100.0, 100.0)
    assert result.bottleneck == "gpu_busy" and not result.causes
    assert {k.name: k.count for k in result.top_kernels} == {
        "CUDA graph 3 (whole replay, graph-level trace)": 4, "sampler_kernel(float*)": 4}
    # Traced at node level the graph's kernels are in the kernel table (graphNodeId set): a replay row beside them
    # would count the same GPU time twice, so it is left out.
    export = Export(tmp_path / "nodes.sqlite")
    for i, base in enumerate((0, 1000, 2000)):
        export.range(PID_A, f"ProfilerStep#{i}", base, base + 1000)
        export.kernel(PID_A, "graph_node_gemm(float*)", base, 800)
        export.graph_replay(PID_A, base, 800, launch_us=base - 20)
    export.db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = 11")
    export.close()
    nodes = summarize(tmp_path / "nodes.sqlite")
    assert {k.name: k.count for k in nodes.top_kernels} == {"graph_node_gemm(float*)": 3}
    assert nodes.ranks[0].gpu_busy_pct == 80.0


def test_mpi_ranks_name_themselves_and_their_waits_in_mpi_are_exposed_communication(tmp_path: Path) -> None:
    # Two ranks of a CUDA-aware MPI job in one export, traced with -t cuda,mpi as 2021's nsys wrote it: the halo
    # exchange is an MPI_Sendrecv on the host (MPI_OTHER_EVENTS), each rank names a thread "MPI Rank N" (listed in
    # the opposite order of their first GPU work). Per 1000 us step: 600 us of kernels, then 300 us in
    # MPI_Sendrecv with the GPU idle; MPI_Init before the steps is start-up, not communication.
    export = Export(tmp_path / "mpi.sqlite")
    export.db.execute("CREATE TABLE MPI_OTHER_EVENTS (start INTEGER, end INTEGER, globalTid INTEGER, textId INTEGER)")
    for pid, rank, offset in ((PID_A, 1, 10), (PID_B, 0, 20)):
        export.db.execute("INSERT INTO NVTX_EVENTS VALUES (0, NULL, 39, NULL, NULL, NULL, ?, ?, NULL, NULL, 0)",
                          (f"MPI Rank {rank}", pid + 1))
        export.db.execute("INSERT INTO MPI_OTHER_EVENTS VALUES (?, ?, ?, ?)", (0, offset * 1000, pid + 1,
                                                                               export.string("MPI_Init")))
        for i, base in enumerate((offset, 1000 + offset, 2000 + offset)):
            export.range(pid, f"ProfilerStep#{i}", base, base + 1000)
            export.kernel(pid, "jacobi_kernel(float*)", base, 600)
            export.db.execute("INSERT INTO MPI_OTHER_EVENTS VALUES (?, ?, ?, ?)",
                              (int((base + 650) * 1000), int((base + 950) * 1000), pid + 1,
                               export.string("MPI_Sendrecv")))
    export.close()
    result = summarize(tmp_path / "mpi.sqlite")
    assert [(r.rank, r.file) for r in result.ranks] == [(0, "mpi.sqlite (process 145)"),
                                                       (1, "mpi.sqlite (process 144)")]
    for rank in result.ranks:
        assert (rank.gpu_busy_pct, rank.exposed_comm_pct, rank.comm_pct) == (60.0, 30.0, 0.0)
    exposed = next(c for c in result.causes if c.kind == "exposed_comm")
    assert exposed.share_pct == 30.0 and result.bottleneck == "exposed_comm"
    assert "while the host waited in MPI (MPI_Sendrecv x2)" in exposed.evidence


def test_the_environment_in_the_export_is_never_read(tmp_path: Path) -> None:
    result = summarize(_two_rank_export(tmp_path / "job.sqlite"))
    assert SECRET not in result.model_dump_json() and "HF_TOKEN" not in result.model_dump_json()


def test_a_capture_without_gpu_work_says_so_with_nsys_own_words(tmp_path: Path) -> None:
    export = Export(tmp_path / "empty.sqlite")
    export.db.execute("INSERT INTO DIAGNOSTIC_EVENT VALUES (1, 0, 0, 2, 'CUDA injection failed: no CUDA devices', 0)")
    export.range(PID_A, "ProfilerStep#0", 0, 1000)
    export.close()
    with pytest.raises(TriageError) as raised:
        summarize(tmp_path / "empty.sqlite")
    assert "no GPU work was traced" in raised.value.message
    assert "CUDA injection failed: no CUDA devices" in raised.value.message


@pytest.mark.parametrize(("content", "message"), [
    (b"SQLite format 3\x00" + b"\x00" * 84, "not a readable SQLite file"),
])
def test_a_broken_sqlite_file_is_a_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "broken.sqlite").write_bytes(content)
    with pytest.raises(TriageError) as raised:
        summarize(tmp_path / "broken.sqlite")
    assert message in raised.value.message


def test_an_sqlite_file_that_is_no_nsys_export(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "other.sqlite")
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    with pytest.raises(TriageError) as raised:
        summarize(tmp_path / "other.sqlite")
    assert "not an nsys export" in raised.value.message


def _big_export(path: Path, kernels: int) -> Path:
    """One process launching `kernels` 1.5 us kernels every 2 us: GPU busy 75 %, some seconds of reading."""
    export = Export(path)
    name, launch = export.string("sm90_gemm(params)"), export.string("cudaLaunchKernel_v7000")
    export.db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, 1, 128, NULL)",
                          ((i * 2000, i * 2000 + 1500, i, PID_A, name, name) for i in range(kernels)))
    export.db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, 0)",
                          ((i * 2000 - 600, i * 2000 - 100, PID_A + 1, i, launch) for i in range(kernels)))
    export.close()
    return path


def test_a_big_export_ends_at_the_calls_deadline_and_reads_whole_without_one(tmp_path: Path) -> None:
    path = _big_export(tmp_path / "big.sqlite", 400_000)
    context = ToolContext(roots=(tmp_path.resolve(),), timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as raised:
        anyio.run(summarize_trace, SummarizeTraceInput(path="big.sqlite"), context)
    # The reading thread itself stops (nothing is left running in the background), within a batch of the limit.
    assert time.monotonic() - started < 2.5
    assert raised.value.message == "reading big.sqlite ran out of time."
    assert summarize(path).ranks[0].gpu_busy_pct == 75.0


def test_one_statement_that_outlasts_the_deadline_is_aborted(tmp_path: Path) -> None:
    path = _two_rank_export(tmp_path / "job.sqlite")
    started = time.monotonic()
    with pytest.raises(LimitExceeded), nsys._open(path, "job.sqlite", started + 0.5) as connection:
        # Billions of rows counted inside SQLite: no row comes back to check the clock between.
        connection.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 10000000000) "
                           "SELECT count(*) FROM n").fetchone()
    assert time.monotonic() - started < 1.5


def test_a_fifo_in_place_of_an_export_is_refused_without_opening_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "job.sqlite")  # no writer ever comes: opening it for reading would wait forever
    with pytest.raises(BadInput) as raised:
        summarize(tmp_path / "job.sqlite")
    assert raised.value.message == "job.sqlite is neither a regular file nor a folder."
    with pytest.raises(BadInput) as raised:
        anyio.run(find_stragglers, FindStragglersInput(traces=["job.sqlite"]),
                  ToolContext(roots=(tmp_path.resolve(),)))
    assert raised.value.message == "job.sqlite is neither a regular file nor a folder."
    # In a folder, a FIFO is passed over like any other non-file.
    os.mkfifo(tmp_path / "rank1.json")
    (tmp_path / "rank0.sqlite").write_bytes(_two_rank_export(tmp_path / "made.sqlite").read_bytes())
    (tmp_path / "made.sqlite").unlink()
    (tmp_path / "job.sqlite").unlink()
    assert [r.rank for r in summarize(tmp_path).ranks] == [0, 1]


@pytest.mark.anyio
async def test_the_server_answers_after_an_export_ran_out_of_time(tmp_path: Path) -> None:
    _big_export(tmp_path / "big.sqlite", 400_000)
    _two_rank_export(tmp_path / "small.sqlite")
    async with stdio_client(base_env(), "--root", str(tmp_path), "--timeout", "1") as client:
        first = await client.call_tool("summarize_trace", {"path": "big.sqlite"})
        assert first.is_error
        assert "ran out of time" in first.content[0].text or "did not finish within 1 s" in first.content[0].text
        again = structured(await client.call_tool("summarize_trace", {"path": "small.sqlite"}))
        assert len(again["ranks"]) == 2


@pytest.mark.anyio
async def test_an_nsys_export_that_never_ends_is_killed_at_the_deadline(tmp_path: Path) -> None:
    # Fault injection, not a stand-in: an `nsys` on PATH that hangs (a real process that never exits, as an nsys
    # stuck on a network filesystem would) and records its pid.
    tools_dir, pidfile = tmp_path / "bin", tmp_path / "nsys.pid"
    tools_dir.mkdir()
    (tools_dir / "nsys").write_text(f"#!{sys.executable}\nimport os, time\n"
                                    f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(3600)\n")
    (tools_dir / "nsys").chmod(0o755)
    (tmp_path / "job.nsys-rep").write_bytes(b"\x00" * 64)
    _two_rank_export(tmp_path / "small.sqlite")
    env = base_env(PATH=f"{tools_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    async with stdio_client(env, "--root", str(tmp_path), "--timeout", "2") as client:
        started = time.monotonic()
        first = await client.call_tool("summarize_trace", {"path": "job.nsys-rep"})
        assert first.is_error and time.monotonic() - started < 10
        assert "did not finish within 2 s" in first.content[0].text
        assert not pid_alive(int(pidfile.read_text()))
        again = structured(await client.call_tool("summarize_trace", {"path": "small.sqlite"}))
        assert len(again["ranks"]) == 2


def test_nvidia_rules_with_nvidias_names_and_thresholds(tmp_path: Path) -> None:
    export = Export(tmp_path / "rules.sqlite")
    # Two kernels 600 ms apart (one gpu_gaps gap; each of the 30 windows under 50 % time utilisation).
    export.kernel(PID_A, "void kernel_a()", 0, 100)
    export.kernel(PID_A, "void kernel_b()", 600_100, 100)
    # Synchronisation calls: two stream syncs of 1 ms, one device sync of 2 ms (cuda_api_sync).
    export.runtime(PID_A, "cudaStreamSynchronize_v3020", 1_000, 1_000)
    export.runtime(PID_A, "cudaStreamSynchronize_v3020", 3_000, 1_000)
    export.runtime(PID_A, "cudaDeviceSynchronize_v3020", 5_000, 2_000)
    # An async copy from pageable memory (cuda_memcpy_async); a synchronous device-to-host copy (cuda_memcpy_sync),
    # and a small synchronous host-to-device one that NVIDIA leaves out; a synchronous memset of pinned memory.
    export.copy(PID_A, "cudaMemcpyAsync_v3020", 10_000, 500, kind=1, src=0, dst=2, size=1_000_000)
    export.copy(PID_A, "cudaMemcpy_v3020", 20_000, 1_000, kind=2, src=2, dst=0, size=4)
    export.copy(PID_A, "cudaMemcpy_v3020", 30_000, 1_000, kind=1, src=0, dst=2, size=1_000)
    export.memset(PID_A, "cudaMemset_v3020", 40_000, 300, mem_kind=1)
    export.close()
    rules = {r.rule: r for r in summarize(tmp_path / "rules.sqlite").nsys_rules}
    # The gap runs from the memset's end (40.3 ms: the copies and the memset are GPU work too) to kernel_b.
    assert (rules["gpu_gaps"].count, rules["gpu_gaps"].time_ms) == (1, 559.8)
    # All 30 windows of the span are under 50 %: one run of adjacent windows, as NVIDIA reports it.
    assert (rules["gpu_time_util"].count, rules["gpu_time_util"].time_ms) == (1, 600.2)
    assert (rules["cuda_api_sync"].count, rules["cuda_api_sync"].time_ms) == (3, 4.0)
    assert "cudaStreamSynchronize x2 (2.0 ms)" in rules["cuda_api_sync"].evidence
    assert (rules["cuda_memcpy_async"].count, rules["cuda_memcpy_async"].time_ms) == (1, 0.5)
    assert (rules["cuda_memcpy_sync"].count, rules["cuda_memcpy_sync"].time_ms) == (1, 1.0)
    assert (rules["cuda_memset_sync"].count, rules["cuda_memset_sync"].time_ms) == (1, 0.3)


def _loader_run(path: Path, wait_us: float, seed: int) -> Path:
    """One process, 13 ProfilerSteps: the DataLoader holds the GPU for `wait_us`, then 600 us (+ noise) of compute."""
    rng = random.Random(seed)
    export, t = Export(path), 0.0
    for i in range(13):
        compute = 600 + rng.uniform(-20, 20)
        export.range(PID_A, f"ProfilerStep#{i}", t, t + wait_us + compute)
        export.range(PID_A, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, t + wait_us)
        export.kernel(PID_A, "void cutlass_gemm_kernel", t + wait_us, compute)
        t += wait_us + compute
    export.close()
    return path


def test_compare_runs_on_a_before_after_pair_of_exports(tmp_path: Path) -> None:
    _loader_run(tmp_path / "before.sqlite", 400, 1)
    _loader_run(tmp_path / "after.sqlite", 50, 2)
    result = anyio.run(compare_runs, CompareRunsInput(before="before.sqlite", after="after.sqlite"),
                       ToolContext(roots=(tmp_path.resolve(),)))
    assert result.verdict == "improved" and result.speedup is not None and result.speedup > 1.5
    loading = next(c for c in result.causes if c.kind == "data_loading")
    assert loading.status == "reduced" and (loading.before_ms, loading.after_ms) == (0.4, 0.05)


def test_steps_from_the_jobs_own_ranges(tmp_path: Path) -> None:
    # A job that marks its steps 'train_step N' (NVTX): with step_range they are the steps; the optimizer's
    # 'Optimizer.step' op inside them is not.
    export = Export(tmp_path / "own.sqlite")
    for i, base in enumerate((0, 1000, 2000)):
        export.range(PID_A, f"train_step {i}", base, base + 1000)
        export.range(PID_A, "Optimizer.step#AdamW.step", base + 900, base + 950)
        export.kernel(PID_A, "void cutlass_gemm_kernel", base + 100, 500)
    export.close()
    context = ToolContext(roots=(tmp_path.resolve(),))
    plain = anyio.run(summarize_trace, SummarizeTraceInput(path="own.sqlite"), context)
    assert plain.ranks[0].steps == 0 and "no ProfilerStep" in plain.ranks[0].window
    named = anyio.run(summarize_trace, SummarizeTraceInput(path="own.sqlite", step_range=r"^train_step \d+$"),
                      context)
    assert (named.ranks[0].steps, named.ranks[0].step_time_ms, named.ranks[0].gpu_busy_pct) == (2, 1.0, 50.0)


def test_a_step_range_re2_cannot_take_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="step_range is not a pattern RE2 can take"):
        SummarizeTraceInput(path="x.sqlite", step_range="(unclosed")


def test_a_report_without_an_nsys_to_export_it_says_the_command(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A .nsys-rep (the bytes a 2026.1 report starts with) where no nsys is on PATH: the error names the export to run.
    (tmp_path / "report1.nsys-rep").write_bytes(b"NVIDIA Tegra Profiler Report 2026@1@2@63-261237296639v0" + bytes(64))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TriageError) as raised:
        summarize(tmp_path / "report1.nsys-rep")
    assert "no nsys is on PATH" in raised.value.message
    assert "nsys export --type sqlite --output report1.sqlite report1.nsys-rep" in raised.value.hint


def test_find_stragglers_reads_the_ranks_of_an_export(tmp_path: Path) -> None:
    # Two processes, 8 steps of 1 ms: process 144 computes 600 us and waits 400 us in NCCL for process 145,
    # which computes 950 us (+ noise): the rank that waits least is the slow one.
    export, rng = Export(tmp_path / "job.sqlite"), random.Random(3)
    for i in range(8):
        base = 1000.0 * i
        for pid, compute in ((PID_A, 600.0), (PID_B, 950.0 + rng.uniform(-5, 5))):
            export.range(pid, f"ProfilerStep#{i}", base, base + 1000)
            export.kernel(pid, "void cutlass_gemm_kernel", base, compute)
            export.kernel(pid, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                          base + compute, 1000 - compute - 10, stream=20)
    export.close()
    result = anyio.run(find_stragglers, FindStragglersInput(traces=["job.sqlite"]),
                       ToolContext(roots=(tmp_path.resolve(),)))
    rows = {r.rank: r for r in result.ranks}
    assert set(rows) == {0, 1} and rows[0].steps == rows[1].steps == 8
    # Ranks in order of first GPU work: both start at 0, process 144 first in the file. Rank 1 (process 145)
    # computes ~950 us and waits ~40; rank 0 computes 600 and waits 390.
    assert rows[0].wait_ms == pytest.approx(0.39, abs=0.01) and rows[1].wait_ms == pytest.approx(0.04, abs=0.01)
    assert [f.rank for f in result.flagged] == [1] and result.waited_on_rank == 1


# nsys stats CSV of the three header generations (shared/notes/nsys_format.md 2.2), as nsys prints them.
STATS_2020 = """Using report1.sqlite export for stats reports.
Exporting [/usr/bin/nsys/reports/gpukernsum.py report1.sqlite] to console...

Time(%),Total Time (ns),Instances,Average,Minimum,Maximum,Name
75.0,3000000,3,1000000.0,900000,1100000,volta_sgemm_128x64_nn
25.0,1000000,10,100000.0,90000,110000,"ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"

Time(%),Total Time (ns),Num Calls,Average,Minimum,Maximum,Name
90.0,9000000,2,4500000.0,4000000,5000000,cudaStreamSynchronize
10.0,1000000,13,76923.1,5000,100000,cudaLaunchKernel
"""
STATS_2022 = """Processing [report1.sqlite] with [/opt/nsys/reports/gpukernsum.py]...

Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),GridXYZ,BlockXYZ,Name
100.0,2000000,4,500000.0,500000.0,400000,600000,81649.7,"   2    1    1","  512    1    1",add_kernel

Processing [report1.sqlite] with [/opt/nsys/reports/osrtsum.py]...

Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
99.0,500000000,10,50000000.0,50000000.0,1000,99000000,1000.0,poll
1.0,5000000,4,1250000.0,1250000.0,1000,2000000,100.0,pthread_cond_wait
"""


@pytest.mark.parametrize(("text", "kernels", "kernel_ms", "api_ms", "sync_ms"), [
    (STATS_2020, [("volta_sgemm_128x64_nn", 3, 3.0), ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 10, 1.0)],
     4.0, 10.0, 9.0),
    # 2022.4: GridXYZ/BlockXYZ columns; the OS-runtime table (poll, pthread_*) is not the CUDA API.
    (STATS_2022, [("add_kernel", 4, 2.0)], 2.0, 0.0, 0.0),
])
def test_nsys_stats_tables_of_each_generation(tmp_path: Path, text: str, kernels: list[tuple[str, int, float]],
                                              kernel_ms: float, api_ms: float, sync_ms: float) -> None:
    (tmp_path / "stats.csv").write_text(text)
    result = summarize(tmp_path / "stats.csv")
    assert result.nsys_stats is not None
    assert [(r.name, r.count, r.total_ms) for r in result.nsys_stats.kernels] == kernels
    assert (result.nsys_stats.kernel_ms, result.nsys_stats.api_ms, result.nsys_stats.sync_api_ms) == (
        kernel_ms, api_ms, sync_ms)
    assert result.ranks == [] and "cannot show steps" in result.notes[0]
    assert {k.name: k.kind for k in result.top_kernels}.get(
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "comm") == "comm"


@pytest.mark.parametrize(("raw", "sync"), [
    ("cudaStreamSynchronize_v3020", True), ("cuStreamSynchronize", True), ("cuCtxSynchronize", True),
    ("cudaDeviceSynchronize", True), ("hipDeviceSynchronize", True), ("cudaMemcpy_v3020", True),
    ("cuMemcpyDtoH_v2", True), ("cudaMemcpyAsync_v3020", False), ("cuMemcpyDtoHAsync_v2", False),
    ("cudaLaunchKernel_v7000", False), ("cudaStreamWaitEvent", False),
])
def test_which_runtime_and_driver_calls_block_the_host(raw: str, sync: bool) -> None:
    assert is_sync_call(api_name(raw)) is sync


def test_only_the_last_version_suffix_is_a_suffix() -> None:
    assert api_name("cudaGetDeviceProperties_v2_v12000") == "cudaGetDeviceProperties_v2"
