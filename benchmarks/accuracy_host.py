"""sample_host and profile_cpu against real saved outputs from public sources, one file at a time.

sample_host: tests/data/host/cases.jsonl (real iostat -x and vmstat outputs; dmon/pmon are listed but not read yet),
each with the verdict its reader gave (io_bound, cpu_bound, memory_pressure, none). profile_cpu: the py-spy record
files of tests/data/host/pyspy/cases.jsonl when present (raw or speedscope), scored on their reader's verdict.
Printed: right / scored per input kind and per verdict, and every miss with --misses.

Usage: .venv/bin/python benchmarks/accuracy_host.py [--misses]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.core.context import ToolContext  # noqa: E402
from tools.core.errors import TriageError  # noqa: E402
from tools.host import ProfileCpuInput, SampleHostInput, profile_cpu, sample_host  # noqa: E402

HOST = REPO / "tests" / "data" / "host"
PYSPY = HOST / "pyspy"


def verdict_of(folder: Path, label: dict[str, Any]) -> str:
    context = ToolContext(roots=(folder.resolve(),), timeout_s=60)
    try:
        if label["kind"] == "pyspy":
            return anyio.run(profile_cpu, ProfileCpuInput(from_files=[label["file"]]), context).verdict
        return anyio.run(sample_host, SampleHostInput(from_files=[label["file"]]), context).verdict
    except TriageError as exc:
        return f"refused ({exc})"[:80]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--misses", action="store_true")
    args = parser.parse_args()
    cases: list[tuple[Path, dict[str, Any]]] = []
    for label in (json.loads(line) for line in (HOST / "cases.jsonl").read_text().splitlines() if line.strip()):
        if label["kind"] in ("iostat", "iostat_json", "vmstat"):
            cases.append((HOST, label))
    if (PYSPY / "cases.jsonl").is_file():
        for label in (json.loads(line) for line in (PYSPY / "cases.jsonl").read_text().splitlines() if line.strip()):
            if label.get("verdict") not in (None, "unclear"):
                cases.append((PYSPY, {**label, "kind": "pyspy"}))
    by_kind: dict[str, list[bool]] = defaultdict(list)
    by_verdict: dict[str, list[bool]] = defaultdict(list)
    misses = []
    for folder, label in cases:
        ours = verdict_of(folder, label)
        right = ours == label["verdict"]
        by_kind[label["kind"]].append(right)
        by_verdict[label["verdict"]].append(right)
        if not right:
            misses.append(f"  MISS {label['file']}: label {label['verdict']}, ours {ours}")
    for title, table in (("input kind", by_kind), ("verdict", by_verdict)):
        print(f"{title:18} {'n':>4} {'right':>6}")
        for key in sorted(table):
            print(f"{key:18} {len(table[key]):4} {sum(table[key]):6}")
        print()
    total = [r for results in by_kind.values() for r in results]
    print(f"verdicts right {sum(total)}/{len(total)} = {sum(total) / max(len(total), 1):.3f}")
    if args.misses:
        print("\n".join(misses))


if __name__ == "__main__":
    main()
