"""Paths in a result as the caller can use them again: relative to the root they lie under (over MCP a relative path
means the roots), and in the CLI relative to the working directory where they lie there instead (a shell's relative
path means the working directory). An absolute path of the machine the evidence was read on tells the user nothing
and leaks its layout; written relative, it is the same text whether the roots are /work/main or a fresh clone.

Applied once, to every string of every result (mcp_server/contract.py), as the redaction is: a tool names its files
as it likes, the contract makes them relative. Only with one root: with several, a path keeps its root (they are
often different jobs, and a relative path that exists under two of them is refused), but in the CLI one under the
working directory is still written relative to it. Only whole path components are rewritten (`/data/x`, not
`/mnt/data/x` nor `/database/x`); the root itself, and a root of `/`, stay as they are (a bare root is its own name,
and under `/` every absolute path would lose its meaning).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["relative_paths"]

# A path starts where no path character precedes it: the root's own text inside a longer path is not the root.
_NOT_AFTER = r"(?<![\w.~/-])"


def _pattern(bases: Sequence[Path]) -> re.Pattern[str] | None:
    """One alternation of the bases, in their order (the first that matches at a place wins: a root before the
    working directory, an outer root before one inside it, as file names are shown: tools/core/files.py)."""
    texts = list(dict.fromkeys(str(base).rstrip("/") for base in bases))
    texts = [text for text in texts if text]  # `/` itself: never rewritten
    if not texts:
        return None
    # `base/` followed by a name (not a space, not another slash): the path goes on below the base.
    return re.compile(_NOT_AFTER + "(?:" + "|".join(re.escape(text) for text in texts) + r")/(?=[^\s/])")


def relative_paths(value: Any, bases: Sequence[Path]) -> Any:
    """`value` (a JSON-like result: dicts, lists, strings) with every absolute path under one of `bases` written
    relative to the first base it lies under."""
    pattern = _pattern(bases)
    if pattern is None:
        return value

    def rewrite(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub("", item) if "/" in item else item
        if isinstance(item, dict):
            return {key: rewrite(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [rewrite(inner) for inner in item]
        return item

    return rewrite(value)
