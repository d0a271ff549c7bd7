"""Profiler traces: the Kineto (torch.profiler) JSON reader, the Nsight Systems SQLite reader, and summarize_trace's
step breakdown and causes.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.traces.kineto import TraceEvent, TraceHeader, rank_of_trace, read_trace, trace_files
from tools.traces.nsys import exported_reports, is_nsys_export, nsys_processes, read_nsys_batches
from tools.traces.summary import (
    SummarizeTraceInput,
    SummarizeTraceResult,
    TraceBreakdown,
    bottleneck,
    branch_of_cause,
    breakdown,
    short_name,
    summarize_trace,
)

__all__ = [
    "SummarizeTraceInput",
    "SummarizeTraceResult",
    "TraceBreakdown",
    "TraceEvent",
    "TraceHeader",
    "bottleneck",
    "branch_of_cause",
    "breakdown",
    "exported_reports",
    "is_nsys_export",
    "nsys_processes",
    "rank_of_trace",
    "read_nsys_batches",
    "read_trace",
    "short_name",
    "summarize_trace",
    "trace_files",
]
