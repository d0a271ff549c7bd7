"""The server driven over stdio by the SDK's real client: listing, calls, and the contract.

nvidia-smi is the recorded-output stand-in in tests/fakes/bin (no GPU in CI); all else is real.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import pytest

from mcp_server.registry import TOOLS
from tests.helpers import DATA, H200, OPEN_WORLD_TOOLS, REPO, RTX2080S, base_env, pid_alive, stdio_client, with_fake_smi

pytestmark = pytest.mark.anyio

# Every tool of the registry (tests/test_cli.py checks it against tools.__all__ and the CLI), and these among them.
TOOL_NAMES = {spec.name for spec in TOOLS}
assert TOOL_NAMES >= {"health_check", "nvidia_smi_query", "grep_logs", "diagnose_logs", "summarize_trace",
                      "dump_stacks", "analyze_flight_recorder", "find_stragglers", "triage_plan", "triage_report",
                      "analyze_memory", "inference_metrics", "diagnose_compile", "compare_runs", "check_interconnect",
                      "profile_cpu", "sample_host", "gpu_activity"}


async def test_tools_list_has_schemas_and_read_only_annotations() -> None:
    async with stdio_client(base_env()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOL_NAMES
    for tool in tools.values():
        assert tool.description and len(tool.description) > 80, tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert {"severity", "conclusion", "next_steps", "truncated"} <= set(tool.output_schema["properties"])
        hints = tool.annotations
        assert hints is not None
        # Open-world: the tools that can reach other machines (a /metrics URL; a job's nodes via Slurm or SSH).
        assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint) == (
            True, False, True, tool.name in OPEN_WORLD_TOOLS,
        )
    count = tools["nvidia_smi_query"].input_schema["properties"]["count"]
    assert (count["minimum"], count["maximum"]) == (1, 60)
    interval = tools["nvidia_smi_query"].input_schema["properties"]["interval_s"]
    assert interval["minimum"] == 0.2
    sample = tools["health_check"].input_schema["properties"]["sample_s"]
    assert (sample["minimum"], sample["maximum"]) == (0.1, 2.0)


async def test_call_returns_markdown_and_structured_content(tmp_path: Path) -> None:
    argv_log = tmp_path / "argv.jsonl"
    env = with_fake_smi(base_env(), f"capture:{H200},{RTX2080S}", argv_log)
    async with stdio_client(env) as client:
        result = await client.call_tool("nvidia_smi_query", {"count": 3, "interval_s": 0.2})
    assert result.is_error is False
    data = result.structured_content
    assert data is not None
    assert data["source"] == "nvidia-smi" and data["samples"] == 3
    assert len(data["rows"]) == 6  # 2 GPUs x 3 samples
    first = data["rows"][0]["values"]
    assert first["name"] == "NVIDIA H200" and first["memory.total"] == 143771 and first["power.draw"] == 77.71
    assert data["rows"][1]["values"]["ecc.errors.uncorrected.volatile.total"] is None
    assert data["rows"][1]["missing"]["ecc.errors.uncorrected.volatile.total"] == "N/A"
    text = result.content[0].text
    assert text.startswith("## nvidia-smi query (allow-listed): ok")
    assert "| index | name | utilization.gpu |" in text and "**Conclusion:**" in text
    conclusion = text.split("**Conclusion:**")[1].split("\n\n")[0]
    assert conclusion.count(". ") + 1 <= 3
    # Bounded sampling is repeated single queries, never nvidia-smi's own looping flags.
    calls = [json.loads(line) for line in argv_log.read_text().splitlines()]
    assert len(calls) == 3
    for call in calls:
        assert call["argv"][1] == "--format=csv,noheader,nounits"
        assert not {"-l", "-lms", "--loop", "--loop-ms"} & set(call["argv"])
        # The server's stdin is the JSON-RPC stream: children must never share it.
        assert call["stdin"] == "/dev/null"


async def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(tmp_path: Path) -> None:
    env = with_fake_smi(base_env(), f"capture:{H200}")
    async with stdio_client(env) as client:
        too_many = await client.call_tool("nvidia_smi_query", {"count": 61})
        unknown = await client.call_tool("nvidia_smi_query", {"samples": 5})
        not_a_field = await client.call_tool("nvidia_smi_query", {"fields": ["utilization.gpu; rm -rf /"]})
        too_long = await client.call_tool("nvidia_smi_query", {"count": 60, "interval_s": 5})
        wrong_type = await client.call_tool("health_check", {"sample_s": "slow"})
        still_ok = await client.call_tool("nvidia_smi_query", {"fields": ["index", "temperature.gpu"]})
    assert too_many.is_error and "count: Input should be less than or equal to 60 (got 61)" in too_many.content[0].text
    assert unknown.is_error and "samples: unknown argument" in unknown.content[0].text
    assert "Valid arguments: query, fields, gpus, count, interval_s, csv_path" in unknown.content[0].text
    assert not_a_field.is_error and "not documented gpu query fields" in not_a_field.content[0].text
    assert too_long.is_error and "longer than 60 s; lower count or interval_s" in too_long.content[0].text
    assert wrong_type.is_error and "sample_s" in wrong_type.content[0].text
    for bad in (too_many, unknown, not_a_field, too_long, wrong_type):
        assert "Traceback" not in bad.content[0].text and bad.structured_content is None
    assert still_ok.is_error is False
    assert still_ok.structured_content["rows"][0]["values"] == {"index": 0, "temperature.gpu": 28}


async def test_paths_outside_the_roots_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    capture = root / "capture.csv"
    capture.write_bytes((DATA / "nvidia_smi" / H200).read_bytes())
    outside = tmp_path / "secret.csv"
    outside.write_bytes(capture.read_bytes())
    (root / "link.csv").symlink_to(outside)
    (root / "sub").mkdir()
    async with stdio_client(base_env(), "--root", str(root)) as client:
        absolute = await client.call_tool("nvidia_smi_query", {"csv_path": str(outside)})
        dotdot = await client.call_tool("nvidia_smi_query", {"csv_path": "sub/../../secret.csv"})
        symlink = await client.call_tool("nvidia_smi_query", {"csv_path": "link.csv"})
        dash = await client.call_tool("nvidia_smi_query", {"csv_path": "-rf"})
        inside = await client.call_tool("nvidia_smi_query", {"csv_path": "capture.csv"})
    assert absolute.is_error and "outside the allowed roots" in absolute.content[0].text
    assert str(root) in absolute.content[0].text  # says which roots are allowed
    # One check on the resolved path: `..` and symlinks are followed, and the end must lie inside a root.
    assert dotdot.is_error and f"resolves to {outside}, outside the allowed roots" in dotdot.content[0].text
    assert symlink.is_error and f"resolves through a symlink to {outside}" in symlink.content[0].text
    assert dash.is_error and "starts with '-'" in dash.content[0].text
    assert inside.is_error is False
    assert inside.structured_content["source"] == "file"
    assert inside.structured_content["rows"][0]["values"]["name"] == "NVIDIA H200"


async def test_byte_budget_cuts_rows_and_says_how_many(tmp_path: Path) -> None:
    # A real 3-GPU capture polled many times: enough rows to overflow a small budget. (With its timestamp and bus id
    # it is read as 10 samples, so a per-GPU summary table comes too: a row of each table needs about 2.1 KB.)
    source = (DATA / "nvidia_smi" / "query_gpu_a100_3gpu_noheader_units.csv").read_text().splitlines()
    big = tmp_path / "polls.csv"
    big.write_text("\n".join(source * 10) + "\n")
    fields = ("timestamp,name,pci.bus_id,driver_version,pstate,pcie.link.gen.max,pcie.link.gen.current,"
              "temperature.gpu,utilization.gpu,utilization.memory,memory.total,memory.free,memory.used").split(",")
    async with stdio_client(base_env(), "--root", str(tmp_path), "--max-bytes", "3072") as client:
        result = await client.call_tool("nvidia_smi_query", {"csv_path": "polls.csv", "fields": fields})
    assert result.is_error is False
    text = result.content[0].text
    assert len(text.encode()) <= 3072
    data = result.structured_content
    total_rows = len(source) * 10
    kept = len(data["rows"])
    assert 1 <= kept < total_rows
    assert data["truncated"]["rows_cut"]["rows"] == total_rows - kept
    assert data["truncated"]["max_bytes"] == 3072
    assert f"{total_rows - kept} rows of `rows` not shown" in text
    assert "pass fewer fields or gpus, or lower count" in text


async def test_timeout_kills_the_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "smi.pid"
    env = with_fake_smi(base_env(FAKE_SMI_PIDFILE=str(pidfile)), "hang")
    async with stdio_client(env, "--timeout", "2") as client:
        started = time.monotonic()
        result = await client.call_tool("nvidia_smi_query", {})
        elapsed = time.monotonic() - started
        assert result.is_error
        assert "did not finish within 2 s" in result.content[0].text
        assert elapsed < 10
        child = int(pidfile.read_text())
        assert not pid_alive(child)
        # The server is still serving after a timeout.
        again = await client.call_tool("health_check", {"sample_s": 0.1, "include_kernel_log": False})
        assert again.is_error is False


async def test_client_cancellation_kills_the_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "smi.pid"
    env = with_fake_smi(base_env(FAKE_SMI_PIDFILE=str(pidfile)), "hang")
    async with stdio_client(env, "--timeout", "120") as client:
        with anyio.move_on_after(3):
            await client.call_tool("nvidia_smi_query", {})
        child = int(pidfile.read_text())
        deadline = time.monotonic() + 5
        while pid_alive(child) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert not pid_alive(child)
        follow_up = await client.call_tool("health_check", {"sample_s": 0.1, "include_kernel_log": False})
        assert follow_up.is_error is False


async def test_health_check_over_stdio_without_a_gpu() -> None:
    async with stdio_client(base_env()) as client:
        result = await client.call_tool("health_check", {"sample_s": 0.2, "top_processes": 3})
    assert result.is_error is False
    data = result.structured_content
    assert data["nvml"].startswith("unavailable: ")
    assert data["gpus"] == []
    checks = [f["check"] for f in data["findings"]]
    assert checks.count("NVML") == 1
    assert {"CPU load (1 min)", "host memory available", "swap", "CPU iowait"} <= set(checks)
    assert data["host"]["cpu_count"] == os.cpu_count()
    assert len(data["top_processes"]) == 3
    assert "**Findings**" in result.content[0].text


async def test_streamable_http_binds_loopback_by_default(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "mcp_server", "--http", str(port)], cwd=REPO,
                              env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from mcp import Client

        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.2)
        async with Client(url) as client:
            names = {t.name for t in (await client.list_tools()).tools}
        assert names == TOOL_NAMES
        import psutil

        listening = [c.laddr.ip for c in psutil.Process(server.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN]
        assert listening == ["127.0.0.1"]
    finally:
        server.terminate()
        server.wait(10)


async def test_sop_resources_behind_next_steps() -> None:
    from mcp import MCPError

    async with stdio_client(base_env()) as client:
        listed = {r.uri for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        index = (await client.read_resource("sop://index")).contents[0]
        branch = (await client.read_resource("sop://gpu_hardware")).contents[0]
        with pytest.raises(MCPError):
            await client.read_resource("sop://no_such_branch")
    assert "sop://index" in listed and "sop://{branch}" in templates
    assert index.mime_type == "text/markdown"
    assert "| gpu_hardware | GPU hardware or driver fault |" in index.text
    assert branch.text.startswith("# GPU hardware or driver fault (`gpu_hardware`)")


async def test_log_tools_over_stdio(tmp_path: Path) -> None:
    source = DATA / "logs" / "lab" / "gloo_timeout_rank3_absent" / "combined.log"
    (tmp_path / "job.log").write_bytes(source.read_bytes())
    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        grep = await client.call_tool("grep_logs", {"paths": ["job.log"], "preset": "hang", "max_matches": 5})
        diag = await client.call_tool("diagnose_logs", {"paths": ["*.log"]})
        bad = await client.call_tool("grep_logs", {"paths": ["job.log"], "pattern": "(a)\\1"})
    assert grep.is_error is False and 1 <= len(grep.structured_content["matches"]) <= 5
    assert "**Matches (grouped by rank)**" in grep.content[0].text
    assert diag.is_error is False and diag.structured_content["severity"] == "crit"
    timeout = next(f for f in diag.structured_content["findings"] if f["rule"] == "gloo_timeout")
    assert timeout["facts"]["silent_ranks"] == [3] and timeout["ranks"] == [0, 1, 2]
    assert bad.is_error and "invalid regex" in bad.content[0].text


async def test_summarize_trace_over_stdio_within_budget() -> None:
    shared = REPO.parent / "shared" / "data" / "traces"
    async with stdio_client(base_env(), "--root", str(shared)) as client:
        result = await client.call_tool("summarize_trace", {"path": "kineto/resnet50_num_workers_0"})
        outside = await client.call_tool("summarize_trace", {"path": "/etc"})
    assert result.is_error is False
    assert len(result.content[0].text.encode()) <= 8192
    assert result.structured_content["causes"][0]["kind"] == "data_loading"
    assert result.structured_content["ranks"][0]["idle_pct"] == 39.43
    assert outside.is_error and "outside the allowed roots" in outside.content[0].text
