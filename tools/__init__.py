"""The triage tools: plain async functions over pydantic inputs, returning pydantic results.

One package per kind of evidence (gpu, logs, traces, hangs, stragglers, memory, serving, compile, interconnect, host;
cluster for the job's processes and nodes; compare for before/after; triage for the plan and the report over the
others), each over the shared tools.core.
No MCP import here: mcp_server/ registers these, and the CLI calls the same functions.
"""

import importlib

__all__ = [
    "analyze_flight_recorder",
    "analyze_kernels",
    "analyze_memory",
    "check_interconnect",
    "compare_runs",
    "diagnose_compile",
    "diagnose_logs",
    "dump_stacks",
    "find_stragglers",
    "gpu_activity",
    "grep_logs",
    "health_check",
    "inference_metrics",
    "nvidia_smi_query",
    "profile_cpu",
    "sample_host",
    "summarize_trace",
    "telemetry_history",
    "triage_plan",
    "triage_report",
]

# Tool name -> its package; imported on first use, so importing one tool does not import every package.
_PACKAGES = {
    "analyze_flight_recorder": "tools.hangs",
    "analyze_kernels": "tools.kernels",
    "analyze_memory": "tools.memory",
    "check_interconnect": "tools.interconnect",
    "compare_runs": "tools.compare",
    "diagnose_compile": "tools.compile",
    "diagnose_logs": "tools.logs",
    "dump_stacks": "tools.hangs",
    "find_stragglers": "tools.stragglers",
    "gpu_activity": "tools.gpu",
    "grep_logs": "tools.logs",
    "health_check": "tools.gpu",
    "inference_metrics": "tools.serving",
    "nvidia_smi_query": "tools.gpu",
    "profile_cpu": "tools.host",
    "sample_host": "tools.host",
    "summarize_trace": "tools.traces",
    "telemetry_history": "tools.telemetry",
    "triage_plan": "tools.triage",
    "triage_report": "tools.triage",
}


def __getattr__(name: str) -> object:
    package = _PACKAGES.get(name)
    if package is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(package), name)
