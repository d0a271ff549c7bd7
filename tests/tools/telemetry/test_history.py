"""telemetry_history against a real Prometheus 2.42 (Debian's package, installed by scripts/test.sh) holding the
histories of tests/tools/telemetry/scenarios.py in dcgm-exporter's own names and labels: each verdict's node, GPU,
reason, code and start time (to the step), the 4.9 names, MIG, a window past the data, a server that never answers,
wrong URLs, and the bound on what each range query asks for (through a recording proxy); hardware counters rising
(ECC, row remap, PCIe replays) with their rise and time; the step-time change of the job's own logs matched with the
GPU series that changed with it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import TextContent

from tests.helpers import DATA, REPO, base_env, run_cli, stdio_client
from tests.tools.telemetry.history import Prometheus, prometheus_available, write_families
from tests.tools.telemetry.scenarios import (
    DAY1,
    DAY2,
    DAY3,
    DAY4,
    DAY5,
    DBE_AT,
    GPU_SLOW_AT,
    HOUR,
    IDLE_AT,
    MIG_IDLE_AT,
    MIG_UUID,
    POWER_CAP_AT,
    REMAP_FAILED_AT,
    REPLAY_AT,
    SLOW_AT,
    STEP_MS_AFTER,
    STEP_MS_BEFORE,
    STEPS_SLOW_AT,
    THROTTLE_AT,
    XID_AT,
    scenarios,
    step_log_lines,
    uuid,
)
from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, Unavailable, UnreadableInput
from tools.core.limits import TELEMETRY_QUERY_POINTS
from tools.core.models import Severity
from tools.telemetry import TelemetryHistoryInput, TelemetryHistoryResult, telemetry_history
from tools.telemetry.client import PromClient

pytestmark = pytest.mark.anyio


def iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert prometheus_available(), "prometheus and promtool are needed: scripts/test.sh installs Debian's package"
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), write_families(scenarios()))
    try:
        yield server.url
    finally:
        server.close()


def run(url: str, start: int | None, end: int | None, timeout_s: float = 60, roots: tuple[Path, ...] = (REPO,),
        **args: Any) -> TelemetryHistoryResult:
    window = {} if start is None or end is None else {"start": iso(start), "end": iso(end)}
    params = TelemetryHistoryInput.model_validate({"url": url, **window, **args})
    return anyio.run(telemetry_history, params, ToolContext(roots=roots, timeout_s=timeout_s))


def by_kind(result: TelemetryHistoryResult, kind: str) -> list[Any]:
    return [f for f in result.findings if f.kind == kind]


def test_day1_each_verdict_names_node_gpu_and_start(prometheus: str) -> None:
    result = run(prometheus, DAY1, DAY1 + 2 * HOUR)
    assert (result.severity, result.verdict) == (Severity.crit, "xid")
    [xid] = by_kind(result, "xid")
    assert (xid.node, xid.gpu, xid.uuid, xid.xid_code, xid.began) == ("node-c", "1", uuid(2, 1), 79, iso(XID_AT))
    assert xid.severity is Severity.crit and xid.meaning == "GPU has fallen off the bus"
    assert f"then silent: no sample of this GPU after {iso(XID_AT + 30)}" in xid.evidence
    [throttled] = by_kind(result, "throttled")
    assert (throttled.node, throttled.gpu, throttled.began) == ("node-b", "2", iso(THROTTLE_AT))
    assert throttled.reasons == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert throttled.severity is Severity.crit
    assert "SM clock 1980 -> 1410 MHz" in throttled.evidence and "GPU temperature 66 -> 89 C" in throttled.evidence
    [idle] = by_kind(result, "held_idle")
    assert (idle.node, idle.gpu, idle.began) == ("node-a", "3", iso(IDLE_AT))
    assert "for 80 min" in idle.evidence and "holding 30720 MiB" in idle.evidence and "hpc_job=4343" in idle.evidence
    [slow] = by_kind(result, "below_peers")
    assert (slow.node, slow.gpu, slow.began) == ("node-d", "0,1,2,3", iso(SLOW_AT))
    assert "4 of 4 GPUs at 56 % utilisation" in slow.evidence
    # Nothing else: the healthy GPUs and node-c's other GPUs are not flagged.
    assert len(result.findings) == 4
    assert [(e.time, e.node, e.gpu) for e in result.timeline] == [
        (iso(IDLE_AT), "node-a", "3"), (iso(SLOW_AT), "node-d", "0,1,2,3"), (iso(THROTTLE_AT), "node-b", "2"),
        (iso(XID_AT), "node-c", "1"), (iso(XID_AT + 30), "node-c", "1")]
    rows = {(g.node, g.gpu): g for g in result.gpus}
    assert len(rows) == 16 and rows[("node-b", "2")].sm_clock_mhz.last == 1410
    assert rows[("node-c", "1")].last_sample == iso(XID_AT + 30) and rows[("node-a", "0")].samples == 240
    assert result.host_label == "Hostname" and result.server == "2.42.0+ds"
    assert {m.metric for m in result.metrics} >= {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS",
                                                  "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
    assert result.coverage[0].status.value == "read"
    # No step logs: no step_change, and the coverage says what they would decide.
    assert result.step_change is None and result.window_source == "start/end"
    [missing] = [c for c in result.coverage if c.input == "step_logs"]
    assert missing.status.value == "partial" and "would decide what changed" in missing.detail


def test_hardware_counters_rising_name_gpu_counter_rise_and_time(prometheus: str) -> None:
    result = run(prometheus, DAY4, DAY4 + 2 * HOUR)
    assert (result.severity, result.verdict) == (Severity.crit, "hardware_errors")
    found = {(f.node, f.gpu, f.uuid, f.metric, f.rise, f.began, f.severity) for f in result.findings}
    assert found == {
        ("hw-n2", "3", uuid(21, 3), "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2.0, iso(DBE_AT), Severity.crit),
        ("hw-n2", "3", uuid(21, 3), "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1.0, iso(DBE_AT), Severity.crit),
        ("hw-n2", "3", uuid(21, 3), "DCGM_FI_DEV_ROW_REMAP_FAILURE", 1.0, iso(REMAP_FAILED_AT), Severity.crit),
        ("hw-n1", "0", uuid(20, 0), "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 50.0, iso(REPLAY_AT), Severity.warn)}
    assert all(f.kind == "hardware_errors" and f.sop_branch == "gpu_hardware" for f in result.findings)
    [replays] = [f for f in result.findings if f.metric == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert replays.evidence == f"PCIe replays (DCGM_FI_DEV_PCIE_REPLAY_COUNTER) rose by 50 from {iso(REPLAY_AT)}"
    assert [(e.time, e.node, e.gpu) for e in result.timeline] == [
        (iso(DBE_AT), "hw-n2", "3"), (iso(DBE_AT), "hw-n2", "3"), (iso(REPLAY_AT), "hw-n1", "0"),
        (iso(REMAP_FAILED_AT), "hw-n2", "3")]
    # The other GPUs' counters hold still (PCIe replays at 7 the whole window): not flagged.
    assert {(f.node, f.gpu) for f in result.findings} == {("hw-n2", "3"), ("hw-n1", "0")}


def _write_step_logs(folder: Path) -> tuple[float, int]:
    """Two ranks' logs of the day-5 job, one line every ten steps: rank 0 as Python logging writes it (local time of
    a node in UTC+8, no zone), rank 1 in ISO 8601 with Z. Returns the time and step of the first slow line."""
    lines = step_log_lines(DAY5 + 300, DAY5 + 90 * 60)

    def stamp(t: float, offset_h: int, sep: str, frac: str) -> str:
        moment = datetime.fromtimestamp(t + offset_h * 3600, UTC)
        return moment.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + f"{frac}{int(round(t * 1000)) % 1000:03d}"

    (folder / "rank0.log").write_text("".join(
        f"{stamp(t, 8, ' ', ',')} INFO train.py:212 step {step} time {ms:.1f} ms loss 2.31\n" for t, step, ms in lines))
    (folder / "rank1.log").write_text("".join(
        f"{stamp(t, 0, 'T', '.')}Z step={step} step_time_ms={ms:.1f} loss=2.31\n" for t, step, ms in lines))
    t, step, _ = next(line for line in lines if line[2] == STEP_MS_AFTER)
    return t, step


def test_step_change_names_the_gpu_whose_series_changed_when_the_job_slowed(prometheus: str, tmp_path: Path) -> None:
    slow_at, slow_step = _write_step_logs(tmp_path)
    assert slow_at > STEPS_SLOW_AT > GPU_SLOW_AT
    # No start or end: the step logs' times set the window.
    result = run(prometheus, None, None, roots=(tmp_path,), step_logs=[str(tmp_path / "rank*.log")],
                 step_log_utc_offset="+08:00")
    assert result.window_source == "the step logs' times"
    step = result.step_change
    assert step is not None and step.status == "slowed"
    assert (step.began, step.step, step.before, step.after, step.unit, step.ranks) == (
        iso(int(slow_at)), slow_step, STEP_MS_BEFORE, STEP_MS_AFTER, "ms", 2)
    assert step.gpus == ["sc-n2/1"]
    [changed] = by_kind(result, "step_change")
    assert (changed.node, changed.gpu, changed.uuid, changed.began) == ("sc-n2", "1", uuid(31, 1), iso(int(slow_at)))
    own = {(c.measure, c.metric, c.direction, c.before, c.after, c.began) for c in changed.changes if not c.job_wide}
    assert own == {("SM clock", "DCGM_FI_DEV_SM_CLOCK", "fell", 1980.0, 1500.0, iso(GPU_SLOW_AT)),
                   ("power draw", "DCGM_FI_DEV_POWER_USAGE", "fell", 685.0, 470.0, iso(GPU_SLOW_AT)),
                   ("clock event reasons", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "set", 0.0, 8.0, iso(GPU_SLOW_AT))}
    assert changed.reasons == ["hw_slowdown"]
    # Every GPU moved a third less over NVLink once the steps slowed: the job's, not this GPU's own change.
    [shared] = [c for c in changed.changes if c.job_wide]
    assert (shared.measure, shared.direction, shared.began) == ("NVLink throughput", "fell", iso(STEPS_SLOW_AT))
    assert "NVLink throughput fell on 4 of 4 GPUs" in changed.evidence
    assert changed.evidence.startswith(f"step time 800 -> 1200 ms from {iso(int(slow_at))} (step {slow_step})")
    # The GPU's own history says the same: it throttles from the minute before.
    [throttled] = by_kind(result, "throttled")
    assert (throttled.node, throttled.gpu, throttled.began, throttled.reasons) == (
        "sc-n2", "1", iso(GPU_SLOW_AT), ["hw_slowdown"])
    rows = {c.input: c for c in result.coverage}
    assert rows["rank0.log"].status.value == "read" and "times without a zone read as UTC+08:00" in rows[
        "rank0.log"].detail
    assert rows["rank1.log"].status.value == "read" and "without a zone" not in rows["rank1.log"].detail


def test_step_logs_without_timestamps_leave_step_change_unknown(prometheus: str) -> None:
    # A real key=value step log (tests/data/logs/steps/PROVENANCE.md) has step times but no time of day; the window
    # (day 2 before its power cap) holds no GPU finding, so the call is unknown, never a guess.
    log = DATA / "logs" / "steps" / "keyvalue_rank3.log"
    result = run(prometheus, DAY2, DAY2 + 50 * 60, step_logs=[str(log)])
    assert (result.severity, result.verdict, result.findings) == (Severity.unknown, "unknown", [])
    assert result.step_change is not None and result.step_change.status == "unknown"
    assert result.decides is not None and "a time on each line" in result.decides
    [row] = [c for c in result.coverage if c.input.endswith("keyvalue_rank3.log")]
    assert row.status.value == "partial" and "none with a timestamp" in row.detail


def test_job_and_nodes_narrow_the_selection(prometheus: str) -> None:
    result = run(prometheus, DAY1, DAY1 + 2 * HOUR, job="4242", nodes=["node-b"])
    assert {g.node for g in result.gpus} == {"node-b"} and len(result.gpus) == 4
    assert [(f.kind, f.gpu, f.began) for f in result.findings] == [("throttled", "2", iso(THROTTLE_AT))]
    # The job's window ends before the XID: it is not there, and node-c is not read at all.
    early = run(prometheus, DAY1, XID_AT - 600, gpus=["1"], nodes=["node-c"])
    assert early.findings == [] and early.severity is Severity.ok and early.verdict == "none"
    assert [g.gpu for g in early.gpus] == ["1"]


def test_4_9_names_and_units(prometheus: str) -> None:
    result = run(prometheus, DAY2, DAY2 + 2 * HOUR)
    [capped] = result.findings
    assert (capped.kind, capped.node, capped.gpu, capped.began) == ("throttled", "gpu-n2", "1", iso(POWER_CAP_AT))
    assert capped.reasons == ["sw_power_cap"] and capped.severity is Severity.warn
    assert "SM clock 1980 -> 1500 MHz" in capped.evidence  # Hz read as MHz
    assert result.host_label == "hostname"
    assert {m.metric for m in result.metrics} >= {"DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_FI_DEV_GPU_UTIL_RATIO",
                                                  "DCGM_FI_DEV_XID_ERROR"}
    assert {g.activity_pct.median for g in result.gpus} == {98.0}  # the 0-1 ratio read as %


def test_mig_instances(prometheus: str) -> None:
    result = run(prometheus, DAY3, DAY3 + 2 * HOUR)
    [idle] = result.findings
    assert (idle.kind, idle.node, idle.gpu, idle.mig, idle.uuid, idle.began) == (
        "held_idle", "gsrh100-074", "0", "1g.10gb/9", MIG_UUID, iso(MIG_IDLE_AT))
    assert "graphics engine active" in idle.evidence and "memory use not exported" in idle.evidence
    assert "pod=model-playground-stg/tts-predictor-00011-deployment-5554f75554-8j8pl" in idle.evidence
    # Instance 8 idles too, but no pod holds it; GPU_UTIL reads 0 on every MIG instance and is not used there.
    assert sorted(g.mig or "" for g in result.gpus) == ["1g.10gb/7", "1g.10gb/8", "1g.10gb/9"]


def test_window_past_the_data_is_unknown(prometheus: str) -> None:
    result = run(prometheus, DAY1 - 40 * 86400, DAY1 - 40 * 86400 + HOUR)
    assert (result.severity, result.verdict, result.findings) == (Severity.unknown, "unknown", [])
    assert "no sample of them" in result.conclusion[0] and "retention: 100y" in result.conclusion[0]
    assert result.decides and "inside the server's retention" in result.decides
    unmatched = run(prometheus, DAY1, DAY1 + HOUR, nodes=["node-x"])
    assert unmatched.severity is Severity.unknown
    assert unmatched.decides and "hosts seen: node-a, node-b, node-c, node-d" in unmatched.decides


class Recorder(BaseHTTPRequestHandler):
    """A proxy in front of Prometheus that records each request's form and headers."""

    target = ""
    seen: list[tuple[str, dict[str, list[str]], dict[str, str]]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._forward(body)

    def do_GET(self) -> None:  # noqa: N802
        self._forward(None)

    def _forward(self, body: bytes | None) -> None:
        path, _, query = self.path.partition("?")
        form = urllib.parse.parse_qs(body.decode() if body else query)
        Recorder.seen.append((path, form, dict(self.headers)))
        request = urllib.request.Request(Recorder.target + self.path, data=body, method=self.command,
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, data = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, data = exc.code, exc.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def proxy(prometheus: str) -> Iterator[str]:
    Recorder.target, Recorder.seen = prometheus, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_range_queries_stay_within_the_point_budget(proxy: str) -> None:
    # The CLI as a process, the bearer token in its environment as a user sets it; the recording proxy sees what
    # reaches the server. step_s=1 over two hours: 7,201 points a series, so at most one GPU per range query.
    done = run_cli(["telemetry-history", proxy, "--start", iso(DAY1), "--end", iso(DAY1 + 2 * HOUR), "--step-s", "1",
                    "--json"], base_env(GPU_TRIAGE_PROMETHEUS_TOKEN="s3cret-token-value"), timeout=120)
    assert done.returncode == 2, done.stderr  # crit: the XID 79
    result = json.loads(done.stdout)
    assert [f["began"] for f in result["findings"] if f["kind"] == "throttled"] == [iso(THROTTLE_AT)]
    ranges = [form for path, form, _ in Recorder.seen if path.endswith("/query_range")]
    assert ranges
    for form in ranges:
        start, end, step = float(form["start"][0]), float(form["end"][0]), float(form["step"][0])
        assert (end - start) / step + 1 <= TELEMETRY_QUERY_POINTS
    assert result["points_read"] > 0 and result["queries"] == len(Recorder.seen)
    assert all(headers.get("Authorization") == "Bearer s3cret-token-value" for _, _, headers in Recorder.seen)
    assert all(form.get("timeout") for path, form, _ in Recorder.seen if path.endswith(("/query", "/query_range")))
    assert "s3cret" not in done.stdout and "s3cret" not in done.stderr


def test_api_errors_become_messages(prometheus: str) -> None:
    client = PromClient(prometheus, time.monotonic() + 30)
    with pytest.raises(BadInput, match=r"bad_data: exceeded maximum resolution of 11,000 points"):
        client.range("DCGM_FI_DEV_SM_CLOCK", DAY1, DAY1 + 2 * HOUR, 0.5)
    with pytest.raises(BadInput, match=r"bad_data: .*parse error"):
        client.instant("max_over_time(DCGM_FI_DEV_SM_CLOCK[5m]", DAY1)
    with pytest.raises(UnreadableInput, match=r"answered HTTP 404 .* not a Prometheus API answer"):
        run(prometheus + "/no/such/prefix", DAY1, DAY1 + HOUR)


def test_wrong_urls(prometheus: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    with pytest.raises(Unavailable, match=r"cannot reach http://127.0.0.1:\d+: .*refused"):
        run(f"http://127.0.0.1:{closed_port}", DAY1, DAY1 + HOUR)
    with pytest.raises(BadInput, match="is not loopback and not in allow_host"):
        run("http://192.0.2.7:9090", DAY1, DAY1 + HOUR)
    with pytest.raises(BadInput, match="credentials in the URL"):
        run("http://user:pw@127.0.0.1:9090", DAY1, DAY1 + HOUR)
    with pytest.raises(BadInput, match="ends .* before it starts"):
        run(prometheus, DAY1 + HOUR, DAY1)


def test_a_server_that_never_answers_meets_the_deadline() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections (the kernel does) and never sends a byte
    try:
        started = time.monotonic()
        with pytest.raises(LimitExceeded, match=r"did not answer .* within \d+\.\d s"):
            run(f"http://127.0.0.1:{listener.getsockname()[1]}", DAY1, DAY1 + HOUR, timeout_s=3)
        assert time.monotonic() - started < 10  # the call's 3 s deadline, not the socket's default
    finally:
        listener.close()


async def test_through_the_mcp_client_and_the_cli(prometheus: str) -> None:
    async with stdio_client(base_env()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        called = await client.call_tool("telemetry_history", {
            "url": prometheus, "start": iso(DAY1), "end": iso(DAY1 + 2 * HOUR)})
    hints = tools["telemetry_history"].annotations
    assert hints is not None and (hints.read_only_hint, hints.open_world_hint) == (True, True)
    assert called.is_error is False and called.structured_content is not None
    data = called.structured_content
    found = {(f["kind"], f["node"], f["gpu"], f["began"]) for f in data["findings"]}
    assert found == {("xid", "node-c", "1", iso(XID_AT)), ("throttled", "node-b", "2", iso(THROTTLE_AT)),
                     ("held_idle", "node-a", "3", iso(IDLE_AT)), ("below_peers", "node-d", "0,1,2,3", iso(SLOW_AT))}
    text = called.content[0]
    assert isinstance(text, TextContent) and text.text.startswith("## GPU telemetry history from Prometheus")
    done = await anyio.to_thread.run_sync(lambda: run_cli(
        ["telemetry-history", prometheus, "--start", iso(DAY2), "--end", iso(DAY2 + 2 * HOUR), "--json"], base_env()))
    assert done.returncode == 1, done.stderr  # warn: the power cap
    answer = json.loads(done.stdout)
    assert [(f["kind"], f["node"], f["reasons"]) for f in answer["findings"]] == [
        ("throttled", "gpu-n2", ["sw_power_cap"])]


def test_url_from_the_environment(prometheus: str) -> None:
    args = ["telemetry-history", "--start", iso(DAY2), "--end", iso(DAY2 + HOUR), "--json"]
    done = run_cli(args, base_env(GPU_TRIAGE_PROMETHEUS_URL=prometheus))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["url"] == prometheus and result["severity"] == "ok" and len(result["gpus"]) == 4
    refused = run_cli(args, base_env())
    assert refused.returncode == 3 and "no Prometheus URL" in refused.stderr


def test_relative_and_unix_times(prometheus: str) -> None:
    params = TelemetryHistoryInput(url=prometheus, start=str(DAY2), end=str(DAY2 + HOUR), step_s=60)
    result = anyio.run(telemetry_history, params, ToolContext(roots=(REPO,)))
    assert (result.window_start, result.window_end, result.step_s) == (iso(DAY2), iso(DAY2 + HOUR), 60.0)
    recent = anyio.run(telemetry_history, TelemetryHistoryInput(url=prometheus, start="-2h"),
                       ToolContext(roots=(REPO,)))
    assert recent.severity is Severity.unknown  # the history is from January: nothing in the last two hours


def test_triage_plan_ships_it_only_where_prometheus_is_configured() -> None:
    args = ["triage-plan", "--symptom", "rank 3 is slow", "--slurm-job", "4242", "--json"]
    plain = json.loads(run_cli(args, base_env()).stdout)
    assert plain["branch"] == "straggler" and "telemetry_history" not in [s["tool"] for s in plain["steps"]]
    planned = json.loads(run_cli(args, base_env(GPU_TRIAGE_PROMETHEUS_URL="http://127.0.0.1:9090")).stdout)
    [history] = [s for s in planned["steps"] if s["tool"] == "telemetry_history"]
    assert history["arguments"] == {"url": "http://127.0.0.1:9090", "job": "4242"} and history["needs"] == []
    TelemetryHistoryInput.model_validate(history["arguments"])  # a call the tool takes as it is
    # The job named in the user's words (English or Chinese), and the logs given as the step logs to time it by.
    configured = base_env(GPU_TRIAGE_PROMETHEUS_URL="http://127.0.0.1:9090")
    for words, branch in (("job 12345 got slow at 03:10, rank 3 is slow", "straggler"),
                          ("作业 12345 训练变慢", "gpu_utilization_low"),
                          ("Slurm job #12345 hangs at step 1200", "nccl_hang_or_slow")):
        done = run_cli(["triage-plan", "--symptom", words, "--logs", "logs/rank*.log", "--json"], configured)
        plan = json.loads(done.stdout)
        [history] = [s for s in plan["steps"] if s["tool"] == "telemetry_history"]
        assert (plan["branch"], history["arguments"], history["needs"]) == (branch, {
            "url": "http://127.0.0.1:9090", "job": "12345", "step_logs": ["logs/rank*.log"]}, []), words
        TelemetryHistoryInput.model_validate(history["arguments"])
    # A count is not a job id: "job 2 nodes" names none, and the step keeps asking when it began.
    counted = json.loads(run_cli(["triage-plan", "--symptom", "my job 2 nodes is slow, rank 1 is slow", "--json"],
                                 configured).stdout)
    [history] = [s for s in counted["steps"] if s["tool"] == "telemetry_history"]
    assert "job" not in history["arguments"] and history["needs"]


async def test_a_stalled_server_ends_at_the_deadline_and_the_mcp_server_answers_after(prometheus: str) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # the kernel accepts; nothing is ever sent back
    try:
        async with stdio_client(base_env(), "--timeout", "3") as client:
            started = time.monotonic()
            stalled = await client.call_tool("telemetry_history", {
                "url": f"http://127.0.0.1:{listener.getsockname()[1]}", "start": iso(DAY1), "end": iso(DAY1 + HOUR)})
            waited = time.monotonic() - started
            after = await client.call_tool("telemetry_history", {
                "url": prometheus, "start": iso(DAY2), "end": iso(DAY2 + HOUR)})
    finally:
        listener.close()
    assert stalled.is_error is True and waited < 10
    assert "did not answer" in stalled.content[0].text  # type: ignore[union-attr]
    assert after.is_error is False and after.structured_content is not None
    assert after.structured_content["severity"] == "ok" and len(after.structured_content["gpus"]) == 4
