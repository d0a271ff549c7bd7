"""Job logs: the line scanner (Hyperscan / RE2), grep_logs, and diagnose_logs with its rule set (sop/log_rules.toml).

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs, extract_facts, load_rules
from tools.logs.grep import GrepLogsInput, GrepLogsResult, grep_logs
from tools.logs.reader import (
    LOG_FORMATS,
    LineMatcher,
    ScanStats,
    compile_pattern,
    display_line,
    expand_log_inputs,
    log_coverage,
    map_files,
    scan_file,
)

__all__ = [
    "LOG_FORMATS",
    "DiagnoseLogsInput",
    "DiagnoseLogsResult",
    "GrepLogsInput",
    "GrepLogsResult",
    "LineMatcher",
    "ScanStats",
    "compile_pattern",
    "diagnose_logs",
    "display_line",
    "expand_log_inputs",
    "extract_facts",
    "grep_logs",
    "load_rules",
    "log_coverage",
    "map_files",
    "scan_file",
]
