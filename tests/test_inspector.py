"""An independent client: the official MCP Inspector CLI (npm @modelcontextprotocol/inspector, --cli mode)
lists the tools and calls health_check. scripts/test.sh installs it into .cache/inspector."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import OPEN_WORLD_TOOLS, REPO

INSPECTOR = Path(os.environ.get("GPU_TRIAGE_INSPECTOR", REPO / ".cache/inspector/node_modules/.bin/mcp-inspector"))
SERVER = [sys.executable, "-m", "mcp_server"]


def _inspect(*args: str) -> dict:
    assert INSPECTOR.exists(), f"MCP Inspector not installed at {INSPECTOR}: run scripts/test.sh, which installs it"
    done = subprocess.run([str(INSPECTOR), "--cli", "-e", f"PYTHONPATH={REPO}", *SERVER, *args, "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["result"]


def test_inspector_lists_every_tool_with_output_schema_and_read_only_hint() -> None:
    tools = _inspect("--method", "tools/list", "--strict")["tools"]
    assert {t["name"] for t in tools} == {"health_check", "nvidia_smi_query", "grep_logs", "diagnose_logs",
                                          "summarize_trace", "dump_stacks", "analyze_flight_recorder",
                                          "find_stragglers", "triage_plan", "triage_report",
                                          "analyze_memory", "inference_metrics", "diagnose_compile", "compare_runs",
                                          "check_interconnect", "profile_cpu", "sample_host", "gpu_activity",
                                          "analyze_kernels", "telemetry_history"}
    for tool in tools:
        assert tool["outputSchema"]["type"] == "object"
        assert tool["annotations"] == {"title": tool["title"], "readOnlyHint": True, "destructiveHint": False,
                                       "idempotentHint": True, "openWorldHint": tool["name"] in OPEN_WORLD_TOOLS}


def test_inspector_calls_health_check() -> None:
    result = _inspect("--method", "tools/call", "--tool-name", "health_check", "--tool-arg", "sample_s=0.2",
                      "--tool-arg", "top_processes=2")
    assert result["isError"] is False
    assert result["content"][0]["text"].startswith("## GPU and host health check: ")
    data = result["structuredContent"]
    assert data["nvml"].startswith("unavailable: ") and len(data["top_processes"]) == 2


def test_inspector_lists_and_gets_prompts_and_reads_the_sop() -> None:
    prompts = {p["name"] for p in _inspect("--method", "prompts/list")["prompts"]}
    assert {"triage", "triage_report", "sop_gpu_utilization_low", "sop_nccl_hang_or_slow"} <= prompts
    got = _inspect("--method", "prompts/get", "--prompt-name", "triage", "--prompt-args",
                   "symptom=GPU util 忽高忽低")
    text = got["messages"][0]["content"]["text"]
    assert "SOP branch: `gpu_utilization_low`" in text and "nvidia_smi_query" in text
    resources = {r["uri"] for r in _inspect("--method", "resources/list")["resources"]}
    assert {"sop://index", "sop://rules"} <= resources
    index = _inspect("--method", "resources/read", "--uri", "sop://index")["contents"][0]
    assert index["mimeType"] == "text/markdown" and "gpu_utilization_low" in index["text"]


def test_inspector_sends_one_path_as_a_string_for_a_list_of_paths() -> None:
    """`--tool-arg paths=logs/rank*.log` sends a string where the schema has a list: taken as a list of one."""
    result = _inspect("--method", "tools/call", "--tool-name", "diagnose_logs", "--tool-arg",
                      "paths=mcp_server/samples/logs/rank*.log")
    assert result["isError"] is False, result["content"]
    files = [f["file"] for f in result["structuredContent"]["files"]]
    assert files == [f"mcp_server/samples/logs/rank{r}.log" for r in range(4)]
