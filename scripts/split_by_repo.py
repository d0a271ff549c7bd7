"""Split a freshly collected evaluation round by source repository, before anything is tuned on it.

Reads FOLDER/incoming/cases_*.jsonl (one JSON line per excerpt, with `file` and `repo`), moves each excerpt to
FOLDER/dev/ or FOLDER/heldout/ by its repository (held out when int(sha256(SALT + repo), 16) % 100 < SHARE; with
--all-held-out every excerpt is), writes FOLDER/dev/cases.jsonl, the frozen held-out labels
FOLDER/heldout/labels_frozen_DATE.jsonl and FOLDER/split_DATE.json (the rule, the repository lists and the labels'
SHA-256, which the accuracy scripts check before they score). The collectors' provenance files move beside the
split file. Nothing is read but the manifests: the split is decided before anyone looks at an excerpt.

Usage: python3 scripts/split_by_repo.py FOLDER --date 2026-12-02 [--share 35] [--all-held-out]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any


def held_out(repo: str, salt: str, share: int) -> bool:
    return int(hashlib.sha256((salt + repo.lower()).encode()).hexdigest(), 16) % 100 < share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--date", required=True)
    parser.add_argument("--share", type=int, default=35, help="percent of repositories held out")
    parser.add_argument("--all-held-out", action="store_true", help="a fresh round kept whole for scoring")
    args = parser.parse_args()
    incoming = args.folder / "incoming"
    rows = [json.loads(line) for manifest in sorted(incoming.glob("cases_*.jsonl"))
            for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    missing = [row.get("file") for row in rows if not row.get("repo") or not (incoming / row["file"]).is_file()]
    if missing:
        sys.exit(f"rows without a repo or a file: {missing[:10]}")
    salt = f"gpu-triage held-out {args.date} "
    split: dict[str, list[dict[str, Any]]] = {"dev": [], "heldout": []}
    for row in rows:
        side = "heldout" if args.all_held_out or held_out(row["repo"], salt, args.share) else "dev"
        split[side].append(row)
    for side, chosen in split.items():
        (args.folder / side).mkdir(exist_ok=True)
        for row in chosen:
            shutil.move(incoming / row["file"], args.folder / side / row["file"])
    labels = args.folder / "heldout" / f"labels_frozen_{args.date}.jsonl"
    labels.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in split["heldout"]),
                      encoding="utf-8")
    if split["dev"]:
        (args.folder / "dev" / "cases.jsonl").write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in split["dev"]), encoding="utf-8")
    rule = ("all of this round is held out" if args.all_held_out else
            f"held out when int(sha256('{salt}' + repo.lower()), 16) % 100 < {args.share}")
    record = {
        "date": args.date, "rule": rule,
        "why": "split by source repository before anything was tuned on this round; the held-out labels are frozen: "
               "the accuracy scripts refuse to score them if this digest changes",
        "heldout_labels": f"heldout/{labels.name}",
        "heldout_labels_sha256": hashlib.sha256(labels.read_bytes()).hexdigest(),
        "heldout_repositories": sorted({row["repo"] for row in split["heldout"]}),
        "development_repositories": sorted({row["repo"] for row in split["dev"]}),
    }
    (args.folder / f"split_{args.date}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for provenance in incoming.glob("PROVENANCE_*.md"):
        shutil.move(provenance, args.folder / provenance.name)
    for manifest in incoming.glob("cases_*.jsonl"):
        manifest.unlink()
    if not any(incoming.iterdir()):
        incoming.rmdir()
    print(f"{len(split['dev'])} development excerpts ({len(record['development_repositories'])} repositories), "
          f"{len(split['heldout'])} held out ({len(record['heldout_repositories'])} repositories)")


if __name__ == "__main__":
    main()
