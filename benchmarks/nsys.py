"""summarize-trace on an Nsight Systems export against NVIDIA's own reports on the same file, in one run.

NVIDIA's side is what a user runs to get the same answers from nsys: `nsys stats` producing cuda_gpu_kern_sum,
cuda_api_sum and cuda_gpu_mem_time_sum, plus `nsys analyze` producing the six expert-system rules. Ours is
`gpu-triage summarize-trace FILE --json` (the breakdown, the causes and the same six rules). Each runs as its own
process, `--runs` times, alternating; medians, ratios and peak RSS (wait4) are printed. Targets (issue 18): faster
than NVIDIA's reports, and a 1 GB export in < 300 MB RSS.

The input is a real export (default: tests/data/nsys/files/nsysai-mfu-2gpu-before.sqlite, two ranks of a torchrun
job) replicated to `--gib`: copy k has every start/end shifted by k x the original span and its correlation ids by
k x their range, in the kernel, memcpy, memset, runtime and NVTX tables. The nsys is Debian's 2023.4 that
scripts/test.sh unpacks into .cache/nsys (or `--nsys PATH`).

Usage: .venv/bin/python benchmarks/nsys.py [--gib 1.0] [--runs 3] [--reuse] [--source PATH] [--nsys PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO / "tests" / "data" / "nsys" / "files" / "nsysai-mfu-2gpu-before.sqlite"
DEFAULT_NSYS = (REPO / ".cache" / "nsys" / "usr" / "lib" / "x86_64-linux-gnu" / "nsight-systems" / "target-linux-x64"
                / "nsys")
SHIFTED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
           "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
RULES = "cuda_memcpy_async,cuda_memcpy_sync,cuda_memset_sync,cuda_api_sync,gpu_gaps,gpu_time_util"


def replicate(source: Path, target: Path, total_bytes: int) -> int:
    """Copy `source` to `target` and append shifted copies of its event rows until the file reaches the size."""
    shutil.copyfile(source, target)
    db = sqlite3.connect(target)
    present = [t for t in SHIFTED if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()]
    spans = [db.execute(f'SELECT min(start), max("end") FROM "{t}"').fetchone() for t in present]
    low, high = min(s[0] for s in spans if s[0] is not None), max(s[1] for s in spans if s[1] is not None)
    span = high - low + 1
    corr = max(db.execute(f'SELECT coalesce(max(correlationId), 0) FROM "{t}"').fetchone()[0]
               for t in present if "correlationId" in {c[1] for c in db.execute(f'PRAGMA table_info("{t}")')}) + 1
    originals = {t: db.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0 for t in present}
    copies = 1
    while target.stat().st_size < total_bytes:
        for table in present:
            columns = [c[1] for c in db.execute(f'PRAGMA table_info("{table}")')]
            shifted = [f'"{c}" + {copies * span}' if c in ("start", "end") else
                       f'"{c}" + {copies * corr}' if c == "correlationId" else f'"{c}"' for c in columns]
            names = ", ".join(f'"{c}"' for c in columns)
            db.execute(f'INSERT INTO "{table}" ({names}) SELECT {", ".join(shifted)} FROM "{table}" '
                       f"WHERE rowid <= {originals[table]}")
        db.commit()
        copies += 1
    db.close()
    return copies


def measure(argv: list[str]) -> tuple[float, float, int]:
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - started, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="keep the replicated export in .cache and reuse it")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--nsys", type=Path, default=DEFAULT_NSYS)
    args = parser.parse_args()
    if not args.nsys.is_file():
        sys.exit(f"{args.nsys} is missing: run scripts/test.sh (it unpacks Debian's nsys) or pass --nsys")
    folder = REPO / ".cache" / "bench-nsys" / f"{args.source.stem}-{args.gib:g}gib"
    folder.mkdir(parents=True, exist_ok=True)
    export = folder / "job.sqlite"
    if not (args.reuse and export.is_file()):
        started = time.perf_counter()
        copies = replicate(args.source, export, int(args.gib * 2**30))
        print(f"input: {args.source.name} x {copies} copies, written in {time.perf_counter() - started:.1f} s")
    print(f"input: {export} ({export.stat().st_size / 2**30:.2f} GiB)")
    ours_cli = Path(sys.executable).parent / "gpu-triage"
    sides = {
        "ours": [str(ours_cli), "summarize-trace", export.name, "--root", str(folder), "--json", "--timeout", "600"],
        "nsys stats": [str(args.nsys), "stats", "-q", "--format", "csv", "--output", "-", "--report",
                       "cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum", str(export)],
        "nsys analyze": [str(args.nsys), "analyze", "-q", "--format", "csv", "--output", "-", "-r", RULES,
                         str(export)],
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for run in range(args.runs):
        for name, argv in sides.items():
            wall, rss, code = measure(argv)
            results[name].append((wall, rss))
            print(f"run {run + 1} {name:12s} {wall:7.2f} s  peak RSS {rss:7.1f} MiB  exit {code}", flush=True)
    median = {n: statistics.median(w for w, _ in r) for n, r in results.items()}
    peak = {n: max(m for _, m in r) for n, r in results.items()}
    print()
    for name in sides:
        print(f"{name:12s} median {median[name]:7.2f} s, peak RSS {peak[name]:7.1f} MiB")
    nvidia = median["nsys stats"] + median["nsys analyze"]
    print(f"NVIDIA's reports (stats + analyze) / ours = {nvidia / median['ours']:.2f}x (target > 1x)")
    size_gb = export.stat().st_size / 1e9
    print(f"ours peak RSS = {peak['ours'] * 2**20 / 1e6:.0f} MB for {size_gb:.2f} GB "
          f"(target < 300 MB at 1 GB)")


if __name__ == "__main__":
    main()
