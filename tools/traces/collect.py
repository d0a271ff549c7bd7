"""One pass over a rank's events into the columns the trace analysis reads (tools/traces/summary.py).

A rank's events (a Kineto trace's, or an Nsight Systems process shaped like them) are read once, in the
order they come, and only what the analysis needs is kept, column-wise: GPU work (start, end, kind, whether
it is communication, correlation id), runtime calls' correlation ids, the CPU-side spans the causes of GPU
idle are told from (steps, DataLoader calls, synchronising calls and the ops that issued them, long CPU
ops), kernel totals and FLOP counts. Memory is what bounds the size of trace this can read: a few tens of
bytes an event kept, nothing for the others.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.core.intervals import Spans
from tools.core.limits import TRACE_COLLECT_EVENTS
from tools.core.thresholds import LONG_OP_US
from tools.traces.compute import SHAPED_OPS, FlopCounter, kernel_precision
from tools.traces.kineto import TraceArgs, TraceEvent, TraceHeader, read_trace_batches
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

    def extend(self, ts: np.ndarray[Any, np.dtype[np.float64]], end: np.ndarray[Any, np.dtype[np.float64]],
               threads: Iterable[Any], names: Iterable[str]) -> None:
        """Many spans at once, in order (as many add calls would): the tables keep first-seen order."""
        self.ts.frombytes(ts.tobytes())
        self.end.frombytes(end.tobytes())
        for column, keys, index, table in ((self.thread, threads, self._thread_index, self.threads),
                                           (self.name, names, self._name_index, self.names)):
            codes = []
            for key in keys:
                code = index.get(key)
                if code is None:
                    code = index[key] = len(table)
                    table.append(key)
                codes.append(code)
            column.extend(codes)

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


def collect_events(batches: Iterable[list[TraceEvent]], steps_named: Any = None, *,
                   chunk_events: int = TRACE_COLLECT_EVENTS, columnar: bool = True) -> Collected:
    """One rank's events (a Kineto trace's, or an nsys export's process shaped like them) into the columns.

    The events are taken a chunk at a time (`chunk_events`, about; the reader's batches joined): a chunk whose fields
    all have the types traces use (numbers for ts and dur, strings for cat and name, an int or nothing for the
    stream) is sorted into the columns with numpy, in event order, as the per-event loop would; any other chunk
    (a mutated or odd trace) goes through that loop, which says what each odd value means. `columnar=False`: every
    chunk through the loop (the reference the columnar path is tested against)."""
    collector = _Collector(steps_named)
    pending: list[TraceEvent] = []
    for batch in batches:
        pending.extend(batch)
        if len(pending) >= chunk_events:
            collector.chunk(pending, columnar)
            pending = []
    if pending:
        collector.chunk(pending, columnar)
    return collector.finish()


# Each category spelling's meaning, as bits (computed once per spelling).
_CAT_TRACE = 1  # the profiler's own span ("Trace"): not an event of the job
_CAT_GPU_ANNOTATION = 2  # record_function ranges drawn on the GPU's timeline
_CAT_PYTHON = 4  # with_stack's python_function events
_CAT_MPI = 8
_CAT_RUNTIME = 16
_CAT_KERNEL = 32  # kernels, memcpys and memsets (the kernel table)
_CAT_CPU_OP = 64
_CAT_USER_ANNOTATION = 128
# Each op name's meaning on the host, as bits.
_NAME_STEP = 1  # ProfilerStep#N
_NAME_STEPS_NAMED = 2  # matches step_range (a step when it is a user annotation)
_NAME_DATALOADER = 4
_NAME_SYNC_OP = 8
_NAME_SHAPED = 16  # a matmul or convolution: its FLOPs may come from its shapes
_CATEGORY_SETS = ((_CAT_GPU_ANNOTATION, frozenset({"gpu_user_annotation"})),
                  (_CAT_PYTHON, frozenset({"python_function"})), (_CAT_MPI, frozenset({"mpi"})),
                  (_CAT_RUNTIME, _RUNTIME_CATS), (_CAT_KERNEL, _KERNEL_CATS),
                  (_CAT_CPU_OP, _CPU_OP_CATS), (_CAT_USER_ANNOTATION, frozenset({"user_annotation"})))
_ROLE_CODE = {"": 0, "sync": 1, "launch": 2}
_NUMBER_TYPES = frozenset({int, float})
_STR_TYPES = frozenset({str})
_INT_TYPES = frozenset({int})
_FLOAT_TYPES = frozenset({float})
_NONE_TYPES = frozenset({type(None)})
_INT64 = 2**63  # correlation ids beyond a signed 64-bit int are no id a profiler wrote (a mutated trace)
_LONG_OP_LIMIT = np.float64(LONG_OP_US)
_BUCKET_EDGES = np.array([10.0, 100.0, 1000.0])
_BUCKETS = ("<10us", "10-100us", "100us-1ms", ">=1ms")


def _floats(values: list[Any], types: set[type]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Python ints and floats as float64, each rounded as float() rounds it; OverflowError past float64 (or, for
    ints only, past int64: those lie far beyond the times kept anyway)."""
    if float in types:
        return np.array(values, dtype=np.float64)
    return np.array(values, dtype=np.int64).astype(np.float64)


def _correlation(value: Any) -> int:
    """A correlation id as the int64 column holds it; -1 (none) for anything else."""
    return value if type(value) is int and -_INT64 <= value < _INT64 else -1


def _correlations(values: list[Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """_correlation of each value, as an int64 column."""
    if set(map(type, values)) == _INT_TYPES:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return np.array([_correlation(value) for value in values], dtype=np.int64)


def _pick(values: list[Any], places: list[int]) -> list[Any]:
    """values[i] for each of `places`, at C speed."""
    if len(places) == 1:
        return [values[places[0]]]
    return list(operator.itemgetter(*places)(values)) if places else []


def _on_gpu(streams: list[int]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Whether each stream (an int, -1 for none) is a GPU stream."""
    try:
        ids = np.array(streams, dtype=np.int64)
    except OverflowError:  # an id past int64 (a mutated trace): still a stream
        return np.array([stream != -1 for stream in streams], dtype=bool)
    return np.not_equal(ids, -1)


class _Collector:
    """The state of one pass (the columns, and what the events so far set: spans, latest starts, caches)."""

    def __init__(self, steps_named: Any) -> None:
        self.data = Collected()
        self.steps_named = steps_named
        self.seen_kernels: dict[str, tuple[str, bool, str | None]] = {}
        self.runtime_roles: dict[str, str] = {}
        self.lowered: dict[str, str] = {}  # category spellings, lowered once each
        self.category_bits: dict[str, int] = {}
        self.name_bits: dict[str, int] = {}
        self.cpu_low: Any = math.inf
        self.cpu_high: Any = -math.inf
        self.gpu_last: Any = -math.inf
        self.runtime_last: Any = -math.inf
        self.host_last: Any = -math.inf
        self.events = 0

    def finish(self) -> Collected:
        data = self.data
        data.events = self.events
        data.cpu_span = [self.cpu_low, self.cpu_high]
        data.last_start = {kind: last for kind, last in (("gpu", self.gpu_last), ("runtime", self.runtime_last),
                                                          ("host", self.host_last)) if last > -math.inf}
        return data

    def chunk(self, events: list[TraceEvent], columnar: bool) -> None:
        """A chunk of complete events (the reader yields no other phase)."""
        if not (columnar and self._columns(events)):
            self._loop(events)

    def _lower(self, cat: str) -> str:
        category = self.lowered.get(cat)
        if category is None:
            category = cat.lower()
            if len(self.lowered) < _MAX_CACHED:
                self.lowered[cat] = category
        return category

    def _kernel_classes(self, name: str) -> tuple[str, bool, str | None]:
        classes = self.seen_kernels.get(name)
        if classes is None:  # kernel names repeat and are long: classify each name once
            kind = hta_kind(name)
            classes = self.seen_kernels[name] = (kind, kind == "comm" or bool(COMM_NAME.search(name)),
                                                 kernel_precision(name))
        return classes

    def _runtime_role(self, name: str) -> str:
        role = self.runtime_roles.get(name)
        if role is None:
            role = self.runtime_roles[name] = "sync" if is_sync_call(name) else (
                "launch" if _LAUNCH.search(name) else "")
        return role

    def _category_bits(self, cat: str) -> int:
        bits = self.category_bits.get(cat)
        if bits is None:
            category = self._lower(cat)
            bits = _CAT_TRACE if cat == "Trace" else 0
            for bit, member in _CATEGORY_SETS:
                if category in member:
                    bits |= bit
            if len(self.category_bits) < _MAX_CACHED:
                self.category_bits[cat] = bits
        return bits

    def _name_bits(self, name: str) -> int:
        bits = self.name_bits.get(name)
        if bits is None:
            bits = ((_NAME_STEP if name.startswith("ProfilerStep#") else 0)
                    | (_NAME_STEPS_NAMED if self.steps_named is not None and self.steps_named.search(name) else 0)
                    | (_NAME_DATALOADER if "DataLoader" in name and "__next__" in name else 0)
                    | (_NAME_SYNC_OP if name in _SYNC_OPS else 0) | (_NAME_SHAPED if name in SHAPED_OPS else 0))
            if len(self.name_bits) < _MAX_CACHED:
                self.name_bits[name] = bits
        return bits

    def _columns(self, events: list[TraceEvent]) -> bool:
        """A chunk of complete ('X') events sorted into the columns with numpy; False (nothing changed) when a field
        has a type the per-event loop must judge."""
        ts_raw = [e.ts for e in events]
        dur_raw = [e.dur for e in events]
        cats = [e.cat for e in events]
        names = [e.name for e in events]
        args = [e.args for e in events]
        # Each event's stream, -1 for none (no args, or no stream in them): an int other than -1 is a GPU stream.
        streams = [-1 if (s := (a.stream if a is not None else None)) is None else s for a in args]
        ts_types, dur_types = set(map(type, ts_raw)), set(map(type, dur_raw))
        try:
            # The distinct spellings and names, to classify each once; their types are the events' (a value of
            # another type never equals a string, so it would be among them). A list or dict cannot be hashed.
            spellings, distinct = list(set(cats)), list(set(names))
        except TypeError:
            return False
        if not (ts_types <= _NUMBER_TYPES and dur_types <= _NUMBER_TYPES and set(map(type, streams)) == _INT_TYPES
                and set(map(type, spellings)) == _STR_TYPES and set(map(type, distinct)) == _STR_TYPES):
            return False
        try:
            ts, dur = _floats(ts_raw, ts_types), _floats(dur_raw, dur_types)
        except OverflowError:
            return False
        # Everything below changes the state: nothing in it can refuse the chunk any more.
        data, count = self.data, len(events)
        # A time beyond 2**53 us is no clock's, NaN and infinities fail the comparisons too: skipped, counted (as
        # float64 these compare as the Python numbers do: each is rounded once, and none near the limit is kept).
        valid = (ts > -_TIME_LIMIT) & (ts < _TIME_LIMIT) & (dur > -_TIME_LIMIT) & (dur < _TIME_LIMIT)
        data.skipped += count - int(np.count_nonzero(valid))
        spelling_index = {cat: i for i, cat in enumerate(spellings)}
        cat_bits = np.array([self._category_bits(cat) for cat in spellings], dtype=np.uint16)[
            np.fromiter(map(spelling_index.__getitem__, cats), dtype=np.intp, count=count)]
        kept = valid & ((cat_bits & _CAT_TRACE) == 0)
        self.events += int(np.count_nonzero(kept))
        if float in ts_types and not data.float_ts:
            data.float_ts = bool((np.fromiter((type(t) is float for t in ts_raw), dtype=bool, count=count)
                                  & kept).any())
        kept &= (cat_bits & _CAT_GPU_ANNOTATION) == 0
        # HTA's rule, kept so the numbers compare: a numeric stream other than -1 makes a GPU event.
        on_gpu = _on_gpu(streams)
        name_index = {name: i for i, name in enumerate(distinct)}
        codes = np.fromiter(map(name_index.__getitem__, names), dtype=np.intp, count=count)
        end = ts + dur
        gpu = np.flatnonzero(kept & on_gpu)
        if gpu.size:
            self._gpu(gpu, ts, dur, end, ts_raw, dur_raw, dur_types, names, args, cat_bits, codes, distinct)
        host = kept & ~on_gpu & ((cat_bits & _CAT_PYTHON) == 0)
        mpi = np.flatnonzero(host & ((cat_bits & _CAT_MPI) != 0))
        for i in mpi.tolist():
            if not _MPI_SETUP.match(names[i]):
                data.host_comm.add(ts_raw[i], ts_raw[i] + dur_raw[i], _key(events[i].tid), names[i])
        host &= (cat_bits & _CAT_MPI) == 0
        on_host = np.flatnonzero(host)
        if on_host.size:
            self._host(on_host, events, ts, dur, end, ts_raw, dur_raw, names, args, cat_bits, codes, distinct)
        return True

    def _gpu(self, at: np.ndarray[Any, np.dtype[np.intp]], ts: np.ndarray[Any, np.dtype[np.float64]],
             dur: np.ndarray[Any, np.dtype[np.float64]], end: np.ndarray[Any, np.dtype[np.float64]],
             ts_raw: list[Any], dur_raw: list[Any], dur_types: set[type], names: list[str],
             args: list[TraceArgs | None], cat_bits: np.ndarray[Any, np.dtype[np.uint16]],
             codes: np.ndarray[Any, np.dtype[np.intp]], distinct: list[str]) -> None:
        """The GPU events of a chunk (`at`: their places in it, in order)."""
        data = self.data
        latest = int(at[np.argmax(ts[at])])  # the first of the latest: the loop keeps the first it met
        if ts_raw[latest] > self.gpu_last:
            self.gpu_last = ts_raw[latest]
        mine = codes[at]
        kind_of = np.zeros(len(distinct), dtype=np.uint8)
        comm_of = np.zeros(len(distinct), dtype=bool)
        precision_of = np.full(len(distinct), -1, dtype=np.intp)
        precisions: list[str] = []
        for code in np.unique(mine).tolist():
            kind, comm, precision = self._kernel_classes(distinct[code])
            kind_of[code], comm_of[code] = KIND_CODE[kind], comm
            if precision is not None:
                if precision not in precisions:
                    precisions.append(precision)
                precision_of[code] = precisions.index(precision)
        durations = dur[at]
        precision_at = precision_of[mine]
        if precisions:
            gemm = data.flops.gemm_time
            named = np.flatnonzero(precision_at >= 0)
            _, first = np.unique(precision_at[named], return_index=True)
            for which in precision_at[named[np.sort(first)]].tolist():  # the dict's keys in the order first met
                # A running sum from the total so far, in event order: the loop's additions exactly.
                total = np.cumsum(np.concatenate(([gemm.get(precisions[which], 0.0)],
                                                  durations[precision_at == which])))
                gemm[precisions[which]] = float(total[-1])
        mine_args = _pick(args, at.tolist())  # a GPU event has args (its stream)
        if data.device is None:
            for found in mine_args:
                if type(found.device) is int:
                    data.device = found.device
                    break
        collectives = [a.collective for a in mine_args]
        comm = comm_of[mine]
        if set(map(type, collectives)) != _NONE_TYPES:
            comm = comm | np.array([c is not None for c in collectives], dtype=bool)
        data.gpu_ts.frombytes(ts[at].tobytes())
        data.gpu_end.frombytes(end[at].tobytes())
        data.gpu_kind.extend(kind_of[mine].tobytes())
        data.gpu_comm.extend(comm.astype(np.uint8).tobytes())
        data.gpu_corr.frombytes(_correlations([a.correlation for a in mine_args]).tobytes())
        in_table = (cat_bits[at] & _CAT_KERNEL) != 0
        if in_table.any():
            self._kernel_table(mine[in_table], durations[in_table], comm[in_table], at[in_table], dur_raw, names,
                               distinct, dur_types)

    def _kernel_table(self, codes: np.ndarray[Any, np.dtype[np.intp]],
                      durations: np.ndarray[Any, np.dtype[np.float64]], comm: np.ndarray[Any, np.dtype[np.bool_]],
                      at: np.ndarray[Any, np.dtype[np.intp]], dur_raw: list[Any], names: list[str],
                      distinct: list[str], dur_types: set[type]) -> None:
        """Count and total time of each kernel name, in the order the names are first met, and the histogram."""
        data = self.data
        kernels = data.kernels
        present, first = np.unique(codes, return_index=True)
        order = np.argsort(first, kind="stable")
        present, first = present[order].tolist(), first[order].tolist()
        known = [kernels.get(distinct[code]) for code in present]
        totals = {type(stat[1]) for stat in known if stat is not None}
        # The totals as the loop's additions make them, in event order: ints summed exactly (as Python ints, while
        # no sum can pass int64), floats by a running float64 sum from the total so far (-0.0 for a new name: adding
        # it changes no value). Any other mix of types: the loop's own additions.
        exact = dur_types == _INT_TYPES and totals <= _INT_TYPES and (
            len(codes) * float(np.abs(durations).max()) < _INT64 / 2)
        floating = dur_types == _FLOAT_TYPES and totals <= _FLOAT_TYPES
        if exact or floating:
            counts = np.bincount(codes, minlength=len(distinct)).tolist()
            if exact:
                sums = np.zeros(len(distinct), dtype=np.int64)
                np.add.at(sums, codes, durations.astype(np.int64))
            else:
                sums = np.full(len(distinct), -0.0)
                for code, stat in zip(present, known, strict=True):
                    if stat is not None:
                        sums[code] = stat[1]
                np.add.at(sums, codes, durations)
            added = sums.tolist()
            for code, place, stat in zip(present, first, known, strict=True):
                if stat is None:
                    name = distinct[code]
                    kernels[name] = [counts[code], added[code], "comm" if comm[place] else self.seen_kernels[name][0]]
                else:
                    stat[0] += counts[code]
                    stat[1] = stat[1] + added[code] if exact else added[code]
        else:
            for i, is_comm in zip(at.tolist(), comm.tolist(), strict=True):
                name, duration = names[i], dur_raw[i]
                stat = kernels.get(name)
                if stat is None:
                    kernels[name] = [1, duration, "comm" if is_comm else self.seen_kernels[name][0]]
                else:
                    stat[0] += 1
                    stat[1] += duration
        buckets = np.searchsorted(_BUCKET_EDGES, durations, side="right")
        counts = np.bincount(buckets, minlength=len(_BUCKETS)).tolist()
        met, first_met = np.unique(buckets, return_index=True)
        for bucket in met[np.argsort(first_met)].tolist():  # the Counter's keys in the order the loop adds them
            data.kernel_durations[_BUCKETS[bucket]] += counts[bucket]

    def _host(self, at: np.ndarray[Any, np.dtype[np.intp]], events: list[TraceEvent],
              ts: np.ndarray[Any, np.dtype[np.float64]], dur: np.ndarray[Any, np.dtype[np.float64]],
              end: np.ndarray[Any, np.dtype[np.float64]], ts_raw: list[Any], dur_raw: list[Any], names: list[str],
              args: list[TraceArgs | None], cat_bits: np.ndarray[Any, np.dtype[np.uint16]],
              codes: np.ndarray[Any, np.dtype[np.intp]], distinct: list[str]) -> None:
        """The host events of a chunk but MPI calls (`at`: their places in it, in order)."""
        first = int(at[np.argmin(ts[at])])
        if ts_raw[first] < self.cpu_low:
            self.cpu_low = ts_raw[first]
        ends = end[at]
        if -_TIME_LIMIT < ends.min() and ends.max() < _TIME_LIMIT:  # every end exact as a float: compared exactly
            last = int(at[np.argmax(ends)])
            if ts_raw[last] + dur_raw[last] > self.cpu_high:
                self.cpu_high = ts_raw[last] + dur_raw[last]
        else:
            for i in at.tolist():
                if ts_raw[i] + dur_raw[i] > self.cpu_high:
                    self.cpu_high = ts_raw[i] + dur_raw[i]
        runtime_at = (cat_bits[at] & _CAT_RUNTIME) != 0
        runtime, other = at[runtime_at], at[~runtime_at]
        if runtime.size:
            latest = int(runtime[np.argmax(ts[runtime])])
            if ts_raw[latest] > self.runtime_last:
                self.runtime_last = ts_raw[latest]
            self._runtime(runtime, events, ts, dur, end, names, args, codes, distinct)
        if other.size:
            latest = int(other[np.argmax(ts[other])])
            if ts_raw[latest] > self.host_last:
                self.host_last = ts_raw[latest]
            self._ops(other, events, ts, dur, end, ts_raw, dur_raw, names, args, cat_bits, codes, distinct)

    def _runtime(self, at: np.ndarray[Any, np.dtype[np.intp]], events: list[TraceEvent],
                 ts: np.ndarray[Any, np.dtype[np.float64]], dur: np.ndarray[Any, np.dtype[np.float64]],
                 end: np.ndarray[Any, np.dtype[np.float64]], names: list[str], args: list[TraceArgs | None],
                 codes: np.ndarray[Any, np.dtype[np.intp]], distinct: list[str]) -> None:
        """Runtime calls: their correlation ids (the launches of GPU work), syncs and launches."""
        data = self.data
        places = at.tolist()
        # A call's correlation id is the launch of the GPU work with that id (an id below 0 links nothing).
        ids = _correlations([a.correlation if a is not None else None for a in _pick(args, places)])
        linked = ids != -1
        data.runtime_corr.frombytes(ids[linked].tobytes())
        data.runtime_ts.frombytes(ts[at[linked]].tobytes())
        mine = codes[at]
        role_of = np.zeros(len(distinct), dtype=np.uint8)
        graph_of = np.zeros(len(distinct), dtype=bool)
        for code in np.unique(mine).tolist():
            role_of[code] = _ROLE_CODE[self._runtime_role(distinct[code])]
            graph_of[code] = "GraphLaunch" in distinct[code]
        roles = role_of[mine]
        syncs = at[roles == _ROLE_CODE["sync"]]
        if syncs.size:
            data.syncs.extend(ts[syncs], end[syncs], (_key(events[i].tid) for i in syncs.tolist()),
                              (names[i] for i in syncs.tolist()))
        launching = roles == _ROLE_CODE["launch"]
        if launching.any():
            room = LAUNCH_SAMPLE - len(data.launch_durations)
            if room > 0:
                data.launch_durations.frombytes(dur[at[launching]][:room].tobytes())
            data.graph_launches += int(np.count_nonzero(graph_of[mine[launching]]))

    def _ops(self, at: np.ndarray[Any, np.dtype[np.intp]], events: list[TraceEvent],
             ts: np.ndarray[Any, np.dtype[np.float64]], dur: np.ndarray[Any, np.dtype[np.float64]],
             end: np.ndarray[Any, np.dtype[np.float64]], ts_raw: list[Any], dur_raw: list[Any], names: list[str],
             args: list[TraceArgs | None], cat_bits: np.ndarray[Any, np.dtype[np.uint16]],
             codes: np.ndarray[Any, np.dtype[np.intp]], distinct: list[str]) -> None:
        """Other host events: steps, DataLoader calls, the ops that sync, FLOP counts, long ops."""
        data = self.data
        mine = codes[at]
        name_bits = np.array([self._name_bits(name) for name in distinct], dtype=np.uint8)[mine]
        bits = cat_bits[at]
        step = ((name_bits & _NAME_STEP) != 0) | (((name_bits & _NAME_STEPS_NAMED) != 0)
                                                  & ((bits & _CAT_USER_ANNOTATION) != 0))
        loading = ~step & ((name_bits & _NAME_DATALOADER) != 0)
        syncing = ~step & ~loading & ((name_bits & _NAME_SYNC_OP) != 0)
        for i in at[step].tolist():
            data.steps.append((ts_raw[i], ts_raw[i] + dur_raw[i]))
        for i in at[loading].tolist():
            data.dataloader.append((ts_raw[i], ts_raw[i] + dur_raw[i]))
        if syncing.any():
            found = at[syncing]
            data.sync_ops.extend(ts[found], end[found], (_key(events[i].tid) for i in found.tolist()),
                                 (names[i] for i in found.tolist()))
        cpu_op = (bits & _CAT_CPU_OP) != 0
        if not cpu_op.any():
            return
        ops = at[cpu_op].tolist()
        op_args = _pick(args, ops)
        counted = [a.flops if a is not None else None for a in op_args]
        # add_op does nothing with an op that has no FLOP count unless its shapes can give one.
        candidate = (name_bits[cpu_op] & _NAME_SHAPED) != 0
        if set(map(type, counted)) != _NONE_TYPES:
            candidate |= np.array([c is not None for c in counted], dtype=bool)
        for k in np.flatnonzero(candidate).tolist():
            op, i = op_args[k], ops[k]
            if op is not None and (op.flops is not None or op.input_dims):
                data.flops.add_op(names[i], ts_raw[i], op.flops, op.input_dims, op.input_type)
        long = cpu_op & (dur[at] >= _LONG_OP_LIMIT) & ((name_bits & _NAME_STEP) == 0)
        if long.any():
            found = at[long]
            data.long_ops.extend(ts[found], end[found], itertools.repeat(None, found.size),
                                 (names[i] for i in found.tolist()))

    def _loop(self, events: list[TraceEvent]) -> None:
        """The per-event path: any field of any type (numbers as strings, bools, lists), judged event by event."""
        data = self.data
        steps_named = self.steps_named
        kernels, durations = data.kernels, data.kernel_durations
        time_low, time_high = -_TIME_LIMIT, _TIME_LIMIT  # made once: each negation of the big int allocated one
        for event in events:
            raw_ts, raw_dur, cat = event.ts, event.dur, event.cat
            ts = raw_ts if type(raw_ts) is int or type(raw_ts) is float else _number(raw_ts)
            dur = raw_dur if type(raw_dur) is int or type(raw_dur) is float else _number(raw_dur)
            # A time beyond 2**53 us (285 years) is no clock's (a mutated or corrupt event; a float column cannot
            # hold the int exactly, or at all), NaN and infinities fail the comparison too: skipped, counted.
            if (ts is None or dur is None or type(cat) is not str or not time_low < ts < time_high
                    or not time_low < dur < time_high):
                data.skipped += 1
                continue
            if cat == "Trace":
                continue
            if type(raw_ts) is float:
                data.float_ts = True
            self.events += 1
            name = event.name if type(event.name) is str else ""
            args = event.args
            end = ts + dur
            raw_stream = args.stream if args is not None else None
            stream = raw_stream if raw_stream is None or type(raw_stream) is int else _number(raw_stream)
            category = self._lower(cat)
            if category == "gpu_user_annotation":
                # record_function ranges drawn on the GPU's timeline (ProfilerStep#N among them): neither GPU work
                # nor a step, DataLoader call or op of the host; counted as a step they cut the window short.
                continue
            # HTA's rule, kept so the numbers compare: a numeric stream other than -1 makes a GPU event
            # (device-wide Event/Context Sync records carry stream -1 and count as CPU-side).
            if stream is not None and stream != -1:
                assert args is not None
                if ts > self.gpu_last:
                    self.gpu_last = ts
                kind, comm, precision = self._kernel_classes(name)
                if precision is not None:
                    data.flops.gemm_time[precision] = data.flops.gemm_time.get(precision, 0.0) + dur
                if data.device is None and type(args.device) is int:
                    data.device = args.device
                comm = comm or args.collective is not None
                data.gpu_ts.append(ts)
                data.gpu_end.append(end)
                data.gpu_kind.append(KIND_CODE[kind])
                data.gpu_comm.append(comm)
                data.gpu_corr.append(_correlation(args.correlation))
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
            if ts < self.cpu_low:
                self.cpu_low = ts
            if end > self.cpu_high:
                self.cpu_high = end
            runtime = category in _RUNTIME_CATS
            if runtime:
                if ts > self.runtime_last:
                    self.runtime_last = ts
            elif ts > self.host_last:
                self.host_last = ts
            if runtime:
                linked = _correlation(args.correlation) if args is not None else -1
                if linked != -1:
                    data.runtime_corr.append(linked)
                    data.runtime_ts.append(ts)
                role = self._runtime_role(name)
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

