"""The one reader of Python stack dumps, and what a stack says about where a rank is.

Formats (all innermost frame first once parsed):
- `py-spy dump` text (`Thread 123 (idle): "MainThread"` then `    function (file:line)`; `--native` frames
  have no line; `--locals` lines are indented deeper and skipped) and `py-spy dump --json`;
- Python faulthandler (`Thread 0x... (most recent call first):` / `Current thread ...` then
  `  File "f", line N in fn`), which is also what torch's debug server returns for `dump_traceback`;
- a Python traceback (`Traceback (most recent call last):`, outermost first);
- bundles of several ranks in one file, as torch's debug server writes them (`=== Rank N: addr ===`).

Then: which frame is the innermost one of the user's own code, which collective or wait a stack sits in,
and a signature that is equal for ranks standing at the same place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from tools.core.frames import Frame, is_library

__all__ = [
    "ProcessDump",
    "ThreadStack",
    "Whereabouts",
    "locate",
    "main_thread",
    "parse_dump",
    "collective_family",
    "parse_pyspy_json",
    "signature",
]


@dataclass
class ThreadStack:
    name: str
    thread_id: str
    frames: list[Frame]  # innermost first
    idle: bool | None = None
    current: bool = False  # faulthandler's "Current thread"


@dataclass
class ProcessDump:
    threads: list[ThreadStack]
    pid: int | None = None
    rank: int | None = None  # from the content (a bundle header), when it says
    format: str = ""
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ parsing

_PYSPY_PROCESS = re.compile(r"^Process (\d+): ")
_PYSPY_THREAD = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+) \(([^)]*)\)(?:: "(.*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^ {4}(\S.*?) \((.*?)(?::(\d+))?\)\s*$")
_PYSPY_ADDRESS = re.compile(r"^ {4}(0x[0-9a-fA-F]+) \((.*)\)\s*$")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[([^\]]*)\])? \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+?)\s*$')
_TB_START = re.compile(r"^Traceback \(most recent call last\):")
_TB_FRAME = re.compile(r'^\s+File "(.*)", line (\d+), in (.+?)\s*$')
_BUNDLE_HEADER = re.compile(r"^=== Rank (\d+)(?:: .*)? ===\s*$", re.MULTILINE)
_TORCHRUN_PREFIX = re.compile(r"^\[(?:default)?\d+\]:|^\[rank\d+\]:")


def parse_dump(text: str) -> list[ProcessDump]:
    """Every process in `text` (one, or several for bundles and `py-spy dump --subprocesses`)."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            return [parse_pyspy_json(json.loads(stripped))]
        except (ValueError, TypeError, KeyError, RecursionError):
            pass  # not py-spy JSON after all: try the text formats
    headers = list(_BUNDLE_HEADER.finditer(text))
    if headers:
        dumps = []
        for i, header in enumerate(headers):
            end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
            for dump in _parse_text(text[header.end():end]):
                dump.rank = int(header.group(1))
                dumps.append(dump)
        return dumps
    return _parse_text(text)


def parse_pyspy_json(data: object) -> ProcessDump:
    """`py-spy dump --json`: a list of threads, each with frames (innermost first)."""
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(t, dict) and "frames" in t for t in data):
        raise ValueError("not a py-spy JSON dump")
    threads = []
    pid = None
    for item in data:
        frames = []
        for f in item["frames"]:
            line = f.get("line")
            filename = str(f.get("short_filename") or f.get("filename") or "?")
            native = not str(f.get("filename") or "").endswith(".py") and not line
            frames.append(Frame(str(f.get("name", "?")), filename, line if isinstance(line, int) and line > 0
                                else None, native))
        pid = pid or item.get("pid")
        threads.append(ThreadStack(str(item.get("thread_name") or ""), str(item.get("os_thread_id") or
                                                                           item.get("thread_id") or ""),
                                   frames, idle=not item.get("active", True)))
        if item.get("os_thread_id") and item.get("os_thread_id") == item.get("pid"):
            threads[-1].current = True  # the process's first thread: the main thread
    return ProcessDump(threads, pid=pid if isinstance(pid, int) else None, format="py-spy json")


def _parse_text(text: str) -> list[ProcessDump]:
    dumps: list[ProcessDump] = []
    current: ProcessDump | None = None
    thread: ThreadStack | None = None
    traceback_frames: list[Frame] | None = None

    def process(fmt: str, pid: int | None = None) -> ProcessDump:
        nonlocal current
        if current is None or pid is not None:
            current = ProcessDump([], pid=pid, format=fmt)
            dumps.append(current)
        return current

    for raw in text.splitlines():
        line = _TORCHRUN_PREFIX.sub("", raw.rstrip("\r"), count=1) if raw.startswith("[") else raw.rstrip("\r")
        if (m := _PYSPY_PROCESS.match(line)) is not None:
            process("py-spy", int(m.group(1)))
            thread = None
            continue
        if (m := _PYSPY_THREAD.match(line)) is not None:
            dump = process("py-spy")
            state = m.group(2)
            thread = ThreadStack(m.group(3) or "", m.group(1), [], idle="idle" in state)
            if current is not None and current.pid is not None and m.group(1) == str(current.pid):
                thread.current = True
            dump.threads.append(thread)
            continue
        if (m := _FH_THREAD.match(line)) is not None:
            dump = process("faulthandler")
            thread = ThreadStack(m.group(3) or "", m.group(2), [], current=m.group(1) == "Current thread")
            dump.threads.append(thread)
            traceback_frames = None
            continue
        if _TB_START.match(line):
            dump = process("traceback")
            traceback_frames = []
            thread = ThreadStack("", "", traceback_frames)
            dump.threads.append(thread)
            continue
        if thread is None:
            continue
        if traceback_frames is not None and (m := _TB_FRAME.match(line)) is not None:
            traceback_frames.insert(0, Frame(m.group(3), m.group(1), int(m.group(2))))
            continue
        if (m := _FH_FRAME.match(line)) is not None:
            thread.frames.append(Frame(m.group(3), m.group(1), int(m.group(2))))
            continue
        if (m := _PYSPY_ADDRESS.match(line)) is not None:
            thread.frames.append(Frame(m.group(1), m.group(2), None, native=True))
            continue
        if (m := _PYSPY_FRAME.match(line)) is not None:
            file = m.group(2)
            number = m.group(3)
            native = number is None and not file.endswith(".py")
            thread.frames.append(Frame(m.group(1), file, int(number) if number else None, native))
            continue
    return [d for d in dumps if d.threads]


def main_thread(dump: ProcessDump) -> ThreadStack | None:
    """The thread that runs the training loop: named MainThread, or the process's first thread, or the one
    whose outermost Python frame is `<module>`, or the first listed."""
    if not dump.threads:
        return None
    tests: tuple[Callable[[ThreadStack], bool], ...] = (
        lambda t: t.name == "MainThread",
        lambda t: t.current and dump.format != "faulthandler",
        lambda t: any(f.function == "<module>" for f in t.frames[-2:]),
        lambda t: t.current,
    )
    for test in tests:
        found = [t for t in dump.threads if test(t)]
        if found:
            return found[0]
    return dump.threads[0]


# ------------------------------------------------------------------------------------------------ meaning

# Python functions of torch.distributed that are a collective or point-to-point call, by name.
_C10D_CALLS = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "broadcast", "broadcast_object_list", "barrier", "monitored_barrier", "_store_based_barrier", "reduce",
    "gather", "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single", "send",
    "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list", "wait",
    "wait_tensor", "_wait_tensor",
})
_DISTRIBUTED_FILE = re.compile(r"torch/distributed/|torch/_C/_distributed|c10d")
# Named waits in library code (Python or native frames), checked innermost first.
_WAITS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"c10d::Reducer::|Reducer::finalize_backward|Reducer::mark_variable_ready"),
     "all_reduce (DDP backward)"),
    (re.compile(r"ProcessGroup\w*::(?:allreduce|all_reduce)"), "all_reduce"),
    (re.compile(r"ProcessGroup\w*::(?:allgather|all_gather)"), "all_gather"),
    (re.compile(r"ProcessGroup\w*::(?:reduce_scatter|reduce_scatter_tensor)"), "reduce_scatter"),
    (re.compile(r"ProcessGroup\w*::broadcast"), "broadcast"),
    (re.compile(r"ProcessGroup\w*::barrier"), "barrier"),
    (re.compile(r"c10d::\w*Work\w*::wait|Work::wait|WorkNCCL::synchronize"), "wait (c10d Work.wait)"),
    (re.compile(r"TCPStore|c10d::Store::wait|rendezvous|_store_based_barrier|init_process_group"),
     "rendezvous / store wait"),
    (re.compile(r"ncclCommInit|ncclGroupEnd"), "NCCL communicator init"),
    (re.compile(r"cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cuStreamSynchronize"),
     "CUDA synchronize"),
)
_FSDP_FILE = re.compile(r"torch/distributed/(?:fsdp|_composable/fsdp)/")
_FSDP_FUNCS = re.compile(r"unshard|_all_gather|foreach_all_gather|reduce_grad|foreach_reduce|post_backward|"
                         r"pre_forward|pre_backward|reshard")
_DDP_FILE = re.compile(r"torch/nn/parallel/distributed\.py")
_DATALOADER_FILE = re.compile(r"torch/utils/data/dataloader\.py")
_BACKWARD = frozenset({"_engine_run_backward", "run_backward", "backward"})


@dataclass(frozen=True)
class Whereabouts:
    """Where a stack stands: the collective or wait it sits in, and the user's frame that led there."""

    collective: str | None
    user_frame: Frame | None
    innermost: Frame | None

    @property
    def location(self) -> str:
        return self.user_frame.display() if self.user_frame else "(no frame of the user's code)"


def _waits_in(frames: Sequence[Frame]) -> str | None:
    for frame in frames:
        for pattern, label in _WAITS:
            if pattern.search(frame.function):
                return label
    return None


def _collective(frames: Sequence[Frame], distributed_job: bool) -> str | None:
    library_prefix: list[Frame] = []
    for frame in frames:  # innermost first; stop at the user's code
        if not is_library(frame):
            break
        library_prefix.append(frame)
    native_wait = _waits_in([f for f in library_prefix if f.native])
    python = [f for f in library_prefix if not f.native]
    for frame in python:
        if frame.function in _C10D_CALLS and _DISTRIBUTED_FILE.search(frame.file):
            if frame.function in ("wait", "wait_tensor", "_wait_tensor"):
                return native_wait or "wait (c10d Work.wait)"
            return frame.function
        if _FSDP_FILE.search(frame.file) and _FSDP_FUNCS.search(frame.function):
            return f"FSDP {frame.function}"
        if _DDP_FILE.search(frame.file):
            return native_wait or f"DDP {frame.function}"
        if frame.function == "init_process_group" or "rendezvous" in frame.function:
            return "rendezvous / store wait"
        if _DATALOADER_FILE.search(frame.file):
            return "DataLoader next (waiting for data)"
    if native_wait:
        return native_wait
    if any(f.function in _BACKWARD for f in python) and distributed_job:
        # Without native frames the C++ side is invisible; in a DDP job a backward that does not return is
        # the gradient all-reduce (py-spy --native shows c10d::Reducer to confirm).
        return "all_reduce (DDP backward, from the Python frames)"
    for frame in library_prefix:
        if frame.function in ("sleep", "time.sleep", "clock_nanosleep", "nanosleep"):
            return "sleep"
    return None


def locate(frames: Sequence[Frame], *, distributed_job: bool = True) -> Whereabouts:
    user = next((f for f in frames if not is_library(f)), None)
    innermost = next((f for f in frames if not f.native), frames[0] if frames else None)
    return Whereabouts(_collective(frames, distributed_job), user, innermost)


def collective_family(label: str) -> str:
    """The op of a collective label, without how it was recognised: 'all_reduce (DDP backward)' -> 'all_reduce'."""
    return label.split(" (", 1)[0]


def signature(frames: Iterable[Frame], where: Whereabouts) -> str:
    """Equal for ranks at the same place: the user's frames (function, file, line) and the wait kind.

    Library frames are left out so that jitter inside a library (a different line of a wait loop) does not
    split ranks that stand at the same call site."""
    user = [f"{f.function}@{f.file.rsplit('/', 1)[-1]}:{f.line}" for f in frames if not is_library(f)]
    if where.collective:
        kind = collective_family(where.collective)
    else:
        kind = where.innermost.function if where.innermost else "?"
    return f"[{kind}] " + " < ".join(user)
