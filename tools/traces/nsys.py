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
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from tools.core.errors import LimitExceeded, UnreadableInput
from tools.traces.kineto import TraceArgs, TraceEvent, TraceHeader

__all__ = ["is_nsys_export", "nsys_processes", "read_nsys_batches"]

_MAGIC = b"SQLite format 3\x00"
_BATCH_ROWS = 20_000
_PID_MASK = ~0xFFFFFF  # globalTid -> globalPid: the thread id is the low 24 bits
_API_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel
_GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
# ENUM_CUDA_MEMCPY_OPER and ENUM_CUDA_MEM_KIND, hard-coded: exports before schema 3.0 have no ENUM tables.
_COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
              10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device", 6: "Managed"}
_NVTX_RANGES = (59, 60, 70, 71)  # NvtxPushPopRange, NvtxStartEndRange and their NVTXT forms


def is_nsys_export(path: Path) -> bool:
    """Whether the file is an SQLite database (an nsys export; other SQLite files fail later, clearly)."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


def _connect(path: Path, display: str) -> sqlite3.Connection:
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UnreadableInput(f"{display}: not a readable SQLite file ({exc}).",
                              "Pass an nsys export: nsys export --type sqlite REPORT.nsys-rep") from exc
    return connection


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


def nsys_processes(path: Path, display: str) -> list[int]:
    """The processes (globalPid) that ran GPU work, in order of their first GPU activity."""
    with closing(_connect(path, display)) as connection:
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


def _rows(connection: sqlite3.Connection, sql: str, args: tuple[Any, ...], deadline: float,
          display: str) -> Iterator[list[Any]]:
    cursor = connection.execute(sql, args)
    while True:
        if time.monotonic() > deadline:
            raise LimitExceeded(f"reading {display} ran out of time.", "Pass a smaller export or raise --timeout.")
        rows = cursor.fetchmany(_BATCH_ROWS)
        if not rows:
            return
        yield rows


def _us(ns: int) -> float:
    return ns / 1000.0


def read_nsys_batches(path: Path, global_pid: int, display: str, deadline: float,
                      header: TraceHeader) -> Iterator[list[TraceEvent]]:
    """One process's events, Kineto-shaped (microseconds, Kineto's categories and names), a batch at a time."""
    with closing(_connect(path, display)) as connection:
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
                batch = [TraceEvent(ph="X", cat="kernel", name=value or "(unnamed kernel)", ts=_us(start),
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
                batch = [TraceEvent(ph="X", cat="gpu_memcpy", name=_memcpy_name(kind, src, dst), ts=_us(start),
                                    dur=_us(end - start), tid=stream,
                                    args=TraceArgs(stream=stream, correlation=corr, device=device))
                         for start, end, stream, corr, device, kind, src, dst in rows if end is not None]
                header.events += len(batch)
                yield batch
        if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
            sql = ("SELECT start, end, streamId, correlationId, deviceId FROM CUPTI_ACTIVITY_KIND_MEMSET "
                   "WHERE globalPid = ? ORDER BY start")
            for rows in _rows(connection, sql, (global_pid,), deadline, display):
                batch = [TraceEvent(ph="X", cat="gpu_memset", name="Memset (Device)", ts=_us(start),
                                    dur=_us(end - start), tid=stream,
                                    args=TraceArgs(stream=stream, correlation=corr, device=device))
                         for start, end, stream, corr, device in rows if end is not None]
                header.events += len(batch)
                yield batch
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
                        api = names[value] = _API_SUFFIX.sub("", value)
                    batch.append(TraceEvent(ph="X", cat="cuda_runtime", name=api, ts=_us(start), dur=_us(end - start),
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
                batch = [TraceEvent(ph="X", cat="user_annotation", name=text, ts=_us(start), dur=_us(end - start),
                                    tid=tid & 0xFFFFFF, args=None)
                         for start, end, text, tid in rows if end is not None and text]
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
