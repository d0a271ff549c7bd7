"""analyze_kernels against labels made from the numbers of real Nsight Compute reports by NVIDIA's own rule.

The set: tests/data/kernels/wild/manifest.jsonl, one line per public report (repo, commit, path, sha256), found in
public repositories (find_files on *.ncu-rep) and read here from a local mirror of each repository (`--mirrors DIR`,
`owner+name/repo` bare git directories, as the project's fetch tool makes them); the reports are not copied (most of
these repositories carry no licence; tests/data/kernels/PROVENANCE.md).

Labels (`--make-labels`, run once, before any tuning): for each report, `ncu --import F --csv --page raw
--print-units base` (Debian's ncu from .cache/ncu, or the one on PATH), launches grouped by kernel name and launch
shape (failed launches, grid 0, left out), Compute (SM) and Memory Throughput averaged, and NVIDIA's SOLBottleneck
rule applied by this script's own code (not the tool's): both < 60 latency_bound, else |SM - MEM| < 10 balanced,
else the larger; `borderline` within 3 of 60 or within 2 of the 10-point gap (either neighbour then counts as right);
no SOL figures: unknown. The reports are split by repository into development and held-out with
scripts/split_by_repo.py's rule (salt of the date, 35 % held out) before anything is scored; the held-out labels are
frozen with their SHA-256 in split_DATE.json and refused if changed.

Scoring: every report is read in every format the tool takes: the report itself (through ncu), and the details CSV,
the raw CSV and the text output that ncu makes of it (into .cache/kernel_exports). A kernel is right when the tool's
verdict equals the label (or its neighbour, for a borderline label). Printed: right / kernels per split and format,
files not read, and every miss of the development split (`--misses`; held-out misses are counted, never shown).
Pasted ncu text (wild/dev/pasted_text.jsonl: 2020-era profile-time output from a course's solution, no licence, read
from its mirror by blob like the reports) is scored per kernel and profiling run, against labels made from the
figures it prints by the same rule; its repository falls on the development side of the same split rule.
Target (issue 35): >= 0.95 right on the held-out repositories, every format read.

Usage: .venv/bin/python benchmarks/accuracy_kernels.py --mirrors /work/.mirror [--make-labels] [--misses]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.core.context import ToolContext  # noqa: E402
from tools.core.errors import TriageError  # noqa: E402
from tools.kernels import AnalyzeKernelsInput, analyze_kernels  # noqa: E402
from tools.traces import SummarizeTraceInput, summarize_trace  # noqa: E402

WILD = REPO / "tests" / "data" / "kernels" / "wild"
DATE = "2026-12-02"
CACHE = REPO / ".cache" / "kernel_reports"
EXPORTS = REPO / ".cache" / "kernel_exports"
DEBIAN_NCU = REPO / ".cache" / "ncu" / "usr" / "lib" / "x86_64-linux-gnu" / "nsight-compute" / "target" / \
    "linux-desktop-glibc_2_11_3-x64" / "ncu"
QUIET = {**os.environ, "NV_COMPUTE_PROFILER_DISABLE_STOCK_FILE_DEPLOYMENT": "1"}
NEIGHBOURS = {"latency_bound": {"balanced", "compute_bound", "memory_bound"},
              "balanced": {"latency_bound", "compute_bound", "memory_bound"},
              "compute_bound": {"balanced", "latency_bound"}, "memory_bound": {"balanced", "latency_bound"}}
SM_NAMES = ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__sol_pct")
MEM_NAMES = ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "gpu__compute_memory_sol_pct")


def ncu() -> str:
    found = shutil.which("ncu") or (str(DEBIAN_NCU) if DEBIAN_NCU.is_file() else None)
    if found is None:
        sys.exit("no ncu: run scripts/test.sh (it unpacks Debian's nsight-compute-target into .cache/ncu)")
    return found


def report_path(entry: dict[str, Any], mirrors: Path | None) -> Path | None:
    target = CACHE / str(entry["file"])
    if target.is_file():
        return target
    if mirrors is None:
        return None
    git_dir = mirrors / str(entry["repo"]).replace("/", "+") / "repo"
    if (git_dir / ".git").is_dir():
        git_dir = git_dir / ".git"
    shown = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "-p", entry["blob"]], capture_output=True,
                           check=False)
    if shown.returncode != 0 or hashlib.sha256(shown.stdout).hexdigest() != entry["sha256"]:
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    target.write_bytes(shown.stdout)
    return target


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return None if value != value else value


def nvidia_rule(sm: float | None, mem: float | None) -> tuple[str, bool]:
    """SOLBottleneck's partition (shared/notes/ncu_format.md, section 6), written here independently of the tool."""
    if sm is None or mem is None:
        return "unknown", False
    top, gap = max(sm, mem), abs(sm - mem)
    borderline = abs(top - 60) < 3 or (top >= 60 and abs(gap - 10) < 2)
    if top < 60:
        return "latency_bound", borderline
    if gap < 10:
        return "balanced", borderline
    return ("compute_bound" if sm > mem else "memory_bound"), borderline


def label_report(path: Path) -> list[dict[str, Any]]:
    out = subprocess.run([ncu(), "--import", str(path), "--csv", "--page", "raw", "--print-units", "base"],
                         capture_output=True, text=True, env=QUIET, check=False, timeout=300)
    rows = list(csv.reader(line for line in out.stdout.splitlines() if not line.startswith("==")))
    if out.returncode != 0 or len(rows) < 2:
        return []
    header = rows[0]
    kernels: dict[tuple[str, str, str], list[tuple[float | None, float | None]]] = {}
    for cells in rows[2:]:
        row = dict(zip(header, cells, strict=False))
        if row.get("Grid Size", "").replace(" ", "") == "(0,0,0)":
            continue
        sm = next((v for n in SM_NAMES if (v := _number(row.get(n, ""))) is not None), None)
        mem = next((v for n in MEM_NAMES if (v := _number(row.get(n, ""))) is not None), None)
        kernels.setdefault((row["Kernel Name"], row.get("Grid Size", ""), row.get("Block Size", "")), []).append(
            (sm, mem))
    labels = []
    for (name, grid, block), values in kernels.items():
        sms = [s for s, _ in values if s is not None]
        mems = [m for _, m in values if m is not None]
        sm = sum(sms) / len(sms) if sms else None
        mem = sum(mems) / len(mems) if mems else None
        verdict, borderline = nvidia_rule(sm, mem)
        labels.append({"name": name, "grid": grid, "block": block, "sm_pct": sm, "memory_pct": mem,
                       "label": verdict, "borderline": borderline})
    return labels


def make_labels(mirrors: Path | None) -> None:
    split_file = WILD / f"split_{DATE}.json"
    if split_file.exists():
        sys.exit(f"{split_file} exists: the labels are frozen")
    spec = importlib.util.spec_from_file_location("split_by_repo", REPO / "scripts" / "split_by_repo.py")
    assert spec is not None and spec.loader is not None
    split_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(split_module)
    salt = f"gpu-triage held-out {DATE} "
    sides: dict[str, list[dict[str, Any]]] = {"dev": [], "heldout": []}
    for line in (WILD / "manifest.jsonl").read_text().splitlines():
        entry = json.loads(line)
        path = report_path(entry, mirrors)
        if path is None:
            continue
        side = "heldout" if split_module.held_out(entry["repo"], salt, 35) else "dev"
        sides[side].append({**entry, "kernels": label_report(path)})
    for side in sides:
        (WILD / side).mkdir(parents=True, exist_ok=True)
    (WILD / "dev" / "cases.jsonl").write_text("".join(json.dumps(e) + "\n" for e in sides["dev"]))
    frozen = WILD / "heldout" / f"labels_frozen_{DATE}.jsonl"
    frozen.write_text("".join(json.dumps(e) + "\n" for e in sides["heldout"]))
    split_file.write_text(json.dumps({
        "date": DATE, "rule": f"held out when int(sha256('{salt}' + repo.lower()), 16) % 100 < 35",
        "why": "split by source repository before anything was scored; the held-out labels are frozen",
        "heldout_labels": f"heldout/{frozen.name}",
        "heldout_labels_sha256": hashlib.sha256(frozen.read_bytes()).hexdigest(),
        "heldout_repositories": sorted({e["repo"] for e in sides["heldout"]}),
        "development_repositories": sorted({e["repo"] for e in sides["dev"]}),
    }, indent=1) + "\n")
    print(f"labelled {len(sides['dev'])} development and {len(sides['heldout'])} held-out reports")


def exports(path: Path, folder: Path = EXPORTS) -> dict[str, Path]:
    """The report in every format the tool reads, made by ncu into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {"report": path}
    for fmt, args in (("details_csv", ["--csv", "--print-units", "base"]),
                      ("raw_csv", ["--csv", "--page", "raw", "--print-units", "base"]), ("text", [])):
        target = folder / f"{path.stem}.{fmt}.{'txt' if fmt == 'text' else 'csv'}"
        if not target.is_file():
            out = subprocess.run([ncu(), "--import", str(path), *args], capture_output=True, env=QUIET, check=False,
                                 timeout=300)
            if out.returncode != 0:
                continue
            target.write_bytes(out.stdout)
        made[fmt] = target
    return made


async def verdicts(path: Path) -> dict[tuple[str, str | None, str | None], str] | str:
    try:
        result = await analyze_kernels(AnalyzeKernelsInput(files=[path.name]),
                                       ToolContext(roots=(path.parent.resolve(),), timeout_s=300))
    except TriageError as exc:
        return str(exc)[:120]
    found: dict[tuple[str, str | None, str | None], str] = {(k.name, k.grid, k.block): k.verdict
                                                            for k in result.kernels}
    # A file with nothing to judge (a --metrics report printed as text lists no figure): the whole answer is unknown.
    return found if found or result.severity.value != "unknown" else {}


def _shape_ok(label: dict[str, Any], grid: str | None, block: str | None) -> bool:
    # The text and details exports of older reports name the grid by its block count; match on the name then.
    return grid is None or not grid.startswith("(") or (grid, block) == (label["grid"], label["block"])


def score(side: str, cases: list[dict[str, Any]], mirrors: Path | None, misses: bool) -> None:
    by_format: dict[str, list[bool]] = defaultdict(list)
    unread: list[str] = []
    for case in cases:
        path = report_path(case, mirrors)
        if path is None:
            unread.append(f"{case['file']} (no mirror)")
            continue
        for fmt, file in exports(path).items():
            ours = anyio.run(verdicts, file)
            if isinstance(ours, str):
                unread.append(f"{file.name}: {ours}")
                continue
            for label in case["kernels"]:
                found = [v for (name, grid, block), v in ours.items()
                         if name == label["name"] and _shape_ok(label, grid, block)]
                verdict = found[0] if found else ("unknown" if not ours else "missing")
                right = verdict == label["label"] or (label["borderline"] and verdict in NEIGHBOURS.get(
                    label["label"], set()))
                by_format[fmt].append(right)
                if misses and not right and side == "dev":
                    print(f"  MISS {fmt:11} {case['file'][:40]:40} {label['name'][:40]:40} label {label['label']} "
                          f"ours {verdict} (SM {label['sm_pct']}, MEM {label['memory_pct']})")
    every = [r for results in by_format.values() for r in results]
    print(f"{side}: {len(cases)} reports")
    for fmt in sorted(by_format):
        results = by_format[fmt]
        print(f"  {fmt:12} {sum(results):4}/{len(results):<4} = {sum(results) / max(1, len(results)):.3f}")
    if every:
        print(f"  all formats  {sum(every):4}/{len(every):<4} = {sum(every) / len(every):.3f}"
              + ("  (target >= 0.95)" if side == "heldout" else ""))
    print(f"  not read: {len(unread)}" + "".join(f"\n    {u}" for u in unread[:20]))


def score_pasted(side: str, cases: list[dict[str, Any]], mirrors: Path | None, misses: bool) -> None:
    """Pasted ncu text (READMEs, course solutions) read from a mirror: one result per kernel and profiling run, its
    label made here from the figures the text prints (transcribed into the case; the launches of one run averaged
    with equal weights, as ncu's own --print-summary does) by NVIDIA's rule."""
    results: list[bool] = []
    unread: list[str] = []
    for case in cases:
        path = report_path(case, mirrors)
        if path is None:
            unread.append(f"{case['file']} (no mirror)")
            continue
        try:
            result = anyio.run(analyze_kernels, AnalyzeKernelsInput(files=[path.name]),
                               ToolContext(roots=(path.parent.resolve(),), timeout_s=300))
        except TriageError as exc:
            unread.append(f"{case['file']}: {str(exc)[:120]}")
            continue
        runs = max(k["run"] for k in case["kernels"])
        for label in case["kernels"]:
            sms, mems = zip(*label["launches"], strict=True)
            expected, borderline = nvidia_rule(sum(sms) / len(sms), sum(mems) / len(mems))
            source = f"{path.name} (run {label['run']} of {runs})" if runs > 1 else path.name
            found = [k.verdict for k in result.kernels if k.name == label["name"] and k.source == source]
            verdict = found[0] if found else "missing"
            right = verdict == expected or (borderline and verdict in NEIGHBOURS.get(expected, set()))
            results.append(right)
            if misses and not right and side == "dev":
                print(f"  MISS pasted {case['file'][:40]:40} {label['name'][:30]:30} run {label['run']} label "
                      f"{expected} ours {verdict}")
    print(f"{side} pasted text: {len(cases)} file(s)")
    if results:
        print(f"  text (pasted) {sum(results):4}/{len(results):<4} = {sum(results) / len(results):.3f}")
    print(f"  not read: {len(unread)}" + "".join(f"\n    {u}" for u in unread[:20]))


def check_trace_join(mirrors: Path | None) -> None:
    """The join with a trace on the one real pair that shares a kernel: a development report of PyTorch kernels
    (Lashi0812 torchLinear.ncu-rep, from its mirror) and the committed nvFuser export, both of which launch PyTorch's
    distribution_elementwise_grid_stride_kernel (different jobs: the join is by function name). Its share must be the
    one summarize_trace gives that kernel; the report's GEMM is in no trace; the trace's other kernels are listed."""
    entry = next((json.loads(line) for line in (WILD / "manifest.jsonl").read_text().splitlines()
                  if "torchLinear" in line), None)
    path = report_path(entry, mirrors) if entry else None
    trace = REPO / "tests" / "data" / "nsys" / "files" / "fuser-register-stealing-report1.sqlite"
    if path is None:
        print("trace join: torchLinear.ncu-rep not found (no mirror)")
        return
    shutil.copyfile(trace, path.parent / trace.name)

    async def both() -> tuple[Any, Any]:
        ctx = ToolContext(roots=(path.parent.resolve(),), timeout_s=300)
        joined = await analyze_kernels(AnalyzeKernelsInput(files=[path.name], trace=trace.name), ctx)
        summary = await summarize_trace(SummarizeTraceInput(path=trace.name), ctx)
        return joined, summary

    joined, summary = anyio.run(both)
    shared = [k for k in joined.kernels if "distribution_elementwise_grid_stride_kernel" in k.name]
    expected = next(k.share_pct for k in summary.top_kernels if "distribution_elementwise_grid_stride" in k.name)
    checks = {
        "shared kernel joined": bool(shared) and shared[0].trace_share_pct is not None,
        f"its share = summarize_trace's {expected}": bool(shared) and shared[0].trace_share_pct == expected,
        "the GEMM is in no trace": all(k.trace_share_pct is None for k in joined.kernels if "sgemm" in k.name),
        "trace kernels listed unprofiled": len(joined.unprofiled) >= 3 and not any(
            "distribution_elementwise" in u.name for u in joined.unprofiled),
    }
    print(f"trace join (real pair, different jobs): {sum(checks.values())}/{len(checks)} checks"
          + "".join(f"\n  {'ok  ' if ok else 'FAIL'} {what}" for what, ok in checks.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirrors", type=Path, help="folder of owner+name/repo git mirrors for the reports")
    parser.add_argument("--make-labels", action="store_true", help="label and split the manifest (once)")
    parser.add_argument("--misses", action="store_true", help="list the development split's misses")
    args = parser.parse_args()
    if args.make_labels:
        make_labels(args.mirrors)
        return
    split = json.loads((WILD / f"split_{DATE}.json").read_text())
    frozen = WILD / split["heldout_labels"]
    if hashlib.sha256(frozen.read_bytes()).hexdigest() != split["heldout_labels_sha256"]:
        sys.exit(f"{frozen} changed since the split: the held-out labels are frozen")
    dev = [json.loads(line) for line in (WILD / "dev" / "cases.jsonl").read_text().splitlines() if line.strip()]
    held = [json.loads(line) for line in frozen.read_text().splitlines() if line.strip()]
    score("dev", dev, args.mirrors, args.misses)
    pasted = WILD / "dev" / "pasted_text.jsonl"
    if pasted.is_file():
        score_pasted("dev", [json.loads(line) for line in pasted.read_text().splitlines() if line.strip()],
                     args.mirrors, args.misses)
    score("heldout", held, args.mirrors, False)
    check_trace_join(args.mirrors)


if __name__ == "__main__":
    main()
