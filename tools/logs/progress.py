"""Where the training had got to when it failed (issue 31): the last step a log printed above a failure.

On-call asks "it died at which step?" before anything else: a crash at step 0 is a setup problem, one at step 4540 of
a run that had been fine is data, memory growth or a node. Most failures do not print the step themselves (a
segfault, a DataLoader worker, a watchdog), but the progress lines above them do: `Epoch 0: 29% 1034/3597 [51:02`,
`iteration 271 | loss 0.53`, `step 2/20`, `global_step=12 loss=0.71`.

Progress lines are most of a training log, so the scan does not collect them (every step line handed to Python made
diagnose_logs many times ripgrep's time). Once the scan has found the failures, this module reads back only the
PROGRESS_LOOKBACK_LINES lines above the first line of each failure that names no step, in one pass that stops at the
last of them (newlines counted per block; only a block with a failure in it split into lines, Python's `re` only on
those windows): `step`, `step_line` (where it was
read) and that line's finite `loss`. A step counter alone is not progress (a config's `save_step: 500`): the line
must also show a counter `N/M`, a metric (loss, lr, accuracy), a rate (it/s) or a percentage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tools.core.errors import TriageError
from tools.core.files import InputFile, open_input, read_blocks
from tools.core.limits import PROGRESS_LOOKBACK_LINES
from tools.logs.metrics import METRIC_LINE_CHARS
from tools.logs.wraps import rejoin_wrapped

__all__ = ["Progress", "progress_in", "steps_before"]

# A step or iteration counter by its name (`step 2/20`, `iteration 271 |`, `global_step=12`); not a bare `[N/M]`,
# which Dynamo prints as its frame id (`[0/0]`).
_STEP = re.compile(r"(?i)(?:\b|(?<=[a-z]_))(?:global[_ ])?(?:step|iter(?:ation)?)['\"]?\s*[:=]?\s*\[?\s*"
                   r"(?P<n>\d+)\b(?!\.\d)")
_TQDM = re.compile(r"(?<![\d.])(?P<n>\d+)/(?:\d+|\?)\s?\[\d+:\d\d")  # tqdm's `4540/? [07:57<00:00`
_SHOWS_PROGRESS = re.compile(
    r"(?i)\b(?:\w*loss|lr|learning[_ ]rate|acc(?:uracy)?|ppl|perplexity|grad[_ ]?norm|reward)\b\s*['\"]?\s*[:=]?\s*"
    r"[-+]?\d|\d\s*(?:it/s|s/it|samples?/s|tokens?/s)|\b\d+\s*/\s*(?:\d+|\?)(?!\d)|\d(?:\.\d+)?\s?%|\bETA\b|"
    r"\belapsed\b")
_LOSS = re.compile(r"(?i)(?<![\w.])(?:train[_ ])?loss['\"]?\s*[:=]?\s*(?P<value>[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\b")


@dataclass(frozen=True)
class Progress:
    line: int
    step: int
    loss: float | None


def progress_in(number: int, raw: bytes) -> Progress | None:
    """The step a progress line names, else None. A progress bar redrawn with `\\r` is one line: its last drawing
    counts."""
    text = raw[:METRIC_LINE_CHARS].decode("utf-8", "replace").rstrip("\r\n").rsplit("\r", 1)[-1]
    tqdm = _TQDM.search(text)
    word = _STEP.search(text) if tqdm is None else None
    if tqdm is None and (word is None or _SHOWS_PROGRESS.search(text) is None):
        return None
    step = int((tqdm or word)["n"])  # type: ignore[index]
    loss = _LOSS.search(text)
    return Progress(number, step, float(loss["value"]) if loss is not None else None)


def _last_progress(lines: list[bytes], first_number: int) -> Progress | None:
    """The last progress line of `lines` (the first of which is line `first_number`)."""
    for offset in range(len(lines) - 1, -1, -1):
        found = progress_in(first_number + offset, lines[offset])
        if found is not None:
            return found
    return None


def steps_before(file: InputFile, numbers: Iterable[int], deadline: float,
                 wrap_width: int | None = None) -> dict[int, Progress]:
    """For each line number, the last progress line among the PROGRESS_LOOKBACK_LINES above it (or on it). One read of
    the file up to the last of them, as the scan numbered it (`wrap_width`: hard-wrapped lines rejoined as the scan
    did); a file that cannot be read again, or the deadline, leaves the steps out."""
    wanted = sorted(set(numbers))
    found: dict[int, Progress] = {}
    if not wanted:
        return found
    try:
        stream, _ = open_input(file.path)
    except (TriageError, OSError):
        return found
    lines_before = 0  # lines in the blocks before `previous`
    previous = b""  # the block before the current one: the lines above a failure near a block's start
    previous_lines = 0
    try:
        with stream:
            for block in read_blocks(stream, deadline):
                if wrap_width:
                    block = rejoin_wrapped(block, wrap_width)
                count = block.count(b"\n")  # line number = newlines before it + 1, as the scan counts
                if wanted[0] <= lines_before + previous_lines + count + 1:  # only a block with a failure is split
                    window = (previous + block).split(b"\n")
                    first = lines_before + 1  # the line number of window[0]
                    while wanted and wanted[0] <= lines_before + previous_lines + count + 1:
                        number = wanted.pop(0)
                        start = max(number - PROGRESS_LOOKBACK_LINES, first)
                        # the failure's own line too: tqdm's bar and the crash glued on one line (no newline between)
                        reached = _last_progress(window[start - first:number - first + 1], start)
                        if reached is not None:
                            found[number] = reached
                    if not wanted:
                        break
                lines_before += previous_lines
                previous, previous_lines = block, count
    except (TriageError, OSError, EOFError):  # out of time or unreadable now: the failures keep what they had
        pass
    return found
