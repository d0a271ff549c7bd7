"""analyze_flight_recorder: from per-rank flight-recorder dumps, the first collective where the ranks disagree.

PyTorch's flight recorder keeps the last N collectives of every process group with their sequence number, op,
sizes, state and the Python stack that issued them. It is dumped per rank (TORCH_NCCL_DUMP_ON_TIMEOUT=1 with
TORCH_FR_DUMP_TEMP_FILE=<prefix>, or on demand with torch._C._distributed_c10d._dump_fr_trace()) as a pickle,
or as JSON without stacks. The pickles are loaded with tools/core/unpickle.py (plain containers only).

Per process group: the last sequence number every rank completed, then the first sequence number where a rank
never entered the collective (missing), entered another op (mismatched_op), other sizes or dtypes, or has not
started what the others have (not_started, NCCL only). The expected op is the majority's, so the verdict does
not depend on which rank's file is read first (PyTorch's analyzer uses the first file as the reference).
Groups are rebuilt from the entries when the dump's pg_config is unusable (gloo in torch 2.13 writes it with
empty names). SOP: nccl_hang_or_slow.
"""

from __future__ import annotations

import bisect
import json
import re
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, Field

from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.core.files import read_regular
from tools.core.frames import Frame, is_library
from tools.core.limits import (
    FR_MAX_FILE_BYTES,
    FR_MAX_FILES,
    FR_MAX_SUSPECTS,
    FR_MAX_WORKERS,
    FR_PARALLEL_BYTES,
    FR_STACK_FRAMES,
)
from tools.core.models import Coverage, InputModel, NextStep, PathArg, Severity, Table, ToolResult, cell
from tools.core.ranks import compact_ranges
from tools.core.unpickle import UnsafePickle, load_plain_pickle
from tools.core.workers import run_in_shares, worker_count
from tools.hangs.stack_formats import compact_coverage

__all__ = ["AnalyzeFlightRecorderInput", "AnalyzeFlightRecorderResult", "analyze_flight_recorder"]

Reason = Literal["missing", "mismatched_op", "mismatched_sizes", "mismatched_dtypes", "not_started", "no_dump"]

_RANK_SUFFIX = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")
_STARTED = frozenset({"started", "completed"})
UNKNOWN = "?"  # sizes / dtypes not read (a finished entry)
FR_FORMATS = ("flight-recorder pickle (TORCH_FR_DUMP_TEMP_FILE / _dump_fr_trace)",
              "flight-recorder JSON (_dump_fr_trace_json)")
# Disagreements judged against the majority of the ranks seen: with member ranks missing, that majority must be
# one of the whole group, or the missing ranks decide who is odd.
_BY_MAJORITY = frozenset({"mismatched_op", "mismatched_sizes", "mismatched_dtypes"})


class AnalyzeFlightRecorderInput(InputModel):
    path: PathArg = Field(description="Folder of per-rank flight-recorder dumps (<prefix><rank>, pickle or .json) "
                          "inside the roots.")
    pg: str | None = Field(default=None, max_length=256,
                           description="Only this process group (its name, e.g. '0', or its description).")

    cli_positional = "path"


class ProcessGroupReport(BaseModel):
    pg: str = Field(description="Process group name (pg id).")
    desc: str
    ranks: str = Field(description="Member ranks (compact); rebuilt from the entries when pg_config is unusable.")
    last_common_seq: int | None = Field(description="The last collective sequence number every rank completed.")
    first_mismatch_seq: int | None = Field(description="The first sequence number where the ranks disagree.")
    expected_op: str | None = Field(default=None, description="What the majority runs at first_mismatch_seq.")
    in_flight: str = Field(default="", description="What the ranks were doing when dumped.")
    dumps_seen: int = Field(default=0, description="Member ranks whose dump was read.")
    undecided: str = Field(default="", description="Set when the dumps read do not decide this group: what was "
                           "seen, and which member ranks' dumps are missing.")
    missing_ranks: list[int] = Field(default_factory=list, description="Member ranks with no readable dump.")


class FlightSuspect(BaseModel):
    rank: int
    pg: str
    seq: int | None
    reason: Reason
    op: str | None = Field(default=None, description="What this rank runs at seq (None when missing).")
    detail: str = ""
    location: str | None = Field(default=None, description="The user's innermost frame that issued it.")
    stack: list[str] = Field(default_factory=list, description="The recorded frames, innermost first (shortened).")


class RankDump(BaseModel):
    rank: int
    file: str
    format: str
    entries: int
    last_enqueued: int | None
    last_completed: int | None
    in_flight_op: str | None
    error: str | None = None


class AnalyzeFlightRecorderResult(ToolResult):
    process_groups: list[ProcessGroupReport]
    suspects: list[FlightSuspect]
    ranks: list[RankDump] = Field(description="One row per dump file; failed files first, then the suspects.")
    version: str | None = Field(description="The dump format version.")

    narrow_hint = "pass one process group (pg)"

    def tables(self) -> list[Table]:
        return [
            Table("Suspects", ["rank", "pg", "seq", "reason", "op", "detail", "issued at"],
                  [[str(s.rank), s.pg, cell(s.seq), s.reason, s.op or "-", s.detail, s.location or "-"]
                   for s in self.suspects], "suspects"),
            Table("Process groups", ["pg", "desc", "ranks", "last common seq", "first mismatch seq", "expected op",
                                     "in flight"],
                  [[g.pg, g.desc, g.ranks, cell(g.last_common_seq), cell(g.first_mismatch_seq), g.expected_op or "-",
                    g.in_flight] for g in self.process_groups], "process_groups"),
            Table("Dumps", ["rank", "file", "format", "entries", "last enqueued", "last completed", "in flight",
                            "error"],
                  [[str(r.rank), r.file, r.format, str(r.entries), cell(r.last_enqueued), cell(r.last_completed),
                    r.in_flight_op or "-", r.error or ""] for r in self.ranks], "ranks"),
        ]


# ------------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class _Entry:
    op: str
    sizes: str
    dtypes: str
    state: str
    retired: bool
    frames: tuple[Frame, ...] = ()


class _Kinds:
    """Interned (op, sizes, dtypes, state) of entries, shared by all dumps of one call: a job repeats the same
    few collectives thousands of times, so each entry is stored as one small number."""

    def __init__(self) -> None:
        self.index: dict[tuple[Any, str, str, Any], int] = {}
        self.table: list[tuple[str, str, str, str]] = []
        self.finished: dict[Any, int] = {}
        self.decoded: dict[tuple[str, str, str, str], int] = {}

    def intern(self, row: tuple[str, str, str, str]) -> int:
        """The id of an already-decoded kind (merging the tables of worker processes)."""
        kind = self.decoded.get(row)
        if kind is None:
            kind = self.decoded[row] = len(self.table)
            self.table.append(row)
        return kind

    def of_finished(self, profiling_name: Any) -> int:
        """A collective that finished on this rank: its op only. Sizes and dtypes are compared for unfinished
        entries (where a hang is); reading them for the thousands of finished ones would double the time."""
        kind = self.finished.get(profiling_name)
        if kind is None:
            kind = self.finished[profiling_name] = len(self.table)
            self.table.append((_op(profiling_name), UNKNOWN, UNKNOWN, "completed"))
        return kind

    def of(self, profiling_name: Any, sizes: Any, dtypes: Any, state: Any) -> int:
        key = (profiling_name, repr(sizes), repr(dtypes), state)
        kind = self.index.get(key)
        if kind is None:
            kind = self.index[key] = len(self.table)
            self.table.append((_op(profiling_name), str(sizes), str(dtypes), str(state or "")))
        return kind


@dataclass
class _PgRecord:
    """One rank's entries of one process group: sequence numbers and kinds in record order (increasing), and
    the stacks of the entries that had not finished (only those can be the odd ones; memory stays small)."""

    kinds: _Kinds
    desc: str = ""
    config_ranks: list[int] | None = None
    seqs: array[int] = field(default_factory=lambda: array("q"))
    kind_ids: array[int] = field(default_factory=lambda: array("l"))
    open_frames: dict[int, tuple[Frame, ...]] = field(default_factory=dict)
    last_completed: int | None = None
    last_enqueued: int | None = None

    def entry(self, seq: int) -> _Entry | None:
        i = bisect.bisect_left(self.seqs, seq)
        if i == len(self.seqs) or self.seqs[i] != seq:
            return None
        op, sizes, dtypes, state = self.kinds.table[self.kind_ids[i]]
        frames = self.open_frames.get(seq)
        return _Entry(op, sizes, dtypes, state, frames is None, frames or ())

    @property
    def oldest(self) -> int | None:
        return self.seqs[0] if self.seqs else None

    @property
    def newest(self) -> int | None:
        return self.seqs[-1] if self.seqs else None


@dataclass
class _Dump:
    rank: int
    file: str
    format: str
    version: str | None = None
    groups: dict[str, _PgRecord] = field(default_factory=dict)
    entries: int = 0
    p2p: int = 0
    error: str | None = None


def _op(profiling_name: Any) -> str:
    name = str(profiling_name or "?")
    return name.split(":", 1)[1] if ":" in name else name


def _ranks_list(value: Any) -> list[int] | None:
    if isinstance(value, list):
        return [int(v) for v in value if isinstance(v, int)]
    if isinstance(value, str):
        try:
            parsed = json.loads(value[:100_000])
        except (ValueError, RecursionError):
            return None
        return [int(v) for v in parsed if isinstance(v, int)] if isinstance(parsed, list) else None
    return None


def _frames(raw: Any) -> tuple[Frame, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(Frame(str(f.get("name", "?")), str(f.get("filename", "?")), f.get("line") if isinstance(
        f.get("line"), int) else None) for f in raw[:64] if isinstance(f, dict))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _new_record(dump: _Dump, kinds: _Kinds, group: Any, raw: dict[str, Any], config: dict[str, Any],
                status: dict[str, Any]) -> tuple[str, _PgRecord]:
    if isinstance(group, list | tuple) and group:
        name, desc = str(group[0]), str(group[1]) if len(group) > 1 else ""
    else:
        name, desc = str(raw.get("pg_id", "?")), ""
    record = dump.groups.get(name)
    if record is not None:
        return name, record
    record = dump.groups[name] = _PgRecord(kinds, desc=desc)
    cfg = config.get(name)
    if cfg is None and name == "0" and len(config) == 1:
        # gloo (torch 2.13) files the default group under an empty name: its member list is still right.
        cfg = next(iter(config.values()))
    if isinstance(cfg, dict):
        record.config_ranks = _ranks_list(cfg.get("ranks"))
        record.desc = record.desc or str(cfg.get("desc", ""))
    pg_status = status.get(str(raw.get("pg_id", name)))
    if isinstance(pg_status, dict):
        record.last_completed = _int_or_none(pg_status.get("last_completed_collective"))
        record.last_enqueued = _int_or_none(pg_status.get("last_enqueued_collective"))
    return name, record


def _parse(data: dict[str, Any], dump: _Dump, kinds: _Kinds) -> None:
    if not isinstance(data, dict) or "entries" not in data and "pg_status" not in data:
        raise UnreadableInput(f"{dump.file} is not a flight-recorder dump (no 'entries').",
                              "Pass the files written by TORCH_FR_DUMP_TEMP_FILE / _dump_fr_trace().")
    dump.version = str(data.get("version")) if data.get("version") is not None else None
    config: dict[str, Any] = data["pg_config"] if isinstance(data.get("pg_config"), dict) else {}
    entries = data.get("entries") or []
    if not isinstance(entries, list):
        raise UnreadableInput(f"{dump.file}: 'entries' is not a list.", "The dump is damaged.")
    status: dict[str, Any] = data["pg_status"] if isinstance(data.get("pg_status"), dict) else {}
    by_group: dict[Any, _PgRecord] = {}
    last_done: dict[int, int] = {}
    # The hot loop of the tool (2000 entries x 1000+ ranks): plain dict lookups, no helper calls per entry.
    for raw in entries:
        if type(raw) is not dict:
            continue
        if raw.get("is_p2p"):
            dump.p2p += 1
            continue
        seq = raw.get("collective_seq_id")
        if type(seq) is not int or seq < 0:
            continue
        group = raw.get("process_group")
        key = tuple(group) if type(group) is list else group
        record = by_group.get(key)
        if record is None:
            _, record = _new_record(dump, kinds, group, raw, config, status)
            by_group[key] = record
        if record.seqs and seq <= record.seqs[-1]:
            continue  # out of order or repeated: keep the first
        state = raw.get("state")
        record.seqs.append(seq)
        if raw.get("retired") is True or state == "completed":
            record.kind_ids.append(kinds.of_finished(raw.get("profiling_name")))
            last_done[id(record)] = seq
        else:
            record.kind_ids.append(kinds.of(raw.get("profiling_name"), raw.get("input_sizes"),
                                            raw.get("input_dtypes"), state))
            record.open_frames[seq] = _frames(raw.get("frames"))
        dump.entries += 1
    for record in dump.groups.values():
        if record.last_completed is None:
            record.last_completed = last_done.get(id(record))
        if record.last_enqueued is None:
            record.last_enqueued = record.newest


def _read_one(path: Path, name: str, rank: int, kinds: _Kinds, deadline: float) -> _Dump:
    dump = _Dump(rank, name, "?")
    try:
        size = path.stat().st_size
        if size > FR_MAX_FILE_BYTES:
            raise LimitExceeded(f"{name} is {size // 2**20} MiB, over the {FR_MAX_FILE_BYTES // 2**20} MiB limit.",
                                "A flight-recorder dump is a few MiB; check that this is one.")
        raw = read_regular(path, FR_MAX_FILE_BYTES + 1, name)
        if raw[:1] in (b"{", b"["):
            dump.format = "json"
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise UnreadableInput(f"{name} is not valid JSON ({exc}).", "The dump may be cut short.") from exc
            except RecursionError as exc:
                raise UnreadableInput(f"{name}: JSON nested deeper than any flight-recorder dump's.",
                                      "Pass the dumps torch wrote (TORCH_NCCL_DEBUG_INFO_TEMP_FILE).") from exc
        else:
            dump.format = "pickle"
            data = load_plain_pickle(raw, name, deadline)
        _parse(data, dump, kinds)
    except (UnreadableInput, LimitExceeded) as exc:
        dump.error = str(exc)
        if isinstance(exc, UnsafePickle):
            dump.format = "pickle (refused)"
    except OSError as exc:
        dump.error = f"cannot read {name}: {exc.strerror or exc}"
    return dump


def _dump_files(folder: Path) -> tuple[list[tuple[Path, str, int]], list[str]]:
    """(path, display name, rank) for each dump; a pickle and a JSON of the same rank: the pickle (it has
    stacks)."""
    notes: list[str] = []
    by_rank: dict[int, tuple[Path, str]] = {}
    skipped = 0
    entries: list[Path] = []
    for count, entry in enumerate(folder.iterdir()):  # counted as listed: a folder of 10^6 files stops at once
        if count > FR_MAX_FILES * 2:
            raise LimitExceeded(f"{folder.name} holds more than {FR_MAX_FILES * 2} entries.",
                                f"Pass a folder with at most {FR_MAX_FILES} per-rank dumps.")
        entries.append(entry)
    for path in sorted(entries):
        if not path.is_file():
            continue
        match = _RANK_SUFFIX.search(path.name)
        if match is None:
            skipped += 1
            continue
        rank = int(match.group(1))
        previous = by_rank.get(rank)
        if previous is None or (previous[0].suffix == ".json" and path.suffix != ".json"):
            by_rank[rank] = (path, path.name)
    if skipped:
        notes.append(f"{skipped} files without a rank number at the end of their name were skipped.")
    if len(by_rank) > FR_MAX_FILES:
        raise LimitExceeded(f"{len(by_rank)} rank dumps; the limit is {FR_MAX_FILES}.", "Analyse fewer ranks.")
    return [(p, n, r) for r, (p, n) in sorted(by_rank.items())], notes


def _read_chunk(files: list[tuple[Path, str, int]], deadline: float) -> tuple[list[_Dump], _Kinds]:
    kinds = _Kinds()
    dumps: list[_Dump] = []
    for file, name, rank in files:
        if time.monotonic() > deadline:
            raise LimitExceeded(f"reading the dumps took longer than the call's limit ({len(dumps)} of {len(files)} "
                                "read in one worker).", "Pass one process group or fewer ranks, or raise --timeout.")
        dumps.append(_read_one(file, name, rank, kinds, deadline))
    return dumps, kinds


def _merge(chunks: list[tuple[list[_Dump], _Kinds]]) -> list[_Dump]:
    """The dumps of all workers with one table of kinds (each worker interned its own)."""
    kinds = _Kinds()
    merged: list[_Dump] = []
    for dumps, local in chunks:
        translate = [kinds.intern(row) for row in local.table]
        for dump in dumps:
            for record in dump.groups.values():
                record.kind_ids = array("l", map(translate.__getitem__, record.kind_ids))
                record.kinds = kinds
            merged.append(dump)
    return merged


def _read_all(path: Path, deadline: float) -> tuple[list[_Dump], list[str]]:
    if path.is_file():
        match = _RANK_SUFFIX.search(path.name)
        files: list[tuple[Path, str, int]] = [(path, path.name, int(match.group(1)) if match else 0)]
        notes: list[str] = []
    elif path.is_dir():
        files, notes = _dump_files(path)
    else:  # a FIFO, a socket or a device: opening it could wait for ever
        raise BadInput(f"{path.name} is neither a regular file nor a folder.",
                       "Pass the folder of flight-recorder dumps, or one dump file.")
    if not files:
        held = sum(1 for p in path.iterdir() if p.is_file()) if path.is_dir() else 0
        raise UnreadableInput(f"no flight-recorder dump in {path.name}: it holds {held} file(s), none named "
                              "<prefix><rank> (e.g. rank_0).",
                              "Dumps are written by TORCH_NCCL_DUMP_ON_TIMEOUT=1 with "
                              "TORCH_FR_DUMP_TEMP_FILE=/dir/rank_ .")
    total = sum(file.stat().st_size for file, _, _ in files)
    workers = worker_count(len(files), total, FR_PARALLEL_BYTES, FR_MAX_WORKERS)
    # Unpickling is CPU-bound: large jobs are read by worker processes (tools/core/workers.py).
    chunks = run_in_shares(_read_chunk, files, workers, deadline)
    dumps = _merge(chunks) if workers > 1 else chunks[0][0]
    dumps.sort(key=lambda d: d.rank)
    return dumps, notes


# ----------------------------------------------------------------------------------------------- analysis


def _where(frames: Sequence[Frame]) -> tuple[str | None, list[str]]:
    user = next((f for f in frames if not is_library(f)), None)
    return (user.display() if user else None), [f.display() for f in frames[:FR_STACK_FRAMES]]


def _majority(values: dict[int, str]) -> tuple[str, bool]:
    """The most common value and whether it is a strict majority winner (no tie)."""
    counts = Counter(values.values()).most_common(2)
    return counts[0][0], len(counts) == 1 or counts[0][1] > counts[1][1]


def _analyse_pg(name: str, holders: dict[int, _PgRecord], world: list[int], notes: list[str]
                ) -> tuple[ProcessGroupReport, list[FlightSuspect]]:
    desc = next((r.desc for r in holders.values() if r.desc), "")
    config = next((r.config_ranks for r in holders.values() if r.config_ranks), None)
    # Without a usable pg_config the default group is every rank numbered up to the highest seen.
    job = set(range(max(world) + 1)) if world else set()
    members = sorted(set(config) if config else set(holders) | (job if name == "0" else set()))
    completed = [c for c in (h.last_completed for h in holders.values()) if c is not None]
    last_common = min(completed) if len(completed) == len(holders) and completed else None
    # The ring buffer forgets old entries: compare only what every rank still holds.
    oldest = max((r.oldest for r in holders.values() if r.oldest is not None), default=0)
    newest = max((r.newest for r in holders.values() if r.newest is not None), default=-1)
    start = max(oldest, (last_common or 0) + 1)
    suspects: list[FlightSuspect] = []
    report = ProcessGroupReport(pg=name, desc=desc, ranks=compact_ranges(members), last_common_seq=last_common,
                                first_mismatch_seq=None)
    no_dump = [r for r in members if r not in holders]
    for seq in range(start, newest + 1):
        present = {r: e for r, e in ((r, h.entry(seq)) for r, h in holders.items()) if e is not None}
        if not present:
            continue
        missing = [r for r in holders if r not in present and (holders[r].last_enqueued or -1) < seq]
        ops = {r: e.op for r, e in present.items()}
        expected_op, clear = _majority(ops)
        found: list[FlightSuspect] = []
        for rank in missing:
            last = holders[rank].last_enqueued
            found.append(FlightSuspect(rank=rank, pg=name, seq=seq, reason="missing",
                                       detail=f"never entered it (last enqueued {cell(last)}) while ranks "
                                       f"{compact_ranges(list(present))} did"))
        for rank, entry in present.items():
            if entry.op != expected_op:
                found.append(_suspect(rank, name, seq, "mismatched_op", entry, f"runs {entry.op} where "
                                      f"{Counter(ops.values())[expected_op]} ranks run {expected_op}"))
        if not found:
            same_op = {r: e for r, e in present.items() if e.op == expected_op}
            checks: tuple[tuple[str, Reason], ...] = (("sizes", "mismatched_sizes"), ("dtypes", "mismatched_dtypes"))
            for attribute, reason in checks:
                values = {r: getattr(e, attribute) for r, e in same_op.items() if getattr(e, attribute) != UNKNOWN}
                if not values:
                    continue
                common, _ = _majority(values)
                for rank, value in values.items():
                    if value != common:
                        found.append(_suspect(rank, name, seq, reason, same_op[rank],
                                              f"input {attribute} {value} where the others have {common}"))
                if found:
                    break
        if not found and not missing:
            started = [r for r, e in present.items() if e.state in _STARTED]
            if started and len(started) < len(present):
                for rank, entry in present.items():
                    if entry.state not in _STARTED:
                        found.append(_suspect(rank, name, seq, "not_started", entry,
                                              f"still {entry.state} while ranks {compact_ranges(started)} started it: "
                                              "this rank's previous work (compute) has not finished"))
        if found and no_dump and all(f.reason in _BY_MAJORITY for f in found):
            backing = sum(1 for e in present.values() if e.op == expected_op)
            if 2 * backing <= len(members):
                # The ranks named differ from a majority of the ranks seen only: the missing ranks decide.
                odd = compact_ranges(sorted(f.rank for f in found))
                report.first_mismatch_seq, report.expected_op = seq, expected_op
                report.undecided = (f"at seq {seq} rank {odd} differs ({found[0].reason.replace('_', ' ')}: "
                                    f"{found[0].op}) from {backing} rank(s) running {expected_op}, no majority of "
                                    f"the {len(members)} members")
                found = []
                break
        if found:
            report.first_mismatch_seq = seq
            report.expected_op = expected_op
            if not clear:
                notes.append(f"pg {name} seq {seq}: no majority op ({dict(Counter(ops.values()))}); the ranks named "
                             "are those that differ from the op seen most often first.")
            suspects = found
            break
    in_flight = {r: e for r, e in ((r, rec.entry(rec.newest)) for r, rec in holders.items()
                                   if rec.newest is not None) if e is not None and not e.retired}
    if in_flight:
        by_op = Counter(f"{e.op} seq {holders[r].newest}" for r, e in in_flight.items())
        report.in_flight = "; ".join(f"{op} on {n} rank{'s' if n > 1 else ''}" for op, n in by_op.most_common(3))
    elif holders:
        report.in_flight = "nothing (every recorded collective completed)"
    report.dumps_seen = len([r for r in members if r in holders])
    report.missing_ranks = no_dump
    if no_dump and not report.undecided and not suspects:
        report.undecided = "the ranks seen agree on every collective they hold"
    for rank in no_dump:
        suspects.append(FlightSuspect(rank=rank, pg=name, seq=None, reason="no_dump",
                                      detail="no dump from this member rank: it may have crashed or hung before "
                                      "dumping; look at its log"))
    return report, suspects


def _suspect(rank: int, pg: str, seq: int, reason: Reason, entry: _Entry, detail: str) -> FlightSuspect:
    location, stack = _where(entry.frames)
    return FlightSuspect(rank=rank, pg=pg, seq=seq, reason=reason, op=entry.op, detail=detail, location=location,
                         stack=stack)


def _analyse(dumps: list[_Dump], pg_filter: str | None, notes: list[str]) -> AnalyzeFlightRecorderResult:
    good = [d for d in dumps if d.error is None]
    if not good:
        raise UnreadableInput("no dump could be read: " + "; ".join(d.error or "" for d in dumps[:3]),
                              "Pass the folder of dumps written by PyTorch's flight recorder.")
    world = sorted(d.rank for d in dumps)
    names = sorted({n for d in good for n in d.groups}, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0,
                                                                         n))
    if pg_filter is not None:
        names = [n for n in names if n == pg_filter or any(d.groups.get(n) and d.groups[n].desc == pg_filter
                                                           for d in good)]
        if not names:
            raise BadInput(f"no process group named {pg_filter!r} in the dumps.", "Leave pg out to see them all.")
    reports: list[ProcessGroupReport] = []
    suspects: list[FlightSuspect] = []
    for name in names:
        holders = {d.rank: d.groups[name] for d in good if name in d.groups}
        report, found = _analyse_pg(name, holders, world, notes)
        reports.append(report)
        suspects += found
    p2p = sum(d.p2p for d in good)
    if p2p:
        notes.append(f"{p2p} point-to-point entries (send/recv) were not compared; only collectives are.")
    failed = [d for d in dumps if d.error is not None]
    for d in failed:
        notes.append(f"rank {d.rank}: {d.error}")
    suspects.sort(key=lambda s: (s.reason == "no_dump", s.seq if s.seq is not None else 1 << 62, s.rank))
    suspect_ranks = {s.rank for s in suspects}
    rank_rows = [RankDump(rank=d.rank, file=d.file, format=d.format, entries=d.entries,
                          last_enqueued=_first(d, "last_enqueued"), last_completed=_first(d, "last_completed"),
                          in_flight_op=_in_flight(d), error=d.error)
                 for d in sorted(dumps, key=lambda d: (d.error is None, d.rank not in suspect_ranks, d.rank))]
    open_groups = [r for r in reports if r.undecided and r.missing_ranks]
    decides = None
    conclusion = _conclude(reports, suspects, failed, len(dumps))
    if any(s.reason != "no_dump" for s in suspects):
        severity = Severity.crit
    elif open_groups:
        severity = Severity.unknown
        group = open_groups[0]
        lacking = compact_ranges(group.missing_ranks)
        decides = f"the flight-recorder dumps of ranks {lacking} (process group {group.pg})"
        members = group.dumps_seen + len(group.missing_ranks)
        conclusion = [f"Process group {group.pg}: dumps of {group.dumps_seen} of {members} member ranks were read; "
                      f"{group.undecided}.",
                      f"Ranks {lacking} have no readable dump, and the disagreeing collective may be on them: "
                      f"unknown until {decides} are read (or their logs: diagnose_logs)."]
        if failed:
            conclusion.append(f"{len(failed)} of {len(dumps)} dumps could not be read (see notes).")
    else:
        severity = Severity.warn if suspects or failed else Severity.ok
    coverage = [Coverage.read(d.file, f"rank {d.rank}, {d.format}, {d.entries} collective entries")
                if d.error is None else Coverage.not_understood(d.file, d.error, FR_FORMATS)
                for d in sorted(dumps, key=lambda d: d.rank)]
    return AnalyzeFlightRecorderResult(
        severity=severity, conclusion=conclusion, decides=decides, coverage=compact_coverage(coverage, "dumps"),
        next_steps=_next_steps(suspects), process_groups=reports, suspects=suspects[:FR_MAX_SUSPECTS],
        ranks=rank_rows, version=next((d.version for d in good if d.version), None), notes=notes[:20])


def _first(dump: _Dump, attribute: str) -> int | None:
    record = dump.groups.get("0") or next(iter(dump.groups.values()), None)
    return getattr(record, attribute) if record else None


def _in_flight(dump: _Dump) -> str | None:
    for record in dump.groups.values():
        if record.open_frames:
            seq = max(record.open_frames)
            entry = record.entry(seq)
            return f"{entry.op} seq {seq}" if entry else None
    return None


def _conclude(reports: list[ProcessGroupReport], suspects: list[FlightSuspect], failed: list[_Dump],
              dumps: int) -> list[str]:
    real = [s for s in suspects if s.reason != "no_dump"]
    text: list[str] = []
    if real:
        first = real[0]
        same = sorted({s.rank for s in real if s.pg == first.pg and s.seq == first.seq and s.reason == first.reason})
        report = next(r for r in reports if r.pg == first.pg)
        others = f"the others run {report.expected_op}" if report.expected_op else "the others entered it"
        what = {"missing": "never entered it", "mismatched_op": f"runs {first.op} where {others}",
                "mismatched_sizes": f"calls {first.op} with other input sizes than the others",
                "mismatched_dtypes": f"calls {first.op} with other dtypes than the others",
                "not_started": "has not started it while the others have"}.get(first.reason, first.reason)
        where = f" (issued at {first.location})" if first.location else ""
        text.append(f"Process group {first.pg}: the ranks agree up to seq {cell(report.last_common_seq)}; at seq "
                    f"{first.seq} rank {compact_ranges(same)} {what}{where}.")
        text.append("That rank is the culprit: a collective called by only some ranks, or in another order — "
                    "fix the call so every rank makes the same collectives in the same order.")
    elif reports:
        flight = "; ".join(f"pg {r.pg}: {r.in_flight}" for r in reports[:2] if r.in_flight)
        text.append(f"All ranks agree on every recorded collective ({flight}).")
        text.append("No rank is missing or different: if the job hangs, the collective itself is stuck (network, "
                    "NCCL) — run with NCCL_DEBUG=INFO and check the links.")
    if failed:
        text.append(f"{len(failed)} of {dumps} dumps could not be read (see notes); their ranks are not judged.")
    return text[:3]


def _next_steps(suspects: list[FlightSuspect]) -> list[NextStep]:
    steps = []
    located = next((s for s in suspects if s.location), None)
    if located is not None:
        steps.append(NextStep(branch="nccl_hang_or_slow", action=f"Open {located.location} on rank {located.rank}",
                              why="That line issued the collective the other ranks do not make."))
    steps.append(NextStep.from_sop("nccl_hang_or_slow", done={"analyze_flight_recorder"}))
    steps.append(NextStep(branch="nccl_hang_or_slow", step="logs", action="diagnose_logs on every rank's log",
                          why="Timeout and watchdog texts give the timeout, the op and the ranks that died."))
    return steps


async def analyze_flight_recorder(params: AnalyzeFlightRecorderInput, ctx: ToolContext
                                  ) -> AnalyzeFlightRecorderResult:
    """Analyse a folder of per-rank PyTorch flight-recorder dumps (pickle as written by TORCH_FR_DUMP_TEMP_FILE /
    TORCH_NCCL_DUMP_ON_TIMEOUT or _dump_fr_trace(), or the JSON variant): per process group the last collective
    every rank completed, the first sequence number where ranks disagree, and the suspects with the reason
    (missing, mismatched_op, mismatched_sizes, mismatched_dtypes, not_started) and the recorded frame that
    issued it. Pickles are loaded with a restricted unpickler (plain containers and scalars only); the expected
    op is the majority's. Gloo dumps with broken pg_config are handled.
    """
    path = ctx.path(params.path)
    deadline = time.monotonic() + ctx.remaining_s()
    dumps, notes = await anyio.to_thread.run_sync(_read_all, path, deadline, abandon_on_cancel=True)
    return _analyse(dumps, params.pg, notes)
