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
- containers and Kubernetes: `2024-05-01T12:00:00.123456789Z `, CRI's `... stdout F `; a log console's table copied
  as text (CloudWatch's `| 2024-08-23T22:22:58.879Z | `);
- syslog / journal: `May  1 12:00:00 host kernel: `, dmesg's `[ 1234.567890] ` and `[Sun Mar 30 08:24:00 2025] `;
- Python logging: `2024-05-01 12:00:00,123 - name - ERROR - `, `ERROR:torch.distributed.x:`;
  glog's `E0501 12:00:00.123 42 x.py:12] `;
- the loggers of the ML stacks: vLLM/SGLang's `ERROR 10-25 11:17:27 [core.py:720] ` (older `llm_engine.py:123] `),
  TensorFlow's C++ `2023-05-01 19:07:50.044545: W tensorflow/x.cc:501] `, loguru's `2024-05-01 12:00:00.123 | ERROR
  | mod:func:12 - `, DeepSpeed's `[2024-05-01 12:00:00,123] [INFO] [engine.py:12:func] `, transformers'
  `[INFO|trainer.py:123] 2024-05-01 12:00:00,123 >> `, bracketed fields `[name][WARNING][2025-10-25 11:17:27][x.py:1] `.

A progress bar redrawn without its newline in a paste (`... 3.19it/s](EngineCore_DP0 pid=10311) ERROR ...`,
`... 7.10it/s]Killed`) is a prefix too, up to its rate's closing bracket. `prefix_facts` reads what a line's
prefixes say about where it came from: the process (a Ray or vLLM worker's `pid=N`) and the source line of the
logging call (`[core.py:720]`, `x.cc:501]`).
"""

from __future__ import annotations

import re
from functools import cache

__all__ = ["LINE_PREFIX", "anchor_after_prefix", "prefix_facts", "without_prefixes"]

_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_SOURCE = r"[\w./\-]+\.(?:py|pyx|cc|cpp|cu|cuh|c|h|hpp|rs|go):\d+"  # a logging call's file:line

_PREFIXES = (
    # A progress bar redrawn with '\r' that a paste kept on the record's line (tqdm's `... 7.10it/s, loss=0.5]`):
    # up to its rate's closing bracket. Unbounded negated classes: linear in RE2, no repeat to unroll.
    r"[^\[\]\n]*\[[^\[\]\n]*(?:/s|s/it)[^\[\]\n]*\]",
    r"\([\w.:<>\-]*\s*pid=\d+[^)\n]{0,160}\)\s*",  # Ray actor / worker
    r"\[(?:rank|default)\d{1,5}\]:\s*",  # torchrun --tee / log prefixes
    r"\[\d{1,5},\d{1,5}\]<std(?:out|err)>:\s*",  # mpirun --tag-output
    # a container runtime's ISO time, its offset maybe after a space and a zone's name (`... +08:00 CST `)
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|\s?[+-]\d\d:?\d\d)?(?: (?:[A-Z]{1,4}T|UTC|MSK))?\s+"
    r"(?:(?:stdout|stderr)\s+[FP]\s+)?",
    # a log console's table copied as text (CloudWatch's `| 2024-08-23T22:22:58.879Z | message`)
    r"\|?[ \t]*\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?Z?[ \t]*\|[ \t]+",
    r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.\-]+ [\w.\-/]+(?:\[\d+\])?:\s*",  # syslog / journalctl
    r"\[ *\d+\.\d+\]\s*",  # dmesg
    r"\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]\s*",  # dmesg -T
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s+(?:-\s+[\w.\-]+\s+-\s+)?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|"
    r"FATAL)(?:\s+-\s+|:\s*|\s+)",  # Python logging's default formats
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:",  # logging.basicConfig: ERROR:torch.distributed...:
    r"[IWEFV]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w./\-]+:\d+\]\s*",  # glog / c10 logging (V: torch's verbose)
    _LEVEL + r" \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[" + _SOURCE + r"\]|" + _SOURCE + r"\])\s*",  # vLLM, SGLang
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] [\w./\-]+:\d+\]\s*",  # TensorFlow's C++ logging
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \| (?:TRACE|DEBUG|INFO|SUCCESS|WARNING|ERROR|CRITICAL)\s*"
    r"\| [\w.<>\-]+:[\w.<>\-]+:\d+ - ",  # loguru
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\] \[" + _LEVEL + r"\] "
    r"(?:\[[\w./\-]+:\d+:[\w<>]+\]\s*)?",  # DeepSpeed
    r"\[" + _LEVEL + r"\|" + _SOURCE + r"\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)? >> ",  # transformers
    r"(?:\[[\w.\-]+\])?\[" + _LEVEL + r"\]\[[\d\-/ :,.]+\](?:\[" + _SOURCE + r"\])?\s*",  # [name][LEVEL][time][x.py:N]
    # Last, as the formats above begin with one too: a bare local time before the text (a wrapper script's `date`, a
    # custom formatter with no level; issue 31 round 11).
    r"\[?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})?\]?\s+",
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
def _prefixes_at() -> re.Pattern[str]:
    # The prefixes use the syntax RE2 and Python's re share; no `^`, which would not match at match()'s pos.
    return re.compile(LINE_PREFIX + "{0,3}")


def without_prefixes(line: str) -> str:
    """`line` without the launcher, container and logger prefixes in front of what the program printed."""
    found = _prefixes_at().match(line)
    return line[found.end():] if found else line


_PID = re.compile(r"\bpid=(?P<pid>\d+)")
_SOURCE_IN_PREFIX = re.compile(r"(?:^|[\[\s|])(?P<location>" + _SOURCE + r")(?::[\w<>]+)?\]")


def prefix_facts(line: str) -> dict[str, str | int]:
    """What the prefixes of `line` say: `pid` (a Ray / vLLM worker's) and `location` (the logging call's file:line).
    Empty when the line has no prefix."""
    found = _prefixes_at().match(line)
    if found is None or found.end() == 0:
        return {}
    prefix = line[:found.end()]
    facts: dict[str, str | int] = {}
    pid = _PID.search(prefix)
    if pid is not None:
        facts["pid"] = int(pid["pid"])
    source = _SOURCE_IN_PREFIX.search(prefix)
    if source is not None:
        facts["location"] = source["location"]
    return facts
