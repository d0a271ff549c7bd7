"""profile_cpu: where the host's time goes while the GPU waits: py-spy record of the job's processes (or saved
py-spy raw / speedscope files), read per process role, with one verdict.

Roles: a DataLoader worker is told by the `_worker_loop` frame (torch/utils/data/_utils/worker.py), never by its
root frames (a forked worker carries the trainer's stack above it, notes host_evidence.md §0.4); the pin-memory
thread by `_pin_memory_loop`; the trainer is the main thread of a process that is no worker. Recorded with `--idle`
(else a starved trainer, blocked in the input queue, is missing from the samples), `--subprocesses` (the workers)
and `--threads`; idle samples are told by their leaf. Threads that wait for the GIL look busy to py-spy (their
leaf is Python code), so GIL contention is told by the CPU time the process used while recording: several threads
wanting to run, one core's worth run. py-spy writes its file only when it stops: it records for
`duration_s` and stops itself; past that and a grace it gets SIGINT (it then writes), then SIGKILL, and every
target is sent SIGCONT (a blocking py-spy killed mid-sample can leave one stopped).
SOP: gpu_utilization_low (the host side of GPU idle).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import anyio
import psutil
from pydantic import BaseModel, Field, model_validator

from tools.cluster import collect_from_nodes, job_backend, node_name, processes_by_match, processes_by_pid
from tools.core.context import ToolContext
from tools.core.errors import BadInput, UnreadableInput
from tools.core.files import expand_inputs, read_whole_text
from tools.core.limits import (
    CPU_DEFAULT_DURATION_S,
    CPU_DEFAULT_RATE_HZ,
    CPU_MAX_DURATION_S,
    CPU_MAX_FILE_BYTES,
    CPU_MAX_PROCESSES,
    CPU_MAX_RATE_HZ,
    CPU_MAX_STACKS,
    CPU_MIN_DURATION_S,
    CPU_STOP_GRACE_S,
    CPU_TOP_FUNCTIONS,
    STACK_MAX_MATCH_CHARS,
)
from tools.core.models import Coverage, NextStep, NodesInput, PathArg, Severity, Table, ToolResult, worst
from tools.core.proc import find_program
from tools.core.thresholds import (
    GIL_CORES_RATIO,
    GIL_MAX_CORES,
    GIL_THREAD_BUSY_SHARE,
    INPUT_WAIT_SHARE,
    IO_READ_SHARE,
    MAIN_LOOP_BUSY_SHARE,
    MAIN_LOOP_MIN_CORES,
    PROFILE_MIN_SAMPLES,
    SYNC_WAIT_SHARE,
    WORKER_BUSY_SHARE,
)
from tools.host.job import NodeVerdict, gather_nodes, job_pids_here, label_rows, node_timeout_for
from tools.host.pyspy_record import Frame, ThreadSamples, is_idle_leaf, parse_record

__all__ = ["ProfileCpuInput", "ProfileCpuResult", "profile_cpu"]

_BRANCH = "gpu_utilization_low"
Role = Literal["trainer", "pin_memory", "dataloader_worker", "other"]
Verdict = Literal["input_bound_cpu", "input_bound_io", "main_loop_cpu_bound", "gil_contention", "implicit_sync",
                  "none"]
_DATALOADER = "torch/utils/data/dataloader.py"
_WORKER = "torch/utils/data/_utils/worker.py"
_FETCH = "torch/utils/data/_utils/fetch.py"
# Where user code is not: the libraries a pipeline calls into and Python's own modules (py-spy shortens file names
# to the package-relative path: torch/utils/..., threading.py).
_LIBRARIES = ("torch/", "torchvision/", "numpy/", "PIL/", "cv2/", "transformers/", "datasets/", "pandas/", "scipy/",
              "tqdm/", "accelerate/", "multiprocessing/", "concurrent/", "asyncio/", "importlib/", "encodings/",
              "json/", "logging/", "collections/", "<frozen", "<string>")
_STDLIB = frozenset({"threading.py", "queue.py", "selectors.py", "socket.py", "abc.py", "functools.py",
                     "contextlib.py", "typing.py", "random.py", "re.py", "pickle.py", "copyreg.py", "os.py",
                     "posixpath.py", "genericpath.py", "codecs.py", "shutil.py", "tempfile.py", "traceback.py",
                     "weakref.py", "signal.py", "subprocess.py", "runpy.py", "io.py", "warnings.py"})
_READS = frozenset({"read", "readinto", "readline", "readlines", "pread", "_read", "read_bytes", "read_text",
                    "open", "_open", "fromfile", "load", "loadtxt", "imread", "recv_into"})
_SYNC = ("synchronize", "_local_scalar_dense", "item", "tolist")


class ProfileCpuInput(NodesInput):
    pid: list[int] = Field(default_factory=list, max_length=CPU_MAX_PROCESSES, description="The trainer processes "
                           "to record (their DataLoader workers come with them: --subprocesses).")
    match: str | None = Field(default=None, min_length=1, max_length=STACK_MAX_MATCH_CHARS,
                              description="A regex (RE2) on the command line, e.g. 'train.py', instead of pids.")
    cli_positional = "from_files"  # `gpu-triage profile-cpu rec.txt`, as the other readers of files

    from_files: list[PathArg] = Field(default_factory=list, max_length=64, description="py-spy record outputs saved "
                                      "earlier: raw (-f raw) or speedscope (-f speedscope), inside the roots.")
    duration_s: float = Field(default=CPU_DEFAULT_DURATION_S, ge=CPU_MIN_DURATION_S, le=CPU_MAX_DURATION_S,
                              description="How long to record.")
    rate: int = Field(default=CPU_DEFAULT_RATE_HZ, ge=1, le=CPU_MAX_RATE_HZ, description="Samples a second.")
    native: bool = Field(default=False, description="py-spy --native: C/C++ frames too (not with nonblocking).")
    nonblocking: bool = Field(default=False, description="py-spy --nonblocking: never pause the processes (less "
                              "accurate).")
    gil: bool = Field(default=False, description="py-spy --gil: only the thread holding the GIL (idle samples are "
                      "then left out).")

    @model_validator(mode="after")
    def _one_source(self) -> ProfileCpuInput:
        chosen = sum(bool(x) for x in (self.pid, self.match, self.from_files))
        if chosen > 1:
            raise ValueError("pass one of pid, match or from_files (none: the job's ranks on this host)")
        if chosen and (self.slurm_job is not None or self.hosts or self.hostfile is not None):
            raise ValueError("with slurm_job or hosts each node finds the job's ranks itself: pid, match and "
                             "from_files are for one node")
        if self.native and self.nonblocking:
            raise ValueError("native and nonblocking cannot be combined (py-spy refuses it)")
        return self


class TopFunction(BaseModel):
    function: str
    file: str
    line: int | None
    self_pct: float = Field(description="% of the role's samples with this frame innermost.")
    total_pct: float = Field(description="% of the role's samples with this frame anywhere in the stack.")


class ProcessProfile(BaseModel):
    pid: int | None
    node: str | None = Field(default=None, description="The node, in a job-level call.")
    role: Role
    threads: int
    samples: int
    idle_pct: float = Field(description="% of samples waiting (a lock, a queue, select, sleep), told by the leaf.")
    top: list[TopFunction] = Field(description="Busy samples' functions, most self time first.")


class CpuFinding(BaseModel):
    kind: Verdict
    severity: Severity
    evidence: str
    fix: str
    pid: int | None = None
    node: str | None = None
    sop_branch: str = _BRANCH


class ProfileCpuResult(ToolResult):
    verdict: Verdict
    processes: list[ProcessProfile]
    findings: list[CpuFinding]
    node: str | None = Field(default=None, description="The node this answer is from (collector mode).")
    nodes: list[NodeVerdict] = Field(default_factory=list, description="A job-level call: each node's verdict.")

    narrow_hint = "record fewer processes"

    def tables(self) -> list[Table]:
        return [
            Table("Verdict", ["kind", "severity", "pid", "evidence", "fix"],
                  [[f.kind, f.severity.value, str(f.pid) if f.pid else "-", f.evidence, f.fix]
                   for f in self.findings], "findings"),
            Table("Processes", ["node", "pid", "role", "threads", "samples", "idle %", "top (self %)"],
                  [[p.node or "-", str(p.pid) if p.pid else "-", p.role, str(p.threads), str(p.samples),
                    f"{p.idle_pct:.0f}",
                    "; ".join(f"{t.function} ({t.file}:{t.line}) {t.self_pct:.0f}" for t in p.top[:3])]
                   for p in self.processes], "processes"),
            Table("Nodes", ["node", "verdict", "severity", "evidence"],
                  [[n.node, n.verdict, n.severity.value if n.severity else "-", n.evidence] for n in self.nodes],
                  "nodes"),
        ]


# ---------------------------------------------------------------- recording


async def _record(pid: int, params: ProfileCpuInput, folder: Path, deadline: float) -> tuple[str | None, str]:
    """py-spy record of `pid` and its subprocesses into a raw file: its text, or None and why."""
    output = folder / f"{pid}.txt"
    argv = [find_program("py-spy"), "record", "--pid", str(pid), "--duration", str(max(1, round(params.duration_s))),
            "--rate", str(params.rate), "--format", "raw", "--output", str(output), "--threads", "--subprocesses"]
    argv += ["--gil"] if params.gil else ["--idle"]
    argv += ["--native"] if params.native else []
    argv += ["--nonblocking"] if params.nonblocking else []
    try:
        process = await anyio.open_process(argv, start_new_session=True, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as exc:
        return None, f"py-spy could not be started: {exc.strerror or exc}"
    stopped_by = ""
    errors: list[bytes] = []
    drained = anyio.Event()

    async def drain() -> None:  # read stderr as it comes: a full pipe would block py-spy
        try:
            if process.stderr is not None:
                async for chunk in process.stderr:
                    if sum(map(len, errors)) < 65536:
                        errors.append(chunk)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            drained.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(drain)
            with anyio.move_on_after(max(0.5, min(params.duration_s + CPU_STOP_GRACE_S,
                                                  deadline - time.monotonic()))):
                await process.wait()
            if process.returncode is None:  # past its time: SIGINT makes py-spy write what it has
                stopped_by = "stopped with SIGINT past its duration"
                process.send_signal(signal.SIGINT)
                with anyio.move_on_after(3):
                    await process.wait()
            if process.returncode is None:
                stopped_by = "killed: it did not stop on SIGINT"
                process.kill()
                with anyio.move_on_after(2):
                    await process.wait()
            with anyio.move_on_after(1):  # its last words, then no longer
                await drained.wait()
            group.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        _continue(pid)
    error = b"".join(errors).decode("utf-8", "replace")
    if output.is_file():
        return output.read_text(encoding="utf-8", errors="replace"), stopped_by
    return None, stopped_by or _failure(error)


def _continue(pid: int) -> None:
    """SIGCONT to the target and its children: a sampled process must never be left stopped."""
    try:
        targets = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for target in targets:
        try:
            os.kill(target.pid, signal.SIGCONT)
        except OSError:
            continue


def _failure(stderr: str) -> str:
    text = stderr.lower()
    if "permission denied" in text or "operation not permitted" in text:
        return "py-spy may not attach (ptrace): run as the job's user or root, or add CAP_SYS_PTRACE."
    if "no such process" in text or "failed to get process executable name" in text:
        return "the process has exited (or the pid is wrong)."
    if "failed to find python version" in text or "no python processes found" in text:
        return "not a Python process: give the trainer's pid."
    first = next((line.strip() for line in stderr.splitlines() if line.strip()), "no output")
    return f"py-spy wrote no profile: {first[:200]}"


# ---------------------------------------------------------------- reading


def _is_user(frame: Frame) -> bool:
    return bool(frame.file) and not frame.file.startswith(_LIBRARIES) and frame.file not in _STDLIB and not any(
        part in frame.file for part in ("site-packages/", "dist-packages/", "/lib/python"))


def _runs_worker_loop(thread: ThreadSamples) -> bool:
    return any(f.short == "_worker_loop" and f.file.endswith(_WORKER) for s in thread.stacks for f in s)


def _role(thread: ThreadSamples, workers: set[int | None]) -> Role:
    if thread.pid in workers:  # the worker's own loop; its queue feeder and fd-sharing threads are "other"
        return "dataloader_worker" if _runs_worker_loop(thread) else "other"
    if "_pin_memory_loop" in thread.thread or any(f.short == "_pin_memory_loop" for s in thread.stacks for f in s):
        return "pin_memory"
    return "trainer" if thread.thread in ("MainThread", "?") else "other"


def _below_worker_loop(stack: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """A forked worker's stack from `_worker_loop` down (the frames above it are the trainer's, inherited)."""
    for index, frame in enumerate(stack):
        if frame.short == "_worker_loop" and frame.file.endswith(_WORKER):
            return stack[index:]
    return stack


class _Role:
    def __init__(self) -> None:
        self.threads = 0
        self.samples = 0
        self.idle = 0
        self.self_count: Counter[Frame] = Counter()
        self.total_count: Counter[Frame] = Counter()
        self.user_count: Counter[Frame] = Counter()  # the innermost user frame of busy samples
        self.in_loader_wait = 0  # trainer: waiting on the DataLoader's queue
        self.in_loader_fetch = 0  # trainer with num_workers=0: fetching batches itself
        self.in_sync = 0
        self.reads = 0

    def add(self, stack: tuple[Frame, ...], count: int) -> None:
        self.samples += count
        if not stack:
            return
        leaf = stack[-1]
        idle = is_idle_leaf(leaf)
        in_loader = any(f.file.endswith(_DATALOADER) and f.short in ("_next_data", "__next__", "_get_data",
                                                                       "_try_get_data") for f in stack)
        if idle:
            self.idle += count
            self.in_loader_wait += count if in_loader else 0
            return
        if in_loader and any(f.file.endswith(_FETCH) for f in stack):
            self.in_loader_fetch += count
        if any(name in f.short for f in stack[-4:] for name in _SYNC if "cuda" in f.file or name == "synchronize"):
            self.in_sync += count
        if leaf.short in _READS or any(f.short in _READS for f in stack[-3:]):
            self.reads += count
        self.self_count[leaf] += count
        for frame in set(stack):
            self.total_count[frame] += count
        user = next((f for f in reversed(stack) if _is_user(f)), None)
        if user is not None:
            self.user_count[user] += count

    @property
    def busy(self) -> int:
        return self.samples - self.idle

    def top(self) -> list[TopFunction]:
        shown = [f for f, _ in self.self_count.most_common(CPU_TOP_FUNCTIONS)]
        return [TopFunction(function=f.function, file=f.file, line=f.line,
                            self_pct=round(100 * self.self_count[f] / max(self.samples, 1), 1),
                            total_pct=round(100 * self.total_count[f] / max(self.samples, 1), 1)) for f in shown]

    def hot_user(self) -> Frame | None:
        return self.user_count.most_common(1)[0][0] if self.user_count else None


def _analyse(threads: list[ThreadSamples], notes: list[str], cores: dict[int, float] | None = None,
             coverage: list[Coverage] | None = None) -> ProfileCpuResult:
    """`cores`: per pid, the cores its process used while it was recorded (live only)."""
    workers = {t.pid for t in threads if _runs_worker_loop(t)}
    by_process: dict[tuple[int | None, Role], _Role] = defaultdict(_Role)
    for thread in threads:
        role = _role(thread, workers)
        measure = by_process[(thread.pid, role)]
        measure.threads += 1
        for stack, count in thread.stacks.items():
            measure.add(_below_worker_loop(stack) if role == "dataloader_worker" else stack, count)
    rows = [ProcessProfile(pid=pid, role=role, threads=m.threads, samples=m.samples,
                           idle_pct=round(100 * m.idle / max(m.samples, 1), 1), top=m.top())
            for (pid, role), m in sorted(by_process.items(), key=lambda kv: (kv[0][1] != "trainer", kv[0][0] or 0))]
    trainer_cores = [(cores or {}).get(pid) for (pid, role) in by_process if role == "trainer" and pid is not None]
    waiting = bool(trainer_cores) and all(c is not None and c < MAIN_LOOP_MIN_CORES for c in trainer_cores)
    findings = _verdicts(by_process, _gil_contention(threads, cores or {}, by_process), waiting)
    if waiting and not findings:
        used = max(c or 0.0 for c in trainer_cores)
        notes.append(f"The trainer's main thread sits in Python frames that called into native code, yet its process "
                     f"used at most {used:.2f} cores: it waits (a collective, a device sync or I/O) rather than "
                     "computes; dump_stacks says on what, summarize_trace says for how long.")
    if not any(m.samples for m in by_process.values()):
        notes.append("No sample was recorded: the processes may have exited, or py-spy saw no Python thread.")
    trainer_samples = sum(m.samples for (_, role), m in by_process.items() if role == "trainer")
    if trainer_samples < PROFILE_MIN_SAMPLES:
        # Too few of the trainer's samples for its shares to mean anything: no verdict either way.
        findings = []
    verdict: Verdict = findings[0].kind if findings else "none"
    result = ProfileCpuResult(
        severity=worst(f.severity for f in findings), verdict=verdict, processes=rows, findings=findings,
        notes=notes[:10], conclusion=_conclude(verdict, findings, rows), coverage=coverage or [],
        next_steps=[NextStep(branch=_BRANCH, step="trace", action="Fix it, then profile again (profile_cpu, and "
                             "summarize_trace on a torch.profiler trace) and compare_runs before/after",
                             why="The share of the input pipeline or the main loop should fall.")])
    unsampled = [c for c in result.coverage if c.status.value == "not_understood"]
    if trainer_samples < PROFILE_MIN_SAMPLES:
        result.severity = Severity.unknown
        result.decides = (f"A recording with at least {PROFILE_MIN_SAMPLES} samples of the trainer's main thread "
                          "(a longer duration_s, or py-spy record --idle of the trainer's pid)")
        result.conclusion = [result.conclusion[0], f"Cannot judge: the trainer's main thread has {trainer_samples} "
                             f"sample(s), under the {PROFILE_MIN_SAMPLES} its shares need"
                             + (" (no trainer thread in the profile)." if not trainer_samples else "."),
                             f"Record again: {result.decides}."]
    elif unsampled and not findings:
        result.severity = Severity.unknown
        result.decides = "py-spy record of the pid(s) that could not be sampled (as the job's user or root)"
        result.conclusion[1:] = [f"No bottleneck in what was sampled, but {len(unsampled)} process(es) could not be "
                                 f"({unsampled[0].input}: {unsampled[0].detail}).", f"Record {result.decides}."]
    return result


def _where(frame: Frame | None) -> str:
    return f"{frame.function} ({frame.where})" if frame is not None else "no user function in the samples"


def _hot_spot(measure: _Role) -> str:
    """The innermost user frame, and the function with the most self samples when that is another one: a job whose
    own code is an installed package has only its entry script as 'user' code, and the time is in the package."""
    user = measure.hot_user()
    hottest = next(iter(measure.self_count.most_common(1)), None)
    if hottest is None or hottest[0] == user:
        return _where(user)
    share = hottest[1] / max(measure.samples, 1)
    return f"{_where(user)}; hottest function {_where(hottest[0])} with {share:.0%} self"


def _busy_share(thread: ThreadSamples) -> float:
    busy = sum(count for stack, count in thread.stacks.items() if stack and not is_idle_leaf(stack[-1]))
    return busy / max(thread.samples, 1)


def _gil_contention(threads: list[ThreadSamples], cores: dict[int, float],
                    by_process: dict[tuple[int | None, Role], _Role]) -> CpuFinding | None:
    """The process whose Python threads want more cores than it got: they take turns on the GIL."""
    for pid, used in cores.items():
        wanting = [(t, share) for t in threads if t.pid == pid and (share := _busy_share(t)) >= GIL_THREAD_BUSY_SHARE]
        wanted = sum(share for _, share in wanting)
        if len(wanting) < 2 or used > min(GIL_MAX_CORES, GIL_CORES_RATIO * wanted):
            continue
        merged = _merged(m for (p, _), m in by_process.items() if p == pid)
        names = ", ".join(f"{t.thread} {share:.0%}" for t, share in sorted(wanting, key=lambda x: -x[1])[:4])
        return CpuFinding(
            kind="gil_contention", severity=Severity.warn, pid=pid,
            evidence=f"{len(wanting)} threads of pid {pid} are in Python code in most of their samples ({names}), "
                     f"wanting {wanted:.1f} cores, yet the process used {used:.2f}: they take turns on the GIL; most "
                     f"in {_hot_spot(merged)}",
            fix="Move the Python work of the extra threads into processes (DataLoader workers, multiprocessing) or "
                "into code that releases the GIL (vectorised numpy/torch ops, C extensions); fewer Python threads; "
                "a free-threaded CPython (3.13t) where the libraries support it")
    return None


def _verdicts(by_process: dict[tuple[int | None, Role], _Role], gil: CpuFinding | None,
              waiting_in_native: bool) -> list[CpuFinding]:
    """`waiting_in_native`: a live recording measured the trainers using next to no CPU."""
    trainer = _merged(m for (_, role), m in by_process.items() if role == "trainer")
    workers = _merged(m for (_, role), m in by_process.items() if role == "dataloader_worker")
    trainer_pid = next((pid for (pid, role) in by_process if role == "trainer"), None)
    found: list[CpuFinding] = []
    if trainer.samples == 0:
        return found
    wait = trainer.in_loader_wait / trainer.samples
    fetch = trainer.in_loader_fetch / trainer.samples
    if workers.samples and wait >= INPUT_WAIT_SHARE and workers.busy / workers.samples >= WORKER_BUSY_SHARE:
        io = workers.reads / max(workers.busy, 1) >= IO_READ_SHARE
        found.append(CpuFinding(
            kind="input_bound_io" if io else "input_bound_cpu", severity=Severity.crit, pid=trainer_pid,
            evidence=f"the trainer waits on the DataLoader in {wait:.0%} of its samples while its workers are busy "
                     f"{workers.busy / workers.samples:.0%} of theirs, "
                     + (f"reading ({workers.reads / max(workers.busy, 1):.0%} of their busy samples), most in "
                        f"{_hot_spot(workers)}" if io else f"most in {_hot_spot(workers)}"),
            fix=("Faster storage or a local cache of the data, more workers to overlap the reads, larger files or "
                 "sequential access (record formats)" if io else
                 "More DataLoader workers (num_workers), persistent_workers=True, a cheaper transform there (or on "
                 "the GPU), or pre-decoded/cached data")))
    elif fetch >= INPUT_WAIT_SHARE:
        io = trainer.reads / max(trainer.busy, 1) >= IO_READ_SHARE
        found.append(CpuFinding(
            kind="input_bound_io" if io else "input_bound_cpu", severity=Severity.crit, pid=trainer_pid,
            evidence=f"the trainer's main thread loads the data itself (num_workers=0) in {fetch:.0%} of its samples, "
                     f"most in {_hot_spot(trainer)}",
            fix="DataLoader(num_workers>0, persistent_workers=True, pin_memory=True) so batches load beside the step; "
                "make that function cheaper or move it off the step"))
    elif trainer.in_sync / trainer.samples >= SYNC_WAIT_SHARE:
        found.append(CpuFinding(
            kind="implicit_sync", severity=Severity.warn, pid=trainer_pid,
            evidence=f"the main thread waits in a CUDA synchronisation in {trainer.in_sync / trainer.samples:.0%} of "
                     f"its samples, from {_hot_spot(trainer)}",
            fix="No .item()/.cpu()/print of GPU values per step: keep them on the GPU and read every N steps"))
    elif gil is not None:
        found.append(gil)
    elif trainer.busy / trainer.samples >= MAIN_LOOP_BUSY_SHARE and not waiting_in_native:
        found.append(CpuFinding(
            kind="main_loop_cpu_bound", severity=Severity.warn, pid=trainer_pid,
            evidence=f"the trainer's main thread is busy in Python {trainer.busy / trainer.samples:.0%} of its "
                     f"samples outside the DataLoader, most in {_hot_spot(trainer)}",
            fix="Move that work off the step (vectorise it, do it on the GPU, or every N steps); torch.compile or "
                "CUDA graphs when the time is op dispatch"))
    return found


def _merged(roles: Iterable[_Role]) -> _Role:
    total = _Role()
    for measure in roles:
        total.threads += measure.threads
        total.samples += measure.samples
        total.idle += measure.idle
        total.in_loader_wait += measure.in_loader_wait
        total.in_loader_fetch += measure.in_loader_fetch
        total.in_sync += measure.in_sync
        total.reads += measure.reads
        total.self_count.update(measure.self_count)
        total.total_count.update(measure.total_count)
        total.user_count.update(measure.user_count)
    return total


def _conclude(verdict: Verdict, findings: list[CpuFinding], rows: list[ProcessProfile]) -> list[str]:
    samples = sum(r.samples for r in rows)
    first = f"{len(rows)} process role(s), {samples} samples."
    if not findings:
        return [first, "No input, main-loop or sync bottleneck stands out on the host side: the GPU side (trace) "
                "decides."]
    return [first, f"{verdict}: {findings[0].evidence}.", f"Fix: {findings[0].fix}."]


# ---------------------------------------------------------------- the tool


async def profile_cpu(params: ProfileCpuInput, ctx: ToolContext) -> ProfileCpuResult:
    """Where the host's time goes while the GPU waits: py-spy record (--idle --subprocesses --threads, bounded
    duration and rate) of the trainer processes and their DataLoader workers, or saved py-spy raw / speedscope
    files; per process role (trainer, pin_memory, dataloader_worker, other) the samples, idle share and the top
    functions with file:line; a verdict: input_bound_cpu (the trainer waits on busy workers, or loads the data
    itself with num_workers=0: the hot function named), input_bound_io (the workers read), main_loop_cpu_bound,
    gil_contention (Python threads of one process take turns on the GIL: live only), implicit_sync, or none.
    Never leaves a process stopped.
    """
    backend = job_backend(params, ctx)
    if backend is not None:
        extra = ["--duration-s", f"{params.duration_s:g}", "--rate", str(params.rate)]
        extra += [flag for flag, on in (("--native", params.native), ("--nonblocking", params.nonblocking),
                                        ("--gil", params.gil)) if on]
        answers = await collect_from_nodes(backend, "profile-cpu", ProfileCpuResult, ctx,
                                           node_timeout_for(params.duration_s, params.node_timeout_s, ctx), extra)
        return _merge_nodes(backend.label, answers)
    result = await _this_node(params, ctx)
    if params.local:
        result.node = node_name()
        label_rows(result.node, result.processes, result.findings)
    return result


def _merge_nodes(label: str, answers: dict[str, ProfileCpuResult | str]) -> ProfileCpuResult:
    """One answer for the job: every node's processes and findings labelled with the node; the verdict of the node
    worst off, and each node's own."""
    job = gather_nodes(answers, "their processes are missing")
    processes = [row.model_copy(update={"node": node}) for node, answer in job.answered.items()
                 for row in answer.processes]
    findings = [f.model_copy(update={"node": node}) for node, answer in job.answered.items() for f in answer.findings]
    findings.sort(key=lambda f: (-f.severity.rank, f.node != (job.lead.node if job.lead else None)))
    conclusion = job.conclusion(label, f", {len(processes)} process role(s)", findings[0].fix if findings else "",
                                "No input, main-loop or sync bottleneck stands out on any node: the GPU side "
                                "(trace) decides.")
    # A job's "nothing stands out" holds only for the nodes that were profiled and judged.
    undecided = job.undecided if job.answered and not findings else []
    if undecided:
        conclusion[1:] = [f"Nothing stands out on the nodes that were judged, but {len(undecided)} node(s) were not "
                          f"({', '.join(undecided[:4])}): the bottleneck may be on one of them."]
    return ProfileCpuResult(
        severity=Severity.unknown if undecided else worst(f.severity for f in findings) if job.answered
        else Severity.warn,
        verdict=findings[0].kind if findings else "none", processes=processes, findings=findings,
        notes=job.notes[:20], nodes=job.nodes, coverage=job.coverage,
        decides="profile_cpu on the node(s) named, once they answer or with the job's pids there" if undecided
        else None,
        conclusion=conclusion,
        next_steps=[NextStep(branch=_BRANCH, step="host", action="profile_cpu with pid on the node named, for a "
                             "longer recording of that node", why="The job-level call says which node; one node "
                             "says more.")])


async def _this_node(params: ProfileCpuInput, ctx: ToolContext) -> ProfileCpuResult:
    notes: list[str] = []
    threads: list[ThreadSamples] = []
    coverage: list[Coverage] = []
    if params.from_files:
        for file in expand_inputs(params.from_files, ctx.roots):
            saved = read_whole_text(file, CPU_MAX_FILE_BYTES, "Record fewer seconds or processes.")
            try:
                read = parse_record(saved, CPU_MAX_STACKS)
            except ValueError as exc:
                raise UnreadableInput(f"{file.name}: {exc}.",
                                      "Pass py-spy record -f raw or -f speedscope output.") from exc
            threads += read
            coverage.append(Coverage.read(file.name, f"py-spy record: {len(read)} thread(s), "
                                          f"{sum(t.samples for t in read)} samples"))
        return _analyse(threads, notes, coverage=coverage)
    if params.match is not None:
        processes, _, match_notes = processes_by_match(params.match, CPU_MAX_PROCESSES)
        notes += match_notes
        pids = [p.pid for p in processes]
        if not pids:
            raise BadInput(f"no process's command line matches {params.match!r}.", "Check `ps -eo pid,args`.")
    elif params.pid:
        alive = processes_by_pid(params.pid)
        gone = [p.pid for p in alive if not p.alive]
        if gone:
            raise BadInput(f"no such process: {', '.join(map(str, gone))}.", "Give the pids of running processes.")
        pids = list(params.pid)
    else:
        pids = await job_pids_here(CPU_MAX_PROCESSES, params.local)
    find_program("py-spy")
    if ctx.remaining_s() < params.duration_s + 1:
        raise BadInput(f"the call has {ctx.remaining_s():.0f} s left, less than duration_s={params.duration_s:g}.",
                       "Lower duration_s or raise the server's --timeout.")
    # Workers of one trainer are recorded with it (--subprocesses): only the topmost of the pids given is recorded.
    children = {c.pid for p in pids for c in _children(p)}
    roots = [p for p in pids if p not in children]
    deadline = time.monotonic() + ctx.remaining_s() - 1
    before, started = _cpu_seconds(roots), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-triage-pyspy-") as folder:
        texts: dict[int, tuple[str | None, str]] = {}

        async def one(pid: int) -> None:
            texts[pid] = await _record(pid, params, Path(folder), deadline)

        async with anyio.create_task_group() as group:
            for pid in roots:
                group.start_soon(one, pid)
        for pid in roots:
            text, said = texts[pid]
            if said:
                notes.append(f"pid {pid}: {said}")
            if text is not None:
                read = parse_record(text, CPU_MAX_STACKS)
                threads += read
                coverage.append(Coverage.read(f"pid {pid}", f"py-spy record: {sum(t.samples for t in read)} samples"
                                              + (f" ({said})" if said else "")))
            else:
                coverage.append(Coverage.not_understood(f"pid {pid}", f"could not be sampled: {said}"))
    if not threads and all(texts[p][0] is None for p in roots):
        raise UnreadableInput("py-spy recorded nothing: " + "; ".join(texts[p][1] for p in roots)[:400],
                              "Check the pids (ps -p PID), and that py-spy may attach (root or CAP_SYS_PTRACE).")
    after, span = _cpu_seconds(roots), max(time.monotonic() - started, 1e-3)
    return _analyse(threads, notes, {pid: (after[pid] - before[pid]) / span for pid in before if pid in after},
                    coverage)


def _cpu_seconds(roots: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each recorded process (the roots and their children), each on its own."""
    seconds: dict[int, float] = {}
    for root in roots:
        for pid in [root, *(c.pid for c in _children(root))]:
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            seconds[pid] = times.user + times.system
    return seconds


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
