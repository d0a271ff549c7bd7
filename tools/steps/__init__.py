"""Step logs: the one reader of per-step timings in training logs (every common step-line format), the same lines with
the time each was logged (stamped.py), and the job's mean step time from them (what turns a period in seconds into a
period in steps).

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.steps.reader import FORMATS, RankSteps, StepFormat, StepReader, compile_user_format, read_steps
from tools.steps.stamped import StampedSteps, read_stamped_steps
from tools.steps.timing import StepTime, mean_step_time

__all__ = ["FORMATS", "RankSteps", "StampedSteps", "StepFormat", "StepReader", "StepTime", "compile_user_format",
           "mean_step_time", "read_stamped_steps", "read_steps"]
