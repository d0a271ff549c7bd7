"""Process exits (issue 31): one table (sop/exits.toml) of signals, exit codes and the words orchestrators print for
a process that ended (Kubernetes, Slurm, Ray, mpirun, the kernel's OOM killer, shells, launchers) -> process_exit,
with the exit code, the signal and who killed it.

- `with_exit_rules(rules)`: log_rules.toml's rules with the table's [[exit]] rows inserted after its last
  process_exit rule (the rows have the rule format).
- `exit_facts(rule_id, facts, level)`: every process_exit finding's facts completed from the signal table (exit code
  137 or -9 is signal 9, SIGKILL; `Killed` is signal 9; who usually sends it) and the Windows status table (exit code
  -1073740791 is 0xC0000409, STATUS_STACK_BUFFER_OVERRUN: crit), its `reason` (the words printed for the end:
  `Killed`, a Ray worker's exit type, the status code), and, for the table's rows, the severity: crit for a fatal
  signal, info for exit code 0.
- `demote_consequences(findings)`: a crash signal the process printed after a failure another finding names
  (a CUDA error, then `Aborted (core dumped)`) is that failure's consequence, info.
- `signal_number(printed)`: a signal as its number, whichever way it was printed (9, "SIGKILL", "Killed", "-9").
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any, Literal, Protocol

__all__ = ["demote_consequences", "exit_facts", "exit_rule_ids", "signal_number", "windows_status", "with_exit_rules"]

Level = Literal["info", "warn", "crit"]
FactValue = int | float | str | bool | list[int]


@cache
def _table() -> dict[str, Any]:
    return tomllib.loads(resources.files("sop").joinpath("exits.toml").read_text("utf-8"))


@cache
def _signals() -> dict[int, dict[str, Any]]:
    return {int(number): row for number, row in _table()["signals"].items()}


@cache
def _windows_statuses() -> dict[int, dict[str, Any]]:
    return {int(code, 16): row for code, row in _table()["windows_status"].items()}


def windows_status(code: int) -> tuple[str, dict[str, Any]] | None:
    """The NTSTATUS an exit code is (printed signed or unsigned), as its hex code and row; None for other codes."""
    unsigned = code & 0xFFFFFFFF  # -1073740791 and 3221226505 are both 0xC0000409
    row = _windows_statuses().get(unsigned)
    return (f"0x{unsigned:08X}", row) if row is not None else None


@cache
def _words() -> dict[str, int]:
    words: dict[str, int] = {}
    for number, row in _signals().items():
        words[row["name"].lower()] = number
        words[row["name"].lower().removeprefix("sig")] = number
        for word in row["words"]:
            words[word.lower()] = number
    return words


def exit_rule_ids() -> frozenset[str]:
    return frozenset(row["id"] for row in _table()["exit"])


def with_exit_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules with the exit table's rows after the last process_exit rule (at the end when there is none)."""
    rows = [{"category": "process_exit", **row} for row in _table()["exit"]]
    last = max((i for i, r in enumerate(rules) if r.get("category") == "process_exit"), default=len(rules) - 1)
    return [*rules[: last + 1], *rows, *rules[last + 1 :]]


_NUMBER = re.compile(r"^-?\d+$")


def signal_number(printed: object) -> int | None:
    """9 for 9, "9", "-9", "SIGKILL", "KILL", "Killed", "signal 9 (Killed)"; None when it names no known signal."""
    if isinstance(printed, bool):
        return None
    if isinstance(printed, int):
        return abs(printed)
    text = str(printed).strip().strip(".:()[]").strip()
    if _NUMBER.match(text):
        return abs(int(text))
    low = text.lower()
    if low in _words():
        return _words()[low]
    found = re.search(r"\bsig(?:nal)?\s*:?\s*(\d+)\b|\b(sig[a-z]+)\b", low)
    if found:
        return int(found.group(1)) if found.group(1) else _words().get(found.group(2))
    return next((n for word, n in _words().items() if len(word) > 4 and word in low), None)


def _code_signal(code: int) -> int | None:
    if code < 0:
        return -code if -code in _signals() else None
    if code > 128 and code - 128 in _signals():
        return code - 128
    return None


def exit_facts(rule_id: str, facts: dict[str, FactValue], level: Level) -> tuple[dict[str, FactValue], Level]:
    """A process_exit finding's facts completed from the signal table, and its severity (the table's rows only)."""
    facts = dict(facts)
    codes = facts.get("return_codes")
    if isinstance(codes, str) and "exitcode" not in facts:  # SkyPilot: the first code not from the cleanup
        numbers = [int(c) for c in re.findall(r"-?\d+", codes)]
        cleanup = set(_table().get("cleanup_codes", []))
        root = next((c for c in numbers if c not in cleanup and c != 0), numbers[0] if numbers else None)
        if root is not None:
            facts["exitcode"] = root
    printed = facts.get("signal")
    if isinstance(printed, str) and signal_number(printed) is not None and not printed.strip().upper().startswith(
            ("SIG", "-")) and not _NUMBER.match(printed.strip()):
        facts.setdefault("reason", printed.strip())  # the shell's or the launcher's words: Killed, Segmentation fault
    exit_type = facts.get("exit_type")
    if isinstance(exit_type, str):
        facts.setdefault("reason", exit_type)  # Ray's worker exit type: SYSTEM_ERROR, NODE_OUT_OF_MEMORY
    number: int | None = None
    for key in ("signal_number", "signal"):
        if key in facts:
            number = signal_number(facts[key])
            if number is not None:
                break
    exitcode = facts.get("exitcode")
    if number is None and isinstance(exitcode, int) and not isinstance(exitcode, bool):
        number = _code_signal(exitcode)
    row = _signals().get(number) if number is not None else None
    if number is not None:
        facts["signal_number"] = number
    if row is not None:
        facts.setdefault("signal", row["name"])
        facts.setdefault("killed_by", row["by"])
    status = windows_status(exitcode) if isinstance(exitcode, int) and not isinstance(exitcode, bool) else None
    if status is not None:
        code, status_row = status
        facts.setdefault("status", status_row["name"])
        facts.setdefault("reason", code)
        facts.setdefault("killed_by", status_row["by"])
        if status_row["fatal"]:
            level = "crit"  # the code itself says the process crashed, whoever printed it (an IDE, cmd, a launcher)
    if rule_id in exit_rule_ids():
        if row is not None and row["fatal"]:
            level = "crit"
        elif exitcode == 0 and number is None:
            level = "info"
    return facts, level


class _Occurrence(Protocol):
    @property
    def file(self) -> str: ...
    @property
    def line(self) -> int: ...


class _Finding(Protocol):
    category: str
    rule: str
    severity: Level
    facts: dict[str, FactValue]

    @property
    def first(self) -> _Occurrence: ...


def demote_consequences(findings: Sequence[_Finding]) -> None:
    """A crash the process reports itself (SIGABRT after std::terminate, SIGSEGV, SIGBUS...) printed by a table row
    after a failure another finding already names (a CUDA error, then `Aborted (core dumped)`) is that failure's
    consequence: info. A failure printed only after the crash (a server's 'shard failed to start' under its shard's
    SIGILL) is the crash's consequence instead. Kills from outside (SIGKILL, the OOM killers, time limits) stay:
    they are causes."""
    causes = [f.first for f in findings if f.severity == "crit" and f.category != "process_exit"]
    if not causes:
        return
    rows = exit_rule_ids()
    for finding in findings:
        number = finding.facts.get("signal_number")
        after_a_cause = any(c.file != finding.first.file or c.line <= finding.first.line for c in causes)
        if finding.rule in rows and isinstance(number, int) and number in _SELF_INFLICTED and after_a_cause:
            finding.severity = "info"
            finding.facts["consequence"] = True
    _fold_into_causes(findings, causes)


_EXCEPTION_EXIT = 1  # what Python exits with after an uncaught exception (torchrun's `exitcode: 1`, a shell's status)
_ASYNC_NOTE_LINES = 3  # PyTorch prints "CUDA kernel errors might be asynchronously reported ..." right under the error


def _fold_into_causes(findings: Sequence[_Finding], causes: Sequence[_Occurrence]) -> None:
    """Issue 31 (round 9). Two findings that are one failure told twice: the CUDA runtime's OOM is itself a CUDA error
    (`CUDA error: out of memory`, then PyTorch's "CUDA kernel errors might be asynchronously reported" note under it,
    which the cuda_error rule also knows), so a cuda_error starting on the OOM's lines is the OOM's: info. A process
    that exited with Python's exception status (1, no signal) after a failure another finding names exited because of
    it: info, a consequence, as a crash after a CUDA error is."""
    ooms = [f.first for f in findings if f.category == "cuda_oom" and f.severity == "crit"]
    for finding in findings:
        if finding.severity == "info":
            continue
        if finding.category == "cuda_error" and any(
                o.file == finding.first.file and 0 <= finding.first.line - o.line <= _ASYNC_NOTE_LINES for o in ooms):
            finding.severity = "info"
            finding.facts["consequence"] = True
            continue
        exitcode = finding.facts.get("exitcode")
        if (finding.category == "process_exit" and finding.severity == "warn" and exitcode == _EXCEPTION_EXIT
                and "signal_number" not in finding.facts
                and any(c.file == finding.first.file and c.line <= finding.first.line for c in causes)):
            finding.severity = "info"
            finding.facts["consequence"] = True


_SELF_INFLICTED = frozenset({4, 6, 7, 8, 11})
