"""The SOP's own tools, over the others: the plan for a symptom, the report that runs every tool with inputs, and
the before/after comparison.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.triage.compare import CompareRunsInput, CompareRunsResult, compare_runs
from tools.triage.plan import TriagePlanInput, TriagePlanResult, triage_plan
from tools.triage.report import TriageReportInput, TriageReportResult, triage_report

__all__ = [
    "CompareRunsInput",
    "CompareRunsResult",
    "TriagePlanInput",
    "TriagePlanResult",
    "TriageReportInput",
    "TriageReportResult",
    "compare_runs",
    "triage_plan",
    "triage_report",
]
