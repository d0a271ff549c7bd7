"""Which local processes are the ranks of a distributed job, and which rank each one is.

torchrun (and torch.distributed.launch, Lightning, Accelerate, DeepSpeed's launcher) give every worker
RANK / LOCAL_RANK / WORLD_SIZE in its environment; the launcher itself has none, and a DataLoader or
compile worker inherits its rank's environment, so only the topmost process holding a RANK is the rank.
Where the environment cannot be read (another user's process), a `--rank N` / `--local_rank N` argument
is used, and failing that the order of the pids. Only the rank variables are read from the environment;
nothing else of it leaves this module.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

from tools.core.errors import BadInput
from tools.core.limits import CMDLINE_MAX_CHARS

__all__ = ["RankProcess", "discover_job", "processes_by_match", "processes_by_pid"]

_RANK_ARGUMENT = re.compile(r"--(?:global[_-])?rank[= ](\d+)\b")
_LOCAL_RANK_ARGUMENT = re.compile(r"--local[_-]rank[= ](\d+)\b")
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "MASTER_ADDR",
                   "MASTER_PORT", "CUDA_VISIBLE_DEVICES")


@dataclass
class RankProcess:
    pid: int
    rank: int | None
    rank_source: str  # env, argument, order, unknown
    world_size: int | None = None
    local_rank: int | None = None
    job: str | None = None  # what tells jobs apart: the elastic run id or the master address
    command: str = ""
    alive: bool = True
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES as the rank sees it

    @property
    def gpu(self) -> int | None:
        """The GPU index this rank most likely computes on: with CUDA_VISIBLE_DEVICES, the one it lists (or the
        LOCAL_RANK-th of several); without it, cuda:LOCAL_RANK as torchrun scripts pick. None when it cannot be told
        (GPU UUIDs, MIG devices)."""
        if self.visible_devices is None:
            return self.local_rank
        listed = [d.strip() for d in self.visible_devices.split(",") if d.strip()]
        if not listed or not all(d.isdigit() for d in listed):
            return None
        if len(listed) == 1:
            return int(listed[0])
        return int(listed[self.local_rank]) if self.local_rank is not None and self.local_rank < len(listed) else None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _rank_environment(process: psutil.Process) -> dict[str, str] | None:
    try:
        environ = process.environ()
    except (psutil.AccessDenied, psutil.ZombieProcess, psutil.NoSuchProcess, OSError):
        return None
    return {key: environ[key] for key in _RANK_VARIABLES if key in environ}


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())[:CMDLINE_MAX_CHARS]
    except (psutil.Error, OSError):
        return ""


def _describe(pid: int) -> RankProcess:
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return RankProcess(pid, None, "unknown", alive=False)
    command = _command(process)
    env = _rank_environment(process) or {}
    rank = _int(env.get("RANK"))
    source = "env" if rank is not None else "unknown"
    if rank is None and (m := _RANK_ARGUMENT.search(command) or _LOCAL_RANK_ARGUMENT.search(command)):
        rank, source = int(m.group(1)), "argument"
    job = env.get("TORCHELASTIC_RUN_ID") or (f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '')}"
                                              if "MASTER_ADDR" in env else None)
    return RankProcess(pid, rank, source, _int(env.get("WORLD_SIZE")), _int(env.get("LOCAL_RANK")), job, command,
                       alive=process.is_running(), visible_devices=env.get("CUDA_VISIBLE_DEVICES"))


def _number_by_order(found: list[RankProcess]) -> list[RankProcess]:
    """Ranks for processes that do not say theirs: the free numbers, in pid order."""
    taken = {p.rank for p in found if p.rank is not None}
    free = (n for n in range(len(found) * 2 + 1) if n not in taken)
    for process in found:
        if process.rank is None and process.alive:
            process.rank, process.rank_source = next(free), "order"
    return found


def processes_by_pid(pids: Sequence[int]) -> list[RankProcess]:
    """The given pids, in the given order, with their rank where it can be known (dead ones kept as rows)."""
    if len(set(pids)) != len(pids):
        raise BadInput("the same pid is given twice.", "Pass each pid once.")
    return _number_by_order([_describe(pid) for pid in pids])


def _ours() -> set[int]:
    """This process and its ancestors: never a target (the CLI's own command line holds the pattern)."""
    pids = {os.getpid()}
    try:
        pids.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    return pids


def processes_by_match(pattern: str, limit: int) -> tuple[list[RankProcess], int, list[str]]:
    """Processes whose command line matches `pattern` (RE2, so no pattern can hang the server); the topmost
    of each process tree only (not DataLoader workers), of one job. Returns (up to `limit` processes, how many
    matched, notes)."""
    import re2  # type: ignore[import-untyped]

    try:
        matcher = re2.compile(pattern)
    except re2.error as exc:
        raise BadInput(f"match pattern {pattern!r} is not a valid RE2 regular expression: {exc}.",
                       "Use a plain substring of the command line, e.g. 'train.py'.") from exc
    ours = _ours()
    matched: dict[int, int] = {}  # pid -> parent pid
    for process in psutil.process_iter(["pid", "ppid", "cmdline", "name"]):
        info = process.info
        if info["pid"] in ours or info.get("name") == "py-spy":
            continue
        command = " ".join(info.get("cmdline") or [])
        if command and matcher.search(command):
            matched[info["pid"]] = info["ppid"]
    topmost = sorted(pid for pid, parent in matched.items() if parent not in matched)
    found = [_describe(pid) for pid in topmost]
    # A launcher that matches too (torchrun's command line holds the script name) has no rank of its own
    # while its workers do: drop it when its children are the ranks.
    if any(p.rank_source == "env" for p in found):
        found = [p for p in found if p.rank_source == "env"] or found
    else:
        children = [_describe(pid) for pid, parent in matched.items() if parent in matched]
        with_env = [c for c in children if c.rank_source == "env"]
        if with_env:
            found = _topmost_ranks(with_env)
    found, notes = _one_job(found)
    found.sort(key=lambda p: (p.rank is None, p.rank if p.rank is not None else 0, p.pid))
    return _number_by_order(found[:limit]), len(found), notes


def _started(pid: int) -> float:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0


def _one_job(found: list[RankProcess]) -> tuple[list[RankProcess], list[str]]:
    """The ranks of one job: with several (same rank numbers twice), the largest, then the most recent."""
    jobs: dict[str | None, list[RankProcess]] = defaultdict(list)
    for process in found:
        jobs[process.job].append(process)
    if len(jobs) <= 1:
        return found, []
    chosen_job, chosen = max(jobs.items(), key=lambda item: (len(item[1]), max(_started(p.pid) for p in item[1])))
    others = ", ".join(f"{job or 'no run id'} ({len(procs)} processes, pids {', '.join(str(p.pid) for p in procs[:4])}"
                       f"{'...' if len(procs) > 4 else ''})" for job, procs in jobs.items() if job != chosen_job)
    return chosen, [f"several jobs match; took {chosen_job or 'the one without a run id'} ({len(chosen)} processes, "
                    f"the largest, then the newest). Others: {others}. Pass `pid` to choose."]


def _topmost_ranks(found: list[RankProcess]) -> list[RankProcess]:
    """One process per (job, rank): the one whose parent is not the same rank (DataLoader workers inherit it)."""
    by_pid = {p.pid: p for p in found}
    kept: list[RankProcess] = []
    for process in found:
        try:
            parent = psutil.Process(process.pid).ppid()
        except psutil.Error:
            parent = 0
        above = by_pid.get(parent)
        if above is not None and above.rank == process.rank and above.job == process.job:
            continue
        kept.append(process)
    return kept


def discover_job(limit: int, within: set[int] | None = None) -> tuple[list[RankProcess], list[str]]:
    """The ranks of the torchrun-style job on this host (processes with RANK and WORLD_SIZE in their
    environment), among the pids `within` when given (a Slurm job's processes on this node). With several jobs,
    the largest is taken and the others are named in the notes."""
    ours = _ours()
    candidates: list[RankProcess] = []
    unreadable = 0
    for process in psutil.process_iter(["pid", "name"]):
        if process.info["pid"] in ours or process.info.get("name") == "py-spy":
            continue
        if within is not None and process.info["pid"] not in within:
            continue
        env = _rank_environment(process)
        if env is None:
            unreadable += 1
            continue
        if "RANK" in env and "WORLD_SIZE" in env:
            candidates.append(_describe(process.info["pid"]))
    ranks = [p for p in _topmost_ranks(candidates) if p.rank is not None]
    if not ranks:
        hint = (f" ({unreadable} processes could not be read: run as their user or root)" if unreadable else "")
        scope = "of this Slurm job on this node" if within is not None else "on this host"
        return [], [f"no process {scope} has RANK and WORLD_SIZE in its environment{hint}."]
    chosen, notes = _one_job(ranks)
    chosen.sort(key=lambda p: (p.rank or 0, p.pid))
    if len(chosen) > limit:
        notes.append(f"{len(chosen)} ranks found; the first {limit} by rank are dumped (raise max_processes).")
    return chosen[:limit], notes
