"""dump_stacks: every rank's Python stack in one call, grouped, with the rank that is not where the others are.

Live: the job's processes (given pids, a command-line pattern, or discovered from RANK / WORLD_SIZE in their
environment, tools/cluster/processes.py) are dumped with `py-spy dump --json` concurrently, each with its own timeout.
Offline: files captured earlier (py-spy text or JSON, faulthandler, torch's debug-server bundles), parsed by
tools/hangs/stack_formats.py. Either way the main thread of each rank is reduced to where it stands (the collective or
wait it sits in, the innermost frame of the user's code), ranks standing at the same place form a group, and
the groups that differ from the majority are the suspects. SOP: nccl_hang_or_slow.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from tools.cluster import (
    RankProcess,
    collect_from_nodes,
    discover_job,
    job_backend,
    node_name,
    processes_by_match,
    processes_by_pid,
    slurm_pids_on_this_node,
)
from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, TriageError
from tools.core.files import expand_inputs, natural_key, read_regular
from tools.core.frames import Frame
from tools.core.limits import (
    STACK_DEFAULT_PROCESSES,
    STACK_DEFAULT_TIMEOUT_S,
    STACK_FRAMES_SHOWN,
    STACK_MAX_FILE_BYTES,
    STACK_MAX_FILES,
    STACK_MAX_MATCH_CHARS,
    STACK_MAX_PROCESSES,
    STACK_MAX_TIMEOUT_S,
    STACK_MIN_TIMEOUT_S,
    STACK_PARALLEL_DUMPS,
)
from tools.core.models import Coverage, NextStep, NodesInput, PathArg, Severity, Table, ToolResult, cell
from tools.core.proc import find_program, run_program
from tools.core.ranks import compact_ranges, rank_of_path
from tools.hangs.stack_formats import (
    Activity,
    ProcessDump,
    ThreadStack,
    Whereabouts,
    collective_family,
    compact_coverage,
    locate,
    main_thread,
    parse_dump,
    signature,
)

__all__ = ["DumpStacksInput", "DumpStacksResult", "dump_stacks", "merge_nodes", "node_name"]

RankStatus = Literal["ok", "gone", "not_python", "unsupported_python", "permission_denied", "timeout", "no_stack",
                     "error", "node_unreachable"]

SuspectKind = Literal["other_collective", "input", "checkpoint", "sleeping", "computing", "blocked", "exited",
                      "waiting_for_others"]

# The formats a stack file is read in (a file in none of them is not understood).
STACK_FORMATS = ("py-spy dump text", "py-spy dump --json", "py-spy dump --native", "faulthandler",
                 "Python traceback", "torch debug-server bundle (=== Rank N ===)")

_PTRACE_FIX = ("py-spy needs ptrace rights on the process: run this server as the job's user or root; in a "
               "container add --cap-add SYS_PTRACE; or set kernel.yama.ptrace_scope=0 "
               "(sysctl -w kernel.yama.ptrace_scope=0).")


class DumpStacksInput(NodesInput):
    pid: list[int] = Field(default_factory=list, max_length=STACK_MAX_PROCESSES,
                           description="The job's worker pids (rank from their RANK variable, else in this order).")
    match: str | None = Field(default=None, min_length=1, max_length=STACK_MAX_MATCH_CHARS,
                              description="A regex (RE2) on the command line, e.g. 'train.py'; the launcher is "
                              "left out when its children carry RANK.")
    cli_positional = "from_files"  # `gpu-triage dump-stacks stacks/`, as the other readers of files

    from_files: list[PathArg] = Field(default_factory=list, max_length=STACK_MAX_FILES,
                                  description="Stacks captured earlier, inside the roots: files, globs or a folder "
                                  "of per-rank py-spy dump (text or --json), faulthandler or torch debug-server "
                                  "output; rank from the file name or content.")
    native: bool = Field(default=False, description="py-spy --native: show the C/C++ frames too (the c10d wait); "
                         "about 1 s a process instead of 0.02 s.")
    nonblocking: bool = Field(default=False, description="py-spy --nonblocking: do not pause the processes "
                              "(less accurate).")
    max_processes: int = Field(default=STACK_DEFAULT_PROCESSES, ge=1, le=STACK_MAX_PROCESSES,
                               description="At most this many processes are dumped.")
    per_process_timeout_s: float = Field(default=STACK_DEFAULT_TIMEOUT_S, ge=STACK_MIN_TIMEOUT_S,
                                         le=STACK_MAX_TIMEOUT_S, description="Limit for one py-spy dump.")
    world_size: int | None = Field(default=None, ge=1, le=1 << 20,
                                   description="The job's number of ranks, when the stacks do not say it (files): "
                                   "with fewer stacks than ranks, the missing ranks are named and no rank is called "
                                   "the odd one unless the ranks seen are a majority of the job.")


class WireFrame(BaseModel):
    function: str
    file: str
    line: int | None
    native: bool = False


class RankStack(BaseModel):
    node: str | None = Field(default=None, description="The node the rank runs on (multi-node and collector mode).")
    rank: int | None
    pid: int | None
    status: RankStatus
    innermost_user_frame: str | None = Field(description="`file:line function` of the user's innermost frame.")
    collective: str | None = Field(description="The collective or wait the main thread sits in, if any.")
    activity: str | None = Field(default=None, description="What the main thread does, as `kind: mechanism` (kind: "
                                 "collective, input, checkpoint, sleeping, computing or blocked).")
    group: int | None = Field(default=None, description="Index into `groups`.")
    state: str | None = Field(default=None, description="idle (blocked) or active, as py-spy saw the thread.")
    source: str = Field(description="`pid N` or the file it was read from.")
    detail: str = Field(default="", description="Why there is no stack, and what to do.")
    frames: list[WireFrame] | None = Field(default=None, description="The main thread, innermost first (collector "
                                           "mode only).")


class StackGroup(BaseModel):
    group: int
    ranks: list[int]
    signature: str = Field(description="Equal for ranks at the same place: the wait kind and the user's frames.")
    collective: str | None
    location: str = Field(description="`file:line function` of the user's innermost frame.")
    stack: list[str] = Field(description="The main thread of the group's first rank, innermost first (shortened).")


class Suspect(BaseModel):
    rank: int
    node: str | None = Field(default=None, description="The node it runs on (job-level calls).")
    function: str
    location: str
    reason: str
    kind: SuspectKind = Field(description="Why it is not where the others are, by where it is: other_collective "
                              "(a different collective or call site: rank-conditional or out of order), input "
                              "(waiting for the DataLoader / storage), checkpoint (in a save or file write), "
                              "sleeping, computing (a straggler), blocked (in a call the Python frames do not show), "
                              "exited, waiting_for_others (it waits in a collective the others have not reached).")
    fix: str = Field(default="", description="What to do about it, following the kind.")


class DumpStacksResult(ToolResult):
    ranks: list[RankStack] = Field(description="Odd and failed ranks first, then the rest.")
    groups: list[StackGroup] = Field(description="Largest group first.")
    suspects: list[Suspect]
    world_size: int | None = Field(default=None, description="WORLD_SIZE of the job, when the ranks say it.")
    node: str | None = Field(default=None, description="Collector mode: the node this answer is from.")
    nodes_answered: int | None = Field(default=None, description="Job-level calls: nodes whose collector answered.")
    nodes_failed: int | None = Field(default=None, description="Job-level calls: nodes with no answer (see the "
                                     "node_unreachable rows).")

    narrow_hint = "pass fewer pids or files, or lower max_processes"

    def tables(self) -> list[Table]:
        return [
            Table("Suspects", ["rank", "node", "kind", "function", "location", "reason", "fix"],
                  [[str(s.rank), s.node or "-", s.kind, s.function, s.location, s.reason, s.fix]
                   for s in self.suspects], "suspects"),
            Table("Groups of ranks at the same place", ["group", "ranks", "collective / wait", "user frame"],
                  [[str(g.group), compact_ranges(g.ranks), g.collective or "-", g.location] for g in self.groups],
                  "groups"),
            Table("Ranks", ["rank", "node", "pid", "status", "group", "collective / wait", "user frame", "detail"],
                  [[cell(r.rank), r.node or "-", cell(r.pid), r.status, cell(r.group),
                    r.collective or r.activity or "-",
                    r.innermost_user_frame or "-", r.detail or r.state or ""] for r in self.ranks], "ranks"),
        ]


# ------------------------------------------------------------------------------------------- collection


@dataclass
class _Collected:
    rank: int | None
    pid: int | None
    source: str
    dump: ProcessDump | None = None
    status: RankStatus = "ok"
    detail: str = ""
    world_size: int | None = None
    node: str | None = None
    input: str = ""  # the file, pid or node the row came from: one coverage entry each (a bundle has many rows)
    cut: str = ""  # why only part of that input could be read (cut at the size limit, ends mid-line)


def _pyspy_failure(stderr: str) -> tuple[RankStatus, str]:
    text = stderr.lower()
    if "permission denied" in text or "operation not permitted" in text:
        return "permission_denied", _PTRACE_FIX
    if "failed to get process executable name" in text or "no such process" in text:
        return "gone", "the process has exited (or the pid is wrong)."
    if "failed to find python version" in text or "failed to find a python interpreter" in text:
        return "not_python", "not a Python process (or a static build py-spy cannot read): give the worker pids."
    if "unsupported version of python" in text or "unsupported python version" in text:
        return ("unsupported_python", "py-spy cannot read this Python version: upgrade py-spy (pip install -U "
                "py-spy), or use faulthandler (kill -USR1 with faulthandler.register) and pass the file.")
    first = next((line.strip() for line in stderr.splitlines() if line.strip()), "no output")
    return "error", f"py-spy failed: {first[:200]}"


async def _dump_one(process: RankProcess, params: DumpStacksInput, ctx: ToolContext) -> _Collected:
    row = _Collected(process.rank, process.pid, f"pid {process.pid}", world_size=process.world_size)
    if not process.alive:
        row.status, row.detail = "gone", "no such process: it has exited (or the pid is wrong)."
        return row
    args = ["dump", "--json", "--pid", str(process.pid)]
    args += ["--native"] if params.native else []
    args += ["--nonblocking"] if params.nonblocking else []
    try:
        output = await run_program("py-spy", args, timeout_s=min(params.per_process_timeout_s, ctx.remaining_s()))
    except LimitExceeded:
        row.status = "timeout"
        row.detail = (f"py-spy did not answer within {params.per_process_timeout_s:g} s: the process may be in "
                      "uninterruptible I/O (D state); retry with nonblocking=true or a longer timeout.")
        return row
    if output.returncode != 0:
        row.status, row.detail = _pyspy_failure(output.stderr.decode("utf-8", "replace"))
        return row
    try:
        dumps = parse_dump(output.stdout.decode("utf-8", "replace"))
    except ValueError:
        dumps = []
    if not dumps:
        row.status, row.detail = "no_stack", "py-spy returned no thread of this process."
    else:
        row.dump = dumps[0]
    return row


async def _collect_live(params: DumpStacksInput, ctx: ToolContext) -> tuple[list[_Collected], list[str]]:
    notes: list[str] = []
    if params.pid:
        processes = processes_by_pid(params.pid[: params.max_processes])
        if len(params.pid) > params.max_processes:
            notes.append(f"{len(params.pid)} pids given; the first {params.max_processes} were dumped.")
    elif params.match is not None:
        processes, matched, match_notes = processes_by_match(params.match, params.max_processes)
        notes += match_notes
        if not processes:
            raise BadInput(f"no process's command line matches {params.match!r}.",
                           "Check the pattern against `ps -eo pid,args`, or pass the worker pids.")
        if matched > len(processes):
            notes.append(f"{matched} processes match; the first {len(processes)} were dumped (raise max_processes).")
    else:
        # Inside a Slurm job step (the collector under srun): only this job's processes on this node, which also
        # keeps other jobs sharing the node (and other emulated nodes sharing one machine) out.
        within = await slurm_pids_on_this_node() if params.local else None
        processes, found_notes = discover_job(params.max_processes, within=within)
        notes += found_notes
        if not processes:
            raise BadInput("no distributed job found on this host: " + found_notes[0],
                           "Pass the worker pids (pid) or a command-line pattern (match), or stacks captured "
                           "earlier (from_files).")
    find_program("py-spy")  # a missing py-spy is the call's failure, not one row per rank
    rows: list[_Collected | None] = [None] * len(processes)
    limiter = anyio.CapacityLimiter(STACK_PARALLEL_DUMPS)

    async def one(index: int, process: RankProcess) -> None:
        async with limiter:
            rows[index] = await _dump_one(process, params, ctx)

    async with anyio.create_task_group() as group:
        for index, process in enumerate(processes):
            group.start_soon(one, index, process)
    sources = Counter(p.rank_source for p in processes)
    if sources.get("order"):
        notes.append(f"{sources['order']} processes did not say their rank (no RANK variable or --rank argument): "
                     "numbered in pid order.")
    return [r for r in rows if r is not None], notes


def _stack_files(inputs: Sequence[str], ctx: ToolContext) -> list[tuple[Path, str]]:
    files: list[tuple[Path, str]] = []
    patterns: list[str] = []  # files and globs, expanded together: a glob that matches nothing is then a gap, not
    for raw in inputs:        # the end of the call, when the others matched (tools/core/files.py)
        if not any(ch in raw for ch in "*?["):
            path = ctx.path(raw)
            if path.is_dir():
                members = [p for p in sorted(path.iterdir(), key=natural_key) if p.is_file() and _inside(p, ctx)]
                if not members:
                    raise BadInput(f"folder {raw!r} holds no files.", "Pass the folder of per-rank stack files.")
                files += [(p, f"{raw.rstrip('/')}/{p.name}") for p in members]
                if len(files) > STACK_MAX_FILES:
                    break
                continue
        patterns.append(raw)
    if patterns and len(files) <= STACK_MAX_FILES:
        files += [(f.path, f.name) for f in expand_inputs(patterns, ctx.roots, STACK_MAX_FILES)]
    if len(files) > STACK_MAX_FILES:
        raise LimitExceeded(f"more than {STACK_MAX_FILES} stack files given.", "Pass fewer files or a narrower glob.")
    return files


def _inside(path: Path, ctx: ToolContext) -> bool:
    """False for a folder member whose symlink leads out of the roots (it is skipped, never read)."""
    try:
        ctx.path(str(path))
    except BadInput:
        return False
    return True


def _read_files(inputs: Sequence[str], ctx: ToolContext) -> tuple[list[_Collected], list[str]]:
    rows: list[_Collected] = []
    notes: list[str] = []
    for path, name in _stack_files(inputs, ctx):
        try:
            data = read_regular(path, STACK_MAX_FILE_BYTES + 1, name)
        except TriageError as exc:  # not a regular file (a FIFO, a socket), or unreadable: a row, the rest read
            rows.append(_Collected(None, None, name, status="error", detail=exc.message, input=name))
            continue
        cut = ""
        if len(data) > STACK_MAX_FILE_BYTES:
            cut = f"only the first {STACK_MAX_FILE_BYTES // 1024 // 1024} MiB were read"
            notes.append(f"{name}: {cut}.")
            data = data[:STACK_MAX_FILE_BYTES]
        text = data.decode("utf-8", "replace")
        dumps = parse_dump(text)
        file_rank = rank_of_path(name)
        if not dumps:
            looks_json = text.lstrip().startswith(("[", "{"))
            detail = ("looks like py-spy JSON but does not parse (cut short?)" if looks_json else
                      "no stack found: expected py-spy dump (text or --json), faulthandler or a Python traceback")
            rows.append(_Collected(file_rank, None, name, status="no_stack", detail=detail + ".", input=name))
            continue
        if not cut and text.strip() and not text.endswith("\n") and not any(d.format == "py-spy json"
                                                                            for d in dumps):
            cut = "it ends mid-line: the file was cut short, the last stack may lack its outer frames"
        for index, dump in enumerate(dumps):
            rank = dump.rank if dump.rank is not None else (file_rank if len(dumps) == 1 else None)
            source = name if len(dumps) == 1 else f"{name} #{index + 1}"
            rows.append(_Collected(rank, dump.pid, source, dump, input=name, cut=cut))
    _number_unranked(rows, notes)
    return rows, notes


def _number_unranked(rows: list[_Collected], notes: list[str]) -> None:
    taken = Counter(r.rank for r in rows if r.rank is not None)
    duplicates = sorted(rank for rank, count in taken.items() if count > 1)
    if duplicates:
        notes.append(f"rank {compact_ranges(duplicates)} appears in more than one file; each copy is its own row.")
    unranked = [r for r in rows if r.rank is None]
    if unranked:
        free = (n for n in range(len(rows) * 2 + 1) if n not in taken)
        for row in unranked:
            row.rank = next(free)
        notes.append(f"{len(unranked)} stacks carry no rank in their file name or content: numbered in file order.")


# ---------------------------------------------------------------------------------------------- analysis


@dataclass
class _Placed:
    row: _Collected
    frames: list[Frame] = field(default_factory=list)
    where: Whereabouts | None = None
    signature: str = ""
    state: str | None = None


def _place(rows: list[_Collected]) -> list[_Placed]:
    placed = []
    for row in rows:
        item = _Placed(row)
        thread = main_thread(row.dump) if row.dump else None
        if thread is not None and thread.frames:
            item.frames = thread.frames
            item.where = locate(thread.frames, idle=thread.idle)
            item.signature = signature(thread.frames, item.where)
            item.state = None if thread.idle is None else ("idle" if thread.idle else "active")
        elif row.status == "ok":
            row.status = "no_stack"
            row.detail = ("the main thread has no frames (the dump was cut short?)." if thread is not None
                          else "no main thread in the dump.")
        placed.append(item)
    return placed


def _function(item: _Placed) -> str:
    where = item.where
    if where is None:
        return "-"
    if where.user_frame is not None:
        return where.user_frame.function
    return where.innermost.function if where.innermost else "-"


@dataclass(frozen=True)
class _Why:
    kind: SuspectKind
    reason: str
    fix: str


def _by_activity(activity: Activity, odd: _Placed, others: str, there: str) -> _Why:
    """A rank that is not in the collective the others wait in, classified by where it is instead."""
    assert odd.where is not None
    at = odd.where.location
    label = activity.label
    if activity.kind == "input":
        return _Why("input", f"waiting for input ({label}) while {others} wait in {there}: its data pipeline or "
                    "storage has stalled and the others wait for it.",
                    "sample_host and profile_cpu on its node: are the DataLoader workers alive or in D state, which "
                    "storage reads do they wait on (a stalled file system, a slow object store)?")
    if activity.kind == "checkpoint":
        return _Why("checkpoint", f"in a save ({label}) while {others} wait in {there}: a blocking save on one rank "
                    "holds the collective.",
                    "make the save non-blocking (torch.distributed.checkpoint.async_save, or a background writer) "
                    "or have every rank take part in it; check the storage it writes to (sample_host).")
    if activity.kind == "sleeping":
        return _Why("sleeping", f"sleeping ({label}) at {at} while {others} wait in {there}: a code path that "
                    "sleeps, e.g. a retry/backoff loop or a wait for a file or a service.",
                    f"read the loop around {at}: what it waits for, why that never comes, and bound it.")
    if activity.kind == "computing":
        return _Why("computing", f"computing ({label}) while {others} wait in {there}: a straggler, still in work "
                    "the others have finished (or its GPU is slow).",
                    "find_stragglers on the step logs and health_check on its GPU (clocks, throttling, errors); "
                    "look for extra work on this rank only (an evaluation, logging, a larger batch).")
    return _Why("blocked", f"not in any collective while {others} wait in {there}: blocked at {at} in a call the "
                "Python frames do not show (a sleep, a read or a lock).",
                "dump_stacks(native=True) on this rank (py-spy dump --native): the C frames show which call it is.")


def _suspect_reason(odd: _Placed, majority: _Placed, majority_ranks: list[int]) -> _Why:
    """Why the odd group is the suspect, in terms of the majority (the odd group's own place is in its row)."""
    assert odd.where is not None and majority.where is not None
    others = f"ranks {compact_ranges(majority_ranks)}"
    c_odd, c_maj = odd.where.collective, majority.where.collective
    activity = odd.where.activity
    there = f"{c_maj} at {majority.where.location}" if c_maj else ""
    if c_maj and activity.kind != "collective":
        return _by_activity(activity, odd, others, there)
    if c_odd and c_maj and collective_family(c_odd) != collective_family(c_maj):
        return _Why("other_collective", f"in {c_odd} while {others} wait in {there}: a collective only some ranks "
                    "call (rank-conditional, e.g. under `if rank == 0:`).",
                    "make every rank call it or move it out of the `if`; analyze_flight_recorder shows the sequence "
                    "number where the ranks part.")
    if c_odd and c_maj:
        return _Why("other_collective", f"in {c_odd} from another call site than {others} ({there}): the ranks "
                    "disagree on the order of collectives.",
                    "make every rank issue the same collectives in the same order; analyze_flight_recorder names "
                    "the first sequence number where they differ.")
    maj_activity = majority.where.activity
    if c_odd:
        return _Why("waiting_for_others", f"waits in {c_odd} while {others} are elsewhere ({maj_activity.kind}: "
                    f"{maj_activity.label}, at {majority.where.location}): they have not reached it yet.",
                    "dump again: if the others move on, this is a slow job (look at what they do), not a hang.")
    kind: SuspectKind = activity.kind if activity.kind != "collective" else "other_collective"
    return _Why(kind, f"at another place than {others} ({majority.where.location}); neither is in a collective, so "
                "this may be a slow job rather than a hang.", "dump again and compare which ranks move.")


def _world(rows: list[_Collected], given: int | None) -> tuple[int | None, bool]:
    """The job's size, and whether it is only a lower bound (ranks 0..N seen with gaps, nobody said the size)."""
    if given:
        return given, False
    said = next((r.world_size for r in rows if r.world_size), None)
    if said:
        return said, False
    ranks = {r.rank for r in rows if r.rank is not None}
    if ranks and max(ranks) + 1 > len(ranks):
        return max(ranks) + 1, True
    return None, False


def _coverage(placed: list[_Placed]) -> list[Coverage]:
    """One entry per input (file, pid or node): read, partial (cut, no Python frames) or not understood."""
    by_input: dict[str, list[_Placed]] = {}
    for item in placed:
        by_input.setdefault(item.row.input or item.row.source, []).append(item)
    entries: list[Coverage] = []
    for name, items in by_input.items():
        rows = [i.row for i in items]
        ranks = sorted(r.rank for r in rows if r.rank is not None)
        who = f"rank {compact_ranges(ranks)}" if ranks else "no rank"
        stacked = [i for i in items if i.where is not None]
        cut = next((r.cut for r in rows if r.cut), "")
        if not stacked:
            first = rows[0]
            if first.status == "no_stack" and first.pid is None and first.node is None or first.status == "error":
                entries.append(Coverage.not_understood(name, first.detail, STACK_FORMATS if first.status ==
                                                       "no_stack" else None))
            else:
                entries.append(Coverage.not_understood(name, f"{first.status}: {first.detail}"))
            continue
        fmt = next((i.row.dump.format for i in stacked if i.row.dump is not None and i.row.dump.format), "stack")
        python_less = [i for i in stacked if all(f.native for f in i.frames)]
        if cut:
            entries.append(Coverage.partial(name, f"{fmt}, {who}: {cut}."))
        elif python_less:
            entries.append(Coverage.partial(name, f"{fmt}, {who}: the main thread has no Python frames (native "
                                            "only), so the user's code and the collective call are not seen."))
        elif len(stacked) < len(items):
            entries.append(Coverage.partial(name, f"{fmt}, {who}: {len(items) - len(stacked)} of {len(items)} "
                                            "stacks in it could not be read."))
        else:
            entries.append(Coverage.read(name, f"{fmt}, {who}: main thread read."))
    return entries


def _analyse(rows: list[_Collected], notes: list[str], *, with_frames: bool = False,
             world_size: int | None = None) -> DumpStacksResult:
    placed = _place(rows)
    by_signature: dict[str, list[_Placed]] = {}
    for item in placed:
        if item.where is not None:
            by_signature.setdefault(item.signature, []).append(item)
    ordered = sorted(by_signature.values(), key=lambda items: (-len(items), min(i.row.rank or 0 for i in items)))
    groups: list[StackGroup] = []
    for index, members in enumerate(ordered):
        first = members[0]
        assert first.where is not None
        shown = [f.display() for f in first.frames if not f.native][:STACK_FRAMES_SHOWN]
        groups.append(StackGroup(group=index, ranks=sorted(m.row.rank for m in members if m.row.rank is not None),
                                 signature=first.signature, collective=first.where.collective,
                                 location=first.where.location, stack=shown))
    world, world_is_bound = _world(rows, world_size)
    stacked_ranks = {m.row.rank for members in ordered for m in members if m.row.rank is not None}
    seen = {r.rank for r in rows if r.rank is not None}
    missing = sorted(set(range(world)) - seen) if world else []
    # Ranks of the job whose stack this answer lacks (not found, or found without a stack; an exited rank is
    # evidence of its own): the odd rank may be among them.
    gone_ranks = {r.rank for r in rows if r.status == "gone" and r.rank is not None}
    absent = sorted(set(range(world)) - stacked_ranks - gone_ranks) if world and not with_frames else []
    suspects: list[Suspect] = []
    # Odd ones out exist only against a real majority: in a job that is merely busy, ranks stand at many places
    # and none of them is a suspect. With ranks missing, the majority must be one of the whole job.
    placed_total = sum(len(members) for members in ordered)
    electorate = max(placed_total, len(stacked_ranks) + len(absent))
    has_majority = len(ordered) > 1 and 2 * len(ordered[0]) > electorate
    undecided = bool(absent) and (len(ordered) > 1 and not has_majority
                                  or len(ordered) == 1 and ordered[0][0].where is not None)
    majority_in_collective = bool(ordered and ordered[0][0].where and ordered[0][0].where.collective)
    if has_majority:
        majority = ordered[0]
        majority_ranks = groups[0].ranks
        for members in ordered[1:]:
            why = _suspect_reason(members[0], majority[0], majority_ranks)
            for member in members:
                if member.row.rank is not None and member.where is not None:
                    suspects.append(Suspect(rank=member.row.rank, node=member.row.node, function=_function(member),
                                            location=member.where.location, reason=why.reason, kind=why.kind,
                                            fix=why.fix))
    elif len(ordered) > 1 and not with_frames and not undecided:  # a collector's part: the job-level merge judges
        notes.insert(0, f"no majority: the largest group (ranks {compact_ranges(groups[0].ranks)}) holds "
                     f"{len(ordered[0])} of {placed_total} ranks, so no rank is named the odd one; compare the groups' "
                     "stacks, or dump again to see which ranks move.")
    gone = [i for i in placed if i.row.status == "gone" and i.row.rank is not None]
    if ordered and any(g.collective for g in groups):
        for item in gone:
            assert item.row.rank is not None
            suspects.append(Suspect(rank=item.row.rank, node=item.row.node, function="-", location="-",
                                    reason="the process has exited while the others wait: the collective can never "
                                    "complete.", kind="exited",
                                    fix="read its log for the error (diagnose_logs)."))
    unreachable = sorted({r.node for r in rows if r.status == "node_unreachable" and r.node})
    if missing and not with_frames:
        if world_is_bound and world is not None:
            where = (f"(nobody said WORLD_SIZE; ranks up to {world - 1} were seen, so the job has at least {world}: "
                     "pass world_size for the true count)")
        elif unreachable:
            where = f"on the nodes that answered: they run on {', '.join(unreachable)} (no answer) or have exited"
        else:
            where = "here: they run on other nodes (dump them there) or have exited"
        notes.append(f"ranks {compact_ranges(missing)} were not found {where}.")
    elif world is None and not with_frames and stacked_ranks:
        notes.append(f"the job's size is not known (no WORLD_SIZE, no gap in the ranks): the verdict covers the "
                     f"{len(stacked_ranks)} ranks seen; pass world_size if the job has more.")
    group_of = {id(m): g.group for g, members in zip(groups, ordered, strict=True) for m in members}
    suspect_ranks = {s.rank for s in suspects}
    rank_rows = [RankStack(node=i.row.node, rank=i.row.rank, pid=i.row.pid, status=i.row.status,
                           innermost_user_frame=i.where.user_frame.display() if i.where and i.where.user_frame
                           else None,
                           collective=i.where.collective if i.where else None,
                           activity=f"{i.where.activity.kind}: {i.where.activity.label}" if i.where else None,
                           group=group_of.get(id(i)),
                           state=i.state, source=i.row.source, detail=i.row.detail,
                           frames=[WireFrame(function=f.function, file=f.file, line=f.line, native=f.native)
                                   for f in i.frames] if with_frames else None)
                 for i in placed]
    rank_rows.sort(key=lambda r: (r.status == "ok" and r.rank not in suspect_ranks, r.rank if r.rank is not None
                                  else -1))
    holding = [s for s in suspects if s.kind not in ("waiting_for_others",)]
    if any(s.kind == "exited" for s in suspects) or holding and majority_in_collective:
        severity = Severity.crit
    elif suspects or len(groups) > 1 or any(r.status != "ok" for r in rank_rows):
        severity = Severity.warn
    else:
        severity = Severity.ok
    conclusion = _conclude(groups, suspects, [r for r in rank_rows if r.status != "node_unreachable"], placed)
    decides = None
    if undecided and not any(s.kind == "exited" for s in suspects):
        unread = sum(1 for r in rank_rows if r.status not in ("ok", "node_unreachable"))
        conclusion, decides = _undecided(groups, absent, world, world_is_bound, unread)
        severity = Severity.unknown
    elif absent and suspects:
        lacking = (f"Stacks of {len(stacked_ranks)} of {world} ranks were read (ranks {compact_ranges(absent)} "
                   "missing); the majority is still one of the whole job.")
        conclusion = [*conclusion[:2], lacking]
    if unreachable:
        silent = [r for r in rank_rows if r.status == "node_unreachable"]
        lost = f": ranks {compact_ranges(missing)} are not in this verdict" if missing else ""
        head = (f"{len(silent)} node(s) gave no answer ({', '.join(unreachable[:4])}"
                f"{' ...' if len(unreachable) > 4 else ''}: {silent[0].detail}){lost}.")
        if len(silent) == len(rank_rows):  # nothing to judge: the reason is the whole answer
            conclusion = [head, "No node answered, so there is no verdict on the job: fix what the rows say, then "
                          "call again."]
        else:
            conclusion = [head, *conclusion][:3]
        severity = max(severity, Severity.warn, key=lambda s: s.rank)
    return DumpStacksResult(severity=severity, conclusion=conclusion,
                            next_steps=_next_steps(suspects, groups, placed, absent if undecided else []),
                            ranks=rank_rows, groups=groups, suspects=suspects, world_size=world, notes=notes,
                            coverage=compact_coverage(_coverage(placed), "stacks"), decides=decides)


def _undecided(groups: list[StackGroup], absent: list[int], world: int | None, world_is_bound: bool,
               unread: int) -> tuple[list[str], str]:
    """The stacks seen do not decide: the rank that is not where the others are may be one not seen."""
    seen = sum(len(g.ranks) for g in groups)
    of = f"at least {world}" if world_is_bound else str(world)
    lacking = f"rank {absent[0]}" if len(absent) == 1 else f"ranks {compact_ranges(absent)}"
    are = "is" if len(absent) == 1 else "are"
    if len(groups) == 1:
        g = groups[0]
        where = f"in {g.collective} at {g.location}" if g.collective else f"at {g.location}"
        head = (f"Stacks of {seen} of {of} ranks were read and all stand {where}; {lacking} {are} missing, and "
                "the rank that is not there, if any, is among them.")
    else:
        largest = compact_ranges(groups[0].ranks)
        head = (f"Stacks of {seen} of {of} ranks were read: the largest group (ranks {largest}) "
                f"is no majority of the job, and {lacking} {are} missing, so no rank is named the odd one.")
    decides = f"the stacks of {lacking} (dump them on their nodes, or pass their files)"
    why = f" ({unread} of them gave no stack: see their rows)" if unread else ""
    return [head, f"Unknown until {decides}{why}."], decides


def _conclude(groups: list[StackGroup], suspects: list[Suspect], rows: list[RankStack],
              placed: list[_Placed]) -> list[str]:
    failed = [r for r in rows if r.status != "ok"]
    statuses = ", ".join(sorted({r.status for r in failed}))
    failed_text = (f"{len(failed)} of {len(rows)} processes gave no stack ({statuses}; see their rows)."
                   if failed else "")
    if not groups:
        return [f"No stack could be read from any of the {len(rows)} processes.", failed_text or "See the rows."]
    if suspects:
        first = suspects[0]
        odd = sorted({s.rank for s in suspects if s.reason == first.reason})
        nodes = sorted({s.node for s in suspects if s.reason == first.reason and s.node})
        on = f" on {', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''}" if nodes else ""
        head = f"Rank {compact_ranges(odd)}{on} is at {first.location}, {first.reason}"
        fix = f"Fix: {first.fix}" if first.fix else ""
        return [t for t in (head, fix, failed_text) if t]
    if len(groups) == 1:
        g = groups[0]
        active = sum(1 for i in placed if i.state == "active")
        where = f"in {g.collective} at {g.location}" if g.collective else f"at {g.location}"
        text = [f"All {len(g.ranks)} ranks stand at the same place, {where}."]
        if g.collective:
            text.append("No rank is missing from it here: if it never completes, look at ranks on other nodes, the "
                        "network (NCCL_DEBUG=INFO) and the flight recorder (analyze_flight_recorder).")
        elif active:
            text.append(f"{active} ranks are running, not blocked: this looks like a slow job rather than a hang; "
                        "dump again and compare.")
        if failed_text:
            text.append(failed_text)
        return text[:3]
    text = [f"The ranks stand at {len(groups)} places with no clear odd one out; compare the groups' stacks."]
    return text + ([failed_text] if failed_text else [])


_STEPS_BY_KIND: dict[str, tuple[str, str | None, str, str]] = {
    # kind -> (branch, step, action, why)
    "input": ("gpu_utilization_low", "host_sample", "sample_host on the suspect rank's node",
              "Shows whether the DataLoader workers run, wait on disk or network (iowait, D state) or are gone."),
    "checkpoint": ("gpu_utilization_low", "host_sample", "sample_host on the suspect rank's node",
                   "Shows the write throughput and iowait of the storage the save goes to."),
    "computing": ("straggler", "find", "find_stragglers on the job's step logs",
                  "Confirms the rank is slow step after step (a straggler) and whether its GPU is the cause."),
    "sleeping": ("nccl_hang_or_slow", "logs", "diagnose_logs on the suspect rank's log",
                 "A retry/backoff loop usually logs what it retries (a connection, a file, a lock)."),
    "blocked": ("nccl_hang_or_slow", "stacks", "dump_stacks(native=True) on the suspect rank",
                "The C frames show which call it is blocked in: a sleep, a read, a lock."),
}


def _next_steps(suspects: list[Suspect], groups: list[StackGroup], placed: list[_Placed],
                absent: list[int]) -> list[NextStep]:
    steps = []
    if absent:
        steps.append(NextStep(branch="nccl_hang_or_slow", step="stacks",
                              action=f"dump_stacks on rank{'s' if len(absent) > 1 else ''} "
                              f"{compact_ranges(absent)} (their nodes, or their files)",
                              why="The rank that is not where the others are may be one of those not seen."))
    first = suspects[0] if suspects else None
    if first is not None and first.kind in _STEPS_BY_KIND:
        branch, step, action, why = _STEPS_BY_KIND[first.kind]
        steps.append(NextStep(branch=branch, step=step, action=action.replace("the suspect rank",
                                                                          f"rank {first.rank}"), why=why))
        if first.kind == "input":
            steps.append(NextStep(branch="gpu_utilization_low", step="host",
                                  action=f"profile_cpu on rank {first.rank}'s process and its DataLoader workers",
                                  why="Names the functions the data path spends its time in (decode, read, "
                                  "augmentation)."))
    elif first is not None:
        steps.append(NextStep.from_sop("nccl_hang_or_slow", done={"dump_stacks"}))
    if groups and not any(f.native for item in placed for f in item.frames) and not (
            first is not None and first.kind == "blocked"):
        steps.append(NextStep(branch="nccl_hang_or_slow", step="stacks", action="dump_stacks(native=True)",
                              why="The C++ frames show the exact c10d/NCCL wait each rank is blocked in."))
    steps.append(NextStep(branch="nccl_hang_or_slow", step="logs",
                          action="diagnose_logs on every rank's log (e.g. logs/rank*.log)",
                          why="Timeout and error texts name the op, the sequence number and ranks that died."))
    return steps[:3]


async def dump_stacks(params: DumpStacksInput, ctx: ToolContext) -> DumpStacksResult:
    """Dump the Python stack of every rank of a hung or slow distributed job (py-spy on live processes: given
    pids, a command-line pattern, or the local torchrun job found from RANK/WORLD_SIZE; or stack files captured
    earlier: py-spy text/JSON, faulthandler, torch debug-server output), group the ranks by where they stand
    (collective or wait, and the user's innermost frame) and name the ranks that are not where the others are,
    with the function, file:line and why (e.g. a collective called under `if rank == 0:`). Bounded: at most
    max_processes, each dump with its own timeout; a pid that is gone, not Python or not traceable is a row
    with the fix, the other ranks are still reported.
    """
    selectors = sum(bool(x) for x in (params.pid, params.match is not None, params.from_files))
    if selectors > 1:
        raise BadInput("give one of pid, match or from_files.", "Live processes or captured files, not both.")
    backend = job_backend(params, ctx)
    if backend is not None:
        if selectors:
            raise BadInput("with slurm_job or hosts, each node finds the job's ranks itself; pid, match and "
                           "from_files are for one node.", "Drop them, or call without slurm_job/hosts.")
        extra = ["--max-processes", str(params.max_processes),
                 "--per-process-timeout-s", f"{params.per_process_timeout_s:g}"]
        extra += ["--native"] if params.native else []
        extra += ["--nonblocking"] if params.nonblocking else []
        per_node = await collect_from_nodes(backend, "dump-stacks", DumpStacksResult, ctx, params.node_timeout_s,
                                            extra)
        result = merge_nodes(per_node)
        result.notes.insert(0, f"{backend.label}: {result.nodes_answered} of {len(per_node)} nodes answered.")
        logs = [p for p in backend.log_paths() if p]
        if logs:
            result.next_steps = [*result.next_steps[:2], NextStep(
                branch="nccl_hang_or_slow", step="logs", action=f"diagnose_logs(paths={sorted(set(logs))!r})",
                why="The job's own output (from scontrol) holds the timeout and error texts of every rank.")]
        return result
    if params.from_files:
        rows, notes = await anyio.to_thread.run_sync(_read_files, params.from_files, ctx)
    else:
        rows, notes = await _collect_live(params, ctx)
    node = node_name() if params.local else None
    for row in rows:
        row.node = node
    result = _analyse(rows, notes, with_frames=params.local, world_size=params.world_size)
    result.node = node
    return result


def merge_nodes(per_node: dict[str, DumpStacksResult | str]) -> DumpStacksResult:
    """One verdict for a multi-node job from each node's collector result (`dump_stacks` with local=true), or the
    reason a node gave none; the ranks of every node are grouped together, so the odd rank is found across nodes."""
    rows: list[_Collected] = []
    notes: list[str] = []
    for node, result in per_node.items():
        if isinstance(result, str):
            rows.append(_Collected(None, None, f"node {node}", status="node_unreachable", detail=result, node=node))
            continue
        cut = {c.input: c.detail for c in result.coverage if c.status == "partial"}
        for row in result.ranks:
            dump = None
            if row.frames is not None:
                frames = [Frame(f.function, f.file, f.line, f.native) for f in row.frames]
                dump = ProcessDump([ThreadStack("MainThread", "", frames, idle=row.state == "idle")], pid=row.pid)
            rows.append(_Collected(row.rank, row.pid, f"{node}: {row.source}", dump, row.status, row.detail,
                                   result.world_size, node, cut=cut.get(row.source.split(" #", 1)[0], "")))
        notes += [f"{node}: {note}" for note in result.notes]
    unreachable = [r.node for r in rows if r.status == "node_unreachable"]
    if unreachable:
        notes.insert(0, f"no answer from {len(unreachable)} node(s): {', '.join(n or '?' for n in unreachable)}; "
                     "their ranks are missing from the verdict.")
    result = _analyse(rows, notes)
    result.nodes_answered = len(per_node) - len(unreachable)
    result.nodes_failed = len(unreachable)
    return result
