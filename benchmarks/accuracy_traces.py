"""summarize_trace against an evaluation set of real profiler traces from public repositories, one trace at a time.

The set: tests/data/traces/wild/cases_*.jsonl, one line per trace: where it comes from (repo, commit, path, licence,
sha256), what it shows, and the verdict a careful reader of its timeline gave (`primary`, `secondary`, `strict`,
the numbers measured and how the verdict was reached), written with the reader's own script, independently of
this tool. Small traces under licences that allow it are in tests/data/traces/wild/files/<id>.json.gz, stripped
to their events (no metadata block). The others are read from a local mirror of their repository: pass
`--mirrors DIR` (a folder of `owner+name/repo` bare git directories, as the project's fetch tool makes them) and
they are extracted into .cache/wild_traces/ once, checked against their sha256 (the uncopied nsys exports and
reports too; a report is exported by summarize_trace itself, with Debian's nsys from .cache when none is on PATH).

The Nsight Systems set: tests/data/nsys/cases.jsonl, one line per real export (sanitised copies in
tests/data/nsys/files), with a verdict per process (`per_process`: each process with GPU work is a rank); each
process is scored as one case.

Our verdict: the result's `bottleneck` (`gpu_busy` when the GPU is busy >= 85 % of the analysed steps and no cause
reaches 10 % of step time, else the largest cause). A verdict is right when it is the primary; `unclear` labels are
not scored. Printed: right / scored overall and for the strict labels, per format, per primary category, and every
miss (with `--misses`).
Target (issue 17): >= 90 % right, every strict one right.

Usage: .venv/bin/python benchmarks/accuracy_traces.py [--mirrors /work/.mirror] [--misses]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.core.context import ToolContext  # noqa: E402
from tools.core.errors import TriageError  # noqa: E402
from tools.traces.summary import SummarizeTraceInput, summarize_trace  # noqa: E402

WILD = REPO / "tests" / "data" / "traces" / "wild"
NSYS = REPO / "tests" / "data" / "nsys"
NSYS_SUFFIXES = (".sqlite", ".qdrep", ".nsys-rep")
# Reports (.qdrep, .nsys-rep) are exported by summarize_trace with the nsys on PATH: Debian's, as scripts/test.sh
# unpacks it, when none is.
DEBIAN_NSYS = REPO / ".cache" / "nsys" / "usr" / "lib" / "x86_64-linux-gnu" / "nsight-systems" / "target-linux-x64"
CACHE = REPO / ".cache" / "wild_traces"


@dataclass
class Case:
    id: str
    label: dict[str, Any]
    path: Path | None  # None: neither copied nor extractable here
    rank: int = 0  # which rank of the result the label is about (a process of an nsys export)
    format: str = "kineto"


def _extract(label: dict[str, Any], mirrors: Path) -> Path | None:
    """The trace from a mirror of its repository, checked against its sha256, cached under .cache."""
    source = str(label.get("member", label["path"]))
    suffix = next((s for s in NSYS_SUFFIXES if source.endswith(s)), None) or (
        ".json.gz" if label.get("gz") or source.endswith(".gz") else ".json")
    target = CACHE / f"{label['id']}{suffix}"
    if target.is_file():
        return target
    git_dir = mirrors / label["repo"].replace("/", "+") / "repo"
    if not git_dir.is_dir():
        return None
    shown = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{label['commit']}:{label['path']}"],
                           capture_output=True, check=False)
    if shown.returncode != 0 or hashlib.sha256(shown.stdout).hexdigest() != label["sha256"]:
        return None
    data = shown.stdout
    if label.get("member"):  # a trace inside a tar archive
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            member = archive.extractfile(label["member"])
            if member is None:
                return None
            data = member.read()
    CACHE.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def load_cases(mirrors: Path | None) -> list[Case]:
    cases = []
    for manifest in sorted(WILD.glob("cases_*.jsonl")):
        for line in manifest.read_text().splitlines():
            if not line.strip():
                continue
            label = json.loads(line)
            copy = WILD / "files" / f"{label['id']}.json.gz"
            path = copy if copy.is_file() else (_extract(label, mirrors) if mirrors else None)
            cases.append(Case(label["id"], label, path))
    for line in (NSYS / "cases.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        export = json.loads(line)
        copy = NSYS / "files" / f"{export['id']}.sqlite"
        path = copy if copy.is_file() else (_extract(export, mirrors) if mirrors else None)
        for process in export.get("per_process", []):
            cases.append(Case(f"{export['id']}#{process['pid_index']}", process, path,
                              rank=process["pid_index"], format="nsys"))
    return cases


async def run(case: Case) -> tuple[str, str]:
    assert case.path is not None
    context = ToolContext(roots=(case.path.parent.resolve(),), timeout_s=300)
    try:
        result = await summarize_trace(SummarizeTraceInput(path=case.path.name), context)
    except TriageError as exc:  # e.g. a capture with no GPU work: no verdict, said why
        return "refused", str(exc)[:120]
    top = ", ".join(f"{c.kind} {c.share_pct:.1f}" for c in result.causes[:3])
    if case.format == "nsys":  # the verdict of the labelled process, not of the job
        rank = result.ranks[case.rank]
        return rank.bottleneck, f"busy {rank.gpu_busy_pct}%"
    busy = result.ranks[0].gpu_busy_pct if result.ranks else None
    return result.bottleneck, f"busy {busy}%; {top}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirrors", type=Path, help="folder of owner+name/repo git mirrors for the uncopied traces")
    parser.add_argument("--misses", action="store_true", help="list every trace whose verdict differs")
    args = parser.parse_args()
    cases = load_cases(args.mirrors)
    if shutil.which("nsys") is None and (DEBIAN_NSYS / "nsys").is_file():
        os.environ["PATH"] = f"{DEBIAN_NSYS}{os.pathsep}{os.environ.get('PATH', '')}"
    missing = [c.id for c in cases if c.path is None]
    by_primary: dict[str, list[bool]] = defaultdict(list)
    by_format: dict[str, list[bool]] = defaultdict(list)
    strict: list[bool] = []
    rows = []
    for case in cases:
        if case.path is None:
            continue
        ours, detail = anyio.run(run, case)
        primary = case.label["primary"]
        if primary == "unclear":
            rows.append((case.id, primary, ours, "not scored", detail))
            continue
        right = ours == primary
        by_primary[primary].append(right)
        by_format[case.format].append(right)
        if case.label.get("strict"):
            strict.append(right)
        rows.append((case.id, primary, ours, "right" if right else
                     ("secondary" if ours in case.label.get("secondary", []) else "MISS"), detail))
    scored = [r for results in by_primary.values() for r in results]
    print(f"{'primary':22} {'n':>3} {'right':>6}")
    for primary in sorted(by_primary):
        results = by_primary[primary]
        print(f"{primary:22} {len(results):3} {sum(results):6}")
    for name in sorted(by_format):
        print(f"format {name:15} {len(by_format[name]):3} {sum(by_format[name]):6}")
    print()
    print(f"cases {len(cases)}: {len(cases) - len(missing)} read, {len(missing)} not here"
          + (f" (pass --mirrors; the nsys ones were not copied, tests/data/nsys/PROVENANCE.md says why): "
             f"{', '.join(missing)}" if missing else ""))
    if scored:
        print(f"right {sum(scored)}/{len(scored)} = {sum(scored) / len(scored):.3f} (target >= 0.90)")
    if strict:
        print(f"strict right {sum(strict)}/{len(strict)} (target all)")
    for case_id, primary, ours, outcome, detail in rows:
        if args.misses or outcome == "MISS":
            print(f"  {outcome:10} {case_id:40} label {primary:20} ours {ours:20} {detail}")


if __name__ == "__main__":
    main()
