"""Slow ranks: per-rank step times from logs (every common step-line format) or traces, and the straggler verdict.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.steps import RankSteps, StepReader, compile_user_format
from tools.stragglers.find import FindStragglersInput, FindStragglersResult, find_stragglers, stragglers_in_steps

__all__ = [
    "FindStragglersInput",
    "FindStragglersResult",
    "RankSteps",
    "StepReader",
    "compile_user_format",
    "find_stragglers",
    "stragglers_in_steps",
]
