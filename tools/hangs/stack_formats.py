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
from typing import Literal

from tools.core.frames import Frame, is_library
from tools.core.limits import HANG_COVERAGE_READ_LISTED
from tools.core.models import Coverage, CoverageStatus

__all__ = [
    "Activity",
    "ActivityKind",
    "ProcessDump",
    "ThreadStack",
    "Whereabouts",
    "locate",
    "main_thread",
    "parse_dump",
    "collective_family",
    "compact_coverage",
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


_C_SOURCE = re.compile(r"\.(?:c|cc|cpp|cxx|h|hpp|cu|cuh)$|\.so(?:\.[\d.]+)?$")


def _is_native(file: str, has_line: bool) -> bool:
    """py-spy --native frames: a library without a line, or a C source with one (`selectmodule.c:655`)."""
    if file.endswith(".py"):
        return False
    return not has_line or bool(_C_SOURCE.search(file))


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
            native = _is_native(str(f.get("filename") or ""), bool(line))
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
            native = _is_native(file, number is not None)
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
)
_FSDP_FILE = re.compile(r"torch/distributed/(?:fsdp|_composable/fsdp)/")
_FSDP_FUNCS = re.compile(r"unshard|_all_gather|foreach_all_gather|reduce_grad|foreach_reduce|post_backward|"
                         r"pre_forward|pre_backward|reshard")
_DDP_FILE = re.compile(r"torch/nn/parallel/distributed\.py")
_BACKWARD = frozenset({"_engine_run_backward", "run_backward", "backward"})


ActivityKind = Literal["collective", "input", "checkpoint", "sleeping", "computing", "blocked"]


@dataclass(frozen=True)
class Activity:
    """What a thread is doing, by the mechanism of its innermost meaningful frames: `kind` is the class (a
    collective, waiting for input, saving, sleeping, computing, or blocked in a call the frames do not show),
    `label` the mechanism that told (e.g. 'DataLoader.__next__', 'torch.save', 'time.sleep')."""

    kind: ActivityKind
    label: str
    frame: Frame | None = None


@dataclass(frozen=True)
class Whereabouts:
    """Where a stack stands: the collective or wait it sits in, what it is doing, and the user's frame that led
    there."""

    collective: str | None
    user_frame: Frame | None
    innermost: Frame | None
    activity: Activity = Activity("blocked", "unknown")

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
    if native_wait:
        return native_wait
    if any(f.function in _BACKWARD for f in python) and distributed_job:
        # Without native frames the C++ side is invisible; in a DDP job a backward that does not return is
        # the gradient all-reduce (py-spy --native shows c10d::Reducer to confirm).
        return "all_reduce (DDP backward, from the Python frames)"
    return None


# ---- what a rank does when it is not in a collective: families of modules and functions, by mechanism.
# Each rule: (file pattern or None, function pattern or None, kind, label); a frame matches when both given
# patterns match. Checked innermost frame first; the first frame that matches a *library* rule decides.
_Rule = tuple[re.Pattern[str] | None, re.Pattern[str] | None, ActivityKind, str]
_LIBRARY_RULES: tuple[_Rule, ...] = (
    # Saving: torch.save, torch.distributed.checkpoint (dcp.save / async_save, also when it sits in one of its
    # own collectives), safetensors, numpy, the frameworks' checkpoint writers.
    (re.compile(r"torch/distributed/checkpoint/"), re.compile(r"load", re.IGNORECASE), "input",
     "torch.distributed.checkpoint load (reading a checkpoint)"),
    (re.compile(r"torch/distributed/checkpoint/"), None, "checkpoint", "torch.distributed.checkpoint save"),
    (re.compile(r"torch/serialization\.py"), re.compile(r"load|unpickl|_read|mmap", re.IGNORECASE), "input",
     "torch.load (reading a file)"),
    (re.compile(r"torch/serialization\.py"), None, "checkpoint", "torch.save"),
    (re.compile(r"(?:^|/)safetensors/"), re.compile(r"save|serialize", re.IGNORECASE), "checkpoint",
     "safetensors save_file"),
    (re.compile(r"(?:^|/)safetensors/"), None, "input", "safetensors load (reading a file)"),
    (re.compile(r"numpy/lib/(?:_npyio_impl|npyio|format|_format_impl)\.py"), re.compile(r"save|write"),
     "checkpoint", "numpy save"),
    (re.compile(r"numpy/lib/(?:_npyio_impl|npyio|format|_format_impl)\.py"), None, "input",
     "numpy load (reading a file)"),
    (re.compile(r"(?:^|/)pickle\.py"), re.compile(r"dump"), "checkpoint", "pickle.dump"),
    (re.compile(r"(?:^|/)pickle\.py"), re.compile(r"load"), "input", "pickle.load"),
    (re.compile(r"checkpoint_io|checkpoint_connector|/checkpointing/|deepspeed/runtime/checkpoint_engine"),
     re.compile(r"save|write", re.IGNORECASE), "checkpoint", "framework checkpoint save"),
    (re.compile(r"(?:^|/)(?:transformers|accelerate|lightning|pytorch_lightning|deepspeed)/"),
     re.compile(r"save_(?:checkpoint|pretrained|state|model)|_save_checkpoint"), "checkpoint",
     "framework checkpoint save"),
    # Waiting for input: the DataLoader and what datasets read through.
    (re.compile(r"torch/utils/data/"), None, "input", "DataLoader"),
    (re.compile(r"(?:^|/)(?:fsspec|s3fs|gcsfs|adlfs|boto3|botocore|s3transfer|aiobotocore|huggingface_hub|"
                r"datasets|webdataset|streaming|pyarrow|petastorm|tensorflow_datasets|h5py|zarr|lance|decord|"
                r"soundfile|torchvision/io|torchvision/datasets|torchaudio/_backend|torchdata)/"), None, "input",
     "a storage / dataset read"),
    (re.compile(r"(?:^|/)PIL/"), None, "input", "PIL image open / decode"),
    # Sleeping.
    (re.compile(r"(?:^|/)asyncio/"), re.compile(r"^sleep$"), "sleeping", "asyncio.sleep"),
    # Computing: the model's forward / backward / optimizer step.
    (re.compile(r"torch/nn/modules/|torch/nn/functional\.py|torch/_dynamo/|torch/_inductor/|torch/_functorch/|"
                r"torch/fx/"), None, "computing", "the model's forward"),
    (re.compile(r"torch/optim/"), None, "computing", "the optimizer step"),
    (re.compile(r"torch/autograd/|torch/_tensor\.py"), re.compile(r"backward"), "computing", "the backward pass"),
)
# Waits whose meaning comes from the frames around them: they decide only when no library rule matched.
_GENERIC_RULES: tuple[_Rule, ...] = (
    (None, re.compile(r"^(?:__)?(?:clock_)?nanosleep$|^time_sleep$|^usleep$|^__GI___clock_nanosleep$"),
     "sleeping", "time.sleep"),
    (None, re.compile(r"^(?:__libc_|__GI___libc_)?(?:f?sync|fdatasync|write|pwrite64|writev|msync)$"),
     "checkpoint", "a file write / fsync"),
    (None, re.compile(r"^(?:__libc_|__GI___libc_)?(?:read|pread64|readv)$"), "input", "a file read"),
    (re.compile(r"(?:^|/)queue\.py|multiprocessing/(?:queues|connection)\.py"), None, "input",
     "a queue / pipe get (a producer such as the data pipeline)"),
    (re.compile(r"(?:^|/)threading\.py"), re.compile(r"wait|acquire"), "sleeping",
     "a threading Event / Condition wait"),
    (re.compile(r"(?:^|/)time\.py$"), re.compile(r"sleep"), "sleeping", "time.sleep"),
)
_CUDA_SYNC = re.compile(r"cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cuStreamSynchronize|"
                        r"cuCtxSynchronize|cudaMemcpy(?!Async)|_local_scalar_dense|item$")
# The user's own functions, by name (weaker than any library frame): a save / a read of their own.
_USER_SAVE = re.compile(r"(?:^|_)(?:save|checkpoint|ckpt|persist)(?:_|$)|save_checkpoint|checkpoint", re.IGNORECASE)
_USER_READ = re.compile(r"(?:^|_)(?:load|read|fetch|download|prefetch)(?:_|$)", re.IGNORECASE)
_ACTIVATION_CHECKPOINT = re.compile(r"torch/utils/checkpoint\.py")


def _match(rules: Sequence[_Rule], frame: Frame) -> tuple[ActivityKind, str] | None:
    for file_re, function_re, kind, label in rules:
        if file_re is not None and not file_re.search(frame.file.replace("\\", "/")):
            continue
        if function_re is not None and not function_re.search(frame.function.rsplit(".", 1)[-1]):
            continue
        return kind, label
    return None


def _activity(frames: Sequence[Frame], collective: str | None, idle: bool | None) -> Activity:
    """What the stack is doing. A checkpoint library around a collective (dcp.save gathers its plan) is a save;
    compute inside the DataLoader (a transform in the main process) is the data path; otherwise the innermost
    library frame of a known family decides, then the user's own function names, then generic waits."""
    library = [f for f in frames if is_library(f) and not _ACTIVATION_CHECKPOINT.search(f.file)]
    found: list[tuple[ActivityKind, str, Frame]] = []
    for frame in library:
        hit = _match(_LIBRARY_RULES, frame)
        if hit is not None:
            found.append((*hit, frame))
    saves = [f for f in found if f[0] == "checkpoint"]
    if collective is not None:
        if saves:
            return Activity("checkpoint", f"{saves[0][1]} (in its own {collective_family(collective)})", saves[0][2])
        return Activity("collective", collective)
    if found:
        kind, label, frame = found[0]
        if kind == "computing" and any(k == "input" and text == "DataLoader" for k, text, _ in found):
            return Activity("input", "DataLoader (computing a batch in the data pipeline)", frame)
        # The outermost frame of the same family is the call the user made (DataLoader __next__, torch.save).
        entry = [f for k, text, f in found if (k, text) == (kind, label)][-1]
        return Activity(kind, f"{label}: {entry.function}", frame)
    for frame in frames:
        if is_library(frame):
            continue
        name = frame.function.rsplit(".", 1)[-1]
        if _USER_SAVE.search(name):
            return Activity("checkpoint", f"{name} (a save, by its name)", frame)
        if _USER_READ.search(name):
            return Activity("input", f"{name} (a read, by its name)", frame)
    for frame in frames:
        if frame.native and _CUDA_SYNC.search(frame.function):
            return Activity("computing", "CUDA synchronize (its GPU still runs this rank's kernels)", frame)
        hit = _match(_GENERIC_RULES, frame)
        if hit is not None:
            return Activity(*hit, frame)
    innermost = next((f for f in frames if not f.native), None)
    if idle is False:  # py-spy saw it run: plain Python (or a C call of it that computes)
        return Activity("computing", "Python code" if innermost is None or not is_library(innermost)
                        else innermost.function, innermost)
    # Idle, or a dump that does not say (faulthandler): in a C call its Python frames do not show.
    return Activity("blocked", "a call the Python frames do not show (a sleep, I/O or a lock)", innermost)


def locate(frames: Sequence[Frame], *, distributed_job: bool = True, idle: bool | None = None) -> Whereabouts:
    user = next((f for f in frames if not is_library(f)), None)
    innermost = next((f for f in frames if not f.native), frames[0] if frames else None)
    collective = _collective(frames, distributed_job)
    return Whereabouts(collective, user, innermost, _activity(frames, collective, idle))


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
    elif where.activity.frame is not None and where.activity.kind != "computing":
        kind = f"{where.activity.kind}: {where.activity.frame.function}"
    else:
        kind = where.innermost.function if where.innermost else "?"
    return f"[{kind}] " + " < ".join(user)


def compact_coverage(entries: list[Coverage], what: str) -> list[Coverage]:
    """Every input not read whole, and the first HANG_COVERAGE_READ_LISTED read whole; the rest of those counted
    in one entry (`what`: 'stack files', 'dumps')."""
    read = [c for c in entries if c.status is CoverageStatus.read]
    if len(read) <= HANG_COVERAGE_READ_LISTED:
        return entries
    rest = read[HANG_COVERAGE_READ_LISTED:]
    kept = {id(c) for c in rest}
    shown = [c for c in entries if id(c) not in kept]
    return [*shown, Coverage.read(f"{len(rest)} more {what}", f"read whole, {rest[0].input} to {rest[-1].input}")]
