"""The triage SOP as data: branch ids, titles and summaries, read from branches.toml.

Tool results point at these ids in `next_steps`; a test checks that every id they use exists.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["Branch", "branch_ids", "branches"]


@dataclass(frozen=True)
class Branch:
    id: str
    title: str
    summary: str
    symptoms: tuple[str, ...]


@cache
def branches() -> dict[str, Branch]:
    """All SOP branches by id, in file order."""
    raw = tomllib.loads(resources.files(__package__).joinpath("branches.toml").read_text("utf-8"))
    return {
        key: Branch(id=key, title=v["title"], summary=v["summary"], symptoms=tuple(v["symptoms"]))
        for key, v in raw["branch"].items()
    }


def branch_ids() -> frozenset[str]:
    return frozenset(branches())
