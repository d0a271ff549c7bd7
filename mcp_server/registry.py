"""The table of tools: one row per tool, read by the MCP server and the CLI alike.

The tool name is the function name; the CLI subcommand is the same with dashes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tools.context import ToolContext
from tools.health import HealthCheckInput, HealthCheckResult, health_check
from tools.log_diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs
from tools.log_grep import GrepLogsInput, GrepLogsResult, grep_logs
from tools.models import InputModel, ToolResult
from tools.smi_query import NvidiaSmiQueryInput, NvidiaSmiQueryResult, nvidia_smi_query

__all__ = ["TOOLS", "ToolSpec", "tool_by_name"]


@dataclass(frozen=True)
class ToolSpec:
    function: Callable[[Any, ToolContext], Awaitable[ToolResult]]
    input_model: type[InputModel]
    result_model: type[ToolResult]
    title: str
    read_only: bool = True

    @property
    def name(self) -> str:
        return self.function.__name__

    @property
    def cli_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def description(self) -> str:
        return " ".join((self.function.__doc__ or "").split())


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(health_check, HealthCheckInput, HealthCheckResult, "GPU and host health check"),
    ToolSpec(nvidia_smi_query, NvidiaSmiQueryInput, NvidiaSmiQueryResult, "nvidia-smi query (allow-listed)"),
    ToolSpec(grep_logs, GrepLogsInput, GrepLogsResult, "Log search across ranks"),
    ToolSpec(diagnose_logs, DiagnoseLogsInput, DiagnoseLogsResult, "Log diagnosis"),
)


def tool_by_name(name: str) -> ToolSpec | None:
    return next((spec for spec in TOOLS if spec.name == name), None)
