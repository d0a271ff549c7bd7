"""find-stragglers on 1024 per-rank logs of 10,000 steps each, in one run.

Target (issue 6): the full analysis under 10 s and peak RSS under 300 MB on the 2-core machine.

Method.
- Generated logs in the fault lab's plain format (tests/lab/straggler_steps.py writes the same line):
  `<date> [rankR] INFO train: rank R step S time T ms (compute C ms, backward+allreduce B ms, optim O ms) loss L`,
  one file per rank (`rank<R>.log`), about 130 bytes a line: 1.3 GB in all. Step times are 100 ms with 3 % noise
  (seeded), rank 517's compute is 20 % longer while its step time matches the others (synchronous data parallel);
  every 500th step is a checkpoint spike on every rank.
- `gpu-triage find-stragglers --logs 'rank*.log' --json` as its own process, `--runs` times, after one read of the
  files into the page cache; wall time around the process, peak RSS from wait4() and the sampled process tree
  (benchmarks/traces.py's `measure`).
- Printed: every run, the median against the target, and the verdict (the flagged rank must be 517, compute_slow).
  The peer here is the plain alternative, a Python loop that applies the same line regex to every line
  (`re.search` per line, what a hand-written script does); it runs on a sample of 64 files and its time is scaled.

Usage: .venv/bin/python benchmarks/stragglers.py [--ranks 1024] [--steps 10000] [--runs 3] [--reuse]
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

from traces import last_json, measure  # benchmarks/traces.py

REPO = Path(__file__).resolve().parents[1]
SLOW_RANK = 517
TARGET_S = 10.0
TARGET_MIB = 300.0


def generate(folder: Path, ranks: int, steps: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        rng = random.Random(rank)
        lines = []
        for step in range(1, steps + 1):
            total = 100.0 * (1 + rng.gauss(0, 0.03)) + (400.0 if step % 500 == 0 else 0.0)
            compute = (36.0 if rank == SLOW_RANK else 30.0) * (1 + rng.gauss(0, 0.03))
            stamp = f"2026-11-29 12:{step // 600 % 60:02d}:{step // 10 % 60:02d},{step % 1000:03d}"
            lines.append(f"{stamp} [rank{rank}] INFO train: rank {rank} step {step} time {total:.1f} ms (compute "
                         f"{compute:.1f} ms, backward+allreduce {total - compute - 5:.1f} ms, optim 5.0 ms) loss "
                         f"0.{rng.randint(1000, 9999)}\n")
        (folder / f"rank{rank}.log").write_text("".join(lines))


def naive_seconds(folder: Path, sample: int, ranks: int) -> float:
    line = re.compile(r"step (\d+) time ([\d.]+) ms \(compute ([\d.]+) ms")
    files = sorted(folder.iterdir())[:sample]
    started = time.perf_counter()
    for path in files:
        with path.open() as handle:
            for text in handle:
                match = line.search(text)
                if match:
                    float(match.group(2))
                    float(match.group(3))
    return (time.perf_counter() - started) * ranks / len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    folder = REPO / ".cache" / "bench-stragglers" / f"{args.ranks}x{args.steps}"
    if not (args.reuse and folder.is_dir() and len(list(folder.iterdir())) == args.ranks):
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {args.ranks} logs of {args.steps} steps in {folder} ...", flush=True)
        generate(folder, args.ranks, args.steps)
    size = sum(len(p.read_bytes()) for p in folder.iterdir())
    print(f"input: {args.ranks} logs x {args.steps} steps, {size / 2**20:.0f} MiB in all")
    script = Path(sys.executable).parent / "gpu-triage"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "mcp_server.cli"]
    # The glob in full: the CLI reads a relative path as the shell's working directory (mcp_server/shell_paths.py).
    command = [*base, "find-stragglers", "--logs", str(folder / "rank*.log"), "--json", "--root", str(folder),
               "--timeout", "600"]
    walls, peak, result = [], 0.0, None
    for i in range(args.runs):
        run = measure(command, REPO)
        walls.append(run.wall)
        peak = max(peak, run.rss)
        print(f"ours run {i + 1}: {run.wall:6.2f} s, peak RSS {run.rss:6.0f} MiB, exit {run.code}")
        result = last_json(run.stdout) or result
        if run.code not in (0, 1, 2, 4):  # 4: unknown, a verdict too; 3 is a failed call
            sys.exit(f"the command failed: {run.stderr[-2000:]}")
    naive = naive_seconds(folder, 64, args.ranks)
    median = statistics.median(walls)
    print()
    verdict = "OK" if median < TARGET_S else "OVER"
    print(f"ours median {median:.2f} s: {median / TARGET_S:.2f}x the 10 s target [{verdict}]; "
          f"peak RSS {peak:.0f} MiB: {peak / TARGET_MIB:.2f}x the 300 MB target "
          f"[{'OK' if peak < TARGET_MIB else 'OVER'}]")
    print(f"per-line Python regex loop (64 files, scaled to {args.ranks}): {naive:.1f} s, parsing only; ours is "
          f"{naive / median:.1f}x faster end to end")
    if result:
        flagged = [(f["rank"], f["kind"], round(f["compute_deviation_pct"] or 0, 1)) for f in result["flagged"]]
        periods = sorted({r["spike_period"] for r in result["ranks"] if r["spike_period"]})
        print(f"verdict {result['verdict']}, flagged {flagged}, waited_on_rank {result['waited_on_rank']}, "
              f"spike periods seen {periods}")
    if not args.reuse:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
