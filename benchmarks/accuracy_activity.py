"""gpu_activity against real saved captures, one file at a time: per format, whether every GPU / MIG instance was
read (the entity count its labeller saw in the numbers) and whether its verdicts are the labelled ones.

Committed: tests/data/activity/cases.jsonl. `--extra DIR...`: folders of captures that cannot be committed (issue
and blog text, no licence), with a labels.jsonl (or cases.jsonl) of `file`, `entities` and `findings` ({gpu label:
[kinds]}; a GPU not named must have none). Printed: right / scored per format, for entities and for verdicts, and
every miss with --misses.

Usage: .venv/bin/python benchmarks/accuracy_activity.py [--misses] [--extra DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.gpu.activity import activity_findings, summarise  # noqa: E402
from tools.gpu.activity_formats import ActivitySeries, read_activity, sniff_activity  # noqa: E402

COMMITTED = REPO / "tests" / "data" / "activity"


def score(folder: Path, label: dict[str, Any]) -> tuple[str, bool, bool, str]:
    path = folder / label["file"]
    text = path.read_text(errors="replace")
    into: dict[tuple[str, ...], ActivitySeries] = {}
    read_activity(text, into, path.name)
    records = [summarise(s) for s in into.values()]
    found: dict[str, set[str]] = defaultdict(set)
    for finding in activity_findings(records):
        found[finding.gpu.removeprefix(f"{path.name}: ")].add(finding.kind)
    wanted = {gpu: set(kinds) for gpu, kinds in label["findings"].items()}
    entities_right = len(records) == label["entities"]
    verdicts_right = dict(found) == wanted
    detail = f"entities {len(records)} (want {label['entities']}), findings {dict(found)} (want {wanted})"
    return sniff_activity(text) or "unknown", entities_right, verdicts_right, detail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--extra", nargs="*", type=Path, default=[])
    args = parser.parse_args()
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    misses: list[str] = []
    for folder in [COMMITTED, *args.extra]:
        labels = folder / "labels.jsonl" if (folder / "labels.jsonl").exists() else folder / "cases.jsonl"
        for line in labels.read_text().splitlines():
            label = json.loads(line)
            kind, entities, verdicts, detail = score(folder, label)
            row = tally[kind]
            row[0] += 1
            row[1] += entities
            row[2] += verdicts
            if not (entities and verdicts):
                misses.append(f"{folder.name}/{label['file']}: {detail}")
    print(f"{'format':16} {'files':>5} {'entities right':>15} {'verdicts right':>15}")
    for kind, (files, entities, verdicts) in sorted(tally.items()):
        print(f"{kind:16} {files:5} {entities:>15} {verdicts:>15}")
    total = [sum(r[i] for r in tally.values()) for i in range(3)]
    print(f"{'all':16} {total[0]:5} {total[1]:>15} {total[2]:>15}")
    if args.misses:
        print("\n".join(misses) or "no misses")


if __name__ == "__main__":
    main()
