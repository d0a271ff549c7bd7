"""The triage tools: plain async functions over pydantic inputs, returning pydantic results.

No MCP import here: mcp_server/ registers these, and the CLI calls the same functions.
"""

__all__ = [
    "analyze_flight_recorder",
    "diagnose_logs",
    "dump_stacks",
    "find_stragglers",
    "grep_logs",
    "health_check",
    "nvidia_smi_query",
    "summarize_trace",
    "triage_plan",
    "triage_report",
]


def __getattr__(name: str) -> object:
    # Lazy, so importing one tool does not import them all.
    if name == "health_check":
        from tools.health import health_check

        return health_check
    if name == "nvidia_smi_query":
        from tools.smi_query import nvidia_smi_query

        return nvidia_smi_query
    if name == "diagnose_logs":
        from tools.log_diagnose import diagnose_logs

        return diagnose_logs
    if name == "grep_logs":
        from tools.log_grep import grep_logs

        return grep_logs
    if name == "summarize_trace":
        from tools.trace_summary import summarize_trace

        return summarize_trace
    if name == "dump_stacks":
        from tools.stacks import dump_stacks

        return dump_stacks
    if name == "analyze_flight_recorder":
        from tools.flight_recorder import analyze_flight_recorder

        return analyze_flight_recorder
    if name == "find_stragglers":
        from tools.stragglers import find_stragglers

        return find_stragglers
    if name == "triage_plan":
        from tools.triage_plan import triage_plan

        return triage_plan
    if name == "triage_report":
        from tools.report import triage_report

        return triage_report
    raise AttributeError(name)
