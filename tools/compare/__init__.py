"""Before and after a fix: two traces, two sets of step logs or two /metrics pages of the same job, compared beyond
their run-to-run noise. Apart from tools.triage so that the SOP's first call (triage_plan) never loads the readers
this one stands on (stragglers, traces, serving, numpy).

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.compare.runs import CompareRunsInput, CompareRunsResult, compare_runs

__all__ = ["CompareRunsInput", "CompareRunsResult", "compare_runs"]
