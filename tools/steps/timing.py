"""The job's mean step time from its step logs, every rank's steps pooled (the mean, not the median: the slow step a
periodic dip comes from is part of every period)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tools.core.context import ToolContext
from tools.core.files import expand_inputs
from tools.core.limits import STRAGGLER_MAX_LOG_FILES
from tools.steps.reader import StepReader

__all__ = ["StepTime", "mean_step_time"]


@dataclass(frozen=True)
class StepTime:
    mean_s: float
    steps: int
    source: str


def mean_step_time(step_logs: Sequence[str], ctx: ToolContext, deadline: float) -> tuple[StepTime | None, str | None]:
    """The job's mean step time from its step logs (every rank's steps pooled), or why there is none."""
    reader = StepReader()
    times: list[np.ndarray] = []
    names: list[str] = []
    for file in expand_inputs(list(step_logs), ctx.roots, STRAGGLER_MAX_LOG_FILES):
        for steps in reader.read(file.path, file.name, deadline):
            if steps.unit == "ms" and steps.steps.size:
                values = steps.steps[np.isfinite(steps.steps) & (steps.steps > 0)]
                if values.size:
                    times.append(values)
                    names.append(file.name)
    if not times:
        return None, ("No step time in the step logs (a throughput-only format, or no recognised step line): the "
                      "period is given in seconds only.")
    pooled = np.concatenate(times)
    return StepTime(mean_s=float(pooled.mean()) / 1000, steps=int(pooled.size), source=", ".join(names[:3])), None


