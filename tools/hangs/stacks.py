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
from tools.core.models import NextStep, NodesInput, PathArg, Severity, Table, ToolResult, cell
from tools.core.proc import find_program, run_program
from tools.core.ranks import compact_ranges, rank_of_path
from tools.hangs.stack_formats import (
    ProcessDump,
    ThreadStack,
    Whereabouts,
    collective_family,
    locate,
    main_thread,
    parse_dump,
    signature,
)

__all__ = ["DumpStacksInput", "DumpStacksResult", "dump_stacks", "merge_nodes", "node_name"]

RankStatus = Literal["ok", "gone", "not_python", "unsupported_python", "permission_denied", "timeout", "no_stack",
                     "error", "node_unreachable"]

_PTRACE_FIX = ("py-spy needs ptrace rights on the process: run this server as the job's user or root; in a "
               "container add --cap-add SYS_PTRACE; or set kernel.yama.ptrace_scope=0 "
               "(sysctl -w kernel.yama.ptrace_scope=0).")


class DumpStacksInput(NodesInput):
    pid: list[int] = Field(default_factory=list, max_length=STACK_MAX_PROCESSES,
                           description="The job's worker pids (rank from their RANK variable, else in this order).")
    match: str | None = Field(default=None, min_length=1, max_length=STACK_MAX_MATCH_CHARS,
                              description="A regex (RE2) on the command line, e.g. 'train.py'; the launcher is "
                              "left out when its children carry RANK.")
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
            Table("Suspects", ["rank", "node", "function", "location", "reason"],
                  [[str(s.rank), s.node or "-", s.function, s.location, s.reason] for s in self.suspects],
                  "suspects"),
            Table("Groups of ranks at the same place", ["group", "ranks", "collective / wait", "user frame"],
                  [[str(g.group), compact_ranges(g.ranks), g.collective or "-", g.location] for g in self.groups],
                  "groups"),
            Table("Ranks", ["rank", "node", "pid", "status", "group", "collective / wait", "user frame", "detail"],
                  [[cell(r.rank), r.node or "-", cell(r.pid), r.status, cell(r.group), r.collective or "-",
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
    for raw in inputs:
        if not any(ch in raw for ch in "*?["):
            path = ctx.path(raw)
            if path.is_dir():
                members = [p for p in sorted(path.iterdir(), key=natural_key) if p.is_file() and _inside(p, ctx)]
                if not members:
                    raise BadInput(f"folder {raw!r} holds no files.", "Pass the folder of per-rank stack files.")
                files += [(p, f"{raw.rstrip('/')}/{p.name}") for p in members]
                continue
        files += [(f.path, f.name) for f in expand_inputs([raw], ctx.roots)]
        if len(files) > STACK_MAX_FILES:
            break
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
            rows.append(_Collected(None, None, name, status="error", detail=exc.message))
            continue
        if len(data) > STACK_MAX_FILE_BYTES:
            notes.append(f"{name}: only the first {STACK_MAX_FILE_BYTES // 1024 // 1024} MiB were read.")
            data = data[:STACK_MAX_FILE_BYTES]
        dumps = parse_dump(data.decode("utf-8", "replace"))
        file_rank = rank_of_path(name)
        if not dumps:
            rows.append(_Collected(file_rank, None, name, status="no_stack",
                                   detail="no stack found: expected py-spy dump (text or --json), faulthandler or "
                                   "a Python traceback."))
            continue
        for index, dump in enumerate(dumps):
            rank = dump.rank if dump.rank is not None else (file_rank if len(dumps) == 1 else None)
            source = name if len(dumps) == 1 else f"{name} #{index + 1}"
            rows.append(_Collected(rank, dump.pid, source, dump))
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
        if thread is not None:
            item.frames = thread.frames
            item.where = locate(thread.frames)
            item.signature = signature(thread.frames, item.where)
            item.state = None if thread.idle is None else ("idle" if thread.idle else "active")
        elif row.status == "ok":
            row.status, row.detail = "no_stack", "no main thread in the dump."
        placed.append(item)
    return placed


def _function(item: _Placed) -> str:
    where = item.where
    if where is None:
        return "-"
    if where.user_frame is not None:
        return where.user_frame.function
    return where.innermost.function if where.innermost else "-"


def _suspect_reason(odd: _Placed, majority: _Placed, majority_ranks: list[int]) -> str:
    """Why the odd group is the suspect, in terms of the majority (the odd group's own place is in its row)."""
    assert odd.where is not None and majority.where is not None
    others = f"ranks {compact_ranges(majority_ranks)}"
    c_odd, c_maj = odd.where.collective, majority.where.collective
    there = f"{c_maj} at {majority.where.location}" if c_maj else ""
    if c_odd and c_maj and collective_family(c_odd) != collective_family(c_maj):
        return (f"in {c_odd} while {others} wait in {there}: a collective only some ranks call (rank-conditional, "
                "e.g. under `if rank == 0:`) — make every rank call it or move it out of the `if`.")
    if c_odd and c_maj:
        return (f"in {c_odd} from another call site than {others} ({there}): the ranks disagree on the order of "
                "collectives.")
    if c_maj:
        return (f"not in any collective while {others} wait in {there}: this rank has not reached it — slow or "
                "stuck compute, data loading, I/O or a loop here.")
    if c_odd:
        return (f"waits in {c_odd} while {others} are elsewhere ({majority.where.location}): "
                "they have not reached it yet; dump again to see whether they move.")
    return (f"at another place than {others} ({majority.where.location}); neither is in a collective, so this may be "
            "a slow job rather than a hang: dump again and compare.")


def _analyse(rows: list[_Collected], notes: list[str], *, with_frames: bool = False) -> DumpStacksResult:
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
    suspects: list[Suspect] = []
    # Odd ones out exist only against a real majority: in a job that is merely busy, ranks stand at many places
    # and none of them is a suspect.
    placed_total = sum(len(members) for members in ordered)
    has_majority = len(ordered) > 1 and 2 * len(ordered[0]) > placed_total
    if has_majority:
        majority = ordered[0]
        majority_ranks = groups[0].ranks
        for members in ordered[1:]:
            reason = _suspect_reason(members[0], majority[0], majority_ranks)
            for member in members:
                if member.row.rank is not None and member.where is not None:
                    suspects.append(Suspect(rank=member.row.rank, node=member.row.node, function=_function(member),
                                            location=member.where.location, reason=reason))
    elif len(ordered) > 1 and not with_frames:  # a collector's part of a job: the job-level merge judges
        notes.insert(0, f"no majority: the largest group (ranks {compact_ranges(groups[0].ranks)}) holds "
                     f"{len(ordered[0])} of {placed_total} ranks, so no rank is named the odd one; compare the groups' "
                     "stacks, or dump again to see which ranks move.")
    gone = [i for i in placed if i.row.status == "gone" and i.row.rank is not None]
    if ordered and any(g.collective for g in groups):
        for item in gone:
            assert item.row.rank is not None
            suspects.append(Suspect(rank=item.row.rank, node=item.row.node, function="-", location="-",
                                    reason="the process has exited while the others wait: the collective can never "
                                    "complete; read its log for the error (diagnose_logs)."))
    world = next((r.world_size for r in rows if r.world_size), None)
    seen = {r.rank for r in rows if r.rank is not None}
    unreachable = sorted({r.node for r in rows if r.status == "node_unreachable" and r.node})
    missing = sorted(set(range(world)) - seen) if world else []
    if missing and not with_frames:
        where = (f"on the nodes that answered: they run on {', '.join(unreachable)} (no answer) or have exited"
                 if unreachable else "here: they run on other nodes (dump them there) or have exited")
        notes.append(f"WORLD_SIZE is {world} but ranks {compact_ranges(missing)} were not found {where}.")
    group_of = {id(m): g.group for g, members in zip(groups, ordered, strict=True) for m in members}
    suspect_ranks = {s.rank for s in suspects}
    rank_rows = [RankStack(node=i.row.node, rank=i.row.rank, pid=i.row.pid, status=i.row.status,
                           innermost_user_frame=i.where.user_frame.display() if i.where and i.where.user_frame
                           else None,
                           collective=i.where.collective if i.where else None, group=group_of.get(id(i)),
                           state=i.state, source=i.row.source, detail=i.row.detail,
                           frames=[WireFrame(function=f.function, file=f.file, line=f.line, native=f.native)
                                   for f in i.frames] if with_frames else None)
                 for i in placed]
    rank_rows.sort(key=lambda r: (r.status == "ok" and r.rank not in suspect_ranks, r.rank if r.rank is not None
                                  else -1))
    severity = Severity.crit if suspects else (Severity.warn if len(groups) > 1 or any(
        r.status != "ok" for r in rank_rows) else Severity.ok)
    conclusion = _conclude(groups, suspects, [r for r in rank_rows if r.status != "node_unreachable"], placed)
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
                            next_steps=_next_steps(suspects, groups, placed), ranks=rank_rows, groups=groups,
                            suspects=suspects, world_size=world, notes=notes)


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
        return [head, failed_text] if failed_text else [head]
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


def _next_steps(suspects: list[Suspect], groups: list[StackGroup], placed: list[_Placed]) -> list[NextStep]:
    steps = []
    if suspects:
        steps.append(NextStep.from_sop("nccl_hang_or_slow", done={"dump_stacks"}))
    if groups and not any(f.native for item in placed for f in item.frames):
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
    result = _analyse(rows, notes, with_frames=params.local)
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
        for row in result.ranks:
            dump = None
            if row.frames is not None:
                frames = [Frame(f.function, f.file, f.line, f.native) for f in row.frames]
                dump = ProcessDump([ThreadStack("MainThread", "", frames, idle=row.state == "idle")], pid=row.pid)
            rows.append(_Collected(row.rank, row.pid, f"{node}: {row.source}", dump, row.status, row.detail,
                                   result.world_size, node))
        notes += [f"{node}: {note}" for note in result.notes]
    unreachable = [r.node for r in rows if r.status == "node_unreachable"]
    if unreachable:
        notes.insert(0, f"no answer from {len(unreachable)} node(s): {', '.join(n or '?' for n in unreachable)}; "
                     "their ranks are missing from the verdict.")
    result = _analyse(rows, notes)
    result.nodes_answered = len(per_node) - len(unreachable)
    result.nodes_failed = len(unreachable)
    return result
