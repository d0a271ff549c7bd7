"""What diagnose_logs says of one saved excerpt, reduced to what the mechanism tests assert on: the first warn/crit
finding of each category, by its rule and facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs


def serious_by_category(path: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]), ToolContext(roots=(path.parent.resolve(),)))
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for finding in result.findings:  # the first finding of each category, as findings are ordered
        if finding.severity != "info":
            found.setdefault(finding.category, (finding.rule, dict(finding.facts)))
    return found
