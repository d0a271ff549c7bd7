"""grep_logs and diagnose_logs against ripgrep on a generated ~1 GB multi-rank log, in one run.

Targets (issue 3): grep_logs wall time <= 2x ripgrep's (`rg -i PATTERN files | tail -100`, the same
errors preset), diagnose_logs <= 3x, peak RSS < 200 MB whatever the size. Each command runs as its own
process (as a user would run it), `--runs` times; medians and ratios are printed. Peak RSS comes from
wait4() of that process. The page cache is warmed first so both sides read from memory.

A second, dense input: a real traceback (a round-11 development excerpt) repeated to `--dense-mib` MiB, every line
a match, as a log that prints the same failure at every step: diagnose_logs' speed and peak RSS on it read whole, and
the same call with `--timeout 10`, which must answer by its deadline with the part read (its coverage partial).

Usage: .venv/bin/python benchmarks/logs.py [--gib 1.0] [--ranks 8] [--runs 3] [--dense-mib 16]
(ripgrep: `pip install -e ".[bench]"`, or Debian's `ripgrep`.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sop import log_presets  # noqa: E402

# Steady-state training output; NCCL INFO lines appear at init only (NCCL_DEBUG=INFO), as in real jobs.
INIT = "[default{r}]:node{r}:1234:5678 [{r}] NCCL INFO Channel 0{g}/32 : {r} -> {r2} via P2P/IPC/read"
NORMAL = [
    "[default{r}]:2024-05-01 10:{m:02d}:{s:02d},{ms:03d} INFO trainer.py:412 step {step} loss 2.{step:04d} "
    "lr 3.0e-04 grad_norm 0.{g:03d} tokens/s 45{g:03d} mfu 41.2%",
    "[default{r}]:2024-05-01 10:{m:02d}:{s:02d},{ms:03d} INFO data.py:88 prefetched batch {step} in {g} ms",
    "[default{r}]:2024-05-01 10:{m:02d}:{s:02d},{ms:03d} INFO metrics.py:20 eval error_rate=0.0{g} infinite_sampler=on",
    "[default{r}]:2024-05-01 10:{m:02d}:{s:02d},{ms:03d} WARNING checkpoint.py:51 slow write {g} ms for shard {r}",
]
RARE = [
    "[default{r}]:[rank{r}]:[E501 10:{m:02d}:{s:02d}.123456 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={step}, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
    "Timeout(ms)=600000) ran for 600042 milliseconds before timing out.",
    "[default{r}]:RuntimeError: CUDA error: an illegal memory access was encountered",
    "[default{r}]:{{'loss': nan, 'grad_norm': nan, 'learning_rate': 3e-05, 'epoch': 0.{g}}}",
]


def generate(folder: Path, total_bytes: int, ranks: int) -> list[Path]:
    per_rank = total_bytes // ranks
    files = []
    for r in range(ranks):
        init = [INIT.format(r=r, r2=(r + 1) % ranks, g=i % 10) for i in range(2000)]
        lines = []
        for i in range(20000):
            template = RARE[i % len(RARE)] if i % 5000 == 4999 else NORMAL[i % len(NORMAL)]
            lines.append(template.format(r=r, r2=(r + 1) % ranks, m=i % 60, s=(i // 60) % 60, ms=i % 1000,
                                         step=i, g=i % 1000))
        block = ("\n".join(lines) + "\n").encode()
        path = folder / f"rank{r}.log"
        with path.open("wb") as out:
            out.write(("\n".join(init) + "\n").encode())
            written = 0
            while written < per_rank:
                out.write(block)
                written += len(block)
        files.append(path)
    return files


def measure(argv: list[str], cwd: Path, keep: int = 100) -> tuple[float, float, bytes]:
    """(wall seconds, peak RSS MiB, last `keep` lines of stdout) of one process."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    tail: list[bytes] = []
    for line in process.stdout:  # what `| tail -100` does
        tail.append(line)
        if len(tail) > 2 * keep:
            del tail[:keep]
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    return elapsed, usage.ru_maxrss / 1024, b"".join(tail[-keep:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dense-mib", type=int, default=16)
    args = parser.parse_args()
    rg = shutil.which("rg") or str(Path(sys.executable).parent / "rg")
    if not Path(rg).exists():
        sys.exit('ripgrep not found: pip install -e ".[bench]"')
    triage = [sys.executable, "-m", "mcp_server.cli"]
    pattern = log_presets()["errors"].pattern
    with tempfile.TemporaryDirectory(dir=REPO / ".cache" if (REPO / ".cache").is_dir() else None) as tmp:
        folder = Path(tmp)
        files = generate(folder, int(args.gib * 2**30), args.ranks)
        size = sum(f.stat().st_size for f in files)
        print(f"input: {len(files)} files, {size / 2**30:.2f} GiB")
        for f in files:  # warm the page cache
            with f.open("rb") as handle:
                while handle.read(1 << 24):
                    pass
        commands = {
            "ripgrep": [rg, "-i", "-e", pattern, *[f.name for f in files]],
            # Like ours, with line numbers (rg skips counting lines when its output is a pipe).
            "ripgrep -n": [rg, "-n", "-i", "-e", pattern, *[f.name for f in files]],
            "grep_logs": [*triage, "grep-logs", "--json", "--root", str(folder), "--timeout", "600",
                          "--paths", ",".join(f.name for f in files), "--preset", "errors"],
            "diagnose_logs": [*triage, "diagnose-logs", "--json", "--root", str(folder), "--timeout", "600",
                              "--paths", "rank*.log"],
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for run in range(args.runs):
            for name, argv in commands.items():
                wall, rss, _ = measure(argv, folder)
                results[name].append((wall, rss))
                print(f"run {run + 1} {name:14s} {wall:6.2f} s  peak RSS {rss:6.1f} MiB")
        median = {name: statistics.median(w for w, _ in runs) for name, runs in results.items()}
        peak = {name: max(r for _, r in runs) for name, runs in results.items()}
        print()
        for name in commands:
            print(f"{name:14s} median {median[name]:6.2f} s ({size / 2**20 / median[name]:7.0f} MiB/s), "
                  f"peak RSS {peak[name]:6.1f} MiB")
        grep_ratio = median["grep_logs"] / median["ripgrep"]
        diag_ratio = median["diagnose_logs"] / median["ripgrep"]
        print(f"grep_logs / ripgrep     = {grep_ratio:.2f}x (target <= 2x) -> {'OK' if grep_ratio <= 2 else 'OVER'}")
        print(f"diagnose_logs / ripgrep = {diag_ratio:.2f}x (target <= 3x) -> {'OK' if diag_ratio <= 3 else 'OVER'}")
        print(f"grep_logs / ripgrep -n  = {median['grep_logs'] / median['ripgrep -n']:.2f}x (both number lines)")
        worst_rss = max(peak["grep_logs"], peak["diagnose_logs"])
        print(f"peak RSS of ours        = {worst_rss:.0f} MiB (target < 200) -> {'OK' if worst_rss < 200 else 'OVER'}")
        dense(folder, triage, args.dense_mib)


DENSE_SEED = REPO / "tests" / "data" / "logs" / "round11" / "dev" / "nccl_init_network__xh-liu-cc-fpse-6.log"


def dense(folder: Path, triage: list[str], mib: int) -> None:
    """diagnose_logs on one traceback repeated to `mib` MiB: read whole, then under a 10 s deadline."""
    seed = DENSE_SEED.read_bytes()
    path = folder / "dense.log"
    path.write_bytes(seed * (mib * 2**20 // len(seed) + 1))
    size = path.stat().st_size / 2**20
    argv = [*triage, "diagnose-logs", "--json", "--root", str(folder), "--paths", "dense.log", "--timeout"]
    wall, rss, _ = measure([*argv, "600"], folder)
    print(f"\ndense log ({size:.0f} MiB, one traceback repeated): diagnose_logs {wall:.2f} s "
          f"({size / wall:.1f} MiB/s), peak RSS {rss:.0f} MiB")
    wall, rss, out = measure([*argv, "10"], folder, keep=100_000)  # the whole JSON: its coverage says what was read
    cut = b"the call's time ran out" in out
    print(f"the same with --timeout 10: answered in {wall:.2f} s, read {'in part' if cut else 'whole'}, peak RSS "
          f"{rss:.0f} MiB -> {'OK' if wall <= 10 + 2 else 'LATE'} (the deadline, process start-up aside)")


if __name__ == "__main__":
    main()
