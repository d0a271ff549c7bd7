"""gpu-triage report / triage_report: the SOP's answer from every tool that has inputs, on real artifacts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DATA, REPO, base_env, stdio_client

pytestmark = pytest.mark.anyio


def report(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcp_server.cli", "report", *args], cwd=cwd, env=base_env(),
                          capture_output=True, text=True, timeout=120)


def test_demo_on_the_bundled_samples_from_any_folder(tmp_path: Path) -> None:
    done = report(["--demo"], tmp_path)
    assert done.returncode == 2, done.stderr  # critical: the hang
    text = done.stdout
    assert text.startswith("## Triage report: crit")
    assert "| symptom | root cause | evidence | fix | verification |" in text
    lines = [line for line in text.splitlines() if line.startswith("| rank 0 ")]
    assert lines and "save_checkpoint" in lines[0] and "all_gather" in lines[0]
    assert "GPU idle: data_loading" in text and "flight_recorder_tutorial" in text
    assert len(text.encode()) <= 32 * 1024
    assert "gpu-triage report: health, logs, traces, stacks, flight recorder" in done.stderr
    written = report(["--demo", "--json", "--out", str(tmp_path / "r.json")], tmp_path)
    data = json.loads((tmp_path / "r.json").read_text())
    assert written.stdout == "" and data["severity"] == "crit"
    assert {r["source"] for r in data["rows"]} >= {"dump_stacks", "analyze_flight_recorder", "diagnose_logs",
                                                   "summarize_trace"}
    assert data["rows"][0]["source"] == "dump_stacks"  # the tool that names the culprit comes before the symptom
    assert {r["tool"] for r in data["runs"]} == {"health_check", "diagnose_logs", "find_stragglers",
                                                 "summarize_trace", "dump_stacks", "analyze_flight_recorder"}


def test_exit_codes_for_ci(tmp_path: Path) -> None:
    healthy = report(["--no-health", "--traces", str(DATA / "traces" / "resnet50_num_workers_0"), "--root",
                      str(REPO)], tmp_path)
    assert healthy.returncode == 1 and "GPU idle: data_loading" in healthy.stdout  # a warning only
    bad = report(["--pids", "one,two"], tmp_path)
    assert bad.returncode == 3 and "--pids 'one,two' is not a comma-separated list" in bad.stderr
    # A tool that cannot run is a row saying why; nothing found is a warning (the report could not look).
    outside = report(["--logs", "/etc/passwd", "--no-health", "--json"], tmp_path)
    runs = json.loads(outside.stdout)["runs"]
    assert outside.returncode == 1 and [r["tool"] for r in runs] == ["diagnose_logs", "find_stragglers"]
    assert all(r["severity"] is None and "outside the allowed roots" in r["conclusion"] for r in runs)


async def test_triage_report_over_mcp() -> None:
    args = {"logs": [str(DATA / "logs" / "lab" / "rank_conditional_allgather" / "rank*.log")],
            "fr_dir": str(DATA / "flight_recorder" / "rank_conditional_allgather"), "health": False}
    async with stdio_client(base_env(), "--root", str(REPO)) as client:
        result = await client.call_tool("triage_report", args)
    assert result.is_error is False, result.content[0].text
    data = result.structured_content
    assert data is not None and data["severity"] == "crit"
    assert data["rows"][0]["source"] == "analyze_flight_recorder" and "rank 0" in data["rows"][0]["symptom"]
    assert len(data["conclusion"]) <= 3 and data["references"]
