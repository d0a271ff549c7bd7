"""Where the training had got to when it failed (issue 31): the last step a log printed before a failure.

On-call asks "it died at which step?" before anything else: a crash at step 0 is a setup problem, one at step 4540
of a run that had been fine is data, memory growth or a node. Most failures do not print the step themselves (a
segfault, a DataLoader worker, a watchdog), but the progress lines above them do: `Epoch 0: 29% 1034/3597 [51:02`,
`iteration 271 | loss 0.53`, `step 2/20`, `[154/4000] loss: 0.71`.

The rule `training_progress` (sop/log_rules.toml) finds candidate lines in the scan; this module keeps, for one file,
the step each progress line names (Python's `re` on those lines only, at most METRIC_LINE_CHARS of each) and hands
a failure the last one at or above its line: `step`, `step_line` (where it was read) and that line's finite `loss`.
A step counter alone is not progress (a config's `save_step: 500`): the line must also show a counter `N/M`, a
metric (loss, lr, accuracy), a rate (it/s) or a percentage.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from tools.core.limits import LOG_PROGRESS_KEPT
from tools.logs.metrics import METRIC_LINE_CHARS

__all__ = ["PROGRESS_RULE", "ProgressReader", "Progress"]

PROGRESS_RULE = "training_progress"  # the evidence rule in sop/log_rules.toml whose lines are read here

# A step or iteration counter by its name (`step 2/20`, `iteration 271 |`, `global_step=12`); not a bare `[N/M]`,
# which Dynamo prints as its frame id (`[0/0]`).
_STEP = re.compile(r"(?i)(?:\b|(?<=[a-z]_))(?:global[_ ])?(?:step|iter(?:ation)?)['\"]?\s*[:=]?\s*\[?\s*"
                   r"(?P<n>\d+)\b(?!\.\d)")
_TQDM = re.compile(r"(?<![\d.])(?P<n>\d+)/(?:\d+|\?)\s?\[\d+:\d\d")  # tqdm's `4540/? [07:57<00:00`
_SHOWS_PROGRESS = re.compile(
    r"(?i)\b(?:\w*loss|lr|learning[_ ]rate|acc(?:uracy)?|ppl|perplexity|grad[_ ]?norm|reward)\b\s*['\"]?\s*[:=]?\s*"
    r"[-+]?\d|\d\s*(?:it/s|s/it|samples?/s|tokens?/s)|\b\d+\s*/\s*(?:\d+|\?)(?!\d)|\d(?:\.\d+)?\s?%|\bETA\b|"
    r"\belapsed\b|\bExecuting step\b")
_LOSS = re.compile(r"(?i)(?<![\w.])(?:train[_ ])?loss['\"]?\s*[:=]?\s*(?P<value>[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\b")


@dataclass(frozen=True)
class Progress:
    line: int
    step: int
    loss: float | None


class ProgressReader:
    """One file's progress lines, in line order: the step each names (a new entry only when the step changes), the
    last LOG_PROGRESS_KEPT of them (a failure is nearly always after the last ones)."""

    def __init__(self) -> None:
        self._lines: list[int] = []
        self._entries: list[Progress] = []

    def feed(self, number: int, raw: bytes) -> None:
        text = raw[:METRIC_LINE_CHARS].decode("utf-8", "replace")
        tqdm = _TQDM.search(text)
        word = _STEP.search(text) if tqdm is None else None
        step = int(tqdm["n"]) if tqdm is not None else int(word["n"]) if word is not None else None
        if step is None or (tqdm is None and _SHOWS_PROGRESS.search(text) is None):
            return
        loss = _LOSS.search(text)
        entry = Progress(number, step, float(loss["value"]) if loss is not None else None)
        if self._entries and self._entries[-1].step == step and (loss is None or self._entries[-1].loss is not None):
            return  # the same step printed again (a progress bar's refresh): the first line that named it stays
        if len(self._entries) >= LOG_PROGRESS_KEPT:
            del self._entries[: LOG_PROGRESS_KEPT // 2], self._lines[: LOG_PROGRESS_KEPT // 2]
        self._entries.append(entry)
        self._lines.append(number)

    def before(self, number: int) -> Progress | None:
        """The last progress printed at or above line `number`, else None."""
        at = bisect.bisect_right(self._lines, number)
        return self._entries[at - 1] if at else None
