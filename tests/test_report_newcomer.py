"""The report as a newcomer meets it (issue 34): the demo run from a fresh clone somewhere else shows paths relative to
its roots and none of the machine that recorded the samples; every cell of the report's table starts with the words
that decide, so that a cell cut short still says what it is; `--prometheus` adds the job's GPU history (issue 36)
from a real Prometheus, over the job's window."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mcp_server.render import render_markdown
from mcp_server.shown_paths import relative_paths
from tests.helpers import DATA, REPO, base_env, run_cli, stdio_client
from tests.tools.telemetry.history import Gpu, Prometheus, Scenario, prometheus_available, write_families
from tools.core.models import Truncation
from tools.triage import TriageReportResult

SAMPLES = REPO / "mcp_server" / "samples"
# Where the samples were recorded: the checkout, the lab's venv and the Python py-spy names (tests/data/logs/lab and
# tests/data/stacks PROVENANCE.md). None of it may reach a user's screen.
RECORDED = ("/work/main", "/tmp/labvenv", "/root/.pyenv")


def _report(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcp_server.cli", "report", *args], cwd=cwd, env=env or base_env(),
                          capture_output=True, text=True, timeout=180)


def test_the_demo_from_a_fresh_clone_elsewhere_shows_relative_paths_and_nothing_of_the_recording_machine(
        tmp_path: Path) -> None:
    clone, elsewhere = tmp_path / "clone", tmp_path / "elsewhere"
    for package in ("mcp_server", "tools", "sop"):
        shutil.copytree(REPO / package, clone / package, ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere.mkdir()
    env = base_env(PYTHONPATH=str(clone))
    imported = subprocess.run([sys.executable, "-c", "import mcp_server; print(mcp_server.__file__)"], cwd=elsewhere,
                              env=env, capture_output=True, text=True, timeout=60)
    assert imported.stdout.startswith(str(clone)), imported  # the clone's package and samples, not the checkout's
    as_json = _report(["--demo", "--json", "--no-health"], clone, env)
    as_text = _report(["--demo"], elsewhere, env)
    assert as_json.returncode == as_text.returncode == 2, as_json.stderr + as_text.stderr
    for said in (as_json.stdout, as_json.stderr, as_text.stdout, as_text.stderr):
        assert str(tmp_path) not in said and str(REPO) not in said
        assert not [place for place in RECORDED if place in said], said
    data = json.loads(as_json.stdout)
    evidence = {row["source"]: row["evidence"] for row in data["rows"]}
    assert evidence["analyze_flight_recorder"] == "tests/lab/rank_conditional_allgather.py:40 save_checkpoint"
    assert evidence["diagnose_logs"].endswith("first at logs/rank0.log:24")
    # Every input is named relative to the demo's root (the bundled samples), as a next call would name it.
    inputs = {entry["input"] for entry in data["coverage"]}
    assert {f"stacks/rank{r}.txt" for r in range(4)} | {f"logs/rank{r}.log" for r in range(4)} <= inputs
    assert not [name for name in inputs if name.startswith("/")], inputs


def test_the_samples_differ_from_their_recordings_only_by_the_checkouts_prefix() -> None:
    """mcp_server/samples/PROVENANCE.md: copies of the lab's recordings with `/work/main/` taken out of the paths."""

    def without_prefix(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("/work/main/", "")
        if isinstance(value, dict):
            return {without_prefix(k): without_prefix(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(without_prefix(v) for v in value)
        return value

    for rank in range(4):
        recorded = {f"logs/rank{rank}.log": DATA / "logs" / "lab" / "rank_conditional_allgather" / f"rank{rank}.log",
                    f"stacks/rank{rank}.txt": DATA / "stacks" / "rank_conditional_allgather" / "pyspy_text"
                    / f"rank{rank}.txt"}
        for sample, original in recorded.items():
            assert b"/work/main/" in original.read_bytes()  # what was taken out was there
            assert (SAMPLES / sample).read_bytes() == original.read_bytes().replace(b"/work/main/", b"")
        dump = DATA / "flight_recorder" / "rank_conditional_allgather" / f"rank_{rank}"
        sample_dump = pickle.loads((SAMPLES / "flight_recorder" / f"rank_{rank}").read_bytes())
        assert sample_dump == without_prefix(pickle.loads(dump.read_bytes()))
    trace = "worker0.1623143089861.pt.trace.json.gz"
    original = DATA / "traces" / "resnet50_num_workers_0" / trace
    assert (SAMPLES / "traces" / trace).read_bytes() == original.read_bytes()


def test_a_path_under_a_root_is_written_relative_to_it_and_nothing_else_is() -> None:
    roots = [Path("/data/job"), Path("/data")]
    said = {"evidence": ["first at /data/job/logs/rank0.log:24; also '/data/other/x.txt'", "/mnt/data/job/x.log",
                         "/database/x.log", "http://host/data/job/x", "s3://bucket/data/x"], "count": 3}
    assert relative_paths(said, roots) == {
        "evidence": ["first at logs/rank0.log:24; also 'other/x.txt'", "/mnt/data/job/x.log", "/database/x.log",
                     "http://host/data/job/x", "s3://bucket/data/x"], "count": 3}
    assert relative_paths("the root /data/job itself, and /data/job/", [Path("/data/job")]) == \
        "the root /data/job itself, and /data/job/"
    assert relative_paths("/etc/passwd and /proc", [Path("/")]) == "/etc/passwd and /proc"  # under / nothing is


def _category(symptom: str) -> str:
    return symptom.split(":")[0].split(" (")[0]


def test_every_cell_of_the_report_starts_with_its_category_or_verdict(tmp_path: Path) -> None:
    done = _report(["--demo", "--json", "--no-health"], tmp_path)
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    # The words each tool itself gives its findings, from each tool called alone on the same samples.
    own: dict[str, Any] = {}
    for name, args in {"dump-stacks": [str(SAMPLES / "stacks")],
                       "analyze-flight-recorder": [str(SAMPLES / "flight_recorder")],
                       "diagnose-logs": [str(SAMPLES / "logs" / "rank*.log")],
                       "summarize-trace": [str(SAMPLES / "traces")]}.items():
        alone = run_cli([name, *args, "--json", "--root", str(SAMPLES)], base_env(), cwd=tmp_path)
        assert alone.returncode in (1, 2), alone.stderr
        own[name] = json.loads(alone.stdout)
    words = {"dump_stacks": {s["kind"] for s in own["dump-stacks"]["suspects"]},
             "analyze_flight_recorder": {s["reason"] for s in own["analyze-flight-recorder"]["suspects"]},
             "diagnose_logs": {f["category"] for f in own["diagnose-logs"]["findings"]},
             "summarize_trace": {c["kind"] for c in own["summarize-trace"]["causes"]},
             "find_stragglers": {"unknown"}}
    rows = data["rows"]
    assert {row["source"] for row in rows} == set(words)
    for row in rows:
        assert _category(row["symptom"]) in words[row["source"]], row
    assert _category(rows[0]["symptom"]) == "other_collective" and rows[0]["root_cause"].startswith(
        "a collective only some ranks call")  # what it means first, where it is after
    # Cut to 20 characters a cell (the narrowest the budget makes), each still starts with them; another run's mark
    # stands beside the severity, where it is never cut.
    result = TriageReportResult.model_validate(data)
    narrow = result.model_copy(update={"truncated": Truncation(rows_cut={}, max_bytes=1024, hint="-", cell_chars=20)})
    text = render_markdown(narrow, "Triage report")
    header = "| severity | symptom | root cause | evidence | fix | verification |\n|---|---|---|---|---|---|\n"
    table = text.split(header, 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(table) == len(rows)
    for line, row in zip(table, rows, strict=True):
        severity, symptom = line.split(" | ")[:2]
        assert symptom.startswith(_category(row["symptom"])) and len(symptom) <= 20, (symptom, row)
        assert severity == "| " + row["severity"] + (" [another run]" if row["other_run"] else "")
    assert any(row["other_run"] for row in rows)


# ---------------------------------------------------------------------------------------------- --prometheus

LAB = DATA / "logs" / "lab" / "straggler_steps"  # the lab's 4-rank run, 2026-11-29 13:35:07 to 13:35:14 (UTC)
JOB_START = 1795959307  # 2026-11-29T13:35:07Z, its logs' first line
THROTTLED_FROM = JOB_START - 600  # node-a GPU 2 throttles from 10 minutes before the job to its end
XID_DAY_BEFORE = JOB_START - 86400 + 1800  # an XID on node-a GPU 1 a day before: another job's, outside the window


def _history(gpu: Gpu, concept: str, t: int) -> float | None:
    throttled = gpu.index == 2 and t >= THROTTLED_FROM
    if concept == "xid":
        return 79 if gpu.index == 1 and XID_DAY_BEFORE <= t < XID_DAY_BEFORE + 120 else 0
    return {"sm_clock": 1410 if throttled else 1980, "gpu_util": 97, "gpu_temp": 89 if throttled else 66,
            "power": 520 if throttled else 690, "fb_used": 61000, "clock_reasons": 0x60 if throttled else 0,
            "pcie_replay": 0}[concept]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Any:
    assert prometheus_available(), "prometheus and promtool are needed: scripts/test.sh installs Debian's package"
    gpus = [Gpu("node-a", i, f"GPU-0a0{i}5b59-2c1e-1e63-0068-9178c4298abd", f"00000000:{0x19 + 0x10 * i:02X}:00.0")
            for i in range(4)]
    day_before = XID_DAY_BEFORE - 1800
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), write_families([
        Scenario(gpus, _history, day_before, day_before + 3600), Scenario(gpus, _history, JOB_START - 3600,
                                                                          JOB_START + 1800)]))
    try:
        yield server.url
    finally:
        server.close()


def _telemetry_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [(row["symptom"], row["severity"]) for row in data["rows"] if row["source"] == "telemetry_history"]


@pytest.mark.anyio
async def test_report_prometheus_reads_the_jobs_gpu_history_over_its_window(prometheus: str, tmp_path: Path) -> None:
    assert time.time() > JOB_START + 1800  # the history lies in the past, where Prometheus serves it
    env = base_env(TZ="UTC")  # the lab's log times were written in UTC, without a zone
    logs = str(LAB / "rank*.log")
    done = _report(["--no-health", "--json", "--logs", logs, "--prometheus", prometheus, "--root", str(DATA)],
                   tmp_path, env)
    assert done.returncode == 2, done.stderr  # the throttling is critical
    assert "gpu-triage report: logs, telemetry ..." in done.stderr
    data = json.loads(done.stdout)
    runs = {run["tool"]: run for run in data["runs"]}
    assert runs["telemetry_history"]["severity"] == "crit", runs["telemetry_history"]
    # The throttling during the job, on its GPU; not the XID of the day before, outside the job's window.
    rows = _telemetry_rows(data)
    assert rows[0] == ("throttled: node-a GPU 2", "crit"), rows
    assert not [row for row in rows if row[0].startswith("xid")], rows
    throttled = next(row for row in data["rows"] if row["source"] == "telemetry_history")
    assert "SM clock 1980 -> 1410 MHz" in throttled["evidence"] and "from 2026-11-29T13:25:30Z" in throttled["evidence"]
    # Without the job's logs (or Slurm job) the window is the last hour, where this server holds nothing: the report
    # says it cannot tell, never that the GPUs are fine.
    alone = _report(["--no-health", "--json", "--prometheus", prometheus], tmp_path, env)
    assert alone.returncode == 4, alone.stderr
    unknown = json.loads(alone.stdout)["rows"]
    assert [(row["source"], row["severity"]) for row in unknown] == [("telemetry_history", "unknown")]
    assert "no sample of them from" in unknown[0]["root_cause"]
    assert data["rows"][0]["source"] == "telemetry_history"  # hardware first: nothing else can be trusted until then
    # The same argument over MCP.
    async with stdio_client(env, "--root", str(DATA)) as client:
        answer = await client.call_tool("triage_report", {"logs": [logs], "prometheus": prometheus, "health": False})
    assert answer.is_error is False and answer.structured_content is not None, answer.content
    assert _telemetry_rows(answer.structured_content) == rows
