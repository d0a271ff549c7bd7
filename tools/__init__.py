"""The triage tools: plain async functions over pydantic inputs, returning pydantic results.

No MCP import here: mcp_server/ registers these, and the CLI calls the same functions.
"""

import importlib

__all__ = [
    "analyze_flight_recorder",
    "analyze_memory",
    "compare_runs",
    "diagnose_compile",
    "diagnose_logs",
    "dump_stacks",
    "find_stragglers",
    "grep_logs",
    "health_check",
    "inference_metrics",
    "nvidia_smi_query",
    "summarize_trace",
    "triage_plan",
    "triage_report",
]

# Tool name -> its module; imported on first use, so importing one tool does not import them all. A module never
# bears its tool's name: importing the submodule tools.X would replace the attribute tools.X (the function).
_MODULES = {
    "analyze_flight_recorder": "tools.hangs.flight_recorder",
    "analyze_memory": "tools.memory.analyze",
    "compare_runs": "tools.triage.compare",
    "diagnose_compile": "tools.compile.diagnose",
    "diagnose_logs": "tools.logs.diagnose",
    "dump_stacks": "tools.hangs.stacks",
    "find_stragglers": "tools.stragglers.find",
    "grep_logs": "tools.logs.grep",
    "health_check": "tools.gpu.health",
    "inference_metrics": "tools.serving.metrics",
    "nvidia_smi_query": "tools.gpu.smi_query",
    "summarize_trace": "tools.traces.summary",
    "triage_plan": "tools.triage.plan",
    "triage_report": "tools.triage.report",
}


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(module), name)
