"""The triage SOP as data: branch ids, titles and summaries, read from branches.toml.

Tool results point at these ids in `next_steps`; a test checks that every id they use exists.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["Branch", "LogPreset", "branch_ids", "branch_markdown", "branches", "index_markdown", "log_presets"]


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


def index_markdown() -> str:
    """The SOP's entry page: every branch with its id, what it handles and its symptoms."""
    lines = ["# Triage SOP: branches", "",
             "Classify the symptom, run health_check at once, then follow one branch.", "",
             "| id | branch | symptoms |", "|---|---|---|"]
    lines += [f"| {b.id} | {b.title} | {'; '.join(b.symptoms)} |" for b in branches().values()]
    return "\n".join(lines) + "\n"


def branch_markdown(branch_id: str) -> str | None:
    """One branch as markdown, or None for an unknown id."""
    branch = branches().get(branch_id)
    if branch is None:
        return None
    symptoms = "\n".join(f"- {s}" for s in branch.symptoms)
    return f"# {branch.title} (`{branch.id}`)\n\n{branch.summary}\n\n## Symptoms\n\n{symptoms}\n"


@dataclass(frozen=True)
class LogPreset:
    name: str
    description: str
    pattern: str


@cache
def log_presets() -> dict[str, LogPreset]:
    """grep_logs' named patterns (log_presets.toml)."""
    raw = tomllib.loads(resources.files(__package__).joinpath("log_presets.toml").read_text("utf-8"))
    return {name: LogPreset(name, v["description"], v["pattern"]) for name, v in raw["preset"].items()}
