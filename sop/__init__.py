"""The triage SOP as data: one file per branch in sop/branches/ (symptoms, the ordered tool calls, the triage
table, env vars, external commands, references), the log presets and the log rules.

Tool results point at branch ids (and step ids) in `next_steps`; the server renders the branches as MCP
resources and prompts; triage_plan matches the user's words against each branch's keywords. Tests check every
file against the schema below and every tool call in it against the registry.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "Branch",
    "LogPreset",
    "Step",
    "branch_ids",
    "branch_markdown",
    "branches",
    "index_markdown",
    "log_presets",
    "load_branch_files",
    "rules_markdown",
    "tool_call",
]


@dataclass(frozen=True)
class Step:
    id: str
    tool: str
    arguments: dict[str, Any]
    decides: str
    # Arguments that replace the usual ones when the symptom says the utilisation goes up and down (a longer
    # window, to hold three cycles of the periods that matter).
    if_oscillating: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Branch:
    id: str
    title: str
    summary: str
    symptoms: tuple[str, ...]
    keywords_en: tuple[str, ...]
    keywords_zh: tuple[str, ...]
    # Regular expressions for phrasings a substring cannot catch ("rank 3 is slow"); a match weighs more.
    keyword_patterns: tuple[str, ...]
    steps: tuple[Step, ...]
    table: tuple[dict[str, str], ...]
    env: tuple[dict[str, str], ...]
    commands: tuple[dict[str, str], ...]
    references: tuple[dict[str, str], ...]
    # Words that say the symptom comes and goes (English lower-case substrings, Chinese as written).
    oscillation_keywords: tuple[str, ...] = ()

    def step(self, step_id: str) -> Step | None:
        return next((s for s in self.steps if s.id == step_id), None)


_TABLE_KEYS = ("signal", "cause", "fix", "verify")


def _branch(branch_id: str, raw: dict[str, Any]) -> Branch:
    keywords = raw.get("keywords", {})
    return Branch(
        id=branch_id, title=raw["title"], summary=raw["summary"], symptoms=tuple(raw["symptoms"]),
        keywords_en=tuple(keywords.get("en", ())), keywords_zh=tuple(keywords.get("zh", ())),
        keyword_patterns=tuple(keywords.get("patterns", ())),
        steps=tuple(Step(s["id"], s["tool"], dict(s.get("arguments", {})), s["decides"],
                         dict(s.get("if_oscillating", {}))) for s in raw["steps"]),
        table=tuple({k: row[k] for k in _TABLE_KEYS} for row in raw.get("table", ())),
        env=tuple(raw.get("env", ())), commands=tuple(raw.get("commands", ())),
        references=tuple(raw.get("references", ())),
        oscillation_keywords=tuple(raw.get("oscillation_keywords", ())),
    )


def load_branch_files() -> dict[str, dict[str, Any]]:
    """The raw branch files by id (the file name without .toml), for the schema test."""
    folder = resources.files(__package__).joinpath("branches")
    return {item.name.removesuffix(".toml"): tomllib.loads(item.read_text("utf-8"))
            for item in folder.iterdir() if item.name.endswith(".toml")}


@cache
def branches() -> dict[str, Branch]:
    """All SOP branches by id, in SOP order (the entry first)."""
    raw = load_branch_files()
    ordered = sorted(raw.items(), key=lambda item: (item[1].get("order", 99), item[0]))
    return {branch_id: _branch(branch_id, data) for branch_id, data in ordered}


def branch_ids() -> frozenset[str]:
    return frozenset(branches())


def index_markdown() -> str:
    """The SOP's entry page: every branch with its id, what it handles and its symptoms."""
    lines = ["# Triage SOP: branches", "",
             "Classify the symptom (triage_plan does it from the user's words), run health_check at once, then "
             "follow one branch's steps in order.", "",
             "| id | branch | symptoms |", "|---|---|---|"]
    lines += [f"| {b.id} | {b.title} | {'; '.join(b.symptoms)} |" for b in branches().values()]
    return "\n".join(lines) + "\n\n" + rules_markdown()


def tool_call(tool: str, arguments: dict[str, Any]) -> str:
    """A tool call as the SOP pages, prompts, plans and next steps all write it: `tool(name='value', ...)`."""
    return f"{tool}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def branch_markdown(branch_id: str) -> str | None:
    """One branch as markdown, or None for an unknown id."""
    branch = branches().get(branch_id)
    if branch is None:
        return None
    out = [f"# {branch.title} (`{branch.id}`)", "", branch.summary, "", "## Symptoms", ""]
    out += [f"- {s}" for s in branch.symptoms]
    out += ["", "## Steps (in order)", "", "| step | call | decides |", "|---|---|---|"]
    out += [f"| {s.id} | `{tool_call(s.tool, s.arguments)}` | {s.decides} |" for s in branch.steps]
    if branch.table:
        out += ["", "## Triage table", "", "| signal | cause | fix | verify |", "|---|---|---|---|"]
        out += [f"| {r['signal']} | {r['cause']} | {r['fix']} | {r['verify']} |" for r in branch.table]
    if branch.env:
        out += ["", "## Environment variables", ""]
        out += [f"- `{e['name']}={e['value']}`: {e['why']}" for e in branch.env]
    if branch.commands:
        out += ["", "## Commands a human may run", ""]
        out += [f"- `{c['command']}`: {c['why']}" for c in branch.commands]
    if branch.references:
        out += ["", "## References", ""]
        out += [f"- [{r['title']}]({r['url']})" for r in branch.references]
    return "\n".join(out) + "\n"


def rules_markdown() -> str:
    """The hard rules every agent follows, whatever the branch."""
    return "\n".join([
        "## Hard rules", "",
        "1. Never cat a large trace, log or dump; use the tools (they are bounded).",
        "2. Never open a GUI or TUI (Nsight UI, Perfetto UI, nvitop, htop).",
        "3. Never run what does not end by itself: no watch, nvidia-smi -l, tail -f; sample with count.",
        "4. Run git as git --no-pager.",
        "5. Prefer structured output (--json, --format=csv).",
        "6. Answer with one markdown table (symptom | root cause | evidence | fix | verification) and at most "
        "three sentences, citing an official reference per fix.",
        "7. An unknown result is not a clean bill: say what could not be judged and collect what its `decides` "
        "names; quote a caveat that changes the verdict (a cut trace, missing ranks).",
    ]) + "\n"


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
