"""Line repair (issue 31): the prefixes launchers, containers and loggers put before a line, so that a rule anchored
at the start of a line (`^\\s*Killed\\s*$`, torchrun's summary fields) still matches after them.

The prefixes are defined once, here (LINE_PREFIX, an RE2 pattern), and applied when the rules are loaded: every
`^` that anchors a rule pattern (outside a character class, not escaped) becomes `^` followed by up to three such
prefixes in the rule's RE2 pattern, and start-of-line-or-after-a-prefix's-last-character in the candidate
matcher's. Nothing is stripped from the line itself: the finding shows the line as printed, and the
rank prefixes stay for tools.core.ranks.

The forms come from real logs:
- Ray: `(RayWorkerWrapper pid=123, ip=10.0.0.1) `, `(pid=123) `, `(TaskRunner pid=4321) `, with or without ip;
- torchrun / mpirun: `[rank3]:`, `[default0]:`, `[1,0]<stdout>:`;
- containers and Kubernetes: `2024-05-01T12:00:00.123456789Z `, CRI's `... stdout F `;
- syslog / journal: `May  1 12:00:00 host kernel: `, dmesg's `[ 1234.567890] ` and `[Sun Mar 30 08:24:00 2025] `;
- Python logging: `2024-05-01 12:00:00,123 - name - ERROR - `, `ERROR:torch.distributed.x:`;
  glog's `E0501 12:00:00.123 42 x.py:12] `.
"""

from __future__ import annotations

import re
from functools import cache

__all__ = ["LINE_PREFIX", "anchor_after_prefix", "without_prefixes"]

_PREFIXES = (
    r"\([\w.:<>\-]*\s*pid=\d+[^)\n]{0,160}\)\s*",  # Ray actor / worker
    r"\[(?:rank|default)\d{1,5}\]:\s*",  # torchrun --tee / log prefixes
    r"\[\d{1,5},\d{1,5}\]<std(?:out|err)>:\s*",  # mpirun --tag-output
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\s+(?:(?:stdout|stderr)\s+[FP]\s+)?",
    r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.\-]+ [\w.\-/]+(?:\[\d+\])?:\s*",  # syslog / journalctl
    r"\[ *\d+\.\d+\]\s*",  # dmesg
    r"\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]\s*",  # dmesg -T
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s+(?:-\s+[\w.\-]+\s+-\s+)?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|"
    r"FATAL)(?:\s+-\s+|:\s*|\s+)",  # Python logging's default formats
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:",  # logging.basicConfig: ERROR:torch.distributed...:
    r"[IWEFV]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w./\-]+:\d+\]\s*",  # glog / c10 logging (V: torch's verbose)
)
LINE_PREFIX = "(?:" + "|".join(_PREFIXES) + ")"
_AFTER_ANCHOR = "^" + LINE_PREFIX + "{0,3}"
# Every prefix ends in whitespace, ':', ']', ')' or '>': the candidate matcher (Hyperscan, one automaton for all
# rules, where the prefixes' bounded repeats would cost seconds to compile and a third of the speed) anchors at the
# start of a line or after one of those; the rule's own RE2 pattern, with the full prefixes, then decides.
_LOOSE_ANCHOR = r"(?:^|[\s:\])>])"


def anchor_after_prefix(pattern: str, *, loose: bool = False) -> str:
    """`pattern` with each line-start anchor `^` allowed to follow known line prefixes (`loose`: after any
    character a prefix ends with, a superset for the candidate matcher)."""
    if "^" not in pattern:
        return pattern
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
            out.append(char)
        elif char == "[":
            in_class = True
            out.append(char)
            if pattern[index + 1 : index + 2] == "^":  # a negated class
                out.append("^")
                index += 1
            if pattern[index + 1 : index + 2] == "]":  # ']' first in a class is a literal
                out.append("]")
                index += 1
        elif char == "^":
            out.append(_LOOSE_ANCHOR if loose else _AFTER_ANCHOR)
        else:
            out.append(char)
        index += 1
    return "".join(out)


@cache
def _leading_prefixes() -> re.Pattern[str]:
    return re.compile(_AFTER_ANCHOR)  # the prefixes use the syntax RE2 and Python's re share


def without_prefixes(line: str) -> str:
    """`line` without the launcher, container and logger prefixes in front of what the program printed."""
    found = _leading_prefixes().match(line)
    return line[found.end():] if found else line
