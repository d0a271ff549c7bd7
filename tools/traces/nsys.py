"""Nsight Systems SQLite exports (`nsys export --type sqlite`, or the file `nsys stats` leaves), read as the same
events a Kineto trace gives, so summarize_trace's breakdown, causes and verdicts apply unchanged.

The export's schema (2.9 to 3.25 seen; notes in shared/notes/nsys_format.md): names are StringIds ids, times are
integer nanoseconds on the session clock, tables exist only when their data was traced, rows need not be in
time order, and correlation ids are unique per process only. Each process that ran GPU work is one rank (torchrun
under one nsys puts every rank in one file). What this reads, per process:
- CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET -> GPU events (kernel, gpu_memcpy, gpu_memset), on their stream;
- CUPTI_ACTIVITY_KIND_RUNTIME -> cuda_runtime calls, the `_vNNNN` suffix stripped, the 2022.x duplicate rows
  (eventClass 67, CUDA backtrace) left out;
- NVTX_EVENTS push/pop and start/end ranges -> user_annotation ranges (ProfilerStep#N makes the steps), the name
  being the registered string (textId) or the inline text;
- TARGET_INFO_GPU -> the device names.
The file is opened read-only and immutable, with SQL doing the joins and the ordering, a batch of rows at a time:
never the whole file in memory. META_DATA_CAPTURE (the profiled process's whole environment), the export
parameters and TARGET_INFO_SYSTEM_ENV are never read.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from tools.core.errors import LimitExceeded, TriageError, Unavailable, UnreadableInput
from tools.core.files import read_regular, require_regular
from tools.core.thresholds import NSYS_GAP_MS, NSYS_SMALL_HTOD_BYTES, NSYS_UTIL_CHUNKS, NSYS_UTIL_PCT
from tools.traces.kineto import TraceArgs, TraceEvent, TraceHeader
from tools.traces.names import api_name

if TYPE_CHECKING:  # imported where an export is read: a Kineto trace's call needs neither (start-up time)
    import sqlite3

__all__ = ["REPORT_SUFFIXES", "NsysRule", "exported_reports", "is_nsys_export", "nsys_has_kernels", "nsys_processes",
           "nsys_ranks", "nsys_rules", "read_nsys_batches"]

_MAGIC = b"SQLite format 3\x00"
_BATCH_ROWS = 20_000
_PROGRESS_STEPS = 10_000  # SQLite VM steps between deadline checks: well under a millisecond each
_PID_MASK = ~0xFFFFFF  # globalTid -> globalPid: the thread id is the low 24 bits
_GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
# ENUM_CUDA_MEMCPY_OPER and ENUM_CUDA_MEM_KIND, hard-coded: exports before schema 3.0 have no ENUM tables.
_COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
              10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device", 6: "Managed"}
_NVTX_RANGES = (59, 60, 70, 71)  # NvtxPushPopRange, NvtxStartEndRange and their NVTXT forms
_NVTX_THREAD_NAME = 39  # NvtxThread: nvtxNameOsThread
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")
_MPI_TABLES = ("MPI_P2P_EVENTS", "MPI_COLLECTIVES_EVENTS", "MPI_START_WAIT_EVENTS", "MPI_OTHER_EVENTS")
# torch.autograd.profiler.emit_nvtx names each op 'aten::mm, op_id = 17' (', seq = 3, sizes = [...]' too): the op
# is 'aten::mm', as Kineto names it.
_AUTOGRAD_ID = re.compile(r", (?:op_id|seq|sizes|input_op_ids) = .*$")


REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


@asynccontextmanager
async def exported_reports(files: list[Path], timeout_s: float) -> AsyncIterator[list[Path]]:
    """The files, each Nsight Systems report (.nsys-rep, .qdrep) replaced by its SQLite export, made by the nsys
    on PATH in a private temporary folder that is deleted on the way out."""
    if not any(f.name.endswith(REPORT_SUFFIXES) for f in files):
        yield files
        return
    with tempfile.TemporaryDirectory(prefix="gpu-triage-nsys-") as folder:
        readable = []
        for file in files:
            if not file.name.endswith(REPORT_SUFFIXES):
                readable.append(file)
                continue
            stem = file.name.rsplit(".", 1)[0]
            target = Path(folder) / f"{stem}.sqlite"
            how = (f"Export it with the nsys that made it: nsys export --type sqlite --output {stem}.sqlite "
                   f"{file.name}, and pass the .sqlite.")
            from tools.core.proc import run_program  # only a report's call starts a program

            try:
                done = await run_program("nsys", ["export", "--type", "sqlite", "--force-overwrite", "true",
                                                  "--output", str(target), str(file)], timeout_s=timeout_s)
            except Unavailable as exc:
                raise UnreadableInput(f"{file.name} is an Nsight Systems report, and no nsys is on PATH to export "
                                      "it.", how) from exc
            if done.returncode != 0 or not target.is_file():
                said = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
                raise UnreadableInput(f"nsys could not export {file.name}: {said[-1][:300] if said else 'no output'}.",
                                      f"{how} A report newer than this nsys needs that newer nsys.")
            readable.append(target)
        yield readable


def is_nsys_export(path: Path) -> bool:
    """Whether the file is an SQLite database (an nsys export; other SQLite files fail later, clearly)."""
    try:
        return read_regular(path, len(_MAGIC)) == _MAGIC
    except TriageError:
        return False


def _out_of_time(display: str) -> LimitExceeded:
    return LimitExceeded(f"reading {display} ran out of time.", "Pass a smaller export or raise --timeout.")


@contextmanager
def _open(path: Path, display: str, deadline: float) -> Iterator[sqlite3.Connection]:
    """The export, read-only, every statement on it aborted once the call's deadline passes."""
    import sqlite3

    require_regular(path, display)  # SQLite opens the path itself, and would wait on a FIFO
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    # A damaged or foreign string column must not stop the read: invalid UTF-8 is shown, replaced.
    connection.text_factory = lambda raw: raw.decode("utf-8", "replace")
    # One statement (a sort or join over a 1 GB export) can run for minutes between two rows; SQLite calls the
    # handler every few thousand VM steps and aborts the statement when it returns nonzero.
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
    try:
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            if time.monotonic() <= deadline:
                raise UnreadableInput(f"{display}: not a readable SQLite file ({exc}).",
                                      "Pass an nsys export: nsys export --type sqlite REPORT.nsys-rep") from exc
            raise
        yield connection
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline:
            raise _out_of_time(display) from exc
        raise _damaged(display, exc) from exc
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # a page that fails its checks half way through a
        raise _damaged(display, exc) from exc  # query, or a name SQLite returns in invalid UTF-8
    finally:
        connection.close()


def _damaged(display: str, exc: Exception) -> UnreadableInput:
    return UnreadableInput(f"{display}: the SQLite export is damaged ({exc}).",
                           "Export it again from the report: nsys export --type sqlite REPORT.nsys-rep")


def _tables(connection: sqlite3.Connection) -> dict[str, set[str]]:
    names = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {name: {row[1] for row in connection.execute(f'PRAGMA table_info("{name}")')} for name in names}


def _no_gpu_work(connection: sqlite3.Connection, tables: dict[str, set[str]], display: str) -> UnreadableInput:
    said = []
    if "DIAGNOSTIC_EVENT" in tables and "text" in tables["DIAGNOSTIC_EVENT"]:
        said = [row[0] for row in connection.execute(
            "SELECT text FROM DIAGNOSTIC_EVENT WHERE severity > 1 ORDER BY timestamp LIMIT 3") if row[0]]
    return UnreadableInput(
        f"{display}: the capture holds no CUDA kernel, memcpy or memset: no GPU work was traced"
        + (f" (nsys said: {'; '.join(s[:200] for s in said)})" if said else "") + ".",
        "Capture the process that runs on the GPU (nsys profile -t cuda,nvtx --trace-fork-before-exec=true for "
        "launchers such as torchrun) and export again.")


def nsys_processes(path: Path, display: str, deadline: float) -> list[int]:
    """The processes (globalPid) that ran GPU work, in order of their first GPU activity."""
    with _open(path, display, deadline) as connection:
        tables = _tables(connection)
        present = [t for t in _GPU_TABLES if t in tables and {"globalPid", "start"} <= tables[t]]
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables and not present:
            if "StringIds" not in tables:
                raise UnreadableInput(f"{display}: an SQLite file, but not an nsys export (no StringIds table).",
                                      "Pass the .sqlite that nsys export --type sqlite wrote.")
            raise _no_gpu_work(connection, tables, display)
        union = " UNION ALL ".join(f'SELECT globalPid, min(start) AS first FROM "{t}" GROUP BY globalPid'
                                   for t in present)
        sql = f"SELECT globalPid, min(first) FROM ({union}) GROUP BY globalPid ORDER BY 2"
        rows = connection.execute(sql).fetchall()
        if not rows:
            raise _no_gpu_work(connection, tables, display)
        return [int(row[0]) for row in rows]


def nsys_has_kernels(path: Path, display: str, deadline: float) -> bool:
    """Whether the export has its kernel table: without it (kernels not traced, or the table left out of the
    export) its copies and memsets are not the GPU's whole work."""
    with _open(path, display, deadline) as connection:
        return "CUPTI_ACTIVITY_KIND_KERNEL" in _tables(connection)


def _rows(connection: sqlite3.Connection, sql: str, args: tuple[Any, ...], deadline: float,
          display: str) -> Iterator[list[Any]]:
    cursor = connection.execute(sql, args)
    while True:
        if time.monotonic() > deadline:  # time spent by the consumer between batches, where SQLite is not asked
            raise _out_of_time(display)
        rows = cursor.fetchmany(_BATCH_ROWS)
        if not rows:
            return
        yield rows


def _us(ns: int) -> float:
    return ns / 1000.0


def read_nsys_batches(path: Path, global_pid: int, display: str, deadline: float,
                      header: TraceHeader) -> Iterator[list[TraceEvent]]:
    """One process's events, Kineto-shaped (microseconds, Kineto's categories and names), a batch at a time."""
    with _open(path, display, deadline) as connection:
        tables = _tables(connection)
        gpus = _devices(connection, tables)
        if gpus:
            header.metadata["deviceProperties"] = gpus
        kernel = tables.get("CUPTI_ACTIVITY_KIND_KERNEL", set())
        if kernel:
            name = "demangledName" if "demangledName" in kernel else "shortName"
            sql = (f'SELECT k.start, k.end, k.streamId, k.correlationId, k.deviceId, s.value '
                   f'FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s ON s.id = k."{name}" '
                   "WHERE k.globalPid = ? ORDER BY k.start")
            for rows in _rows(connection, sql, (global_pid,), deadline, display):
                batch = [TraceEvent(cat="kernel", name=value or "(unnamed kernel)", ts=_us(start),
                                    dur=_us(end - start), tid=stream,
                                    args=TraceArgs(stream=stream, correlation=corr, device=device))
                         for start, end, stream, corr, device, value in rows if end is not None]
                header.events += len(batch)
                yield batch
        memcpy = tables.get("CUPTI_ACTIVITY_KIND_MEMCPY", set())
        if memcpy:
            kinds = ", srcKind, dstKind" if {"srcKind", "dstKind"} <= memcpy else ", NULL, NULL"
            sql = (f"SELECT start, end, streamId, correlationId, deviceId, copyKind{kinds} "
                   "FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE globalPid = ? ORDER BY start")
            for rows in _rows(connection, sql, (global_pid,), deadline, display):
                batch = [TraceEvent(cat="gpu_memcpy", name=_memcpy_name(kind, src, dst), ts=_us(start),
                                    dur=_us(end - start), tid=stream,
                                    args=TraceArgs(stream=stream, correlation=corr, device=device))
                         for start, end, stream, corr, device, kind, src, dst in rows if end is not None]
                header.events += len(batch)
                yield batch
        if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
            sql = ("SELECT start, end, streamId, correlationId, deviceId FROM CUPTI_ACTIVITY_KIND_MEMSET "
                   "WHERE globalPid = ? ORDER BY start")
            for rows in _rows(connection, sql, (global_pid,), deadline, display):
                batch = [TraceEvent(cat="gpu_memset", name="Memset (Device)", ts=_us(start),
                                    dur=_us(end - start), tid=stream,
                                    args=TraceArgs(stream=stream, correlation=corr, device=device))
                         for start, end, stream, corr, device in rows if end is not None]
                header.events += len(batch)
                yield batch
        yield from _graph_replays(connection, tables, global_pid, display, deadline, header)
        runtime = tables.get("CUPTI_ACTIVITY_KIND_RUNTIME", set())
        if runtime and "StringIds" in tables:
            # 2022.x exports hold every runtime call twice: once as the call (eventClass 0 runtime, 1 driver), once
            # as its backtrace (67).
            only_calls = "AND r.eventClass IN (0, 1) " if "eventClass" in runtime else ""
            sql = ("SELECT r.start, r.end, r.correlationId, r.globalTid, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                   "JOIN StringIds s ON s.id = r.nameId "
                   f"WHERE (r.globalTid & {_PID_MASK}) = ? {only_calls}ORDER BY r.start")
            names: dict[str, str] = {}
            for rows in _rows(connection, sql, (global_pid,), deadline, display):
                batch = []
                for start, end, corr, tid, value in rows:
                    if end is None or value is None:
                        continue
                    api = names.get(value)
                    if api is None:
                        api = names[value] = api_name(value)
                    batch.append(TraceEvent(cat="cuda_runtime", name=api, ts=_us(start), dur=_us(end - start),
                                            tid=tid & 0xFFFFFF, args=TraceArgs(correlation=corr)))
                header.events += len(batch)
                yield batch
        nvtx = tables.get("NVTX_EVENTS", set())
        if nvtx:
            text_id = "s.value" if "textId" in nvtx and "StringIds" in tables else "NULL"
            join = "LEFT JOIN StringIds s ON s.id = n.textId " if text_id != "NULL" else ""
            sql = (f"SELECT n.start, n.end, coalesce({text_id}, n.text), n.globalTid FROM NVTX_EVENTS n {join}"
                   f"WHERE n.eventType IN {_NVTX_RANGES} AND (n.globalTid & {_PID_MASK}) = ? ORDER BY n.start")
            for rows in _rows(connection, sql, (global_pid,), deadline, display):
                batch = [TraceEvent(cat="user_annotation", name=_AUTOGRAD_ID.sub("", text), ts=_us(start),
                                    dur=_us(end - start), tid=tid & 0xFFFFFF, args=None)
                         for start, end, text, tid in rows if end is not None and text]
                header.events += len(batch)
                yield batch
        yield from _mpi_calls(connection, tables, global_pid, display, deadline, header)


def _mpi_calls(connection: sqlite3.Connection, tables: dict[str, set[str]], global_pid: int, display: str,
               deadline: float, header: TraceHeader) -> Iterator[list[TraceEvent]]:
    """MPI calls nsys traced (`-t mpi`: MPI_P2P_EVENTS, MPI_COLLECTIVES_EVENTS, MPI_START_WAIT_EVENTS and
    MPI_OTHER_EVENTS; only the last in 2021-era reports), as host-side communication: a CUDA-aware MPI job's GPU
    idles while its host waits in MPI_Sendrecv or MPI_Allreduce, and no NCCL kernel shows it."""
    if "StringIds" not in tables:
        return
    for table in _MPI_TABLES:
        if not {"start", "end", "globalTid", "textId"} <= tables.get(table, set()):
            continue
        sql = (f'SELECT m.start, m.end, m.globalTid, s.value FROM "{table}" m JOIN StringIds s ON s.id = m.textId '
               f"WHERE (m.globalTid & {_PID_MASK}) = ? ORDER BY m.start")
        for rows in _rows(connection, sql, (global_pid,), deadline, display):
            batch = [TraceEvent(cat="mpi", name=name, ts=_us(start), dur=_us(end - start),
                                tid=tid & 0xFFFFFF, args=None)
                     for start, end, tid, name in rows if end is not None and isinstance(name, str)]
            header.events += len(batch)
            yield batch


def nsys_ranks(path: Path, display: str, deadline: float) -> dict[int, int]:
    """The rank each process (globalPid) says it is: nsys's MPI tracing names a thread of each rank "MPI Rank N"
    (an NVTX thread name). Empty when no process says so."""
    with _open(path, display, deadline) as connection:
        tables = _tables(connection)
        nvtx = tables.get("NVTX_EVENTS", set())
        if not {"eventType", "globalTid", "text"} <= nvtx:
            return {}
        text = "coalesce(s.value, n.text)" if "textId" in nvtx and "StringIds" in tables else "n.text"
        join = "LEFT JOIN StringIds s ON s.id = n.textId " if text != "n.text" else ""
        found: dict[int, int] = {}
        for tid, name in connection.execute(f"SELECT n.globalTid, {text} FROM NVTX_EVENTS n {join}"
                                            f"WHERE n.eventType = {_NVTX_THREAD_NAME}"):
            said = _MPI_RANK.match(name or "")
            if said and isinstance(tid, int):
                found.setdefault(tid & _PID_MASK, int(said.group(1)))
        return found


def _graph_replays(connection: sqlite3.Connection, tables: dict[str, set[str]], global_pid: int, display: str,
                   deadline: float, header: TraceHeader) -> Iterator[list[TraceEvent]]:
    """CUDA graph replays traced at graph level (`--cuda-graph-trace=graph`, the default): one row per replay in
    CUPTI_ACTIVITY_KIND_GRAPH_TRACE and none of its kernels in the kernel table, so without them a GPU busy with
    graphs looks idle. Linked to their cudaGraphLaunch by correlation id, like kernels. A capture traced at node
    level has the graph's kernels themselves (graphNodeId set): then the replays are left out, counted once."""
    graph = tables.get("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", set())
    if not {"start", "end", "streamId", "correlationId", "globalPid"} <= graph:
        return
    if connection.execute("SELECT 1 FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE WHERE globalPid = ? LIMIT 1",
                          (global_pid,)).fetchone() is None:
        return
    if "graphNodeId" in tables.get("CUPTI_ACTIVITY_KIND_KERNEL", set()) and connection.execute(
            "SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid = ? AND graphNodeId IS NOT NULL LIMIT 1",
            (global_pid,)).fetchone() is not None:
        return
    graph_id = "graphId" if "graphId" in graph else "NULL"
    device = "deviceId" if "deviceId" in graph else "NULL"
    sql = (f"SELECT start, end, streamId, correlationId, {device}, {graph_id} FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE "
           "WHERE globalPid = ? ORDER BY start")
    for rows in _rows(connection, sql, (global_pid,), deadline, display):
        batch = [TraceEvent(cat="kernel", name=f"CUDA graph {gid if gid is not None else '?'} (whole replay, "
                            "graph-level trace)", ts=_us(start), dur=_us(end - start), tid=stream,
                            args=TraceArgs(stream=stream, correlation=corr, device=dev))
                 for start, end, stream, corr, dev, gid in rows if end is not None]
        header.events += len(batch)
        yield batch


def _memcpy_name(kind: Any, src: Any, dst: Any) -> str:
    """Kineto's name for the copy ('Memcpy HtoD (Pageable -> Device)'), which the summary's classes read."""
    direction = _COPY_KIND.get(kind, "Unknown") if isinstance(kind, int) else "Unknown"
    if isinstance(src, int) and isinstance(dst, int):
        return f"Memcpy {direction} ({_MEM_KIND.get(src, 'Unknown')} -> {_MEM_KIND.get(dst, 'Unknown')})"
    return f"Memcpy {direction}"


def _devices(connection: sqlite3.Connection, tables: dict[str, set[str]]) -> list[dict[str, Any]]:
    """The GPUs' names, as Kineto's deviceProperties (id = the CUDA ordinal kernels report as deviceId)."""
    for table, key in (("TARGET_INFO_GPU", "cuDevice"), ("TARGET_INFO_GPU", "id"),
                       ("TARGET_INFO_CUDA_GPU", "deviceId")):
        columns = tables.get(table, set())
        if {"name", key} <= columns:
            rows = connection.execute(f'SELECT "{key}", name FROM "{table}" ORDER BY 1').fetchall()
            if rows:
                return [{"id": row[0], "name": row[1]} for row in rows if isinstance(row[1], str)]
    return []


# ---------------------------------------------------------------- NVIDIA's rules (nsys analyze)


class NsysRule(BaseModel):
    """One of Nsight Systems' expert-system rules, computed on the export with NVIDIA's name and thresholds."""

    rule: str = Field(description="NVIDIA's rule name (nsys analyze -r NAME).")
    file: str
    count: int = Field(description="Calls, copies, gaps or windows flagged.")
    time_ms: float = Field(description="Their total duration.")
    evidence: str


def _api_rows(connection: sqlite3.Connection, tables: dict[str, set[str]], where: str,
              join: str = "") -> list[tuple[str, int, float, int]]:
    """(API name, calls, total ns, the thread with the most time) of runtime calls matching `where`."""
    runtime = tables.get("CUPTI_ACTIVITY_KIND_RUNTIME", set())
    if not runtime or "StringIds" not in tables:
        return []
    only_calls = "AND r.eventClass IN (0, 1)" if "eventClass" in runtime else ""
    sql = (f"SELECT s.value, count(*), sum(r.end - r.start), r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
           f"JOIN StringIds s ON s.id = r.nameId {join} WHERE ({where}) {only_calls} "
           "GROUP BY s.value, r.globalTid ORDER BY 3 DESC")
    return [(str(name), int(calls), float(ns or 0), int(tid)) for name, calls, ns, tid in connection.execute(sql)]


def _api_rule(rule: str, display: str, rows: list[tuple[str, int, float, int]], what: str) -> NsysRule | None:
    if not rows:
        return None
    by_api: dict[str, list[float]] = {}
    for name, calls, ns, _ in rows:
        api = api_name(name)
        count, total = by_api.get(api, [0, 0.0])
        by_api[api] = [count + calls, total + ns]
    calls = sum(int(v[0]) for v in by_api.values())
    ns = sum(v[1] for v in by_api.values())
    top = sorted(by_api.items(), key=lambda kv: kv[1][1], reverse=True)[:3]
    threads = sorted({tid & 0xFFFFFF for *_, tid in rows[:3]})
    return NsysRule(rule=rule, file=display, count=calls, time_ms=round(ns / 1e6, 3),
                    evidence=f"{what}: " + ", ".join(f"{api} x{int(c)} ({t / 1e6:.1f} ms)" for api, (c, t) in top)
                    + f"; most on thread(s) {', '.join(map(str, threads))}")


def _gpu_intervals(connection: sqlite3.Connection, tables: dict[str, set[str]]) -> str:
    parts = [f'SELECT globalPid, deviceId, start, end FROM "{t}"' for t in _GPU_TABLES
             if {"globalPid", "deviceId", "start", "end"} <= tables.get(t, set())]
    return " UNION ALL ".join(parts)


def _gpu_rules(connection: sqlite3.Connection, tables: dict[str, set[str]], display: str,
               deadline: float) -> list[NsysRule]:
    """gpu_gaps and gpu_time_util, per process and device, as NVIDIA computes them: gaps in the union of kernels,
    copies and memsets between the first and last GPU op; time utilisation (summed op time, concurrent ops may
    exceed 100 %) of the span cut into equal chunks."""
    union = _gpu_intervals(connection, tables)
    if not union:
        return []
    spans = connection.execute(f"SELECT globalPid, deviceId, min(start), max(end) FROM ({union}) "
                               "GROUP BY globalPid, deviceId").fetchall()
    gaps: list[float] = []
    low_runs = 0
    low_ms = 0.0
    where = []
    for pid, device, first, last in spans:
        if last is None or first is None or last <= first:
            continue
        chunk = (last - first) / NSYS_UTIL_CHUNKS
        used = [0.0] * NSYS_UTIL_CHUNKS
        reach = first
        for rows in _rows(connection, f"SELECT start, end FROM ({union}) WHERE globalPid = ? AND deviceId = ? "
                          "ORDER BY start", (pid, device), deadline, display):
            for start, end in rows:
                if end is None:
                    continue
                if start - reach >= NSYS_GAP_MS * 1e6:
                    gaps.append((start - reach) / 1e6)
                reach = max(reach, end)
                i = min(int((start - first) / chunk), NSYS_UTIL_CHUNKS - 1)
                while i < NSYS_UTIL_CHUNKS and start < end:
                    chunk_end = first + (i + 1) * chunk
                    used[i] += min(end, chunk_end) - start
                    start, i = chunk_end, i + 1
        low = [i for i, u in enumerate(used) if 100 * u / chunk < NSYS_UTIL_PCT]
        if low:
            # NVIDIA reports each run of adjacent low windows as one.
            low_runs += 1 + sum(1 for a, b in zip(low, low[1:], strict=False) if b != a + 1)
            low_ms += len(low) * chunk / 1e6
            where.append(f"process {(pid >> 24) & 0xFFFFFF} GPU {device}: {len(low)} of {NSYS_UTIL_CHUNKS}")
    found = []
    if gaps:
        found.append(NsysRule(rule="gpu_gaps", file=display, count=len(gaps), time_ms=round(sum(gaps), 3),
                              evidence=f"GPU idle for at least {NSYS_GAP_MS:g} ms {len(gaps)} time(s), longest "
                              f"{max(gaps):.1f} ms: look at what the CPU did then (OS runtime, NVTX, sampling)"))
    if low_runs:
        found.append(NsysRule(rule="gpu_time_util", file=display, count=low_runs, time_ms=round(low_ms, 3),
                              evidence=f"time utilisation under {NSYS_UTIL_PCT:g} % in " + "; ".join(where[:3])
                              + " equal windows of the GPU span"))
    return found


def nsys_rules(path: Path, display: str, deadline: float) -> list[NsysRule]:
    """Nsight Systems' expert-system rules on the export: cuda_memcpy_async, cuda_memcpy_sync, cuda_memset_sync,
    cuda_api_sync, gpu_gaps, gpu_time_util (NVIDIA's names, thresholds and selections)."""
    with _open(path, display, deadline) as connection:
        tables = _tables(connection)
        found: list[NsysRule | None] = []
        memcpy = tables.get("CUPTI_ACTIVITY_KIND_MEMCPY", set())
        on_copy = ("JOIN CUPTI_ACTIVITY_KIND_MEMCPY m ON m.correlationId = r.correlationId "
                   f"AND m.globalPid = (r.globalTid & {_PID_MASK})")
        if {"srcKind", "dstKind"} <= memcpy:
            found.append(_api_rule("cuda_memcpy_async", display, _api_rows(
                connection, tables, "s.value LIKE 'cudaMemcpy%Async%' AND (m.srcKind = 0 OR m.dstKind = 0)", on_copy),
                "async copies from or to pageable memory, which run synchronously (use pinned memory)"))
        if memcpy:
            same_device = " AND m.srcDeviceId IS NOT m.dstDeviceId" if {"srcDeviceId", "dstDeviceId"} <= memcpy else ""
            found.append(_api_rule("cuda_memcpy_sync", display, _api_rows(
                connection, tables, "s.value LIKE 'cudaMemcpy%' AND s.value NOT LIKE '%Async%' AND NOT "
                f"(m.copyKind = 1 AND m.bytes <= {NSYS_SMALL_HTOD_BYTES}){same_device}", on_copy),
                "synchronous copies that block the host (use cudaMemcpyAsync)"))
        if "memKind" in tables.get("CUPTI_ACTIVITY_KIND_MEMSET", set()):
            found.append(_api_rule("cuda_memset_sync", display, _api_rows(
                connection, tables, "s.value LIKE 'cudaMemset%' AND s.value NOT LIKE '%sync%' AND m.memKind IN (1, 4)",
                "JOIN CUPTI_ACTIVITY_KIND_MEMSET m ON m.correlationId = r.correlationId "
                f"AND m.globalPid = (r.globalTid & {_PID_MASK})"),
                "synchronous memsets of pinned or managed memory that block the host"))
        found.append(_api_rule("cuda_api_sync", display, _api_rows(
            connection, tables, "s.value LIKE 'cudaDeviceSynchronize%' OR s.value LIKE 'cudaStreamSynchronize%'"),
            "synchronisation calls that stop the host until the GPU is done"))
        rules = [f for f in found if f is not None]
        return rules + _gpu_rules(connection, tables, display, deadline)
