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

from tools.core.models import Severity  # noqa: E402
from tools.gpu.activity import _judged, _source_coverage, activity_findings, summarise  # noqa: E402
from tools.gpu.activity_formats import ActivitySeries, read_activity, sniff_activity  # noqa: E402

COMMITTED = REPO / "tests" / "data" / "activity"


def score(folder: Path, label: dict[str, Any]) -> tuple[str, bool, bool, bool, str]:
    """(format, entities right, verdicts right, the tool's answer is unknown, detail). An unknown answer on a
    labelled fault is a miss; on a file labelled without findings it is counted apart (the tool could not tell)."""
    path = folder / label["file"]
    text = path.read_text(errors="replace")
    into: dict[tuple[str, ...], ActivitySeries] = {}
    read_activity(text, into, path.name)
    records = [summarise(s) for s in into.values()]
    findings = activity_findings(records)
    severity, _ = _judged(records, findings, [_source_coverage(path.name, {}, into)])
    found: dict[str, set[str]] = defaultdict(set)
    for finding in findings:
        found[finding.gpu.removeprefix(f"{path.name}: ")].add(finding.kind)
    wanted = {gpu: set(kinds) for gpu, kinds in label["findings"].items()}
    unknown = severity is Severity.unknown
    entities_right = len(records) == label["entities"]
    verdicts_right = dict(found) == wanted and not (unknown and wanted)
    detail = (f"entities {len(records)} (want {label['entities']}), findings {dict(found)} (want {wanted}), "
              f"severity {severity.value}")
    return sniff_activity(text) or "unknown", entities_right, verdicts_right, unknown, detail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--extra", nargs="*", type=Path, default=[])
    args = parser.parse_args()
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    misses: list[str] = []
    for folder in [COMMITTED, *args.extra]:
        labels = folder / "labels.jsonl" if (folder / "labels.jsonl").exists() else folder / "cases.jsonl"
        for line in labels.read_text().splitlines():
            label = json.loads(line)
            kind, entities, verdicts, unknown, detail = score(folder, label)
            row = tally[kind]
            row[0] += 1
            row[1] += entities
            row[2] += verdicts
            row[3] += unknown
            if not (entities and verdicts):
                misses.append(f"{folder.name}/{label['file']}: {detail}")
    print(f"{'format':16} {'files':>5} {'entities right':>15} {'verdicts right':>15} {'unknown':>8}")
    for kind, (files, entities_ok, verdicts_ok, unknowns) in sorted(tally.items()):
        print(f"{kind:16} {files:5} {entities_ok:>15} {verdicts_ok:>15} {unknowns:>8}")
    total = [sum(r[i] for r in tally.values()) for i in range(4)]
    print(f"{'all':16} {total[0]:5} {total[1]:>15} {total[2]:>15} {total[3]:>8}")
    if args.misses:
        print("\n".join(misses) or "no misses")


if __name__ == "__main__":
    main()
