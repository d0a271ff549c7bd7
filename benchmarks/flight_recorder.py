"""analyze-flight-recorder on 1024 ranks of dumps, against PyTorch's own analyzer (fr_trace), in one run.

Target (issue 5): 1024 ranks analysed in under 10 s on the 2-core CI machine, output within the byte budget.

Method.
- The dumps are generated from the real lab dump (tests/data/flight_recorder/rank_conditional_allgather/rank_1,
  torch 2.13, format 2.10): every rank gets `--entries` collective entries (default 2000, the buffer size PyTorch's
  docs suggest for TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE) of the real entry, renumbered, as NCCL
  records them (nccl:all_reduce, state completed / started, a pg_config with the group's name, so PyTorch's analyzer
  can read them). The last collective is started on every rank but one: rank 517 is in nccl:all_gather (the
  rank-conditional collective). Each file is pickled like PyTorch's (strings shared), about 0.4 MB a rank.
- Each side runs as its own process, after the files have been read once into the page cache: ours
  `gpu-triage analyze-flight-recorder DIR --json --root DIR` `--runs` times; PyTorch's
  `python -m torch.distributed.flight_recorder.fr_trace DIR` once (it is much slower). Wall time around the
  process; peak RSS from wait4() and the sampled process tree (benchmarks/traces.py's `measure`).
- Printed: every run, the median, the ratio against the 10 s target and against fr_trace, and both verdicts.

Usage: .venv/bin/python benchmarks/flight_recorder.py [--ranks 1024] [--entries 2000] [--runs 3] [--reuse]
[--sides ours,pytorch]. `--reuse` keeps the dumps in .cache/bench-fr/ for the next run.
"""

from __future__ import annotations

import argparse
import copy
import pickle
import re
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from traces import last_json, measure  # benchmarks/traces.py: the same process measurement

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "data" / "flight_recorder" / "rank_conditional_allgather" / "rank_1"
ODD_RANK = 517
TARGET_S = 10.0


def generate(folder: Path, ranks: int, entries: int) -> None:
    real = pickle.loads(SOURCE.read_bytes())  # our own lab's file
    template = real["entries"][-1]
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        dump = {key: value for key, value in real.items() if key != "entries"}
        dump["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}}
        dump["pg_status"] = {"0": {"last_enqueued_collective": entries, "last_started_collective": entries,
                                   "last_completed_collective": entries - 1}}
        items = []
        for seq in range(1, entries + 1):
            entry = copy.copy(template)  # shallow: frames and strings are shared, as in PyTorch's own pickles
            entry.update(collective_seq_id=seq, op_id=seq, record_id=seq - 1, profiling_name="nccl:all_reduce",
                         state="completed" if seq < entries else "started", retired=seq < entries,
                         time_created_ns=template["time_created_ns"] + seq * 1000)
            items.append(entry)
        if rank == ODD_RANK:
            items[-1]["profiling_name"] = "nccl:all_gather"
        dump["entries"] = items
        (folder / f"rank_{rank}").write_bytes(pickle.dumps(dump, protocol=pickle.HIGHEST_PROTOCOL))


def warm(folder: Path) -> int:
    return sum(len(path.read_bytes()) for path in folder.iterdir())


def ours(folder: Path) -> list[str]:
    script = Path(sys.executable).parent / "gpu-triage"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "mcp_server.cli"]
    return [*base, "analyze-flight-recorder", str(folder), "--json", "--root", str(folder), "--timeout", "600"]


def pytorch(folder: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--sides", default="ours,pytorch")
    args = parser.parse_args()
    sides = set(args.sides.split(","))

    folder = REPO / ".cache" / "bench-fr" / f"{args.ranks}x{args.entries}"
    if not (args.reuse and folder.is_dir() and len(list(folder.iterdir())) == args.ranks):
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {args.ranks} rank dumps of {args.entries} entries in {folder} ...", flush=True)
        generate(folder, args.ranks, args.entries)
    size = warm(folder)
    print(f"input: {args.ranks} dumps, {args.entries} entries each, {size / 2**20:.0f} MiB in all "
          f"({size / args.ranks / 1024:.0f} KiB a rank)")

    result: dict[str, Any] | None = None
    ours_walls: list[float] = []
    ours_rss = 0.0
    if "ours" in sides:
        for i in range(args.runs):
            run = measure(ours(folder), REPO)
            ours_walls.append(run.wall)
            ours_rss = max(ours_rss, run.rss)
            print(f"ours    run {i + 1}: {run.wall:6.2f} s, peak RSS {run.rss:6.0f} MiB, exit {run.code}, "
                  f"{len(run.stdout)} bytes of JSON")
            result = last_json(run.stdout)
    official_wall = None
    official_text = ""
    if "pytorch" in sides:
        run = measure(pytorch(folder), REPO)
        official_wall, official_text = run.wall, run.stdout + run.stderr
        print(f"fr_trace run 1: {run.wall:6.2f} s, peak RSS {run.rss:6.0f} MiB, exit {run.code}")

    print()
    if ours_walls:
        median = statistics.median(ours_walls)
        verdict = "OK" if median < TARGET_S else "OVER"
        print(f"ours median {median:.2f} s for {args.ranks} ranks: {median / TARGET_S:.2f}x the 10 s target "
              f"[{verdict}]; peak RSS {ours_rss:.0f} MiB")
        if official_wall:
            print(f"PyTorch fr_trace {official_wall:.2f} s: ours is {official_wall / median:.1f}x faster")
    if result is not None:
        group = result["process_groups"][0]
        suspects = [(s["rank"], s["seq"], s["reason"]) for s in result["suspects"]]
        print(f"ours: pg {group['pg']} last common seq {group['last_common_seq']}, first mismatch seq "
              f"{group['first_mismatch_seq']}, suspects {suspects}")
    if official_text:
        seq = re.search(r"Collective sequence number: (\d+)", official_text)
        culprits = sorted({int(m) for m in re.findall(r"Culprit rank (\d+)", official_text)})
        shown = culprits if len(culprits) <= 4 else f"{len(culprits)} ranks ({culprits[:3]}...)"
        print(f"fr_trace: seq {seq.group(1) if seq else '?'}, culprit ranks {shown}")
    if not args.reuse:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
