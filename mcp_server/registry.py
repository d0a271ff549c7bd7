"""The table of tools: one row per tool, read by the MCP server and the CLI alike.

The tool name is the function name; the CLI subcommand is the same with dashes (`cli` names the one exception). A row
names its package (tools/<domain>/) and objects instead of importing them, so the CLI imports only the package of the
tool it runs (startup time); the server imports every tool once, when it registers them.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the server starts without the models (startup time); a tool's call imports them
    from tools.core.context import ToolContext
    from tools.core.models import InputModel, ToolResult

__all__ = ["TOOLS", "ToolSpec", "tool_by_name"]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    package: str
    input_name: str
    result_name: str
    title: str
    read_only: bool = True
    # True for a tool that can reach outside this host's files and processes (MCP's openWorldHint): a /metrics URL,
    # or a job's other nodes through Slurm or SSH (slurm_job, hosts).
    open_world: bool = False
    # The CLI subcommand when it is not the name with dashes: triage_report is `gpu-triage report`.
    cli: str | None = None

    @cached_property
    def _package(self) -> Any:
        return importlib.import_module(self.package)

    @property
    def function(self) -> Callable[[Any, ToolContext], Awaitable[ToolResult]]:
        return getattr(self._package, self.name)  # type: ignore[no-any-return]

    @property
    def input_model(self) -> type[InputModel]:
        return getattr(self._package, self.input_name)  # type: ignore[no-any-return]

    @property
    def result_model(self) -> type[ToolResult]:
        return getattr(self._package, self.result_name)  # type: ignore[no-any-return]

    @property
    def cli_name(self) -> str:
        return self.cli or self.name.replace("_", "-")

    @property
    def description(self) -> str:
        return " ".join((self.function.__doc__ or "").split())


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("health_check", "tools.gpu", "HealthCheckInput", "HealthCheckResult", "GPU and host health check",
             open_world=True),
    ToolSpec("nvidia_smi_query", "tools.gpu", "NvidiaSmiQueryInput", "NvidiaSmiQueryResult",
             "nvidia-smi query (allow-listed)"),
    ToolSpec("gpu_activity", "tools.gpu", "GpuActivityInput", "GpuActivityResult",
             "What the SMs do: SM activity, occupancy, tensor / DRAM / NVLink use (GPM, DCGM)", open_world=True),
    ToolSpec("grep_logs", "tools.logs", "GrepLogsInput", "GrepLogsResult", "Log search across ranks"),
    ToolSpec("diagnose_logs", "tools.logs", "DiagnoseLogsInput", "DiagnoseLogsResult", "Log diagnosis"),
    ToolSpec("summarize_trace", "tools.traces", "SummarizeTraceInput", "SummarizeTraceResult",
             "Profiler trace summary"),
    ToolSpec("dump_stacks", "tools.hangs", "DumpStacksInput", "DumpStacksResult", "Per-rank Python stacks",
             open_world=True),
    ToolSpec("analyze_flight_recorder", "tools.hangs", "AnalyzeFlightRecorderInput",
             "AnalyzeFlightRecorderResult", "Flight-recorder analysis"),
    ToolSpec("find_stragglers", "tools.stragglers", "FindStragglersInput", "FindStragglersResult",
             "Straggler ranks", open_world=True),
    ToolSpec("analyze_memory", "tools.memory", "AnalyzeMemoryInput", "AnalyzeMemoryResult",
             "GPU memory / OOM analysis"),
    ToolSpec("analyze_kernels", "tools.kernels", "AnalyzeKernelsInput", "AnalyzeKernelsResult",
             "Inside the hot kernels (Nsight Compute reports, ncu CSV and text)"),
    ToolSpec("inference_metrics", "tools.serving", "InferenceMetricsInput", "InferenceMetricsResult",
             "Inference server metrics (vLLM / SGLang)", open_world=True),
    ToolSpec("telemetry_history", "tools.telemetry", "TelemetryHistoryInput", "TelemetryHistoryResult",
             "GPU telemetry history from Prometheus (dcgm-exporter): what changed on which GPU", open_world=True),
    ToolSpec("diagnose_compile", "tools.compile", "DiagnoseCompileInput", "DiagnoseCompileResult",
             "torch.compile graph breaks and recompiles"),
    ToolSpec("check_interconnect", "tools.interconnect", "CheckInterconnectInput", "CheckInterconnectResult",
             "Interconnect check (NCCL transports, nccl-tests, NVLink/IB/Ethernet links)", open_world=True),
    ToolSpec("profile_cpu", "tools.host", "ProfileCpuInput", "ProfileCpuResult",
             "CPU profile of the job's processes (py-spy record)", open_world=True),
    ToolSpec("sample_host", "tools.host", "SampleHostInput", "SampleHostResult",
             "Host sample: disks, CPUs, memory (live /proc, or iostat / vmstat captures)", open_world=True),
    ToolSpec("triage_plan", "tools.triage", "TriagePlanInput", "TriagePlanResult", "Triage plan (SOP)"),
    ToolSpec("triage_report", "tools.triage", "TriageReportInput", "TriageReportResult",
             "Triage report", open_world=True, cli="report"),
    ToolSpec("compare_runs", "tools.compare", "CompareRunsInput", "CompareRunsResult", "Before/after comparison"),
)


def tool_by_name(name: str) -> ToolSpec | None:
    return next((spec for spec in TOOLS if spec.name == name), None)
