"""Hung jobs: per-rank Python stacks (py-spy live, or saved dumps in every format) and the flight recorder.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.hangs.flight_recorder import AnalyzeFlightRecorderInput, AnalyzeFlightRecorderResult, analyze_flight_recorder
from tools.hangs.stacks import DumpStacksInput, DumpStacksResult, dump_stacks

__all__ = [
    "AnalyzeFlightRecorderInput",
    "AnalyzeFlightRecorderResult",
    "DumpStacksInput",
    "DumpStacksResult",
    "analyze_flight_recorder",
    "dump_stacks",
]
