"""The SOP's own tools, over the others: the plan for a symptom, and the report that runs every tool that has inputs
(the before/after comparison, in tools.compare, included).

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.triage.plan import TriagePlanInput, TriagePlanResult, triage_plan
from tools.triage.report import TriageReportInput, TriageReportResult, triage_report

__all__ = [
    "TriagePlanInput",
    "TriagePlanResult",
    "TriageReportInput",
    "TriageReportResult",
    "triage_plan",
    "triage_report",
]
