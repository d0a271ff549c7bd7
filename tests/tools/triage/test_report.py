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
    assert "| severity | symptom | root cause | evidence | fix | verification |" in text
    lines = [line for line in text.splitlines() if line.startswith("| crit | other_collective: rank 0 ")]
    assert lines and "save_checkpoint" in lines[0] and "all_gather" in lines[0]
    assert "| warn [another run] | data_loading: GPU idle |" in text and "flight_recorder_tutorial" in text
    assert len(text.encode()) <= 32 * 1024
    assert "gpu-triage report: health, logs, traces, stacks, flight recorder" in done.stderr
    written = report(["--demo", "--json", "--out", str(tmp_path / "r.json")], tmp_path)
    data = json.loads((tmp_path / "r.json").read_text())
    assert written.stdout == "" and data["severity"] == "crit"
    assert {r["source"] for r in data["rows"]} >= {"dump_stacks", "analyze_flight_recorder", "diagnose_logs",
                                                   "summarize_trace", "find_stragglers"}
    assert data["rows"][0]["source"] == "dump_stacks"  # the tool that names the culprit comes before the symptom
    # No NVML here: health_check says so in one unknown row (its own), not twice.
    # (a busy CI host may add a host warning beside it)
    assert [r["severity"] for r in data["rows"] if r["source"] == "health_check"].count("unknown") == 1
    assert {r["tool"] for r in data["runs"]} == {"health_check", "diagnose_logs", "find_stragglers",
                                                 "summarize_trace", "dump_stacks", "analyze_flight_recorder"}


def test_the_demo_tells_one_job_and_keeps_the_other_runs_trace_apart(tmp_path: Path) -> None:
    # The bundled hang (logs, stacks, flight recorder: 2026, 4 ranks) and a ResNet trace of another job (2021).
    done = report(["--demo", "--json", "--no-health"], tmp_path)
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    trace = "traces/worker0.1623143089861.pt.trace.json.gz"
    apart = [r for r in data["rows"] if r["other_run"]]
    assert apart and {r["source"] for r in apart} == {"summarize_trace"}
    assert all("recorded 2021-06-08" in r["other_run"] for r in apart)
    assert data["rows"][-len(apart):] == apart  # after this job's rows, whatever their severity
    conclusion = data["conclusion"]
    assert "data_loading" not in conclusion[0] and "problem(s); worst: other_collective: rank 0" in conclusion[0]
    assert conclusion[2].startswith(f"Caveat: the traces {trace} are another run's (recorded 2021-06-08")
    assert "find_stragglers cannot tell (needed: compute-only times (or traces) of all 4 ranks)" in conclusion[2]
    # find_stragglers joined no rank of this job to the other job's trace, and says it cannot tell: not ok.
    runs = {r["tool"]: r for r in data["runs"]}
    assert runs["find_stragglers"]["severity"] == "unknown" and "No straggler" not in runs["find_stragglers"][
        "conclusion"]
    unknown = [r for r in data["rows"] if r["severity"] == "unknown"]
    assert [r["source"] for r in unknown] == ["find_stragglers"] and "cannot tell" in unknown[0]["symptom"]
    # Coverage: the union of the tools', each entry naming its tool; the trace read by one and set apart by another.
    on_trace = {c["detail"].split(":")[0]: c["status"] for c in data["coverage"] if c["input"] == trace}
    assert on_trace == {"find_stragglers": "not_understood", "summarize_trace": "read"}
    named = ("diagnose_logs", "find_stragglers", "summarize_trace", "dump_stacks", "analyze_flight_recorder")
    assert data["coverage"] and all(c["detail"].startswith(named) for c in data["coverage"])


def test_unknown_is_a_row_and_the_exit_code_never_ok(tmp_path: Path) -> None:
    # The real logs of three ranks of the four of the lab's straggler run; the straggler's (rank 2) is not given.
    logs = DATA / "logs" / "lab" / "straggler_steps" / "rank[013].log"
    done = report(["--no-health", "--json", "--logs", str(logs), "--root", str(DATA)], tmp_path)
    assert done.returncode == 4, done.stderr
    data = json.loads(done.stdout)
    assert data["severity"] == "unknown"
    assert {r["tool"]: r["severity"] for r in data["runs"]} == {"diagnose_logs": "ok", "find_stragglers": "unknown"}
    assert [(r["severity"], r["source"]) for r in data["rows"]] == [("unknown", "find_stragglers")]
    assert "not read: rank 2" in data["rows"][0]["root_cause"]
    assert data["conclusion"][0] == "No problem found by 2 tool(s), but that is not an all-clear."
    assert "find_stragglers cannot tell" in data["conclusion"][1] and "missing for rank 2" in data["decides"]


def test_exit_codes_for_ci(tmp_path: Path) -> None:
    healthy = report(["--no-health", "--traces", str(DATA / "traces" / "resnet50_num_workers_0"), "--root",
                      str(REPO)], tmp_path)
    # A warning (data loading); find_stragglers on one rank's trace cannot tell, which is below a warning.
    assert healthy.returncode == 1 and "data_loading: GPU idle" in healthy.stdout
    assert "| unknown | unknown: find_stragglers cannot tell |" in healthy.stdout
    bad = report(["--pids", "one,two"], tmp_path)
    assert bad.returncode == 3 and "--pids: 'one,two' is not a comma-separated list" in bad.stderr
    # A tool that cannot run is a row saying why; when none could, nothing was looked at: unknown, not ok.
    outside = report(["--logs", "/etc/passwd", "--no-health", "--json"], tmp_path)
    data = json.loads(outside.stdout)
    runs = data["runs"]
    assert outside.returncode == 4 and [r["tool"] for r in runs] == ["diagnose_logs", "find_stragglers"]
    assert all(r["severity"] is None and "outside the allowed roots" in r["conclusion"] for r in runs)
    assert data["conclusion"][0].startswith("No tool could run") and data["decides"]


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
