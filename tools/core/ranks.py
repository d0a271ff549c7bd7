"""How a rank is named where the job leaves it (file names, launcher prefixes on a line), and how a set of ranks
or GPU indices is written back ('0-3,7'). Every reader of per-rank files names ranks with these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["compact_ranges", "rank_of_line", "rank_of_path"]

_RANK_IN_PATH = re.compile(
    r"(?:^|[/_.\-])(?:rank|r|worker|proc|local_rank)[_\-]?0*(\d{1,5})(?=[/_.\-]|$)"
    r"|attempt_\d+/0*(\d{1,5})/(?:stdout|stderr)",
    re.IGNORECASE,
)
# torchrun's `[rank3]:` / `[default3]:`, srun --label's `3: `, Open MPI --tag-output's `[jobid,rank]<stderr>:`.
_RANK_PREFIX = re.compile(rb"^\s*(?:\[(?:rank|default)(\d{1,5})\]:|(\d{1,5}): |\[\d{1,5},(\d{1,5})\]<std(?:out|err)>:)")


def rank_of_path(relative: str) -> int | None:
    """The rank named closest to the file name (a folder like `run_rank3_test/` above it matters less):
    rank3.log, rank_3, -r3-, node1/rank-03, torchrun's attempt_0/3/stderr.log."""
    matches = list(_RANK_IN_PATH.finditer(relative))
    if not matches:
        return None
    last = matches[-1]
    return int(last.group(1) or last.group(2))


def rank_of_line(line: bytes) -> int | None:
    """The rank a launcher prefixed the line with: `[rank3]:`, `[default3]:` (torchrun), `3: ` (srun --label),
    `[1,3]<stderr>:` (mpirun --tag-output: job 1, rank 3)."""
    match = _RANK_PREFIX.match(line)
    if not match:
        return None
    return int(next(group for group in match.groups() if group is not None))


def compact_ranges(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 3, 7] -> '0-3,7' (ranks, GPU indices); duplicates and order do not matter."""
    out: list[str] = []
    ordered = sorted(set(numbers))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)
