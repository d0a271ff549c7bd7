"""step_change over every slowdown of a job, and the timestamp forms real training logs carry.

A real Prometheus 2.42 (tests/tools/telemetry/history.py) holds a day of its own here (2026-01-15, PROVENANCE.md in
tests/data/telemetry): one GPU throttles thermally from 03:10 until 04:00, another sits at its power cap from 05:40;
the job's steps slow a minute after each, recover after the first. Through the real MCP server: both slowdowns, each
with its start, step, size, recovery and the GPU (node, index, series, time to the step) that changed with it. The
timestamp forms are read from real-log excerpts (tests/data/telemetry/timestamps) to the unix second; elapsed times
(tqdm, OpenPCDet, fairseq, a [HH:MM:SS] since start) are never read as a time of day; a log whose times cannot be
placed leaves step_change unknown with what would decide.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.types import TextContent

from tests.helpers import DATA, base_env, stdio_client
from tests.tools.telemetry.history import Gpu, Prometheus, Scenario, prometheus_available, write_families
from tools.steps import compile_user_format, read_stamped_steps
from tools.steps.stamped import line_times

pytestmark = pytest.mark.anyio

STAMPS = DATA / "telemetry" / "timestamps"
DAY6 = 1768442400  # 2026-01-15T02:00:00Z
HOUR = 3600
THROTTLE_AT, RECOVER_AT = DAY6 + 70 * 60, DAY6 + 2 * HOUR  # 03:10:00 - 04:00:00: tw-n1 GPU 0 hot
CAP_AT = DAY6 + 3 * HOUR + 40 * 60  # 05:40:00: tw-n2 GPU 1 at its power cap
END = DAY6 + 5 * HOUR
BASE_MS, THROTTLED_MS, CAPPED_MS = 800.0, 1200.0, 1100.0


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def unix(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


def _values(gpu: Gpu, concept: str, t: int) -> float | None:
    wobble = (t // 30 + gpu.index) % 3
    hot = (gpu.node, gpu.index) == ("tw-n1", 0) and THROTTLE_AT <= t < RECOVER_AT
    capped = (gpu.node, gpu.index) == ("tw-n2", 1) and t >= CAP_AT
    return {"sm_clock": 1410 if hot else 1500 if capped else 1980, "gpu_util": 96 + wobble,
            "gpu_temp": 89 if hot else 67 - wobble, "power": 520 if hot else 700 if capped else 690 - 5 * wobble,
            "fb_used": 61000, "clock_reasons": 0x60 if hot else 0x4 if capped else 0, "xid": 0}[concept]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert prometheus_available(), "prometheus and promtool are needed: scripts/test.sh installs Debian's package"
    gpus = [Gpu(node, i, f"GPU-{40 + n:02x}{i:02x}5b59-2c1e-1e63-0068-9178c4298abd",
                f"00000000:{0x19 + 0x10 * i:02X}:00.0", hpc_job="6262")
            for n, node in enumerate(("tw-n1", "tw-n2")) for i in range(2)]
    scenario = Scenario(gpus, _values, DAY6, END, concepts=("sm_clock", "gpu_util", "gpu_temp", "power", "fb_used",
                                                            "clock_reasons", "xid"))
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), write_families([scenario]))
    try:
        yield server.url
    finally:
        server.close()


def _step_lines() -> list[tuple[float, int, float]]:
    """(unix time, step, step ms) of a line every 10 steps from 02:05: slower a minute after each GPU's change,
    back to the baseline a minute after the first GPU recovered."""
    lines, t, step = [], float(DAY6 + 300), 0
    while t < END - 60:
        slow = THROTTLE_AT + 60 <= t < RECOVER_AT + 60
        ms = THROTTLED_MS if slow else CAPPED_MS if t >= CAP_AT + 60 else BASE_MS
        t += 10 * ms / 1000
        step += 10
        lines.append((t, step, ms))
    return lines


def _write_logs(folder: Path) -> list[tuple[float, int, float]]:
    """Three ranks, three of the forms real logs carry (tests/data/telemetry/PROVENANCE.md): absl's `I0115
    03:10:08.000000 <tid> file:line]` (no year: the window's), `timestamp=<epoch>` key=value, and a time of day alone
    after a Python logging banner line that dates it."""
    lines = _step_lines()

    def clock(t: float, pattern: str) -> str:
        return time.strftime(pattern, time.gmtime(t)) + f".{int(round(t * 1e6)) % 1_000_000:06d}"

    (folder / "rank0.log").write_text("".join(
        f"{clock(t, 'I%m%d %H:%M:%S')} 140234 train.py:212] step {step} time {ms:.1f} ms loss 2.31\n"
        for t, step, ms in lines))
    (folder / "rank1.log").write_text("".join(
        f"timestamp={t:.3f} step={step} step_time_ms={ms:.1f} loss=2.31\n" for t, step, ms in lines))
    (folder / "rank2.log").write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(DAY6 + 290))},000 INFO "
                                      "starting the run\n" + "".join(
                                          f"{time.strftime('%H:%M:%S', time.gmtime(t))} INFO     step={step} "
                                          f"step_time_ms={ms:.1f} loss=2.31\n" for t, step, ms in lines))
    return lines


async def _call(env_root: Path, arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
    async with stdio_client(base_env(), "--root", str(env_root)) as client:
        called = await client.call_tool("telemetry_history", arguments)
    assert called.is_error is False and called.structured_content is not None, called.content
    text = called.content[0]
    assert isinstance(text, TextContent)
    return called.structured_content, text.text


async def test_two_slowdowns_each_with_the_gpu_that_changed_at_it(prometheus: str, tmp_path: Path) -> None:
    lines = _write_logs(tmp_path)
    first = next(line for line in lines if line[2] == THROTTLED_MS)
    back = next(line for line in lines if line[0] > first[0] and line[2] == BASE_MS)
    second = next(line for line in lines if line[2] == CAPPED_MS)
    data, text = await _call(tmp_path, {"url": prometheus, "start": iso(DAY6), "end": iso(END),
                                        "step_logs": ["rank*.log"], "step_log_utc_offset": "Z"})
    step = data["step_change"]
    assert step["status"] == "slowed" and step["ranks"] == 3 and step["unstamped"] == 0
    slow1, slow2 = step["slowdowns"]
    # The first: 800 -> 1200 ms a minute after tw-n1 GPU 0 got hot, back when it cooled; the top-level fields are it.
    assert (slow1["began"], slow1["step"], slow1["before"], slow1["after"], slow1["share"], slow1["recovered"],
            slow1["gpus"]) == (iso(int(first[0])), first[1], BASE_MS, THROTTLED_MS, 0.5, iso(int(back[0])),
                               ["tw-n1/0"])
    assert (step["began"], step["step"], step["after"], step["recovered"], step["gpus"]) == (
        slow1["began"], slow1["step"], slow1["after"], slow1["recovered"], ["tw-n1/0"])
    # The second, measured against the recovered steps: 800 -> 1100 ms from 05:41, still slow at the end.
    assert (slow2["began"], slow2["step"], slow2["before"], slow2["after"], slow2["recovered"], slow2["on_top"],
            slow2["gpus"]) == (iso(int(second[0])), second[1], BASE_MS, CAPPED_MS, None, False, ["tw-n2/1"])
    found = {(f["slowdown"], f["node"], f["gpu"], f["began"]): f
             for f in data["findings"] if f["kind"] == "step_change"}
    assert set(found) == {(0, "tw-n1", "0", slow1["began"]), (1, "tw-n2", "1", slow2["began"])}
    hot = {(c["measure"], c["metric"], c["direction"], c["before"], c["after"], c["began"])
           for c in found[(0, "tw-n1", "0", slow1["began"])]["changes"]}
    assert ("SM clock", "DCGM_FI_DEV_SM_CLOCK", "fell", 1980.0, 1410.0, iso(THROTTLE_AT)) in hot
    assert ("GPU temperature", "DCGM_FI_DEV_GPU_TEMP", "rose", 66.0, 89.0, iso(THROTTLE_AT)) in hot
    capped = found[(1, "tw-n2", "1", slow2["began"])]
    assert capped["reasons"] == ["sw_power_cap"] and capped["uuid"] == "GPU-29015b59-2c1e-1e63-0068-9178c4298abd"
    assert ("SM clock", "fell", 1980.0, 1500.0, iso(CAP_AT)) in {
        (c["measure"], c["direction"], c["before"], c["after"], c["began"]) for c in capped["changes"]}
    assert found[(0, "tw-n1", "0", slow1["began"])]["reasons"] == ["hw_thermal_slowdown", "sw_thermal_slowdown"]
    # The recovery is on the timeline; the markdown names each slowdown in its table and its sentences.
    assert {"time": iso(int(back[0])), "node": "(job)"}.items() <= next(
        e for e in data["timeline"] if e["event"].startswith("step time back")).items()
    assert "Step-time slowdowns" in text and slow1["began"] in text and slow2["began"] in text
    assert any("slowed 2 times" in sentence for sentence in data["conclusion"])
    # Each rank's form is named where its lines were read.
    rows = {c["input"]: c["detail"] for c in data["coverage"]}
    assert "glog / absl" in rows["rank0.log"] and "unix epoch field" in rows["rank1.log"]
    assert "time of day, date from the file" in rows["rank2.log"]


async def test_a_log_whose_times_cannot_be_placed_leaves_step_change_unknown(prometheus: str, tmp_path: Path) -> None:
    # The real absl excerpt: its times have no year and the window (2026) does not date September 2020 lines; the
    # INFO:tensorflow lines have no time at all. Nothing is guessed: unknown, and what would decide.
    log = tmp_path / "train.log"
    log.write_bytes((STAMPS / "absl_tf_object_detection.log").read_bytes())
    data, _ = await _call(tmp_path, {"url": prometheus, "start": iso(DAY6), "end": iso(DAY6 + HOUR),
                                     "step_logs": ["train.log"],
                                     "step_regex": r"Step (?P<step>\d+) per-step time (?P<step_s>[\d.]+)s"})
    assert (data["severity"], data["verdict"], data["findings"]) == ("unknown", "unknown", [])
    step = data["step_change"]
    assert (step["status"], step["unstamped"], step["slowdowns"]) == ("unknown", 5, [])
    assert data["decides"] is not None and "start/end for their year" in data["decides"]
    [row] = [c for c in data["coverage"] if c["input"] == "train.log"]
    assert row["status"] == "partial" and "3 carry a time of day but no date or year" in row["detail"]


def _times(name: str, window: tuple[str, str] | None = None) -> list[float]:
    span = None if window is None else (unix(window[0]), unix(window[1]))
    times: list[float] = line_times((STAMPS / name).read_bytes(), 0.0, span)[0].tolist()
    return times


def test_each_timestamp_form_of_a_real_log_to_the_second() -> None:
    # absl / glog: no year on the line; the caller's window gives it, and none leaves the time unread.
    path = STAMPS / "absl_tf_object_detection.log"
    fmt = compile_user_format(r"Step (?P<step>\d+) per-step time (?P<step_s>[\d.]+)s")
    [absl] = read_stamped_steps(path, path.name, time.monotonic() + 10, fmt, 0.0,
                                (unix("2020-09-01 00:00:00"), unix("2020-09-30 00:00:00")))
    assert absl.numbers.tolist() == [100, 200, 200, 300, 300] and absl.forms == {"glog / absl": 3}
    assert math.isnan(absl.times[1]) and math.isnan(absl.times[3])  # the INFO:tensorflow copies carry no time
    assert [int(t) for t in absl.times[[0, 2, 4]]] == [unix("2020-09-12 11:40:27"), unix("2020-09-12 11:41:51"),
                                                      unix("2020-09-12 11:43:14")]
    assert math.isclose(absl.times[0] % 1, 0.956218, abs_tol=1e-6)
    [yearless] = read_stamped_steps(path, path.name, time.monotonic() + 10, fmt, 0.0)
    assert np_all_nan(yearless.times) and yearless.undated == 3
    # Slashes, syslog (the window's year), epoch seconds in a field (with and without a fraction).
    assert _times("slashes_mpii_face_gaze.log")[1] == unix("2019-06-24 16:19:46")
    assert _times("syslog_gpu_operator.log", ("2024-12-02 00:00:00", "2024-12-03 00:00:00")) == [
        unix("2024-12-02 11:38:27"), unix("2024-12-02 11:38:46")]
    assert _times("epoch_field_llama_cpp_server.log") == [1720645907.0, 1720645907.0]
    [banner, epoch] = _times("epoch_field_pipedream.log")
    assert math.isnan(banner) and math.isclose(epoch, 1577064742.170)
    # detectron2's `%m/%d %H:%M:%S` (no year): the window's year; without a window the time is not read.
    detectron2 = DATA / "logs" / "steps" / "detectron2.log"
    [d2] = read_stamped_steps(detectron2, detectron2.name, time.monotonic() + 10, None, 0.0,
                              (unix("2019-10-30 00:00:00"), unix("2019-11-02 00:00:00")))
    assert (d2.format, d2.numbers.tolist(), d2.forms) == ("openmmlab", [1259, 1279, 1299], {"MM/DD (detectron2)": 3})
    assert [int(t) for t in d2.times] == [unix("2019-11-01 11:27:04"), unix("2019-11-01 11:27:11"),
                                          unix("2019-11-01 11:27:18")]
    [undated] = read_stamped_steps(detectron2, detectron2.name, time.monotonic() + 10, None, 0.0)
    assert np_all_nan(undated.times) and undated.undated == 3
    # A time of day alone with no date anywhere in the file: no time, never today's date.
    assert np_all_nan(_times("time_of_day_insta.log"))


def test_elapsed_times_are_not_wall_clock() -> None:
    for name in ("elapsed_fastcont.log", "elapsed_tqdm_simplerl.log", "elapsed_fairseq.log"):
        assert np_all_nan(_times(name)), name
    # OpenPCDet: the line's own ISO time, not its "Time cost: 00:04/21:46".
    assert _times("elapsed_openpcdet.log") == [unix("2023-01-05 16:34:37") + 0.748]


def test_a_time_of_day_takes_the_date_written_before_it_and_rolls_over_midnight() -> None:
    text = (b"2026-01-15 23:59:50,000 INFO starting the run\n23:59:58 INFO     step=10 step_time_ms=800.0\n"
            b"00:00:06 INFO     step=20 step_time_ms=800.0\n")
    times, clock = line_times(text, 0.0)
    assert times.tolist() == [unix("2026-01-15 23:59:50"), unix("2026-01-15 23:59:58"), unix("2026-01-16 00:00:06")]
    assert clock.forms == {"ISO 8601 / logging": 1, "time of day, date from the file": 2}


def np_all_nan(values: Any) -> bool:
    return all(math.isnan(v) for v in values)
