"""analyze_kernels on Nsight Compute reports nobody in this project had used: issue 35's own fresh check.

The set: tests/data/kernels/fresh/manifest.jsonl, one line per public report (repo, commit, path, blob, sha256) from
repositories in neither wild/manifest.jsonl nor the project's list of used repositories, at most two versions per
repository (tests/data/kernels/fresh/PROVENANCE.md). The reports are not committed (most of these repositories carry
no licence): they are read from a folder (`--reports DIR`, default /tmp/ncu_fresh/files) and refused if their SHA-256
differs from the manifest's.

Labels (`--make-labels`, once, before the tool is run on any of them): accuracy_kernels.py's own code path
(label_report: ncu's raw page, launches grouped by name and launch shape, SM and Memory throughput averaged, NVIDIA's
SOLBottleneck partition written independently of the tool), frozen in fresh/labels_frozen.jsonl with its SHA-256 in
fresh/labels_frozen.json; scoring refuses labels that changed since. Pasted ncu text (fresh/pasted_text.jsonl, read
from a folder by SHA-256 like the reports) is labelled from the figures it prints by the same rule.

Scoring: the command-line tool, as a user runs it (`gpu-triage analyze-kernels FILE --json --root DIR --top 200`), on
every report and on the details CSV, raw CSV and text output ncu makes of it. A kernel is right when the verdict
equals the label (or its neighbour, for a borderline label); a label of unknown (no SOL figures) is right when the
tool answers unknown. Each answer (stdout and stderr) is searched for every host name and IP address of the report's
session page (`ncu --import F --page session`); a hit is counted and shown by report and format, never by value.

Usage: .venv/bin/python benchmarks/accuracy_kernels_fresh.py [--mirrors /work/.mirror] [--make-labels] [--misses]
[--reports DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy_kernels import NEIGHBOURS, QUIET, _shape_ok, exports, label_report, ncu, nvidia_rule  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FRESH = REPO / "tests" / "data" / "kernels" / "fresh"
CLI = REPO / ".venv" / "bin" / "gpu-triage"
LABELS = FRESH / "labels_frozen.jsonl"
SEAL = FRESH / "labels_frozen.json"
# Session-page lines whose values name the profiling machine (ncu 2019.5 to 2024.1 spell them so).
HOST_FIELDS = ("Host Name", "Target Name", "Target IP Addresses", "Hostname", "IP Address")
# A file with nothing to judge (no kernel, or no launch with SOL figures): its one right answer is unknown.
WHOLE_FILE: dict[str, Any] = {"name": "(whole file)", "label": "unknown", "borderline": False, "whole_file": True}
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")


def manifest(name: str) -> list[dict[str, Any]]:
    path = FRESH / name
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def checked(entry: dict[str, Any], reports: Path) -> Path | None:
    path = reports / str(entry["file"])
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
        return None
    return path


def materialise(mirrors: Path, reports: Path) -> None:
    """Write each manifest file missing from `reports` out of its repository's mirror, by blob, checked by SHA-256."""
    reports.mkdir(parents=True, exist_ok=True)
    for entry in manifest("manifest.jsonl") + manifest("pasted_text.jsonl"):
        target = reports / str(entry["file"])
        if checked(entry, reports) is not None:
            continue
        git_dir = mirrors / str(entry["repo"]).replace("/", "+") / "repo"
        shown = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "-p", str(entry["blob"])],
                               capture_output=True, check=False)
        if shown.returncode == 0 and hashlib.sha256(shown.stdout).hexdigest() == entry["sha256"]:
            target.write_bytes(shown.stdout)


def make_labels(reports: Path) -> None:
    if LABELS.exists() or SEAL.exists():
        sys.exit(f"{LABELS} exists: the labels are frozen")
    cases = []
    for entry in manifest("manifest.jsonl"):
        path = checked(entry, reports)
        kernels = label_report(path) if path else []
        # ncu itself cannot import it (a report newer than Debian's ncu): no label, counted apart from the others.
        readable = path is not None and ncu_reads(path)
        cases.append({**entry, "kernels": kernels or ([WHOLE_FILE] if readable else []), "ncu_reads": readable})
    for case in manifest("pasted_text.jsonl"):
        for kernel in case["kernels"]:
            if kernel["launches"]:
                sms, mems = zip(*kernel["launches"], strict=True)
                kernel["label"], kernel["borderline"] = nvidia_rule(sum(sms) / len(sms), sum(mems) / len(mems))
            else:
                kernel["label"], kernel["borderline"] = "unknown", False
        cases.append({**case, "kernels": case["kernels"] or [WHOLE_FILE], "pasted": True})
    LABELS.write_text("".join(json.dumps(c) + "\n" for c in cases))
    SEAL.write_text(json.dumps({
        "labels": LABELS.name, "sha256": hashlib.sha256(LABELS.read_bytes()).hexdigest(),
        "made_by": "benchmarks/accuracy_kernels_fresh.py --make-labels (accuracy_kernels.label_report, nvidia_rule)",
        "why": "labels made from the reports' own numbers before the tool was run on any of them",
    }, indent=1) + "\n")
    labelled = sum(len(c["kernels"]) for c in cases)
    print(f"labelled {len(cases)} files, {labelled} kernels; reports ncu cannot import: "
          f"{sum(1 for c in cases if not c.get('ncu_reads', True))}")


def ncu_reads(path: Path) -> bool:
    out = subprocess.run([ncu(), "--import", str(path), "--page", "session"], capture_output=True, env=QUIET,
                         check=False, timeout=300)
    return out.returncode == 0


def session_secrets(path: Path) -> set[str]:
    """Host names and IP addresses of the report's session page (values only; never printed)."""
    out = subprocess.run([ncu(), "--import", str(path), "--page", "session"], capture_output=True, text=True,
                         env=QUIET, check=False, timeout=300)
    found: set[str] = set()
    lines = out.stdout.splitlines()
    for index, line in enumerate(lines):
        for field in HOST_FIELDS:
            if line.startswith(field + " "):
                value = line[len(field):].strip()
                # A long value wraps onto the next line, indented under the value column.
                follow = lines[index + 1] if index + 1 < len(lines) else ""
                if follow.startswith(" " * 10) and follow.strip():
                    value += follow.strip()
                for part in value.split(","):
                    part = part.strip().split("%")[0]
                    if len(part) >= 3 and part.lower() not in {"n/a", "localhost", "127.0.0.1", "::1"}:
                        found.add(part)
    return found


def run_cli(file: Path, roots: list[Path]) -> tuple[dict[str, Any] | None, str]:
    """The tool as a user runs it; returns its JSON (None when it printed none) and everything it printed."""
    command = [str(CLI), "analyze-kernels", file.name, "--json", "--top", "200", "--max-bytes", "262144",
               "--timeout", "300"]
    for root in roots:
        command += ["--root", str(root)]
    out = subprocess.run(command, capture_output=True, text=True, cwd=file.parent, check=False, timeout=400)
    try:
        answer = json.loads(out.stdout)
    except json.JSONDecodeError:
        answer = None
    return (answer if isinstance(answer, dict) else None), out.stdout + out.stderr


def leaks(printed: str, secrets: set[str]) -> int:
    lowered = printed.lower()
    return sum(1 for secret in secrets if secret.lower() in lowered)


def judge(label: dict[str, Any], verdict: str) -> bool:
    if label["label"] == "unknown":
        return verdict == "unknown"
    return verdict == label["label"] or (label["borderline"] and verdict in NEIGHBOURS.get(label["label"], set()))


def score(reports: Path, scratch: Path, misses: bool) -> None:
    seal = json.loads(SEAL.read_text())
    if hashlib.sha256(LABELS.read_bytes()).hexdigest() != seal["sha256"]:
        sys.exit(f"{LABELS} changed since it was frozen")
    cases = [json.loads(line) for line in LABELS.read_text().splitlines() if line.strip()]
    by_format: dict[str, list[bool]] = defaultdict(list)
    by_repo: dict[str, list[bool]] = defaultdict(list)
    unread: list[str] = []
    unknowns: list[str] = []
    leaked: list[str] = []
    ipv4_seen: list[str] = []
    miss_lines: list[str] = []
    not_ncu: list[str] = []
    confusion: dict[str, int] = defaultdict(int)
    secrets_per_report: list[int] = []
    home_paths: list[str] = []
    for case in cases:
        path = checked(case, reports)
        if path is None:
            unread.append(f"{case['file']} (missing or changed)")
            continue
        pasted = bool(case.get("pasted"))
        # ncu_reads is False also where only the session page aborts (ncu 2024.1 on some 2024 reports): no label is
        # the mark of a report ncu cannot import.
        if not pasted and not case["kernels"]:
            not_ncu.append(case["file"])
        secrets = set() if pasted else session_secrets(path)
        files = {"pasted_text": path} if pasted else exports(path, scratch / "exports")
        if not pasted:
            secrets_per_report.append(len(secrets))
        for fmt, file in files.items():
            answer, printed = run_cli(file, [reports.resolve(), (scratch / "exports").resolve()])
            if hits := leaks(printed, secrets):
                leaked.append(f"{case['file']} {fmt}: {hits} of {len(secrets)} session values")
            # A user name rides in the report's process path (/home/NAME/...): the session page's other secret.
            if re.search(r"/home/[^/<\s]+/|/Users/[^/<\s]+/|\\Users\\", printed):
                home_paths.append(f"{case['file']} {fmt}")
            if not pasted and IPV4.search(printed):
                ipv4_seen.append(f"{case['file']} {fmt}")
            if answer is None:
                unread.append(f"{file.name}: {printed.strip()[:160]}")
                continue
            kernels = answer.get("kernels") or []
            if not kernels:
                unknowns.append(f"{file.name}: severity {answer.get('severity')}; labels "
                                f"{sorted({k['label'] for k in case['kernels']}) or 'none'}")
            for label in case["kernels"]:
                if label.get("whole_file"):
                    judged = not kernels and answer.get("severity") == "unknown"
                    found = ["unknown"] if judged else [f"{answer.get('severity')}, {len(kernels)} kernel(s)"]
                elif pasted:
                    runs = max(k["run"] for k in case["kernels"])
                    source = f"{file.name} (run {label['run']} of {runs})" if runs > 1 else file.name
                    found = [k["verdict"] for k in kernels if k["name"] == label["name"] and k["source"] == source
                             and _shape_ok(label, k.get("grid"), k.get("block"))]
                else:
                    found = [k["verdict"] for k in kernels
                             if k["name"] == label["name"] and _shape_ok(label, k.get("grid"), k.get("block"))]
                verdict = found[0] if found else ("unknown" if not kernels else "missing")
                right = judge(label, verdict)
                confusion[f"{label['label']}{'~' if label.get('borderline') else ''} -> {verdict}"] += 1
                by_format[fmt].append(right)
                by_repo[case["repo"]].append(right)
                if not right:
                    miss_lines.append(
                        f"  MISS {fmt:11} {case['file'][:44]:44} {label['name'][:48]:48} label {label['label']}"
                        f"{' (borderline)' if label.get('borderline') else ''} ours {verdict} "
                        f"(SM {label.get('sm_pct')}, MEM {label.get('memory_pct')}, "
                        f"grid {label.get('grid')}, block {label.get('block')})")
    every = [r for results in by_format.values() for r in results]
    print(f"fresh: {len(cases)} files from {len({c['repo'] for c in cases})} repositories")
    for fmt in sorted(by_format):
        results = by_format[fmt]
        print(f"  {fmt:12} {sum(results):4}/{len(results):<4} = {sum(results) / max(1, len(results)):.3f}")
    if every:
        print(f"  all formats  {sum(every):4}/{len(every):<4} = {sum(every) / len(every):.3f}  (issue 35: >= 0.9)")
    print("  per repository:" + "".join(f"\n    {repo:60} {sum(r):4}/{len(r):<4}" for repo, r in sorted(
        by_repo.items(), key=lambda item: item[0].lower())))
    print(f"  reports Debian's ncu cannot import (no label): {len(not_ncu)}" + "".join(f"\n    {u}" for u in not_ncu))
    print(f"  not read: {len(unread)}" + "".join(f"\n    {u}" for u in unread))
    print(f"  answers with no kernel: {len(unknowns)}" + "".join(f"\n    {u}" for u in unknowns))
    print(f"  host/IP leaks: {len(leaked)}" + "".join(f"\n    {u}" for u in leaked))
    print(f"  session values searched per report: min {min(secrets_per_report, default=0)}, "
          f"max {max(secrets_per_report, default=0)}, reports with none: {secrets_per_report.count(0)}")
    print(f"  answers holding a home path: {len(home_paths)}" + "".join(f"\n    {u}" for u in home_paths))
    print("  label -> verdict:" + "".join(f"\n    {k:40} {v}" for k, v in sorted(confusion.items())))
    print(f"  answers holding an IPv4-like string: {len(ipv4_seen)}" + "".join(f"\n    {u}" for u in ipv4_seen))
    if misses:
        print(f"  misses: {len(miss_lines)}" + "".join(f"\n{m}" for m in miss_lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=Path, default=Path("/tmp/ncu_fresh/files"),
                        help="folder holding the manifest's reports and pasted files by their 'file' names")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/ncu_fresh"), help="where the exports are made")
    parser.add_argument("--make-labels", action="store_true", help="label the manifest (once, before scoring)")
    parser.add_argument("--misses", action="store_true", help="list every miss with its numbers")
    parser.add_argument("--mirrors", type=Path, help="owner+name/repo git mirrors (the fetch tool's): the manifest's "
                        "files are taken from them by blob into --reports first, so the check runs without /tmp")
    args = parser.parse_args()
    if args.mirrors:
        materialise(args.mirrors, args.reports)
    if args.make_labels:
        make_labels(args.reports)
        return
    score(args.reports, args.scratch, args.misses)


if __name__ == "__main__":
    main()
