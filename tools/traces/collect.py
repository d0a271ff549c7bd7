"""One pass over a rank's events into the columns the trace analysis reads (tools/traces/summary.py).

A rank's events (a Kineto trace's, or an Nsight Systems process shaped like them) are read once, in the
order they come, and only what the analysis needs is kept, column-wise: GPU work (start, end, kind, whether
it is communication, correlation id), runtime calls' correlation ids, the CPU-side spans the causes of GPU
idle are told from (steps, DataLoader calls, synchronising calls and the ops that issued them, long CPU
ops), kernel totals and FLOP counts. Memory is what bounds the size of trace this can read: a few tens of
bytes an event kept, nothing for the others.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.core.intervals import Spans
from tools.core.thresholds import LONG_OP_US
from tools.traces.compute import FlopCounter, kernel_precision
from tools.traces.kineto import TraceEvent, TraceHeader, read_trace_batches
from tools.traces.names import is_sync_call

# HTA's kernel classes (hta/utils/utils.py get_kernel_type), reproduced from its description for the
# number-for-number comparison: communication by name prefix, memory by name, compute by exclusion.
_HTA_COMM = re.compile(r"^(?:nccl|hip|hccl)|ncclKernel")
_HTA_MEMORY = re.compile(r"^(?:hip)?(?:Memcpy|Memset)|^dma", re.IGNORECASE)
_HTA_NOT_COMPUTE = re.compile(r"nccl|Memcpy|Memset|^dma|Sync$|Stream Wait Event|^cuda\w*LaunchKernel|^hip|mtia",
                              re.IGNORECASE)
# Our own notion of communication goes further than a name prefix: NCCL's kernels under every name they have had
# (ncclKernel_*, ncclDevKernel_*), RCCL/HCCL, MSCCL(++), NVSHMEM, torch's symmetric-memory (multimem) collectives,
# vLLM's custom all-reduce, expert-parallel all-to-all (DeepEP's and DeepSeek's dpsk::ep dispatch/combine), and any
# kernel carrying NCCL's
# collective metadata.
COMM_NAME = re.compile(r"nccl|rccl|hccl|msccl|nvshmem|multimem|symmetric_memory|cross_device_reduce|quick_?reduce|"
                        r"custom_?all_?reduce|all_?to_?all|allreduce|all_reduce|allgather|all_gather|reduce_?scatter|"
                        r"deep_?ep|::ep::(?:intra|inter)node|dispatch_kernel|combine_kernel", re.IGNORECASE)
_SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero",
                       "aten::cpu", "aten::equal", "aten::allclose", "aten::unique", "aten::masked_select",
                       "aten::tolist", "aten::to", "aten::copy_", "aten::_to_copy"})
_LAUNCH = re.compile(r"LaunchKernel|cuLaunch|GraphLaunch|hipLaunch|hipExtLaunch|hipModuleLaunch")
_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
_KERNEL_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
LAUNCH_SAMPLE = 100_000  # launch-call durations kept for the median
_KINDS = ("compute", "comm", "memory", "other")
KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}
_CPU_OP_CATS = frozenset({"cpu_op", "operator", "user_annotation"})
# MPI calls that set up or ask rather than communicate: the GPU idle during MPI_Init is start-up, not communication.
_MPI_SETUP = re.compile(r"MPI_(?:Init|Finalize|Comm_|Type_|Info_|Get_|Query_thread|Wtime|Wtick|Abort|Op_|Errhandler|"
                        r"Attr_|Group_|Keyval|Cart_|Graph_|Dims_|Pack|Unpack|Buffer_|Win_create|Win_free|Alloc_mem|"
                        r"Free_mem|Error_)")


_TIME_LIMIT = 2**53  # microseconds: the largest a float holds exactly
_MAX_CACHED = 4096  # distinct spellings a per-call cache keeps (a mutated trace may have a new one every event)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class HostOps:
    """CPU-side spans of one kind (sync calls, the ops that issue them, long ops) as columns: start, end, and the
    index of the thread and of the name in small tables. About 24 bytes a span where a tuple of floats and a
    string costs ~130: a 5 GB trace holds near a million long ops."""

    def __init__(self) -> None:
        self.ts = array("d")
        self.end = array("d")
        self.thread = array("i")  # index into threads
        self.name = array("i")  # index into names
        self.names: list[str] = []
        self.threads: list[Any] = []
        self._name_index: dict[str, int] = {}
        self._thread_index: dict[Any, int] = {}

    def add(self, ts: float, end: float, thread: Any, name: str) -> None:
        self.ts.append(ts)
        self.end.append(end)
        index = self._thread_index.get(thread)
        if index is None:
            index = self._thread_index[thread] = len(self.threads)
            self.threads.append(thread)
        self.thread.append(index)
        index = self._name_index.get(name)
        if index is None:
            index = self._name_index[name] = len(self.names)
            self.names.append(name)
        self.name.append(index)

    def __len__(self) -> int:
        return len(self.ts)

    def columns(self) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]],
                               np.ndarray[Any, np.dtype[np.int32]], np.ndarray[Any, np.dtype[np.int32]]]:
        """start, end, thread index, name index as numpy arrays (views: no copy)."""
        return (np.frombuffer(self.ts, dtype=np.float64), np.frombuffer(self.end, dtype=np.float64),
                np.frombuffer(self.thread, dtype=np.int32), np.frombuffer(self.name, dtype=np.int32))

    def around(self, calls: HostOps) -> HostOps:
        """The spans that contain the start of one of `calls` on their own thread (the ops that may have issued
        them), as a new set: emit_nvtx traces push hundreds of thousands of copy ranges, a few of them syncing."""
        kept = HostOps()
        kept.names, kept._name_index = self.names, self._name_index
        kept.threads, kept._thread_index = self.threads, self._thread_index
        if not len(self) or not len(calls):
            return kept
        ts, end, thread, _ = self.columns()
        call_ts, _, call_thread, _ = calls.columns()
        keep = np.zeros(len(ts), dtype=bool)
        for index, key in enumerate(calls.threads):
            mine = self._thread_index.get(key)
            if mine is None:
                continue
            starts = np.sort(call_ts[call_thread == index])
            where = np.flatnonzero(thread == mine)
            keep[where] = (np.searchsorted(starts, ts[where], side="left")
                           < np.searchsorted(starts, end[where], side="right"))
        for column, source in ((kept.ts, self.ts), (kept.end, self.end), (kept.thread, self.thread),
                               (kept.name, self.name)):
            values = np.frombuffer(source, dtype=np.float64 if source.typecode == "d" else np.int32)[keep]
            column.frombytes(values.tobytes())
        return kept

    def spans(self) -> Spans:
        """The union of the spans."""
        ts, end, _, _ = self.columns()
        order = np.argsort(ts, kind="stable")
        return Spans.union(ts[order], end[order])


@dataclass
class Collected:
    # GPU events column-wise (about 30 bytes an event instead of ~160 as tuples): memory is what bounds
    # the size of trace this can read.
    gpu_ts: array[float] = field(default_factory=lambda: array("d"))
    gpu_end: array[float] = field(default_factory=lambda: array("d"))
    gpu_kind: bytearray = field(default_factory=bytearray)  # index into _KINDS
    gpu_comm: bytearray = field(default_factory=bytearray)
    gpu_corr: array[int] = field(default_factory=lambda: array("q"))  # -1: none
    # Runtime calls' correlation ids and start times, as columns: a dict of millions of ints costs ~100 bytes an
    # entry, these 16 (a 5 GB trace's launches must fit in memory).
    runtime_corr: array[int] = field(default_factory=lambda: array("q"))
    runtime_ts: array[float] = field(default_factory=lambda: array("d"))
    gpu: GpuColumns | None = None  # the columns above as sorted numpy arrays, made once for the analysis
    # Each distinct GPU start time and the latest launch call behind the work starting then.
    launch_by_start: tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]]] | None = None
    steps: list[tuple[float, float]] = field(default_factory=list)
    dataloader: list[tuple[float, float]] = field(default_factory=list)
    syncs: HostOps = field(default_factory=HostOps)  # synchronising runtime calls
    sync_ops: HostOps = field(default_factory=HostOps)  # the Python-level ops that sync (aten::item, ...)
    launch_durations: array[float] = field(default_factory=lambda: array("d"))  # a bounded sample
    graph_launches: int = 0  # cudaGraphLaunch calls: kernels of a replayed graph have no launch of their own
    long_ops: HostOps = field(default_factory=HostOps)  # CPU ops >= LONG_OP_US
    host_comm: HostOps = field(default_factory=HostOps)  # MPI calls that communicate (nsys -t mpi)
    kernels: dict[str, list[Any]] = field(default_factory=dict)  # name -> [count, total us, kind]
    kernel_durations: Counter[str] = field(default_factory=Counter)
    cpu_span: list[float] = field(default_factory=lambda: [float("inf"), float("-inf")])
    flops: FlopCounter = field(default_factory=FlopCounter)
    device: int | None = None  # the GPU this rank's kernels ran on (args.device)
    device_name: str | None = None  # its name in deviceProperties
    events: int = 0
    skipped: int = 0  # complete ('X') events without a number (a finite, sane one) for ts or dur, or a category
    # The latest start seen of each kind of event (GPU work, runtime calls, other host events): a file cut short
    # holds each kind, written in time order, only up to its own latest start (tools/traces/summary.py).
    last_start: dict[str, float] = field(default_factory=dict)
    float_ts: bool = False  # ns-resolution (float) timestamps: HTA rounds them to whole microseconds


def _key(value: Any) -> Any:
    """A correlation id or thread id usable as a dict key (lists and dicts from odd traces are not)."""
    return value if isinstance(value, int | float | str) and not isinstance(value, bool) else None


def hta_kind(name: str) -> str:
    if _HTA_COMM.search(name):
        return "comm"
    if _HTA_MEMORY.search(name):
        return "memory"
    if not _HTA_NOT_COMPUTE.search(name):
        return "compute"
    return "other"


def _bucket(duration: float) -> str:
    return "<10us" if duration < 10 else "10-100us" if duration < 100 else "100us-1ms" if duration < 1000 else ">=1ms"


def collect_file(path: Path, display: str, deadline: float, steps_named: Any = None) -> tuple[Collected, TraceHeader]:
    header = TraceHeader()
    return collect_events(read_trace_batches(path, display, deadline, header), steps_named), header


def step_pattern(text: str) -> Any:
    """The step_range pattern, compiled by RE2 (linear time on any name: it comes from the caller)."""
    import re2  # type: ignore[import-untyped]

    try:
        return re2.compile(text)
    except re2.error as exc:
        raise ValueError(f"step_range is not a pattern RE2 can take ({exc}); pass a plain name or a simpler "
                         "pattern") from exc


def collect_events(batches: Iterable[list[TraceEvent]], steps_named: Any = None) -> Collected:
    """One rank's events (a Kineto trace's, or an nsys export's process shaped like them) into the columns."""
    data = Collected()
    seen_kernels: dict[str, tuple[str, bool, str | None]] = {}
    runtime_roles: dict[str, str] = {}
    # The hot loop (millions of events): the columns' appends bound to locals, numbers checked by exact type
    # first (nearly every ts and dur is an int or a float), the CPU span kept in locals.
    gpu_ts, gpu_end, gpu_kind, gpu_comm, gpu_corr = (data.gpu_ts.append, data.gpu_end.append, data.gpu_kind.append,
                                                     data.gpu_comm.append, data.gpu_corr.append)
    kernels, durations = data.kernels, data.kernel_durations
    runtime_corr, runtime_ts = data.runtime_corr.append, data.runtime_ts.append
    cpu_low, cpu_high = math.inf, -math.inf
    gpu_last = runtime_last = host_last = -math.inf
    events = 0
    time_low, time_high = -_TIME_LIMIT, _TIME_LIMIT  # made once: each negation of the big int allocated one
    lowered: dict[str, str] = {}  # category spellings, lowered once each
    for batch in batches:
        for event in batch:
            if event.ph != "X":
                continue
            raw_ts, raw_dur, cat = event.ts, event.dur, event.cat
            ts = raw_ts if type(raw_ts) is int or type(raw_ts) is float else _number(raw_ts)
            dur = raw_dur if type(raw_dur) is int or type(raw_dur) is float else _number(raw_dur)
            # A time beyond 2**53 us (285 years) is no clock's (a mutated or corrupt event; a float column cannot hold
            # the int exactly, or at all), NaN and infinities fail the comparison too: the event is skipped, counted.
            if (ts is None or dur is None or type(cat) is not str or not time_low < ts < time_high
                    or not time_low < dur < time_high):
                data.skipped += 1
                continue
            if cat == "Trace":
                continue
            if type(raw_ts) is float:
                data.float_ts = True
            events += 1
            name = event.name if type(event.name) is str else ""
            args = event.args
            end = ts + dur
            raw_stream = args.stream if args is not None else None
            stream = raw_stream if raw_stream is None or type(raw_stream) is int else _number(raw_stream)
            category = lowered.get(cat)
            if category is None:
                category = cat.lower()
                if len(lowered) < _MAX_CACHED:
                    lowered[cat] = category
            # HTA's rule, kept so the numbers compare: a numeric stream other than -1 makes a GPU event
            # (device-wide Event/Context Sync records carry stream -1 and count as CPU-side).
            if category == "gpu_user_annotation":
                # record_function ranges drawn on the GPU's timeline (ProfilerStep#N among them): neither GPU work
                # nor a step, DataLoader call or op of the host; counted as a step they cut the window short.
                continue
            if stream is not None and stream != -1:
                assert args is not None
                if ts > gpu_last:
                    gpu_last = ts
                classes = seen_kernels.get(name)
                if classes is None:  # kernel names repeat and are long: classify each name once
                    kind = hta_kind(name)
                    classes = seen_kernels[name] = (kind, kind == "comm" or bool(COMM_NAME.search(name)),
                                                    kernel_precision(name))
                kind, comm, precision = classes
                if precision is not None:
                    data.flops.gemm_time[precision] = data.flops.gemm_time.get(precision, 0.0) + dur
                if data.device is None and type(args.device) is int:
                    data.device = args.device
                comm = comm or args.collective is not None
                gpu_ts(ts)
                gpu_end(end)
                gpu_kind(KIND_CODE[kind])
                gpu_comm(comm)
                gpu_corr(args.correlation if type(args.correlation) is int else -1)
                if category in _KERNEL_CATS:
                    stat = kernels.get(name)
                    if stat is None:
                        kernels[name] = [1, dur, "comm" if comm else kind]
                    else:
                        stat[0] += 1
                        stat[1] += dur
                    durations[_bucket(dur)] += 1
                continue
            if category == "python_function":
                continue
            if category == "mpi":
                if not _MPI_SETUP.match(name):
                    data.host_comm.add(ts, end, _key(event.tid), name)
                continue
            if ts < cpu_low:
                cpu_low = ts
            if end > cpu_high:
                cpu_high = end
            runtime = category in _RUNTIME_CATS
            if runtime:
                if ts > runtime_last:
                    runtime_last = ts
            elif ts > host_last:
                host_last = ts
            if runtime:
                if args is not None and type(args.correlation) is int:
                    runtime_corr(args.correlation)
                    runtime_ts(ts)
                role = runtime_roles.get(name)
                if role is None:
                    role = runtime_roles[name] = "sync" if is_sync_call(name) else (
                        "launch" if _LAUNCH.search(name) else "")
                if role == "sync":
                    data.syncs.add(ts, end, _key(event.tid), name)
                elif role == "launch":
                    if len(data.launch_durations) < LAUNCH_SAMPLE:
                        data.launch_durations.append(dur)
                    if "GraphLaunch" in name:
                        data.graph_launches += 1
            elif name.startswith("ProfilerStep#") or (steps_named is not None and category == "user_annotation"
                                                       and steps_named.search(name)):
                data.steps.append((ts, end))
            elif "DataLoader" in name and "__next__" in name:
                data.dataloader.append((ts, end))
            elif name in _SYNC_OPS:
                data.sync_ops.add(ts, end, _key(event.tid), name)
            if category in _CPU_OP_CATS and args is not None and (args.flops is not None or args.input_dims):
                data.flops.add_op(name, ts, args.flops, args.input_dims, args.input_type)
            if dur >= LONG_OP_US and category in _CPU_OP_CATS and not name.startswith("ProfilerStep#"):
                data.long_ops.add(ts, end, None, name)
    data.events = events
    data.cpu_span = [cpu_low, cpu_high]
    data.last_start = {kind: last for kind, last in (("gpu", gpu_last), ("runtime", runtime_last),
                                                      ("host", host_last)) if last > -math.inf}
    return data


@dataclass
class GpuColumns:
    """The GPU events as numpy columns sorted by start, each with the start of its launch call (-inf: none in the
    trace, e.g. a CUDA graph's kernels or an odd correlation id)."""

    ts: np.ndarray[Any, np.dtype[np.float64]]
    end: np.ndarray[Any, np.dtype[np.float64]]
    kind: np.ndarray[Any, np.dtype[np.uint8]]
    comm: np.ndarray[Any, np.dtype[np.bool_]]
    launch: np.ndarray[Any, np.dtype[np.float64]]


def gpu_columns(data: Collected) -> GpuColumns:
    """The GPU columns sorted by start with their launch calls, made once; each column it was made from is
    dropped as soon as its sorted copy exists (memory bounds the trace size)."""
    if data.gpu is None:
        order = np.argsort(np.frombuffer(data.gpu_ts, dtype=np.float64), kind="stable")
        ts = np.frombuffer(data.gpu_ts, dtype=np.float64)[order]
        data.gpu_ts = array("d")
        end = np.frombuffer(data.gpu_end, dtype=np.float64)[order]
        data.gpu_end = array("d")
        kind = np.frombuffer(data.gpu_kind, dtype=np.uint8)[order]
        comm = np.frombuffer(data.gpu_comm, dtype=np.uint8)[order].astype(bool)
        data.gpu_kind, data.gpu_comm = bytearray(), bytearray()
        corr = np.frombuffer(data.gpu_corr, dtype=np.int64)[order]
        data.gpu_corr = array("q")
        del order
        launch = np.full(len(ts), -np.inf)
        if len(data.runtime_corr):
            # The last runtime call of each correlation id wins, as it did in a dict.
            by_corr = np.argsort(np.frombuffer(data.runtime_corr, dtype=np.int64), kind="stable")
            ids = np.frombuffer(data.runtime_corr, dtype=np.int64)[by_corr]
            data.runtime_corr = array("q")
            starts = np.frombuffer(data.runtime_ts, dtype=np.float64)[by_corr]
            data.runtime_ts = array("d")
            del by_corr
            at = np.searchsorted(ids, corr, side="right") - 1
            found = (at >= 0) & (corr >= 0)
            found[found] = ids[at[found]] == corr[found]
            launch[found] = starts[at[found]]
        data.gpu = GpuColumns(ts, end, kind, comm, launch)
    return data.gpu


def gpu_union(data: Collected, keep: np.ndarray[Any, np.dtype[np.bool_]] | None = None,
              rounded: bool = False) -> Spans:
    """The union of the GPU events `keep` selects (all when None), from the start-sorted columns."""
    gpu = gpu_columns(data)
    starts, ends = (gpu.ts, gpu.end) if keep is None else (gpu.ts[keep], gpu.end[keep])
    if rounded:
        # HTA loads float timestamps by rounding the start up and the end down to whole microseconds (rounding
        # keeps the order of the starts).
        if keep is None:
            starts, ends = np.ceil(starts), np.floor(ends)
        else:  # copies already: rounded in place
            np.ceil(starts, out=starts)
            np.floor(ends, out=ends)
    return Spans.union(starts, ends)

